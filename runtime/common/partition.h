// Stage partitioner: cuts an ordered list of layers into `stages` contiguous pieces.
//   uniform — equal layer counts (earlier stages take the remainder)
//   params  — balances parameter bytes
//   profile — balances measured forward+backward time; with per-stage speeds (GPUs of unequal
//             speed) it minimises max_s cost_s / speed_s
// The weighted split is exact: dynamic programming over the cut points minimises the slowest
// stage (ties broken towards earlier cuts). Embedding and head are layers like any other, so
// they count in the balance.
#pragma once
#include <string>
#include <vector>

#include "runtime/common/enum_names.h"

namespace st::runtime {

enum class PartitionKind { uniform, params, profile };
template <>
struct EnumNames<PartitionKind> {
  static constexpr std::array<EnumName<PartitionKind>, 3> table{
      {{PartitionKind::uniform, "uniform"}, {PartitionKind::params, "params"}, {PartitionKind::profile, "profile"}}};
};

struct Partition {
  std::vector<int> first;  // first layer of each stage; stage s holds [first[s], first[s+1])
  int layers = 0;
  int begin(int stage) const { return first[stage]; }
  int end(int stage) const { return stage + 1 < static_cast<int>(first.size()) ? first[stage + 1] : layers; }
  std::string describe(const std::vector<double>& costs) const;  // "stage 0: layers 0-3 (cost 1.2e6) | ..."
};

Partition partition_uniform(int layers, int stages);
// costs: one per layer (≥ 0); speeds: one per stage (> 0), empty = all equal.
Partition partition_balanced(const std::vector<double>& costs, int stages, const std::vector<double>& speeds = {});
// Slowest stage's cost / speed for a given partition.
double bottleneck(const Partition& p, const std::vector<double>& costs, const std::vector<double>& speeds = {});

}  // namespace st::runtime
