// What the CUDA attention kernels (flash, CUDA-core, cuDNN) are handed: strided operands, so that
// q, k, v are read in place inside a packed projection and out / dq, dk, dv written in place, and the
// rotary embedding they apply to q and k as they load them.
#pragma once
#include <cstdint>

namespace st::ops::cuda {

// Element (b, h, t, d) of an operand lives at ptr + b·sb + h·sh + t·st + d (in elements; d
// contiguous). Key / value operands have Hkv heads, query / output ones H (grouped-query
// attention: query head h reads key/value head h / (H/Hkv)).
struct AttnOperand {
  void* ptr = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
};

// Rotary embedding (ops/rope.h) as the kernels apply it to q and k while loading them: row t turns
// by the angles of position offset + t. cos, sin (P, D/2) f32 on the device: the copy of the host
// tables (RopeTable::cos(Device::cuda)), so the roped values equal the CPU's. cos == nullptr: none.
struct AttnRope {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t offset = 0;
  bool on() const { return cos != nullptr; }
};

}  // namespace st::ops::cuda
