#!/usr/bin/env bash
# `cmake --install` of the build tree into a temporary prefix, then docs/example (a separate
# CMake project: find_package(shardtrain), links shardtrain::st_models + st_runtime) configured
# and built against that prefix, and run: its tiny GPT must learn (exit 0 = loss more than halved),
# and docs/library.md's distributed trainer from a program (train_parallel) under mpirun -np 2
# must train data parallel and learn too.
# usage: install_test.sh CMAKE BUILD_DIR SOURCE_DIR MPIEXEC
set -euo pipefail
CMAKE="$1" BUILD="$2" SRC="$3" MPIEXEC="$4"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
"$CMAKE" --install "$BUILD" --prefix "$D/prefix" >/dev/null
for f in lib/cmake/shardtrain/shardtrainConfig.cmake lib/cmake/shardtrain/shardtrainConfigVersion.cmake \
         lib/cmake/shardtrain/shardtrainTargets.cmake include/shardtrain/runtime/setup/model_registry.h \
         include/shardtrain/tensor/tensor.h bin/shardtrain share/shardtrain/configs/demo.yaml; do
  [[ -e "$D/prefix/$f" ]] || { echo "install_test: $f was not installed"; exit 1; }
done
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
"$CMAKE" -S "$SRC/docs/example" -B "$D/example" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$D/prefix" \
  "${launcher[@]}" >"$D/configure.log" 2>&1 || { cat "$D/configure.log"; exit 1; }
grep -q "shardtrain 0\." "$D/configure.log" || { echo "install_test: version line missing"; cat "$D/configure.log"; exit 1; }
"$CMAKE" --build "$D/example" >"$D/build.log" 2>&1 || { cat "$D/build.log"; exit 1; }
"$D/example/tiny_gpt"
out=$("$MPIEXEC" -np 2 --oversubscribe --allow-run-as-root "$D/example/train_parallel" "$D/run" 2>&1) ||
  { echo "$out"; echo "install_test: train_parallel under mpirun -np 2 failed"; exit 1; }
echo "$out"
grep -q "^layout: world 2 = dp 2 x tp 1 x pp 1" <<<"$out" || { echo "install_test: train_parallel did not run data parallel over 2 ranks"; exit 1; }
"$D/prefix/bin/shardtrain" info >/dev/null
echo "install test passed"
