// Corpora and mixtures (runtime/data/token_corpus.h, token_mixture.h, data_spec.h): a directory
// of 3 shards (and a glob of them) reads exactly the sequences of the one file that concatenates
// them, in file order and under --shuffle, sequences spanning shard boundaries included; a
// mixture's per-part share is exact over a whole block and within a binomial bound in any window,
// each part is read in its own order without a skip, and the draw is a function of (seed, i);
// uint16 and uint32 shards mix; every refusal names the file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "runtime/common/json_io.h"
#include "runtime/data/corpus_index.h"
#include "runtime/data/data_spec.h"
#include "runtime/data/token_corpus.h"
#include "runtime/data/token_mixture.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_corpus_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

uint32_t value(int64_t k) { return static_cast<uint32_t>((k * 7919 + 13) % 1000); }

// Shards of the given sizes holding the stream value(0), value(1), ... in `dir`, with index.json;
// returns the stream. `wide`: shard 1 in uint32 tokens (version 2) with ids ≥ 65536.
std::vector<uint32_t> make_corpus(const fs::path& dir, const std::vector<int64_t>& sizes, bool wide = false) {
  std::vector<uint32_t> all;
  CorpusIndex idx;
  idx.tokenizer = "test";
  idx.vocab_size = wide ? 70000 : 1000;
  idx.shard_tokens = 50;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<uint32_t> t;
    for (int64_t i = 0; i < sizes[k]; ++i) t.push_back(value(static_cast<int64_t>(all.size()) + i) + (wide && k == 1 ? 65536u : 0u));
    const std::string file = "shard_00000" + std::to_string(k) + ".bin";
    write_token_file((dir / file).string(), t);
    all.insert(all.end(), t.begin(), t.end());
    idx.shards.push_back({file, sizes[k], 0, 0, ""});
    idx.tokens += sizes[k];
  }
  write_json_file(CorpusIndex::path_in(dir.string()), idx.to_json());
  return all;
}

void expect_same(const TokenSource& a, const TokenSource& b, int64_t n, int64_t T) {
  const TokenBatch x = a.read(0, n, T), y = b.read(0, n, T);  // (n, T) each
  for (int64_t i = 0; i < n * T; ++i) {
    ASSERT_EQ(x.inputs.data<int64_t>()[i], y.inputs.data<int64_t>()[i]) << "sequence " << i / T << " T " << T;
    ASSERT_EQ(x.targets.data<int64_t>()[i], y.targets.data<int64_t>()[i]) << "sequence " << i / T << " T " << T;
  }
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TokenCorpus, ShardsReadAsTheConcatenatedFile) {
  const fs::path d = temp_dir("three");
  const std::vector<uint32_t> all = make_corpus(d, {50, 50, 23});
  const std::string concat = (temp_dir("concat") / "all.bin").string();
  write_token_file(concat, all);
  for (bool shuffle : {false, true})
    for (int64_t T : {4, 7, 16, 122}) {  // 7, 16: sequences that span a shard boundary; 122: one sequence
      const SequenceOrder order{shuffle, 5};
      const TokenData one(concat, order);
      const auto dir = open_token_source(d.string(), order);
      const auto glob = open_token_source((d / "shard_*.bin").string(), order);
      EXPECT_EQ(dir->num_sequences(T), one.num_sequences(T));
      const int64_t n = 3 * one.num_sequences(T) + 2;  // three passes and a bit (wrap-around)
      expect_same(*dir, one, n, T);
      expect_same(*glob, one, n, T);
    }
  // the closed form, not only agreement: sequence 3 of T 16 starts at stream token 48, in shard 0, ends in shard 1
  const auto dir = open_token_source(d.string());
  const TokenBatch b = dir->read(3, 1, 16);
  for (int64_t t = 0; t < 16; ++t) {
    EXPECT_EQ(b.inputs.data<int64_t>()[t], value(48 + t));
    EXPECT_EQ(b.targets.data<int64_t>()[t], value(49 + t));
  }
  // a single file is read by TokenData itself, as before corpora
  EXPECT_NE(dynamic_cast<const TokenData*>(open_token_source(concat).get()), nullptr);
  EXPECT_EQ(dynamic_cast<const TokenData*>(dir.get()), nullptr);
}

