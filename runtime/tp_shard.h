// How full tensors split across tensor-parallel ranks, by parameter name, and back. Checkpoints
// keep full tensors by name (HF layout), so a run saved under one tp resumes under another: load
// = shard_state_dict of the full tensors, save = gather_state_dict of the local shards.
//
// A ShardSpec says what rank r of tp holds of a full tensor:
//   replicated   the whole tensor
//   split        along `dim`, which holds `chunks` equal consecutive pieces (c_attn's 3C columns
//                are [q | k | v]: chunks = 3); rank r takes slice r of tp equal slices of EACH
//                piece, concatenated in piece order (so its c_attn shard is [q_r | k_r | v_r]).
//                pad_to_tp: the dim is first padded with zeros to a multiple of tp (the
//                vocabulary); gathering cuts it back to full_size.
//
// GPT-2 (HF names, Conv1D layout, see models/gpt.h), gpt_tp_shard_rule:
//   transformer.wte.weight (V, C)          split dim 0, padded to Vp (rows [r·Vp/tp, ...))
//   *.attn.c_attn.weight (C, 3C), bias (3C) split last dim, chunks 3 (this rank's q, k, v heads)
//   *.mlp.c_fc.weight (C, 4C), bias (4C)    split last dim (column parallel)
//   *.attn.c_proj.weight (C, C)             split dim 0 (row parallel); bias replicated
//   *.mlp.c_proj.weight (4C, C)             split dim 0 (row parallel); bias replicated
//   wpe, ln_1, ln_2, ln_f                   replicated
// Any other name is a ValueError (a silent "replicated" would train a wrong model).
// Shards are fresh contiguous tensors on the full tensor's device, in its dtype; the round trip
// shard → unshard is exact (copies only).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/safetensors.h"  // NamedTensors
#include "tensor/tensor.h"

namespace st::runtime {

struct ShardSpec {
  enum class Kind : uint8_t { replicated, split };
  Kind kind = Kind::replicated;
  int64_t dim = 0;         // split dim (negative counts from the end)
  int64_t chunks = 1;      // equal pieces along dim, each split separately
  bool pad_to_tp = false;  // pad dim with zeros to a multiple of tp (chunks must be 1)
  int64_t full_size = -1;  // with pad_to_tp: the unpadded size along dim (restored by unshard)
  bool operator==(const ShardSpec&) const = default;
  static ShardSpec replicate() { return {}; }
  static ShardSpec split(int64_t dim, int64_t chunks = 1) { return {Kind::split, dim, chunks, false, -1}; }
  static ShardSpec split_padded(int64_t dim, int64_t full_size) { return {Kind::split, dim, 1, true, full_size}; }
};
std::string describe(const ShardSpec& s);  // "split dim 1 ×3 chunks", "replicated", ...

using ShardRule = std::function<ShardSpec(const std::string& name)>;
// The GPT-2 rule above; vocab_size is the unpadded V of wte.
ShardRule gpt_tp_shard_rule(int64_t vocab_size);
// The rule for an optimizer's state_dict (runtime/optimizer.h): "step" replicated;
// "exp_avg.<p>", "exp_avg_sq.<p>", "momentum_buffer.<p>", "master.<p>" split like parameter <p>
// (param_rule). Another key is a ValueError.
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
