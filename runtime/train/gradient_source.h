// GradientSource: "compute this step's gradients" — the part of a step that pipelines replace.
// After compute_gradients() returns, every parameter's .grad() holds loss_scale × ∂(global mean
// loss)/∂θ for this rank's micro-batches (+= over micro-batches); the source calls
// sync.last_backward() just before the step's final backward, and the trainer's
// GradientSync::finish() completes the sum over the replicas (runtime/parallel/gradient_sync.h).
//
// LocalGradientSource (one process, or one DP replica without a pipeline): for k = 0 … K−1
// (K = grad_accum) it reads micro-batch k of this replica — global sequences (r·K + k)·B …
// +B−1 of the step (runtime/data/token_data.h) — runs the model, takes the mean cross-entropy of
// the micro-batch (f32), multiplies it by loss_scale / (K · dp) and backpropagates. So the
// accumulated gradient is that of the mean over the GLOBAL batch of B·K·dp sequences whatever
// the split, and the returned loss (Σ_k mean_k / (K·dp), unscaled) summed over the DP replicas
// is the global mean loss.
//
// evaluate() is the forward-only pass of validation: batch i of B sequences is val sequences
// i·B … i·B + B − 1 (the file's order), batches are split over the replicas (i ≡ r mod dp), and the
// source returns its share Σ_its i loss_i / n, so the trainer's loss reduction (the same as
// training's) gives the mean over the n batches whatever the layout.
#pragma once
#include <cstdint>
#include <memory>

#include "runtime/data/token_data.h"
#include "runtime/nn/language_model.h"
#include "runtime/parallel/gradient_sync.h"

namespace st::runtime {

class GradientSource {
 public:
  virtual ~GradientSource() = default;
  // Step `step` counts from 0. Returns this rank's share of the global mean loss (see above).
  virtual double compute_gradients(int64_t step, double loss_scale, GradientSync& sync) = 0;
  // No gradients, eval mode (no dropout): this rank's share of the mean loss over `batches`
  // validation batches (see above). Every rank of the job calls it at the same point.
  virtual double evaluate(const TokenData& val, int64_t batches) = 0;
  // Sequences in one optimizer step over all replicas (the global batch G) and their length.
  virtual int64_t global_batch() const = 0;
  virtual int64_t seq_len() const = 0;
};

struct BatchLayout {
  int64_t micro_batch = 1;  // B: sequences per micro-batch
  int64_t grad_accum = 1;   // K: micro-batches per step per replica
  int64_t dp = 1;           // replicas
  int64_t replica = 0;      // r: this replica
  int64_t seq_len = 1;      // T
  int64_t global_batch() const { return micro_batch * grad_accum * dp; }
};

class LocalGradientSource : public GradientSource {
 public:
  LocalGradientSource(std::shared_ptr<LanguageModel> model, std::shared_ptr<const TokenData> data, BatchLayout layout,
                      Device device = Device::cpu);
  double compute_gradients(int64_t step, double loss_scale, GradientSync& sync) override;
  double evaluate(const TokenData& val, int64_t batches) override;
  int64_t global_batch() const override { return layout_.global_batch(); }
  int64_t seq_len() const override { return layout_.seq_len; }
  // Micro-batch k of step `step` for this replica (inputs, targets on the device).
  TokenBatch micro_batch(int64_t step, int64_t k) const;
  // The same on the host (a graph step stages it through pinned memory itself).
  TokenBatch micro_batch_host(int64_t step, int64_t k) const;
  const BatchLayout& layout() const { return layout_; }

 private:
  std::shared_ptr<LanguageModel> model_;
  std::shared_ptr<const TokenData> data_;
  BatchLayout layout_;
  Device device_;
};

}  // namespace st::runtime
