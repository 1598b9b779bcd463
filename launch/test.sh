#!/usr/bin/env bash
# Set-up, build and the whole CPU test suite (labels cpu, mpi, slurm). This is the README's
# test command and what CI runs. Usage: launch/test.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build}"
launch/setup.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
# MPI tests oversubscribe the cores; run one test at a time so ranks do not starve each other.
ctest --test-dir "$BUILD" --output-on-failure -L 'cpu|mpi|slurm'
