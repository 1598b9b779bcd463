// One (b, h) slice of CPU causal attention on contiguous f32 (T, D) matrices, shared by the 4-d op
// (ops/cpu/attention.cpp) and the packed grouped-query op (ops/cpu/attention_qkv.cpp), so that the
// two compute the same bits for the same head:
//   fwd  S = Q·Kᵀ/√D (T, T) by sgemm (ops/cpu/sgemm.h), a masked row softmax in f32 (its
//        log-sum-exp saved), O = P·V;
//   bwd  P rebuilt from lse, dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)),
//        dQ = dS·K/√D, dK = dSᵀ·Q/√D.
// Matrices are row-major; S(t, s) is S[t·T + s].
#pragma once
#include <cstdint>

namespace st::ops::cpu {

// Q, K, V (T, D) → O (T, D), lse (T) (written =); S (T, T) scratch
void attention_head_fwd(const float* Q, const float* K, const float* V, int64_t T, int64_t D, float* S, float* O,
                        float* lse);
// Q, K, V, dO (T, D), lse (T) → dQ (T, D) (=) and dK, dV (T, D): = , or += when accumulate_kv (the
// query heads of one key/value group add up in head order, each product's blocks in ascending
// order: ops/cpu/sgemm.h); P, dP (T, T) scratch
void attention_head_bwd(const float* Q, const float* K, const float* V, const float* dO, const float* lse, int64_t T,
                        int64_t D, float* P, float* dP, float* dQ, float* dK, float* dV, bool accumulate_kv);

}  // namespace st::ops::cpu
