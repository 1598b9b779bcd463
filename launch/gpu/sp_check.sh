#!/usr/bin/env bash
# Issue 34 (Deliver 1) on 2 GPUs: --sequence-parallel 1 against plain --tp 2 (NCCL), the same
# model, data and seed. Builds nothing: BUILD must hold a built `shardtrain` (CUDA build).
#   usage: launch/gpu/sp_check.sh OUTDIR
# For fp32 and bf16: GPT (12 × 768, T 1024, B 8) and Llama (8 × 1024, 16 heads over 8 key/value,
# T 1024, B 8) under tp 2 with sequence parallelism off and on, STEPS steps on random tokens
# (launch/gpu/tokens.sh). OUTDIR/summary.txt: per pair the largest relative loss difference over
# the steps (fp32: expect ≤ 1e-4 — another summation order of the norms' weight gradients, as the
# CPU layouts test; bf16 ≤ 1e-2), the activation peak (mem_act_peak, rank 0) with and without
# (expect SP lower: the planner's closed form, `shardtrain plan ... --sequence-parallel 1`) and
# the median step_ms of each.
# Env: BUILD (build), DEVICE (cuda; cpu with TINY=1 checks the command lines at tiny sizes on 2
# CPU ranks), STEPS (20), BUDGET_S (570), COMM (mpi: both ranks on one GPU through the MPI
# backend, launched by plain mpirun — the one-GPU machine; step times then measure that backend).
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,14p "$0"; exit 2; }
OUT=$1
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-20}
BUDGET_S=${BUDGET_S:-570}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ST="$(pwd)/$BUILD/shardtrain"
[ -x "$ST" ] || { echo "sp_check: no $ST (build the shardtrain target first)"; exit 1; }
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
cap() { local c=$(( BUDGET_S - SECONDS )); [ "$1" -lt "$c" ] && c=$1; echo $(( c > 5 ? c : 5 )); }
: > "$OUT/summary.txt"
note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}  device $DEVICE"
if [ "${TINY:-0}" = 1 ]; then
  GPT="--model gpt --layers 2 --d-model 64 --heads 4 --seq-len 32 --vocab 256"
  LLAMA="--model llama --layers 2 --d-model 64 --heads 4 --kv-heads 2 --seq-len 32 --vocab 256"
  B=2; T=32; V=256
else
  GPT="--model gpt --layers 12 --d-model 768 --heads 12 --seq-len 1024 --vocab 50304"
  LLAMA="--model llama --layers 8 --d-model 1024 --heads 16 --kv-heads 8 --seq-len 1024 --vocab 32000"
  B=8; T=1024; V=32000
fi
if [ "$DEVICE" = cuda ] && [ -z "${COMM:-}" ]; then MPI="launch/mpirun.sh -n 2 --gpus --"; else MPI="mpirun -np 2 --oversubscribe --allow-run-as-root"; fi
source launch/gpu/tokens.sh
tok="$OUT/tokens.bin"
[ -f "$tok" ] || tokens "$tok" "$V" $(( STEPS * B * T + 1 ))
summary() {  # A.jsonl B.jsonl → max rel loss diff, act peaks, median step ms
  python3 - "$@" <<'PY'
import json, statistics, sys
def rows(p): return [json.loads(l) for l in open(p) if l.strip().startswith("{") and '"loss"' in l]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
d = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b)) if a and b else float("nan")
ms = lambda r: statistics.median(x.get("step_ms", float("nan")) for x in r[len(r) // 4:]) if r else float("nan")
mib = lambda r: max(x.get("mem_act_peak", 0) for x in r) / 2**20 if r else float("nan")
print(f"steps {len(a)}/{len(b)}  max rel loss diff {d:.3g}  act peak MiB {mib(a):.1f} -> {mib(b):.1f}  step ms {ms(a):.1f} -> {ms(b):.1f}")
PY
}
for model in gpt llama; do
  for p in fp32 bf16; do
    flags=$GPT; [ $model = llama ] && flags=$LLAMA
    for sp in 0 1; do
      m="$OUT/${model}_${p}_sp$sp.jsonl"; rm -f "$m"
      timeout "$(cap 200)" $MPI "$ST" train $flags --device "$DEVICE" --data "$tok" --precision $p --tp 2 ${COMM:+--comm $COMM} \
        --sequence-parallel $sp --dropout 0 --micro-batch $B --steps "$STEPS" --lr 3e-4 --log-every 1000 \
        --metrics "$m" > "$OUT/${model}_${p}_sp$sp.log" 2>&1 || note "$model $p sp $sp: exit $? (see its log)"
    done
    note "$model $p tp 2, sequence parallel 0 -> 1: $(summary "$OUT/${model}_${p}_sp0.jsonl" "$OUT/${model}_${p}_sp1.jsonl")"
  done
done
