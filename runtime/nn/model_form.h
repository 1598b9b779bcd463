// ModelForm: the form a model's layers take, chosen when they are built — from the run's plan,
// never set on a built model. A layer picks its implementation at construction: the residual
// stream sharded over tp or whole, its attention local or a ring over the cp group, its GEMMs in
// FP8 or the compute dtype, the head's projection fused with the loss or not. A family without a
// form refuses it when asked to build (runtime/setup/model_registry.h: ModelFactory's flags).
#pragma once
#include <memory>
#include <optional>

#include "comm/communicator.h"
#include "ops/fp8_linear.h"
#include "tensor/dtype.h"

namespace st::runtime {

struct ModelForm {
  // --sequence-parallel 1 (tp > 1): between its layers the model holds T/tp of the sequence
  // (models/decoder/decoder_layers.h says how). Needs a tp group of several ranks and no dropout.
  bool sequence_parallel = false;
  // --cp > 1: the forward takes this rank's two chunks of every sequence (B, 2C) in local order
  // (runtime/parallel/context_shard.h), its positions the chunks' global ones, its attention a
  // ring over this group (runtime/parallel/ring_attention.h); loss() is then the mean over the
  // rank's tokens. Null or a group of one: off.
  std::shared_ptr<comm::Communicator> cp;
  // --precision fp8: the blocks' GEMMs through ops::fp8_linear with this recipe, each with a
  // scaling state made on fp8_device (the run's device). Empty: off.
  std::optional<ops::Fp8LinearOptions> fp8;
  Device fp8_device = Device::cpu;
  // --chunked-head where it applies (runtime/plan/memory_plan.h: head_is_chunked): the last layer
  // returns its hidden state (B, T, C) and loss() runs the projection fused with the
  // cross-entropy in row chunks (ops/lm_head_loss.h). A family without that form ignores it.
  bool chunked_head = false;

  bool context_parallel() const { return cp && cp->size() > 1; }
};

}  // namespace st::runtime
