// `shardtrain prepare --text FILE --out FILE.bin [--val-out VAL.bin] [--tokenizer byte|gpt2 --vocab DIR]`:
// a user's text → tokens (--val-out: the last --val-fraction held out for --val-data). gpt2 reads
// DIR/vocab.json + DIR/merges.txt (GPT-2's own files, never downloaded).
#include <iostream>
#include <sstream>
#include <utility>

#include "launch/bpe_tokenizer.h"
#include "launch/byte_tokenizer.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "runtime/data/token_data.h"

namespace st::launch {

int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer) {
  return prepare_tokens(text_path, out_path, tokenizer, "");
}

int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer,
                       const std::string& vocab_dir) {
  if (tokenizer != "byte" && tokenizer != "gpt2")
    ST_THROW(UsageError, "prepare: unknown tokenizer '" << tokenizer << "' (available: byte, gpt2)");
  if (tokenizer == "gpt2" && vocab_dir.empty())
    ST_THROW(UsageError, "prepare: --tokenizer gpt2 needs --vocab DIR (holding vocab.json and merges.txt)");
  const std::string text = read_text_file(text_path);
  if (text.empty()) ST_THROW(UsageError, "prepare: " << text_path << " is empty");
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

namespace {

// The last `fraction` of out_path's tokens moved into val_path (out_path keeps the rest): a held-out
// tail for --val-data. Returns {kept, moved}.
std::pair<int64_t, int64_t> split_validation(const std::string& out_path, const std::string& val_path, double fraction) {
  std::vector<uint32_t> all;
  int width = 2;
  {
    const runtime::TokenData d(out_path);
    all = d.tokens(0, d.num_tokens());
    width = d.token_bytes();
  }
  const int64_t n = static_cast<int64_t>(all.size());
  const int64_t moved = static_cast<int64_t>(static_cast<double>(n) * fraction);
  if (moved < 2 || n - moved < 2)
    ST_THROW(UsageError, "prepare: --val-fraction " << fraction << " of " << n
                                                      << " tokens leaves a part under 2 tokens: more text, or another fraction");
  auto write = [&](const std::string& path, int64_t first, int64_t count) {
    if (width == 4) {
      runtime::write_token_file(path, std::vector<uint32_t>(all.begin() + first, all.begin() + first + count));
    } else {
      std::vector<uint16_t> t(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>(all[static_cast<size_t>(first + i)]);
      runtime::write_token_file(path, t);
    }
  };
  write(val_path, n - moved, moved);
  write(out_path, 0, n - moved);
  return {n - moved, moved};
}

}  // namespace

int cmd_prepare(const std::vector<std::string>& args) {
  std::string text, out, tokenizer = "byte", vocab, val_out;
  double val_fraction = 0.1;
  OptionTable t("prepare", false);
  t.add({"text", "prepare", "FILE", "text file to tokenize (required)", false, OptionTable::bind(text), nullptr});
  t.add({"out", "prepare", "FILE.bin", "output token file, llm.c format (uint16 tokens; uint32, version 2, when an id exceeds 65535) (required)", false, OptionTable::bind(out), nullptr});
  t.add({"tokenizer", "prepare", "byte",
         "tokenizer: byte (token = byte value, vocab 256) or gpt2 (byte-level BPE, needs --vocab)", false,
         OptionTable::bind_choice(tokenizer, {"byte", "gpt2"}), [&tokenizer] { return tokenizer; }});
  t.add({"vocab", "prepare", "DIR", "gpt2 tokenizer: directory with GPT-2's vocab.json and merges.txt", false,
         OptionTable::bind(vocab), nullptr});
  t.add({"val-out", "prepare", "FILE.bin",
         "also a validation file (for train --val-data): the text's last --val-fraction of tokens go there, "
         "--out keeps the rest", false, OptionTable::bind(val_out), nullptr});
  t.add({"val-fraction", "prepare", "F", "the share of the tokens --val-out takes, from the end", false,
         OptionTable::bind(val_fraction), [&val_fraction] {
           std::ostringstream o;
           o << val_fraction;
           return o.str();
         }});
  if (OptionTable::wants_help(args)) {
    std::cout << t.help("shardtrain prepare --text FILE --out FILE.bin [--val-out VAL.bin] [--tokenizer byte|gpt2 --vocab DIR]");
    return 0;
  }
  t.parse_flags(args);
  if (text.empty()) ST_THROW(UsageError, "prepare: --text FILE is required");
  if (out.empty()) ST_THROW(UsageError, "prepare: --out FILE.bin is required");
  if (!val_out.empty() && !(val_fraction > 0 && val_fraction < 1))
    ST_THROW(UsageError, "prepare: --val-fraction must be in (0, 1), got " << val_fraction);
  const int64_t n = prepare_tokens(text, out, tokenizer, vocab);
  std::pair<int64_t, int64_t> parts{n, 0};
  if (!val_out.empty()) parts = split_validation(out, val_out, val_fraction);  // before any line: it may refuse
  std::cout << "prepare: " << n << " tokens (" << tokenizer << " tokenizer";
  if (tokenizer == "byte") std::cout << ", vocab " << kByteVocab;
  else std::cout << ", vocab " << vocab << "/vocab.json";
  std::cout << ") from " << text << " -> " << out;
  if (!val_out.empty()) std::cout << " (" << parts.first << ") and " << val_out << " (" << parts.second << ", for --val-data)";
  std::cout << "\n";
  return 0;
}

}  // namespace st::launch
