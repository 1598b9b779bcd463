// Token files in llm.c's .bin format: a 256 × int32 little-endian header (magic 20240520,
// version, token count, rest zero) followed by `count` tokens — version 1 (llm.c's own): uint16
// tokens; version 2 (this project's extension, for vocabularies past 65 536 such as Llama 3's
// 128 256): uint32 tokens. The writer picks version 1 whenever every id fits 16 bits, so files of
// GPT-2-sized vocabularies stay llm.c's. The file is memory-mapped; a step reads only the tokens
// of its own sequences.
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
//
// SequenceOrder (--shuffle 1): global sequence i reads file sequence π_p(i mod N) instead of
// i mod N, where pass p = ⌊i / N⌋ and π_p is a permutation of 0 … N−1 drawn from (seed, p): each
// pass over the file visits every sequence once, in a new order. π_p is computed, not stored: a
// 6-round Feistel network keyed by (seed, p) over the 4^k ≥ N indices, walked back into
// [0, N) (cycle walking), so any rank maps any index alone and every layout, and a resumed run,
// reads the same global order (it is a function of i).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/data/token_source.h"

namespace st::runtime {

constexpr int32_t kTokenMagic = 20240520;
constexpr int32_t kTokenVersion = 1;    // uint16 tokens (llm.c)
constexpr int32_t kTokenVersion32 = 2;  // uint32 tokens
constexpr int64_t kTokenHeaderInts = 256;

struct SequenceOrder {
  bool shuffle = false;  // false: llm.c's sequential order
  uint64_t seed = 0;
  // The file sequence (0 … n−1) that global sequence i ≥ 0 reads, of n ≥ 1.
  int64_t index(int64_t i, int64_t n) const;
  bool operator==(const SequenceOrder&) const = default;
};

// One token file, memory-mapped (a TokenSource; a prepare directory's shards are TokenData each).
class TokenData : public TokenSource {
 public:
  // Maps and validates `path` (magic, version, count against the file size); throws IOError
  // naming the file. `order`: how global sequence indices map to the file's sequences.
  explicit TokenData(const std::string& path, SequenceOrder order = {});
  ~TokenData();
  TokenData(const TokenData&) = delete;
  TokenData& operator=(const TokenData&) = delete;

  const std::string& path() const override { return path_; }
  const SequenceOrder& order() const { return order_; }
  int64_t num_tokens() const override { return count_; }
  int token_bytes() const { return width_; }  // 2 (version 1) or 4 (version 2)
  uint32_t token(int64_t i) const;  // bounds-checked
  std::vector<uint32_t> tokens(int64_t first, int64_t count) const;  // bounds-checked
  // Whole sequences of length T in the file: (count − 1) / T. Throws ValueError if T < 1.
  int64_t num_sequences(int64_t T) const override;
  // Largest token id (scans the file once; to check against the vocabulary).
  uint32_t max_token() const;
  MaxToken max_token_in() const override { return {max_token(), path_}; }

  // Global sequences first … first+count−1 (each mapped by the order: mod num_sequences(T),
  // shuffled within its pass with --shuffle).
  // Throws IOError when the file is too short for even one sequence of length T.
  TokenBatch read(int64_t first, int64_t count, int64_t T) const override;
  // T + 1 file tokens from `first` (unchecked beyond first + T < num_tokens()) into x (T) and y (T).
  void copy_sequence(int64_t first, int64_t T, int64_t* x, int64_t* y) const;

 private:
  std::string path_;
  SequenceOrder order_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;  // count_ tokens of width_ bytes, little-endian
  int width_ = 2;
  int64_t count_ = 0;
  uint32_t at(int64_t i) const;  // unchecked
};

// Writes a token file atomically (to a temporary name beside it, fsync, rename): version 1 from
// uint16 ids; from uint32 ids version 1 when every id < 65 536, else version 2.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens);
// As above in the version given (kTokenVersion: every id must be < 65 536; kTokenVersion32), so
// the shards of one corpus share a dtype whatever ids each one holds.
void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens, int32_t version);

}  // namespace st::runtime
