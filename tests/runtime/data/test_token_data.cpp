// Token files: header validation (errors name the file), docs/design.md's sequence order in closed
// form (token k of the file has value k mod 65536 … here k·7 mod 1000), DP slices that tile the
// global batch, wrap-around, the fixture's tokens against its documented batch order, version 2's
// uint32 ids, and the --shuffle order: a permutation per pass, the same in every layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <fstream>
#include <iterator>

#include "runtime/data/token_data.h"

using namespace st;
using namespace st::runtime;
namespace fs = std::filesystem;

namespace {
std::string temp_file(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("st_tokens_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}
uint16_t value(int64_t k) { return static_cast<uint16_t>((k * 7) % 1000); }

std::string make_file(const std::string& name, int64_t n) {
  std::vector<uint16_t> toks(n);
  for (int64_t k = 0; k < n; ++k) toks[k] = value(k);
  std::string p = temp_file(name);
  write_token_file(p, toks);
  return p;
}

void write_raw(const std::string& path, int32_t magic, int32_t version, int32_t count, size_t ntok) {
  std::vector<int32_t> hdr(256, 0);
  hdr[0] = magic;
  hdr[1] = version;
  hdr[2] = count;
  std::ofstream o(path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(hdr.data()), 1024);
  std::vector<uint16_t> t(ntok, 3);
  o.write(reinterpret_cast<const char*>(t.data()), 2 * ntok);
}

void expect_error(const std::string& path, const std::string& needle) {
  try {
    TokenData d(path);
    FAIL() << "no error for " << path;
  } catch (const IOError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find(needle), std::string::npos) << "expected '" << needle << "' in: " << m;
  }
}
}  // namespace

TEST(TokenData, WriteReadHeader) {
  std::string p = make_file("a.bin", 1001);
  EXPECT_EQ(fs::file_size(p), 1024u + 2 * 1001);
  TokenData d(p);
  EXPECT_EQ(d.num_tokens(), 1001);
  for (int64_t k = 0; k < 1001; ++k) ASSERT_EQ(d.token(k), value(k));
  EXPECT_EQ(d.max_token(), 999);
  EXPECT_THROW(d.token(1001), ValueError);
  EXPECT_EQ(d.num_sequences(10), 100);  // (1001 − 1) / 10
  EXPECT_EQ(d.num_sequences(7), 142);
}

TEST(TokenData, SequenceOrderClosedForm) {
  const int64_t T = 8, B = 2, K = 3, dp = 2, G = B * K * dp;  // G = 12
  std::string p = make_file("b.bin", 40 * G * T + 1);
  TokenData d(p);
  for (int64_t step : {0, 1, 5}) {
    // The whole global batch at once …
    TokenBatch all = d.sequences(step, G, 0, G, T);
    ASSERT_EQ(all.inputs.shape(), (Shape{G, T}));
    ASSERT_EQ(all.targets.dtype(), DType::i64);
    const int64_t* x = all.inputs.data<int64_t>();
    const int64_t* y = all.targets.data<int64_t>();
    for (int64_t j = 0; j < G; ++j)
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(x[j * T + t], value((step * G + j) * T + t));
        ASSERT_EQ(y[j * T + t], value((step * G + j) * T + t + 1));
      }
    // … equals the DP replicas' micro-batch slices, concatenated in (replica, micro-batch) order.
    for (int64_t r = 0; r < dp; ++r)
      for (int64_t k = 0; k < K; ++k) {
        int64_t first = (r * K + k) * B;
        TokenBatch mb = d.sequences(step, G, first, B, T);
        auto xv = mb.inputs.to_double(), yv = mb.targets.to_double();
        for (int64_t i = 0; i < B * T; ++i) {
          ASSERT_EQ(xv[i], x[first * T + i]);
          ASSERT_EQ(yv[i], y[first * T + i]);
        }
      }
  }
  EXPECT_THROW(d.sequences(0, G, G - 1, 2, T), ValueError);  // slice past the global batch
}

TEST(TokenData, WrapsAroundPastTheEnd) {
  const int64_t T = 4;
  std::string p = make_file("c.bin", 23);  // (23 − 1) / 4 = 5 whole sequences
  TokenData d(p);
  ASSERT_EQ(d.num_sequences(T), 5);
  TokenBatch b = d.read(3, 5, T);  // sequences 3, 4, 0, 1, 2
  auto x = b.inputs.to_double(), y = b.targets.to_double();
  const int64_t order[5] = {3, 4, 0, 1, 2};
  for (int r = 0; r < 5; ++r)
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(x[r * T + t], value(order[r] * T + t));
      EXPECT_EQ(y[r * T + t], value(order[r] * T + t + 1));
    }
  // step 2 of G = 2 → sequences 4, 5 ≡ 0
  TokenBatch s = d.sequences(2, 2, 0, 2, T);
  EXPECT_EQ(s.inputs.to_double()[0], value(16));
  EXPECT_EQ(s.inputs.to_double()[T], value(0));
  // too short for one sequence of length 30
  EXPECT_THROW(d.read(0, 1, 30), IOError);
  EXPECT_THROW(d.num_sequences(0), ValueError);
}

