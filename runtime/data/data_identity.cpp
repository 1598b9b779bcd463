// The data's identity (see the header).
#include "runtime/data/data_identity.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

#include "runtime/common/checksum.h"
#include "runtime/data/data_spec.h"
#include "tensor/error.h"

namespace st::runtime {

std::string file_identity(const std::string& path) {
  if (path.empty()) return "none";
  std::ifstream in(path, std::ios::binary);
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || !in) return "missing";
  // the header, then kBlocks blocks spread evenly to the end (the whole file when that is less)
  constexpr uint64_t kHead = 1024, kBlock = 4096, kBlocks = 64;
  Checksum64 sum;
  std::vector<char> buf(kBlock);
  auto take = [&](uint64_t at, uint64_t n) {
    in.seekg(static_cast<std::streamoff>(at));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    sum.update(buf.data(), static_cast<size_t>(in.gcount()));
  };
  if (size <= kHead + kBlocks * kBlock) {
    for (uint64_t at = 0; at < size; at += kBlock) take(at, std::min(kBlock, size - at));
  } else {
    take(0, kHead);
    for (uint64_t k = 0; k < kBlocks; ++k) take(kHead + k * (size - kHead - kBlock) / (kBlocks - 1), kBlock);
  }
  return std::to_string(size) + " bytes, sample " + checksum_hex(sum.digest());
}

std::string data_identity(const std::string& spec) {
  if (spec.empty()) return "none";
  std::vector<DataPart> parts;
  try {
    parts = resolve_data_spec(spec);
  } catch (const Error&) {
    return "missing";
  }
  if (parts.size() == 1 && parts[0].single_file) return file_identity(parts[0].where);
  Checksum64 sum;
  uint64_t files = 0, bytes = 0;
  for (const auto& p : parts) {
    const std::string w = p.where + ":" + std::to_string(p.weight) + "\n";
    sum.update(w.data(), w.size());
    for (const auto& f : p.files) {
      const std::string id = file_identity(f) + "\n";
      sum.update(id.data(), id.size());
      std::error_code ec;
      const auto size = std::filesystem::file_size(f, ec);
      bytes += ec ? 0 : size;
      ++files;
    }
  }
  return std::to_string(files) + " files, " + std::to_string(bytes) + " bytes, sample " + checksum_hex(sum.digest());
}

}  // namespace st::runtime
