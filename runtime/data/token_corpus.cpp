// TokenCorpus: shards read as one stream of tokens (runtime/data/token_corpus.h).
#include "runtime/data/token_corpus.h"

#include <algorithm>

#include "tensor/error.h"

namespace st::runtime {

TokenCorpus::TokenCorpus(const std::vector<std::string>& shards, std::string name, SequenceOrder order)
    : name_(std::move(name)), order_(order) {
  if (shards.empty()) ST_THROW(IOError, "corpus " << name_ << ": no token files");
  starts_.push_back(0);
  for (const auto& s : shards) {
    shards_.push_back(std::make_unique<TokenData>(s));
    starts_.push_back(starts_.back() + shards_.back()->num_tokens());
  }
}

int64_t TokenCorpus::num_sequences(int64_t T) const {
  if (T < 1) ST_THROW(ValueError, "corpus " << name_ << ": sequence length " << T << " < 1");
  return num_tokens() > 0 ? (num_tokens() - 1) / T : 0;
}

MaxToken TokenCorpus::max_token_in() const {
  MaxToken m{0, shards_.front()->path()};
  for (const auto& s : shards_)
    if (const uint32_t t = s->max_token(); t > m.id) m = {t, s->path()};
  return m;
}

TokenBatch TokenCorpus::read(int64_t first, int64_t count, int64_t T) const {
  const int64_t n_seq = num_sequences(T);
  if (n_seq < 1)
    ST_THROW(IOError, "corpus " << name_ << ": " << num_tokens() << " tokens are too few for one sequence of length " << T
                                << " (needs " << T + 1 << ")");
  if (first < 0 || count < 0) ST_THROW(ValueError, "corpus " << name_ << ": bad sequence range first " << first << " count " << count);
  TokenBatch b{Tensor::empty({count, T}, DType::i64), Tensor::empty({count, T}, DType::i64)};
  int64_t* x = b.inputs.data<int64_t>();   // (count, T)
  int64_t* y = b.targets.data<int64_t>();  // (count, T)
  std::vector<uint32_t> seq;               // T + 1 stream tokens
  for (int64_t r = 0; r < count; ++r) {
    int64_t at = order_.index(first + r, n_seq) * T;  // stream index of the sequence's first token
    const int64_t end = at + T + 1;
    seq.clear();
    // the shard holding `at`: the last k with starts_[k] ≤ at (an empty shard is passed over)
    size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), at) - starts_.begin()) - 1;
    while (at < end) {
      const int64_t take = std::min(end, starts_[k + 1]) - at;
      const std::vector<uint32_t> part = shards_[k]->tokens(at - starts_[k], take);
      seq.insert(seq.end(), part.begin(), part.end());
      at += take;
      ++k;
    }
    for (int64_t t = 0; t < T; ++t) {
      x[r * T + t] = seq[static_cast<size_t>(t)];
      y[r * T + t] = seq[static_cast<size_t>(t + 1)];
    }
  }
  return b;
}

}  // namespace st::runtime
