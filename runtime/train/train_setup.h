// What a run is set up from before its Trainer exists: the model it trains (decided before a byte
// is allocated) and, for one replica, the model's layers this rank holds, the token file and the
// batch layout. The layout's wiring (runtime/train/parallel_training.cpp) and the one-process
// Trainer both start here.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/data/token_data.h"
#include "runtime/nn/language_model.h"
#include "runtime/nn/model_form.h"
#include "runtime/setup/train_config.h"
#include "runtime/train/gradient_source.h"

namespace st::runtime {

// The model a run trains, decided before anything is built: the newest complete checkpoint's
// with --resume (its config.json must agree with its state.json; a directory holding only
// incomplete checkpoints is an IOError), else the options'; its {"family", "config"} entry and
// its layers' description
// (runtime/setup/model_registry.h), from which a pipeline partition is cut.
struct ModelPlan {
  nlohmann::json entry;
  std::string resume_path;  // newest complete checkpoint under cfg.checkpoint_dir with --resume, else ""
  std::string resume_note;  // the line on newer incomplete checkpoints passed over ("" for none)
  ModelDescription description;
  int64_t seq_len = 0;  // the run's T: --seq-len, or the model's context length
};
// tp and dp size the memory check (runtime/plan/memory_check.h) that refuses a model this rank cannot hold.
ModelPlan plan_model(const TrainConfig& cfg, int64_t tp = 1, int64_t dp = 1);

// What prepare_training() sets up for one replica: the model's layers this rank holds, in f32 on
// its device (filled from the seed or --init-from; when resuming, shaped like the checkpoint and
// filled by the Trainer; with `sharded_start`, ZeRO-3's, without any bytes: names and shapes only,
// each rank's pieces filled by the Trainer through Zero3::shard), the token file (its ids checked
// against the vocabulary) and the batch layout.
struct TrainInputs {
  std::shared_ptr<LanguageModel> model;
  std::shared_ptr<const TokenSource> data;  // --data: a file, a corpus or a mixture (runtime/data/data_spec.h)
  BatchLayout layout;
  std::string resume_path;  // = plan.resume_path
  Device device = Device::cpu;
};
// With a tp group of several ranks the model is the family's tensor-parallel variant; `layers`
// is the range a pipeline stage holds (default: all); `cp` the context-parallel group (null or
// one rank: none). The model is built in model_form(cfg, dp, cp).
TrainInputs prepare_training(const TrainConfig& cfg, const ModelPlan& plan, std::vector<LayerRange> layers = {}, int64_t dp = 1,
                             int64_t replica = 0, std::shared_ptr<comm::Communicator> tp = nullptr,
                             bool sharded_start = false, std::shared_ptr<comm::Communicator> cp = nullptr);

// The form a run's model is built in (runtime/nn/model_form.h), from its options: sequence
// parallel (--sequence-parallel 1 at tp > 1), context parallel (`cp`), FP8 (--precision fp8: the
// recipe of --fp8-scaling and --fp8-amax-history, the states on --device) and the chunked head
// where the layout keeps the head's weight resident (head_is_chunked: tp 1, no ZeRO-3 over the
// dp × cp ranks). The planner reads the same rule.
ModelForm model_form(const TrainConfig& cfg, int64_t dp = 1, std::shared_ptr<comm::Communicator> cp = nullptr);

}  // namespace st::runtime
