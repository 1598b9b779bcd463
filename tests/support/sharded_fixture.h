// A copy of the Hugging Face fixture (tests/fixtures/hf_gpt2_tiny) in HF's sharded layout: its
// model.safetensors cut into `parts` files of consecutive tensors plus model.safetensors.index.json,
// config.json beside them — what save_pretrained writes for a model over its shard size: plain
// safetensors, {"format": "pt"} and no shardtrain checksums (written here byte by byte, not by our
// writer), so a rank's partial reads of it read exactly its slices.
#pragma once
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
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
    nlohmann::ordered_json header = {{"__metadata__", {{"format", "pt"}}}};
    std::string data;
    for (size_t i = k * n / parts; i < (k + 1) * n / parts; ++i) {
      const auto& [name, t] = f.tensors[i];  // f32, contiguous
      header[name] = {{"dtype", "F32"}, {"shape", t.shape()}, {"data_offsets", {data.size(), data.size() + t.nbytes()}}};
      data.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    files.push_back(runtime::shard_file_name("model", k + 1, parts));
    std::ofstream out(fs::path(dir) / files.back(), std::ios::binary | std::ios::trunc);
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << text << data;
  }
  runtime::write_safetensors_index(dir, "model", files);
}

}  // namespace st::testing
