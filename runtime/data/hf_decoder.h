// HfDecoder: a tokenizer.json's "decoder" — tokens (strings) back to text, as the tokenizers
// library's decoders/ run them: ByteLevel (stand-in characters → bytes; invalid UTF-8 in the
// result becomes U+FFFD per maximal subpart, from_utf8_lossy), Metaspace (replacement → space, the
// first token's dropped under a prepend scheme), Replace (String pattern), ByteFallback (<0xXX>
// runs → their bytes, or one U+FFFD per byte when they are not UTF-8), Fuse, Strip, Sequence.
// Without a decoder the tokens are joined by spaces (the library's behaviour).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace st::runtime {

class HfDecoder {
 public:
  // json: tokenizer.json's "decoder" (null: none). ValueError naming the file for one not supported.
  HfDecoder(const nlohmann::json& json, const std::string& file);
  std::string decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum Kind { byte_level, metaspace, replace, byte_fallback, fuse, strip } kind;
    std::string a, b;  // metaspace: replacement; replace: a → b; strip: a the character
    bool prepend = true;
    int start = 0, stop = 0;
  };
  void add(const nlohmann::json& j, const std::string& file);
  std::vector<Step> steps_;
  bool none_ = true;
};

}  // namespace st::runtime
