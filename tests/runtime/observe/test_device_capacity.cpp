// runtime/observe/device_capacity: the peak table reproduces NVIDIA's published dense peaks from
// each product's SMs and boost clock (the whitepapers the header cites), GeForce parts count half
// the f16 rate, an unlisted architecture and the CPU have no peak (MFU null), the CPU's memory is
// MemTotal; the step line shows memory as a fraction of the device and MFU only with a peak.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "runtime/observe/device_capacity.h"
#include "runtime/observe/metrics.h"

using namespace st;
using namespace st::runtime;

namespace {
double peak(const std::string& name, int major, int minor, int sms, double mhz, MatrixMath math) {
  cuda::DeviceProperties p{name, major, minor, sms, static_cast<int64_t>(mhz * 1000), size_t{80} << 30};
  auto c = gpu_capacity(p, math);
  EXPECT_TRUE(c.peak_flops.has_value()) << name;
  EXPECT_EQ(c.memory_bytes, int64_t{80} << 30);
  return c.peak_flops.value_or(0);
}
}  // namespace

TEST(DeviceCapacity, TableGivesThePublishedPeaks) {
  // NVIDIA's figures are rounded to 3-4 digits (L40S's 362 TF is 1.1% under the 1024 per SM at
  // the 2.52 GHz it lists), so 1.5% relative
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 0.015 * want); };
  near(peak("NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410, MatrixMath::f16), 312e12);
  near(peak("NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410, MatrixMath::tf32), 156e12);
  near(peak("NVIDIA A100-SXM4-80GB", 8, 0, 108, 1410, MatrixMath::f32), 19.5e12);
  near(peak("NVIDIA A40", 8, 6, 84, 1740, MatrixMath::f16), 149.7e12);
  near(peak("NVIDIA A40", 8, 6, 84, 1740, MatrixMath::f32), 37.4e12);
  near(peak("NVIDIA GeForce RTX 3090", 8, 6, 82, 1695, MatrixMath::f16), 71e12);
  near(peak("NVIDIA L40S", 8, 9, 142, 2520, MatrixMath::f16), 362e12);
  near(peak("NVIDIA GeForce RTX 4090", 8, 9, 128, 2520, MatrixMath::f16), 165.2e12);
  near(peak("NVIDIA GeForce RTX 4090", 8, 9, 128, 2520, MatrixMath::f32), 82.6e12);
  near(peak("NVIDIA H100 80GB HBM3", 9, 0, 132, 1830, MatrixMath::f16), 989.4e12);
  near(peak("NVIDIA H100 80GB HBM3", 9, 0, 132, 1830, MatrixMath::tf32), 494.7e12);
  near(peak("NVIDIA H100 80GB HBM3", 9, 0, 132, 1980, MatrixMath::f32), 66.9e12);
  // an H200 reports its 1.98 GHz maximum clock: the peak is above NVIDIA's 989 TF (MFU errs low)
  EXPECT_DOUBLE_EQ(peak("NVIDIA H200", 9, 0, 132, 1980, MatrixMath::f16), 132 * 4096 * 1.98e9);
}

TEST(DeviceCapacity, UnknownArchitectureAndCpuHaveNoPeak) {
  EXPECT_FALSE(dense_flops_per_sm_clock(7, 5, false, MatrixMath::f16).has_value());
  EXPECT_FALSE(dense_flops_per_sm_clock(10, 0, false, MatrixMath::f16).has_value());
  cuda::DeviceProperties t4{"Tesla T4", 7, 5, 40, 1590000, size_t{16} << 30};
  const DeviceCapacity c = gpu_capacity(t4, MatrixMath::f16);
  EXPECT_FALSE(c.peak_flops.has_value());
  EXPECT_FALSE(c.utilization(1e12).has_value());
  EXPECT_EQ(c.memory_bytes, int64_t{16} << 30);
  const DeviceCapacity cpu = device_capacity(Device::cpu, MatrixMath::f32);
  EXPECT_FALSE(cpu.peak_flops.has_value());
  // MemTotal is the kernel's totalram, which sysconf reports as pages too
  EXPECT_EQ(cpu.memory_bytes, static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(cpu.memory_bytes, cpu_memory_total());
}

TEST(DeviceCapacity, MatrixMathFollowsTheComputeDtypeAndTf32) {
  EXPECT_EQ(matrix_math(DType::f16, false), MatrixMath::f16);
  EXPECT_EQ(matrix_math(DType::bf16, true), MatrixMath::f16);  // --tf32 changes only f32 products
  EXPECT_EQ(matrix_math(DType::f32, false), MatrixMath::f32);
  EXPECT_EQ(matrix_math(DType::f32, true), MatrixMath::tf32);
}

TEST(DeviceCapacity, StepLineShowsMemoryFractionAndMfuOnlyWithAPeak) {
  StepMetrics m;
  m.step = 3, m.loss = 2.0, m.mem_bytes = int64_t{3} << 30, m.mem_total_bytes = int64_t{12} << 30;
  std::string line = m.line(10);
  EXPECT_NE(line.find("mem 3.0 GiB (25.0% of 12.0 GiB)"), std::string::npos) << line;
  EXPECT_EQ(line.find("mfu"), std::string::npos) << line;
  EXPECT_TRUE(m.to_json()["mfu"].is_null());
  EXPECT_EQ(m.to_json()["mem_total_bytes"].get<int64_t>(), int64_t{12} << 30);
  m.mfu = 0.412;
  line = m.line(10);
  EXPECT_NE(line.find("mfu 41.2%"), std::string::npos) << line;
  EXPECT_DOUBLE_EQ(m.to_json()["mfu"].get<double>(), 0.412);
  m.mem_total_bytes = 0;  // unknown: no fraction
  EXPECT_EQ(m.line(10).find("% of"), std::string::npos);
}
