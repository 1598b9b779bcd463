// Dropout masks that do not depend on the layout. During a training step the gradient sources
// open a DropoutScope around each micro-batch: (step, index of its first sequence in the step's
// global batch). A dropout site (models::Dropout, numbered by the index of its layer in the full
// model, so a pipeline stage that builds only its layers numbers them as one process does) then
// derives its counters from that context instead of advancing the model's generator:
//   seed'  = mix(generator seed, site, call, step)   (call: the site's n-th use in this scope)
//   element j of sequence s (row s of the (B, ...) input) ↦ Philox counter s·(numel/B) + j
// so a sequence's mask is the same whether it is row 0 of a replica's micro-batch or row 5 of one
// process's batch, on any pipeline stage, on every tp rank alike, and on the recomputed forward
// (recompute re-opens the scope it captured: a fresh scope id, so the sites count calls from 0).
// Outside a scope (direct op use, tests) dropout advances the generator as before.
#pragma once
#include <cstdint>

namespace st::runtime {

struct DropoutContext {
  uint64_t id = 0;  // unique per opened scope (sites reset their call counts when it changes)
  int64_t step = 0;
  int64_t first_sample = 0;  // global index of the micro-batch's first sequence in the step
};

// The innermost open scope of this thread, or null.
const DropoutContext* dropout_context();

class DropoutScope {
 public:
  DropoutScope(int64_t step, int64_t first_sample);
  ~DropoutScope();
  DropoutScope(const DropoutScope&) = delete;
  DropoutScope& operator=(const DropoutScope&) = delete;

 private:
  DropoutContext ctx_;
  const DropoutContext* outer_;
};

// seed' of one dropout call: a 64-bit mix (splitmix64 steps) of its four inputs
uint64_t dropout_seed(uint64_t seed, uint64_t site, uint64_t call, int64_t step);

}  // namespace st::runtime
