#include "runtime/observe/memory_report.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tensor/tensor.h"

namespace st::runtime {
namespace {
constexpr int kFields = 6;
}  // namespace

int64_t process_peak_rss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) {
      long long kib = -1;
      if (std::sscanf(line.c_str() + 6, "%lld", &kib) == 1) return kib * 1024;
    }
  return -1;
}

std::vector<RankMemory> gather_rank_memory(const RankMemory& mine, comm::Communicator* world) {
  if (!world || world->size() == 1) return {mine};
  const std::vector<int64_t> v{mine.params, mine.grads, mine.optim, mine.act_peak, mine.peak, mine.rss_peak};
  Tensor all = Tensor::empty({static_cast<int64_t>(world->size()) * kFields}, DType::i64);  // (world · 6)
  world->all_gather(Tensor::from_vector(v, {kFields}), all)->wait();
  const int64_t* p = all.data<int64_t>();
  std::vector<RankMemory> out(static_cast<size_t>(world->size()));
  for (size_t r = 0; r < out.size(); ++r, p += kFields) out[r] = {p[0], p[1], p[2], p[3], p[4], p[5]};
  return out;
}

std::string memory_table(const std::vector<RankMemory>& ranks) {
  auto mib = [](int64_t b) {
    char buf[32];
    if (b < 0) return std::string("-");
    std::snprintf(buf, sizeof buf, "%.1f", static_cast<double>(b) / (1 << 20));
    return std::string(buf);
  };
  std::ostringstream o;
  char row[160];
  std::snprintf(row, sizeof row, "%-5s %10s %10s %10s %10s %10s %10s\n", "rank", "params", "grads", "optim",
                "act peak", "peak", "rss peak");
  o << "memory per rank (MiB):\n" << row;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemory& m = ranks[r];
    std::snprintf(row, sizeof row, "%-5zu %10s %10s %10s %10s %10s %10s\n", r, mib(m.params).c_str(),
                  mib(m.grads).c_str(), mib(m.optim).c_str(), mib(m.act_peak).c_str(), mib(m.peak).c_str(),
                  mib(m.rss_peak).c_str());
    o << row;
  }
  return o.str();
}

}  // namespace st::runtime
