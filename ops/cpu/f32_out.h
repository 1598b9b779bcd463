// Output side of the CPU "compute in f32, round once on store" rule (ops/cpu/common.h has the
// input side). F32Out hands a kernel an f32 buffer for a contiguous output tensor: the tensor
// itself when it is f32, else a scratch buffer that store() rounds into it (RNE) exactly once.
#pragma once
#include "tensor/tensor.h"

namespace st::ops::cpu {

class F32Out {
 public:
  explicit F32Out(Tensor& out);
  float* data() const { return buf_.data<float>(); }
  // Copies the f32 values into the output when a scratch buffer was used (no-op otherwise).
  void store();

 private:
  Tensor& out_;
  Tensor buf_;
};

// Throws ValueError unless t is a contiguous CPU tensor (what every CPU kernel expects).
void require_contiguous_cpu(const char* op, const Tensor& t);

}  // namespace st::ops::cpu
