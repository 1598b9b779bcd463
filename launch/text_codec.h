// TextCodec: `--tokenizer byte|gpt2 --vocab DIR` as one object for `shardtrain generate`: text →
// ids for the prompts and ids → bytes for the output (a token at a time, so the output can be
// streamed; GPT-2's decode returns a character cut between tokens as its bytes, which join up).
// Byte: token = byte value (launch/byte_tokenizer.h); gpt2: launch/bpe_tokenizer.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launch/bpe_tokenizer.h"

namespace st::launch {

class TextCodec {
 public:
  // UsageError for an unknown tokenizer or gpt2 without --vocab; IOError naming a missing file.
  TextCodec(const std::string& tokenizer, const std::string& vocab_dir);
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(int64_t id) const;  // ValueError naming the tokenizer for an id it lacks
  int64_t vocab_size() const;
  // ValueError in one line unless this tokenizer fits a model of `model_vocab` ids: a byte
  // tokenizer cannot write a model's ids ≥ 256, GPT-2's makes ids the model must have.
  void check_model(int64_t model_vocab) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_, vocab_dir_;
  std::shared_ptr<BpeTokenizer> bpe_;
};

}  // namespace st::launch
