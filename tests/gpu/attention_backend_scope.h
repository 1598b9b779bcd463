// Shared by the GPU attention tests: run a body under one attention backend (ops/attention_backend.h)
// and restore the one before, also when the body throws; and whether cuDNN's fused attention was
// built (a test of cuDNN's path skips, naming why, where it was not).
#pragma once
#include <string>

#include "ops/attention_backend.h"
#include "ops/cuda/sdpa_cudnn.h"

namespace st::test {

template <class F>
void with_backend(ops::AttentionBackend b, F f) {
  const ops::AttentionBackend before = ops::attention_backend();
  ops::set_attention_backend(b);
  try {
    f();
  } catch (...) {
    ops::set_attention_backend(before);
    throw;
  }
  ops::set_attention_backend(before);
}

inline bool cudnn_built() { return ops::cuda::cudnn_sdpa_status().rfind("cuDNN not built", 0) != 0; }

}  // namespace st::test
