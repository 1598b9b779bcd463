#!/usr/bin/env bash
# Installs the Debian packages shardtrain needs to build and test, when any is missing.
# Idempotent and quiet when everything is there; runs apt-get update at most once; uses sudo when
# not root. The CUDA toolkit is not installed here: CMake builds CPU-only without it.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache pkg-config git
  libopenmpi-dev openmpi-bin
  libeigen3-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  python3
)
# Extra packages for the optional parts: the SLURM test, plots and the built-in corpus.
if [[ "${SHARDTRAIN_SETUP_EXTRAS:-1}" == "1" ]]; then
  PACKAGES+=(slurm-wlm munge gnuplot-nox)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO="sudo"
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
