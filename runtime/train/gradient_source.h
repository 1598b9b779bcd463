// GradientSource: "compute this step's gradients" — the part of a step that pipelines replace.
// After compute_gradients() returns, every parameter's .grad() holds loss_scale × ∂(global mean
// loss)/∂θ for this rank's micro-batches (+= over micro-batches); the source calls
// sync.last_backward() just before the step's final backward, and the step's
// GradientSync::finish() completes the sum over the replicas (runtime/parallel/gradient_sync.h).
// The step (runtime/train/train_step.h) hands the source a StepContext: the loss factor
// loss_scale / (K · dp) as a () f32 tensor on the model's device, and the step state
// (ops/step_state.h) to which the source adds each of its micro-batches' mean losses
// (ops::step_state_add_loss, unscaled, in micro-batch order) — no host value changes per step, so
// the same code runs eagerly and inside a captured CUDA graph.
//
// LocalGradientSource (one process, or one DP replica without a pipeline): for k = 0 … K−1
// (K = grad_accum) it reads micro-batch k of this replica — global sequences (r·K + k)·B …
// +B−1 of the step (runtime/data/token_data.h), or the device buffers a graph step staged them
// into — runs the model, takes the mean cross-entropy of the micro-batch (f32), multiplies it by
// the loss factor and backpropagates. So the accumulated gradient is that of the mean over the
// GLOBAL batch of B·K·dp sequences whatever the split, and the losses it adds (Σ_k mean_k) over
// the DP replicas, divided by K·dp, are the global mean loss. Under context parallelism (cp > 1)
// every cp rank of a replica reads the same micro-batch and keeps its two chunks of each sequence,
// inputs and targets alike (shard_sequence): its mean is over T/cp tokens of each sequence, the
// loss factor is loss_scale / (K · dp · cp) and the losses summed over the replicas and the cp
// ranks, divided by K · dp · cp, are again the global mean (every rank holds as many tokens).
//
// evaluate() is the forward-only pass of validation: batch i of B sequences is val sequences
// i·B … i·B + B − 1 (the file's order), batches are split over the replicas (i ≡ r mod dp), and the
// source returns its share Σ_its i loss_i / n, so the trainer's loss reduction (the same as
// training's) gives the mean over the n batches whatever the layout (cp ranks: each its chunks,
// its share divided by cp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_data.h"
#include "runtime/nn/dropout_context.h"
#include "runtime/nn/language_model.h"
#include "runtime/parallel/gradient_sync.h"

namespace st::runtime {

// What one step hands its gradient source (runtime/train/train_step.h).
struct StepContext {
  int64_t step = 0;   // from 0
  Tensor loss_factor;  // () f32 on the model's device: loss_scale / (K · dp)
  Tensor state;        // the step state (ops/step_state.h) the micro-batches' losses are added to
  DropoutSeedTable* seeds = nullptr;                // a graph step's seed table, else null (seeds as arguments)
  const std::vector<TokenBatch>* staged = nullptr;  // a graph step's K micro-batches on the device, else null
};

class GradientSource {
 public:
  virtual ~GradientSource() = default;
  // The step's forward and backward passes over this rank's micro-batches (see above).
  virtual void compute_gradients(const StepContext& ctx, GradientSync& sync) = 0;
  // "" when a captured step can run this source: it reads its micro-batches from ctx.staged (filled
  // from micro_batch_host) and waits for nothing on the host; else why not, for the run's note.
  virtual std::string capture_refusal() const { return "a gradient source that exchanges activations"; }
  // Micro-batch k of step `step` of this rank, on the host (what a graph step stages); only
  // sources whose capture_refusal() is "" have one.
  virtual TokenBatch micro_batch_host(int64_t step, int64_t k) const;
  virtual int64_t micro_batches() const = 0;  // K: per step, this rank
  // No gradients, eval mode (no dropout): this rank's share of the mean loss over `batches`
  // validation batches (see above). Every rank of the job calls it at the same point.
  virtual double evaluate(const TokenSource& val, int64_t batches) = 0;
  // Sequences in one optimizer step over all replicas (the global batch G) and their length.
  virtual int64_t global_batch() const = 0;
  virtual int64_t seq_len() const = 0;
};

struct BatchLayout {
  int64_t micro_batch = 1;  // B: sequences per micro-batch
  int64_t grad_accum = 1;   // K: micro-batches per step per replica
  int64_t dp = 1;           // replicas
  int64_t replica = 0;      // r: this replica
  int64_t seq_len = 1;      // T (of the whole sequence)
  // context parallel: the replica's sequences cut over cp ranks, this one (cp_rank) holding its
  // two chunks of each (runtime/parallel/context_shard.h: 2C = T / cp tokens, load-balanced)
  int64_t cp = 1;
  int64_t cp_rank = 0;
  int64_t global_batch() const { return micro_batch * grad_accum * dp; }
};

// Throws ValueError naming the numbers unless every size is ≥ 1, replica < dp, cp_rank < cp and,
// under cp > 1, T divides by 2·cp (LocalGradientSource and PipelineGradientSource check their layout with it).
void check_batch_layout(const BatchLayout& layout);
// cp > 1: this rank's two chunks of every sequence of b, inputs and targets alike (B, T) → (B, T/cp)
// (shard_sequence, load-balanced); cp 1: b as is. The sources of both kinds read their
// micro-batches and validation batches through it.
TokenBatch context_shard(const BatchLayout& layout, TokenBatch b);

class LocalGradientSource : public GradientSource {
 public:
  LocalGradientSource(std::shared_ptr<LanguageModel> model, std::shared_ptr<const TokenSource> data, BatchLayout layout,
                      Device device = Device::cpu);
  void compute_gradients(const StepContext& ctx, GradientSync& sync) override;
  double evaluate(const TokenSource& val, int64_t batches) override;
  int64_t global_batch() const override { return layout_.global_batch(); }
  int64_t seq_len() const override { return layout_.seq_len; }
  std::string capture_refusal() const override {
    return layout_.cp > 1 ? "context parallelism: the ring attention exchanges blocks" : "";
  }
  int64_t micro_batches() const override { return layout_.grad_accum; }
  // Micro-batch k of step `step` for this replica (inputs, targets on the device).
  TokenBatch micro_batch(int64_t step, int64_t k) const;
  // The same on the host (a graph step stages it through pinned memory itself).
  TokenBatch micro_batch_host(int64_t step, int64_t k) const override;
  const BatchLayout& layout() const { return layout_; }

 private:
  std::shared_ptr<LanguageModel> model_;
  std::shared_ptr<const TokenSource> data_;
  BatchLayout layout_;
  Device device_;
};

}  // namespace st::runtime
