// The flags that keep a checkpoint's global batch under another layout: a run resumed with another
// number of data-parallel replicas must still read micro-batch × grad-accum × dp = the same G
// sequences per step (the data order depends on it), so the refusal names the --micro-batch and
// --grad-accum that do it at the new dp (the run's micro-batch if it divides, else the largest
// that does), or says that no pair can when dp does not divide G.
#pragma once
#include <cstdint>
#include <string>

namespace st::runtime {

// "; at dp 4, --micro-batch 2 --grad-accum 2 keep its 16 sequences" (and the --seq-len that keeps
// the checkpoint's when it differs), or the reason no pair can; "" when nothing differs.
std::string keep_batch_hint(int64_t global, int64_t seq_len, int64_t dp, int64_t micro_batch, int64_t run_seq_len);

}  // namespace st::runtime
