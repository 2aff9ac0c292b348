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
source scripts/venv-lib.sh
VENV=${CGDR_CLIENTS_VENV:-$HOME/.cache/cgdr/venv-clients}
TORCH=${CGDR_TORCH:-torch==2.15.0}
OUT=build-clients
mkdir -p "$OUT"
export CGDR_CLIENT_FIGURES=${CGDR_CLIENT_FIGURES:-$PWD/$OUT/figures.json}
start=$(date +%s)

# The venv is rebuilt only when what it should hold changes (this stamp).
pins=$(sha256sum python/requirements-clients.txt | cut -c1-16)
stamp="$TORCH $pins py$(/usr/bin/python3 -c 'import sys; print(sys.version_info[:2])')"
if venv_is_current "$VENV" "$stamp"; then
  echo "test-clients: reusing $VENV"
else
  echo "test-clients: creating $VENV"
  venv_create "$VENV"
  venv_install_torch "$VENV" "$TORCH" "$OUT/torch-deps.txt"
  "$VENV/bin/pip" install -q -r python/requirements-clients.txt
  echo "$stamp" >"$VENV/.cgdr-stamp"
fi
echo "test-clients: venv ready in $(( $(date +%s) - start )) s"

# cgdr itself, as a user installs it (build-pip/ keeps the build for the next run).
"$VENV/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps .
echo "test-clients: cgdr installed in $(( $(date +%s) - start )) s"

# From outside the tree, so `import cgdr` is the installed package.
cd "$OUT"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ../python/tests ../python/tests_clients "$@"
echo "test-clients: done in $(( $(date +%s) - start )) s"