TEST(TokenCorpus, Uint16AndUint32ShardsTogether) {
  const fs::path d = temp_dir("wide");
  const std::vector<uint32_t> all = make_corpus(d, {50, 50, 10}, true);
  const auto c = open_token_source(d.string());
  const TokenBatch b = c->read(0, 1, 109);  // every token but the last as inputs
  for (int64_t t = 0; t < 109; ++t) ASSERT_EQ(b.inputs.data<int64_t>()[t], all[static_cast<size_t>(t)]);
  EXPECT_EQ(TokenData((d / "shard_000000.bin").string()).token_bytes(), 2);
  EXPECT_EQ(TokenData((d / "shard_000001.bin").string()).token_bytes(), 4);
  const MaxToken m = c->max_token_in();
  EXPECT_EQ(m.file, (d / "shard_000001.bin").string());  // the shard that holds it
  EXPECT_EQ(m.id, *std::max_element(all.begin(), all.end()));
  EXPECT_GE(m.id, 65536u);
}

TEST(TokenCorpus, RefusalsNameTheFile) {
  const fs::path d = temp_dir("bad");
  make_corpus(d, {50, 50, 23});
  const std::string s1 = (d / "shard_000001.bin").string();
  // a truncated tail
  fs::resize_file(s1, fs::file_size(s1) - 3);
  std::string m = error_of([&] { open_token_source(d.string()); });
  EXPECT_NE(m.find(s1), std::string::npos) << m;
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  // a bad header
  make_corpus(d, {50, 50, 23});
  {
    std::fstream f(s1, std::ios::in | std::ios::out | std::ios::binary);
    const int32_t bad = 1234;
    f.write(reinterpret_cast<const char*>(&bad), 4);
  }
  m = error_of([&] { open_token_source(d.string()); });
  EXPECT_NE(m.find(s1), std::string::npos) << m;
  EXPECT_NE(m.find("bad magic 1234"), std::string::npos) << m;
  // a shard whose count disagrees with index.json
  make_corpus(d, {50, 50, 23});
  write_token_file(s1, std::vector<uint16_t>(40, 1));
  m = error_of([&] { open_token_source(d.string()); });
  EXPECT_NE(m.find(s1 + ": 40 tokens, but " + (d / "index.json").string() + " lists 50"), std::string::npos) << m;
  // a missing shard, a directory without index.json, a glob matching nothing, a missing path
  make_corpus(d, {50, 50, 23});
  fs::remove(s1);
  m = error_of([&] { open_token_source(d.string()); });
  EXPECT_NE(m.find(s1), std::string::npos) << m;
  const fs::path empty = temp_dir("noindex");
  m = error_of([&] { open_token_source(empty.string()); });
  EXPECT_NE(m.find((empty / "index.json").string()), std::string::npos) << m;
  m = error_of([&] { open_token_source((empty / "*.bin").string()); });
  EXPECT_NE(m.find((empty / "*.bin").string() + ": the glob matches no file"), std::string::npos) << m;
  m = error_of([&] { open_token_source((empty / "none.bin").string()); });
  EXPECT_NE(m.find((empty / "none.bin").string() + ": no such file or directory"), std::string::npos) << m;
}

TEST(DataSpec, PartsAndWeights) {
  const fs::path d = temp_dir("spec");
  const std::string f = (d / "x:y.bin").string();  // a ':' that is part of the name
  write_token_file(f, std::vector<uint16_t>(20, 1));
  const std::string g = (d / "g.bin").string();
  write_token_file(g, std::vector<uint16_t>(20, 2));
  std::vector<DataPart> p = resolve_data_spec(f + "," + g + ":0.25");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].where, f);
  EXPECT_FALSE(p[0].weighted);
  EXPECT_TRUE(p[0].single_file);
  EXPECT_EQ(p[1].where, g);
  EXPECT_EQ(p[1].weight, 0.25);
  EXPECT_THROW(resolve_data_spec(g + ":0"), ValueError);
  EXPECT_THROW(resolve_data_spec(g + ":-1"), ValueError);
  EXPECT_THROW(resolve_data_spec(g + ",," + g), ValueError);
  // one part alone is read as itself, its weight notwithstanding
  EXPECT_NE(dynamic_cast<const TokenData*>(open_token_source(g + ":3").get()), nullptr);
  // a weight below 1/65536 of the total would never be read
  const std::string m = error_of([&] { open_token_source(f + ":1e6," + g + ":1"); });
  EXPECT_NE(m.find(g + "'s weight 1 is below 1/65536"), std::string::npos) << m;
}

