// The two outputs of a residual add fused with the norm that reads it (ops::add_layernorm,
// ops::add_rmsnorm): the new residual stream r and its normalised rows y, outputs of one autograd
// node whose backward takes both gradients.
#pragma once
#include "tensor/tensor.h"

namespace st::ops {

struct ResidualNorm {
  Tensor r, y;  // (..., C) each
};

}  // namespace st::ops
