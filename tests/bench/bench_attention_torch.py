"""PyTorch SDPA causal attention fwd+bwd on the shapes of bench_ops_cuda (the comparison for
ops/cuda/attention.cu). CUDA-event medians of 10 samples after 3 warm-ups, random inputs
(a sample of a short call times back-to-back calls, as bench_ops_cuda does). Prints what SDPA
picks by itself, then each of its backends forced (flash, cuDNN, memory-efficient).
Usage: python3 bench_attention_torch.py [B=16] [T=1024]"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

B = int(sys.argv[1]) if len(sys.argv) > 1 else 16
T = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
H, D = 12, 64


def median_ms(fn, reps=10, warm=3):
    """Median ms per call; a sample times `inner` back-to-back calls (≥ ~0.5 ms), as
    bench_ops_cuda's time_ms does, so neither side pays a lone launch's latency."""
    for _ in range(warm):
        fn()

    def sample(inner):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / inner

    once = sample(1)
    inner = 1 if once >= 0.5 else min(100, int(0.5 / max(once, 1e-3)) + 1)
    times = sorted(sample(inner) for _ in range(reps))
    return times[len(times) // 2]


BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def run(dt, backend=None):
    q, k, v = (torch.rand(B, H, T, D, device="cuda", dtype=dt, requires_grad=True) * 2 - 1 for _ in range(3))
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    do = torch.rand(B, H, T, D, device="cuda", dtype=dt) * 2 - 1
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    fwd = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    bwd = median_ms(lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True))
    flops = 2.0 * B * H * T * T * D
    name = backend or "default"
    print(f"torch sdpa {name:9s} causal {str(dt).split('.')[-1]} B={B} H={H} T={T} D={D}  fwd {fwd:8.3f} ms "
          f"({flops / fwd / 1e9:6.1f} TFLOP/s)  bwd {bwd:8.3f} ms ({2.5 * flops / bwd / 1e9:6.1f} TFLOP/s)  "
          f"fwd+bwd {fwd + bwd:8.3f} ms")


for dt in (torch.float16, torch.bfloat16, torch.float32):
    run(dt)  # what F.scaled_dot_product_attention picks by itself
    if dt == torch.float32:
        continue
    for name, backend in BACKENDS.items():  # each backend forced, to name the default one
        try:
            with sdpa_kernel(backend):
                run(dt, name)
        except RuntimeError as e:
            print(f"torch sdpa {name:9s} {str(dt).split('.')[-1]}: not available ({str(e).splitlines()[0][:80]})")
