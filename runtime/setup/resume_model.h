// --resume and the model flags: the checkpoint is the truth. A resumed run trains the model its
// checkpoint holds (runtime/train/train_setup.h builds it from state.json), so a model flag that
// says otherwise (--d-model 128 against a 64-wide checkpoint) is refused in one line naming the
// flag and both values, and a model flag that was not given takes the checkpoint's value (so the
// options every rank compares, the memory check and the lines a run prints are the checkpoint's).
// The flags: --model, --layers, --d-model, --heads, --kv-heads, --ffn, --rope-theta,
// --tie-embeddings, --vocab, --dropout (through the family's config: a flag the family has no use
// for — --heads for the mlp, --rope-theta for GPT-2 — never contradicts) and
// --seq-len (against the sequence length the checkpoint was trained at, which the data order
// depends on). --init-from is not read when a checkpoint is resumed.
#pragma once
#include <functional>
#include <string>

#include "runtime/common/option_check.h"
#include "runtime/setup/train_config.h"

namespace st::runtime {

// With cfg.resume and a complete checkpoint under cfg.checkpoint_dir (the one a resume takes:
// CheckpointDir::resume_point, runtime/io/checkpoint_dir.h), the model flags of `cfg` reconciled
// with it: `given(flag)` says whether a flag was set (command line or YAML); a given flag that
// contradicts the checkpoint calls fail(flag, "… contradicts …"); the others take the
// checkpoint's values. Without --resume or a checkpoint to resume, cfg is left as it is.
void take_model_from_checkpoint(TrainConfig& cfg, const std::function<bool(const std::string& flag)>& given,
                                const OptionFail& fail);

}  // namespace st::runtime
