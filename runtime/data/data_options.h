// DataOptions: what a run reads — the token files, their order, and how the batch is cut (the
// data and batch flags of --help). Global batch = micro_batch · grad_accum · dp sequences
// (--global-batch sets it; runtime/setup/global_batch.h derives the other two).
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"

namespace st::runtime {

struct DataOptions {
  std::string data;      // token .bin (required; the CLI substitutes the built-in corpus when --data is absent)
  std::string val_data;
  int64_t eval_every = 0;  // 0: with val_data every eval_interval() steps (runtime/setup/train_config.h), else never
  int64_t eval_tokens = 0;  // tokens a validation reads: ⌈eval_tokens / (micro_batch · T)⌉ micro-batches; 0: 8 of them
  bool shuffle = false;    // sequences in a permuted order per pass, seeded by the run's seed (runtime/data/token_data.h)
  // --resume with data whose identity (runtime/data/data_identity.h) is not the checkpoint's:
  // refused unless this is set (the run then goes on from the checkpoint's position in the new data)
  bool data_changed = false;
  int64_t micro_batch = 4;  // sequences per micro-batch per DP replica
  int64_t grad_accum = 1;   // micro-batches per optimizer step per replica (pipeline m)
  // sequences per optimizer step, whatever the layout (0: micro_batch · grad_accum · dp); the
  // launcher derives micro_batch and grad_accum from it once dp is known (runtime/setup/global_batch.h)
  int64_t global_batch = 0;
  // Not flags: --micro-batch / --grad-accum were given on the command line (launch/ sets them;
  // --global-batch then keeps them, or refuses them when they contradict it)
  bool micro_batch_given = false, grad_accum_given = false;

  void validate(const OptionFail& fail) const {
    require_positive(fail, "micro-batch", static_cast<double>(micro_batch));
    require_positive(fail, "grad-accum", static_cast<double>(grad_accum));
    require_non_negative(fail, "eval-every", static_cast<double>(eval_every));
    require_non_negative(fail, "eval-tokens", static_cast<double>(eval_tokens));
    require_non_negative(fail, "global-batch", static_cast<double>(global_batch));
    if (eval_every > 0 && val_data.empty()) fail("eval-every", "needs --val-data");
  }
};

}  // namespace st::runtime
