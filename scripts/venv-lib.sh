# Shared by the scripts that make cgdr's client venvs (sourced, not run).
# Each venv lives under ~/.cache/cgdr and is rebuilt only when its stamp (what
# it should hold) changes.

CPU_INDEX=https://download.pytorch.org/whl/cpu
export PIP_DISABLE_PIP_VERSION_CHECK=1

# venv_is_current VENV STAMP: the venv exists and was made for STAMP.
venv_is_current() {
  [ -x "$1/bin/python" ] && [ "$(cat "$1/.cgdr-stamp" 2>/dev/null)" = "$2" ]
}

# venv_ensure NAME VENV STAMP INSTALL: reuses VENV where it was made for
# STAMP; else makes it afresh, runs the function INSTALL with VENV as its
# argument, and stamps it. Messages go to stderr, naming NAME.
venv_ensure() {
  local name=$1 venv=$2 stamp=$3 install=$4
  if venv_is_current "$venv" "$stamp"; then
    echo "$name: reusing $venv" >&2
  else
    echo "$name: creating $venv" >&2
    venv_create "$venv" >&2
    "$install" "$venv" >&2
    echo "$stamp" >"$venv/.cgdr-stamp"
  fi
}

# venv_create VENV: a fresh venv from Debian's Python, with a current pip.
venv_create() {
  rm -rf "$1"
  /usr/bin/python3 -m venv "$1"
  "$1/bin/pip" install -q --upgrade pip packaging
}

# venv_install_torch VENV REQUIREMENT SCRATCH: torch's CPU wheel where its
# index answers; else PyPI's (a CUDA build: its NVIDIA runtime libraries are
# needed to load it; triton, a GPU compiler, is not, so torch is installed
# without it). SCRATCH holds the list of torch's requirements.
venv_install_torch() {
  local venv=$1 req=$2 scratch=$3
  if "$venv/bin/python" -c "import urllib.request as u; u.urlopen('$CPU_INDEX/torch/', timeout=10)" 2>/dev/null; then
    echo "venv: $req from $CPU_INDEX"
    "$venv/bin/pip" install -q "$req" --index-url "$CPU_INDEX"
  else
    echo "venv: $req from PyPI (without triton)"
    "$venv/bin/pip" install -q --no-deps "$req"
    venv_requirements "$venv" torch 'triton' >"$scratch"
    "$venv/bin/pip" install -q -r "$scratch"
    echo "venv: (pip's complaint that torch's triton is not installed is expected: left out on purpose)"
  fi
}

# venv_requirements VENV DIST EXCLUDE_REGEX: the installed distribution's
# requirements that apply on this machine (markers evaluated, no extras),
# less the names matching EXCLUDE_REGEX, one per line without markers.
venv_requirements() {
  "$1/bin/python" - "$2" "$3" <<'PY'
import importlib.metadata as md
import re
import sys
from packaging.requirements import Requirement
dist, exclude = sys.argv[1], re.compile(sys.argv[2])
for line in md.requires(dist) or []:
    r = Requirement(line)
    if exclude.fullmatch(r.name.lower()):
        continue
    if r.marker is None or r.marker.evaluate({"extra": ""}):
        r.marker = None
        print(r)
PY
}
