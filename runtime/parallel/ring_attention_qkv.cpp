// Packed q | k | v → rope at global positions → heads split → the ring → heads joined (see the header).
#include "runtime/parallel/ring_attention_qkv.h"

#include <vector>

#include "tensor/error.h"

namespace st::runtime {

Tensor ring_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, const CpGroup& cp,
                          const ops::RopeTable* rope, const Tensor& positions) {
  ST_CHECK(qkv.defined() && qkv.dim() == 3 && heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0 &&
               qkv.size(2) % (heads + 2 * kv_heads) == 0,
           ShapeError,
           "ring_attention_qkv: qkv " << (qkv.defined() ? shape_str(qkv.shape()) : std::string("undefined")) << " with "
                                      << heads << " heads over " << kv_heads
                                      << " key/value heads (expected (B, T, (H + 2·Hkv)·D), Hkv dividing H)");
  const int64_t B = qkv.size(0), Tl = qkv.size(1), D = qkv.size(2) / (heads + 2 * kv_heads);
  const int64_t Aq = heads * D, Akv = kv_heads * D;
  Tensor q = qkv.narrow(2, 0, Aq).reshape({B, Tl, heads, D});        // (B, Tl, H, D)
  Tensor k = qkv.narrow(2, Aq, Akv).reshape({B, Tl, kv_heads, D});   // (B, Tl, Hkv, D)
  Tensor v = qkv.narrow(2, Aq + Akv, Akv).reshape({B, Tl, kv_heads, D});
  if (rope) {
    ST_CHECK(positions.defined() && positions.dim() == 1 && positions.size(0) == Tl, ShapeError,
             "ring_attention_qkv: rotary positions must be (" << Tl << ") i64, got "
                                                             << (positions.defined() ? shape_str(positions.shape())
                                                                                     : std::string("undefined")));
    // apply_rope takes (B, T) positions: the same row of global positions for every sequence
    const Tensor pos = Tensor::cat(std::vector<Tensor>(static_cast<size_t>(B), positions.reshape({1, Tl})), 0);
    q = ops::apply_rope(q, *rope, pos);
    k = ops::apply_rope(k, *rope, pos);
  }
  auto heads_first = [](const Tensor& x) { return x.transpose(1, 2).contiguous(); };  // (B, n, Tl, D)
  Tensor y = ring_attention(heads_first(q), heads_first(k), heads_first(v), cp);       // (B, H, Tl, D)
  return y.transpose(1, 2).contiguous().reshape({B, Tl, Aq});                          // (B, Tl, H·D)
}

}  // namespace st::runtime
