#!/usr/bin/env bash
# Per-kernel time of GPT-2 124M training steps on the lent GPU (no nsys there): build
# bench_gpt_train, run it under Nsight Compute with one metric (gpu__time_duration, clocks left
# alone), and sum the time per kernel name over the profiled steps. Logs go to $OUT.
#   usage: launch/gpu/profile_step.sh            (B, PREC, STEPS as in run_train_suite.sh)
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu_out}
BUILD=${BUILD:-build}
B=${B:-16}
PREC=${PREC:-fp16}
STEPS=${STEPS:-1}
mkdir -p "$OUT"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  { cmake -S . -B "$BUILD" -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$BUILD" -j"${JOBS:-16}" --target bench_gpt_train; } > "$OUT/profile_build.log" 2>&1 ||
    { tail -30 "$OUT/profile_build.log"; exit 1; }
fi
timeout "${CAP_S:-240}" ncu --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  "$BUILD/tests/bench/bench_gpt_train" --micro-batch "$B" --precision "$PREC" --warmup 1 --steps "$STEPS" \
  > "$OUT/ncu_raw.csv" 2> "$OUT/ncu.err"
echo "ncu rc=$?"
python3 - "$OUT/ncu_raw.csv" <<'PY' | tee "$OUT/profile.txt"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[hdr]; k = h.index("Kernel Name"); t = h.index("gpu__time_duration.sum")
data = rows[hdr + 2:]  # skip the units row
# the last step: from the last embedding forward (a step's first kernel) to the end
tot = collections.defaultdict(float); cnt = collections.Counter()
starts = [i for i, r in enumerate(data) if "embedding_fwd_kernel" in r[k]]
keep = data[starts[-1]:] if starts else data
for r in keep:
    try: v = float(r[t].replace(",", ""))
    except ValueError: continue
    name = r[k].split("(")[0][:90]
    tot[name] += v; cnt[name] += 1
unit = h and rows[hdr + 1][t]
s = sum(tot.values())
print(f"{len(keep)} kernels, total {s:.0f} {unit}")
for name, v in sorted(tot.items(), key=lambda x: -x[1])[:45]:
    print(f"{v:12.0f} {100*v/s:5.1f}% {cnt[name]:6d}  {name}")
PY
