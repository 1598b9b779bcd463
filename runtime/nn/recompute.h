// Activation recompute (gradient checkpointing) for one Layer: the forward runs with grad mode off,
// so none of the layer's intermediate activations is kept — only its input x — and ONE autograd
// node, with inputs {x}, is attached to the output. Its backward turns grad mode back on, re-runs
// layer.forward on a detached copy of x (a fresh leaf that requires grad when x does), with the
// dropout generator rewound to the offset it had before the original forward (so every mask is
// the same; the generator's later offset is restored afterwards), backpropagates the incoming
// gradient through that rebuilt graph with a nested run_backward, and returns x's gradient.
//
// Gradients: the recomputed graph is the original one, op for op, so the loss, x's gradient and
// every parameter gradient are bit-identical to the plain forward's. Parameters are NOT inputs of
// the node: they receive their gradients inside the nested backward, where the engine accumulates
// them (+=, so grad accumulation over micro-batches works) and fires their grad-ready hooks once
// per backward pass (a data-parallel reducer sees them exactly as without recompute). The node
// returns a fresh tensor for x's gradient (=); the outer engine sums or accumulates it.
//
// Memory held between forward and backward: x (B, T, C) plus the output (B, T, C) instead of every
// activation inside the layer; backward costs one extra forward of the layer.
//
// Contract: the layer (and x's data) must stay alive and unchanged until the backward has run;
// the layer's train/eval flag at backward is set back to the forward's for the recompute. x may be
// non-floating (token ids into a first layer): the node then returns no gradient but the
// layer's parameters still get theirs.
#pragma once
#include "runtime/nn/module.h"
#include "tensor/rng.h"

namespace st::runtime {

// x: the layer's input (token ids (B, T) i64 or hidden (B, T, C)) → layer.forward(x), with the
// layer's activations recomputed in backward. `gen`: the generator the layer's dropouts draw
// from (LanguageModel::generator().get()), or null when the layer draws no random numbers.
// Grad mode off at the call: plain layer.forward(x), nothing attached.
Tensor forward_recomputed(Layer& layer, const Tensor& x, Generator* gen);

}  // namespace st::runtime
