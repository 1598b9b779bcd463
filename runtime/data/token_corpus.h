// TokenCorpus: token files (the shards of a `prepare` directory, or a glob's files) read as ONE
// stream — their tokens concatenated in the order given — so a corpus reads exactly the sequences
// of the one file that concatenates its shards (docs/design.md, "Corpora"): with total tokens N,
// sequence i is stream tokens [i·T, i·T + T + 1) (a sequence may span two shards), wrapping mod
// (N − 1) / T and shuffled per pass by the SequenceOrder as a single file is. Every shard is
// memory-mapped on its own (TokenData); none is loaded whole.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_data.h"

namespace st::runtime {

class TokenCorpus : public TokenSource {
 public:
  // Maps every shard (IOError naming a shard with a bad header or a truncated tail). `name`: what
  // messages call the corpus (its directory or glob). Throws IOError for no shards.
  TokenCorpus(const std::vector<std::string>& shards, std::string name, SequenceOrder order = {});

  const std::string& path() const override { return name_; }
  int64_t num_tokens() const override { return starts_.back(); }
  int64_t num_sequences(int64_t T) const override;
  MaxToken max_token_in() const override;  // the largest id over every shard, with its shard
  TokenBatch read(int64_t first, int64_t count, int64_t T) const override;

  size_t num_shards() const { return shards_.size(); }
  const TokenData& shard(size_t k) const { return *shards_[k]; }

 private:
  std::string name_;
  SequenceOrder order_;
  std::vector<std::unique_ptr<TokenData>> shards_;
  std::vector<int64_t> starts_;  // starts_[k]: stream index of shard k's first token; back(): the total
};

}  // namespace st::runtime
