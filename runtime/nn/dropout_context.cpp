#include "runtime/nn/dropout_context.h"

#include <atomic>

#include "tensor/error.h"
#include "tensor/graph.h"

namespace st::runtime {
namespace {

thread_local const DropoutContext* t_current = nullptr;
std::atomic<uint64_t> g_next_id{1};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

const DropoutContext* dropout_context() { return t_current; }

DropoutScope::DropoutScope(int64_t step, int64_t first_sample, DropoutSeedTable* seeds) : outer_(t_current) {
  ctx_.id = g_next_id.fetch_add(1);
  ctx_.step = step;
  ctx_.first_sample = first_sample;
  ctx_.seeds = seeds;
  t_current = &ctx_;
}

DropoutScope::~DropoutScope() { t_current = outer_; }

uint64_t dropout_seed(uint64_t seed, uint64_t site, uint64_t call, int64_t step) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ site);
  h = splitmix64(h ^ call);
  return splitmix64(h ^ static_cast<uint64_t>(step));
}

DropoutSeedTable::DropoutSeedTable(Device device, int64_t capacity)
    : table_(Tensor::zeros({capacity}, DType::i64, device)) {}

Tensor DropoutSeedTable::slot(uint64_t gen_seed, uint64_t site, uint64_t call) {
  const auto key = std::make_tuple(gen_seed, site, call);
  auto it = slot_of_.find(key);
  if (it == slot_of_.end()) {
    ST_CHECK(capturing_graph() == nullptr, ValueError,
             "dropout: a call (site " << site << ", call " << call
                                      << ") inside the CUDA graph capture that the warm-up step did not make");
    const int64_t i = size();
    ST_CHECK(i < table_.numel(), ValueError, "dropout seed table: more than " << table_.numel() << " calls in a step");
    const int64_t v = static_cast<int64_t>(dropout_seed(gen_seed, site, call, step_));
    AllowHostReads allow;  // a first use outside the capture (the warm-up step): written now
    table_.narrow(0, i, 1).copy_(Tensor::from_vector(std::vector<int64_t>{v}, {1}));
    keys_.push_back(key);
    it = slot_of_.emplace(key, i).first;
  }
  return table_.narrow(0, it->second, 1);
}

std::vector<int64_t> DropoutSeedTable::set_step(int64_t step) {
  step_ = step;
  std::vector<int64_t> v;
  v.reserve(keys_.size());
  for (const auto& [g, site, call] : keys_) v.push_back(static_cast<int64_t>(dropout_seed(g, site, call, step)));
  return v;
}

}  // namespace st::runtime
