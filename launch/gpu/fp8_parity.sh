#!/usr/bin/env bash
# Issue 32 on one GPU: --precision fp8 against bf16 for GPT-2 124M (T 1024), in two stages.
# Builds nothing: BUILD must hold a built `shardtrain` (CUDA build, sm_90 for FP8 tensor cores).
#   usage: launch/gpu/fp8_parity.sh OUTDIR [speed] [parity]      (default: both)
# Stages:
#   speed   bf16 and fp8 at B 16 and B 64 (CUDA graph, the default), WARMUP + STEPS steps each on
#           random tokens (launch/gpu/tokens.sh); tokens/s = B·T / the median step_ms of the timed
#           steps → OUTDIR/speed.jsonl and the table in OUTDIR/summary.txt (≈ 1 min on an H200)
#   parity  bf16 and fp8 from the same seed on GPT-2 BPE tokens of real text, PARITY_STEPS (1000)
#           steps of B 8 × T 1024, AdamW lr 6e-4 (warm-up 100, cosine), metrics both ways
#           (OUTDIR/parity_{bf16,fp8}.jsonl), the loss curves side by side in OUTDIR/fp8_parity.png
#           (fp8-delayed: parity_fp8-delayed.jsonl, fp8-delayed_parity.png, parity_fp8-delayed.tsv)
#           and the end-of-run comparison (mean loss of the last 50 steps: issue 32 asks fp8 within
#           1 % of bf16, no divergence) in summary.txt (≈ 2 × 70 s on an H200 at bf16's 585 k tok/s)
# Data for parity: TOKENS, a GPT-2 BPE token file (llm.c .bin, `shardtrain prepare --tokenizer
# gpt2`); else TEXT (default: the Debian license texts and package copyright files, a few MB of
# English) tokenized here with VOCAB (default $BUILD/gpt2-cache/gpt2: vocab.json + merges.txt,
# docs/launch.md "GPT-2 text"). The GPU machine has no network: carry TOKENS or VOCAB.
# Env: BUILD (build), DEVICE (cuda; cpu with TINY=1 checks the command lines at tiny sizes),
# STEPS (20), WARMUP (5), PARITY_STEPS (1000), SEED (1: the parity runs' --seed), BUDGET_S (570),
# FP8_SCALING (current: the rows bf16, fp8; delayed: a third row fp8-delayed, --precision fp8
# --fp8-scaling delayed --fp8-amax-history FP8_AMAX_HISTORY (16), in both stages and their tables;
# delayed-only: bf16 and fp8-delayed).
set -u
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { sed -n 2,24p "$0"; exit 2; }
OUT=$1; shift
stages=${*:-speed parity}
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-20}
WARMUP=${WARMUP:-5}
PARITY_STEPS=${PARITY_STEPS:-1000}
BUDGET_S=${BUDGET_S:-570}
case ${FP8_SCALING:-current} in
current) VARIANTS="bf16 fp8" ;;
delayed) VARIANTS="bf16 fp8 fp8-delayed" ;;
delayed-only) VARIANTS="bf16 fp8-delayed" ;;
*) echo "fp8_parity: FP8_SCALING must be current, delayed or delayed-only"; exit 2 ;;
esac
# the flags of a row
flags() {
  case $1 in
  fp8-delayed) echo "--precision fp8 --fp8-scaling delayed --fp8-amax-history ${FP8_AMAX_HISTORY:-16}" ;;
  *) echo "--precision $1" ;;
  esac
}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
cap() { local c=$(( BUDGET_S - SECONDS )); [ "$1" -lt "$c" ] && c=$1; echo $(( c > 5 ? c : 5 )); }
: > "$OUT/summary.txt"
note "date $(date -u +%FT%TZ)  commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}  device $DEVICE"
[ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee -a "$OUT/summary.txt"
ST="$BUILD/shardtrain"
[ -x "$ST" ] || { echo "fp8_parity: no $ST (build the shardtrain target first)"; exit 1; }

if [ "${TINY:-0}" = 1 ]; then
  GPT="--model gpt --layers 2 --d-model 64 --heads 2 --seq-len 32"; T=32; V=50257; BS="2 4"; PB=2
else
  GPT="--model gpt --layers 12 --d-model 768 --heads 12 --seq-len 1024"; T=1024; V=50257; BS="16 64"; PB=8
fi
GPT="$GPT --vocab 50304"  # GPT-2's vocabulary padded to a multiple of 128 (as bench_peers.sh)

speed() {
  source launch/gpu/tokens.sh
  local tok="$OUT/speed_tokens.bin" res="$OUT/speed.jsonl"
  local maxb=${BS##* }
  [ -f "$tok" ] || tokens "$tok" "$V" $(( (WARMUP + STEPS) * maxb * T + 1 ))
  : > "$res"
  for b in $BS; do
    for p in $VARIANTS; do
      local m="$OUT/speed_${p}_b$b.jsonl" t0=$SECONDS
      rm -f "$m"
      timeout "$(cap 120)" "$ST" train $GPT --device "$DEVICE" --data "$tok" $(flags $p) --micro-batch "$b" \
        --steps $((WARMUP + STEPS)) --lr 3e-4 --weight-decay 0.1 --clip 1 --log-every 1000 --progress 0 \
        --metrics "$m" > "$OUT/speed_${p}_b$b.log" 2>&1
      local rc=$?
      note "speed $p B$b rc=$rc ($((SECONDS - t0)) s)"
      [ $rc -eq 0 ] || { tail -3 "$OUT/speed_${p}_b$b.log" | tee -a "$OUT/summary.txt"; continue; }
      python3 - "$m" "$p" "$b" "$T" "$WARMUP" <<'PY' >> "$res"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
b, t, w = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
ms = statistics.median(r["step_ms"] for r in rows[w:])
print(json.dumps(dict(precision=sys.argv[2], B=b, step_ms=round(ms, 3), tokens_per_s=round(b * t * 1e3 / ms),
                      peak_gib=round(max(r["mem_bytes"] for r in rows) / 2**30, 2), last_loss=round(rows[-1]["loss"], 4))))
PY
    done
  done
  python3 - "$res" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["precision"], r["B"]): r for r in rows}
rows8 = [p for p in ("fp8", "fp8-delayed") if any(r["precision"] == p for r in rows)]
print("| B | bf16 tokens/s | " + " | ".join("%s tokens/s | %s / bf16" % (p, p) for p in rows8) +
      " | bf16 peak GiB | " + " | ".join("%s peak GiB" % p for p in rows8) + " |")
print("|---|---|" + "---|---|" * len(rows8) + "---|" + "---|" * len(rows8))
for b in sorted({r["B"] for r in rows}):
    bf = by.get(("bf16", b))
    cells = ["%d" % b, str(bf and bf["tokens_per_s"])]
    for p in rows8:
        f8 = by.get((p, b))
        cells += [str(f8 and f8["tokens_per_s"]), "%.3f" % (f8["tokens_per_s"] / bf["tokens_per_s"]) if bf and f8 else "—"]
    cells.append(str(bf and bf["peak_gib"]))
    cells += [str(by.get((p, b)) and by[(p, b)]["peak_gib"]) for p in rows8]
    print("| " + " | ".join(cells) + " |")
PY
}

