// The decoder's blocks on a KV cache (runtime/nn/kv_cache.h): the same arithmetic as forward()
// for the step's new positions, the attention over every cached position of the row. Under tp a
// block caches only its own heads (B, H/tp, S, D), so the cache splits over the group like the
// weights.
#include "models/decoder/decoder_layers.h"
#include "ops/elementwise.h"

namespace st::models {
namespace {

// qkv (B, T, 3A) packed [q | k | v] of `heads` heads → the slot's attention → (B, T, A)
Tensor cached_attention(const Tensor& qkv, int64_t heads, int64_t head_dim, runtime::KvSlot& slot,
                        const runtime::CacheStep& step) {
  const int64_t B = qkv.size(0), T = qkv.size(1), A = heads * head_dim;
  ST_CHECK(qkv.dim() == 3 && qkv.size(2) == 3 * A, ShapeError,
           "attention: qkv must be (B, T, " << 3 * A << "), got " << shape_str(qkv.shape()));
  auto split = [&](int64_t i) {  // (B, T, A) piece → (B, H, T, D)
    return qkv.narrow(2, i * A, A).reshape({B, T, heads, head_dim}).transpose(1, 2).contiguous();
  };
  Tensor y = slot.attend(split(0), split(1), split(2), step);  // (B, H, T, D)
  return y.transpose(1, 2).contiguous().reshape({B, T, A});
}

}  // namespace

Tensor DecoderBlock::forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) {
  ST_CHECK(s_.kv_heads == s_.heads && s_.position == PositionKind::learned, ValueError,
           s_.family << ": cached grouped-query or rotary attention needs the KV cache's kv-heads form");
  Tensor a = o_->forward(cached_attention(qkv(norm1_->forward(x)), heads_, s_.head_dim, slot, step));
  Tensor h = ops::add(x, a);
  return ops::add(h, mlp(norm2_->forward(h)));
}

}  // namespace st::models
