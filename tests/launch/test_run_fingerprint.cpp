// The run fingerprint (runtime/setup/run_fingerprint.h) covers every train option but the few
// only rank 0 reads or that may differ harmlessly: each option of the CLI's table, set to
// another value, changes the fingerprint — so an option added to the table and forgotten in the
// fingerprint fails here. Plus the disagreement line's wording and grouping, and what tells two
// data files apart (file_identity).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "launch/config.h"
#include "runtime/setup/run_fingerprint.h"

namespace st {
namespace {

// Options that may differ between ranks (docs/design.md's rule in the header of the fingerprint).
const std::set<std::string> kMayDiffer = {"metrics",   "log-every", "progress", "keep-checkpoints",
                                          "timeout-s", "flight-recorder-dump"};

// Another valid spelling of the option's current value.
std::string other_value(const launch::OptionSpec& s) {
  const std::string v = s.get();
  if (s.is_switch) return v == "1" ? "0" : "1";
  if (s.metavar.find('|') != std::string::npos) {  // a choice: the first one that differs
    std::string choices = s.metavar + "|";
    for (size_t b = 0, e; (e = choices.find('|', b)) != std::string::npos; b = e + 1)
      if (choices.substr(b, e - b) != v) return choices.substr(b, e - b);
  }
  if (s.metavar == "F") return v + "1";                      // 0.001 → 0.0011, 25 → 251
  if (!v.empty() && v.find_first_not_of("0123456789-") == std::string::npos) return std::to_string(std::stoll(v) + 1);
  return v + "x";                                            // paths
}

TEST(RunFingerprint, EveryOptionButThePerRankOnesChangesIt) {
  runtime::TrainConfig base;
  const runtime::Fingerprint ref = runtime::run_fingerprint(base);
  runtime::TrainConfig cfg;
  launch::OptionTable table = launch::train_options(cfg);
  int checked = 0;
  for (const launch::OptionSpec& s : table.specs()) {
    cfg = base;
    const std::string v = other_value(s);
    s.set(v);
    const bool changed = runtime::run_fingerprint(cfg) != ref;
    if (kMayDiffer.count(s.name))
      EXPECT_FALSE(changed) << "--" << s.name << " may differ per rank but is in the fingerprint";
    else
      EXPECT_TRUE(changed) << "--" << s.name << " " << v << " does not change the run fingerprint";
    ++checked;
  }
  EXPECT_GE(checked, 45);  // the table holds 48 options today
  // every key is named once, and the exchange has room for them
  std::set<std::string> keys;
  for (auto& [k, v] : ref) EXPECT_TRUE(keys.insert(k).second) << k;
  EXPECT_LT(ref.size(), static_cast<size_t>(runtime::kFingerprintSlots));
}

TEST(RunFingerprint, TheDisagreementLineGroupsRanksByValue) {
  EXPECT_EQ(runtime::describe_disagreement("lr", {"0.001", "0.002"}),
            "ranks disagree on lr: rank 0 0.001, rank 1 0.002 (every rank must be started with the same options)");
  EXPECT_EQ(runtime::describe_disagreement("seed", {"1", "2", "1", "1"}),
            "ranks disagree on seed: ranks 0,2,3 1, rank 1 2 (every rank must be started with the same options)");
  // FNV-1a 64 test vectors
  EXPECT_EQ(runtime::fingerprint_hash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(runtime::fingerprint_hash("a"), 0xaf63dc4c8601ec8cull);
}

// file_identity: the size and a checksum of the header and 64 sampled 4 KiB blocks. Two files of
// one size that differ in the header or in a sampled block differ; equal copies agree; a change
// between the samples of a large file is, by design, not seen (the price of reading 257 KiB of a
// 10 GB file). 1 MiB files here: ~10 ms.
TEST(RunFingerprint, FileIdentityTellsFilesOfOneSizeApart) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("st_identity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string bytes(1 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir / name, std::ios::binary) << b;
    return (dir / name).string();
  };
  const std::string a = write("a.bin", bytes), copy = write("copy.bin", bytes);
  EXPECT_EQ(runtime::file_identity(a), runtime::file_identity(copy));
  EXPECT_EQ(runtime::file_identity(a).rfind("1048576 bytes, sample ", 0), 0u) << runtime::file_identity(a);
  std::string header = bytes, sampled = bytes, last = bytes, between = bytes;
  header[8] ^= 1;                           // the token count's field
  sampled[1024 + 10 * (bytes.size() - 1024 - 4096) / 63 + 7] ^= 1;  // inside sampled block 10 (of 0 … 63)
  last[bytes.size() - 1] ^= 1;              // the last block is sampled
  between[1024 + 4096 + 100] ^= 1;          // between blocks 0 and 1: not read
  EXPECT_NE(runtime::file_identity(write("h.bin", header)), runtime::file_identity(a));
  EXPECT_NE(runtime::file_identity(write("s.bin", sampled)), runtime::file_identity(a));
  EXPECT_NE(runtime::file_identity(write("l.bin", last)), runtime::file_identity(a));
  EXPECT_EQ(runtime::file_identity(write("b.bin", between)), runtime::file_identity(a));
  EXPECT_NE(runtime::file_identity(write("short.bin", bytes.substr(1))), runtime::file_identity(a));
  EXPECT_EQ(runtime::file_identity(""), "none");
  EXPECT_EQ(runtime::file_identity((dir / "nope.bin").string()), "missing");
  EXPECT_EQ(runtime::describe_disagreement("data identity", {"8 bytes, sample 1", "8 bytes, sample 2"}),
            "ranks disagree on data identity: rank 0 8 bytes, sample 1, rank 1 8 bytes, sample 2 (the same path holds "
            "different files on these ranks: every rank must read the same data)");
  fs::remove_all(dir);
}

// --data of one token file: its file_identity, as before corpora; of a glob or mixture: the file
// count, total bytes and a checksum of every file's identity (and part weight), within a value's
// 256 bytes, so a changed shard or weight changes it.
TEST(RunFingerprint, DataIdentityOfCorporaAndMixtures) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("st_data_identity_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (int k = 0; k < 3; ++k) std::ofstream(dir / ("s" + std::to_string(k) + ".bin"), std::ios::binary) << std::string(100 + k, 'a' + k);
  auto identity = [](const std::string& spec) {
    runtime::TrainConfig c;
    c.data = spec;
    for (const auto& [k, v] : runtime::run_fingerprint(c))
      if (k == "data identity") return v;
    return std::string("(no key)");
  };
  const std::string one = (dir / "s0.bin").string(), glob = (dir / "s*.bin").string();
  EXPECT_EQ(identity(one), runtime::file_identity(one));
  const std::string g = identity(glob);
  EXPECT_EQ(g.rfind("3 files, 303 bytes, sample ", 0), 0u) << g;
  EXPECT_LE(g.size(), 256u);
  EXPECT_NE(identity(one + ":1," + glob + ":1"), identity(one + ":1," + glob + ":2"));  // a weight
  std::ofstream(dir / "s1.bin", std::ios::binary) << std::string(101, 'z');              // a shard, same size
  EXPECT_NE(identity(glob), g);
  EXPECT_EQ(identity((dir / "none*.bin").string()), "missing");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace st
