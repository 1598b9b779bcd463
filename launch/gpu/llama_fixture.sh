#!/bin/sh
# Makes tests/fixtures/hf_llama_tiny with transformers (tests/fixtures/make_hf_llama_tiny.py, CPU
# torch is enough) and checks that a checkpoint shardtrain writes under --model llama at
# pp 2 × tp 2 loads with LlamaForCausalLM.from_pretrained: no missing, unexpected or mismatched
# keys and the same weights (issue 31's "from_pretrained loads a checkpoint written under
# pp 2 × tp 2"). Run from the repository root after building (BUILD, default build):
#   launch/gpu/llama_fixture.sh [BUILD]
# Then commit the fixture's files: tests/fixtures/hf_llama_tiny/{config.json,
# generation_config.json, model.safetensors, tokens.bin, logits0.safetensors, reference.json}.
set -eu
BUILD=${1:-build}
FX=tests/fixtures/hf_llama_tiny
python3 tests/fixtures/make_hf_llama_tiny.py "$FX"
python3 tests/fixtures/make_hf_llama_tiny.py "$FX" --check
D=$(mktemp -d)
mpirun -np 4 --oversubscribe --allow-run-as-root "$BUILD/shardtrain" train --model llama --init-from "$FX" \
  --data "$FX/tokens.bin" --device cpu --tp 2 --pp 2 --micro-batch 1 --grad-accum 4 --seq-len 32 --steps 2 \
  --lr 1e-3 --lr-schedule const --warmup 0 --checkpoint-dir "$D/ckpt" --metrics "$D/metrics.jsonl" --progress 0
python3 tests/fixtures/make_hf_llama_tiny.py --load-ours "$D/ckpt/step_00000002"
rm -rf "$D"
