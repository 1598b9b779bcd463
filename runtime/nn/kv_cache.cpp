// KV cache (runtime/nn/kv_cache.h): the mask and positions are built on the host (B·T·S values,
// small) and moved to the model's device; the attention is matmul / softmax tensor ops.
#include "runtime/nn/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/softmax.h"
#include "tensor/error.h"

namespace st::runtime {

CacheStep make_cache_step(const std::vector<int64_t>& start, const std::vector<int64_t>& lengths, Device device) {
  ST_CHECK(!start.empty() && start.size() == lengths.size(), ValueError,
           "kv cache: " << start.size() << " row starts for " << lengths.size() << " row lengths");
  CacheStep s;
  s.start = start;
  const int64_t B = static_cast<int64_t>(start.size());
  s.new_tokens = *std::max_element(lengths.begin(), lengths.end());
  ST_CHECK(s.new_tokens > 0, ValueError, "kv cache: a step needs at least one new token");
  const int64_t T = s.new_tokens;
  s.span = *std::max_element(start.begin(), start.end()) + T;
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  std::vector<float> mask(static_cast<size_t>(B * T * s.span), -std::numeric_limits<float>::infinity());
  for (int64_t b = 0; b < B; ++b) {
    ST_CHECK(lengths[b] >= 1, ValueError, "kv cache: row " << b << " has no new token");
    s.last.push_back(lengths[b] - 1);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = start[b] + t;  // padding positions (t ≥ lengths[b]) only see real keys too
      pos[b * T + t] = p;
      for (int64_t k = 0; k <= p; ++k) mask[(b * T + t) * s.span + k] = 0.f;
    }
  }
  s.positions = Tensor::from_vector(pos, {B, T});
  s.mask = Tensor::from_vector(mask, {B, 1, T, s.span});
  if (device != Device::cpu) {
    s.positions = s.positions.to(device);
    s.mask = s.mask.to(device);
  }
  return s;
}

Tensor KvSlot::attend(const Tensor& q, const Tensor& k, const Tensor& v, const CacheStep& step) {
  ST_CHECK(q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && k.size(0) == q.size(0) && k.size(2) == q.size(2) &&
               k.size(3) == q.size(3) && k.size(1) >= 1 && q.size(1) % k.size(1) == 0,
           ShapeError,
           "kv cache: q must be (B, H, T, D) and k, v one (B, Hkv, T, D) shape with Hkv dividing H, got q "
               << shape_str(q.shape()) << ", k " << shape_str(k.shape()) << ", v " << shape_str(v.shape()));
  const int64_t B = q.size(0), H = q.size(1), Hkv = k.size(1), T = q.size(2), D = q.size(3);
  ST_CHECK(T == step.new_tokens && B == static_cast<int64_t>(step.start.size()), ShapeError,
           "kv cache: q " << shape_str(q.shape()) << " does not match the step's " << step.start.size() << " rows of "
                          << step.new_tokens << " tokens");
  ST_CHECK(step.span <= capacity_, ValueError,
           "kv cache: " << step.span << " positions exceed the cache's capacity of " << capacity_);
  if (!k_.defined()) {
    k_ = Tensor::zeros({B, Hkv, capacity_, D}, k.dtype(), k.device());
    v_ = Tensor::zeros({B, Hkv, capacity_, D}, k.dtype(), k.device());
  }
  ST_CHECK(k_.size(0) == B && k_.size(1) == Hkv && k_.size(3) == D, ShapeError,
           "kv cache: slot holds " << shape_str(k_.shape()) << ", the step brings " << shape_str(k.shape()));
  const bool same_start = std::all_of(step.start.begin(), step.start.end(), [&](int64_t s) { return s == step.start[0]; });
  if (same_start) {  // one copy for the whole batch
    k_.narrow(2, step.start[0], T).copy_(k);
    v_.narrow(2, step.start[0], T).copy_(v);
  } else {
    for (int64_t b = 0; b < B; ++b) {
      k_.narrow(0, b, 1).narrow(2, step.start[b], T).copy_(k.narrow(0, b, 1));
      v_.narrow(0, b, 1).narrow(2, step.start[b], T).copy_(v.narrow(0, b, 1));
    }
  }
  const int64_t S = step.span, rep = H / Hkv;
  Tensor keys = S == capacity_ ? k_ : k_.narrow(2, 0, S).contiguous();  // (B, Hkv, S, D)
  Tensor vals = S == capacity_ ? v_ : v_.narrow(2, 0, S).contiguous();  // (B, Hkv, S, D)
  // a group's query heads are consecutive: q (B, H, T, D) = (B, Hkv, rep·T, D) row-major, so one
  // batched product per key/value head serves all of them (rep = 1: the plain multi-head shapes)
  Tensor qg = rep == 1 ? q : q.contiguous().reshape({B, Hkv, rep * T, D});
  Tensor scores = ops::scale(ops::matmul(qg, keys, false, true), 1.0 / std::sqrt(static_cast<double>(D)));
  if (rep > 1) scores = scores.reshape({B, H, T, S});  // (B, H, T, S)
  Tensor mask = step.mask.dtype() == scores.dtype() ? step.mask : step.mask.to(scores.dtype());
  Tensor p = ops::softmax(ops::add(scores, mask));  // (B, H, T, S), mask broadcast over H
  if (rep == 1) return ops::matmul(p, vals);        // (B, H, T, D)
  return ops::matmul(p.reshape({B, Hkv, rep * T, S}), vals).reshape({B, H, T, D});
}

int64_t KvSlot::bytes() const { return k_.defined() ? 2 * static_cast<int64_t>(k_.nbytes()) : 0; }

KvSlot& KvCache::slot(int layer) {
  KvSlot& s = slots_[layer];
  s.capacity_ = capacity_;
  return s;
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (const auto& [i, s] : slots_) n += s.bytes();
  return n;
}

}  // namespace st::runtime
