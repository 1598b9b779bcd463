// The peak table and the device queries (runtime/observe/device_capacity.h says where each figure
// comes from).
#include "runtime/observe/device_capacity.h"

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

namespace st::runtime {

std::optional<double> dense_flops_per_sm_clock(int major, int minor, bool geforce, MatrixMath math) {
  struct Row {
    int major, minor;
    double f16, tf32, f32;  // full rate (data-centre parts)
    bool geforce_half;      // GeForce parts: f16 / TF32 with f32 accumulation at half rate
  };
  static constexpr Row kTable[] = {
      {8, 0, 2048, 1024, 128, false},
      {8, 6, 1024, 512, 256, true},
      {8, 9, 1024, 512, 256, true},
      {9, 0, 4096, 2048, 256, false},
  };
  for (const Row& r : kTable) {
    if (r.major != major || r.minor != minor) continue;
    const double half = geforce && r.geforce_half ? 0.5 : 1.0;
    switch (math) {
      case MatrixMath::f16: return r.f16 * half;
      case MatrixMath::tf32: return r.tf32 * half;
      case MatrixMath::f32: return r.f32;
    }
  }
  return std::nullopt;
}

MatrixMath matrix_math(DType compute, bool tf32) {
  if (compute == DType::f16 || compute == DType::bf16) return MatrixMath::f16;
  return tf32 ? MatrixMath::tf32 : MatrixMath::f32;
}

std::optional<double> DeviceCapacity::utilization(double flops_per_s) const {
  if (!peak_flops || *peak_flops <= 0) return std::nullopt;
  return flops_per_s / *peak_flops;
}

DeviceCapacity gpu_capacity(const cuda::DeviceProperties& p, MatrixMath math) {
  DeviceCapacity c;
  c.memory_bytes = static_cast<int64_t>(p.total_bytes);
  const bool geforce = p.name.find("GeForce") != std::string::npos;
  if (auto per = dense_flops_per_sm_clock(p.major, p.minor, geforce, math))
    c.peak_flops = *per * p.sm_count * static_cast<double>(p.clock_khz) * 1e3;
  return c;
}

int64_t cpu_memory_total() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string key;
    int64_t kib = 0;
    if (is >> key >> kib && key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

DeviceCapacity device_capacity(Device device, MatrixMath math) {
  static std::mutex mu;
  static std::map<std::pair<Device, MatrixMath>, DeviceCapacity> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find({device, math});
  if (it != known.end()) return it->second;
  DeviceCapacity c;
  if (device == Device::cuda) {
    if (auto p = cuda::device_properties()) c = gpu_capacity(*p, math);
  } else {
    c.memory_bytes = cpu_memory_total();
  }
  known[{device, math}] = c;
  return c;
}

}  // namespace st::runtime
