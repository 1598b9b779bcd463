#!/usr/bin/env bash
# Ranks started with different options stop at once (runtime/setup/run_fingerprint.h): two ranks
# started as `mpirun -np 1 … --lr 0.001 : -np 1 … --lr 0.002` (then --d-model, --seed) end with a
# non-zero exit within a few seconds and the line naming the key and both ranks' values. The
# same options on both sides train to exit 0 (the fingerprint sees no false difference). Ranks
# given the same --data path that holds different files (each rank started in its own directory,
# two token files of one size: 1024 header bytes + 30000 tokens) stop the same way, naming the ranks and what each file is; two
# equal copies train.
# Usage: mismatched_ranks.sh MPIEXEC SHARDTRAIN
set -u
MPIEXEC="$1"
BIN="$2"
export SHARDTRAIN_PROGRESS=0
COMMON=(train --layers 1 --d-model 32 --heads 2 --seq-len 16 --micro-batch 2 --steps 2)
fail=0

# run_pair "KEY" "VALUE0" "VALUE1" "EXPECTED LINE" (empty: expect success)
run_pair() {
  local key="$1" v0="$2" v1="$3" want="$4"
  local t0 t1 out rc
  t0=$(date +%s%N)
  out=$(timeout 120 "$MPIEXEC" --oversubscribe --allow-run-as-root -np 1 "$BIN" "${COMMON[@]}" "--$key" "$v0" : \
        -np 1 "$BIN" "${COMMON[@]}" "--$key" "$v1" 2>&1)
  rc=$?
  t1=$(date +%s%N)
  local ms=$(( (t1 - t0) / 1000000 ))
  echo "--- --$key $v0 vs $v1: rc=$rc in ${ms} ms"
  echo "$out" | grep -E "shardtrain: error|step [0-9]+/" | head -5
  if [[ -z "$want" ]]; then
    [[ $rc -eq 0 ]] || { echo "FAIL: equal options exited $rc"; echo "$out"; fail=1; }
    return
  fi
  [[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: --$key mismatch: exit $rc"; fail=1; }
  # 10 s: MPI start-up and abort take ~1 s here; a rank stuck in a mismatched collective would
  # take the 300 s deadline
  (( ms < 10000 )) || { echo "FAIL: --$key mismatch took ${ms} ms"; fail=1; }
  echo "$out" | grep -qxE "\[rank [01]\] shardtrain: error: $want" ||
    { echo "FAIL: no line 'ranks disagree on $key ...'"; echo "$out"; fail=1; }
}

run_pair lr 0.001 0.002 "ranks disagree on lr: rank 0 0\.001, rank 1 0\.002 \(every rank must be started with the same options\)"
run_pair d-model 32 64 "ranks disagree on d-model: rank 0 32, rank 1 64 \(every rank must be started with the same options\)"
run_pair seed 1 7 "ranks disagree on seed: rank 0 1, rank 1 7 \(every rank must be started with the same options\)"
run_pair lr 0.001 0.001 ""

# --data tokens.bin, relative: rank 0 runs in A/, rank 1 in B/ (node-local copies that differ)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/A" "$WORK/B" "$WORK/C"
yes "abcdefgh" | head -c 30000 > "$WORK/A/t.txt"
yes "hgfedcba" | head -c 30000 > "$WORK/B/t.txt"
for d in A B; do (cd "$WORK/$d" && "$BIN" prepare --text t.txt --out tokens.bin >/dev/null) || fail=1; done
cp "$WORK/A/tokens.bin" "$WORK/C/tokens.bin"
run_dirs() {  # run_dirs DIR0 DIR1
  timeout 120 "$MPIEXEC" --oversubscribe --allow-run-as-root -np 1 -wdir "$1" "$BIN" "${COMMON[@]}" --data tokens.bin : \
    -np 1 -wdir "$2" "$BIN" "${COMMON[@]}" --data tokens.bin 2>&1
}
out=$(run_dirs "$WORK/A" "$WORK/B")
rc=$?
echo "--- --data tokens.bin, different files: rc=$rc"
echo "$out" | grep "shardtrain: error" | head -2
[[ $rc -ne 0 && $rc -ne 124 ]] || { echo "FAIL: different data files: exit $rc"; fail=1; }
echo "$out" | grep -qxE "\[rank [01]\] shardtrain: error: ranks disagree on data identity: rank 0 61024 bytes, sample [0-9a-f]{16}, rank 1 61024 bytes, sample [0-9a-f]{16} \(the same path holds different files on these ranks: every rank must read the same data\)" ||
  { echo "FAIL: no line 'ranks disagree on data identity ...'"; echo "$out"; fail=1; }
out=$(run_dirs "$WORK/A" "$WORK/C")
rc=$?
echo "--- --data tokens.bin, equal copies: rc=$rc"
[[ $rc -eq 0 ]] || { echo "FAIL: equal copies exited $rc"; echo "$out"; fail=1; }
[[ $fail -eq 0 ]] && echo PASS
exit $fail
