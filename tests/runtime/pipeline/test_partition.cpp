// The stage partitioner: uniform counts, and the balanced split checked against brute force
// over every contiguous split for small cases (costs drawn from Philox).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "runtime/common/partition.h"
#include "tensor/error.h"
#include "tensor/philox.h"

using namespace st::runtime;

namespace {
double brute_force(const std::vector<double>& costs, int stages, const std::vector<double>& speeds) {
  const int L = static_cast<int>(costs.size());
  double best = INFINITY;
  std::vector<int> first(stages, 0);
  std::function<void(int, int)> rec = [&](int s, int start) {
    first[s] = start;
    if (s == stages - 1) {
      Partition p;
      p.layers = L;
      p.first = first;
      best = std::min(best, bottleneck(p, costs, speeds));
      return;
    }
    for (int next = start + 1; next <= L - (stages - s - 1); ++next) rec(s + 1, next);
  };
  rec(0, 0);
  return best;
}
}  // namespace

TEST(Partition, UniformCounts) {
  Partition p = partition_uniform(10, 4);  // 3 3 2 2
  EXPECT_EQ(p.first, (std::vector<int>{0, 3, 6, 8}));
  EXPECT_EQ(p.end(3), 10);
  EXPECT_THROW(partition_uniform(2, 3), st::ValueError);
}

TEST(Partition, BalancedIsOptimal) {
  uint64_t ctr = 0;
  for (int trial = 0; trial < 200; ++trial) {
    int L = 2 + trial % 9, stages = 1 + trial % std::min(L, 5);
    std::vector<double> costs(L), speeds;
    for (auto& c : costs) c = 1 + 9 * st::philox_uniform(5, ctr++);
    if (trial % 3 == 0)
      for (int s = 0; s < stages; ++s) speeds.push_back(0.5 + st::philox_uniform(6, ctr++));
    Partition p = partition_balanced(costs, stages, speeds);
    ASSERT_EQ(static_cast<int>(p.first.size()), stages);
    for (int s = 0; s < stages; ++s) ASSERT_LT(p.begin(s), p.end(s)) << "empty stage";
    EXPECT_NEAR(bottleneck(p, costs, speeds), brute_force(costs, stages, speeds), 1e-9) << "trial " << trial;
  }
}

TEST(Partition, EmbeddingAndHeadCountInTheBalance) {
  // a heavy embedding and head around 4 equal blocks: the heavy ends get stages of their own
  std::vector<double> costs{10, 1, 1, 1, 1, 10};
  Partition p = partition_balanced(costs, 3);
  EXPECT_EQ(p.first, (std::vector<int>{0, 1, 5}));
  // a GPU twice as fast takes twice the work
  Partition q = partition_balanced({1, 1, 1, 1, 1, 1}, 2, {2.0, 1.0});
  EXPECT_EQ(q.first, (std::vector<int>{0, 4}));
}
