// The context-parallel form of ops::causal_attention_qkv (issue 34): the packed projection a
// transformer block computes for its rank's two sequence chunks, attended over the whole sequence
// by ring_attention (runtime/parallel/ring_attention.h) over the cp group.
//
//   qkv (B, Tl, (H + 2·Hkv)·D) = [q heads (H·D) | k heads (Hkv·D) | v heads (Hkv·D)], Tl = 2C the
//   rank's two chunks in local order (context_shard.h) → out (B, Tl, H·D), heads joined.
//
// With `rope`, q and k of local row t are rotated by the angles of its GLOBAL position
// `positions[t]` (positions (Tl) i64 on qkv's device: context_position_ids) through
// ops::apply_rope — the expression the one-process op applies as it reads them (ops/rope.h: every
// backend computes the same rounding), so a roped operand has the one-process bits. Then the heads
// are split to (B, H, Tl, D) / (B, Hkv, Tl, D) and the ring runs. Differentiable (narrow, reshape,
// transpose, apply_rope, the ring's own backward); collective over `cp` in the forward and the
// backward (ring_attention.h). The table must outlive the backward (the model owns it).
#pragma once
#include <cstdint>

#include "ops/rope.h"
#include "runtime/parallel/ring_attention.h"

namespace st::runtime {

Tensor ring_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, const CpGroup& cp,
                          const ops::RopeTable* rope = nullptr, const Tensor& positions = Tensor());

}  // namespace st::runtime
