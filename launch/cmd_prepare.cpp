// `shardtrain prepare --text FILE --out FILE.bin [--val-out VAL.bin] [--tokenizer byte|gpt2|PATH --vocab DIR]`:
// a user's text → tokens (--val-out: the last --val-fraction held out for --val-data). gpt2 reads DIR/vocab.json + DIR/merges.txt (GPT-2's own files, never downloaded);
// PATH is a Hugging Face tokenizer.json or a directory holding one (runtime/data/hf_tokenizer.h):
// the file is one document: the library's encode(text) — with the post-processor's special
// tokens (BOS) — then the tokenizer's EOS id when it has one and the template did not add it.
// `shardtrain prepare --input PATH [--input PATH ...] --out DIR`: a corpus of documents → a directory of
// shards for `train --data DIR` (launch/corpus_prepare.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <utility>

#include "launch/bpe_tokenizer.h"
#include "launch/byte_tokenizer.h"
#include "launch/commands.h"
#include "launch/corpus_prepare.h"
#include "launch/test_seams.h"
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

namespace {

std::string mb_per_s(uint64_t bytes, double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", s > 0 ? static_cast<double>(bytes) / 1e6 / s : 0.0);
  return buf;
}

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
  CorpusPrepareOptions c;
  OptionTable t("prepare", false);
  t.add({"text", "prepare", "FILE", "text file to tokenize into one --out file", false, OptionTable::bind(text), nullptr});
  t.add({"out", "prepare", "FILE.bin|DIR",
         "with --text: the output token file, llm.c format (uint16 tokens; uint32, version 2, when an id exceeds 65535). "
         "With --input: the directory the shards go to: DIR/shard_NNNNNN.bin (token files) + .idx (document offsets) "
         "and DIR/index.json, written last; pass DIR to train --data. A new or empty DIR, or one a killed prepare left "
         "(cleared); one holding a finished corpus needs --force; other files in it are refused",
         false, OptionTable::bind(out), nullptr});
  t.add({"input", "corpus", "PATH",
         "a corpus (repeat for more): a text file (a document), a .jsonl file (a document per non-blank line), a "
         "directory (its .txt .text .md .jsonl files, recursively) or a glob; files in byte order of their paths, "
         "inputs in the order given; --out DIR names the output directory",
         false, [&c](const std::string& v) { c.inputs.push_back(v); }, nullptr});
  t.add({"text-field", "corpus", "NAME", "the JSONL field that holds a document's text", false,
         OptionTable::bind(c.text_field), [&c] { return c.text_field; }});
  t.add({"shard-tokens", "corpus", "N", "tokens per shard (the last one fewer; a document may continue in the next)", false,
         OptionTable::bind(c.shard_tokens), [&c] { return std::to_string(c.shard_tokens); }});
  t.add({"threads", "corpus", "N", "tokenizing threads; 0: every core (the output is the same for any N)", false,
         OptionTable::bind(c.threads), [&c] { return std::to_string(c.threads); }});
  t.add({"val-fraction", "corpus", "F",
         "with --input: put round(F x documents) documents, spread evenly, in DIR/val/ (a corpus for train --val-data); "
         "0: none. With --text and --val-out: the share of the tokens --val-out takes from the end (default there 0.1)",
         false,
         OptionTable::bind(c.val_fraction), nullptr});
  t.add({"val-docs", "corpus", "N", "as --val-fraction, N documents", false, OptionTable::bind(c.val_docs), nullptr});
  t.add({"bos-id", "corpus", "ID", "id put before every document; -1: none (default: the tokenizer's: a tokenizer.json's BOS, none for byte and gpt2)",
         false, OptionTable::bind(c.bos_id), nullptr});
  t.add({"eos-id", "corpus", "ID",
         "id put after every document; -1: none (default: the tokenizer's: a tokenizer.json's EOS, gpt2 <|endoftext|> 50256, byte none)", false,
         OptionTable::bind(c.eos_id), nullptr});
  t.add({"force", "corpus", "0|1", "replace the corpus an --out DIR already holds", false, OptionTable::bind(c.force), nullptr});
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
  t.add({"val-out", "prepare", "FILE.bin",
         "also a validation file (for train --val-data): the text's last --val-fraction of tokens go there, "
         "--out keeps the rest", false, OptionTable::bind(val_out), nullptr});
  if (OptionTable::wants_help(args)) {
    std::cout << t.help("shardtrain prepare --text FILE --out FILE.bin [--val-out VAL.bin --val-fraction F]\n"
                        "                          [--tokenizer byte|gpt2|DIR --vocab DIR]\n"
                        "       shardtrain prepare --input PATH [--input PATH ...] --out DIR\n"
                        "                          [--tokenizer byte|gpt2|DIR --vocab DIR]");
    return 0;
  }
  t.parse_flags(args);
  if (!c.inputs.empty()) {
    if (!text.empty()) ST_THROW(UsageError, "prepare: --text FILE (one file) and --input PATH (a corpus) do not mix");
    if (out.empty()) ST_THROW(UsageError, "prepare: --input needs --out DIR (the directory of shards)");
    c.out_dir = out;
    c.tokenizer = tokenizer;
    c.vocab = vocab;
    c.progress = ::isatty(STDOUT_FILENO) == 1;
    c.on_shard = prepare_shard_hook_from_environment();
    const CorpusPrepareResult r = prepare_corpus(c);
    std::cout << "prepare: " << r.train.documents << " documents, " << r.train.tokens << " tokens in " << r.train.shards.size()
              << " shard(s)";
    if (!r.val.shards.empty()) std::cout << " + val/: " << r.val.documents << " documents, " << r.val.tokens << " tokens";
    std::cout << " (" << tokenizer << " tokenizer, vocab " << r.train.vocab_size << ", " << (r.train.token_version == 2 ? "uint32" : "uint16")
              << ", eos " << r.train.eos_id << ", bos " << r.train.bos_id << ") from " << r.text_bytes << " bytes of text in "
              << mb_per_s(r.text_bytes, r.seconds) << " MB/s on " << r.threads << " thread(s) -> " << c.out_dir
              << " (train --data " << c.out_dir << ")\n";
    return 0;
  }
  if (text.empty()) ST_THROW(UsageError, "prepare: --text FILE is required (or --input PATH --out DIR for a corpus)");
  if (out.empty()) ST_THROW(UsageError, "prepare: --out FILE.bin is required");
  const double val_fraction = c.val_fraction > 0 ? c.val_fraction : 0.1;  // --val-out's share, 0.1 unless given
  if (!val_out.empty() && !(val_fraction > 0 && val_fraction < 1))
    ST_THROW(UsageError, "prepare: --val-fraction must be in (0, 1), got " << val_fraction);
  const int64_t n = prepare_tokens(text, out, tokenizer, vocab);
  std::pair<int64_t, int64_t> parts{n, 0};
  if (!val_out.empty()) parts = split_validation(out, val_out, val_fraction);  // before any line: it may refuse
  std::cout << "prepare: " << n << " tokens (" << tokenizer << " tokenizer";
  if (tokenizer == "byte") std::cout << ", vocab " << kByteVocab;
  else if (tokenizer == "gpt2") std::cout << ", vocab " << vocab << "/vocab.json";
  std::cout << ") from " << text << " -> " << out;
  if (!val_out.empty()) std::cout << " (" << parts.first << ") and " << val_out << " (" << parts.second << ", for --val-data)";
  std::cout << "\n";
  return 0;
}

}  // namespace st::launch