TEST(TokenMixture, SharesPartsAndDeterminism) {
  const fs::path d = temp_dir("mix");
  std::vector<std::string> files;
  for (int c = 0; c < 3; ++c) {
    std::vector<uint16_t> t(1001);
    for (size_t k = 0; k < t.size(); ++k) t[k] = static_cast<uint16_t>(c * 10000 + k % 1000);  // the part in the id
    files.push_back((d / ("p" + std::to_string(c) + ".bin")).string());
    write_token_file(files.back(), t);
  }
  const std::string spec = files[0] + ":5," + files[1] + ":3," + files[2] + ":2";
  const auto src = open_token_source(spec, SequenceOrder{false, 7});
  const auto* mix = dynamic_cast<const TokenMixture*>(src.get());
  ASSERT_NE(mix, nullptr);
  const int64_t K = TokenMixture::kBlock;
  // n_c by largest remainder of w_c / Σw · K: 32768, 19660.8 → 19661, 13107.2 → 13107
  EXPECT_EQ(mix->slots(0), 32768);
  EXPECT_EQ(mix->slots(1), 19661);
  EXPECT_EQ(mix->slots(2), 13107);
  // over a whole block: exactly n_c of each part, and part c's own sequences 0 … n_c − 1, each once
  std::vector<std::vector<int64_t>> seen(3);
  for (int64_t i = K; i < 2 * K; ++i) {  // block 1: its k from n_c on
    const auto [c, k] = mix->locate(i);
    seen[c].push_back(k);
  }
  for (size_t c = 0; c < 3; ++c) {
    ASSERT_EQ(static_cast<int64_t>(seen[c].size()), mix->slots(c));
    std::sort(seen[c].begin(), seen[c].end());
    for (size_t j = 0; j < seen[c].size(); ++j) ASSERT_EQ(seen[c][j], mix->slots(c) + static_cast<int64_t>(j)) << "part " << c;
  }
  // any window (here 20 000 sequences across the block 1 / 2 boundary): each share within 5 binomial
  // standard deviations √(n·p·(1−p)) of n·w_c. Draws within a block are without replacement, whose
  // variance is below the binomial's, so a bound of 5σ fails by chance with probability < 1e-6.
  const int64_t n = 20000, from = 2 * K - 7000;
  std::vector<int64_t> count(3, 0);
  for (int64_t i = from; i < from + n; ++i) ++count[mix->locate(i).first];
  const double w[3] = {0.5, 0.3, 0.2};
  for (size_t c = 0; c < 3; ++c) {
    const double sd = std::sqrt(n * w[c] * (1 - w[c]));
    EXPECT_LE(std::abs(static_cast<double>(count[c]) - n * w[c]), 5 * sd) << "part " << c << " count " << count[c];
  }
  // the tokens of global sequence i are those of part c's sequence k; a new mixture (a resumed run,
  // another rank) of the same seed reads the same, another seed not
  const int64_t T = 8;
  const TokenBatch all = src->read(1000, 64, T);  // (64, T)
  const auto again = open_token_source(spec, SequenceOrder{false, 7});
  const auto other = open_token_source(spec, SequenceOrder{false, 8});
  int differ = 0;
  for (int64_t r = 0; r < 64; ++r) {
    const auto [c, k] = mix->locate(1000 + r);
    const TokenBatch one = TokenData(files[c]).read(k, 1, T);
    const TokenBatch re = again->read(1000 + r, 1, T);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(all.inputs.data<int64_t>()[r * T + t], one.inputs.data<int64_t>()[t]);
      ASSERT_EQ(all.targets.data<int64_t>()[r * T + t], one.targets.data<int64_t>()[t]);
      ASSERT_EQ(re.inputs.data<int64_t>()[t], one.inputs.data<int64_t>()[t]);
    }
    differ += other->read(1000 + r, 1, T).inputs.data<int64_t>()[0] / 10000 != all.inputs.data<int64_t>()[r * T] / 10000;
  }
  EXPECT_GT(differ, 10);  // another seed draws other parts (64 draws agree by chance with p ≈ 0.38 each)
  // a DP slice of a step is the step's global batch cut: sequences(step, G, first, B) = read(step·G + first, B)
  const TokenBatch step = src->sequences(3, 16, 4, 4, T), direct = src->read(3 * 16 + 4, 4, T);
  for (int64_t i = 0; i < 4 * T; ++i) ASSERT_EQ(step.inputs.data<int64_t>()[i], direct.inputs.data<int64_t>()[i]);
}

TEST(CorpusIndex, DocIndexRoundTripAndRefusals) {
  const fs::path d = temp_dir("idx");
  const std::string p = (d / "shard_000000.idx").string();
  write_doc_index(p, {0, 17, 40});
  EXPECT_EQ(read_doc_index(p), (std::vector<int64_t>{0, 17, 40}));
  fs::resize_file(p, fs::file_size(p) - 1);
  std::string m = error_of([&] { read_doc_index(p); });
  EXPECT_NE(m.find(p), std::string::npos) << m;
  std::ofstream((d / "index.json").string()) << "{\"format\": \"other\", \"version\": 1}";
  m = error_of([&] { CorpusIndex::read(d.string()); });
  EXPECT_NE(m.find((d / "index.json").string() + ": not a shardtrain corpus index"), std::string::npos) << m;
}
