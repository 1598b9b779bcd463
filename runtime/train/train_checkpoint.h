// What a training checkpoint holds and how it is written/read (the directory mechanics —
// temporary name, rename, retention — are runtime/io/checkpoint_dir.h's):
//   model.safetensors      full f32 weights by full name (the optimizer's masters, so fp16/bf16
//                          runs lose nothing); HF GPT-2 names for the GPT, {"format": "pt"}
//   config.json            LanguageModel::config_json() — for the GPT the HF config, so the
//                          directory loads in transformers (GPT2LMHeadModel.from_pretrained)
//   optimizer.safetensors  Optimizer::state_dict(): step, moments / momentum, low-precision masters
//   state.json             TrainState below
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/nn/language_model.h"
#include "runtime/optim/optimizer.h"

namespace st::runtime {

struct TrainState {
  int64_t step = 0;            // optimizer steps completed (the next step to run, from 0)
  int64_t global_batch = 0;    // G: sequences per step; step s reads sequences s·G … s·G + G − 1
  int64_t seq_len = 0;
  bool shuffle = false;        // the data order (runtime/data/token_data.h); older files: sequential
  uint64_t shuffle_seed = 0;
  int64_t schedule_steps = 0;  // the lr schedule's length; 0: not recorded (older files)
  uint64_t rng_seed = 0, rng_offset = 0;  // the model's dropout generator
  double loss_scale = 1.0;
  int64_t loss_scale_good_steps = 0;
  std::string precision = "fp32", optimizer = "adamw";
  nlohmann::json layout;       // {"dp", "tp", "pp", "micro_batch", "grad_accum"}
  nlohmann::json model;        // {"family", "config"}: what build_model_from_json() needs
  nlohmann::json to_json() const;
  static TrainState from_json(const nlohmann::json& j, const std::string& where);
};

// Writes one complete checkpoint for `state.step` under ROOT (atomically), then keeps the newest
// `keep` (≤ 0: all). Returns the final directory.
std::string save_train_checkpoint(const std::string& root, const TrainState& state, const LanguageModel& model,
                                  const Optimizer& opt, int64_t keep);

// The same from tensors the caller gathered (sharded layouts): weights and optimizer state by name.
std::string save_train_checkpoint(const std::string& root, const TrainState& state, const nlohmann::json& model_config,
                                  const NamedTensors& weights, const NamedTensors& optimizer_state, int64_t keep);

struct LoadedCheckpoint {
  std::string path;
  TrainState state;
  std::map<std::string, Tensor> model;      // model.safetensors
  std::map<std::string, Tensor> optimizer;  // optimizer.safetensors
};
// Reads the checkpoint directory `path` (a step_* directory).
LoadedCheckpoint load_train_checkpoint(const std::string& path);

}  // namespace st::runtime
