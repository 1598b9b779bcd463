// Token files in llm.c's .bin format: a 256 × int32 little-endian header (magic 20240520,
// version 1, token count, rest zero) followed by `count` uint16 tokens. The file is
// memory-mapped; a step reads only the tokens of its own sequences.
//
// Batch order (docs/design.md): with global batch G = micro_batch × grad_accum × dp sequences and
// sequence length T, step s (from 0) uses global sequences s·G + j for j = 0 … G−1, and
// sequence i is tokens[i·T : i·T + T + 1] — inputs its first T tokens, targets its last T.
// Consecutive sequences share one token (the last target of i is the first input of i+1).
// The file holds N = (count − 1) / T whole sequences; a sequence index past the end WRAPS AROUND
// (i mod N), so a run longer than one epoch starts the file again from the beginning.
// A DP replica r reading micro-batch k of a step asks only for its own slice:
// sequences(step, G, first = (r·K + k)·B, count = B, T) (any partition of 0 … G−1 gives the
// same global batch).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace st::runtime {

constexpr int32_t kTokenMagic = 20240520;
constexpr int32_t kTokenVersion = 1;
constexpr int64_t kTokenHeaderInts = 256;

struct TokenBatch {
  Tensor inputs;   // i64 (count, T)
  Tensor targets;  // i64 (count, T)
};

class TokenData {
 public:
  // Maps and validates `path` (magic, version, count against the file size); throws IOError
  // naming the file.
  explicit TokenData(const std::string& path);
  ~TokenData();
  TokenData(const TokenData&) = delete;
  TokenData& operator=(const TokenData&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return count_; }
  uint16_t token(int64_t i) const;  // bounds-checked
  const uint16_t* tokens() const { return tokens_; }
  // Whole sequences of length T in the file: (count − 1) / T. Throws ValueError if T < 1.
  int64_t num_sequences(int64_t T) const;
  // Largest token id (scans the file once; to check against the vocabulary).
  uint16_t max_token() const;

  // Global sequences first … first+count−1 (each taken mod num_sequences(T)).
  // Throws IOError when the file is too short for even one sequence of length T.
  TokenBatch read(int64_t first, int64_t count, int64_t T) const;
  // The slice [first_seq, first_seq + count) of step `step`'s global batch of `global_batch`
  // sequences: read(step·global_batch + first_seq, count, T). Requires first_seq + count ≤ G.
  TokenBatch sequences(int64_t step, int64_t global_batch, int64_t first_seq, int64_t count, int64_t T) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;
  int64_t count_ = 0;
};

// Writes a token file atomically (to a temporary name beside it, fsync, rename).
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace st::runtime
