// Host staging and f16/bf16 widening for the MPI backend (see host_stage.h).
#include "comm/mpi/host_stage.h"

#include <cstring>

#include "tensor/pinned.h"

namespace st::comm::mpi {

Staged HostStage::input(const Tensor& t, Place place) {
  if (direct(t, place)) return {t.data_ptr(), nullptr, t.is_cuda()};
  Staged s = lease(t.nbytes());
  if (t.is_cuda()) {
    s.block->download_async(t.data_ptr(), t.nbytes());
  } else {  // a CPU tensor that aliases another buffer of the call: copied now
    s.block->wait();
    std::memcpy(s.ptr, t.data_ptr(), t.nbytes());
  }
  return s;
}

Staged HostStage::input_chunk(const Tensor& whole, const Tensor& chunk, size_t offset) {
  if (direct(whole, Place::any)) return {whole.data_ptr(), nullptr, whole.is_cuda()};
  // Only CUDA tensors are staged here. The download is ordered after the block's last upload: once
  // its fence passed, MPI may write the rest of the block.
  Staged s = lease(whole.nbytes());
  s.block->download_async(chunk.data_ptr(), chunk.nbytes(), offset);
  return s;
}

Staged HostStage::output(const Tensor& t, Place place) {
  if (direct(t, place)) return {t.data_ptr(), nullptr, t.is_cuda()};
  return scratch(t.nbytes());
}

Staged HostStage::scratch(size_t bytes) { return lease(bytes); }

Staged HostStage::lease(size_t bytes) {
  Staged s;
  s.block = pool_.acquire(bytes);
  s.ptr = s.block->data();
  return s;
}

void ready(const Staged& s) {
  if (s.device) cuda::synchronize();
}

bool staged_ready(const std::vector<Staged>& staged) {
  for (const Staged& s : staged)
    if (s.block && !s.block->query()) return false;
  return true;
}

void writeback(const Staged& s, const Tensor& dst) {
  if (!s.block) return;
  if (dst.is_cuda())
    s.block->upload_async(dst.data_ptr(), dst.nbytes());
  else
    std::memcpy(dst.data_ptr(), s.ptr, dst.nbytes());
}

void divide(const Staged& s, const Tensor& t, double divisor) {
  if (divisor == 1.0) return;
  if (s.device) {
    // t (n) f32 on the device: t += (1/divisor − 1)·t on the current stream (exact for powers of
    // two; else within an ulp of t / divisor).
    Tensor d = t.detach();
    d.add_(d, 1.0 / divisor - 1.0);
    return;
  }
  auto* p = static_cast<float*>(s.ptr);  // (n)
  const float d = static_cast<float>(divisor);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] /= d;
}

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

void widen_f32(const void* src, DType dtype, float* dst, size_t n) {
  const auto* h = static_cast<const uint16_t*>(src);  // (n) raw 16-bit
  if (dtype == DType::f16) {
    for (size_t i = 0; i < n; ++i) dst[i] = f16_bits_to_f32(h[i]);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_f32(h[i]);
  }
}

void narrow_from_f32(const float* src, void* dst, DType dtype, size_t n, double divisor) {
  auto* h = static_cast<uint16_t*>(dst);  // (n)
  const float d = static_cast<float>(divisor);
  if (dtype == DType::f16) {
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_f16_bits(divisor == 1.0 ? src[i] : src[i] / d);
  } else {
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16_bits(divisor == 1.0 ? src[i] : src[i] / d);
  }
}

}  // namespace st::comm::mpi