TEST(TokenData, FixtureMatchesReferenceBatchOrder) {
  // hf_gpt2_reference.py: step s reads tokens[s·B·T : s·B·T + B·T + 1] viewed as (B, T).
  TokenData d(std::string(ST_FIXTURE_DIR) + "/tokens.bin");
  const int64_t B = 4, T = 32;
  EXPECT_EQ(d.num_tokens(), 5 * B * T + 1);
  for (int64_t s = 0; s < 5; ++s) {
    TokenBatch b = d.sequences(s, B, 0, B, T);
    auto x = b.inputs.to_double(), y = b.targets.to_double();
    for (int64_t i = 0; i < B * T; ++i) {
      ASSERT_EQ(x[i], d.token(s * B * T + i));
      ASSERT_EQ(y[i], d.token(s * B * T + i + 1));
    }
  }
  EXPECT_LT(d.max_token(), 256);
}

TEST(TokenData, BadFilesNameTheFile) {
  expect_error(temp_file("missing.bin"), "cannot open");
  std::string p = temp_file("short.bin");
  std::ofstream(p) << "hello";
  expect_error(p, "shorter than the 1024-byte header");
  p = temp_file("magic.bin");
  write_raw(p, 12345, 1, 4, 4);
  expect_error(p, "bad magic 12345");
  expect_error(p, "not a token file");  // and what to do about it
  expect_error(p, "to train on a text file, make one with `shardtrain prepare --text FILE --out FILE.bin`");
  p = temp_file("version.bin");
  write_raw(p, kTokenMagic, 3, 4, 4);
  expect_error(p, "unsupported version 3 (expected 1: uint16 tokens, or 2: uint32 tokens)");
  p = temp_file("v2short.bin");  // 4 uint16-sized tokens under version 2's 4 bytes each
  write_raw(p, kTokenMagic, 2, 4, 4);
  expect_error(p, "4 tokens (1040 bytes) but the file has only 1032 bytes (truncated)");
  p = temp_file("trunc.bin");
  write_raw(p, kTokenMagic, 1, 10, 4);
  expect_error(p, "truncated");
  p = temp_file("long.bin");
  write_raw(p, kTokenMagic, 1, 4, 10);
  expect_error(p, "trailing data");
  p = temp_file("neg.bin");
  write_raw(p, kTokenMagic, 1, -1, 0);
  expect_error(p, "negative token count");
}

// Version 2 (uint32 tokens): ids past 65 535 (Llama 3's vocabulary of 128 256) round-trip, every
// byte of each id counts (ids whose low 16 bits collide read back apart), batches read them in
// the same order as version 1; the writer keeps version 1 (llm.c's) while every id fits 16 bits.
TEST(TokenData, Version2HoldsIdsPast65535) {
  const int64_t n = 4001;
  std::vector<uint32_t> ids(n);
  for (int64_t k = 0; k < n; ++k) ids[k] = static_cast<uint32_t>((k * 7919) % 128256);
  ids[5] = 65536 + 3;  // low 16 bits = 3 …
  ids[6] = 3;          // … as this one's
  ids[7] = 0x01020304u;  // four distinct bytes (a swapped pair would read another id)
  const std::string p = temp_file("v2.bin");
  write_token_file(p, ids);
  EXPECT_EQ(fs::file_size(p), 1024u + 4 * n);
  TokenData d(p);
  EXPECT_EQ(d.token_bytes(), 4);
  EXPECT_EQ(d.num_tokens(), n);
  EXPECT_EQ(d.tokens(0, n), ids);
  EXPECT_EQ(d.token(5), 65539u);
  EXPECT_EQ(d.token(6), 3u);
  EXPECT_EQ(d.max_token(), 0x01020304u);
  const int64_t T = 10;
  const TokenBatch b = d.read(3, 2, T);  // sequences 3 and 4: tokens [30, 41) and [40, 51)
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(b.inputs.data<int64_t>()[r * T + t], static_cast<int64_t>(ids[(3 + r) * T + t]));
      ASSERT_EQ(b.targets.data<int64_t>()[r * T + t], static_cast<int64_t>(ids[(3 + r) * T + t + 1]));
    }
  EXPECT_THROW(d.tokens(n - 1, 2), ValueError);
  // every id < 65 536: the same ids written as uint32 make llm.c's version 1, byte for byte
  std::vector<uint32_t> small(n);
  std::vector<uint16_t> small16(n);
  for (int64_t k = 0; k < n; ++k) small16[k] = static_cast<uint16_t>(small[k] = static_cast<uint32_t>(value(k)));
  const std::string p32 = temp_file("v1_from_u32.bin"), p16 = temp_file("v1_from_u16.bin");
  write_token_file(p32, small);
  write_token_file(p16, small16);
  EXPECT_EQ(fs::file_size(p32), 1024u + 2 * n);
  std::ifstream a(p32, std::ios::binary), c(p16, std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(a), {}, std::istreambuf_iterator<char>(c), {}));
  EXPECT_EQ(TokenData(p32).token_bytes(), 2);
}

