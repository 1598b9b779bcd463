// HfBpe: the BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}) as the
// tokenizers library runs it (models/bpe/model.rs, word.rs): a pre-token is split into its
// characters, each a vocabulary token, else its UTF-8 bytes as <0xXX> tokens (byte_fallback),
// else unk_token (consecutive unknowns fused into one under fuse_unk; dropped without an
// unk_token); then merges apply lowest rank first, leftmost first among equal ranks, one pair at
// a time. ignore_merges: a pre-token that is itself in the vocabulary is that one token.
// merges come in either JSON spelling: "a b" or ["a", "b"]. dropout (other than 0),
// continuing_subword_prefix and end_of_word_suffix are refused (no tokenizer in use sets them
// for a byte-level or SentencePiece BPE).
//
// A SentencePiece vocabulary (no token with ▁ after another character, ▁ itself a token) lets a
// long piece be cut before each ▁ that follows another character: no token can span such a cut,
// so the merges on the parts are the merges on the whole (the library runs the whole piece; the
// ids are the same, and a text without a pre-tokenizer is not one word of megabytes).
// Results are cached per pre-token (a thread's own cache, so encode is thread-safe without locks).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace st::runtime {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class HfBpe {
 public:
  // model: tokenizer.json's "model" object; `file` names the file in errors (ValueError).
  HfBpe(const nlohmann::json& model, const std::string& file);

  // Appends the ids of one pre-token (non-empty, well-formed UTF-8) to `out`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // The model's vocabulary (token → id).
  const TokenMap& vocab() const { return vocab_; }

 private:
  void encode_part(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  TokenMap vocab_;
  // (left id << 32 | right id) → (rank << 32 | merged id)
  std::unordered_map<uint64_t, uint64_t> merges_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  bool cut_at_metaspace_ = false;  // the SentencePiece cut above holds
  int32_t byte_ids_[256];  // <0xXX> ids, -1 where the vocabulary lacks one
  uint64_t serial_;        // this model's key in the per-thread caches
};

}  // namespace st::runtime
