#include "runtime/train/train_checkpoint.h"

#include <cstdlib>

#include "runtime/io/checkpoint_dir.h"
#include "runtime/observe/trace.h"
#include "runtime/common/json_io.h"
#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_index.h"
#include "runtime/parallel/tp_shard.h"

namespace st::runtime {

nlohmann::json TrainState::to_json() const {
  nlohmann::json j = {{"format", 1},
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
  if (files.is_object()) j["files"] = files;
  if (!data_identity.empty()) j["data"]["identity"] = data_identity;
  return j;
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
    s.data_identity = j.at("data").value("identity", std::string());
    if (j.contains("lr_schedule")) s.schedule_steps = j.at("lr_schedule").value("total_steps", int64_t{0});
    s.rng_seed = j.at("rng").at("seed").get<uint64_t>();
    s.rng_offset = j.at("rng").at("offset").get<uint64_t>();
    s.loss_scale = j.at("loss_scale").at("scale").get<double>();
    s.loss_scale_good_steps = j.at("loss_scale").at("good_steps").get<int64_t>();
    s.precision = j.at("precision").get<std::string>();
    s.optimizer = j.at("optimizer").get<std::string>();
    s.layout = j.at("layout");
    s.model = j.at("model");
    s.files = j.value("files", nlohmann::json());  // absent in older checkpoints
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(IOError, where << ": " << e.what());
  }
  return s;
}

namespace {

void barrier(const StateSharding& sharding) {
  if (sharding.world && sharding.world->size() > 1) sharding.world->barrier()->wait();
}

// Indexes a part written as several files (one file needs none: HF reads <base>.safetensors).
void index_if_sharded(const std::string& dir, const std::string& base, const std::vector<std::string>& files) {
  if (files.size() > 1) write_safetensors_index(dir, base, files);
}

// Rank 0 creates the temporary directory (removing stale ones first); a barrier: it exists,
// empty, for every rank. Returns its path.
std::string begin_temp(const std::string& root, int64_t step, const StateSharding& sharding) {
  CheckpointDir dir(root);
  if (sharding.rank() == 0) {
    dir.remove_stale();
    dir.begin(step);
  }
  barrier(sharding);
  return dir.temp_path_for(step);
}

// optimizer keys: "step" is rank 0's; "fp8.<gemm>.<part>" (--fp8-scaling delayed) the caller
// decides whole; "<slot>.<param>" goes with its parameter
WrittenElsewhere optimizer_elsewhere(const WrittenElsewhere& elsewhere, bool lead) {
  return [elsewhere, lead](const std::string& key) {
    if (key == "step") return !lead;
    if (key.compare(0, 4, "fp8.") == 0) return elsewhere && elsewhere(key);  // the caller's (fp8_delayed.h)
    const size_t dot = key.find('.');
    return dot != std::string::npos && elsewhere && elsewhere(key.substr(dot + 1));
  };
}

// After every rank's files are written and fsynced (the caller's barrier): rank 0 writes the
// indexes, config.json and state.json; the seam; rank 0 renames and keeps the newest `keep`.
std::string commit(const std::string& root, const std::string& tmp, const TrainState& state,
                   const nlohmann::json& model_config, const std::vector<std::string>& model_files,
                   const std::vector<std::string>& state_files, bool lead, int64_t keep, bool crash_before_commit) {
  if (lead) {
    index_if_sharded(tmp, "model", model_files);
    index_if_sharded(tmp, "optimizer", state_files);
    write_json_file(tmp + "/config.json", model_config);
    if (model_config.contains("eos_token_id"))  // as save_pretrained writes it: what generate() stops at
      write_json_file(tmp + "/generation_config.json", {{"_from_model_config", true},
                                                        {"bos_token_id", model_config.value("bos_token_id", nlohmann::json())},
                                                        {"eos_token_id", model_config["eos_token_id"]}});
    std::vector<std::string> files = model_files;
    files.insert(files.end(), state_files.begin(), state_files.end());
    TrainState recorded = state;
    recorded.files = state_files_record(tmp, files);  // where a header edit cannot also fix it
    write_state(tmp, recorded.to_json());
  }
  if (crash_before_commit)
    ST_THROW(Error, "test seam crash_before_commit (SHARDTRAIN_TEST_CRASH_BEFORE_COMMIT): stopping before the rename of " << tmp);
  std::string final_path;
  if (lead) {
    CheckpointDir dir(root);
    final_path = dir.commit(state.step);
    dir.keep_last(keep);
  }
  return final_path;
}

}  // namespace

std::string save_train_checkpoint(const std::string& root, const TrainState& state, const nlohmann::json& model_config,
                                  const NamedTensors& weights, const NamedTensors& optimizer_state,
                                  const ShardRule& rule, const WrittenElsewhere& elsewhere,
                                  const StateSharding& sharding, int64_t keep, bool crash_before_commit) {
  const bool lead = sharding.rank() == 0;
  const std::string tmp = begin_temp(root, state.step, sharding);
  const std::vector<std::string> model_files =
      write_parts(tmp, "model", weights, rule, elsewhere, sharding, {{"format", "pt"}});
  const ShardRule state_rule = rule ? optimizer_state_shard_rule(rule) : nullptr;
  const std::vector<std::string> state_files = write_parts(tmp, "optimizer", optimizer_state, state_rule,
                                                           optimizer_elsewhere(elsewhere, lead), sharding);
  barrier(sharding);  // every rank's files are written and fsynced
  return commit(root, tmp, state, model_config, model_files, state_files, lead, keep, crash_before_commit);
}

CheckpointSnapshot snapshot_train_checkpoint(const std::string& root, const TrainState& state,
                                             const nlohmann::json& model_config, const NamedTensors& weights,
                                             const NamedTensors& optimizer_state, const ShardRule& rule,
                                             const WrittenElsewhere& elsewhere, const StateSharding& sharding,
                                             SnapshotPlans& plans) {
  CheckpointSnapshot s;
  s.root = root;
  s.state = state;
  s.model_config = model_config;
  s.lead = sharding.rank() == 0;
  SnapshotPlans::Parts parts;
  {
    trace::Scope ts("checkpoint snapshot", "optimizer");
    parts = plans.snapshot(weights, optimizer_state, rule, elsewhere, optimizer_elsewhere(elsewhere, s.lead), sharding,
                           {{"format", "pt"}});
  }
  s.model = std::move(parts.model);
  s.optimizer = std::move(parts.optimizer);
  if (parts.reused) {  // the writers make the directory (the header says why that is safe)
    s.tmp = CheckpointDir(root).temp_path_for(state.step);
    s.make_temp = true;
  } else {  // every rank built its plans here: the first save's stale directories go, behind a barrier
    trace::Scope ts("checkpoint begin", "optimizer");
    s.tmp = begin_temp(root, state.step, sharding);
  }
  return s;
}

void make_snapshot_temp(const CheckpointSnapshot& s) {
  if (s.make_temp) CheckpointDir(s.root).join_temp(s.state.step);
}

void write_checkpoint_snapshot(const CheckpointSnapshot& s) {
  make_snapshot_temp(s);
  write_snapshot(s.tmp, *s.model);
  write_snapshot(s.tmp, *s.optimizer);
}

std::string commit_train_checkpoint(const CheckpointSnapshot& s, int64_t keep, bool crash_before_commit) {
  return commit(s.root, s.tmp, s.state, s.model_config, s.model->files, s.optimizer->files, s.lead, keep,
                crash_before_commit);
}

OpenedCheckpoint open_train_checkpoint(const std::string& path, bool allow_unchecked) {
  OpenedCheckpoint c;
  c.path = path;
  c.state = TrainState::from_json(read_state(path, /*require_checksum=*/!allow_unchecked), path + "/state.json");
  c.model = std::make_shared<SafetensorsStore>(path, "model");
  c.optimizer = std::make_shared<SafetensorsStore>(path, "optimizer");
  check_files_record(c.state.files, *c.model, "model", allow_unchecked);
  check_files_record(c.state.files, *c.optimizer, "optimizer", allow_unchecked);
  return c;
}

}  // namespace st::runtime
