// Tensor-parallel layers (Megatron-LM), built from the paired functions of tensor_parallel.h.
// Weights are stored (in, out) like GPT-2's Conv1D and ops::linear; parameter local names are
// "weight" / "bias" as in models/nn.h, so a TP model has the full model's names with shards in
// them (runtime/parallel/tp_shard.h says how each full tensor splits).
//
//   ColumnParallelLinear  x (..., in) replicated → copy_to_tp → x·w + b → (..., out/tp)
//                         w (in, out/tp), b (out/tp); gather_output: all-gather to (..., out)
//                         (columns in shard order: rank 0's, then rank 1's, ...)
//   RowParallelLinear     x (..., in/tp) split → x·w → reduce_from_tp → + b → (..., out)
//                         w (in/tp, out), b (out) replicated, added once after the sum (one rank:
//                         in the product's epilogue, as ops::linear)
//   sequence_parallel (forward's flag, --sequence-parallel 1): the column-parallel linear takes x
//                         (B, T/tp, in) and all-gathers it along T instead of copy_to_tp; the
//                         row-parallel one reduce-scatters its partial sums along T instead of
//                         reduce_from_tp and adds its bias on the T-shard through copy_to_tp (the
//                         bias then sees only this rank's positions: its gradient is summed over
//                         tp in the backward). Each is one autograd node with its GEMM
//                         (sp_linear.h): the column one keeps x's T-shard and gathers it again in
//                         the backward, the row one keeps no (B, T, out) partial sums (FP8: the
//                         separate gather_seq_from_sp / reduce_scatter_seq_to_sp nodes)
//   Either linear may store its weight (out, in) instead (nn.Linear's layout, y = x·wᵀ: Llama's
//   checkpoints): column (out/tp, in), row (out, in/tp).
//   fp8 (set by the model under --precision fp8): the local product x·w (+ b) runs through
//                         ops::fp8_linear with that state (E4M3 casts at use, per-tensor scaling),
//                         the collectives around it unchanged
//   VocabParallelEmbedding weight rows [r·Vp/tp, (r+1)·Vp/tp) of the vocabulary padded to Vp, a
//                         multiple of tp; ids of other ranks are looked up as row 0, zeroed, and
//                         the partial embeddings summed by reduce_from_tp
//   vocab_parallel_cross_entropy  logits (..., Vp/tp) of this rank's vocabulary shard → the
//                         cross-entropy of the full logits (padded columns count as −inf)
//
// Replicated parameters (row-parallel biases, LayerNorms, wpe) get identical full gradients on
// every tp rank (their inputs and output gradients are replicated), so TP needs no gradient
// reduction of its own. Under sequence parallelism a replicated parameter used on a T-shard goes
// through copy_to_tp at its use (sp_param below), so its gradient is summed over tp in the
// backward and every rank still holds the full one. Backward of every piece writes fresh tensors (=).
#pragma once
#include <memory>

#include "ops/fp8_linear.h"
#include "runtime/nn/module.h"
#include "runtime/parallel/tensor_parallel.h"

namespace st::runtime {

// Smallest multiple of tp that is >= vocab.
int64_t pad_vocab(int64_t vocab, int tp);

// The local product of a projection: x (..., K) · w → (..., N) + b, w (K, N), or (N, K) when
// out_in; through ops::fp8_linear when fp8 is set (an out_in weight cast as stored, ops/fp8_linear.h),
// else ops::linear / linear_nt. The one place a projection picks its GEMM's precision.
Tensor local_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in, ops::Fp8LinearState* fp8);

// A row-parallel product's output from this rank's partial sums (..., out): Σ over the tp ranks
// (reduce_from_tp; sequence_parallel: reduce_scatter_seq_to_sp, this rank's positions), then the
// bias once (replicated; under sp through sp_param). One rank: partial + bias.
Tensor row_output(const Tensor& partial, const Tensor& bias, const TpGroup& tp, bool sequence_parallel);

class ColumnParallelLinear : public Module {
 public:
  // Throws ValueError unless out_full divides by the group size.
  ColumnParallelLinear(int64_t in, int64_t out_full, TpGroup tp, bool bias = true, bool gather_output = false,
                       bool weight_out_in = false);
  // x (..., in) → (..., out/tp), or (..., out) gathered; sequence_parallel: x (B, T/tp, in) → (B, T, out/tp)
  Tensor forward(const Tensor& x, bool sequence_parallel = false) const;
  Tensor weight, bias;                    // (in, out/tp) or (out/tp, in); (out/tp) or undefined
  std::shared_ptr<ops::Fp8LinearState> fp8;  // set: the local GEMM in FP8 (see above)
  int64_t in, out_full, out_local;
  bool gather_output, out_in;

