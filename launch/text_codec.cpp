// TextCodec (launch/text_codec.h).
#include "launch/text_codec.h"

#include "launch/byte_tokenizer.h"
#include "launch/options.h"

namespace st::launch {

bool TextCodec::known(const std::string& tokenizer) {
  return tokenizer == "byte" || tokenizer == "gpt2" || runtime::HfTokenizer::found_at(tokenizer);
}

TextCodec::TextCodec(const std::string& tokenizer, const std::string& vocab_dir) : name_(tokenizer), vocab_dir_(vocab_dir) {
  if (tokenizer == "gpt2") {
    if (vocab_dir.empty())
      ST_THROW(UsageError, "generate: --tokenizer gpt2 needs --vocab DIR (holding vocab.json and merges.txt)");
    bpe_ = std::make_shared<BpeTokenizer>(BpeTokenizer::load(vocab_dir));
  } else if (tokenizer != "byte") {
    if (!runtime::HfTokenizer::found_at(tokenizer))
      ST_THROW(UsageError, "generate: --tokenizer '" << tokenizer
                                                     << "' is none of byte, gpt2, a tokenizer.json or a directory holding one");
    hf_ = std::make_shared<runtime::HfTokenizer>(runtime::HfTokenizer::load(tokenizer));
  }
}

std::vector<int64_t> TextCodec::encode(const std::string& text) const {
  if (hf_) {
    const std::vector<int32_t> ids = hf_->encode_with_specials(text);
    return std::vector<int64_t>(ids.begin(), ids.end());
  }
  if (bpe_) return bpe_->encode(text);
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string TextCodec::decode_one(int64_t id) const {
  if (bpe_) return bpe_->decode({id});
  ST_CHECK(id >= 0 && id < kByteVocab, ValueError,
           "generate: token id " << id << " is not a byte: --tokenizer byte decodes ids below 256 (use --tokenizer gpt2 --vocab DIR for a GPT-2 vocabulary)");
  return std::string(1, static_cast<char>(id));
}

std::string TextCodec::decode(const std::vector<int64_t>& ids) const {
  if (hf_) return hf_->decode(ids, true);
  std::string out;
  for (int64_t id : ids) out += decode_one(id);
  return out;
}

std::vector<int64_t> TextCodec::encode_plain(const std::string& text) const {
  if (!hf_) return encode(text);
  const std::vector<int32_t> ids = hf_->encode(text);
  return std::vector<int64_t>(ids.begin(), ids.end());
}

int64_t TextCodec::vocab_size() const { return hf_ ? hf_->vocab_size() : bpe_ ? bpe_->vocab_size() : kByteVocab; }

void TextCodec::check_model(int64_t model_vocab) const {
  if (!bpe_ && !hf_) {
    ST_CHECK(model_vocab <= kByteVocab, ValueError,
             "generate: the model's vocabulary is " << model_vocab << " ids, but --tokenizer byte decodes only ids below "
                                                    << kByteVocab << " (use --tokenizer gpt2 --vocab DIR or a tokenizer.json)");
    return;
  }
  const std::string what = hf_ ? hf_->file() : "--vocab " + vocab_dir_;
  ST_CHECK(vocab_size() <= model_vocab, ValueError,
           "generate: " << what << " holds " << vocab_size() << " tokens, more than the model's vocabulary of "
                        << model_vocab << " (the tokenizer does not match the model)");
}

}  // namespace st::launch
