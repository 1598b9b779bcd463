#!/usr/bin/env bash
# A data-parallel run's trace shows communication against computation: on both ranks forward and
# backward slices on "compute" and the bucket all-reduces on "comm" (small buckets, so several
# are in flight during backward); on every thread of the merged file the slices nest or are
# disjoint (what Perfetto draws), overlapping all-reduces having gone to "comm 1", "comm 2", ...
# usage: trace_dp_test.sh MPIEXEC SHARDTRAIN
set -euo pipefail
MPIEXEC="$1" BIN="$2"
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
"$MPIEXEC" --oversubscribe --allow-run-as-root -np 2 "$BIN" train --dp 2 --layers 2 --d-model 64 --steps 3 \
  --grad-accum 2 --bucket-mb 0.02 --trace "$D/trace.json" --log-every 100 >"$D/out.txt" 2>&1 ||
  { cat "$D/out.txt"; echo "FAIL: the dp 2 run failed"; exit 1; }
python3 - "$D/trace.json" <<'PY'
import collections, json, sys
doc = json.load(open(sys.argv[1]))
names = {}
slices = collections.defaultdict(list)
per_rank = collections.defaultdict(collections.Counter)
for e in doc["traceEvents"]:
    if e["ph"] == "M" and e["name"] == "thread_name":
        names[(e["pid"], e["tid"])] = e["args"]["name"]
    if e["ph"] != "X":
        continue
    slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    per_rank[e["pid"]][(e["cat"], e["name"].split(" mb")[0].rstrip("0123456789 "))] += 1
for r in (0, 1):
    c = per_rank[r]
    assert c[("compute", "forward")] == 6 and c[("compute", "backward")] == 6, f"rank {r}: {c}"
    assert c[("comm", "allreduce bucket")] >= 6, f"rank {r}: fewer than 2 buckets a step: {c}"
for key, s in slices.items():
    s.sort(key=lambda x: (x[0], -x[1]))
    for i, a in enumerate(s):
        for b in s[i + 1:]:
            if b[0] >= a[1]:
                break
            assert b[1] <= a[1], f"thread {names[key]} of rank {key[0]}: {a} and {b} overlap without nesting"
lanes = sorted({n for n in names.values() if n.startswith("comm")})
print("threads:", sorted(set(names.values())), "- comm lanes:", lanes)
PY
echo "trace dp test passed"
