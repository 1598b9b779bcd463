// The GPT's layers on a KV cache (runtime/nn/kv_cache.h), for the GPT and its tensor-parallel
// form: the same arithmetic as their forward() for the step's new positions, the attention over
// every cached position of the row. A tensor-parallel block caches only its own heads
// (B, H/tp, S, D), so the cache splits over the tp group like the weights.
#include <cmath>

#include "models/gpt.h"
#include "models/gpt_tp.h"
#include "ops/elementwise.h"
#include "ops/mlp.h"

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

void check_ids(const Tensor& ids, const runtime::CacheStep& step) {
  ST_CHECK(ids.dim() == 2 && ids.size(1) == step.new_tokens, ShapeError,
           "GPT: cached token ids must be (B, " << step.new_tokens << "), got " << shape_str(ids.shape()));
}

}  // namespace

Tensor GptEmbedding::forward_cached(const Tensor& ids, runtime::KvSlot&, const runtime::CacheStep& step) {
  check_ids(ids, step);
  return ops::add(wte->forward(ids), wpe->forward(step.positions));  // (B, T, C); eval: no dropout
}

Tensor GptBlock::forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) {
  Tensor a = attn_proj->forward(cached_attention(c_attn->forward(ln_1->forward(x)), n_head, head_dim, slot, step));
  Tensor h = ops::add(x, a);
  return ops::add(h, mlp(ln_2->forward(h)));
}

Tensor TpGptEmbedding::forward_cached(const Tensor& ids, runtime::KvSlot&, const runtime::CacheStep& step) {
  check_ids(ids, step);
  return ops::add(wte->forward(ids), wpe->forward(step.positions));  // (B, T, C), summed over the tp group
}

Tensor TpGptBlock::forward_cached(const Tensor& x, runtime::KvSlot& slot, const runtime::CacheStep& step) {
  Tensor qkv = attn->c_attn->forward(ln_1->forward(x));  // (B, T, 3C/tp), this rank's heads
  Tensor a = attn->c_proj->forward(cached_attention(qkv, attn->local_heads, attn->head_dim, slot, step));
  Tensor h = ops::add(x, a);
  return ops::add(h, mlp->forward(ln_2->forward(h)));
}

}  // namespace st::models
