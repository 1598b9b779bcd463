// The tiny models the CPU fp8 tests train (test_fp8_train, test_fp8_delayed): a learnable token
// stream and a 2-block config (C 64, V 64, T 16, B 4 × K 2, 20 AdamW steps at lr 3e-3).
#pragma once
#include <string>

#include "runtime/setup/train_config.h"

namespace st::runtime::test {

// dir/tokens.bin (created with dir): 20 000 tokens, mostly i mod 37, some noise — the stream
// layouts_common uses, so the loss falls within a few steps.
std::string fp8_token_file(const std::string& dir);

// family "gpt", "llama" (kv_heads 2, ffn 96: grouped-query) or "mlp"; precision left at its default
// (the callers set fp8 / bf16 and the scaling mode).
TrainConfig fp8_tiny_config(const std::string& family, const std::string& dir);

}  // namespace st::runtime::test
