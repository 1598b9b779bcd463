// Byte-level tokenizer and a whole-file reader.
#include "launch/byte_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tensor/error.h"

namespace st::launch {

std::vector<uint16_t> byte_encode(const std::string& text) {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string byte_decode(const std::vector<uint16_t>& tokens) {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= kByteVocab) ST_THROW(ValueError, "byte tokenizer: token " << tokens[i] << " is not a byte");
    out[i] = static_cast<char>(tokens[i]);
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ST_THROW(IOError, path << ": cannot open: " << std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) ST_THROW(IOError, path << ": read failed");
  return s.str();
}

}  // namespace st::launch
