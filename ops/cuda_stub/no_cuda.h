#pragma once
#include "tensor/error.h"

namespace st::ops::cuda {
[[noreturn]] inline void no_cuda(const char* op) {
  ST_THROW(DeviceError, op << ": this shardtrain was built without CUDA (CPU-only build)");
}
}  // namespace st::ops::cuda