// --shuffle: every pass over the file is a permutation of its sequences, a different one per pass
// and per seed, the same for a given (seed, index) every time it is asked.
TEST(TokenData, ShuffledOrderIsAPermutationPerPass) {
  for (int64_t n : {1, 2, 3, 5, 7, 16, 17, 64, 1000, 4097}) {
    const SequenceOrder order{true, 1234};
    std::vector<std::vector<int64_t>> passes;
    for (int64_t pass = 0; pass < 3; ++pass) {
      std::vector<int64_t> seen(static_cast<size_t>(n), 0), perm;
      for (int64_t q = 0; q < n; ++q) {
        const int64_t j = order.index(pass * n + q, n);
        ASSERT_TRUE(j >= 0 && j < n) << "n " << n << ": index " << j;
        ++seen[static_cast<size_t>(j)];
        perm.push_back(j);
      }
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(seen[static_cast<size_t>(j)], 1) << "n " << n << " pass " << pass << ": " << j;
      passes.push_back(perm);
    }
    if (n >= 16) {  // 16! orders: two passes (or two seeds) agreeing would be a broken key
      EXPECT_NE(passes[0], passes[1]) << n;
      EXPECT_NE(passes[1], passes[2]) << n;
      std::vector<int64_t> other, identity;
      for (int64_t q = 0; q < n; ++q) other.push_back(SequenceOrder{true, 1235}.index(q, n)), identity.push_back(q);
      EXPECT_NE(other, passes[0]) << n;
      EXPECT_NE(passes[0], identity) << n;
    }
    for (int64_t q = 0; q < n; ++q) EXPECT_EQ(order.index(q, n), passes[0][static_cast<size_t>(q)]);  // a function
  }
  // shuffle off: the sequential order (i mod n)
  for (int64_t i : {0, 5, 99, 100, 12345}) EXPECT_EQ(SequenceOrder{}.index(i, 100), i % 100);
  // a well mixed permutation moves most elements: 1000 positions, fixed points ~1 expected
  int fixed = 0;
  for (int64_t q = 0; q < 1000; ++q) fixed += SequenceOrder{true, 7}.index(q, 1000) == q;
  EXPECT_LT(fixed, 10);
}

// The same global order in every layout: for several (dp, grad-accum, micro-batch) splits of one
// global batch, the replicas' micro-batches read exactly the sequences one process reads, so
// every layout still equals one process (as in the sequential order); and a step reads the
// shuffled file sequences, not the file's order.
TEST(TokenData, ShuffledOrderIsTheSameInEveryLayout) {
  const int64_t T = 5, G = 12;
  const std::string path = make_file("shuffle.bin", 61 * T + 1);  // 61 sequences: passes wrap mid-step
  const SequenceOrder order{true, 99};
  TokenData td(path, order);
  ASSERT_EQ(td.num_sequences(T), 61);
  for (int64_t step : {0, 3, 5, 11}) {
    const TokenBatch one = td.sequences(step, G, 0, G, T);  // one process: the whole global batch
    const int64_t* x = one.inputs.data<int64_t>();
    for (int64_t j = 0; j < G; ++j) {
      const int64_t file_seq = order.index(step * G + j, 61);
      for (int64_t t = 0; t < T; ++t) ASSERT_EQ(x[j * T + t], value(file_seq * T + t)) << step << " " << j;
    }
    for (auto [dp, K] : std::vector<std::pair<int64_t, int64_t>>{{1, 12}, {2, 3}, {3, 2}, {4, 1}, {6, 2}, {12, 1}}) {
      const int64_t B = G / (dp * K);
      for (int64_t r = 0; r < dp; ++r)
        for (int64_t k = 0; k < K; ++k) {
          const int64_t first = (r * K + k) * B;
          const TokenBatch part = td.sequences(step, G, first, B, T);
          for (int64_t i = 0; i < B * T; ++i) {
            ASSERT_EQ(part.inputs.data<int64_t>()[i], x[first * T + i]) << "dp " << dp << " K " << K;
            ASSERT_EQ(part.targets.data<int64_t>()[i], one.targets.data<int64_t>()[first * T + i]);
          }
        }
    }
  }
  // a run resumed at step s reads what the uninterrupted run reads at s (a function of the index)
  TokenData again(path, order);
  const TokenBatch a = td.sequences(7, G, 4, 4, T), b = again.sequences(7, G, 4, 4, T);
  for (int64_t i = 0; i < 4 * T; ++i) EXPECT_EQ(a.inputs.data<int64_t>()[i], b.inputs.data<int64_t>()[i]);
  EXPECT_EQ(td.order(), order);
}
