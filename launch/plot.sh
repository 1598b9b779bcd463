#!/usr/bin/env bash
# Metrics JSONL → PNG plots with gnuplot (Debian's gnuplot-nox; launch/setup.sh installs it):
#   DIR/loss.png        training loss per step (and val_loss where evaluated)
#   DIR/throughput.png  tokens/s per step
#   DIR/loss_scale.png  the fp16 loss scale (log axis; 1 for fp32/bf16 runs), skipped steps marked
#   DIR/metrics.tsv     the columns plotted (step loss val_loss tokens_per_s loss_scale skipped lr grad_norm)
# usage: launch/plot.sh --metrics FILE.jsonl --out DIR [--title TEXT]
set -euo pipefail

metrics="" out="" title=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --metrics) metrics="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --title) title="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "plot: unknown option '$1' (usage: launch/plot.sh --metrics FILE.jsonl --out DIR)" >&2; exit 2 ;;
  esac
done
[[ -n "$metrics" && -n "$out" ]] || { echo "plot: --metrics FILE.jsonl and --out DIR are required" >&2; exit 2; }
[[ -f "$metrics" ]] || { echo "plot: $metrics does not exist" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot: gnuplot not found (run launch/setup.sh, or apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out"
title="${title:-$(basename "$metrics")}"

# JSONL → TSV; "NaN" for missing or null values (gnuplot skips them).
python3 - "$metrics" "$out/metrics.tsv" <<'PY'
import json, math, sys
src, dst = sys.argv[1], sys.argv[2]
cols = ["step", "loss", "val_loss", "tokens_per_s", "loss_scale", "skipped", "lr", "grad_norm"]
n = 0
with open(src) as f, open(dst, "w") as o:
    o.write("# " + "\t".join(cols) + "\n")
    for i, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"plot: {src}:{i}: not JSON ({e})")
        if "step" not in r:
            sys.exit(f"plot: {src}:{i}: no \"step\"")
        def v(k):
            x = r.get(k)
            if isinstance(x, bool):
                return "1" if x else "0"
            if isinstance(x, (int, float)) and math.isfinite(x):
                return repr(x)
            return "NaN"
        o.write("\t".join(v(c) for c in cols) + "\n")
        n += 1
if n == 0:
    sys.exit(f"plot: {src} holds no metrics lines")
PY

term="pngcairo size 900,540 enhanced font 'sans,10'"
gnuplot -e "set terminal $term" >/dev/null 2>&1 || term="png size 900,540"
# gnuplot warns about empty series (no val_loss, no skipped step): shown only when it fails.
if ! gnuplot 2>"$out/gnuplot.log" <<GP
set terminal $term
set datafile separator "\t"
set datafile missing "NaN"
set grid
set key top right
set xlabel "step"
set output "$out/loss.png"
set title "$title: loss"
set ylabel "cross-entropy (nats/token)"
plot "$out/metrics.tsv" using 1:2 with lines lw 2 title "train", \
     "" using 1:3 with linespoints pt 7 title "val"
set output "$out/throughput.png"
set title "$title: throughput"
set ylabel "tokens/s"
set yrange [0:*]
plot "$out/metrics.tsv" using 1:4 with lines lw 2 title "tokens/s"
set output "$out/loss_scale.png"
set title "$title: loss scale"
set ylabel "loss scale"
set autoscale y
set logscale y 2
plot "$out/metrics.tsv" using 1:5 with steps lw 2 title "scale", \
     "" using 1:(\$6 > 0 ? \$5 : 1/0) with points pt 2 ps 1.5 title "skipped step"
GP
then
  cat "$out/gnuplot.log" >&2
  echo "plot: gnuplot failed" >&2
  exit 1
fi
rm -f "$out/gnuplot.log"
echo "plot: wrote $out/loss.png $out/throughput.png $out/loss_scale.png"
