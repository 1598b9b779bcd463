// CUDA GELU (tanh form), ReLU and SiLU, forward and backward, through the vectorised pointwise
// map (ops/cuda/pointwise.cuh). Same formulas as ops/cpu/activation.cpp; backward writes dx (=).
#include "ops/activation.h"
#include "ops/cuda/gelu.cuh"
#include "ops/cuda/pointwise.cuh"
#include "ops/cuda/silu.cuh"

namespace st::ops::cuda {
namespace {

// kernels (functors run inside map1_kernel / map2_kernel)

struct GeluFwd {
  __device__ float operator()(int64_t, float v) const { return gelu_tanh(v); }
};
struct GeluBwd {  // (x, dy) → dx
  __device__ float operator()(int64_t, float v, float g) const { return gelu_tanh_grad(v, g); }
};
struct ReluFwd {
  __device__ float operator()(int64_t, float v) const { return v > 0.f ? v : 0.f; }
};
struct ReluBwd {
  __device__ float operator()(int64_t, float v, float g) const { return v > 0.f ? g : 0.f; }
};
struct SiluFwd {
  __device__ float operator()(int64_t, float v) const { return silu_f32(v); }
};
struct SiluBwd {  // (x, dy) → dx
  __device__ float operator()(int64_t, float v, float g) const { return silu_grad_f32(v, g); }
};

// launchers

template <class F>
void unary(const char* op, const Tensor& x, Tensor& y, F f) {
  check_contiguous_cuda(op, {&x, &y});
  visit_float_dtype(x.dtype(), op, [&](auto tag) { map1<decltype(tag)>(x, y, f); });
}
template <class F>
void binary(const char* op, const Tensor& x, const Tensor& dy, Tensor& dx, F f) {
  check_contiguous_cuda(op, {&x, &dy, &dx});
  visit_float_dtype(x.dtype(), op, [&](auto tag) { map2<decltype(tag)>(x, dy, dx, f); });
}
}  // namespace

void gelu_fwd(const Tensor& x, Tensor& y) { unary("gelu", x, y, GeluFwd{}); }
void gelu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) { binary("gelu", x, dy, dx, GeluBwd{}); }
void relu_fwd(const Tensor& x, Tensor& y) { unary("relu", x, y, ReluFwd{}); }
void relu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) { binary("relu", x, dy, dx, ReluBwd{}); }
void silu_fwd(const Tensor& x, Tensor& y) { unary("silu", x, y, SiluFwd{}); }
void silu_bwd(const Tensor& x, const Tensor& dy, Tensor& dx) { binary("silu", x, dy, dx, SiluBwd{}); }

}  // namespace st::ops::cuda
