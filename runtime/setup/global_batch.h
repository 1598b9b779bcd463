// --global-batch N: the sequences of one optimizer step, said once for every layout. A layout of
// dp replicas (cp ranks share their replica's sequences, tp and pp ranks its micro-batches) runs
// micro_batch × grad_accum × dp = N:
//   - N / dp must be whole (refused otherwise, naming the multiples that divide);
//   - --grad-accum on the command line (not --micro-batch): micro_batch = N / (dp · grad_accum);
//   - else micro_batch is the largest divisor of N / dp not above --micro-batch (the flag's, the
//     config file's or the default: a cap; one given on the command line must divide N / dp), and
//     grad_accum = N / (dp · micro_batch);
//   - both on the command line: their product × dp must be N.
// Without --global-batch (0) the global batch is micro_batch × grad_accum × dp, as before.
#pragma once
#include <cstdint>
#include <string>

#include "runtime/common/option_check.h"
#include "runtime/data/data_options.h"

namespace st::runtime {

// Sets opts.micro_batch and opts.grad_accum from opts.global_batch (> 0) for dp replicas; nothing
// when it is 0. fail(flag, why) for a global batch the layout cannot run. Returns a one-line note
// of what it set ("global batch 16 = micro-batch 4 x grad-accum 2 x dp 2"), "" when off.
std::string resolve_global_batch(DataOptions& opts, int64_t dp, const OptionFail& fail);

}  // namespace st::runtime
