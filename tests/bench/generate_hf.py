#!/usr/bin/env python3
"""Writes what tests/bench/bench_generate.cpp compares against: a GPT-2 of 124M shapes (vocab
50257, 1024 positions, 12 layers, d_model 768, 12 heads) with transformers' random initial
weights (seed 1), saved by save_pretrained, and Hugging Face's greedy generate with its KV cache
on the same weights, timed. Needs torch and transformers (the GPU machine has them).

  python3 tests/bench/generate_hf.py OUT [--device cuda] [--new-tokens 256] [--batches 1,32]

OUT/model/                 config.json + model.safetensors (save_pretrained)
OUT/reference.json         {"prompts": [[ids]] (max batch rows of prompt_len random ids),
                            "new_tokens", "transformers", "hf": {"B": {"tokens": [[ids]],
                            "seconds"}}} — seconds of one generate call after a warm-up, prompt
                            pass included, synchronised.
fp32 with TF32 off on both sides, so the greedy tokens can be compared one for one. No eos: the
generation config's eos_token_id is None, so every row makes exactly new_tokens tokens.
"""
import argparse
import json
import os
import time

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--prompt-len", type=int, default=32)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).eval()
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(os.path.join(a.out, "model"), safe_serialization=True)
    model = model.to(a.device)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    batches = [int(b) for b in a.batches.split(",")]
    g = torch.Generator().manual_seed(2)
    prompts = torch.randint(0, cfg.vocab_size, (max(batches), a.prompt_len), generator=g)
    ref = {"prompts": prompts.tolist(), "new_tokens": a.new_tokens, "transformers": transformers.__version__, "hf": {}}
    for b in batches:
        ids = prompts[:b].to(a.device)
        mask = torch.ones_like(ids)
        kw = dict(attention_mask=mask, do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            model.generate(ids, max_new_tokens=4, **kw)  # warm-up
            if a.device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens, **kw)
            if a.device == "cuda":
                torch.cuda.synchronize()
            sec = time.perf_counter() - t0
        new = out[:, ids.shape[1]:].tolist()
        ref["hf"][str(b)] = {"tokens": new, "seconds": sec}
        print(f"HF generate batch {b}: {b * a.new_tokens / sec:.1f} tokens/s ({sec:.3f} s)")
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f)


if __name__ == "__main__":
    main()
