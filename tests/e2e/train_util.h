// Shared bits of the end-to-end tests: parameters with AdamW state and one optimizer step.
// (A stand-in for runtime/'s optimizer so that these tests exercise only tensor/ and ops/.)
#pragma once
#include <vector>

#include "ops/optim.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

namespace st::test {

struct Param {
  Tensor w, m, v;  // w requires grad; m, v the AdamW moments (f32, w's shape)
  bool decay;      // weight decay on (≥ 2-d tensors, as docs/design.md)
};

// A leaf of `shape`, normal(0, std) from gen (std = 0 → zeros), with zeroed moments.
Param make_param(const Shape& shape, float std, Generator& gen);

// One AdamW step over every parameter that has a gradient (decay only where Param::decay), then
// zeroes the grads.
void adamw_all(std::vector<Param*>& params, const ops::AdamWParams& hp, int64_t step);

}  // namespace st::test
