// HfTokenizer against Hugging Face's tokenizers library: for the four forms of
// tests/fixtures/hf_tokenizers (llama3, gpt2, spm, metaspace, edge) and every text of cases.json (hard
// texts: empty, whitespace runs, CRLF, ZWJ emoji, specials written in the text, invalid UTF-8 …;
// edge: unknown characters fused into <unk>, lstrip / rstrip / single_word / normalized added
// tokens, Metaspace split, a template with EOS)
// the ids with and without special tokens, the decodes with special tokens skipped and kept, the
// ids of the whole training text, the vocabulary size — all exactly equal to the library's.
// Then UTF-8 replacement against WHATWG's rule, merges in the "a b" spelling, and the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/data/hf_tokenizer.h"
#include "runtime/data/utf8.h"
#include "tensor/error.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

const std::string kDir = ST_HF_TOKENIZERS_DIR;

std::string read_file(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

const nlohmann::json& cases() {
  static const nlohmann::json c = nlohmann::json::parse(read_file(kDir + "/cases.json"));
  return c;
}

std::vector<int64_t> wide(const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); }

class HfForm : public ::testing::TestWithParam<std::string> {};

TEST_P(HfForm, IdsAndDecodesEqualTheLibrary) {
  const std::string form = GetParam();
  const HfTokenizer tok = HfTokenizer::load(kDir + "/" + form);  // a directory holding tokenizer.json
  const auto& c = cases()[form];
  const auto& texts = cases()["texts"];
  ASSERT_GT(texts.size(), 60u);
  EXPECT_EQ(tok.vocab_size(), c["vocab_size"].get<int64_t>());
  for (size_t k = 0; k < texts.size(); ++k) {
    const std::string text = from_hex(texts[k]["hex"].get<std::string>());
    SCOPED_TRACE(form + " text #" + std::to_string(k) + " hex " + texts[k]["hex"].get<std::string>());
    const auto plain = tok.encode(text);
    const auto with = tok.encode_with_specials(text);
    EXPECT_EQ(wide(plain), c["ids_plain"][k].get<std::vector<int64_t>>());
    EXPECT_EQ(wide(with), c["ids"][k].get<std::vector<int64_t>>());
    const auto ids = c["ids"][k].get<std::vector<int64_t>>();
    EXPECT_EQ(tok.decode(ids, true), c["decoded"][k].get<std::string>());
    EXPECT_EQ(tok.decode(ids, false), c["decoded_all"][k].get<std::string>());
  }
  const std::string train = read_file(kDir + "/train.txt");
  EXPECT_EQ(wide(tok.encode_with_specials(train)), c["train_ids"].get<std::vector<int64_t>>());
  // a second pass runs from the per-word cache: the same ids
  EXPECT_EQ(wide(tok.encode_with_specials(train)), c["train_ids"].get<std::vector<int64_t>>());
}

INSTANTIATE_TEST_SUITE_P(Forms, HfForm, ::testing::Values("llama3", "gpt2", "spm", "metaspace", "edge"));

// The pre-tokenizers alone: every Split behaviour (with and without invert, a Regex and a String
// pattern), every Metaspace scheme (split or not), ByteLevel with a prefix space, a Sequence —
// the pieces of each text equal the library's preTokenizeString.
TEST(HfPreTokenizer, PiecesEqualTheLibrary) {
  const auto& texts = cases()["texts"];
  const auto& all = cases()["pretokenize"];
  ASSERT_GE(all.size(), 28u);
  for (const auto& c : all) {
    const HfPreTokenizer pre(c["pre_tokenizer"], "cases.json");
    for (size_t k = 0; k < texts.size(); ++k) {
      SCOPED_TRACE(c["pre_tokenizer"].dump() + " text #" + std::to_string(k));
      // as HfTokenizer hands them over: well-formed UTF-8, never empty
      const std::string text = utf8_replace_invalid(from_hex(texts[k]["hex"].get<std::string>()));
      std::vector<Piece> pieces;
      if (!text.empty()) pieces.push_back(Piece{text, -1, true});
      pre.apply(pieces);
      std::vector<std::string> got;
      for (const Piece& p : pieces) got.push_back(p.text);
      EXPECT_EQ(got, c["pieces"][k].get<std::vector<std::string>>());
    }
  }
}

