#include "runtime/train/train_checkpoint.h"

#include "runtime/io/checkpoint_dir.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"

namespace st::runtime {

nlohmann::json TrainState::to_json() const {
  return {{"format", 1},
          {"step", step},
          {"data",
           {{"global_batch", global_batch},
            {"seq_len", seq_len},
            {"next_sequence", step * global_batch},
            {"shuffle", shuffle},
            {"shuffle_seed", shuffle_seed}}},
          {"lr_schedule", {{"total_steps", schedule_steps}}},
          {"rng", {{"seed", rng_seed}, {"offset", rng_offset}}},
          {"loss_scale", {{"scale", loss_scale}, {"good_steps", loss_scale_good_steps}}},
          {"precision", precision},
          {"optimizer", optimizer},
          {"layout", layout},
          {"model", model}};
}

TrainState TrainState::from_json(const nlohmann::json& j, const std::string& where) {
  TrainState s;
  try {
    ST_CHECK(j.at("format").get<int>() == 1, IOError, where << ": unknown state format " << j.at("format").dump());
    s.step = j.at("step").get<int64_t>();
    s.global_batch = j.at("data").at("global_batch").get<int64_t>();
    s.seq_len = j.at("data").at("seq_len").get<int64_t>();
    s.shuffle = j.at("data").value("shuffle", false);  // added fields: absent in older checkpoints
    s.shuffle_seed = j.at("data").value("shuffle_seed", uint64_t{0});
    if (j.contains("lr_schedule")) s.schedule_steps = j.at("lr_schedule").value("total_steps", int64_t{0});
    s.rng_seed = j.at("rng").at("seed").get<uint64_t>();
    s.rng_offset = j.at("rng").at("offset").get<uint64_t>();
    s.loss_scale = j.at("loss_scale").at("scale").get<double>();
    s.loss_scale_good_steps = j.at("loss_scale").at("good_steps").get<int64_t>();
    s.precision = j.at("precision").get<std::string>();
    s.optimizer = j.at("optimizer").get<std::string>();
    s.layout = j.at("layout");
    s.model = j.at("model");
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(IOError, where << ": " << e.what());
  }
  return s;
}

std::string save_train_checkpoint(const std::string& root, const TrainState& state, const LanguageModel& model,
                                  const Optimizer& opt, int64_t keep) {
  return save_train_checkpoint(root, state, model.config_json(), opt.master_weights(), opt.state_dict(), keep);
}

std::string save_train_checkpoint(const std::string& root, const TrainState& state, const nlohmann::json& model_config,
                                  const NamedTensors& weights, const NamedTensors& optimizer_state, int64_t keep) {
  CheckpointDir dir(root);
  const std::string tmp = dir.begin(state.step);
  save_safetensors(tmp + "/model.safetensors", weights, {{"format", "pt"}});
  write_json_file(tmp + "/config.json", model_config);
  save_safetensors(tmp + "/optimizer.safetensors", optimizer_state);
  write_state(tmp, state.to_json());
  std::string final_path = dir.commit(state.step);
  dir.keep_last(keep);
  return final_path;
}

LoadedCheckpoint load_train_checkpoint(const std::string& path) {
  LoadedCheckpoint c;
  c.path = path;
  c.state = TrainState::from_json(read_state(path), path + "/state.json");
  c.model = load_safetensors(path + "/model.safetensors");
  c.optimizer = load_safetensors(path + "/optimizer.safetensors");
  return c;
}

}  // namespace st::runtime
