#!/usr/bin/env python3
"""Full-size Llama fidelity in fp32 (issue 31, Deliver 6): shardtrain's Llama at the Llama-3.2-1B
shape against Hugging Face transformers' LlamaForCausalLM, 5 AdamW steps, each step's loss within
1e-6 relative — the bound GPT-2 124M meets. The tiny fixture (tests/fixtures/hf_llama_tiny,
tests/models/test_llama_fidelity.cpp) checks the same path at 2 layers and C 64; this one checks it
where the sums are long (C 2048, FFN 8192, V 128256, T 1024), the key/value heads are 8 of 32, the
head is tied and Llama 3's rope scaling is on. launch/gpu/llama_full_fidelity.sh runs it in one
command; this file holds its two halves:

  llama_full_fidelity.py reference OUT [--shape 1b|tiny] [--device cuda|cpu] [shape/run overrides]
      builds LlamaForCausalLM from a fixed seed (transformers' own initialisation, fp32), writes
      OUT/hf (save_pretrained: config.json + safetensors), OUT/tokens.bin (llm.c's format) and
      trains 5 AdamW steps in torch, writing OUT/reference.json: the settings, per step the loss
      and the global grad norm before clipping, the first batch's logits statistics, the peak
      memory and the step times. Prints the shardtrain flags that mean the same run.
  llama_full_fidelity.py compare OUT/reference.json METRICS.jsonl
      the table step | HF loss | ours | rel | HF grad norm | ours | rel, the worst of each, and
      exit 1 when a bound is exceeded (below).

The torch run (what shardtrain must equal, tests/fixtures/make_hf_llama_tiny.py's recipe):
  - fp32 throughout, TF32 off (matmul and cuDNN), set_float32_matmul_precision("highest"),
    deterministic algorithms, attention "eager" (softmax(q·kᵀ/√d + mask)·v as plain f32 matmuls:
    no fused kernel whose accumulation we would have to guess); shardtrain runs with --tf32 0.
  - step s (from 0) trains on global sequences j = 0..G−1 (G = batch), sequence j being
    tokens[(s·G + j)·T : (s·G + j)·T + T + 1]: inputs its first T, targets shifted by one — the
    order shardtrain's TokenData reads without --shuffle. The file holds exactly steps·G·T + 1
    tokens, so no sequence wraps around.
  - mean cross-entropy over the G·T targets; torch.optim.AdamW(lr, betas (0.9, 0.95), eps 1e-8),
    weight decay 0.1 only on tensors of ≥ 2 dims (shardtrain's Optimizer::decays), the tied
    embedding/head counted once; clip_grad_norm_ to 1.0 (coefficient 1.0 / (norm + 1e-6), as
    runtime/optim/grad_clip.cpp); constant learning rate, no warm-up. The recorded grad_norm is
    the global norm before clipping (shardtrain's metrics' grad_norm), summed in float64 (below).
  - tokens are drawn uniformly over the whole vocabulary, so ids ≥ 65536 of the 128 256-word one
    are read too: the token file is version 2 (uint32 tokens, runtime/data/token_data.h) when an
    id exceeds 65535, llm.c's version 1 (uint16) otherwise.

Bounds (compare):
  loss       1e-6 relative, the issue's bound (it quotes GPT-2 124M at 2.4e-7). Both sides sum the same f32
             terms in different orders; a sum of n terms drifts by about ε·√n relative (ε 6e-8),
             and the loss is a mean over G·T = 2048 log-softmaxes of 128 256-word rows.
  grad norm  step 1: 1e-6 relative — the same weights on both sides, so only the backward's
             summation order differs (cuBLAS's GEMMs against torch's, our attention backward against
             eager); steps 2–5: 1e-4, the bound test_gpu_trainer holds the GPT-2 fixture's 5 steps
             to: the weights already differ by AdamW's roundoff there (an update is ±lr wherever
             |g| ≫ eps, so an element whose gradient is roundoff moves the other way), and with
             1.2 B elements that drift grows — 1e-5 (test_llama_fidelity's bound at the tiny
             shape) was exceeded at 2.6e-5 on the H100 (2026-12-05) while step 1 agreed to 7e-8 and
             every loss to 8e-7. Compared against the norm of torch's f32 gradients summed in
             float64 (the reference's "grad_norm"; "torch_grad_norm" is clip_grad_norm_'s own f32
             result, which clips): torch 1.13's CPU clip_grad_norm_ was measured 1.4e-5 below the
             exact norm of its own gradients at the tiny shape. A real defect (a wrong rope
             frequency, a missing 1/√d, a key/value head feeding the wrong query heads) moves
             either by percent. The worst relative errors are printed: the measured values, not
             the bounds, are what the docs record.
"""
import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by torch's deterministic cuBLAS

