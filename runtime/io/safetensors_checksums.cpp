// The checksum layout of our safetensors files (see the header).
#include "runtime/io/safetensors_checksums.h"

#include <nlohmann/json.hpp>

#include "runtime/common/checksum.h"
#include "tensor/error.h"

namespace st::runtime {

bool is_checksum_key(const std::string& key) {
  return key == kChunkBytesKey || key == kChunksKey || key == kEntriesKey || key == kHeaderKey ||
         key == kLegacyChecksumKey;
}

uint64_t chunk_count(uint64_t bytes, uint64_t chunk) { return (bytes + chunk - 1) / chunk; }

uint64_t entry_checksum(const std::string& name, const std::string& dtype, const Shape& shape, uint64_t begin,
                        uint64_t end) {
  std::string text = name;
  text += '\0';
  text += dtype;
  text += '\0';
  for (int64_t d : shape) text += std::to_string(d) + ",";
  text += '\0' + std::to_string(begin) + '\0' + std::to_string(end);
  return checksum64(text.data(), text.size());
}

uint64_t header_checksum(const std::string& header_text, const std::string& path) {
  nlohmann::json h;  // keys sorted: the canonical order
  try {
    h = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception& e) {
    ST_THROW(IOError, "safetensors " << path << ": header is not valid JSON: " << e.what());
  }
  ST_CHECK(h.is_object(), IOError, "safetensors " << path << ": header is not a JSON object");
  if (auto m = h.find("__metadata__"); m != h.end() && m->is_object()) m->erase(kHeaderKey);
  const std::string canon = h.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return checksum64(canon.data(), canon.size());
}

std::vector<uint64_t> parse_checksum_list(const std::string& hex, size_t count, const std::string& path,
                                          const std::string& key) {
  ST_CHECK(hex.size() == 16 * count, IOError,
           "safetensors " << path << ": " << key << " holds " << hex.size() << " characters, not 16 for each of "
                          << count);
  std::vector<uint64_t> out(count);
  for (size_t k = 0; k < count; ++k)
    ST_CHECK(parse_checksum_hex(hex.substr(16 * k, 16), out[k]), IOError,
             "safetensors " << path << ": " << key << ": '" << hex.substr(16 * k, 16) << "' (#" << k
                            << ") is not 16 hex digits");
  return out;
}

}  // namespace st::runtime
