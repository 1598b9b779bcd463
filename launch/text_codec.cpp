// TextCodec (launch/text_codec.h).
#include "launch/text_codec.h"

#include "launch/byte_tokenizer.h"
#include "launch/options.h"

namespace st::launch {

TextCodec::TextCodec(const std::string& tokenizer, const std::string& vocab_dir) : name_(tokenizer), vocab_dir_(vocab_dir) {
  if (tokenizer != "byte" && tokenizer != "gpt2")
    ST_THROW(UsageError, "generate: unknown --tokenizer '" << tokenizer << "' (available: byte, gpt2)");
  if (tokenizer == "gpt2") {
    if (vocab_dir.empty())
      ST_THROW(UsageError, "generate: --tokenizer gpt2 needs --vocab DIR (holding vocab.json and merges.txt)");
    bpe_ = std::make_shared<BpeTokenizer>(BpeTokenizer::load(vocab_dir));
  }
}

std::vector<int64_t> TextCodec::encode(const std::string& text) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<int64_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string TextCodec::decode(int64_t id) const {
  if (bpe_) return bpe_->decode({id});
  ST_CHECK(id >= 0 && id < kByteVocab, ValueError,
           "generate: token id " << id << " is not a byte: --tokenizer byte decodes ids below 256 (use --tokenizer gpt2 --vocab DIR for a GPT-2 vocabulary)");
  return std::string(1, static_cast<char>(id));
}

int64_t TextCodec::vocab_size() const { return bpe_ ? bpe_->vocab_size() : kByteVocab; }

void TextCodec::check_model(int64_t model_vocab) const {
  if (!bpe_) {
    ST_CHECK(model_vocab <= kByteVocab, ValueError,
             "generate: the model's vocabulary is " << model_vocab << " ids, but --tokenizer byte decodes only ids below "
                                                    << kByteVocab << " (use --tokenizer gpt2 --vocab DIR)");
    return;
  }
  ST_CHECK(bpe_->vocab_size() <= model_vocab, ValueError,
           "generate: --vocab " << vocab_dir_ << " holds " << bpe_->vocab_size() << " tokens, more than the model's vocabulary of "
                                << model_vocab << " (the tokenizer does not match the model)");
}

}  // namespace st::launch
