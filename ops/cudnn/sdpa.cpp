// Causal scaled-dot-product attention as cuDNN operation graphs, the shape of graph cuDNN's fused
// flash-attention engines recognise (cuDNN ≥ 9, sm80+). Shapes, with S = T × T scores that stay
// virtual (never in memory):
//
//   forward   S = Q·Kᵀ (f32) → ·scale → causal mask (row ≥ col, else −∞) → softmax
//             (max, exp, sum; Stats = max + ln sum, the lse we keep) → P (f16/bf16) → O = P·V
//   backward  Δ = rowsum(dO ∘ O) (f32 scratch), P = exp(S·scale − Stats) masked,
//             dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − Δ) · scale, dK = dSᵀ·Q,
//             dQ = dS·K into an f32 scratch the engine accumulates with atomics, then cast —
//             or, deterministic, dQ = dS·K written once (the engine keeps dP in its workspace).
//
// Kᵀ and Vᵀ are the same strided memory as K and V with the last two strides swapped, so the
// operands are the strided views the flash kernels take (q, k, v inside the fused (B, T, 3C) qkv).
// Grouped-query attention (Hkv < H key/value heads), the graph cuDNN's frontend builds for it: K, V
// are declared with Hkv heads and the products broadcast them over each group's query heads; the
// backward's dK, dV go through (B, H, T, D) intermediates (virtual, in the io type) that a
// reduction sums over each group into dk, dv (B, Hkv, T, D).
// A ring's block (ops/block_attention.h) is the same graph over one query chunk and one key chunk of
// equal length: the diagonal block causal, a past block without the mask; its backward reads the
// query chunk's GLOBAL output and Stats (the merge of every block's), so Δ and P are the whole
// attention's and the block's dq, dk, dv its share of the gradients.
// dq, dk, dv, out are written (=). One plan per (direction, dtype, shape, strides, stream, mask), built
// at first use; shapes cuDNN turns down are remembered too, so the fallback costs one lookup.
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "ops/cuda/sdpa_cudnn.h"
#include "ops/cudnn/graph.h"
#include "tensor/cuda/runtime.h"
#include "tensor/tensor.h"

