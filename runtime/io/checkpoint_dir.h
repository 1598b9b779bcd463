// Checkpoint directories: one per step, `ROOT/step_00000010/`, holding the weights and optimizer
// state (safetensors, possibly sharded over files with an index), config.json and state.json. A checkpoint
// is written under a temporary name `ROOT/.tmp-step_00000010/`, every file and the directory are
// fsynced, and it is renamed to its final name; so a directory named step_* is complete by
// construction, and a crash leaves only a `.tmp-*` (or `.old-*`) directory that listing ignores
// and remove_stale() deletes (with the `.gather-*` part files of older versions).
// One process (rank 0) calls begin()/commit(); other ranks write their files into the temporary
// directory in between (runtime/train/train_checkpoint.h puts a barrier after begin() and one
// before commit()).
//
// A step_* directory may still lack files (a copy cut short, a file deleted by hand): such a
// step is *incomplete* — no state.json or config.json, or a tensor file that state.json or an
// index names is missing — and resume_point() passes over it to the newest complete one, saying
// so in one line. A file that is there but wrong (a checksum, a header) is not passed over: the
// reader's error ends the run before anything is written. state.json records the canonical
// header checksum of every tensor file (state_files_record), which check_files_record holds each
// opened file to: the file's own header checksum cannot vouch for a header rewritten without it.
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
  // Creates ROOT and the temporary directory for `step` when missing, keeping what is there;
  // returns its path. For writers on several ranks that each make it before writing their files
  // into it, none waiting for another (an asynchronous save after the first,
  // runtime/train/train_checkpoint.h says when that is safe): concurrent calls all succeed.
  std::string join_temp(int64_t step) const;
  // fsyncs every file in the temporary directory and the directory itself, renames it to the
  // final name (replacing an existing checkpoint of the same step), fsyncs ROOT; returns the
  // final path. Throws IOError when begin() was not called.
  std::string commit(int64_t step) const;

  std::vector<int64_t> complete_steps() const;  // ascending; empty when ROOT does not exist
  std::optional<int64_t> latest_step() const;
  std::string latest() const;  // path of the newest complete checkpoint, "" when none
  std::vector<std::string> stale() const;  // leftover .tmp-* / .old-* / .gather-* directories
  void remove_stale() const;
  // Deletes all but the newest `n` complete checkpoints (n ≤ 0 keeps all; an incomplete one —
  // below — is neither counted nor deleted, so the last whole checkpoint is never the one that
  // goes); returns the deleted steps.
  std::vector<int64_t> keep_last(int64_t n) const;

  // Why the checkpoint of `step` is incomplete ("no state.json", "model-00002-of-00004.safetensors
  // is missing"), "" when every file it should hold is there (whether right or not is the readers'
  // to say).
  std::string incomplete(int64_t step) const;
  // The checkpoint a resume (or generate given ROOT) takes: the newest complete one ("" when
  // there is none), and `note`, one line naming the newer incomplete ones passed over ("" when
  // none was): "ROOT: step_00000004 (no state.json) is incomplete; the newest complete one is
  // step_00000002".
  struct ResumePoint {
    std::string path;
    int64_t step = -1;
    std::string note;
  };
  ResumePoint resume_point() const;

 private:
  std::string root_;
};

// DIR/state.json (step, data position, RNG, loss scale, layout: the trainer owns the fields).
// write_state adds "checksum64", the checksum64 (runtime/common/checksum.h) of the state's compact
// dump; read_state checks it and removes it (IOError naming the file on a mismatch); a state.json
// without one is returned as it is.
void write_state(const std::string& checkpoint_path, const nlohmann::json& state);
// require_checksum: a state.json without its checksum is an IOError too (a checkpoint's, opened
// to resume or generate from: every one written since 2026-12-03 has it; --allow-unchecked 1
// reads one without).
nlohmann::json read_state(const std::string& checkpoint_path, bool require_checksum = false);

// {"<file>": "<header checksum, 16 hex digits>"} of each safetensors file `files` (names in DIR):
// what state.json's "files" holds (runtime/io/safetensors_checksums.h).
nlohmann::json state_files_record(const std::string& dir, const std::vector<std::string>& files);
class SafetensorsStore;
// Holds the files `store` opened (those of one base: "model", "optimizer") to state.json's
// record `files` (null or absent in older checkpoints: then each file must carry its own
// checksums, as every file written since 2026-12-03 does): each must be recorded with its
// header's checksum, and each recorded file of that base must be among them. IOError naming the file.
// allow_unchecked (--allow-unchecked 1): files without checksums and no record pass, unchecked.
void check_files_record(const nlohmann::json& files, const SafetensorsStore& store, const std::string& base,
                        bool allow_unchecked = false);

// DIR/config.json (what Hugging Face reads) must say what state.json's model config says, key by
// key (keys only config.json has — transformers' own — are ignored): ValueError naming the key and
// both values when an edit made it describe another model than the checkpoint's tensors.
void check_config_json(const std::string& checkpoint_path, const nlohmann::json& config);

}  // namespace st::runtime
