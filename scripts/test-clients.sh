#!/usr/bin/env bash
# `make test-clients`: cgdr as its Python clients use it. Creates (or reuses)
# a venv outside the source tree, installs torch, transformers and fla from
# PyPI into it, pip-installs cgdr from this tree, and runs the Python tests
# (python/tests, with torch 2.x) and the client tests (python/tests_clients:
# `pip install .` in a fresh venv, transformers' Qwen3-Next and fla's
# references as oracles, the layer's speed). Figures go to
# $CGDR_CLIENT_FIGURES (default build-clients/figures.json).
#
# CGDR_CLIENTS_VENV, CGDR_TORCH: as scripts/clients-venv.sh takes them.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build-clients
mkdir -p "$OUT"
export CGDR_CLIENT_FIGURES=${CGDR_CLIENT_FIGURES:-$PWD/$OUT/figures.json}
start=$(date +%s)
VENV=$(bash scripts/clients-venv.sh)
echo "test-clients: venv ready in $(( $(date +%s) - start )) s"

# cgdr itself, as a user installs it (build-pip/ keeps the build for the next run).
"$VENV/bin/pip" install -q --no-build-isolation --force-reinstall --no-deps .
echo "test-clients: cgdr installed in $(( $(date +%s) - start )) s"

# From outside the tree, so `import cgdr` is the installed package.
cd "$OUT"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ../python/tests ../python/tests_clients "$@"
echo "test-clients: done in $(( $(date +%s) - start )) s"
