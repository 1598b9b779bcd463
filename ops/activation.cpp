#include "ops/activation.h"

#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::ops {
namespace {

using Fwd = void (*)(const Tensor&, Tensor&);
using Bwd = void (*)(const Tensor&, const Tensor&, Tensor&);

// One entry for every activation: check, run the backend forward, attach the backward.
Tensor activation(const char* name, const Tensor& x_in, Fwd cpu_fwd, Fwd cuda_fwd, Bwd cpu_bwd, Bwd cuda_bwd) {
  check_defined(name, {x_in});
  check_floating(name, x_in);
  Tensor x = contiguous_as(x_in, x_in.dtype());
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  {
    NoGradGuard ng;
    (x.is_cuda() ? cuda_fwd : cpu_fwd)(x, y);
  }
  // backward: x (...), dy (...) → dx (...), fresh tensor
  attach_grad_fn(y, name, {x_in}, [x, cpu_bwd, cuda_bwd](const Tensor& g) {
    Tensor dy = contiguous_as(g, x.dtype());
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    (x.is_cuda() ? cuda_bwd : cpu_bwd)(x, dy, dx);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace

Tensor gelu(const Tensor& x) {
  return activation("gelu", x, cpu::gelu_fwd, cuda::gelu_fwd, cpu::gelu_bwd, cuda::gelu_bwd);
}

Tensor relu(const Tensor& x) {
  return activation("relu", x, cpu::relu_fwd, cuda::relu_fwd, cpu::relu_bwd, cuda::relu_bwd);
}

Tensor silu(const Tensor& x) {
  return activation("silu", x, cpu::silu_fwd, cuda::silu_fwd, cpu::silu_bwd, cuda::silu_bwd);
}

}  // namespace st::ops
