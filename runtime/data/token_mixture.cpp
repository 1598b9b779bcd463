// TokenMixture: corpora by weight, drawn per block of global sequences (runtime/data/token_mixture.h).
#include "runtime/data/token_mixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "runtime/data/token_data.h"
#include "tensor/error.h"

namespace st::runtime {

TokenMixture::TokenMixture(std::vector<std::shared_ptr<const TokenSource>> parts, std::vector<double> weights,
                           uint64_t seed, std::string name)
    : name_(std::move(name)), parts_(std::move(parts)), seed_(seed) {
  ST_CHECK(!parts_.empty() && parts_.size() == weights.size(), ValueError, "mixture " << name_ << ": no parts");
  double total = 0;
  for (size_t c = 0; c < parts_.size(); ++c) {
    ST_CHECK(std::isfinite(weights[c]) && weights[c] > 0, ValueError,
             "mixture " << name_ << ": " << parts_[c]->path() << " has weight " << weights[c] << " (must be > 0)");
    total += weights[c];
  }
  // largest remainder: n_c = ⌊w_c / Σw · K⌋, the K − Σ n_c slots left to the largest fractions (ties: first part)
  std::vector<double> frac(parts_.size());
  int64_t dealt = 0;
  for (size_t c = 0; c < parts_.size(); ++c) {
    const double quota = weights[c] / total * static_cast<double>(kBlock);
    slots_.push_back(static_cast<int64_t>(std::floor(quota)));
    frac[c] = quota - std::floor(quota);
    dealt += slots_.back();
  }
  std::vector<size_t> by_frac(parts_.size());
  std::iota(by_frac.begin(), by_frac.end(), size_t{0});
  std::stable_sort(by_frac.begin(), by_frac.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
  for (size_t j = 0; dealt < kBlock; ++j, ++dealt) ++slots_[by_frac[j % by_frac.size()]];
  int64_t s = 0;
  for (size_t c = 0; c < parts_.size(); ++c) {
    ST_CHECK(slots_[c] >= 1, ValueError,
             "mixture " << name_ << ": " << parts_[c]->path() << "'s weight " << weights[c] << " is below 1/" << kBlock
                        << " of the total " << total << " (it would never be read)");
    slot_start_.push_back(s);
    s += slots_[c];
  }
}

int64_t TokenMixture::num_tokens() const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p->num_tokens();
  return n;
}

int64_t TokenMixture::num_sequences(int64_t T) const {
  int64_t n = 0;
  for (const auto& p : parts_) n += p->num_sequences(T);
  return n;
}

MaxToken TokenMixture::max_token_in() const {
  MaxToken m = parts_.front()->max_token_in();
  for (size_t c = 1; c < parts_.size(); ++c)
    if (MaxToken t = parts_[c]->max_token_in(); t.id > m.id) m = std::move(t);
  return m;
}

std::pair<size_t, int64_t> TokenMixture::locate(int64_t i) const {
  ST_CHECK(i >= 0, ValueError, "mixture " << name_ << ": sequence " << i << " < 0");
  // π_b: SequenceOrder's Feistel permutation of pass b over K slots, keyed apart from --shuffle's
  const SequenceOrder slot_order{true, seed_ ^ 0x4d6978747572655full};  // "Mixture_"
  const int64_t b = i / kBlock;
  const int64_t q = slot_order.index(i, kBlock);
  const size_t c = static_cast<size_t>(std::upper_bound(slot_start_.begin(), slot_start_.end(), q) - slot_start_.begin()) - 1;
  return {c, b * slots_[c] + (q - slot_start_[c])};
}

TokenBatch TokenMixture::read(int64_t first, int64_t count, int64_t T) const {
  if (first < 0 || count < 0) ST_THROW(ValueError, "mixture " << name_ << ": bad sequence range first " << first << " count " << count);
  TokenBatch b{Tensor::empty({count, T}, DType::i64), Tensor::empty({count, T}, DType::i64)};
  for (int64_t r = 0; r < count; ++r) {
    const auto [c, k] = locate(first + r);
    const TokenBatch one = parts_[c]->read(k, 1, T);  // (1, T) each
    std::memcpy(b.inputs.data<int64_t>() + r * T, one.inputs.data<int64_t>(), static_cast<size_t>(T) * sizeof(int64_t));
    std::memcpy(b.targets.data<int64_t>() + r * T, one.targets.data<int64_t>(), static_cast<size_t>(T) * sizeof(int64_t));
  }
  return b;
}

}  // namespace st::runtime
