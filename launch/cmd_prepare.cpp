// `shardtrain prepare --text FILE --out FILE.bin [--tokenizer byte|gpt2|PATH --vocab DIR]`: a user's
// text → tokens. gpt2 reads DIR/vocab.json + DIR/merges.txt (GPT-2's own files, never downloaded);
// PATH is a Hugging Face tokenizer.json or a directory holding one (runtime/data/hf_tokenizer.h):
// the file is one document: the library's encode(text) — with the post-processor's special
// tokens (BOS) — then the tokenizer's EOS id when it has one and the template did not add it.
#include <iostream>

#include "launch/bpe_tokenizer.h"
#include "launch/byte_tokenizer.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "runtime/data/hf_tokenizer.h"
#include "runtime/data/token_data.h"

namespace st::launch {

int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer) {
  return prepare_tokens(text_path, out_path, tokenizer, "");
}

int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer,
                       const std::string& vocab_dir) {
  const bool hf = tokenizer != "byte" && tokenizer != "gpt2";
  if (hf && !runtime::HfTokenizer::found_at(tokenizer))
    ST_THROW(UsageError, "prepare: --tokenizer '" << tokenizer << "' is none of byte, gpt2, a tokenizer.json or a directory holding one");
  if (tokenizer == "gpt2" && vocab_dir.empty())
    ST_THROW(UsageError, "prepare: --tokenizer gpt2 needs --vocab DIR (holding vocab.json and merges.txt)");
  const std::string text = read_text_file(text_path);
  if (text.empty()) ST_THROW(UsageError, "prepare: " << text_path << " is empty");
  if (hf) {
    const runtime::HfTokenizer tok = runtime::HfTokenizer::load(tokenizer);
    std::vector<int32_t> ids = tok.encode_with_specials(text);
    if (tok.suffix_ids().empty() && tok.eos_id() >= 0) ids.push_back(static_cast<int32_t>(tok.eos_id()));
    runtime::write_token_file(out_path, std::vector<uint32_t>(ids.begin(), ids.end()));
    return static_cast<int64_t>(ids.size());
  }
  if (tokenizer == "byte") {
    const std::vector<uint16_t> tokens = byte_encode(text);
    runtime::write_token_file(out_path, tokens);
    return static_cast<int64_t>(tokens.size());
  }
  // ids past 65 535 (a vocabulary larger than GPT-2's) make a version-2 file of uint32 tokens
  const std::vector<int64_t> ids = BpeTokenizer::load(vocab_dir).encode(text);
  std::vector<uint32_t> tokens(ids.begin(), ids.end());
  runtime::write_token_file(out_path, tokens);
  return static_cast<int64_t>(tokens.size());
}

int cmd_prepare(const std::vector<std::string>& args) {
  std::string text, out, tokenizer = "byte", vocab;
  OptionTable t("prepare", false);
  t.add({"text", "prepare", "FILE", "text file to tokenize (required)", false, OptionTable::bind(text), nullptr});
  t.add({"out", "prepare", "FILE.bin", "output token file, llm.c format (uint16 tokens; uint32, version 2, when an id exceeds 65535) (required)", false, OptionTable::bind(out), nullptr});
  t.add({"tokenizer", "prepare", "byte|gpt2|DIR",
         "tokenizer: byte (token = byte value, vocab 256), gpt2 (byte-level BPE, needs --vocab), or a Hugging Face "
         "tokenizer.json (or DIR holding one; the text is one document: its BOS as its encode() gives it, then its EOS)",
         false,
         [&tokenizer](const std::string& v) {
           if (v != "byte" && v != "gpt2" && !runtime::HfTokenizer::found_at(v))
             ST_THROW(ValueError, "expected byte, gpt2, a tokenizer.json or a directory holding one, got '" << v << "'");
           tokenizer = v;
         },
         [&tokenizer] { return tokenizer; }});
  t.add({"vocab", "prepare", "DIR", "gpt2 tokenizer: directory with GPT-2's vocab.json and merges.txt", false,
         OptionTable::bind(vocab), nullptr});
  if (OptionTable::wants_help(args)) {
    std::cout << t.help("shardtrain prepare --text FILE --out FILE.bin [--tokenizer byte|gpt2|DIR --vocab DIR]");
    return 0;
  }
  t.parse_flags(args);
  if (text.empty()) ST_THROW(UsageError, "prepare: --text FILE is required");
  if (out.empty()) ST_THROW(UsageError, "prepare: --out FILE.bin is required");
  const int64_t n = prepare_tokens(text, out, tokenizer, vocab);
  std::cout << "prepare: " << n << " tokens (" << tokenizer << " tokenizer";
  if (tokenizer == "byte") std::cout << ", vocab " << kByteVocab;
  else if (tokenizer == "gpt2") std::cout << ", vocab " << vocab << "/vocab.json";
  std::cout << ") from " << text << " -> " << out << "\n";
  return 0;
}

}  // namespace st::launch
