// The tensor-parallel plan of a decoder: each parameter's split over the tp group, from its role
// in the description (decoder_spec.h) — a per-parameter plan applied to the one model, as
// torchtitan's apply_tp does, not a second model class:
//   token embedding, untied head (V, C)   vocabulary-parallel: rows split, V padded to Vp = k·tp
//   packed qkv                            column-parallel in 3 chunks: rank r holds its q, k and v
//                                         heads [r·H/tp, (r+1)·H/tp) of each
//   q, k, v, gate, up                     column-parallel: the output dim split (whole heads)
//   o, down                               row-parallel: the input dim split; bias replicated
//   positions, norms                      replicated
// The output dim is the last of an in_out (Conv1D) weight and the first of an out_in (nn.Linear)
// one. runtime/parallel/tp_shard.h applies the rule; any name the model does not have is a
// ValueError (a silent "replicated" would train a wrong model).
#pragma once
#include "models/decoder/decoder_spec.h"
#include "runtime/common/shard_spec.h"

namespace st::models {

runtime::ShardRule decoder_tp_rule(const DecoderSpec& s);

}  // namespace st::models
