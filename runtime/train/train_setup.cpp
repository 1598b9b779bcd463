// The model a run trains and one replica's inputs (see the header).
#include "runtime/train/train_setup.h"

#include "runtime/data/data_spec.h"
#include "runtime/io/checkpoint_dir.h"
#include "runtime/optim/mixed_precision.h"
#include "runtime/parallel/state_io.h"
#include "runtime/plan/memory_check.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/setup/model_registry.h"
#include "runtime/train/train_checkpoint.h"
#include "tensor/memory_category.h"
#include "tensor/storage.h"

namespace st::runtime {
namespace {

// What makes a token file's ids fit: a larger --vocab (GPT-2's, for ids of its tokenizer), or —
// when the model comes from a checkpoint or --init-from — a file made for that model.
std::string vocab_fix(const TrainConfig& cfg, const ModelPlan& plan, int64_t max_tok) {
  if (!plan.resume_path.empty()) return ": the model comes from " + plan.resume_path + "; this file was made for another one";
  if (!cfg.init_from.empty()) return ": the model comes from --init-from " + cfg.init_from + "; this file was made for another one";
  constexpr int64_t kGpt2Ids = 50257, kGpt2Padded = 50304;  // GPT-2's BPE; padded to a multiple of 128
  if (max_tok < kGpt2Ids)
    return " (a GPT-2 token file?): give --vocab " + std::to_string(kGpt2Padded) + " (GPT-2's " + std::to_string(kGpt2Ids) +
           " ids padded to a multiple of 128)";
  return ": give --vocab " + std::to_string((max_tok + 1 + 127) / 128 * 128) + " or more";
}

}  // namespace

ModelPlan plan_model(const TrainConfig& cfg, int64_t tp, int64_t dp) {
  ModelPlan plan;
  if (cfg.resume) {
    ST_CHECK(!cfg.checkpoint_dir.empty(), ValueError, "--resume needs --checkpoint-dir");
    const CheckpointDir dir(cfg.checkpoint_dir);
    if (cfg.resume_step >= 0) {  // a step folder named by --checkpoint-dir (checkpoint_guard.h checked it is the newest)
      plan.resume_path = dir.path_for(cfg.resume_step);
    } else {
      const CheckpointDir::ResumePoint point = dir.resume_point();  // incomplete newer steps passed over
      ST_CHECK(!point.path.empty() || dir.complete_steps().empty(), IOError, "--resume: " << point.note);
      plan.resume_path = point.path;
      if (!point.note.empty()) plan.resume_note = "--resume: " + point.note;
    }
  }
  if (!plan.resume_path.empty()) {
    TrainState st = TrainState::from_json(read_state(plan.resume_path, /*require_checksum=*/!cfg.allow_unchecked), plan.resume_path + "/state.json");
    check_config_json(plan.resume_path, st.model.value("config", nlohmann::json()));  // what HF reads says the same
    plan.entry = st.model;
    ST_CHECK(cfg.model.empty() || plan.entry.value("family", "") == cfg.model, ValueError,
             "--resume: the checkpoint " << plan.resume_path << " holds a " << plan.entry.value("family", "?")
                                         << " model, --model is " << cfg.model);
  } else {
    plan.entry = model_entry(cfg);
    check_fits_in_memory(cfg, plan.entry, tp, dp);  // before the model is described or a parameter allocated
  }
  const ModelDescription at_context = describe_model(plan.entry, 1);
  plan.seq_len = cfg.seq_len > 0 ? cfg.seq_len : at_context.context_length;
  ST_CHECK(plan.seq_len <= at_context.context_length, ValueError,
           "--seq-len " << plan.seq_len << " exceeds the model's context length " << at_context.context_length);
  plan.description = describe_model(plan.entry, plan.seq_len);
  return plan;
}

ModelForm model_form(const TrainConfig& cfg, int64_t dp, std::shared_ptr<comm::Communicator> cp) {
  ModelForm f;
  f.sequence_parallel = cfg.sequence_parallel && cfg.tp > 1;
  if (cp && cp->size() > 1) f.cp = std::move(cp);
  f.fp8 = precision_policy(cfg).fp8;
  f.fp8_device = cfg.device;
  // the chunked head's loss reads wte outside the head's forward, where ZeRO-3 has released it
  f.chunked_head = head_is_chunked(plan_layout(cfg, dp));
  return f;
}

TrainInputs prepare_training(const TrainConfig& cfg, const ModelPlan& plan, std::vector<LayerRange> layers, int64_t dp,
                             int64_t replica, std::shared_ptr<comm::Communicator> tp, bool sharded_start,
                             std::shared_ptr<comm::Communicator> cp) {
  ST_CHECK(!cfg.data.empty(), ValueError, "train: no token file (--data)");
  TrainInputs in;
  in.resume_path = plan.resume_path;
  in.device = cfg.device;
  in.data = open_token_source(cfg.data, SequenceOrder{cfg.shuffle, cfg.seed});
  const MaxToken max_in = in.data->max_token_in();  // the file that holds it: a corpus's shard
  const int64_t max_tok = max_in.id;
  ST_CHECK(max_tok < plan.description.vocab_size, ValueError,
           max_in.file << " holds token id " << max_tok << ", outside the model's vocabulary of "
                    << plan.description.vocab_size << vocab_fix(cfg, plan, max_tok));
  const ModelForm form = model_form(cfg, dp, cp);
  if (sharded_start) {  // ZeRO-3: no parameter's bytes; the Trainer fills this rank's pieces (Zero3::shard)
    Storage::DeferAllocation defer;
    in.model = build_model_from_json(plan.entry, ModelBuild{layers, tp, dropout_seed(cfg.seed), form});
  } else if (!in.resume_path.empty()) {  // the Trainer fills it from the checkpoint
    in.model = build_model_from_json(plan.entry, ModelBuild{layers, tp, dropout_seed(cfg.seed), form});
    MemoryCategoryScope mem(MemoryCategory::params);
    in.model->move_parameters(in.device);
  } else {
    in.model = build_model(cfg, layers, tp, in.device, form);
    if (!cfg.init_from.empty()) check_finite(in.model->named_parameters(), "--init-from " + cfg.init_from);
  }
  in.layout.micro_batch = cfg.micro_batch;
  in.layout.grad_accum = cfg.grad_accum;
  in.layout.dp = dp;
  in.layout.replica = replica;
  in.layout.seq_len = plan.seq_len;
  return in;
}

}  // namespace st::runtime
