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
//
// A step captured as a CUDA graph (runtime/train/train_step.h) cannot take seed' as a kernel
// argument (it changes with the step): its scope carries a DropoutSeedTable, and each call reads
// its seed' from the table's slot for (generator seed, site, call), which the host rewrites with
// the next step's values before every replay. Same seeds, same masks, bit for bit.
#pragma once
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

class DropoutSeedTable;

struct DropoutContext {
  uint64_t id = 0;  // unique per opened scope (sites reset their call counts when it changes)
  int64_t step = 0;
  int64_t first_sample = 0;  // global index of the micro-batch's first sequence in the step
  DropoutSeedTable* seeds = nullptr;  // a graph step's seed table, or null (seeds as arguments)
};

// The seeds of one step's dropout calls in a (capacity) i64 tensor on the model's device.
class DropoutSeedTable {
 public:
  explicit DropoutSeedTable(Device device, int64_t capacity = 4096);
  // The () i64 view holding seed' of (generator seed, site, call) for the current step. A key
  // seen for the first time takes the next slot and gets the current step's value written at once
  // (a host → device copy: not inside a capture, where a new key is a ValueError).
  Tensor slot(uint64_t gen_seed, uint64_t site, uint64_t call);
  // Makes `step` current and returns the values every slot must hold for it (slot order), for the
  // caller to upload into table() before the step's kernels run.
  std::vector<int64_t> set_step(int64_t step);
  Tensor& table() { return table_; }
  int64_t size() const { return static_cast<int64_t>(keys_.size()); }

 private:
  Tensor table_;
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> keys_;  // slot → key
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, int64_t> slot_of_;
  int64_t step_ = 0;
};

// The innermost open scope of this thread, or null.
const DropoutContext* dropout_context();

class DropoutScope {
 public:
  DropoutScope(int64_t step, int64_t first_sample, DropoutSeedTable* seeds = nullptr);
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
