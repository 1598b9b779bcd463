// The text stages of a Hugging Face tokenizer.json before its model: the normalizer (Prepend,
// Replace with a String pattern, NFC where the text is its own NFC by its ranges, Sequence) and the
// pre-tokenizer (ByteLevel, Split, Metaspace, Sequence), each as the tokenizers library runs it
// (normalizers/, pre_tokenizers/ of its Rust source). A stage not listed, or an option of one it
// cannot honour, is refused when the file is read (ValueError naming the file and the stage).
//
// The text moves between stages as Pieces: a span of the input (or an added token's id, which no
// stage touches) and whether it begins at the input's first character (Metaspace's
// prepend_scheme "first" prepends only there). Empty pieces are dropped, as the library does.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace st::runtime {

class UnicodeRegex;

struct Piece {
  std::string text;    // well-formed UTF-8 (after ByteLevel: its byte-mapped characters)
  int32_t added = -1;  // an added token's id: the piece is done
  bool at_start = false;
};

// How a Split keeps its matches (SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class HfNormalizer {
 public:
  // json: tokenizer.json's "normalizer" (null: none).
  HfNormalizer(const nlohmann::json& json, const std::string& file);
  void apply(std::string& text) const;  // ValueError for NFC on text it would change
  bool empty() const { return steps_.empty(); }

 private:
  struct Step {
    enum Kind { prepend, replace, nfc } kind;
    std::string a, b;  // prepend: a; replace: a → b
  };
  void add(const nlohmann::json& j, const std::string& file);
  std::vector<Step> steps_;
};

class HfPreTokenizer {
 public:
  // json: tokenizer.json's "pre_tokenizer" (null: none, the whole piece goes to the model).
  HfPreTokenizer(const nlohmann::json& json, const std::string& file);
  ~HfPreTokenizer();
  // Splits (and maps) every piece that is not an added token; `pieces` is replaced.
  void apply(std::vector<Piece>& pieces) const;

 private:
  struct Step {
    enum Kind { byte_level, split, metaspace } kind;
    std::shared_ptr<UnicodeRegex> regex;  // split's pattern; byte_level with use_regex: GPT-2's
    SplitBehavior behavior = SplitBehavior::isolated;
    bool invert = false, add_prefix_space = false;
    std::string replacement;  // metaspace
    enum Prepend { always, first, never } prepend = always;
    bool split_words = true;  // metaspace split
  };
  void add(const nlohmann::json& j, const std::string& file);
  void run(const Step& s, const Piece& in, std::vector<Piece>& out) const;
  std::vector<Step> steps_;
};

// GPT-2's bytes_to_unicode: byte b → its printable stand-in (UTF-8), and back (-1: none).
const std::string& byte_level_char(unsigned char b);
int byte_level_byte(char32_t cp);

}  // namespace st::runtime
