// The GPT-2 tensor-parallel rule, keyed on Hugging Face's parameter names (Conv1D layout, see
// models/gpt.h): which tensors split over the tp group and along which dim (Megatron's column /
// row split). runtime/parallel/tp_shard.h applies it.
//
// GPT-2 (HF names, Conv1D layout, see models/gpt.h), gpt_tp_shard_rule:
//   transformer.wte.weight (V, C)          split dim 0, padded to Vp (rows [r·Vp/tp, ...))
//   *.attn.c_attn.weight (C, 3C), bias (3C) split last dim, chunks 3 (this rank's q, k, v heads)
//   *.mlp.c_fc.weight (C, 4C), bias (4C)    split last dim (column parallel)
//   *.attn.c_proj.weight (C, C)             split dim 0 (row parallel); bias replicated
//   *.mlp.c_proj.weight (4C, C)             split dim 0 (row parallel); bias replicated
//   wpe, ln_1, ln_2, ln_f                   replicated
// Any other name is a ValueError (a silent "replicated" would train a wrong model).
#pragma once
#include <cstdint>

#include "runtime/common/shard_spec.h"

namespace st::models {

// vocab_size is the unpadded V of wte.
runtime::ShardRule gpt_tp_shard_rule(int64_t vocab_size);

}  // namespace st::models
