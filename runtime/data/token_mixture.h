// TokenMixture: `--data A:wA,B:wB,...` — corpora drawn by weight (docs/design.md, "Mixtures").
// Global sequence i reads part c with probability n_c / K, where the K = 65 536 slots of each
// block of K consecutive global sequences are dealt to the parts by weight (n_c: w_c / Σw · K by
// largest remainder, every n_c ≥ 1) and shuffled within the block by a permutation drawn from
// (seed, block) — the Feistel permutation of SequenceOrder, keyed apart from --shuffle's:
//   b = ⌊i / K⌋, q = π_b(i mod K); c: the part whose slot range [s_c, s_c + n_c) holds q;
//   the part's own sequence k = b·n_c + (q − s_c), read through its SequenceOrder.
// So the part of sequence i is a function of (seed, i) — every layout and a resumed run read the
// same sequences; each block holds exactly n_c sequences of part c (its share over whole blocks is
// exactly n_c / K; over a window inside a block it varies as a draw without replacement, no more
// than independent draws would); and each part is read in its own order without skipping any
// sequence (k counts the part's draws), wrapping past its end as a single file does.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/token_source.h"

namespace st::runtime {

class TokenMixture : public TokenSource {
 public:
  static constexpr int64_t kBlock = 65536;  // K: slots per block (the permutation's 4^8)
  // weights > 0 (ValueError naming the part otherwise, or when w_c / Σw < 1 / K: no slot).
  TokenMixture(std::vector<std::shared_ptr<const TokenSource>> parts, std::vector<double> weights, uint64_t seed,
               std::string name);

  const std::string& path() const override { return name_; }
  int64_t num_tokens() const override;
  int64_t num_sequences(int64_t T) const override;  // the parts' sum
  MaxToken max_token_in() const override;
  TokenBatch read(int64_t first, int64_t count, int64_t T) const override;

  // Global sequence i → (part, the part's own sequence index).
  std::pair<size_t, int64_t> locate(int64_t i) const;
  size_t num_parts() const { return parts_.size(); }
  int64_t slots(size_t c) const { return slots_[c]; }  // n_c

 private:
  std::string name_;
  std::vector<std::shared_ptr<const TokenSource>> parts_;
  std::vector<int64_t> slots_, slot_start_;  // n_c, s_c
  uint64_t seed_;
};

}  // namespace st::runtime
