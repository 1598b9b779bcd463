#!/usr/bin/env python3
"""The step profile table of launch/gpu/profile_step.sh: one eager step's kernels (Nsight Compute's
raw CSV, gpu__time_duration.sum per kernel) summed per op family, against the step's wall time
eager and as a CUDA graph.
  usage: profile_table.py NAME NCU.csv EAGER_MS GRAPH_MS
The profiled run has two steps; the last one is kept: from the last embedding forward (a step's
first kernel) to the end. A missing or empty CSV (no ncu) prints the wall times only."""
import collections, csv, os, re, sys

FAMILIES = [  # first match wins; kernel names as ncu prints them (templates included)
    ("gemm", r"gemm|Gemm|GEMM|cutlass|xmma|nvjet|cublas|sm90_|sm80_|ampere|hopper"),
    ("attention", r"attention|flash|fmha|sdpa|cudnn|Attention|attn|core_(fwd|dq|dkdv|delta)_kernel"),
    ("layernorm", r"layernorm"),
    ("cross-entropy", r"cross_entropy"),
    ("softmax", r"softmax"),
    ("embedding", r"embedding|RadixSort|Radix|cub::"),
    ("dropout", r"Dropout|dropout_kernel"),
    ("activation", r"Gelu|gelu|Relu|relu"),
    ("optimizer", r"adamw|grad_stats|sgd|step_state|begin_kernel|decide_kernel|add_loss_kernel"),
    ("bias / column sums", r"sum_cols|colsum|bias"),
    ("copies / casts / fills", r"copy|fill|Cast|cast"),
    ("elementwise", r"map1|map2|add_|add_contig|binary|scale|Mul|Add"),
]


SCALE_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "nanosecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}


def family(name):
    for fam, pat in FAMILIES:
        if re.search(pat, name):
            return fam
    return "other"


def main():
    name, path, eager, graph = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    print(f"### {name}\n")
    rows = []
    if os.path.exists(path) and os.path.getsize(path) > 0:
        table = [r for r in csv.reader(open(path)) if r]
        hdr = next((i for i, r in enumerate(table) if "Kernel Name" in r), None)
        if hdr is not None:
            h = table[hdr]
            k, t = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
            unit = table[hdr + 1][t]
            data = table[hdr + 2:]
            starts = [i for i, r in enumerate(data) if "embedding_fwd_kernel" in r[k]]
            for r in data[starts[-1]:] if starts else data:
                try:
                    v = float(r[t].replace(",", ""))
                except ValueError:
                    continue
                v *= SCALE_TO_US.get(unit.strip(), 1.0)  # → µs
                rows.append((r[k].split("(")[0], v))
    tot = collections.defaultdict(float)
    cnt = collections.Counter()
    top = collections.defaultdict(float)
    for n, v in rows:
        f = family(n)
        tot[f] += v
        cnt[f] += 1
        top[n[:100]] += v
    s = sum(tot.values())
    if rows:
        print("| family | kernels | µs | % of kernel time |")
        print("| --- | ---: | ---: | ---: |")
        for f, v in sorted(tot.items(), key=lambda x: -x[1]):
            print(f"| {f} | {cnt[f]} | {v:,.0f} | {100 * v / s:.1f} % |")
        print(f"| **all kernels** | {len(rows)} | {s:,.0f} | 100 % |\n")
    def ms(x):
        try:
            return float(x)
        except ValueError:
            return float("nan")
    e, g = ms(eager), ms(graph)
    print(f"wall per step: eager {e:.3f} ms, CUDA graph {g:.3f} ms" + (f" (graph/eager {g / e:.3f})" if e > 0 else ""))
    if rows:
        print(f"Σ kernels {s / 1000:.3f} ms: host-bound gap eager {e - s / 1000:.3f} ms, graph {g - s / 1000:.3f} ms\n")
        print("heaviest kernels:")
        for n, v in sorted(top.items(), key=lambda x: -x[1])[:12]:
            print(f"  {v:9,.0f} µs  {n}")
    print()


if __name__ == "__main__":
    main()
