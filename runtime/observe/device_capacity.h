// What the device a rank computes on can do, for the step line: the dense peak FLOP/s that MFU
// divides by, and the memory the step's peak is a fraction of.
//
// Peak = SMs × the SMs' peak clock (cudaDevAttrClockRate) × dense FLOPs per SM per clock for the
// compute capability and the math the matrix products use (f16/bf16 tensor cores; TF32 tensor
// cores for f32 with --tf32 1; else plain f32 FMA). The per-SM figures are NVIDIA's
// product peaks divided by SMs × boost clock, from the architecture whitepapers:
//   sm_80  A100 (2020, table 1): 312 TF f16 = 108 SMs × 1.41 GHz × 2048; TF32 1024; f32 128
//   sm_86  GA102 (2021, appendix A): A40 149.7 TF f16 = 84 × 1.74 GHz × 1024; TF32 512; f32 256;
//          GeForce RTX 30 parts run f16 / TF32 with f32 accumulation at half that (3090: 71 TF)
//   sm_89  Ada (2023, appendix A): L40S 362 TF f16 ≈ 142 × 2.52 GHz × 1024; TF32 512; f32 256;
//          GeForce RTX 40 at half (4090: 165 TF f16 with f32 accumulation)
//   sm_90  H100 (2022, table 2): 989 TF f16 = 132 × 1.83 GHz × 4096; TF32 2048; f32 256 (67 TF)
// Our products always accumulate in f32, so a GeForce part (its name says "GeForce") counts the
// half rate. The clock CUDA reports is the maximum boost (H100/H200 SXM: 1.98 GHz), so the peak
// is the most the device could do (H200: 1070 TF f16, above the 989 NVIDIA quotes at 1.83 GHz)
// and MFU errs low, never high. Another architecture has no peak: MFU is not shown (null). On
// the CPU MFU is not shown either (no peak worth the name), and memory is of MemTotal.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "tensor/dtype.h"
#include "tensor/storage.h"

namespace st::runtime {

enum class MatrixMath { f16, tf32, f32 };  // f16 covers bf16 (the same rate on every table entry)

// Dense FLOPs per SM per clock; nullopt for a compute capability not in the table.
std::optional<double> dense_flops_per_sm_clock(int major, int minor, bool geforce, MatrixMath math);
// The math of a run's matrix products: f16/bf16 compute, or f32 (TF32 with --tf32 1).
MatrixMath matrix_math(DType compute, bool tf32);

struct DeviceCapacity {
  std::optional<double> peak_flops;  // dense FLOP/s; nullopt: unknown (CPU, unlisted GPU)
  int64_t memory_bytes = 0;          // GPU: the device's memory; CPU: MemTotal; 0: unknown
  // flops / peak, or nullopt without a peak
  std::optional<double> utilization(double flops_per_s) const;
};

// From a GPU's properties.
DeviceCapacity gpu_capacity(const cuda::DeviceProperties& p, MatrixMath math);
// The device this process computes on (the current CUDA device for Device::cuda), computed once
// per (device, math).
DeviceCapacity device_capacity(Device device, MatrixMath math);
// MemTotal of /proc/meminfo in bytes (0 when it cannot be read).
int64_t cpu_memory_total();

}  // namespace st::runtime
