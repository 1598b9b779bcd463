// The byte-level tokenizer: token = byte value (vocabulary 256). Lossless for any input.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace st::launch {

constexpr int64_t kByteVocab = 256;
std::vector<uint16_t> byte_encode(const std::string& text);
// Throws ValueError on a token ≥ 256.
std::string byte_decode(const std::vector<uint16_t>& tokens);

// Reads a whole file; throws IOError naming it.
std::string read_text_file(const std::string& path);

}  // namespace st::launch
