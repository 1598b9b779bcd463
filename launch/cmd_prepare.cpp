// `shardtrain prepare --text FILE --out FILE.bin [--tokenizer byte]`: a user's text → tokens.
#include <iostream>

#include "launch/byte_tokenizer.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "runtime/token_data.h"

namespace st::launch {

int64_t prepare_tokens(const std::string& text_path, const std::string& out_path, const std::string& tokenizer) {
  if (tokenizer != "byte") ST_THROW(UsageError, "prepare: unknown tokenizer '" << tokenizer << "' (available: byte)");
  const std::string text = read_text_file(text_path);
  if (text.empty()) ST_THROW(UsageError, "prepare: " << text_path << " is empty");
  std::vector<uint16_t> tokens = byte_encode(text);
  runtime::write_token_file(out_path, tokens);
  return static_cast<int64_t>(tokens.size());
}

int cmd_prepare(const std::vector<std::string>& args) {
  std::string text, out, tokenizer = "byte";
  OptionTable t("prepare", false);
  t.add({"text", "prepare", "FILE", "text file to tokenize (required)", false, OptionTable::bind(text), nullptr});
  t.add({"out", "prepare", "FILE.bin", "output token file, llm.c format (required)", false, OptionTable::bind(out), nullptr});
  t.add({"tokenizer", "prepare", "byte", "tokenizer: byte-level (token = byte value, vocab 256)", false,
         OptionTable::bind_choice(tokenizer, {"byte"}), [&tokenizer] { return tokenizer; }});
  if (OptionTable::wants_help(args)) {
    std::cout << t.help("shardtrain prepare --text FILE --out FILE.bin [--tokenizer byte]");
    return 0;
  }
  t.parse_flags(args);
  if (text.empty()) ST_THROW(UsageError, "prepare: --text FILE is required");
  if (out.empty()) ST_THROW(UsageError, "prepare: --out FILE.bin is required");
  const int64_t n = prepare_tokens(text, out, tokenizer);
  std::cout << "prepare: " << n << " tokens (" << tokenizer << " tokenizer, vocab " << kByteVocab << ") from " << text
            << " -> " << out << "\n";
  return 0;
}

}  // namespace st::launch
