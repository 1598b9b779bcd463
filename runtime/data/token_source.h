// TokenSource: what a run reads its sequences from — one token file (runtime/data/token_data.h),
// a corpus of shards read as one stream (token_corpus.h) or a mixture of corpora by weight
// (token_mixture.h); `--data` / `--val-data` name one through data_spec.h. Every source maps a
// global sequence index i ≥ 0 to T + 1 tokens, a function of i alone (and the run's seed), so
// every layout and a resumed run read the same global sequences.
#pragma once
#include <cstdint>
#include <string>

#include "tensor/tensor.h"

namespace st::runtime {

struct TokenBatch {
  Tensor inputs;   // i64 (count, T)
  Tensor targets;  // i64 (count, T)
};

// The largest token id of a source and the file that holds it (to refuse ids ≥ a vocabulary
// naming the file).
struct MaxToken {
  uint32_t id = 0;
  std::string file;
};

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // For messages: the file, or the --data spec of a corpus or mixture.
  virtual const std::string& path() const = 0;
  virtual int64_t num_tokens() const = 0;
  // Whole sequences of length T the source holds (ValueError if T < 1).
  virtual int64_t num_sequences(int64_t T) const = 0;
  // Scans every token once.
  virtual MaxToken max_token_in() const = 0;
  // Global sequences first … first+count−1: inputs / targets (count, T). Throws IOError naming the
  // file when a part is too short for one sequence of length T.
  virtual TokenBatch read(int64_t first, int64_t count, int64_t T) const = 0;
  // The slice [first_seq, first_seq + count) of step `step`'s global batch of `global_batch`
  // sequences: read(step·global_batch + first_seq, count, T). Requires first_seq + count ≤ G.
  TokenBatch sequences(int64_t step, int64_t global_batch, int64_t first_seq, int64_t count, int64_t T) const;
};

}  // namespace st::runtime
