#!/usr/bin/env bash
# --async-checkpoint 1 under mpirun -np 2 (dp 2): a checkpoint writer that fails on rank 1
# (SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL=1, docs/testing.md) ends the job — exit ≠ 0, every rank
# gone (the test's timeout would catch a hang), one error line naming rank 1 and the cause — and
# the checkpoint before it stays the newest. Usage: async_checkpoint_fault.sh MPIEXEC SHARDTRAIN
set -u
MPIEXEC="$1"
BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
run=("$MPIEXEC" -np 2 --oversubscribe --allow-run-as-root "$BIN" train --layers 1 --dp 2 --checkpoint-dir "$D/ck"
     --checkpoint-every 1 --async-checkpoint 1 --progress 0)
"${run[@]}" --steps 2 > "$D/first.txt" 2>&1 || { cat "$D/first.txt"; echo "FAIL: the run without the seam failed"; exit 1; }
grep -q "^checkpoints: 2 asynchronous" "$D/first.txt" || { cat "$D/first.txt"; echo "FAIL: no 'checkpoints: 2 asynchronous' line"; exit 1; }
out=$(SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL=1 timeout 100 "${run[@]}" --steps 4 --resume 1 2>&1)
rc=$?
echo "$out"
echo "rc=$rc"
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: exit code $rc (124: a rank hung)"; exit 1; }
good="shardtrain: error: asynchronous checkpoint of step 3: the writer of rank 1 failed: test seam SHARDTRAIN_TEST_CHECKPOINT_WRITER_FAIL: rank 1's writer stops after the model part of step 3$"
n_good=$(echo "$out" | grep -c "$good")
n_err=$(echo "$out" | grep -c "shardtrain: error:")
[[ $n_good -eq 1 && $n_err -eq 1 ]] || { echo "FAIL: $n_good lines naming rank 1's cause and $n_err error lines, want 1 and 1"; exit 1; }
newest=$(ls "$D/ck" | grep '^step_' | sort | tail -1)
[[ $newest == step_00000002 ]] || { ls -a "$D/ck"; echo "FAIL: the newest checkpoint is $newest, want step_00000002"; exit 1; }
echo PASS
