// The decoder's blocks on a KV cache (runtime/nn/kv_cache.h): the same arithmetic as forward()
// for the step's new positions, the attention over every cached position of the row
// (runtime/nn/cached_attention.h: grouped-query heads, q and k rotated by each row's positions).
// Under tp a block caches only its own key/value heads (B, Hkv/tp, S, D), so the cache splits over
// the group like the weights.
#include "models/decoder/decoder_layers.h"
#include "ops/elementwise.h"
#include "runtime/nn/cached_attention.h"

namespace st::models {

Tensor DecoderBlock::forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) {
  const ops::RopeTable* table = rope_ ? rope_->covering(step.span) : nullptr;
  Tensor a = o_->forward(runtime::cached_attention_qkv(qkv(norm1_->forward(x)), heads_, kv_heads_, table, slot, step));
  Tensor h = ops::add(x, a);
  return ops::add(h, mlp(norm2_->forward(h)));
}

}  // namespace st::models
