#!/usr/bin/env bash
# The README's main command: set-up, build, the default training job, a sample and plots.
#
#   launch/demo.sh [extra train flags, e.g. --steps 50]     (every flag: build/shardtrain train --help)
#   launch/demo.sh --help                                   this text; runs and deletes nothing
#
# 1. launch/setup.sh checks for what the build needs and apt-get installs only what is missing
#    (root or sudo then); without package network it goes on when all that is needed is there.
# 2. Builds build/shardtrain (Release, CUDA when the toolkit is found).
# 3. Trains launch/configs/demo.yaml (a small byte-level GPT on the built-in corpus: Debian's
#    license texts) with 2 MPI ranks of data parallelism through launch/mpirun.sh: on the CPU, or
#    on the GPU when this build has CUDA and a device is visible (--device cuda), the sequences
#    in a shuffled order (--shuffle 1). Rank 0 prints a step line every 10 steps (with a progress
#    bar below them on a terminal). Output: runs/demo/ (metrics.jsonl, checkpoints/, trace.json,
#    plots/), replaced on each run; README.md's Usage goes on from there.
# 4. Prints a sample from the last checkpoint (`shardtrain sample`) and writes PNG plots of the
#    metrics (launch/plot.sh) when gnuplot is installed.
# Environment: SHARDTRAIN_BUILD (build dir, default build), SHARDTRAIN_NP (ranks, default 2),
# SHARDTRAIN_DEVICE (cpu|cuda, default: detected), SHARDTRAIN_SETUP_EXTRAS (launch/setup.sh's
# optional extras, default "plots ccache").
set -euo pipefail
cd "$(dirname "$0")/.."
for a in "$@"; do
  if [[ "$a" == "-h" || "$a" == "--help" ]]; then sed -n '2,/^set -euo/p' launch/demo.sh | sed '$d; s/^# \{0,1\}//'; exit 0; fi
done

SHARDTRAIN_SETUP_EXTRAS="${SHARDTRAIN_SETUP_EXTRAS:-plots ccache}" launch/setup.sh
BUILD="${SHARDTRAIN_BUILD:-build}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
echo "== build ($BUILD)"
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >"$BUILD/demo-configure.log" 2>&1 ||
  { tail -n 40 "$BUILD/demo-configure.log"; echo "demo: cmake configure failed (full log: $BUILD/demo-configure.log)" >&2; exit 1; }
cmake --build "$BUILD" -j"$(nproc)" --target shardtrain >"$BUILD/demo-build.log" 2>&1 ||
  { tail -n 40 "$BUILD/demo-build.log"; echo "demo: build failed (full log: $BUILD/demo-build.log)" >&2; exit 1; }
BIN="$BUILD/shardtrain"

device="${SHARDTRAIN_DEVICE:-}"
if [[ -z "$device" ]]; then
  device=cpu
  if "$BIN" info 2>/dev/null | grep -q '^cuda available: yes'; then device=cuda; fi
fi
NP="${SHARDTRAIN_NP:-2}"
RUN=runs/demo
if [[ -e "$RUN" ]]; then  # each demo starts anew: say what goes (another run of yours: --run-dir runs/NAME)
  echo "== removing the previous demo run $RUN/ ($(find "$RUN" -path "$RUN/checkpoints/step_*" -maxdepth 2 -type d | wc -l) checkpoints, its metrics and plots)"
fi
rm -rf "$RUN"
mkdir -p "$RUN"

echo "== train: $NP ranks on $device (launch/configs/demo.yaml)"
start=$(date +%s)
SHARDTRAIN_BIN="$BIN" launch/mpirun.sh -n "$NP" -- shardtrain train --config launch/configs/demo.yaml \
  --device "$device" --checkpoint-dir "$RUN/checkpoints" --metrics "$RUN/metrics.jsonl" --trace "$RUN/trace.json" "$@"
echo "== trained in $(( $(date +%s) - start )) s"

python3 - "$RUN/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
first, last = rows[0], rows[-1]
tail = rows[-10:]
avg = sum(r["loss"] for r in tail) / len(tail)
print(f"loss: step {first['step']} {first['loss']:.3f} -> step {last['step']} {last['loss']:.3f} "
      f"(mean of the last {len(tail)}: {avg:.3f}; uniform over 256 bytes = 5.545)")
PY

echo "== sample (shardtrain sample --checkpoint $RUN/checkpoints --prompt 'The ' --tokens 60: the model sees 64 tokens)"
"$BIN" sample --checkpoint "$RUN/checkpoints" --prompt "The " --tokens 60 --temperature 0.8 --top-k 40 --seed 1 --device "$device"

if command -v gnuplot >/dev/null; then
  launch/plot.sh --metrics "$RUN/metrics.jsonl" --out "$RUN/plots" --title "demo"
fi
echo "== done: $RUN/metrics.jsonl, $RUN/checkpoints, $RUN/trace.json (open in ui.perfetto.dev), $RUN/plots"