namespace st::ops::cuda {
namespace {

using namespace st::ops::cudnn;

// uids of the tensors in memory (virtual ones are numbered by the Graph from 1000)
enum : int64_t { kQ = 1, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kDelta, kDQAccum };

struct Key {
  int dir;  // 0 forward, 1 backward, 2 deterministic backward
  DType dt;
  int64_t B, H, Hkv, T, D;
  std::array<int64_t, 24> strides;  // sb, sh, st of up to 8 operands
  int device;
  cudaStream_t stream;
  bool causal;  // false: a ring's full block (no mask)
  auto tie() const { return std::tie(dir, dt, B, H, Hkv, T, D, strides, device, stream, causal); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Entry {
  std::shared_ptr<Plan> plan;  // null: cuDNN turned the shape down
  std::string why;
};

std::mutex g_mu;
std::map<Key, Entry>* g_cache = new std::map<Key, Entry>();  // leaked: outlives statics
std::string g_engine[3], g_last_refusal;  // per Key::dir
std::atomic<int64_t> g_calls{0};

cudnnDataType_t io_type(DType dt) { return dt == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }
Dims strides_of(const AttnOperand& o) { return {o.sb, o.sh, o.st, 1}; }
Dims transposed(const AttnOperand& o) { return {o.sb, o.sh, 1, o.st}; }  // (B, H, D, T) view

std::string version_string() {
  const size_t v = cudnnGetVersion();
  std::ostringstream s;
  s << "cuDNN " << v / 10000 << "." << (v / 100) % 100 << "." << v % 100;
  return s.str();
}

// Why cuDNN cannot take the shape before any graph is built ("" when it may).
std::string precheck(DType dt, int64_t T, int64_t D, std::initializer_list<AttnOperand> ops) {
  if (dt != DType::f16 && dt != DType::bf16) return "dtype is not f16/bf16";
  if (D % 8 != 0 || D > 128) return "head dim not a multiple of 8 up to 128";
  if (cudnnGetVersion() < 90000) return "cuDNN older than 9.0";
  // cuDNN ≤ 9.15's backward needs a padding mask when T is not a multiple of 128.
  if (cudnnGetVersion() <= 91500 && T % 128 != 0) return "T is not a multiple of 128 (cuDNN <= 9.15)";
  for (const AttnOperand& o : ops)
    if ((reinterpret_cast<uintptr_t>(o.ptr) & 15u) != 0 || o.sb % 8 || o.sh % 8 || o.st % 8) return "operand not 16-byte aligned";
  return "";
}

// s (B, H, T, T) → out: s where row ≥ col, −∞ elsewhere
void causal_mask(Graph& g, int64_t s, int64_t out, const Dims& sd) {
  const int64_t row = g.virt(CUDNN_DATA_INT32, sd), col = g.virt(CUDNN_DATA_INT32, sd);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, row, -1, -1, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, s, col, -1, -1, CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.virt(CUDNN_DATA_BOOLEAN, sd);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, -1, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, out, g.scalar(-INFINITY), keep);
}

// A product whose result is per query head (B, H, T, D) into `kv` (B, Hkv, T, D): straight there
// when H = Hkv, else into a virtual full-head tensor that a reduction sums over each group.
template <class Product>
void into_kv_heads(Graph& g, cudnnDataType_t io, const Dims& qd, bool same_heads, Product product, int64_t kv) {
  if (same_heads) return product(kv);
  const int64_t full = g.virt(io, qd);
  product(full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, kv);
}

// q, out (B, H, T, D), k, v (B, Hkv, T, D) strided; Stats (B, H, T, 1) f32
std::shared_ptr<Plan> build_fwd(cudnnHandle_t h, DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                                const AttnOperand& q, const AttnOperand& k, const AttnOperand& v,
                                const AttnOperand& out, bool causal) {
  const cudnnDataType_t io = io_type(dt), f32 = CUDNN_DATA_FLOAT;
  const Dims qd{B, H, T, D}, sd{B, H, T, T}, rd{B, H, T, 1};
  Graph g;
  g.tensor(kQ, io, qd, strides_of(q));
  g.tensor(kK, io, {B, Hkv, D, T}, transposed(k));
  g.tensor(kV, io, {B, Hkv, T, D}, strides_of(v));
  g.tensor(kO, io, qd, strides_of(out));
  g.tensor(kStats, f32, rd, packed_strides(rd));
  const int64_t s = g.virt(f32, sd), s1 = g.virt(f32, sd), s2 = causal ? g.virt(f32, sd) : s1;
  g.matmul(kQ, kK, s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, s1, g.scalar(1.f / std::sqrt(static_cast<float>(D))));
  if (causal) causal_mask(g, s1, s2, sd);
  const int64_t mx = g.virt(f32, rd), s3 = g.virt(f32, sd), e = g.virt(f32, sd);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s2, mx);
  g.pointwise(CUDNN_POINTWISE_SUB, s2, s3, mx);
  g.pointwise(CUDNN_POINTWISE_EXP, s3, e);
  const int64_t sum = g.virt(f32, rd), lg = g.virt(f32, rd);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.pointwise(CUDNN_POINTWISE_LOG, sum, lg);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, kStats, lg);
  const int64_t p = g.virt(io, sd);
  g.pointwise(CUDNN_POINTWISE_DIV, e, p, sum);
  g.matmul(p, kV, kO);
  return g.build(h);
}

// + dout, dq (B, H, T, D), dk, dv (B, Hkv, T, D) strided; Δ (B, H, T, 1) and dQ accumulator
// (B, H, T, D) f32 scratch
std::shared_ptr<Plan> build_bwd(cudnnHandle_t h, DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
                                const AttnOperand& q, const AttnOperand& k, const AttnOperand& v,
                                const AttnOperand& out, const AttnOperand& dout, const AttnOperand& dq,
                                const AttnOperand& dk, const AttnOperand& dv, bool deterministic, bool causal) {
  const cudnnDataType_t io = io_type(dt), f32 = CUDNN_DATA_FLOAT;
  const Dims qd{B, H, T, D}, sd{B, H, T, T}, rd{B, H, T, 1}, kd{B, Hkv, D, T}, kvd{B, Hkv, T, D};
  const Dims sd_t{H * T * T, T * T, 1, T};  // (B, H, T, T) read transposed
  Graph g;
  g.tensor(kQ, io, qd, strides_of(q));
  g.tensor(kK, io, kd, transposed(k));
  g.tensor(kV, io, kd, transposed(v));
  g.tensor(kO, io, qd, strides_of(out));
  g.tensor(kDO, io, qd, strides_of(dout));
  g.tensor(kStats, f32, rd, packed_strides(rd));
  g.tensor(kDQ, io, qd, strides_of(dq));
  g.tensor(kDK, io, kvd, strides_of(dk));
  g.tensor(kDV, io, kvd, strides_of(dv));
  g.tensor(kDelta, f32, rd, packed_strides(rd));
  const int64_t scale = g.scalar(1.f / std::sqrt(static_cast<float>(D)));
  // Δ = rowsum(dO ∘ O)
  const int64_t od = g.virt(f32, qd), rs = g.virt(f32, rd);
  g.pointwise(CUDNN_POINTWISE_MUL, kDO, od, kO);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, od, rs);
  g.pointwise(CUDNN_POINTWISE_MUL, rs, kDelta, g.scalar(1.f));
  // P = exp(Q·Kᵀ·scale − Stats), masked; dV = Pᵀ·dO
  const int64_t s = g.virt(f32, sd), s1 = g.virt(f32, sd), s2 = g.virt(f32, sd), s3 = causal ? g.virt(f32, sd) : s2;
  g.matmul(kQ, kK, s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, s1, scale);
  g.pointwise(CUDNN_POINTWISE_SUB, s1, s2, kStats);
  if (causal) causal_mask(g, s2, s3, sd);
  const int64_t p = g.virt(f32, sd), pt = g.virt(io, sd, sd_t);
  g.pointwise(CUDNN_POINTWISE_EXP, s3, p);
  g.reshape(p, pt);
  into_kv_heads(g, io, qd, H == Hkv, [&](int64_t dst) { g.matmul(pt, kDO, dst); }, kDV);
  // dS = P ∘ (dO·Vᵀ − Δ) · scale; dK = dSᵀ·Q
  const int64_t dp = g.virt(f32, sd), d1 = g.virt(f32, sd), d2 = g.virt(f32, sd), ds = g.virt(f32, sd);
  g.matmul(kDO, kV, dp);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, d1, kDelta);
  g.pointwise(CUDNN_POINTWISE_MUL, d1, d2, p);
  g.pointwise(CUDNN_POINTWISE_MUL, d2, ds, scale);
  const int64_t dst = g.virt(io, sd, sd_t);
  g.reshape(ds, dst);
  into_kv_heads(g, io, qd, H == Hkv, [&](int64_t d) { g.matmul(dst, kQ, d); }, kDK);
  // dQ = dS·K: written once (deterministic), or accumulated in f32, then cast
  const int64_t kr = g.virt(f32, kvd, strides_of(k));
  g.reshape(kK, kr);
  if (deterministic) {
    g.matmul(ds, kr, kDQ);
  } else {
    g.tensor(kDQAccum, f32, qd, packed_strides(qd));
    g.matmul(ds, kr, kDQAccum);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, kDQAccum, kDQ);
  }
  return g.build(h);
}

