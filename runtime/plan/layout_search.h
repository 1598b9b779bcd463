// The layouts of a model that fit a device, best first: every dp × cp × tp × pp = world (cp > 1 for a
// family with a context-parallel form, no dropout, T a multiple of 2·cp, where cp_composes; tp a divisor
// of the heads and at most a node's GPUs, pp at most the blocks), ZeRO stage 0 to 3 when dp > 1,
// recompute off and on, sequence parallelism off and on at tp > 1 (a decoder family without
// dropout, T divisible by tp), the 1F1B schedule for pp > 1 (GPipe holds more with the same bubble), the
// global batch kept: the micro-batch as asked, grad-accum = global batch / (micro-batch · dp), a
// layout where it does not divide left out. Each layout's per-rank peak is the memory planner's
// (memory_plan.h, for the asked --device); it fits when its largest rank's peak is at most the
// device memory.
//
// The cost model (a ranking, not a promise; every term per optimizer step, seconds):
//   compute   3 · F · N / (world · flops) · (1 + (pp − 1)/m) · (4/3 with recompute)
//             F the model's forward FLOPs per token (its layers' closed forms), N the step's
//             tokens, m = grad-accum micro-batches, flops the device's dense peak (--flops)
//   tp        4 all-reduces per block per micro-batch of (B, T, C) in the compute dtype, ring
//             2(tp−1)/tp of it each, over the node's links (--intra-gbs), not overlapped:
//             L · m · 4 · 2(tp−1)/tp · B·T·C·e / intra; the same under sequence parallelism
//             (an all-gather and a reduce-scatter, (tp−1)/tp each, for each all-reduce; the
//             column GEMMs' inputs gathered again in the backward run under the dX GEMM,
//             runtime/parallel/sp_linear.h), which then wins on its smaller peak
//   dp        over --inter-gbs when the dp group spans nodes (world > --gpus-per-node) else
//             --intra-gbs; P_stage = P/(tp·pp) (P the model's parameters, a tied weight once),
//             e_c the gradients' --grad-comm-dtype bytes:
//             ZeRO 0    the gradients' ring all-reduce, 2(dp−1)/dp · P_stage · e_c, overlapped
//                       with the backward (2/3 of compute) except one bucket:
//                       max(bucket time, dp time − backward)
//             ZeRO 1/2  the reduce of each bucket to its owner, (dp−1)/dp · P_stage · e_c, hidden
//                       the same way, plus the owners' broadcast of the updated values,
//                       (dp−1)/dp · P_stage · e, after the optimizer (exposed: the next step's
//                       compute waits for it)
//             ZeRO 3    per micro-batch two all-gathers of the parameters (before the forward,
//                       again before the backward) and a reduce-scatter of the gradients:
//                       m · (dp−1)/dp · P_stage · (2e + e_c), prefetched a layer ahead and so
//                       overlapped with the whole step's compute, except the first gather of
//                       each pass: max(2m · (dp−1)/dp · U · e time, dp time − compute), U the
//                       model's largest layer over tp (the GPT's embedding or head: wte)
//   pp        2 (B, T, C) messages per micro-batch per boundary, on the critical path once per
//             micro-batch and stage: (m + pp − 1) · 2 · B·T·C·e / link
// Sorted by the sum, then by the peak.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/plan/memory_plan.h"

namespace st::runtime {

struct CostModel {
  double flops = 989e12;        // dense peak FLOP/s per device (H100/H200 bf16)
  double intra_gbs = 450;       // GB/s between GPUs of a node (NVLink, one direction)
  double inter_gbs = 25;        // GB/s between nodes (200 Gb/s InfiniBand)
  int64_t gpus_per_node = 8;
};

struct StepCost {
  double compute_s = 0, tp_s = 0, dp_s = 0, pp_s = 0;  // dp_s: the DP / ZeRO term, whatever the stage
  double cp_s = 0;                                      // the ring's exposed time (context parallelism)
  double total() const { return compute_s + tp_s + dp_s + pp_s + cp_s; }
};

struct RankedLayout {
  PlanLayout layout;
  double peak = 0;  // the largest rank's planned peak, bytes
  StepCost cost;
};

// Whether training runs context parallelism in this layout (cp 1 always; cp > 1 as the trainer
// accepts it: any pp, ZeRO 0-3 (sharded over dp × cp), no sequence parallelism, not fp8 —
// TrainConfig's refusals).
bool cp_composes(const PlanLayout& layout);

// The cost of one step of `layout` (the header's model).
StepCost step_cost(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& layout, const CostModel& model);

// Layouts of `world` ranks whose every rank's peak ≤ device_bytes, best first. `asked` gives the
// precision, optimizer, micro-batch, bucket size and the global batch (micro-batch · grad-accum ·
// dp of it).
std::vector<RankedLayout> fitting_layouts(const nlohmann::json& entry, int64_t seq_len, const PlanLayout& asked,
                                          int64_t world, double device_bytes, const CostModel& model);

}  // namespace st::runtime
