// The language-model loss: mean cross-entropy over every position, in f32 whatever the logits'
// dtype. LanguageModel::loss defaults to it; a tensor-parallel model replaces it by the
// vocabulary-parallel form (its logits are a vocabulary shard).
#pragma once
#include "tensor/tensor.h"

namespace st::runtime {

// logits (B, T, V), targets (B, T) i64 → () f32.
Tensor lm_loss(const Tensor& logits, const Tensor& targets);

}  // namespace st::runtime
