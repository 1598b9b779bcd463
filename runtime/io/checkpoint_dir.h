// Checkpoint directories: one per step, `ROOT/step_00000010/`, holding the weights and optimizer
// state (safetensors, possibly sharded over files with an index) and state.json. A checkpoint
// is written under a temporary name `ROOT/.tmp-step_00000010/`, every file and the directory are
// fsynced, and it is renamed to its final name; so a directory named step_* is complete by
// construction, and a crash leaves only a `.tmp-*` (or `.old-*`) directory that listing ignores
// and remove_stale() deletes (with the `.gather-*` part files of older versions).
// One process (rank 0) calls begin()/commit(); other ranks write their files into the temporary
// directory in between (runtime/train/train_checkpoint.h puts a barrier after begin() and one
// before commit()).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace st::runtime {

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string root);  // nothing is created until begin()
  const std::string& root() const { return root_; }

  static std::string step_name(int64_t step);  // "step_00000010"
  std::string path_for(int64_t step) const;      // ROOT/step_00000010
  std::string temp_path_for(int64_t step) const;  // ROOT/.tmp-step_00000010

  // Creates ROOT if needed and an empty temporary directory for `step` (removing a leftover of
  // the same name); returns its path.
  std::string begin(int64_t step) const;
  // fsyncs every file in the temporary directory and the directory itself, renames it to the
  // final name (replacing an existing checkpoint of the same step), fsyncs ROOT; returns the
  // final path. Throws IOError when begin() was not called.
  std::string commit(int64_t step) const;

  std::vector<int64_t> complete_steps() const;  // ascending; empty when ROOT does not exist
  std::optional<int64_t> latest_step() const;
  std::string latest() const;  // path of the newest complete checkpoint, "" when none
  std::vector<std::string> stale() const;  // leftover .tmp-* / .old-* / .gather-* directories
  void remove_stale() const;
  // Deletes all but the newest `n` complete checkpoints (n ≤ 0 keeps all); returns the deleted steps.
  std::vector<int64_t> keep_last(int64_t n) const;

 private:
  std::string root_;
};

// DIR/state.json (step, data position, RNG, loss scale, layout: the trainer owns the fields).
// write_state adds "checksum64", the checksum64 (runtime/common/checksum.h) of the state's compact
// dump; read_state checks it and removes it (IOError naming the file on a mismatch); a state.json
// without one is returned as it is.
void write_state(const std::string& checkpoint_path, const nlohmann::json& state);
nlohmann::json read_state(const std::string& checkpoint_path);

}  // namespace st::runtime