Key make_key(int dir, DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D,
             std::initializer_list<AttnOperand> ops, cudaStream_t stream, bool causal) {
  Key key{dir, dt, B, H, Hkv, T, D, {}, st::cuda::current_device(), stream, causal};
  size_t i = 0;
  for (const AttnOperand& o : ops) {
    key.strides[i++] = o.sb;
    key.strides[i++] = o.sh;
    key.strides[i++] = o.st;
  }
  return key;
}

const char* dir_name(int dir) { return dir == 0 ? "forward" : dir == 1 ? "backward" : "deterministic backward"; }

void refuse(int dir, const std::string& why) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_last_refusal = std::string(dir_name(dir)) + ": " + why;
}

// The cached plan for `key`, built by `build` at first use; null when cuDNN turned the shape down.
template <class Build>
std::shared_ptr<Plan> plan_for(const Key& key, Build build) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_cache->find(key);
  if (it == g_cache->end()) {
    Entry e;
    try {
      e.plan = build();
    } catch (const CudaError& err) {  // NotSupported, or a descriptor this cuDNN rejects
      e.why = err.what();
    }
    it = g_cache->emplace(key, std::move(e)).first;
    if (it->second.plan) g_engine[key.dir] = it->second.plan->engine();
  }
  if (!it->second.plan) g_last_refusal = std::string(dir_name(key.dir)) + ": " + it->second.why;
  return it->second.plan;
}

}  // namespace

namespace {

bool sdpa_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
              AttnOperand v, AttnOperand out, float* lse, bool causal, cudaStream_t stream,
              const std::function<void()>& before_run) {
  if (const std::string pre = precheck(dt, T, D, {q, k, v, out}); !pre.empty()) {
    refuse(0, pre);
    return false;
  }
  const Key key = make_key(0, dt, B, H, Hkv, T, D, {q, k, v, out}, stream, causal);
  cudnnHandle_t h = handle_for(stream);
  auto plan = plan_for(key, [&] { return build_fwd(h, dt, B, H, Hkv, T, D, q, k, v, out, causal); });
  if (!plan) return false;
  if (before_run) before_run();
  Tensor ws = Tensor::empty({(plan->workspace_bytes() + 3) / 4 + 1}, DType::f32, Device::cuda);
  plan->execute(h, {kQ, kK, kV, kO, kStats}, {q.ptr, k.ptr, v.ptr, out.ptr, lse}, ws.data_ptr());
  ++g_calls;
  return true;
}

