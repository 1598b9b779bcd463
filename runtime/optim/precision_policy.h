// PrecisionPolicy: what a run's --precision, --grad-comm-dtype and FP8 recipe options mean,
// decided in one place (runtime/optim/mixed_precision.h says what each precision does) and read
// by the model's build (the FP8 recipe: train_setup.h model_form), the optimizer (the dtype its
// f32 masters are cast to), the trainer (the loss scaler, the device's matrix math), the gradient
// syncs (the comm dtype) and the planner (the bytes of an element).
#pragma once
#include <cstdint>
#include <optional>

#include "ops/fp8_linear.h"
#include "runtime/optim/mixed_precision.h"
#include "tensor/dtype.h"

namespace st::runtime {

struct PrecisionPolicy {
  Precision precision = Precision::fp32;
  // parameters, activations and gradients: f32 | f16 | bf16 (fp8: bf16, the FP8 GEMMs cast at use)
  DType compute = DType::f32;
  DType grad_comm = DType::f32;  // the DP / ZeRO gradient reductions (--grad-comm-dtype)
  bool loss_scaling = false;     // fp16: dynamic loss scaling (LossScaler)
  // fp8: the recipe of the decoder blocks' GEMMs (fp8_training_recipe); empty otherwise
  std::optional<ops::Fp8LinearOptions> fp8;

  bool f32_masters() const { return compute != DType::f32; }  // the optimizer keeps f32 masters
  bool casts_gradients() const { return grad_comm != compute; }  // the reductions cast the gradients
};

// `grad_comm`: the --grad-comm-dtype precision (fp32, fp16 or bf16; fp8 is a compute precision).
PrecisionPolicy precision_policy(Precision precision, Precision grad_comm = Precision::fp32,
                                 ops::Fp8ScaleMode fp8_scaling = ops::Fp8ScaleMode::current,
                                 int64_t fp8_amax_history = 16);

}  // namespace st::runtime