SHAPES = {
    # Llama-3.2-1B (meta-llama/Llama-3.2-1B's config.json), with random weights
    "1b": dict(layers=16, d_model=2048, heads=32, kv_heads=8, head_dim=64, ffn=8192, vocab=128256,
               max_positions=131072, batch=2, seq_len=1024, init_std=0.02),
    # the same model in miniature, for checking the flow on a CPU in seconds: every feature of the
    # 1B shape (grouped-query 4:1, tied head, llama3 rope scaling), the vocabulary above 16-bit
    # token ids so the version-2 token file is exercised, T 256 so that the scaled rope
    # frequencies turn by a measurable angle, and an initialisation std of 0.1 so that the logits
    # spread as the 1B's do (std ≈ init_std·√C: 0.8 here, 0.9 there; at 0.02 they would be 0.16
    # and the loss ln V whatever the weights: a missing rope scaling passed at T 64, std 0.02)
    "tiny": dict(layers=2, d_model=64, heads=4, kv_heads=1, head_dim=16, ffn=128, vocab=70000,
                 max_positions=131072, batch=2, seq_len=256, init_std=0.1),
}
COMMON = dict(rope_theta=500000.0, rms_norm_eps=1e-5, tied=True, steps=5, lr=1e-3, beta1=0.9, beta2=0.95,
              eps=1e-8, weight_decay=0.1, clip=1.0, seed=1234)
ROPE_SCALING = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
LOSS_BOUND = 1e-6  # the bound (docstring)
NORM_BOUND_FIRST = 1e-6  # step 1's grad norm: the same weights on both sides (docstring)
NORM_BOUND = 1e-4  # steps 2–5: weights apart by AdamW's roundoff (docstring)


def settings(a):
    s = dict(SHAPES[a.shape], **COMMON)
    for k in ("layers", "d_model", "heads", "kv_heads", "head_dim", "ffn", "vocab", "batch", "seq_len", "steps",
              "seed"):
        if getattr(a, k) is not None:
            s[k] = int(getattr(a, k))
    if a.lr is not None:
        s["lr"] = float(a.lr)
    s["shape"] = a.shape
    return s