parity() {
  local tok=${TOKENS:-}
  if [ -z "$tok" ]; then
    local vocab=${VOCAB:-$BUILD/gpt2-cache/gpt2} text=${TEXT:-}
    [ -f "$vocab/vocab.json" ] || { note "parity: no TOKENS and no GPT-2 vocabulary at $vocab (set VOCAB or TOKENS)"; return; }
    if [ -z "$text" ]; then
      text="$OUT/corpus.txt"
      cat /usr/share/common-licenses/* /usr/share/doc/*/copyright > "$text" 2>/dev/null
    fi
    tok="$OUT/parity_tokens.bin"
    "$ST" prepare --text "$text" --out "$tok" --tokenizer gpt2 --vocab "$vocab" 2>&1 | tail -1 | tee -a "$OUT/summary.txt"
  fi
  [ -f "$tok" ] || { note "parity: no token file $tok"; return; }
  note "parity tokens $tok ($(( ($(stat -c %s "$tok") - 1024) / 2 )) ids; a step reads $((PB * T)))"
  for p in $VARIANTS; do
    local m="$OUT/parity_$p.jsonl" t0=$SECONDS
    rm -f "$m"
    timeout "$(cap 240)" "$ST" train $GPT --device "$DEVICE" --data "$tok" $(flags $p) --micro-batch $PB \
      --steps "$PARITY_STEPS" --lr 6e-4 --lr-schedule cosine --warmup 100 --weight-decay 0.1 --clip 1 --seed "${SEED:-1}" --shuffle 1 \
      --log-every 100 --progress 0 --metrics "$m" > "$OUT/parity_$p.log" 2>&1
    note "parity $p rc=$? ($((SECONDS - t0)) s)"
  done
  for p in $VARIANTS; do
  [ "$p" = bf16 ] && continue
  python3 - "$OUT/parity_bf16.jsonl" "$OUT/parity_$p.jsonl" "$OUT" "$p" <<'PY' | tee -a "$OUT/summary.txt"
import json, math, sys
def load(p):
    try: return [json.loads(l) for l in open(p)]
    except OSError: return []
bf, f8, out, name = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3], sys.argv[4]
sfx = "" if name == "fp8" else "_" + name  # fp8: the files as before
if not bf or not f8: print("parity %s: a run is missing" % name); sys.exit(0)
n = min(len(bf), len(f8), 50)
mb = sum(r["loss"] for r in bf[-n:]) / n; mf = sum(r["loss"] for r in f8[-n:]) / n
finite = all(math.isfinite(r["loss"]) for r in f8)
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(bf, f8))
print("parity %s: %d / %d steps; mean loss of the last %d: bf16 %.4f %s %.4f (%+.2f %%; goal within 1 %%); "
      "finite throughout: %s; largest per-step distance %.2f %%; skipped bf16 %d %s %d"
      % (name, len(bf), len(f8), n, mb, name, mf, 100 * (mf / mb - 1), finite, 100 * worst,
         sum(r["skipped"] for r in bf), name, sum(r["skipped"] for r in f8)))
