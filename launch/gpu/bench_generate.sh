#!/usr/bin/env bash
# One command, on the GPU machine: GPT-2 124M shapes (random HF-initialised weights), 256 new
# tokens, batch 1 and 32 — tokens/s of shardtrain generate with the KV cache, without it, and of
# Hugging Face's generate (with its cache) on the same weights, and whether shardtrain's greedy
# tokens equal HF's in fp32 (exit 1 if not). Needs python3 with torch and transformers.
#   launch/gpu/bench_generate.sh [BUILD_DIR (default build)] [OUT_DIR (default runs/bench_generate)]
set -euo pipefail
BUILD="${1:-build}"
OUT="${2:-runs/bench_generate}"
cmake --build "$BUILD" -j --target bench_generate
python3 tests/bench/generate_hf.py "$OUT" --device cuda --new-tokens 256 --batches 1,32
"$BUILD/tests/bench/bench_generate" --model "$OUT/model" --reference "$OUT/reference.json" --device cuda
