#include "runtime/common/partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "tensor/error.h"

namespace st::runtime {
namespace {
void check(int layers, int stages) {
  if (stages < 1 || layers < stages)
    ST_THROW(ValueError, "partition: cannot cut " << layers << " layers into " << stages
                                                  << " stages (each stage needs at least one layer)");
}
}  // namespace

std::string Partition::describe(const std::vector<double>& costs) const {
  std::ostringstream o;
  for (size_t s = 0; s < first.size(); ++s) {
    double c = 0;
    for (int l = begin(static_cast<int>(s)); l < end(static_cast<int>(s)); ++l) c += costs.empty() ? 1 : costs[l];
    o << (s ? " | " : "") << "stage " << s << ": layers " << begin(static_cast<int>(s)) << "-"
      << end(static_cast<int>(s)) - 1 << " (cost " << c << ")";
  }
  return o.str();
}

Partition partition_uniform(int layers, int stages) {
  check(layers, stages);
  Partition p;
  p.layers = layers;
  int at = 0;
  for (int s = 0; s < stages; ++s) {
    p.first.push_back(at);
    at += layers / stages + (s < layers % stages ? 1 : 0);
  }
  return p;
}

Partition partition_balanced(const std::vector<double>& costs, int stages, const std::vector<double>& speeds) {
  const int L = static_cast<int>(costs.size());
  check(L, stages);
  if (!speeds.empty() && static_cast<int>(speeds.size()) != stages)
    ST_THROW(ValueError, "partition: " << speeds.size() << " stage speeds for " << stages << " stages");
  for (double c : costs)
    if (c < 0) ST_THROW(ValueError, "partition: negative layer cost " << c);
  for (double v : speeds)
    if (v <= 0) ST_THROW(ValueError, "partition: stage speed must be positive, got " << v);
  auto speed = [&](int s) { return speeds.empty() ? 1.0 : speeds[s]; };
  std::vector<double> prefix(L + 1, 0);
  for (int i = 0; i < L; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: minimal bottleneck placing layers [0, i) on stages [0, s); cut[s][i]: start of stage s−1
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = s; i <= L - (stages - s); ++i)
      for (int j = s - 1; j < i; ++j) {
        double v = std::max(best[s - 1][j], (prefix[i] - prefix[j]) / speed(s - 1));
        if (v < best[s][i] - 1e-12 * std::max(1.0, std::fabs(v))) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
  Partition p;
  p.layers = L;
  p.first.assign(stages, 0);
  int i = L;
  for (int s = stages; s >= 1; --s) {
    p.first[s - 1] = cut[s][i];
    i = cut[s][i];
  }
  return p;
}

double bottleneck(const Partition& p, const std::vector<double>& costs, const std::vector<double>& speeds) {
  double worst = 0;
  for (int s = 0; s < static_cast<int>(p.first.size()); ++s) {
    double c = 0;
    for (int l = p.begin(s); l < p.end(s); ++l) c += costs[l];
    worst = std::max(worst, c / (speeds.empty() ? 1.0 : speeds[s]));
  }
  return worst;
}

}  // namespace st::runtime
