// Cached grouped-query attention with rotary embedding (runtime/nn/cached_attention.h): split the
// packed projection into heads, rotate q and k by the step's positions, attend over the slot.
#include "runtime/nn/cached_attention.h"

#include "tensor/error.h"

namespace st::runtime {

Tensor cached_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, const ops::RopeTable* rope,
                            KvSlot& slot, const CacheStep& step) {
  ST_CHECK(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0 && qkv.dim() == 3 && qkv.size(2) > 0 &&
               qkv.size(2) % (heads + 2 * kv_heads) == 0,
           ShapeError,
           "cached attention: qkv " << shape_str(qkv.shape()) << " with " << heads << " query and " << kv_heads
                                    << " key/value heads (expected (B, T, (heads + 2·kv_heads)·D))");
  const int64_t B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / (heads + 2 * kv_heads);
  ST_CHECK(!rope || rope->head_dim() == D, ShapeError,
           "cached attention: the rotary table is for head dim " << rope->head_dim() << ", the heads have " << D);
  auto part = [&](int64_t first, int64_t n, bool roped) {  // heads [first, first + n) of qkv → (B, n, T, D)
    Tensor x = qkv.narrow(2, first * D, n * D).reshape({B, T, n, D});
    if (roped && rope) x = ops::apply_rope(x, *rope, step.positions);
    return x.transpose(1, 2).contiguous();
  };
  Tensor y = slot.attend(part(0, heads, true), part(heads, kv_heads, true), part(heads + kv_heads, kv_heads, false),
                         step);                                      // (B, H, T, D)
  return y.transpose(1, 2).contiguous().reshape({B, T, heads * D});  // (B, T, H·D)
}

}  // namespace st::runtime
