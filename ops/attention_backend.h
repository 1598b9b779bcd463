// Which kernels run causal attention on CUDA, as a process setting of ops/ (launch/ sets it from
// ST_ATTENTION: docs/launch.md, "GPU settings"; tests and benchmarks set it directly). The CPU
// path has one kernel and ignores it. The backends (ops/cuda/sdpa_cudnn.h says what each does):
//   deterministic  (default) cuDNN's fused attention with its deterministic backward where cuDNN
//                  takes the shape, else our flash kernels; bitwise reproducible either way
//   fast           cuDNN with its default backward (dQ by float atomics), else flash
//   cudnn          as fast, but a shape cuDNN declines is a DeviceError, not a fallback
//   flash          always our kernels (ops/cuda/flash_attention.cu)
#pragma once
#include <string>

namespace st::ops {

enum class AttentionBackend { Deterministic, Fast, Cudnn, Flash };

AttentionBackend attention_backend();
void set_attention_backend(AttentionBackend b);
// "deterministic" | "fast" | "cudnn" | "flash" → the backend; ValueError naming `where` otherwise
AttentionBackend parse_attention_backend(const std::string& name, const std::string& where);
std::string to_string(AttentionBackend b);

}  // namespace st::ops
