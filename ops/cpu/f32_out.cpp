#include "ops/cpu/f32_out.h"

#include "tensor/autograd.h"

namespace st::ops::cpu {

F32Out::F32Out(Tensor& out) : out_(out) {
  require_contiguous_cpu("F32Out", out);
  buf_ = out.dtype() == DType::f32 ? out : Tensor::empty(out.shape(), DType::f32, Device::cpu);
}

void F32Out::store() {
  if (buf_.same(out_)) return;
  NoGradGuard ng;
  out_.copy_(buf_);
}

void require_contiguous_cpu(const char* op, const Tensor& t) {
  if (!t.defined()) ST_THROW(ValueError, op << ": undefined tensor passed to a CPU kernel");
  if (t.is_cuda() || !t.is_contiguous())
    ST_THROW(ValueError, op << ": CPU kernel needs a contiguous CPU tensor, got " << t.describe());
}

}  // namespace st::ops::cpu
