// HfTokenizer: a Hugging Face tokenizers `tokenizer.json` (Llama 3, Qwen, GPT-2, Llama 2,
// Mistral, ... — BPE models) read and run as the tokenizers library does, id for id:
//   text → U+FFFD for invalid UTF-8 (each maximal invalid subpart one U+FFFD, as Python's
//   errors="replace" and WHATWG's TextDecoder; the library itself takes only valid strings)
//   → added tokens split out (those not `normalized` on the raw text, leftmost-longest, with
//   their lstrip / rstrip / single_word flags) → the normalizer on the other pieces → added
//   tokens that are `normalized`, in the normalized pieces → the pre-tokenizer
//   (runtime/data/hf_pretokenizer.h) → the BPE model (runtime/data/hf_bpe.h) per pre-token
//   → the post-processor's special tokens when asked (TemplateProcessing's single sequence;
//   ByteLevel adds none).
// decode: ids → tokens (added tokens first, then the model's; ids neither knows are passed over,
// as the library does), special tokens dropped when asked, then the decoder
// (runtime/data/hf_decoder.h).
// What the file holds beyond this (another model type, a normalizer or pre-tokenizer not
// supported, truncation) is refused when it is read, with a ValueError naming the file.
// Checked against the library itself: tests/fixtures/make_hf_tokenizers.js, tests/runtime/data.
// encode and decode are const and thread-safe (the caches are per thread).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/data/hf_bpe.h"
#include "runtime/data/hf_decoder.h"
#include "runtime/data/hf_pretokenizer.h"

namespace st::runtime {

class HfTokenizer {
 public:
  // `path`: a directory holding tokenizer.json, or the file itself. IOError naming the path when
  // it is missing or not JSON; ValueError naming the file for what is not supported.
  static HfTokenizer load(const std::string& path);
  // True when `path` is a tokenizer.json or a directory holding one.
  static bool found_at(const std::string& path);
  // json: the whole tokenizer.json; file: its path, for errors; eos_hint: tokenizer_config.json's
  // eos_token where one was beside it ("" if none).
  HfTokenizer(const nlohmann::json& json, const std::string& file, const std::string& eos_hint = "");

  // text → ids without the post-processor's special tokens (add_special_tokens=False).
  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;  // appends
  // text → ids with them (the library's default encode): prefix + encode(text) + suffix.
  std::vector<int32_t> encode_with_specials(std::string_view text) const;
  // ids → text; skip_special drops the special added tokens (skip_special_tokens=True).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special) const;

  // The post-processor's tokens before / after a single sequence (TemplateProcessing).
  const std::vector<int32_t>& prefix_ids() const { return prefix_; }
  const std::vector<int32_t>& suffix_ids() const { return suffix_; }
  // BOS: the post-processor's one token before a sequence; EOS: its one token after, else
  // tokenizer_config.json's eos_token, else a special token named </s>, <|end_of_text|>,
  // <|endoftext|>, <eos> or <|im_end|>. -1 where there is none.
  int64_t bos_id() const { return bos_; }
  int64_t eos_id() const { return eos_; }
  // One past the largest id the tokenizer writes (its vocabulary with the added tokens).
  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  int32_t token_to_id(const std::string& token) const;  // -1 if none
  const std::string& file() const { return file_; }

 private:
  struct Added {
    int32_t id;
    std::string content;
    bool special, lstrip, rstrip, single_word, normalized;
  };
  // Splits `in` at the added tokens of `set` (indices into added_).
  void split_added(Piece&& in, const std::vector<std::vector<int>>& by_first_byte, std::vector<Piece>& out) const;

  std::string file_;
  std::shared_ptr<const HfBpe> model_;
  std::shared_ptr<const HfNormalizer> normalizer_;
  std::shared_ptr<const HfPreTokenizer> pre_tokenizer_;
  std::shared_ptr<const HfDecoder> decoder_;
  std::vector<Added> added_;
  std::vector<std::vector<int>> raw_first_, normalized_first_;  // byte → added_ indices, longest first
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> known_, special_;  // per id
  std::vector<int32_t> prefix_, suffix_;
  int64_t bos_ = -1, eos_ = -1;
};

}  // namespace st::runtime
