// GPT-2 byte-level BPE (launch/bpe_tokenizer.h) on a small hand-made vocab.json/merges.txt: the
// pre-tokeniser against splits computed by Python's `regex` module with GPT-2's pattern, merges in
// rank order, encode/decode round trips, `prepare --tokenizer gpt2`, and errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "launch/bpe_tokenizer.h"
#include "launch/corpus_prepare.h"
#include "launch/commands.h"
#include "launch/options.h"
#include "runtime/data/token_data.h"
#include "tensor/error.h"

using namespace st;
using namespace st::launch;
namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

namespace {

// GPT-2's bytes_to_unicode, written independently of the tokenizer; byte b → UTF-8 symbol.
std::string byte_symbol(int b) {
  int n = 0, cp = -1;
  for (int x = 0; x <= b; ++x) {
    const bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
    cp = printable ? x : 256 + n++;
  }
  std::string s;
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  s += static_cast<char>(0xC0 | (cp >> 6));
  s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// vocab: the 256 byte symbols (id = byte value) then one id per merge result, from 256.
fs::path write_vocab(const std::string& name, const Strings& merges) {
  fs::path d = fs::temp_directory_path() / ("st_bpe_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  std::ofstream v(d / "vocab.json", std::ios::binary), m(d / "merges.txt", std::ios::binary);
  v << "{";
  for (int b = 0; b < 256; ++b) v << (b ? "," : "") << "\"" << (b == '"' ? "\\\"" : b == '\\' ? "\\\\" : byte_symbol(b)) << "\":" << b;
  m << "#version: 0.2\n";
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t sp = merges[r].find(' ');
    v << ",\"" << merges[r].substr(0, sp) + merges[r].substr(sp + 1) << "\":" << 256 + r;
    m << merges[r] << "\n";
  }
  v << "}";
  return d;
}

const Strings kMerges = {"Ġ t", "h e", "Ġt he", "l l", "e ll", "o r", "Ġ w", "Ġw or"};

}  // namespace

TEST(Bpe, ByteTableAnchors) {  // the test's table agrees with GPT-2's known symbols
  EXPECT_EQ(byte_symbol(' '), "\xc4\xa0");   // Ġ U+0120
  EXPECT_EQ(byte_symbol('\n'), "\xc4\x8a");  // Ċ U+010A
  EXPECT_EQ(byte_symbol(0), "\xc4\x80");     // Ā U+0100
  EXPECT_EQ(byte_symbol(0xAD), "\xc5\x83");  // Ń U+0143
  EXPECT_EQ(byte_symbol('A'), "A");
  BpeTokenizer t = BpeTokenizer::load(write_vocab("table", {}).string());
  EXPECT_EQ(t.vocab_size(), 256);
  for (int b = 0; b < 256; ++b) {  // the tokenizer's table is the test's: decode(id b) = byte b
    EXPECT_EQ(t.decode({b}), std::string(1, static_cast<char>(b))) << b;
    EXPECT_EQ(t.encode(std::string(1, static_cast<char>(b))), std::vector<int64_t>{b}) << b;
  }
}

TEST(Bpe, PretokenizeMatchesGpt2Regex) {  // expectations from Python `regex` with GPT-2's pattern
  EXPECT_EQ(gpt2_pretokenize("Hello world's 123  end"), (Strings{"Hello", " world", "'s", " 123", " ", " end"}));
  EXPECT_EQ(gpt2_pretokenize("I'm  here\n\n  they'll go!!  "),
            (Strings{"I", "'m", " ", " here", "\n\n ", " they", "'ll", " go", "!!", "  "}));
  EXPECT_EQ(gpt2_pretokenize("a,b. 'quoted' it's  \t x"),
            (Strings{"a", ",", "b", ".", " '", "quoted", "'", " it", "'s", "  \t", " x"}));
  EXPECT_EQ(gpt2_pretokenize("caf\xc3\xa9 \xce\x95\xce\xbb\xce\xbb\xce\xac\xce\xb4\xce\xb1 \xd0\x9c\xd0\xbe\xd1\x81\xd0\xba"
                             "\xd0\xb2\xd0\xb0 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xc2\xbdx\xc2\xb2\tend\r\n"),
            (Strings{"caf\xc3\xa9", " \xce\x95\xce\xbb\xce\xbb\xce\xac\xce\xb4\xce\xb1",
                     " \xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0", " \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
                     " \xc2\xbd", "x", "\xc2\xb2", "\t", "end", "\r\n"}));
  EXPECT_EQ(gpt2_pretokenize(""), Strings{});
  EXPECT_EQ(gpt2_pretokenize("a\xff\xfe b"), (Strings{"a", "\xff\xfe", " b"}));  // invalid UTF-8: punctuation
}

TEST(Bpe, MergesInRankOrder) {
  BpeTokenizer t = BpeTokenizer::load(write_vocab("rank", kMerges).string());
  EXPECT_EQ(t.vocab_size(), 256 + 8);
  // "h e" (rank 1) before "l l" (3): "e ll" (4) can no longer apply.
  EXPECT_EQ(t.bpe("hello"), (Strings{"he", "ll", "o"}));
  EXPECT_EQ(t.encode("hello"), (std::vector<int64_t>{257, 259, 'o'}));
  // The same merges ranked "l l", "e ll", "h e": now "e ll" wins over "h e".
  BpeTokenizer r = BpeTokenizer::load(write_vocab("rank2", {"l l", "e ll", "h e"}).string());
  EXPECT_EQ(r.bpe("hello"), (Strings{"h", "ell", "o"}));
  // Chained merges Ġ t → Ġt, h e → he, Ġt he → Ġthe; every occurrence of a pair merges.
  EXPECT_EQ(t.bpe(" the"), (Strings{"\xc4\xa0the"}));
  EXPECT_EQ(t.encode(" the world"), (std::vector<int64_t>{258, 263, 'l', 'd'}));
  EXPECT_EQ(t.bpe("llll"), (Strings{"ll", "ll"}));
}

TEST(Bpe, RoundTrip) {
  BpeTokenizer t = BpeTokenizer::load(write_vocab("round", kMerges).string());
  const std::string ascii = "Hello the world's 123  end\n\tthe  worlds!\n";
  const std::string utf8 = "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac the \xf0\x9f\x98\x80 \xff\x80 bytes\n";
  for (const std::string& s : {ascii, utf8}) {
    std::vector<int64_t> ids = t.encode(s);
    EXPECT_LT(ids.size(), s.size());  // some merges applied
    EXPECT_EQ(t.decode(ids), s);
  }
  EXPECT_EQ(t.encode(ascii).size(), t.encode_u16(ascii).size());
}

TEST(Bpe, Prepare) {
  fs::path d = write_vocab("prepare", kMerges);
  const std::string text = "the world the world\n";
  std::ofstream((d / "in.txt").string(), std::ios::binary) << text;
  int64_t n = prepare_tokens((d / "in.txt").string(), (d / "out.bin").string(), "gpt2", d.string());
  runtime::TokenData td((d / "out.bin").string());
  ASSERT_EQ(td.num_tokens(), n);
  // "the" " world" " the" " world" "\n": t,he | Ġwor,l,d | Ġthe | Ġwor,l,d | Ċ
  std::vector<uint32_t> want = {'t', 257, 263, 'l', 'd', 258, 263, 'l', 'd', '\n'};
  EXPECT_EQ(td.tokens(0, n), want);
  EXPECT_EQ(td.token_bytes(), 2);  // every id < 65536: llm.c's version 1
  // a vocabulary past 65 535 (Llama 3's is 128 256): " wor" as id 70000 → a version-2 file of
  // uint32 tokens that reads back the same ids
  {
    std::ifstream in(d / "vocab.json");
    std::string v((std::istreambuf_iterator<char>(in)), {});
    const std::string from = "\"\xc4\xa0wor\":263";  // Ġwor
    ASSERT_NE(v.find(from), std::string::npos);
    v.replace(v.find(from), from.size(), "\"\xc4\xa0wor\":70000");
    std::ofstream(d / "vocab.json", std::ios::trunc) << v;
  }
  n = prepare_tokens((d / "in.txt").string(), (d / "big.bin").string(), "gpt2", d.string());
  runtime::TokenData big((d / "big.bin").string());
  EXPECT_EQ(big.token_bytes(), 4);
  EXPECT_EQ(big.tokens(0, n), (std::vector<uint32_t>{'t', 257, 70000, 'l', 'd', 258, 70000, 'l', 'd', '\n'}));
  EXPECT_THROW(prepare_tokens((d / "in.txt").string(), (d / "x.bin").string(), "gpt2", ""), UsageError);
}

namespace {
template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(Bpe, ErrorsNameTheFile) {
  fs::path d = write_vocab("errors", kMerges);
  const std::string vocab = (d / "vocab.json").string(), merges = (d / "merges.txt").string();
  // A token not in the vocab: a merge whose result the vocab lacks.
  std::ofstream(merges, std::ios::app) << "! ?\n";  // "!?" is one pre-token
  BpeTokenizer t = BpeTokenizer::load(d.string());
  EXPECT_NE(error_of<ValueError>([&] { t.encode("!?"); }).find(vocab), std::string::npos);
  EXPECT_NE(error_of<ValueError>([&] { t.decode({999}); }).find(vocab), std::string::npos);
  // An id ≥ 65536 does not fit the .bin format.
  BpeTokenizer big({{"a", 70000}}, {}, "big/vocab.json");
  EXPECT_EQ(big.encode("a"), std::vector<int64_t>{70000});
  EXPECT_NE(error_of<ValueError>([&] { big.encode_u16("a"); }).find("big/vocab.json"), std::string::npos);
  // Bad merges line, bad JSON, missing files.
  std::ofstream(merges, std::ios::app) << "oops\n";
  EXPECT_NE(error_of<IOError>([&] { BpeTokenizer::load(d.string()); }).find(merges + ":11"), std::string::npos);
  std::ofstream(vocab, std::ios::trunc) << "{\"a\": ";
  EXPECT_NE(error_of<IOError>([&] { BpeTokenizer::load(d.string()); }).find(vocab), std::string::npos);
  std::ofstream(vocab, std::ios::trunc) << "{\"a\": \"x\"}";
  EXPECT_NE(error_of<IOError>([&] { BpeTokenizer::load(d.string()); }).find(vocab), std::string::npos);
  fs::remove(vocab);
  EXPECT_NE(error_of<IOError>([&] { BpeTokenizer::load(d.string()); }).find(vocab), std::string::npos);
  EXPECT_NE(error_of<IOError>([&] { BpeTokenizer::load((d / "none").string()); }).find("none/vocab.json"),
            std::string::npos);
}

// prepare for a corpus with GPT-2's tokenizer: <|endoftext|> from vocab.json after every document
// (no BOS), the id bound from vocab.json's largest id.
TEST(Bpe, PrepareCorpusEndOfText) {
  fs::path d = write_vocab("corpus", kMerges);
  {
    std::ifstream in(d / "vocab.json");
    std::string v((std::istreambuf_iterator<char>(in)), {});
    v.back() = ',';
    v += "\"<|endoftext|>\":300}";
    std::ofstream(d / "vocab.json", std::ios::trunc) << v;
  }
  std::ofstream(d / "docs.jsonl", std::ios::binary) << "{\"text\": \"the world\"}\n{\"text\": \" the\"}\n";
  CorpusPrepareOptions o;
  o.inputs = {(d / "docs.jsonl").string()};
  o.out_dir = (d / "out").string();
  o.tokenizer = "gpt2";
  o.vocab = d.string();
  const CorpusPrepareResult r = prepare_corpus(o);
  EXPECT_EQ(r.train.eos_id, 300);
  EXPECT_EQ(r.train.bos_id, -1);
  EXPECT_EQ(r.train.vocab_size, 301);
  runtime::TokenData td((d / "out" / "shard_000000.bin").string());
  // "the" " world" | " the": t,he | Ġwor,l,d | EOS | Ġthe | EOS
  EXPECT_EQ(td.tokens(0, td.num_tokens()), (std::vector<uint32_t>{'t', 257, 263, 'l', 'd', 300, 258, 300}));
}
