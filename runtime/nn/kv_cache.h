// KV cache for incremental decoding: each attention layer keeps the keys and values of every
// position it has seen, so a prompt runs through the model once and each new token then costs
// one position (its q against the cached K, V) instead of the whole context again.
//
// Layout (padded, right-aligned at 0): one slot per attention layer holds
//   k, v (B, Hkv, capacity, D), row b's position p at [b, :, p, :]
// with Hkv the key/value heads (= the query heads H for multi-head attention, fewer for
// grouped-query attention: query head h reads key/value head h / (H/Hkv)). A model with rotary
// embedding caches its keys already rotated (runtime/nn/cached_attention.h).
// Rows of a batch may hold different lengths (prompts of different lengths): a call adds T new
// positions to every row, row b's at [start[b], start[b] + T); its queries see the keys at
// positions ≤ their own (an additive mask of −inf elsewhere), so a row computes exactly what it
// computes alone — padding slots of a shorter row (written by the right-padded prompt pass) are
// never seen: they are overwritten by that row's own later positions before its queries reach
// them. Positions are the row's own (0 … its length), not the slot of a packed buffer.
// Everything is tensor ops (matmul, softmax, narrow/copy_), so the cache runs wherever the
// model's tensors are (CPU or CUDA) without a kernel of its own.
//
// CachedLayer is what a model's layer implements to run on a cache (models/decoder/decoder_cached.cpp
// does, for every decoder family and its tensor-parallel form); the generation loop (runtime/generate/generation.h) calls it.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

// One call's positions: T new tokens for each of B rows.
struct CacheStep {
  std::vector<int64_t> start;  // (B) positions already cached per row = the first new position
  std::vector<int64_t> last;   // (B) index in [0, T) of each row's position whose logits are wanted
  int64_t new_tokens = 0;      // T
  int64_t span = 0;            // S = max(start) + T: the cached positions any row can see
  Tensor positions;            // (B, T) i64: start[b] + t, on the model's device
  Tensor mask;                 // (B, 1, T, S) f32: 0 where query t of row b sees key s, −inf elsewhere
};
// `lengths[b]` new tokens for row b (right-padded to T = max of them) after `start[b]` cached.
CacheStep make_cache_step(const std::vector<int64_t>& start, const std::vector<int64_t>& lengths, Device device);

// The keys and values of one attention layer.
class KvSlot {
 public:
  // q (B, H, T, D), k, v (B, Hkv, T, D) of the step's new positions, Hkv dividing H → out
  // (B, H, T, D): writes k, v at each row's positions, then per query head h
  // softmax(q_h · K_g[:S]ᵀ / √D + mask) · V_g[:S] with g = h / (H/Hkv). Hkv = H runs exactly the
  // multi-head ops (the same products and softmax the GPT always ran).
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const CacheStep& step);
  int64_t bytes() const;

 private:
  friend class KvCache;
  int64_t capacity_ = 0;
  Tensor k_, v_;  // (B, Hkv, capacity, D), allocated on first use with k's dtype and device
};

// The slots of one batch (or micro-batch), one per attention layer, keyed by the layer's index
// in the full model.
class KvCache {
 public:
  explicit KvCache(int64_t capacity) : capacity_(capacity) {}
  KvSlot& slot(int layer);
  int64_t capacity() const { return capacity_; }
  int64_t bytes() const;  // K and V of every slot allocated

 private:
  int64_t capacity_;
  std::map<int, KvSlot> slots_;
};

// A layer that runs on a cache. x: token ids (B, T) for the model's first layer, hidden
// (B, T, C) otherwise; returns what forward() returns for these positions (the last layer's
// logits for every position given: the generation loop hands it only the wanted ones).
class CachedLayer {
 public:
  virtual ~CachedLayer() = default;
  virtual Tensor forward_cached(const Tensor& x, KvSlot& slot, const CacheStep& step) = 0;
};

}  // namespace st::runtime
