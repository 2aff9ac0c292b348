#!/usr/bin/env bash
# Installs what cgdr needs on Debian 12 (run as root). Idempotent: installs only what is missing.
set -euo pipefail
PKGS=(build-essential cmake pkg-config libhwy-dev libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev pybind11-dev python3 python3-dev python3-venv python3-numpy python3-pytest python3-torch
      clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${missing[@]}"
fi
