// One pipeline stage's planned memory (memory_plan.h's terms, each named and justified there):
// the parameters, gradients, optimizer state and comm buffers a rank of stage s holds, and the
// moments of its step (the end of the forward, the head's and each block's backward, a
// recompute's replay, the end of the backward) whose largest is its peak. plan_memory
// (memory_plan.cpp) computes the model-wide inputs once and calls plan_stage for each stage.
#pragma once
#include "runtime/pipeline/stage_model.h"
#include "runtime/plan/activation_bytes.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/setup/model_registry.h"

namespace st::runtime {

// What every stage's plan shares.
struct StageInputs {
  PlanLayout l;                 // the layout, dp counting the ranks that sum the gradients (dp × cp)
  const ModelDescription* d = nullptr;
  ShardRule rule;               // the tensor-parallel split (empty: every parameter whole)
  Partition part;               // the layers of each pipeline piece
  ActivationCoefficients a;     // per token of a micro-batch (zeros for a model that is no decoder)
  bool decoder = false;         // the model has a decoder description
  double e = 0, master = 0, state = 0;  // bytes a parameter: weight, f32 master, optimizer state
  double tokens = 0;            // a micro-batch's tokens on this rank (B·T/cp)
  double C = 0;                 // the decoder's width (0 for another model)
};

StageMemory plan_stage(const StageInputs& in, int s);

}  // namespace st::runtime