bool sdpa_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
              AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq, AttnOperand dk,
              AttnOperand dv, bool deterministic, bool causal, cudaStream_t stream,
              const std::function<void()>& before_run) {
  const int dir = deterministic ? 2 : 1;
  if (const std::string pre = precheck(dt, T, D, {q, k, v, out, dout, dq, dk, dv}); !pre.empty()) {
    refuse(dir, pre);
    return false;
  }
  if (deterministic && deterministic_workspace_bytes(B, H, T) > kDeterministicWorkspaceMax) {
    refuse(dir, "its workspace (B·H·T² 16-bit values, " + std::to_string(deterministic_workspace_bytes(B, H, T) >> 20) +
                    " MiB) is above " + std::to_string(kDeterministicWorkspaceMax >> 20) + " MiB");
    return false;
  }
  const Key key = make_key(dir, dt, B, H, Hkv, T, D, {q, k, v, out, dout, dq, dk, dv}, stream, causal);
  cudnnHandle_t h = handle_for(stream);
  auto plan = plan_for(key, [&] {
    return build_bwd(h, dt, B, H, Hkv, T, D, q, k, v, out, dout, dq, dk, dv, deterministic, causal);
  });
  if (!plan) return false;
  if (before_run) before_run();
  // one scratch block: Δ (B·H·T) | dQ accumulator (B·H·T·D, not when deterministic) | the
  // engine's workspace, each starting on a 256-byte boundary
  auto up = [](int64_t n) { return (n + 63) / 64 * 64; };  // floats
  const int64_t rows = up(B * H * T), acc = deterministic ? 0 : up(B * H * T * D);
  Tensor ws = Tensor::empty({rows + acc + up((plan->workspace_bytes() + 3) / 4 + 1)}, DType::f32, Device::cuda);
  float* base = ws.data<float>();
  std::vector<int64_t> uids{kQ, kK, kV, kO, kDO, kStats, kDQ, kDK, kDV, kDelta};
  std::vector<void*> ptrs{q.ptr, k.ptr, v.ptr, out.ptr, dout.ptr, const_cast<float*>(lse), dq.ptr, dk.ptr, dv.ptr, base};
  if (!deterministic) {
    uids.push_back(kDQAccum);
    ptrs.push_back(base + rows);
  }
  plan->execute(h, uids, ptrs, base + rows + acc);
  ++g_calls;
  return true;
}

}  // namespace

bool cudnn_sdpa_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                    AttnOperand v, AttnOperand out, float* lse, cudaStream_t stream,
                    const std::function<void()>& before_run) {
  return sdpa_fwd(dt, B, H, Hkv, T, D, q, k, v, out, lse, /*causal=*/true, stream, before_run);
}

bool cudnn_sdpa_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                    AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq,
                    AttnOperand dk, AttnOperand dv, bool deterministic, cudaStream_t stream,
                    const std::function<void()>& before_run) {
  return sdpa_bwd(dt, B, H, Hkv, T, D, q, k, v, out, dout, lse, dq, dk, dv, deterministic, /*causal=*/true, stream,
                  before_run);
}

bool cudnn_block_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand out, float* lse, bool causal, cudaStream_t stream) {
  return sdpa_fwd(dt, B, H, Hkv, T, D, q, k, v, out, lse, causal, stream, nullptr);
}

bool cudnn_block_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t T, int64_t D, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq,
                     AttnOperand dk, AttnOperand dv, bool causal, bool deterministic, cudaStream_t stream) {
  return sdpa_bwd(dt, B, H, Hkv, T, D, q, k, v, out, dout, lse, dq, dk, dv, deterministic, causal, stream, nullptr);
}

std::string cudnn_sdpa_status() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::ostringstream s;
  s << version_string();
  for (int dir = 0; dir < 3; ++dir)
    s << (dir ? ", " : ": ") << dir_name(dir) << " " << (g_engine[dir].empty() ? "not used" : g_engine[dir]);
  if (!g_last_refusal.empty()) s << "; last refusal — " << g_last_refusal;
  return s.str();
}

int64_t cudnn_sdpa_calls() { return g_calls.load(); }

}  // namespace st::ops::cuda
