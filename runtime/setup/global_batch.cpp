// --global-batch's split over a layout (runtime/setup/global_batch.h).
#include "runtime/setup/global_batch.h"

#include <algorithm>

namespace st::runtime {
namespace {

std::string n(int64_t v) { return std::to_string(v); }

}  // namespace

std::string resolve_global_batch(DataOptions& o, int64_t dp, const OptionFail& fail) {
  if (o.global_batch <= 0) return "";
  const int64_t N = o.global_batch;
  if (dp < 1) dp = 1;
  if (N % dp != 0) {
    const int64_t lo = N / dp * dp, hi = lo + dp;
    fail("global-batch", n(N) + " sequences do not split over dp " + n(dp) + " replicas: give a multiple of " + n(dp) +
                             (lo > 0 ? " (" + n(lo) + " or " + n(hi) + ")" : " (" + n(hi) + ")") + ", or another --dp");
  }
  const int64_t per = N / dp;  // sequences per replica and step
  if (o.micro_batch_given && o.grad_accum_given) {
    if (o.micro_batch * o.grad_accum != per)
      fail("global-batch", n(N) + " but --micro-batch " + n(o.micro_batch) + " x --grad-accum " + n(o.grad_accum) +
                               " x dp " + n(dp) + " = " + n(o.micro_batch * o.grad_accum * dp) +
                               ": give two of the three (--global-batch derives the third)");
  } else if (o.grad_accum_given) {
    if (per % o.grad_accum != 0)
      fail("grad-accum", n(o.grad_accum) + " does not divide the " + n(per) + " sequences per replica of --global-batch " +
                             n(N) + " at dp " + n(dp) + ": give a divisor of " + n(per) + ", or leave --grad-accum out");
    o.micro_batch = per / o.grad_accum;
  } else {
    if (o.micro_batch_given && per % o.micro_batch != 0)
      fail("micro-batch", n(o.micro_batch) + " does not divide the " + n(per) + " sequences per replica of --global-batch " +
                              n(N) + " at dp " + n(dp) + ": give a divisor of " + n(per) + ", or leave --micro-batch out");
    int64_t b = std::min(o.micro_batch, per);
    while (per % b != 0) --b;  // the largest divisor not above the cap (1 divides)
    o.micro_batch = b;
    o.grad_accum = per / b;
  }
  return "global batch " + n(N) + " = micro-batch " + n(o.micro_batch) + " x grad-accum " + n(o.grad_accum) + " x dp " +
         n(dp);
}

}  // namespace st::runtime
