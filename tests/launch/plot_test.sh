#!/usr/bin/env bash
# launch/plot.sh: from an fp16 run's metrics (a null grad_norm, a skipped step, a changing loss
# scale, val_loss on some steps) five PNGs (PNG signature, 900 × 540 IHDR): loss (with the
# validation series, said so), lr, grad_norm, throughput, loss_scale; from an fp32 run's (loss
# scale always 1, no val_loss) four, no loss_scale.png (a stale one in DIR is removed) and no
# validation series; the TSV has one row per step; a malformed line is an error naming the file
# and line; without gnuplot the TSV is written, the script says so and exits 0; several --metrics
# are overlaid (a curve per run, its TSV named by the run folder).
# usage: plot_test.sh REPO_ROOT
set -euo pipefail
REPO="$1"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT

python3 - "$D/m.jsonl" <<'PY'
import json, math, sys
with open(sys.argv[1], "w") as f:
    for s in range(1, 41):
        f.write(json.dumps({"step": s, "loss": 5.5 * math.exp(-s / 10) + 1, "grad_norm": None if s == 7 else 1.0,
                            "lr": 1e-3 * min(1, s / 5), "loss_scale": 65536.0 if s < 7 else 32768.0, "skipped": s == 7,
                            "tokens_per_s": 1000.0 + s, "step_ms": 10.0, "mfu": None, "mem_bytes": 1,
                            **({"val_loss": 3.0} if s % 10 == 0 else {})}) + "\n")
PY
out=$("$REPO/launch/plot.sh" --metrics "$D/m.jsonl" --out "$D/plots")
echo "$out"
[[ "$out" == *"loss.png shows the validation loss of 4 steps"* ]] || { echo "no validation series announced"; exit 1; }
pngs() {  # pngs DIR NAME...: each a 900x540 PNG with content
  python3 - "$@" <<'PY'
import struct, sys
d = sys.argv[1]
for name in sys.argv[2:]:
    b = open(f"{d}/{name}", "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", f"{name}: not a PNG (first bytes {b[:8]!r})"
    assert b[12:16] == b"IHDR", f"{name}: no IHDR chunk"
    w, h = struct.unpack(">II", b[16:24])
    assert (w, h) == (900, 540), f"{name}: {w}x{h}, expected 900x540"
    assert len(b) > 3000, f"{name}: only {len(b)} bytes (an empty plot?)"
PY
}
pngs "$D/plots" loss.png lr.png grad_norm.png throughput.png loss_scale.png
python3 - "$D/plots" <<'PY'
import sys
rows = [l for l in open(f"{sys.argv[1]}/metrics.tsv") if not l.startswith("#")]
assert len(rows) == 40, f"metrics.tsv has {len(rows)} rows"
assert rows[6].split("\t")[7].strip() == "NaN", "null grad_norm must become NaN"
print("plots ok")
PY

# fp32 run: the loss scale stays 1 — no loss_scale.png, a stale one removed; no validation
python3 -c "
import json
print('\n'.join(json.dumps({'step': s, 'loss': 3.0 - s * 0.01, 'grad_norm': 0.5 + s, 'lr': 1e-3, 'loss_scale': 1,
                            'skipped': False, 'tokens_per_s': 5.0}) for s in range(1, 6)))" > "$D/flat.jsonl"
mkdir -p "$D/flat" && cp "$D/plots/loss_scale.png" "$D/flat/loss_scale.png"
out=$("$REPO/launch/plot.sh" --metrics "$D/flat.jsonl" --out "$D/flat")
pngs "$D/flat" loss.png lr.png grad_norm.png throughput.png
[[ ! -e "$D/flat/loss_scale.png" ]] || { echo "fp32 run: loss_scale.png plotted (or a stale one kept)"; exit 1; }
[[ "$out" != *validation* && "$out" != *loss_scale* ]] || { echo "fp32 run without val_loss: $out"; exit 1; }

printf '{"step": 1, "loss": 2.0}\nnot json\n' > "$D/bad.jsonl"
if err=$("$REPO/launch/plot.sh" --metrics "$D/bad.jsonl" --out "$D/bad" 2>&1); then
  echo "plot.sh accepted a malformed metrics file"; exit 1
fi
[[ "$err" == *"bad.jsonl:2"* ]] || { echo "error does not name the line: $err"; exit 1; }

# several runs overlaid (--metrics given more than once): a curve per file, named by its run
# folder (a metrics.jsonl) or its stem, its TSV beside the plots; the one-run files are not written
mkdir -p "$D/runA" "$D/runB" && cp "$D/m.jsonl" "$D/runA/metrics.jsonl" && cp "$D/flat.jsonl" "$D/runB/metrics.jsonl"
out=$("$REPO/launch/plot.sh" --metrics "$D/runA/metrics.jsonl" --metrics "$D/runB/metrics.jsonl" --metrics "$D/flat.jsonl" --out "$D/over")
[[ "$out" == *"(3 runs overlaid)" ]] || { echo "overlay: $out"; exit 1; }
pngs "$D/over" loss.png lr.png grad_norm.png throughput.png
python3 - "$D/over" <<'PY'
import os, sys
d = sys.argv[1]
rows = {n: [l for l in open(f"{d}/{n}.tsv") if not l.startswith("#")] for n in ("runA", "runB", "flat")}
assert [len(r) for r in rows.values()] == [40, 5, 5], {n: len(r) for n, r in rows.items()}
assert rows["runA"][6].split("\t")[3] == "NaN", "null grad_norm must become NaN"
assert not os.path.exists(f"{d}/metrics.tsv") and not os.path.exists(f"{d}/loss_scale.png"), os.listdir(d)
PY

# without gnuplot on PATH: the TSV, a line saying so, exit 0
mkdir -p "$D/bin"
for c in bash mkdir basename dirname rm sed cat; do ln -s "$(command -v "$c")" "$D/bin/$c"; done
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$D/bin/python3"  # the interpreter, not a shim
err=$(PATH="$D/bin" "$REPO/launch/plot.sh" --metrics "$D/flat.jsonl" --out "$D/nognuplot" 2>&1) ||
  { echo "without gnuplot: exit $?: $err"; exit 1; }
[[ "$err" == *"gnuplot not found"*"wrote $D/nognuplot/metrics.tsv only"* && -s "$D/nognuplot/metrics.tsv" ]] ||
  { echo "without gnuplot: $err"; exit 1; }
[[ ! -e "$D/nognuplot/loss.png" ]] || { echo "without gnuplot: a PNG appeared"; exit 1; }
echo "plot test passed"