def llama_config(s):
    import transformers
    from transformers import LlamaConfig
    kw = dict(vocab_size=s["vocab"], hidden_size=s["d_model"], intermediate_size=s["ffn"],
              num_hidden_layers=s["layers"], num_attention_heads=s["heads"], num_key_value_heads=s["kv_heads"],
              head_dim=s["head_dim"], max_position_embeddings=s["max_positions"], rms_norm_eps=s["rms_norm_eps"],
              hidden_act="silu", tie_word_embeddings=s["tied"], attention_bias=False, mlp_bias=False,
              attention_dropout=0.0, initializer_range=s["init_std"], bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if int(transformers.__version__.split(".")[0]) >= 5:  # transformers 5: the rope's parameters in one dict
        config = LlamaConfig(**kw, rope_parameters={**ROPE_SCALING, "rope_theta": s["rope_theta"]})
    else:
        config = LlamaConfig(**kw, rope_theta=s["rope_theta"], rope_scaling=dict(ROPE_SCALING))
    config._attn_implementation = "eager"
    return config


def check_rope(model, s):
    """The model rotates with theta and Llama 3's scaling, whatever the config spelling: its inv_freq
    is not the plain one, and differs exactly where the scaling says (wavelength above
    original_max_position_embeddings / low_freq_factor: divided by factor)."""
    import torch
    D = s["head_dim"]
    plain = 1.0 / (s["rope_theta"] ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    rotary = getattr(model.model, "rotary_emb", None) or model.model.layers[0].self_attn.rotary_emb
    got = rotary.inv_freq.float().cpu()
    low_wavelen = ROPE_SCALING["original_max_position_embeddings"] / ROPE_SCALING["low_freq_factor"]
    longest = 2 * math.pi / plain[-1].item()
    if longest > low_wavelen and not torch.allclose(got[-1], plain[-1] / ROPE_SCALING["factor"], rtol=1e-6, atol=0):
        raise SystemExit(f"llama3 rope scaling not applied: inv_freq[-1] {got[-1].item()} vs plain {plain[-1].item()}")
    if not torch.allclose(got[0], plain[0], rtol=1e-6, atol=0):
        raise SystemExit(f"rope theta not applied: inv_freq[0] {got[0].item()} vs {plain[0].item()}")


def write_tokens(path, tokens):
    """The token file: 256 little-endian int32 (magic 20240520, version, count), then the tokens —
    version 1 (llm.c's) as uint16 when every id fits, else version 2 as uint32."""
    import numpy as np
    wide = int(tokens.max()) > 65535
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 2 if wide else 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u4" if wide else "<u2").tobytes())


def shardtrain_flags(s, out):
    return ["--model", "llama", "--init-from", os.path.join(out, "hf"), "--data", os.path.join(out, "tokens.bin"),
            "--precision", "fp32", "--tf32", "0", "--dropout", "0", "--micro-batch", str(s["batch"]),
            "--grad-accum", "1", "--seq-len", str(s["seq_len"]), "--steps", str(s["steps"]), "--optimizer", "adamw",
            "--lr", repr(s["lr"]), "--beta1", repr(s["beta1"]), "--beta2", repr(s["beta2"]), "--eps", repr(s["eps"]),
            "--weight-decay", repr(s["weight_decay"]), "--clip", repr(s["clip"]), "--lr-schedule", "const",
            "--warmup", "0", "--shuffle", "0"]


def reference(a):
    import numpy as np
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    s = settings(a)
    out = a.out
    os.makedirs(out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.use_deterministic_algorithms(True, warn_only=True)  # a warning, not a stop, where an op has no such path
    device = torch.device(a.device)

    t0 = time.time()
    torch.manual_seed(s["seed"])
    model = LlamaForCausalLM(llama_config(s)).float()  # transformers' init on the CPU: the same weights anywhere
    check_rope(model, s)
    assert model.config._attn_implementation == "eager", model.config._attn_implementation
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "the head must be tied"
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(os.path.join(out, "hf"), safe_serialization=True)
    print(f"LlamaForCausalLM {params / 1e9:.4f} B parameters, initialised and saved in {time.time() - t0:.1f} s",
          flush=True)

    G, T, steps = s["batch"], s["seq_len"], s["steps"]
    tokens = np.random.default_rng(s["seed"]).integers(0, s["vocab"], steps * G * T + 1, dtype=np.int64)
    write_tokens(os.path.join(out, "tokens.bin"), tokens)

    model.to(device)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]  # parameters() yields the tied tensor once
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": s["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=s["lr"], betas=(s["beta1"], s["beta2"]), eps=s["eps"])
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rows, logits0 = [], None
    for step in range(steps):
        t1 = time.time()
        window = torch.from_numpy(tokens[step * G * T: (step + 1) * G * T + 1])  # sequences s·G .. s·G+G−1
        x = window[:-1].view(G, T).to(device)  # (G, T): sequence j = window[j·T : j·T + T]
        y = window[1:].view(G, T).to(device)   # (G, T): shifted by one
        logits = model(input_ids=x).logits     # (G, T, V) f32
        if step == 0:
            with torch.no_grad():
                lf = logits.double()
                logits0 = {"mean": lf.mean().item(), "std": lf.std().item(), "max_abs": lf.abs().max().item(),
                           "first": logits[0, 0, :8].tolist()}
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        del logits
        with torch.no_grad():  # the exact norm of these f32 gradients (module docstring: "grad norm")
            exact = math.sqrt(sum((p.grad.double() ** 2).sum().item() for p in model.parameters()))
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), s["clip"])  # torch's f32 norm, before clipping
        opt.step()
        rows.append({"step": step + 1, "loss": loss.item(), "grad_norm": exact, "torch_grad_norm": norm.item(),
                     "seconds": round(time.time() - t1, 3)})
        print(f"torch step {step + 1}: loss {rows[-1]['loss']:.7f} grad_norm {exact:.7f} (clip_grad_norm_ "
              f"{norm.item():.7f}) ({rows[-1]['seconds']} s)", flush=True)
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    ref = {"model": "llama", "settings": s, "rope_scaling": ROPE_SCALING, "attention": "eager", "dtype": "fp32",
           "device": str(device), "parameters": params, "token_ids_below": s["vocab"], "logits0": logits0,
           "peak_cuda_bytes": peak, "transformers": transformers.__version__, "torch": torch.__version__,
           "steps": rows, "shardtrain_flags": shardtrain_flags(s, out)}
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    if peak is not None:
        print(f"torch peak CUDA memory {peak / 2**30:.2f} GiB")
    print(f"wrote {out}/reference.json, {out}/hf, {out}/tokens.bin")
    return 0


