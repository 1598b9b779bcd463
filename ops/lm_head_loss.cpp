// The fused, chunked LM head + cross-entropy: checks, the chunk rule, autograd (ops/lm_head_loss.h).
#include "ops/lm_head_loss.h"

#include <algorithm>
#include <atomic>
#include <memory>

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

constexpr int64_t kDefaultChunkBytes = int64_t{128} << 20;
std::atomic<int64_t> g_chunk_bytes{kDefaultChunkBytes};

// What backward needs; the f32 gradients are released once scaled (a second backward is an error).
struct Saved {
  Tensor dh, dw;  // (N, C), (V, C) f32, unscaled (×σ, not ×dloss/count); undefined when not needed
  Tensor count;   // () f32
  float sigma = 1.f;
  DType h_dtype = DType::f32, w_dtype = DType::f32;
  bool used = false;
};

// dst = src · dloss / (count · σ) in `dtype`; f32 scales src in place (it is not needed after).
Tensor scaled(Tensor& src, DType dtype, const Tensor& dloss, const Saved& s) {
  Tensor dst = dtype == DType::f32 ? src : Tensor::empty(src.shape(), dtype, src.device());
  if (src.is_cuda())
    cuda::lm_head_loss_scale(src, dloss, s.count, s.sigma, dst);
  else
    cpu::lm_head_loss_scale(src, dloss, s.count, s.sigma, dst);
  src = Tensor();  // the f32 buffer goes as soon as its gradient exists (dst itself in f32)
  return dst;
}

}  // namespace

int64_t set_lm_head_chunk_bytes(int64_t bytes) {
  ST_CHECK(bytes >= 1, ValueError, "set_lm_head_chunk_bytes: " << bytes << " bytes must be ≥ 1");
  return g_chunk_bytes.exchange(bytes);
}

int64_t lm_head_chunk_rows(int64_t V, DType dtype) {
  ST_CHECK(V >= 1, ValueError, "lm_head_chunk_rows: vocabulary " << V);
  const int64_t rows = g_chunk_bytes.load(std::memory_order_relaxed) / (V * static_cast<int64_t>(dtype_size(dtype)));
  return rows >= 256 ? rows / 256 * 256 : std::max<int64_t>(rows, 1);
}

float lm_head_grad_prescale(DType dtype) { return dtype == DType::f16 ? 32768.f : 1.f; }

Tensor lm_head_cross_entropy(const Tensor& h_in, const Tensor& w_in, const Tensor& targets_in, int64_t ignore_index,
                             int64_t chunk_rows) {
  const char* name = "lm_head_cross_entropy";
  check_defined(name, {h_in, w_in, targets_in});
  check_same_device(name, {h_in, w_in, targets_in});
  check_same_dtype(name, {h_in, w_in});
  check_floating(name, h_in);
  check_dtype(name, targets_in, {DType::i32, DType::i64});
  if (h_in.dim() != 2 || w_in.dim() != 2 || h_in.size(1) != w_in.size(1) || targets_in.dim() != 1 ||
      targets_in.size(0) != h_in.size(0) || w_in.size(0) == 0)
    ST_THROW(ShapeError, name << ": h " << h_in.describe() << " (expected (N, C)), w " << w_in.describe()
                              << " (expected (V, C), V ≥ 1) and targets " << targets_in.describe()
                              << " (expected (N)) do not fit");
  ST_CHECK(chunk_rows >= 0, ValueError, name << ": chunk rows " << chunk_rows << " must be ≥ 0 (0: the default)");
  const int64_t N = h_in.size(0), C = h_in.size(1), V = w_in.size(0);
  const int64_t rows = chunk_rows > 0 ? chunk_rows : lm_head_chunk_rows(V, h_in.dtype());
  const bool gh = grad_enabled() && h_in.requires_grad(), gw = grad_enabled() && w_in.requires_grad();
  Tensor h = contiguous_as(h_in, h_in.dtype()), w = contiguous_as(w_in, w_in.dtype());  // (N, C), (V, C)
  Tensor targets = contiguous_as(targets_in, targets_in.dtype());                        // (N)
  const Device dev = h.device();
  auto saved = std::make_shared<Saved>();
  saved->sigma = lm_head_grad_prescale(h.dtype());
  saved->h_dtype = h.dtype();
  saved->w_dtype = w.dtype();
  saved->count = Tensor::empty({}, DType::f32, dev);
  if (gh) saved->dh = Tensor::empty({N, C}, DType::f32, dev);
  if (gw) saved->dw = Tensor::empty({V, C}, DType::f32, dev);
  Tensor loss = Tensor::empty({}, DType::f32, dev);  // ()
  {
    NoGradGuard ng;
    Tensor* dh = gh ? &saved->dh : nullptr;
    Tensor* dw = gw ? &saved->dw : nullptr;
    if (h.is_cuda())
      cuda::lm_head_loss_fwd(h, w, targets, ignore_index, rows, saved->sigma, loss, saved->count, dh, dw);
    else
      cpu::lm_head_loss_fwd(h, w, targets, ignore_index, rows, saved->sigma, loss, saved->count, dh, dw);
  }
  // backward: dloss () → dh (N, C) in h's dtype, dw (V, C) in w's dtype, fresh tensors
  attach_grad_fn(loss, name, {h_in, w_in}, [saved](const Tensor& g) {
    ST_CHECK(!saved->used, ValueError,
             "lm_head_cross_entropy: backward ran twice (its gradients are made in the forward and handed out once)");
    saved->used = true;
    Tensor dloss = contiguous_as(g, DType::f32);
    Tensor dh = saved->dh.defined() ? scaled(saved->dh, saved->h_dtype, dloss, *saved) : Tensor();
    Tensor dw = saved->dw.defined() ? scaled(saved->dw, saved->w_dtype, dloss, *saved) : Tensor();
    return std::vector<Tensor>{dh, dw};
  });
  return loss;
}

}  // namespace st::ops
