#!/usr/bin/env python3
"""Loads a shardtrain checkpoint folder with Hugging Face's GPT2LMHeadModel.from_pretrained, as a
user would, and checks that it is the model the runtime trained (launch/gpu/run_memory_gpu.sh).

  python3 launch/gpu/hf_from_pretrained.py CKPT_DIR TOKENS.bin STEP B T RUNTIME_LOSS

CKPT_DIR is a step_NNNNNNNN/ folder (config.json, model.safetensors.index.json and the shards
each rank wrote). The check: no missing and no unexpected keys (output_loading_info), and the
mean cross-entropy of the checkpoint's weights on the batch a resumed run trains on next
(tokens[STEP·B·T : STEP·B·T + B·T + 1] of the llm.c-format token file: a 256-int32 header, then
uint16 tokens; inputs the first B·T, targets shifted by one) equals RUNTIME_LOSS, the loss the
runtime printed for that step after resuming from CKPT_DIR, within 2e-5 relative: both are fp32,
the runtime's on CUDA and this one on the CPU, and their sums over B·T·V terms differ in rounding
order only (measured differences are ~1e-7 for the 124M GPT; docs/testing.md).
Prints one line per fact and exits 1 when a check fails.
"""
import sys

import numpy as np
import torch
from transformers import GPT2LMHeadModel


def main():
    ckpt, tokens_path, step, B, T, runtime_loss = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), float(sys.argv[6])
    model, info = GPT2LMHeadModel.from_pretrained(ckpt, output_loading_info=True, torch_dtype=torch.float32)
    model.eval()
    bad = {k: v for k, v in info.items() if v}
    print(f"from_pretrained({ckpt}): missing {info.get('missing_keys')}, unexpected {info.get('unexpected_keys')}")
    raw = np.fromfile(tokens_path, dtype=np.int32, count=256)
    assert raw[0] == 20240520, f"{tokens_path}: not an llm.c token file"
    toks = np.fromfile(tokens_path, dtype=np.uint16, offset=256 * 4).astype(np.int64)
    start = step * B * T
    chunk = torch.from_numpy(toks[start:start + B * T + 1])
    x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
    with torch.no_grad():
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)).item()
    rel = abs(loss - runtime_loss) / abs(runtime_loss)
    print(f"loss of the checkpoint on step {step + 1}'s batch: transformers {loss:.7f}, shardtrain {runtime_loss:.7f}, "
          f"relative difference {rel:.2e}")
    ok = not bad and rel <= 2e-5
    print("hf from_pretrained check " + ("passed" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