with open(out + "/parity%s.tsv" % sfx, "w") as f:
    f.write("step\tbf16\t%s\n" % name)
    for a, b in zip(bf, f8): f.write("%d\t%.6f\t%.6f\n" % (a["step"], a["loss"], b["loss"]))
try:
    import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    for r, label in ((bf, "bf16"), (f8, name)):
        ax[0].plot([x["step"] for x in r], [x["loss"] for x in r], label=label, lw=0.8)
    ax[0].set_xlabel("step"); ax[0].set_ylabel("train loss"); ax[0].legend(); ax[0].set_title("GPT-2 124M, B 8 x T 1024")
    ax[1].plot([a["step"] for a in bf], [(b["loss"] - a["loss"]) / a["loss"] * 100 for a, b in zip(bf, f8)], lw=0.6)
    ax[1].axhline(0, color="k", lw=0.5); ax[1].set_xlabel("step"); ax[1].set_ylabel("%s - bf16 (%% of bf16)" % name)
    fig.tight_layout(); fig.savefig(out + "/%s_parity.png" % name, dpi=120); print("plot: %s_parity.png" % name)
except ImportError:
    print("plot: no matplotlib; gnuplot next (parity%s.tsv has the columns)" % sfx)
PY
  local sfx=; [ "$p" = fp8 ] || sfx=_$p
  if [ ! -f "$OUT/${p}_parity.png" ] && command -v gnuplot > /dev/null; then
    gnuplot -e "set terminal png size 1000,500; set output '$OUT/${p}_parity.png'; set xlabel 'step'; set ylabel 'train loss';
                set key top right; plot '$OUT/parity$sfx.tsv' using 1:2 with lines title 'bf16', '' using 1:3 with lines title '$p'" \
      && note "plot: ${p}_parity.png (gnuplot)"
  fi
  done
}

for stage in $stages; do
  case $stage in
  speed) speed ;;
  parity) parity ;;
  *) echo "fp8_parity: unknown stage '$stage' (speed, parity)"; exit 2 ;;
  esac
done
note "done in $SECONDS s; files in $OUT"
