// TextCodec: `--tokenizer byte|gpt2|PATH [--vocab DIR]` as one object for `shardtrain generate`:
// text → ids for the prompts and ids → text for the output. Byte: token = byte value
// (launch/byte_tokenizer.h); gpt2: GPT-2's vocab.json + merges.txt (launch/bpe_tokenizer.h);
// PATH: a Hugging Face tokenizer.json or a directory holding one (runtime/data/hf_tokenizer.h),
// whose prompts get the post-processor's special tokens (BOS) as the library's encode gives them
// and whose output is the library's decode with special tokens skipped.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "launch/bpe_tokenizer.h"
#include "runtime/data/hf_tokenizer.h"

namespace st::launch {

class TextCodec {
 public:
  // UsageError for an unknown tokenizer or gpt2 without --vocab; IOError naming a missing file;
  // ValueError naming a tokenizer.json this reader cannot run.
  TextCodec(const std::string& tokenizer, const std::string& vocab_dir);
  // True for "byte", "gpt2", or a path that holds a tokenizer.json.
  static bool known(const std::string& tokenizer);
  std::vector<int64_t> encode(const std::string& text) const;
  // text → ids without a tokenizer.json's post-processor specials (add_special_tokens=False: no
  // BOS); byte and gpt2 as encode(). A corpus's documents get bos_id() / eos_id() around these.
  std::vector<int64_t> encode_plain(const std::string& text) const;
  // A tokenizer.json's BOS and EOS (runtime/data/hf_tokenizer.h says which tokens); -1 for byte
  // and gpt2 (GPT-2's <|endoftext|> is read from vocab.json where a corpus needs it).
  int64_t bos_id() const { return hf_ ? hf_->bos_id() : -1; }
  int64_t eos_id() const { return hf_ ? hf_->eos_id() : -1; }
  // ids → text: byte and gpt2 concatenate each id's bytes (ValueError naming the tokenizer for an
  // id it lacks); a tokenizer.json decodes them together (special tokens skipped, unknown ids
  // passed over, as Hugging Face's decode does).
  std::string decode(const std::vector<int64_t>& ids) const;
  int64_t vocab_size() const;
  // ValueError in one line unless this tokenizer fits a model of `model_vocab` ids, naming both
  // sizes: a byte tokenizer cannot write a model's ids ≥ 256; GPT-2's and a tokenizer.json make
  // ids the model must have.
  void check_model(int64_t model_vocab) const;
  const std::string& name() const { return name_; }

 private:
  std::string decode_one(int64_t id) const;
  std::string name_, vocab_dir_;
  std::shared_ptr<BpeTokenizer> bpe_;
  std::shared_ptr<runtime::HfTokenizer> hf_;
};

}  // namespace st::launch
