// Attention of a packed projection over a KV cache (runtime/nn/kv_cache.h) for decoding, with
// grouped-query heads and rotary embedding: the cached counterpart of
// ops::causal_attention_qkv(qkv, H, Hkv, rope, offset) for a layer's forward_cached. q and k of the
// step's new positions are rotated by each row's own positions (CacheStep::positions, so rows of
// different lengths each turn by their own), with ops::apply_rope: the same expression and bits as
// the fused op's rotation (ops/rope.h); the cache keeps the rotated keys, Hkv heads of them.
#pragma once
#include <cstdint>

#include "ops/rope.h"
#include "runtime/nn/kv_cache.h"

namespace st::runtime {

// qkv (B, T, (H + 2·Hkv)·D) = [q heads | k heads | v heads] of the step's T new positions (T =
// step.new_tokens) → out (B, T, H·D), heads joined. rope null: no rotation (the GPT's form when
// Hkv = H). Positions must lie inside the table (ValueError).
Tensor cached_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, const ops::RopeTable* rope,
                            KvSlot& slot, const CacheStep& step);

}  // namespace st::runtime
