// The run fingerprint (runtime/setup/run_fingerprint.h) covers every train option but the few
// only rank 0 reads or that may differ harmlessly: each option of the CLI's table, set to
// another value, changes the fingerprint — so an option added to the table and forgotten in the
// fingerprint fails here. Plus the disagreement line's wording and grouping.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace st
