// Which kernels run causal attention on CUDA, as a process setting of ops/ (launch/ sets it from
// SHARDTRAIN_ATTENTION: docs/launch.md, "GPU settings"; tests and benchmarks set it directly). The CPU
// path has one kernel and ignores it. The backends (ops/cuda/sdpa_cudnn.h says what each does):
//   deterministic  (default) cuDNN's fused attention with its deterministic backward where cuDNN
//                  takes the shape, else our flash kernels; bitwise reproducible either way
//   fast           cuDNN with its default backward (dQ by float atomics), else flash
//   cudnn          as fast, but a shape cuDNN declines is a DeviceError, not a fallback
//   flash          always our kernels (ops/cuda/flash_attention.cu)
//
// The deterministic backend's cuDNN backward keeps dP, B·H·T² 16-bit values, in its workspace: 1.5
// GiB for GPT-2 at B 64, T 1024, but 64 GiB for one Llama-1B sequence of T 32768. Above
// kDeterministicWorkspaceMax it takes the flash backward instead (also bitwise reproducible; its
// scratch is O(T)), so a long sequence does not fail for memory the plan never counted.
#pragma once
#include <cstdint>
#include <string>

namespace st::ops {

inline constexpr int64_t kDeterministicWorkspaceMax = int64_t{2} << 30;  // bytes
// the dP a deterministic cuDNN backward keeps: B·H·T² 16-bit values, in bytes
inline int64_t deterministic_workspace_bytes(int64_t B, int64_t H, int64_t T) { return B * H * T * T * 2; }

enum class AttentionBackend { Deterministic, Fast, Cudnn, Flash };

AttentionBackend attention_backend();
void set_attention_backend(AttentionBackend b);
// "deterministic" | "fast" | "cudnn" | "flash" → the backend; ValueError naming `where` otherwise
AttentionBackend parse_attention_backend(const std::string& name, const std::string& where);
std::string to_string(AttentionBackend b);

}  // namespace st::ops
