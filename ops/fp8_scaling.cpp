// FP8 scaling state (ops/fp8_scaling.h): options, the state buffer, and the dispatch of its update
// to the CPU (ops/cpu/fp8_cast.cpp) or CUDA (ops/cuda/fp8_cast.cu).
#include "ops/fp8_scaling.h"

#include <vector>

namespace st::ops {

float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.f : 57344.f; }
DType fp8_dtype(Fp8Format f) { return f == Fp8Format::e4m3 ? DType::f8e4m3 : DType::f8e5m2; }
const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::e4m3 ? "e4m3" : "e5m2"; }

Fp8Scaling fp8_scaling(const Fp8ScalingOptions& options, Device device) {
  ST_CHECK(options.history >= 1 && options.history <= 4096, ValueError,
           "fp8 scaling: history must be in 1 … 4096, got " << options.history);
  ST_CHECK(options.margin >= 0 && options.margin <= 32, ValueError,
           "fp8 scaling: margin must be in 0 … 32, got " << options.margin);
  const int64_t n = options.mode == Fp8ScaleMode::delayed ? options.history : 1;
  std::vector<float> init(static_cast<size_t>(kFp8History + n), 0.f);
  init[kFp8Scale] = init[kFp8ScaleInv] = 1.f;
  Fp8Scaling s;
  s.options = options;
  s.state = Tensor::from_vector(init, {kFp8History + n}, DType::f32, device);
  return s;
}

float* fp8_state_ptr(const Fp8Scaling& s, const char* op) {
  const int64_t n = s.options.mode == Fp8ScaleMode::delayed ? s.options.history : 1;
  ST_CHECK(s.state.defined() && s.state.dtype() == DType::f32 && s.state.is_contiguous() &&
               s.state.numel() == kFp8History + n,
           ValueError, op << ": the scaling state is not the (" << kFp8History + n << ") f32 buffer of fp8_scaling()");
  return s.state.data<float>();
}

void fp8_scaling_update(Fp8Scaling& scaling) {
  float* state = fp8_state_ptr(scaling, "fp8_scaling_update");
  if (scaling.options.mode == Fp8ScaleMode::current) return;
  if (scaling.state.is_cuda())
    cuda::fp8_scaling_update(state, scaling.options);
  else
    cpu::fp8_scaling_update(state, scaling.options);
}

void fp8_scaling_update(const std::vector<Fp8Scaling*>& scalings) {
  std::vector<std::pair<float*, const Fp8ScalingOptions*>> on_cuda;
  for (Fp8Scaling* s : scalings) {
    if (s->options.mode == Fp8ScaleMode::current) continue;
    if (s->state.is_cuda())
      on_cuda.emplace_back(fp8_state_ptr(*s, "fp8_scaling_update"), &s->options);
    else
      fp8_scaling_update(*s);
  }
  if (!on_cuda.empty()) cuda::fp8_scaling_update(on_cuda);
}

}  // namespace st::ops