 private:
  TpGroup tp_;
};

class RowParallelLinear : public Module {
 public:
  // input_is_parallel = false: x arrives full (..., in) and is split by scatter_to_tp first.
  RowParallelLinear(int64_t in_full, int64_t out, TpGroup tp, bool bias = true, bool input_is_parallel = true,
                    bool weight_out_in = false);
  // x (..., in/tp) → (..., out); sequence_parallel: x (B, T, in/tp) → (B, T/tp, out)
  Tensor forward(const Tensor& x, bool sequence_parallel = false) const;
  Tensor weight, bias;                    // (in/tp, out) or (out, in/tp); (out) replicated or undefined
  std::shared_ptr<ops::Fp8LinearState> fp8;  // set: the local GEMM in FP8 (see above)
  int64_t in_full, in_local, out;
  bool input_is_parallel, out_in;

 private:
  TpGroup tp_;
};

class VocabParallelEmbedding : public Module {
 public:
  VocabParallelEmbedding(int64_t vocab, int64_t dim, TpGroup tp);
  // ids (...) i32/i64 on any device → (..., C). An id outside [0, vocab) → ValueError (on every
  // rank alike, before any collective). The ids' masking runs on the host (ids are small).
  Tensor forward(const Tensor& ids) const;
  // The same before the sum over tp: ids (...) → (..., C), rows of other ranks' ids zero (the
  // sequence-parallel embedding reduce-scatters it along T instead)
  Tensor forward_partial(const Tensor& ids) const;
  Tensor weight;  // (Vp/tp, C): rows [vocab_start, vocab_start + vocab_local) of the padded table
  int64_t vocab, padded_vocab, vocab_local, vocab_start;
  // Hugging Face's padding_idx (models/nn.h Embedding): the rank holding that row gives its values
  // at those positions without a gradient path; -1: none
  int64_t padding_idx = -1;

 private:
  TpGroup tp_;
};

// A column-parallel product x → w (+ b): x through copy_to_tp then local_linear, or under sequence
// parallelism x (B, T/tp, K) → (B, T, N) through sp_column_linear (sp_linear.h: the all-gather along
// T and the GEMM one node, keeping x's T-shard for the weight gradient and gathering it again in
// the backward) — with FP8 through column_input and local_linear (the gathered input then stays
// the FP8 linear's autograd edge, as before). The ColumnParallelLinear's product, and the
// decoder's concatenated q|k|v and gate|up and its head's.
Tensor column_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool out_in, ops::Fp8LinearState* fp8,
                     const TpGroup& tp, bool sequence_parallel);
// The input of a column-parallel GEMM: x itself through copy_to_tp, or under sequence parallelism
// x (B, T/tp, C) all-gathered along T → (B, T, C) (column_linear's path where it has no fused node:
// FP8, and the head without sequence parallelism).
Tensor column_input(const Tensor& x, const TpGroup& tp, bool sequence_parallel);
// A replicated parameter as used on a T-shard: through copy_to_tp (its gradient summed over tp)
// under sequence parallelism, else itself.
Tensor sp_param(const Tensor& w, const TpGroup& tp, bool sequence_parallel);

// Cross-entropy over a vocabulary split across tp ranks, equal to ops::cross_entropy of the
// gathered logits[..., :vocab]:
//   logits (..., Vp/tp) rank r's columns [r·Vp/tp, (r+1)·Vp/tp) of the padded vocabulary, any
//   float dtype; targets (...) i32/i64 (global ids, ignore_index skipped) → loss () f32, the mean
//   over counted targets, identical on every rank.
// Columns ≥ vocab (padding) are −inf. Forward: the row max (all-reduce MAX), then Σ exp and the
// target logit (one all-reduce SUM of both) in f32 across ranks, locally in double. Backward is
// local: dlogits = (softmax − onehot)·dloss/count on this rank's columns, 0 on padding and on
// ignored rows (=). The per-row math runs on the host (CUDA logits are staged; correct, not fast).
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const TpGroup& tp, int64_t vocab,
                                    int64_t ignore_index = -100);

}  // namespace st::runtime