def compare(a):
    ref = json.load(open(a.reference))
    ours = {}
    for line in open(a.metrics):
        if line.strip():
            m = json.loads(line)
            ours[int(m["step"])] = m
    s = ref["settings"]
    print(f"Llama fp32 fidelity, shape {s['shape']}: {s['layers']} layers, C {s['d_model']}, {s['heads']} heads / "
          f"{s['kv_heads']} kv, FFN {s['ffn']}, V {s['vocab']}, tied, llama3 rope; B {s['batch']} T {s['seq_len']}, "
          f"lr {s['lr']}; HF transformers {ref['transformers']} (torch {ref['torch']}, {ref['device']}, "
          f"{ref['attention']} attention)")
    print(f"{'step':>4} | {'HF loss':>12} | {'ours':>12} | {'rel':>8} | {'HF grad norm':>12} | {'ours':>12} | {'rel':>8} "
          f"| torch's f32 norm")
    worst_loss = worst_norm = first_norm = 0.0
    missing = []
    for r in ref["steps"]:
        m = ours.get(r["step"])
        if m is None:
            missing.append(r["step"])
            continue
        el = abs(m["loss"] - r["loss"]) / abs(r["loss"])
        en = abs(m["grad_norm"] - r["grad_norm"]) / abs(r["grad_norm"])
        worst_loss = max(worst_loss, el)
        if r["step"] == 1:
            first_norm = en
        else:
            worst_norm = max(worst_norm, en)
        print(f"{r['step']:>4} | {r['loss']:>12.7f} | {m['loss']:>12.7f} | {el:>8.2e} | {r['grad_norm']:>12.6f} | "
              f"{m['grad_norm']:>12.6f} | {en:>8.2e} | {r.get('torch_grad_norm', float('nan')):.6f}")
    ok = not missing and worst_loss <= LOSS_BOUND and first_norm <= NORM_BOUND_FIRST and worst_norm <= NORM_BOUND
    print(f"worst relative error: loss {worst_loss:.2e} (bound {LOSS_BOUND:g}), grad norm at step 1 {first_norm:.2e} "
          f"(bound {NORM_BOUND_FIRST:g}), after it {worst_norm:.2e} (bound {NORM_BOUND:g})"
          + (f"; steps missing from {a.metrics}: {missing}" if missing else ""))
    print("llama full-size fidelity " + ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reference", help="build, save and train the HF model; write OUT/reference.json")
    r.add_argument("out")
    r.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    r.add_argument("--device", default="cuda")
    for k in ("layers", "d_model", "heads", "kv_heads", "head_dim", "ffn", "vocab", "batch", "seq_len", "steps",
              "seed", "lr"):
        r.add_argument("--" + k.replace("_", "-"), dest=k, default=None)
    c = sub.add_parser("compare", help="shardtrain's metrics against reference.json; exit 1 past a bound")
    c.add_argument("reference")
    c.add_argument("metrics")
    a = p.parse_args()
    return reference(a) if a.cmd == "reference" else compare(a)


if __name__ == "__main__":
    sys.exit(main())
