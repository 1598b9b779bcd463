// Device listing of a CUDA build: runtime/driver versions and every visible device.
#include <cuda_runtime.h>

#include <cstdio>
#include <thread>

#include "launch/build_info.h"
#include "tensor/storage.h"

namespace st::launch {

std::string describe_devices() {
  std::string out = "cpu: " + std::to_string(std::thread::hardware_concurrency()) + " hardware threads\n";
  int runtime_v = 0, driver_v = 0, n = 0;
  cudaRuntimeGetVersion(&runtime_v);
  // 0 when no driver is installed (libcuda missing): say that, not "driver 0.0" and CUDA's
  // "driver version is insufficient"
  const bool driver = cudaDriverGetVersion(&driver_v) == cudaSuccess && driver_v > 0;
  char line[512];
  if (!driver) {
    cudaGetLastError();
    std::snprintf(line, sizeof(line), "cuda: runtime %d.%d; no NVIDIA driver: none is installed, so no GPU is usable (training runs on the CPU)\n",
                  runtime_v / 1000, (runtime_v % 1000) / 10);
    return out + line;
  }
  std::snprintf(line, sizeof(line), "cuda: runtime %d.%d, driver %d.%d\n", runtime_v / 1000, (runtime_v % 1000) / 10,
                driver_v / 1000, (driver_v % 1000) / 10);
  out += line;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || !st::cuda::available()) {
    out += std::string("cuda: no usable device (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none visible") + ")\n";
    return out;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    std::snprintf(line, sizeof(line), "cuda:%d %.200s, %.1f GiB, compute capability %d.%d, %d SMs\n", d, p.name,
                  static_cast<double>(p.totalGlobalMem) / (1ull << 30), p.major, p.minor, p.multiProcessorCount);
    out += line;
  }
  return out;
}

std::string cuda_unusable() {
  int driver_v = 0, n = 0;
  if (cudaDriverGetVersion(&driver_v) != cudaSuccess || driver_v <= 0) {
    cudaGetLastError();
    return "no NVIDIA driver: none is installed, so no GPU is usable (shardtrain info lists the devices)";
  }
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0 || !st::cuda::available()) {
    cudaGetLastError();
    return std::string("no usable device (") + (e != cudaSuccess ? cudaGetErrorString(e) : "none visible") +
           "; shardtrain info lists the devices)";
  }
  return "";
}

}  // namespace st::launch
