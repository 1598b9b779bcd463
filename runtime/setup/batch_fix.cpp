// The --micro-batch / --grad-accum that keep a global batch at another dp (runtime/setup/batch_fix.h).
#include "runtime/setup/batch_fix.h"

#include <algorithm>

namespace st::runtime {

std::string keep_batch_hint(int64_t global, int64_t seq_len, int64_t dp, int64_t micro_batch, int64_t run_seq_len) {
  std::string hint;
  if (global > 0 && dp > 0 && global % dp != 0) {
    std::string divisors;
    for (int64_t d = 1; d <= global && divisors.size() < 60; ++d)
      if (global % d == 0) divisors += (divisors.empty() ? "" : ", ") + std::to_string(d);
    hint = "; no --micro-batch x --grad-accum makes " + std::to_string(global) + " sequences over dp " + std::to_string(dp) +
           " (a dp dividing " + std::to_string(global) + " does: " + divisors + ")";
  } else if (global > 0 && dp > 0) {
    const int64_t per = global / dp;  // sequences per replica per step
    int64_t b = std::min(std::max<int64_t>(micro_batch, 1), per);
    while (per % b) --b;  // the largest micro-batch up to the run's that divides
    hint = "; at dp " + std::to_string(dp) + ", --micro-batch " + std::to_string(b) + " --grad-accum " +
           std::to_string(per / b) + " keep its " + std::to_string(global) + " sequences";
  }
  if (seq_len != run_seq_len) hint += "; --seq-len " + std::to_string(seq_len) + " keeps its sequence length";
  return hint;
}

}  // namespace st::runtime