TEST(HfTokenizer, SpecialTokenIds) {
  for (const std::string form : {"llama3", "gpt2", "spm", "metaspace", "edge"}) {
    const HfTokenizer tok = HfTokenizer::load(kDir + "/" + form + "/tokenizer.json");  // the file itself
    const auto& c = cases()[form];
    EXPECT_EQ(tok.bos_id(), c["bos"].is_null() ? -1 : c["bos"].get<int64_t>()) << form;
    EXPECT_EQ(tok.eos_id(), c["eos"].get<int64_t>()) << form;
    EXPECT_EQ(tok.prefix_ids(), c["bos"].is_null() ? std::vector<int32_t>{} : std::vector<int32_t>{c["bos"].get<int32_t>()});
    EXPECT_EQ(tok.suffix_ids(), form == "edge" ? std::vector<int32_t>{2} : std::vector<int32_t>{});
  }
}

// Merges written "a b" (tokenizers before 0.20, and most files in use) give the same ids.
TEST(HfTokenizer, MergesInEitherSpelling) {
  nlohmann::json j = nlohmann::json::parse(read_file(kDir + "/gpt2/tokenizer.json"));
  ASSERT_TRUE(j["model"]["merges"][0].is_array());
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const HfTokenizer tok(j, "gpt2 with string merges");
  EXPECT_EQ(wide(tok.encode(read_file(kDir + "/train.txt"))), cases()["gpt2"]["train_ids"].get<std::vector<int64_t>>());
}

// WHATWG / Python errors="replace": each maximal invalid subpart is one U+FFFD.
TEST(Utf8, ReplacesMaximalSubparts) {
  const std::string R(kReplacementChar);
  EXPECT_EQ(utf8_replace_invalid("ok \xff bad"), "ok " + R + " bad");
  EXPECT_EQ(utf8_replace_invalid("\xf0\x9f\x98"), R);                 // a cut 4-byte sequence: one
  EXPECT_EQ(utf8_replace_invalid("\xed\xa0\x80"), R + R + R);         // a surrogate: ED's second byte ≤ 9F
  EXPECT_EQ(utf8_replace_invalid("\xc0\xaf"), R + R);                 // C0 is never a lead byte
  EXPECT_EQ(utf8_replace_invalid("\xe0\x80\xaf"), R + R + R);         // overlong: E0's second byte ≥ A0
  EXPECT_EQ(utf8_replace_invalid("\xf4\x90\x80\x80"), R + R + R + R); // past U+10FFFF
  EXPECT_EQ(utf8_replace_invalid("A\xf0\x9f\x98" "B\xe2"), "A" + R + "B" + R);
  EXPECT_EQ(utf8_replace_invalid("\xc3("), R + "(");
  EXPECT_EQ(utf8_replace_invalid("h\xc3\xa9 \xf0\x9f\x98\x80"), "h\xc3\xa9 \xf0\x9f\x98\x80");  // valid: unchanged
}

// NFC (Qwen 2's normalizer) where the text is NFC by its ranges: the ids of the same file without
// the normalizer; a character NFC would change, or one outside the ranges, refused.
TEST(HfTokenizer, NfcWhereTheTextIsAlreadyNfc) {
  nlohmann::json j = nlohmann::json::parse(read_file(kDir + "/llama3/tokenizer.json"));
  const HfTokenizer plain(j, "llama3");
  j["normalizer"] = {{"type", "NFC"}};
  const HfTokenizer nfc(j, "llama3 + NFC");
  for (const std::string text : {"Hello world", "分布式训练。日本語のテキスト 한국어 문장", "naïve café 👨\u200d👩\u200d👧 🙂\xef\xb8\x8f x"})
    EXPECT_EQ(nfc.encode(text), plain.encode(text)) << text;
  EXPECT_THROW(nfc.encode("e\xcc\x81"), ValueError);        // e + U+0301: NFC composes them into é
  EXPECT_THROW(nfc.encode("\xe2\x84\xab ngstrom"), ValueError);  // U+212B ANGSTROM SIGN: NFC maps it to Å
  EXPECT_THROW(nfc.encode("\xef\xa4\x80"), ValueError);     // U+F900, a compatibility ideograph
}

TEST(HfTokenizer, ErrorsNameTheFile) {
  EXPECT_THROW(HfTokenizer::load(kDir + "/no_such_form"), IOError);
  nlohmann::json j = nlohmann::json::parse(read_file(kDir + "/spm/tokenizer.json"));
  j["model"]["type"] = "Unigram";
  try {
    HfTokenizer t(j, "x/tokenizer.json");
    FAIL() << "a Unigram model was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("x/tokenizer.json: model Unigram is not supported"), std::string::npos) << e.what();
  }
  j = nlohmann::json::parse(read_file(kDir + "/gpt2/tokenizer.json"));
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_THROW(HfTokenizer(j, "f"), ValueError);
  j = nlohmann::json::parse(read_file(kDir + "/llama3/tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  EXPECT_THROW(HfTokenizer(j, "f"), ValueError);
}

}  // namespace
