#!/usr/bin/env bash
# Metrics JSONL → PNG plots with gnuplot (Debian's gnuplot-nox; launch/setup.sh installs it):
#   DIR/loss.png        training loss per step, and the validation loss where evaluated
#   DIR/lr.png          the learning rate per step (warm-up, cosine)
#   DIR/grad_norm.png   the global gradient norm before clipping (log axis: spikes and the rest)
#   DIR/throughput.png  tokens/s per step
#   DIR/loss_scale.png  fp16 runs only: the loss scale (log axis), skipped steps marked
#   DIR/metrics.tsv     the columns plotted (step loss val_loss tokens_per_s loss_scale skipped lr grad_norm)
# Without gnuplot it writes metrics.tsv, says so and exits 0.
# usage: launch/plot.sh --metrics FILE.jsonl --out DIR [--title TEXT]
#        launch/plot.sh --run-dir DIR     (a train --run-dir: DIR/metrics.jsonl into DIR/plots)
#        launch/plot.sh --metrics A.jsonl --metrics B.jsonl ... --out DIR   (several runs overlaid:
#          loss, lr, grad_norm and throughput with a curve per file, named by its run folder or file
#          name; DIR/<name>.tsv each, the plots' key names them)
set -euo pipefail

metrics="" out="" title=""
all=()  # every --metrics, in order
while [[ $# -gt 0 ]]; do
  case "$1" in
    --metrics) metrics="$2"; all+=("$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --title) title="$2"; shift 2 ;;
    --run-dir) metrics="${metrics:-$2/metrics.jsonl}"; out="${out:-$2/plots}"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "plot: unknown option '$1' (usage: launch/plot.sh --metrics FILE.jsonl --out DIR)" >&2; exit 2 ;;
  esac
done
[[ -n "$metrics" && -n "$out" ]] || { echo "plot: --metrics FILE.jsonl and --out DIR are required" >&2; exit 2; }
[[ -f "$metrics" ]] || { echo "plot: $metrics does not exist" >&2; exit 1; }
mkdir -p "$out"
if [[ ${#all[@]} -gt 1 ]]; then  # several runs overlaid
  for m in "${all[@]}"; do [[ -f "$m" ]] || { echo "plot: $m does not exist" >&2; exit 1; }; done
  # one TSV per file (step loss lr grad_norm tokens_per_s); prints "NAME<TAB>TSV" per file, names
  # unique: the run folder of a metrics.jsonl, else the file's stem (a clash gets -2, -3, ...)
  mapfile -t series < <(python3 - "$out" "${all[@]}" <<'PY'
import json, math, os, sys
out, files, seen = sys.argv[1], sys.argv[2:], {}
for src in files:
    base = os.path.basename(src)
    name = os.path.basename(os.path.dirname(os.path.abspath(src))) if base == "metrics.jsonl" else os.path.splitext(base)[0]
    seen[name] = seen.get(name, 0) + 1
    if seen[name] > 1:
        name = f"{name}-{seen[name]}"
    dst = os.path.join(out, name + ".tsv")
    n = 0
    with open(src) as f, open(dst, "w") as o:
        o.write("# step\tloss\tlr\tgrad_norm\ttokens_per_s\n")
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot: {src}:{i}: not JSON ({e})")
            v = lambda k: repr(r[k]) if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) and math.isfinite(r[k]) else "NaN"
            o.write("\t".join(v(k) for k in ("step", "loss", "lr", "grad_norm", "tokens_per_s")) + "\n")
            n += 1
    if n == 0:
        sys.exit(f"plot: {src} holds no metrics lines")
    print(f"{name}\t{dst}")
PY
  ) || exit 1
  [[ ${#series[@]} -eq ${#all[@]} ]] || exit 1
  if ! command -v gnuplot >/dev/null; then
    echo "plot: gnuplot not found (launch/setup.sh, or apt-get install gnuplot-nox): wrote the TSVs only" >&2
    exit 0
  fi
  title="${title:-$(for s in "${series[@]}"; do printf '%s ' "${s%%$'\t'*}"; done | sed 's/ $//; s/ / vs /g')}"
  # plot "A.tsv" using 1:COL with lines lw 2 title "A", "B.tsv" ...
  curves() { local c="" s; for s in "${series[@]}"; do c+="${c:+, }\"${s#*$'\t'}\" using 1:$1 with lines lw 2 title \"${s%%$'\t'*}\""; done; echo "$c"; }
  term="pngcairo size 900,540 enhanced font 'sans,10'"
  gnuplot -e "set terminal $term" >/dev/null 2>&1 || term="png size 900,540"
  if ! gnuplot 2>"$out/gnuplot.log" <<GP
set terminal $term
set datafile separator "\t"
set datafile missing "NaN"
set grid
set key top right noenhanced
set xlabel "step"
set output "$out/loss.png"
set title "$title: loss" noenhanced
set ylabel "cross-entropy (nats/token)"
plot $(curves 2)
set output "$out/lr.png"
set title "$title: learning rate" noenhanced
set ylabel "learning rate"
set format y "%.1e"
plot $(curves 3)
set output "$out/grad_norm.png"
set title "$title: gradient norm (before clipping)" noenhanced
set ylabel "global gradient norm (log axis)"
set format y "%g"
set logscale y
plot $(curves 4)
unset logscale y
set output "$out/throughput.png"
set title "$title: throughput" noenhanced
set ylabel "tokens/s"
set yrange [0:*]
plot $(curves 5)
GP
  then
    cat "$out/gnuplot.log" >&2
    echo "plot: gnuplot failed" >&2
    exit 1
  fi
  rm -f "$out/gnuplot.log"
  echo "plot: wrote $out/loss.png $out/lr.png $out/grad_norm.png $out/throughput.png (${#series[@]} runs overlaid)"
  exit 0
fi
title="${title:-$(basename "$metrics")}"

# JSONL → TSV; "NaN" for missing or null values (gnuplot skips them). Prints what the run has:
# "val" (some val_loss), "scaler" (a loss scale other than 1, or a skipped step: an fp16 run).
has=$(python3 - "$metrics" "$out/metrics.tsv" <<'PY'
import json, math, sys
src, dst = sys.argv[1], sys.argv[2]
cols = ["step", "loss", "val_loss", "tokens_per_s", "loss_scale", "skipped", "lr", "grad_norm"]
n = 0
val, scaler = 0, False
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
        val += v("val_loss") != "NaN"
        scaler = scaler or v("skipped") == "1" or v("loss_scale") not in ("NaN", "1", "1.0")
if n == 0:
    sys.exit(f"plot: {src} holds no metrics lines")
print((f"val{val} " if val else "") + ("scaler" if scaler else ""))
PY
) || exit 1
if ! command -v gnuplot >/dev/null; then
  echo "plot: gnuplot not found (launch/setup.sh, or apt-get install gnuplot-nox): wrote $out/metrics.tsv only" >&2
  exit 0
fi
val_plot="" pngs="$out/loss.png $out/lr.png $out/grad_norm.png $out/throughput.png"
if [[ "$has" == *val* ]]; then
  val_plot=', "" using 1:3 with linespoints pt 7 ps 0.8 lw 2 title "validation"'
  n_val=${has#val}
  n_val=${n_val%% *}
fi
rm -f "$out/loss_scale.png"  # a stale one from an earlier fp16 run into the same DIR
scale_plot=""
if [[ "$has" == *scaler* ]]; then
  pngs="$pngs $out/loss_scale.png"
  scale_plot="set output \"$out/loss_scale.png\"
set title \"$title: fp16 loss scale\"
set ylabel \"loss scale\"
set autoscale y
set logscale y 2
plot \"$out/metrics.tsv\" using 1:5 with steps lw 2 title \"scale\", \\
     \"\" using 1:(\$6 > 0 ? \$5 : 1/0) with points pt 2 ps 1.5 title \"skipped step\""
fi
term="pngcairo size 900,540 enhanced font 'sans,10'"
gnuplot -e "set terminal $term" >/dev/null 2>&1 || term="png size 900,540"
# gnuplot warns about empty series (no val_loss, no skipped step): shown only when it fails.
if ! gnuplot 2>"$out/gnuplot.log" <<GP
set terminal $term
set datafile separator "\t"
set datafile missing "NaN"
set grid
set offsets 0, 0, graph 0.06, graph 0.02
set key top right
set xlabel "step"
set output "$out/loss.png"
set title "$title: loss"
set ylabel "cross-entropy (nats/token)"
plot "$out/metrics.tsv" using 1:2 with lines lw 2 title "train"$val_plot
set output "$out/lr.png"
set title "$title: learning rate"
set ylabel "learning rate"
set format y "%.1e"
set yrange [0:*]
plot "$out/metrics.tsv" using 1:7 with lines lw 2 title "lr"
set output "$out/grad_norm.png"
set title "$title: gradient norm (before clipping)"
set ylabel "global gradient norm (log axis)"
set format y "%g"
set autoscale y
set logscale y
plot "$out/metrics.tsv" using 1:8 with lines lw 2 title "grad norm"
unset logscale y
set output "$out/throughput.png"
set title "$title: throughput"
set ylabel "tokens/s"
set yrange [0:*]
plot "$out/metrics.tsv" using 1:4 with lines lw 2 title "tokens/s"
$scale_plot
GP
then
  cat "$out/gnuplot.log" >&2
  echo "plot: gnuplot failed" >&2
  exit 1
fi
rm -f "$out/gnuplot.log"
echo "plot: wrote $pngs"
[[ -z "$val_plot" ]] || echo "plot: loss.png shows the validation loss of $n_val steps"
