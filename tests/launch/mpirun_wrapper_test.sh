#!/usr/bin/env bash
# launch/mpirun.sh: N CPU ranks of `shardtrain` (resolved through SHARDTRAIN_BIN), each printing
# `info` once; a 2-rank training run whose layout line says dp 2; usage errors exit 2 with a cause.
# usage: mpirun_wrapper_test.sh REPO_ROOT SHARDTRAIN_BIN
set -euo pipefail
REPO="$1"
export SHARDTRAIN_BIN="$2"
W="$REPO/launch/mpirun.sh"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT

n=$("$W" -n 3 -- shardtrain info | grep -c '^shardtrain ')
[[ "$n" == 3 ]] || { echo "expected 3 ranks to print info, got $n"; exit 1; }

out=$("$W" -n 2 -- shardtrain train --model gpt --layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 \
      --steps 2 --progress 0 --metrics "$D/m.jsonl" 2>&1)
echo "$out" | grep -q 'dp 2' || { echo "2-rank run did not form dp 2:"; echo "$out"; exit 1; }
[[ $(grep -c . "$D/m.jsonl") == 2 ]] || { echo "metrics: expected 2 lines"; cat "$D/m.jsonl"; exit 1; }

set +e
err=$("$W" -n 2 2>&1); rc=$?
[[ $rc == 2 && "$err" == *"no command"* ]] || { echo "no command: rc $rc, '$err'"; exit 1; }
err=$("$W" -n zero -- shardtrain info 2>&1); rc=$?
[[ $rc == 2 && "$err" == *"positive count"* ]] || { echo "bad -n: rc $rc, '$err'"; exit 1; }
if ! command -v nvidia-smi >/dev/null; then
  err=$("$W" --gpus -- shardtrain info 2>&1); rc=$?
  [[ $rc == 2 && "$err" == *"no GPU"* ]] || { echo "--gpus without GPUs: rc $rc, '$err'"; exit 1; }
fi
err=$(SHARDTRAIN_BIN=/nonexistent/shardtrain "$W" -n 1 -- shardtrain info 2>&1); rc=$?
[[ $rc == 2 && "$err" == *"/nonexistent/shardtrain not found"* ]] || { echo "missing binary: rc $rc, '$err'"; exit 1; }
echo "mpirun wrapper test passed"
