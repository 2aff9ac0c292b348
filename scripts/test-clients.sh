#!/usr/bin/env bash
# `make test-clients`: cgdr as its Python clients use it. Creates (or reuses)
# a venv outside the source tree, installs torch, transformers and fla from
# PyPI into it, pip-installs cgdr from this tree, and runs the Python tests
# (python/tests, with torch 2.x) and the client tests (python/tests_clients:
# `pip install .` in a fresh venv, transformers' Qwen3-Next and fla's
# references as oracles, the layer's speed). Figures go to
# $CGDR_CLIENT_FIGURES (default build-clients/figures.json).
#
# CGDR_CLIENTS_VENV  the venv (default ~/.cache/cgdr/venv-clients)
# CGDR_TORCH         torch's requirement (default torch==2.15.0)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${CGDR_CLIENTS_VENV:-$HOME/.cache/cgdr/venv-clients}
TORCH=${CGDR_TORCH:-torch==2.15.0}
CPU_INDEX=https://download.pytorch.org/whl/cpu
OUT=build-clients
mkdir -p "$OUT"
export CGDR_CLIENT_FIGURES=${CGDR_CLIENT_FIGURES:-$PWD/$OUT/figures.json}
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$(date +%s)

# The venv is rebuilt only when what it should hold changes (this stamp).
pins=$(sha256sum python/requirements-clients.txt | cut -c1-16)
stamp="$TORCH $pins py$(/usr/bin/python3 -c 'import sys; print(sys.version_info[:2])')"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$VENV/.cgdr-stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "test-clients: creating $VENV"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # torch: the CPU wheel where its index answers; else PyPI's (a CUDA build:
  # its NVIDIA runtime libraries are needed to load it, triton, a GPU
  # compiler, is not, so torch is installed without it).
  if "$VENV/bin/python" -c "import urllib.request as u; u.urlopen('$CPU_INDEX/torch/', timeout=10)" 2>/dev/null; then
    echo "test-clients: torch from $CPU_INDEX"
    "$VENV/bin/pip" install -q "$TORCH" --index-url "$CPU_INDEX"
  else
    echo "test-clients: torch from PyPI (without triton)"
    "$VENV/bin/pip" install -q packaging
    "$VENV/bin/pip" install -q --no-deps "$TORCH"
    "$VENV/bin/python" - >"$OUT/torch-deps.txt" <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("torch") or []:
    r = Requirement(line)
    if r.name != "triton" and (r.marker is None or r.marker.evaluate({"extra": ""})):
        print(str(r).split(";")[0])
PY
    "$VENV/bin/pip" install -q -r "$OUT/torch-deps.txt"
    echo "test-clients: (pip's complaint that torch's triton is not installed is expected: left out on purpose)"
  fi
  "$VENV/bin/pip" install -q -r python/requirements-clients.txt
  echo "$stamp" >"$VENV/.cgdr-stamp"
else
  echo "test-clients: reusing $VENV"
fi
echo "test-clients: venv ready in $(( $(date +%s) - start )) s"

# cgdr itself, as a user installs it (build-pip/ keeps the build for the next run).
"$VENV/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps .
echo "test-clients: cgdr installed in $(( $(date +%s) - start )) s"

# From outside the tree, so `import cgdr` is the installed package.
cd "$OUT"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ../python/tests ../python/tests_clients "$@"
echo "test-clients: done in $(( $(date +%s) - start )) s"
