#!/usr/bin/env bash
# Set-up, build and the whole CPU test suite (labels cpu, mpi, slurm). This is the README's
# test command and what CI runs. Usage: launch/test.sh [build-dir]
#
# launch/test.sh --sanitize [build-dir]  (CI runs it after the plain suite): a CPU-only build
# with AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover: the first report
# fails the test) in build-asan, then the cpu label and the mpi label's library-level tests
# (docs/testing.md: what it costs and what it leaves to the plain pass).
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=0
if [[ "${1:-}" == "--sanitize" ]]; then
  SANITIZE=1
  shift
fi
launch/setup.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
if [[ $SANITIZE -eq 0 ]]; then
  BUILD="${1:-build}"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j"$(nproc)"
  # Two tests at a time on 2 cores: a test that starts n ranks declares PROCESSORS n
  # (tests/CMakeLists.txt), so ctest runs it alone when n fills the cores and ranks never starve
  # each other; one-process tests pair up (docs/testing.md, "What CI costs").
  ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" -L 'cpu|mpi|slurm'
  exit 0
fi

BUILD="${1:-build-asan}"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1, as the sanitizers recommend: tolerable speed, and the reports keep their frames.
# A unity build (16 sources a translation unit): the same code in half the compile time. Only
# here: the plain pass above builds file by file as a user does, so a missing #include that a
# unity batch would hide still fails CI there (docs/testing.md, "What CI costs").
# No benchmarks (no test runs one; the plain pass compiles them).
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSHARDTRAIN_CUDA=OFF -DSHARDTRAIN_BENCHMARKS=OFF "-DCMAKE_CXX_FLAGS=$SAN" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1 -DNDEBUG" "-DCMAKE_EXE_LINKER_FLAGS=$SAN" \
  "-DCMAKE_SHARED_LINKER_FLAGS=$SAN" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
# Every report ends the process with exit 1, failing its test. The one-process tests also check
# leaks, with Open MPI's own start-up allocations suppressed (tests/lsan.supp; matching them
# needs the full unwinder). Under mpirun leaks are not checked: the full unwinder makes the
# layout tests 3.4x slower (875 s instead of 254 s for the label).
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:exitcode=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
# test_launch_install builds a consumer of the installed (instrumented) libraries without the
# sanitizer flags, which cannot link; the plain run covers the package
# sanitizers; label source-only: tests that run no binary of the build, which the plain pass ran.
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=1:fast_unwind_on_malloc=0" \
  ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" -L cpu -LE source-only -E '^test_launch_install$'
# The mpi label without three kinds of test whose property the plain pass holds and whose code the
# rest of the label runs under the sanitizers: the command-line flows under mpirun (test_launch_*:
# shardtrain's multi-rank runs drive the runtime the library-level tests drive; the one-process
# flows stay in the cpu label above, so launch/ is still sanitized), the strict-p2p twins of the
# layout, generation and pipeline-source tests (the same runtime code with synchronous sends; the
# backend's strict path keeps its own twins, test_comm_np*_strict), and test_pipeline_rss (it
# measures resident memory, which ASan's shadow and quarantine make another quantity). They were
# ~1 175 s of the label's ~1 770 s of test time (docs/testing.md, "What CI costs").
SAN_SKIP='^test_launch_|^test_(layouts|generation_mpi|pipeline_source)_np[0-9]+_strict$|^test_pipeline_rss$'
ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --test-dir "$BUILD" --output-on-failure -j"$(nproc)" -L mpi \
  -E "$SAN_SKIP"
