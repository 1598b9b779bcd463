#!/usr/bin/env bash
# launch/plot.sh: three PNGs (PNG signature, 900 × 540 IHDR) from a metrics JSONL holding a null
# grad_norm, a skipped step, constant and changing loss scales and val_loss on some steps; the TSV
# has one row per step; a malformed line is an error naming the file and line.
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
                            "lr": 1e-3, "loss_scale": 65536.0 if s < 7 else 32768.0, "skipped": s == 7,
                            "tokens_per_s": 1000.0 + s, "step_ms": 10.0, "mfu": 0.0, "mem_bytes": 1,
                            **({"val_loss": 3.0} if s % 10 == 0 else {})}) + "\n")
PY
"$REPO/launch/plot.sh" --metrics "$D/m.jsonl" --out "$D/plots"
python3 - "$D/plots" <<'PY'
import struct, sys
d = sys.argv[1]
for name in ("loss.png", "throughput.png", "loss_scale.png"):
    b = open(f"{d}/{name}", "rb").read()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", f"{name}: not a PNG (first bytes {b[:8]!r})"
    assert b[12:16] == b"IHDR", f"{name}: no IHDR chunk"
    w, h = struct.unpack(">II", b[16:24])
    assert (w, h) == (900, 540), f"{name}: {w}x{h}, expected 900x540"
    assert len(b) > 3000, f"{name}: only {len(b)} bytes (an empty plot?)"
rows = [l for l in open(f"{d}/metrics.tsv") if not l.startswith("#")]
assert len(rows) == 40, f"metrics.tsv has {len(rows)} rows"
assert rows[6].split("\t")[7].strip() == "NaN", "null grad_norm must become NaN"
print("plots ok")
PY

# fp32 run: the loss scale stays 1 (a flat log axis must still plot).
python3 -c "
import json
print('\n'.join(json.dumps({'step': s, 'loss': 3.0 - s * 0.01, 'loss_scale': 1, 'skipped': False, 'tokens_per_s': 5.0}) for s in range(1, 6)))" > "$D/flat.jsonl"
"$REPO/launch/plot.sh" --metrics "$D/flat.jsonl" --out "$D/flat"
[[ "$(head -c 4 "$D/flat/loss_scale.png" | od -An -tx1 | tr -d ' \n')" == "89504e47" ]] || { echo "flat loss_scale.png is not a PNG"; exit 1; }

printf '{"step": 1, "loss": 2.0}\nnot json\n' > "$D/bad.jsonl"
if err=$("$REPO/launch/plot.sh" --metrics "$D/bad.jsonl" --out "$D/bad" 2>&1); then
  echo "plot.sh accepted a malformed metrics file"; exit 1
fi
[[ "$err" == *"bad.jsonl:2"* ]] || { echo "error does not name the line: $err"; exit 1; }
echo "plot test passed"
