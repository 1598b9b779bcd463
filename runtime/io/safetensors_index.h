// A set of safetensors files read as one name → tensor store, in either of Hugging Face's layouts:
//   DIR/<base>.safetensors                       one file, or
//   DIR/<base>.safetensors.index.json            {"metadata": {"total_size": N},
//                                                 "weight_map": {"<name>": "<file>", ...}}
//   DIR/<base>-00001-of-00003.safetensors …      the files it names (any names: the map decides)
// (base "model" for weights, as transformers' from_pretrained reads; checkpoints use "optimizer"
// for the optimizer state the same way). Each file's header is read when the store opens and
// validated against the index (a name the index maps to a file that lacks it, or a file holding a
// name the index maps elsewhere, is an IOError); tensors are read on request by positioned reads
// (runtime/io/safetensors.h), so a rank reads only what it holds.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/io/safetensors.h"

namespace st::runtime {

class SafetensorsStore {
 public:
  // Whether DIR holds <base>.safetensors.index.json or <base>.safetensors.
  static bool exists(const std::string& dir, const std::string& base);
  // IOError naming DIR when neither layout is there (or a file is broken).
  SafetensorsStore(const std::string& dir, const std::string& base);

  const std::string& where() const { return where_; }  // the index or the single file (for errors)
  const std::string& directory() const { return dir_; }
  // Each file's canonical header checksum (SafetensorsReader::header_checksum), by file name in DIR.
  std::map<std::string, uint64_t> header_checksums() const;
  // The files (names in DIR) whose data carry no checksums (SafetensorsReader::has_checksums).
  std::vector<std::string> unchecked_files() const;
  std::vector<std::string> names() const;             // sorted
  bool contains(const std::string& name) const { return file_of_.count(name) > 0; }
  // The entry (dtype, shape) of `name`; IOError naming the store when absent.
  const SafetensorsReader::Entry& entry(const std::string& name) const;
  Tensor read(const std::string& name) const;
  Tensor read_ranges(const std::string& name, int64_t dim, const std::vector<DimRange>& ranges) const;
  Tensor read_runs(const std::string& name, const std::vector<SafetensorsReader::Run>& runs, int64_t n) const;

 private:
  const SafetensorsReader& reader(const std::string& name) const;
  std::string dir_, where_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> file_of_;  // name → files_ index
};

// HF's shard file name: "<base>-00002-of-00003.safetensors" (k from 1).
std::string shard_file_name(const std::string& base, int k, int n);
// Writes DIR/<base>.safetensors.index.json for `files` (names relative to DIR), reading each
// file's header for its tensor names and data size (metadata.total_size = their sum).
// Atomic (temporary name, fsync, rename). IOError when two files hold the same name.
void write_safetensors_index(const std::string& dir, const std::string& base, const std::vector<std::string>& files);

}  // namespace st::runtime
