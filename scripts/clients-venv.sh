#!/usr/bin/env bash
# Makes (or reuses) the venv of cgdr's Python clients: torch 2.x, transformers
# and fla-core from PyPI (python/requirements-clients.txt), for `make
# test-clients` and `make bench-kda` (bench/compare_kda.py). Prints the
# venv's path on its last line; everything else goes to stderr.
#
# CGDR_CLIENTS_VENV  the venv (default ~/.cache/cgdr/venv-clients)
# CGDR_TORCH         torch's requirement (default torch==2.15.0)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv-lib.sh
VENV=${CGDR_CLIENTS_VENV:-$HOME/.cache/cgdr/venv-clients}
TORCH=${CGDR_TORCH:-torch==2.15.0}
OUT=build-clients
mkdir -p "$OUT"
start=$(date +%s)

# The venv is rebuilt only when what it should hold changes (this stamp).
pins=$(sha256sum python/requirements-clients.txt | cut -c1-16)
stamp="$TORCH $pins py$(/usr/bin/python3 -c 'import sys; print(sys.version_info[:2])')"
install_clients() {
  venv_install_torch "$1" "$TORCH" "$OUT/torch-deps.txt"
  "$1/bin/pip" install -q -r python/requirements-clients.txt
}
venv_ensure clients-venv "$VENV" "$stamp" install_clients
echo "clients-venv: ready in $(( $(date +%s) - start )) s" >&2
echo "$VENV"
