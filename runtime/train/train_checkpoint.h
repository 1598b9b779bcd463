// What a training checkpoint holds and how it is written/read (the directory mechanics —
// temporary name, rename, retention — are runtime/io/checkpoint_dir.h's; who writes which part,
// runtime/parallel/state_sharding.h's):
//   model.safetensors, or model.safetensors.index.json + model-0000k-of-0000n.safetensors
//                          full f32 weights by full name (the optimizer's masters, so fp16/bf16
//                          runs lose nothing), one file per writing rank; the family's HF names for
//                          the decoders, {"format": "pt"}: Hugging Face's sharded layout
//   config.json            LanguageModel::config_json() — for the decoders the HF config, so the
//                          directory loads in transformers (GPT2LMHeadModel / LlamaForCausalLM)
//   optimizer.safetensors, or optimizer.safetensors.index.json + optimizer-0000k-of-0000n.safetensors
//                          Optimizer::state_dict() by key: step, moments / momentum,
//                          low-precision masters — full tensors, the same layout
//   state.json             TrainState below, and the header checksum of every tensor file
//                          ("files": runtime/io/checkpoint_dir.h), which opening holds them to
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/io/safetensors_index.h"
#include "runtime/nn/language_model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/state_sharding.h"
#include "runtime/train/snapshot_plans.h"

namespace st::runtime {

struct TrainState {
  int64_t step = 0;            // optimizer steps completed (the next step to run, from 0)
  int64_t global_batch = 0;    // G: sequences per step; step s reads sequences s·G … s·G + G − 1
  int64_t seq_len = 0;
  bool shuffle = false;        // the data order (runtime/data/token_data.h); older files: sequential
  uint64_t shuffle_seed = 0;
  std::string data_identity;   // runtime/data/data_identity.h of the data read; "": not recorded (older files)
  int64_t schedule_steps = 0;  // the lr schedule's length; 0: not recorded (older files)
  uint64_t rng_seed = 0, rng_offset = 0;  // the model's dropout generator
  double loss_scale = 1.0;
  int64_t loss_scale_good_steps = 0;
  std::string precision = "fp32", optimizer = "adamw";
  nlohmann::json layout;       // {"dp", "tp", "cp", "pp", "micro_batch", "grad_accum"}
  nlohmann::json model;        // {"family", "config"}: what build_model_from_json() needs
  nlohmann::json files;        // {"<file>": header checksum}: every tensor file (null: older files, none)
  nlohmann::json to_json() const;
  static TrainState from_json(const nlohmann::json& j, const std::string& where);
};

// Writes one complete checkpoint for `state.step` under ROOT, each rank its share (collective
// over sharding.world; one process: sharding.world null): rank 0 creates the temporary
// directory (a leftover of the same name, or a crash's .tmp-* / .gather-* of earlier runs, is
// removed first); a barrier; every rank writes and fsyncs its files of `weights` and
// `optimizer_state` (this rank's tensors; `rule` splits them over the tp group; `elsewhere`
// names the parameters another rank writes); a barrier (the communicator's deadline); rank 0
// writes the indexes, config.json and state.json and commits with the one rename, then keeps
// the newest `keep` (≤ 0: all); state.json records the header checksum of every tensor file
// written (`state.files` is ignored). A crash before the rename leaves the previous checkpoint the
// newest. `crash_before_commit` (a test seam, TrainSeams) makes every rank throw right before the
// rename. Returns the final directory on rank 0, "" elsewhere.
std::string save_train_checkpoint(const std::string& root, const TrainState& state, const nlohmann::json& model_config,
                                  const NamedTensors& weights, const NamedTensors& optimizer_state,
                                  const ShardRule& rule, const WrittenElsewhere& elsewhere,
                                  const StateSharding& sharding, int64_t keep, bool crash_before_commit = false);

// The same save in three parts, for --async-checkpoint (runtime/train/async_checkpoint.h):
//   snapshot_train_checkpoint   collective, on the training thread: this rank's share copied into
//                               host memory through `plans` (runtime/train/snapshot_plans.h: the
//                               plans and the host memory kept by the caller from one save to the
//                               next). When the plans were built at this save, also the temporary
//                               directory as above (stale ones removed; a barrier) — the same
//                               collectives, in the same order, as the save; when the kept ones
//                               served, no directory work at all: `make_temp`, the writers make it
//   write_checkpoint_snapshot   this rank's files written and fsynced (the temporary directory
//                               first made when `make_temp`): no collective, no tensor (a
//                               background thread runs it while training goes on)
//   commit_train_checkpoint     after every rank's write has finished (the caller's collective
//                               says so): rank 0 writes the indexes, config.json, state.json and
//                               renames, keeps the newest `keep`; the seam as above
// The files are byte for byte those save_train_checkpoint writes for the same tensors.
//
// Why a later save may leave the directory to its writers: the first save of a run (which builds
// the plans) removed every stale .tmp-* under ROOT behind a barrier, and since then each save's
// temporary directory was renamed before the next save began (at most one in flight), so the
// directory a later save writes into is new; every rank's writer creates it if missing
// (CheckpointDir::join_temp, idempotent), so no rank waits for rank 0 and none removes another's
// files.
struct CheckpointSnapshot {
  std::string root, tmp;  // the checkpoints' directory and this save's temporary one
  bool make_temp = false; // the writer creates `tmp` (kept plans: no directory work at the boundary)
  TrainState state;
  nlohmann::json model_config;
  bool lead = false;      // rank 0
  std::shared_ptr<const PartSnapshot> model, optimizer;  // the kept plans' own, or this save's
};
CheckpointSnapshot snapshot_train_checkpoint(const std::string& root, const TrainState& state,
                                             const nlohmann::json& model_config, const NamedTensors& weights,
                                             const NamedTensors& optimizer_state, const ShardRule& rule,
                                             const WrittenElsewhere& elsewhere, const StateSharding& sharding,
                                             SnapshotPlans& plans);
// The temporary directory of `s` made when `make_temp` (a writer's first act; no-op otherwise).
void make_snapshot_temp(const CheckpointSnapshot& s);
void write_checkpoint_snapshot(const CheckpointSnapshot& s);
// Returns the final directory on rank 0, "" elsewhere.
std::string commit_train_checkpoint(const CheckpointSnapshot& s, int64_t keep, bool crash_before_commit = false);

// A checkpoint opened for reading: its state, and its weights and optimizer state as stores
// (headers read; tensors read on request, each rank its part: runtime/parallel/state_io.h).
struct OpenedCheckpoint {
  std::string path;
  TrainState state;
  std::shared_ptr<const SafetensorsStore> model;      // "model" (one file or HF's sharded index)
  std::shared_ptr<const SafetensorsStore> optimizer;  // "optimizer", likewise
};
// Opens the checkpoint directory `path` (a step_* directory): state.json checked against its
// checksum, each tensor file's header against state.json's record of it (IOError naming the file).
// allow_unchecked: --allow-unchecked 1 (runtime/io/checkpoint_dir.h read_state, check_files_record).
OpenedCheckpoint open_train_checkpoint(const std::string& path, bool allow_unchecked = false);

}  // namespace st::runtime
