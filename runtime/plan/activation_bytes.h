// The memory planner's activation closed form: what a decoder's ops keep for backward per token
// of a micro-batch, per block and at the loss (memory_plan.h's "activations" terms say what each
// count is and where it was measured), apart from the parameter, gradient, optimizer and comm
// bytes and the step's moments (memory_plan.cpp).
// block_activations (the block's term) is declared in memory_plan.h, its public face.
#pragma once
#include "runtime/plan/memory_plan.h"

namespace st::runtime {

// Multi-head attention without rope and a GELU MLP: the GPT-2 block's ops (DecoderBlock's packed
// c_attn, the composed attention under tp, ops::mlp_gelu at tp 1); else the grouped-query block.
bool classic_block(const DecoderShape& s);

// The last stage's loss per token of a micro-batch of `tokens`: saved until its backward, the
// transient at the end of its forward (the header's "loss" and "chunked loss" terms) and, for the
// chunked head, its backward's moment: what it holds beyond the saved bytes while wte's gradient
// (`grad` bytes, when no gradient exists yet) is made from the one it hands out.
struct HeadLossBytes {
  double saved = 0, transient = 0, backward = 0, grad = 0;
};
HeadLossBytes head_loss_bytes(double C, double V, const PlanLayout& l, double tokens);

// Per token of a micro-batch, in bytes: a decoder's saved tensors (memory_plan.h), or 0 for a model
// without a decoder description.
struct ActivationCoefficients {
  double block = 0, block_recompute = 0, replay = 0, embedding = 0, loss_saved = 0, loss_transient = 0;
  double block_backward = 0;  // a block's backward beyond what it saved (its gradients' buffers)
  double block_end = 0;         // per token at the end of a block's backward (what is still held)
  double block_end_weight = 0;    // and, once, its first GEMM's weight gradient before .grad takes it (elements)
  double block_start_weight = 0;  // the first weight gradient its backward makes (its last GEMM's), elements
  double weight_temp = 0;         // bytes an element of a weight gradient's temporaries
  double logits = 0;          // of loss_saved: the logits, gone once the loss's backward ran
  double head_backward = 0;   // the head's backward: the logits' gradient and its input's (per token)
  double head_weight_grad = 0;  // and, once, its weight's gradient (V/tp · C · e bytes)
  double embedding_grad = 0;    // the embedding's gradient of the tied wte before it is added (bytes)
  // cp > 1: the ring's own buffers in a block's attention forward (runtime/parallel/ring_attention.h),
  // per token of the rank: the packed [k | v] held and the one arriving, 2 · 2·A_kv·e, and the f32
  // output accumulator, A·4 — beside everything the blocks before it saved
  double ring = 0;
  HeadLossBytes head;           // the chunked head's terms (zeros for the unfused head)
};
ActivationCoefficients decoder_activations(const DecoderShape& shape, double V, const PlanLayout& l, double tokens);

}  // namespace st::runtime
