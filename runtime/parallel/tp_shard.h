// How full tensors split across tensor-parallel ranks, by parameter name, and back. Checkpoints
// keep full tensors by name (HF layout), so a run saved under one tp resumes under another: load
// = shard_state_dict of the full tensors, save = gather_state_dict of the local shards.
// What a ShardSpec means: runtime/common/shard_spec.h; a model family supplies its rule (the
// decoder's plan: models/decoder/decoder_tp_plan.h). Shards are fresh contiguous tensors on the full tensor's device, in its dtype; the round trip
// shard → unshard is exact (copies only).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "runtime/common/shard_spec.h"
#include "tensor/tensor.h"

namespace st::runtime {

// The rule for an optimizer's state_dict (runtime/optim/optimizer.h): "step" replicated;
// "exp_avg.<p>", "exp_avg_sq.<p>", "momentum_buffer.<p>", "master.<p>" split like parameter <p>
// (param_rule); "fp8.*" (--fp8-scaling delayed's scaling states, runtime/train/fp8_delayed.h)
// replicated. Another key is a ValueError.
ShardRule optimizer_state_shard_rule(ShardRule param_rule);

// Local shape of a full tensor shaped `full` on each of tp ranks. Throws ShapeError naming the
// sizes when the dim (padded if asked) does not divide into chunks · tp.
Shape shard_shape(const Shape& full, const ShardSpec& s, int tp);
// full (...) → rank's shard (shard_shape), contiguous copy.
Tensor shard_tensor(const Tensor& full, const ShardSpec& s, int tp, int rank);
// shards[r] = rank r's shard (all the same shape) → the full tensor (padding cut to full_size).
Tensor unshard_tensor(const std::vector<Tensor>& shards, const ShardSpec& s);

// Every tensor of `full` sharded for `rank` (same names and order).
NamedTensors shard_state_dict(const NamedTensors& full, const ShardRule& rule, int tp, int rank);
// Collective over `tp` (same names in the same order on every rank): all-gathers each split
// tensor and returns the full tensors by name on every rank; replicated ones are returned as
// they are. Waits on each collective with the communicator's deadline.
NamedTensors gather_state_dict(const NamedTensors& local, const ShardRule& rule, comm::Communicator& tp);

// This rank's share of the full model's Σ g² (accumulated in double, any float dtype/device):
// split tensors always, replicated tensors only on tp rank 0 (every tp rank holds the same full
// gradient for them). Summed over the tp group (the trainer's grad_reduction) it is the Σ g² of
// the single-process model, so the global norm and clipping match. No communication.
double tp_local_sum_squares(const NamedTensors& grads, const ShardRule& rule, int tp_rank);

}  // namespace st::runtime
