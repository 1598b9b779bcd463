// Host staging and f16/bf16 widening for the MPI backend (see host_stage.h).
#include "comm/mpi/host_stage.h"

namespace st::comm::mpi {

Tensor host_view(const Tensor& t, bool copy_in) {
  Tensor d = t.detach();
  if (!d.is_cuda()) return d;
  return copy_in ? d.to(Device::cpu) : Tensor::empty(d.shape(), d.dtype(), Device::cpu);
}

void unstage(const Tensor& host, const Tensor& dst) {
  if (dst.is_cuda()) dst.detach().copy_(host);
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

Tensor widen_f32(const Tensor& host) {
  Tensor wide = Tensor::empty({host.numel()}, DType::f32, Device::cpu);
  float* w = wide.data<float>();  // (n)
  const int64_t n = host.numel();
  const auto* h = static_cast<const uint16_t*>(host.data_ptr());  // (n) raw 16-bit
  if (host.dtype() == DType::f16) {
    for (int64_t i = 0; i < n; ++i) w[i] = f16_bits_to_f32(h[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) w[i] = bf16_bits_to_f32(h[i]);
  }
  return wide;
}

void narrow_from_f32(const Tensor& wide, const Tensor& host_out, double divisor) {
  const float* w = wide.data<float>();  // (n)
  auto* h = static_cast<uint16_t*>(host_out.data_ptr());  // (n)
  const int64_t n = host_out.numel();
  const float d = static_cast<float>(divisor);
  if (host_out.dtype() == DType::f16) {
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16_bits(divisor == 1.0 ? w[i] : w[i] / d);
  } else {
    for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16_bits(divisor == 1.0 ? w[i] : w[i] / d);
  }
}

void divide_f32(const Tensor& t, double divisor) {
  float* p = t.data<float>();
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] /= d;
}

}  // namespace st::comm::mpi
