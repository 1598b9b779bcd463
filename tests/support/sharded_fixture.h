// A copy of the Hugging Face fixture (tests/fixtures/hf_gpt2_tiny) in HF's sharded layout: its
// model.safetensors cut into `parts` files of consecutive tensors plus model.safetensors.index.json,
// config.json beside them — what save_pretrained writes for a model over its shard size.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/io/safetensors.h"
#include "runtime/io/safetensors_index.h"

namespace st::testing {

inline void write_sharded_fixture(const std::string& fixture, const std::string& dir, int parts) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  fs::copy_file(fs::path(fixture) / "config.json", fs::path(dir) / "config.json", fs::copy_options::overwrite_existing);
  const runtime::SafetensorsFile f = runtime::read_safetensors(fixture + "/model.safetensors");
  const size_t n = f.tensors.size();
  std::vector<std::string> files;
  for (int k = 0; k < parts; ++k) {
    runtime::NamedTensors part(f.tensors.begin() + k * n / parts, f.tensors.begin() + (k + 1) * n / parts);
    files.push_back(runtime::shard_file_name("model", k + 1, parts));
    runtime::save_safetensors((fs::path(dir) / files.back()).string(), part, {{"format", "pt"}});
  }
  runtime::write_safetensors_index(dir, "model", files);
}

}  // namespace st::testing
