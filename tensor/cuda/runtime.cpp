// Current stream (per thread), device guard and device queries. The default stream of each
// device is a non-blocking stream created at first use, so that no op ever lands on the legacy
// default stream (which would serialise against every other stream).
#include "tensor/cuda/runtime.h"

#include <mutex>
#include <vector>

#include "tensor/storage.h"

namespace st::cuda {
namespace {
thread_local cudaStream_t t_stream = nullptr;
thread_local bool t_stream_set = false;

cudaStream_t default_stream(int device) {
  static std::mutex mu;
  static std::vector<cudaStream_t>* streams = new std::vector<cudaStream_t>();  // leaked: outlives statics
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<int>(streams->size()) <= device) streams->resize(device + 1, nullptr);
  cudaStream_t& s = (*streams)[device];
  if (!s) CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}
}  // namespace

cudaStream_t current_stream() {
  if (t_stream_set) return t_stream;
  return default_stream(current_device());
}

void set_current_stream(cudaStream_t s) {
  t_stream = s;
  t_stream_set = true;
}

StreamGuard::StreamGuard(cudaStream_t s) : prev_(current_stream()) { set_current_stream(s); }
StreamGuard::~StreamGuard() { set_current_stream(prev_); }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

int current_device() {
  int d = 0;
  CHECK_CUDA(cudaGetDevice(&d));
  return d;
}

void set_device(int d) { CHECK_CUDA(cudaSetDevice(d)); }

DeviceGuard::DeviceGuard(int device) : prev_(current_device()) {
  if (device != prev_) set_device(device);
}
DeviceGuard::~DeviceGuard() {
  int now = 0;
  if (cudaGetDevice(&now) == cudaSuccess && now != prev_) cudaSetDevice(prev_);
}

void synchronize() { CHECK_CUDA(cudaStreamSynchronize(current_stream())); }

bool available() { return device_count() > 0; }

std::optional<DeviceProperties> device_properties() {
  if (!available()) return std::nullopt;
  const int d = current_device();
  cudaDeviceProp p{};
  int clock = 0;
  if (cudaGetDeviceProperties(&p, d) != cudaSuccess || cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, d) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return DeviceProperties{p.name, p.major, p.minor, p.multiProcessorCount, clock, p.totalGlobalMem};
}

}  // namespace st::cuda
