// Causal flash attention for f16/bf16, head dim 64, on mma.sync m16n8k16 tensor-core instructions
// with f32 accumulation. Blocks of 4 warps own 64 rows, 16 per warp (the forward: 128 rows, 32 per
// warp); 64-row tiles of the other operands stream through shared memory with cp.async, double
// buffered, in a XOR-swizzled layout (ops/cuda/flash_tiles.cuh) so that ldmatrix reads are
// conflict-free. Accumulators and the probabilities stay in registers: the m16n8 f32 accumulator layout of
// S = Q·Kᵀ, rounded to pairs of 16-bit values, is the A-operand layout of the next product P·V.
//   fwd:   per query block, over key tiles s ≤ t: S, online softmax (running max m and sum l per
//          row, in base-2 exponent), O += P·V; out = O / l, lse = m/8 + ln l. Never writes T×T.
//   dq:    per query block, over key tiles: P = exp(S − lse), dP = dO·Vᵀ, dS = P ∘ (dP − Δ),
//          dQ += dS·K.
//   dkdv:  per key block of a key/value head, over the query heads of its group and their query
//          tiles t ≥ s: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q (the group's heads summed in
//          registers, in head order: deterministic).
// Grouped-query attention: query head h reads key/value head h / rep (rep = H / Hkv). Rotary
// embedding (kernels instantiated with Rope): every Q and K tile is rotated in shared memory once it
// has landed (one extra barrier per tile), and the dQ, dK accumulators are turned back in registers
// before they are stored (ops/cuda/flash_tiles.cuh); the instantiations without rope are the kernels
// of before, unchanged.
// Ring blocks (ops/block_attention.h, kernels instantiated with Full / Acc, never with rope): Full
// drops the causal mask (every key of the block precedes every query: all key tiles, keys past T
// masked), Acc adds dQ into an f32 (B, H, T, 64) accumulator instead of writing it; the causal
// instantiations without them are the kernels of before.
#include "ops/cuda/flash_tiles.cuh"

namespace st::ops::cuda {
namespace {

using namespace flash;

template <class T>
struct Args {
  Operand<const T> q, k, v, o, dout;
  Operand<T> out, dq, dk, dv;
  const float* lse_in;
  const float* delta;
  float* delta_out;  // the Δ kernel's output (= delta)
  float* lse;
  float* dq_acc;            // Acc: dq (B, H, T, 64) f32 contiguous, added to
  int64_t H, Hkv, rep, Tn;  // rep = H / Hkv query heads per key/value head
  AttnRope rope;
};

// kernels

// Forward: blocks of 4 warps own 64·MT query rows, each warp 16·MT (MT 16-row tiles, so every K/V
// fragment read from shared memory feeds MT products); key tiles of 64. MT = 2 (242 registers,
// 2 blocks per SM) measured 0.159 ms against 0.173 ms for MT = 1 at B 16 H 12 T 1024 on the H200;
// the same change made the dQ kernel slower (0.244 against 0.200 ms: registers spilled), so the
// backward keeps 16 rows per warp.
constexpr int kFwdMT = 2;

template <class T, int MT, bool Rope, bool Full = false>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(Args<T> a) {
  constexpr int kFwdRows = 64 * MT;
  __shared__ alignas(16) T sQ[kFwdRows * kD], sK[2][kTileElems], sV[2][kTileElems];  // 48 KB at MT = 2
  const int qb = gridDim.x - 1 - blockIdx.x;  // longest rows first
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hk = h / a.rep, Tn = a.Tn, q0 = int64_t(qb) * kFwdRows;
  const T *q = a.q.at(b, h), *k = a.k.at(b, hk), *v = a.v.at(b, hk);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  const int64_t w0 = q0 + warp * 16 * MT;  // the warp's first query row
  // key tiles up to the one holding the block's last row (and below T)
  // (Full: every key tile)
  const int last = static_cast<int>(((Full || q0 + kFwdRows >= Tn ? Tn : q0 + kFwdRows) - 1) / kTile);
  load_tile<T, kFwdRows>(sQ, q, a.q.st, q0, Tn);
  load_tile(sK[0], k, a.k.st, 0, Tn);
  load_tile(sV[0], v, a.v.st, 0, Tn);
  cp_async_commit();

  uint32_t qf[MT][4][4];
  float o[MT][8][4] = {}, m[MT][2], l[MT][2] = {};
#pragma unroll
  for (int i = 0; i < MT; ++i) m[i][0] = m[i][1] = -INFINITY;
  const float sl2 = kScale * kLog2e;
  for (int kt = 0; kt <= last; ++kt) {
    const int buf = kt & 1;
    if (kt < last) {
      load_tile(sK[buf ^ 1], k, a.k.st, int64_t(kt + 1) * kTile, Tn);
      load_tile(sV[buf ^ 1], v, a.v.st, int64_t(kt + 1) * kTile, Tn);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (Rope) {
      if (kt == 0) rope_tile<T, kFwdRows>(sQ, q0, Tn, a.rope);
      rope_tile<T, kTile>(sK[buf], int64_t(kt) * kTile, Tn, a.rope);
      __syncthreads();
    }
    if (kt == 0)
#pragma unroll
      for (int i = 0; i < MT; ++i) load_a(qf[i], sQ, warp * 16 * MT + 16 * i);

    const int64_t k0 = int64_t(kt) * kTile;
    if (Full || k0 <= w0 + 16 * MT - 1) {  // else every key of the tile is after every row of the warp
      float s[MT][8][4] = {};
      mma_abt<MT, T>(s, qf, sK[buf]);
      if constexpr (Full) {
        if (k0 + kTile > Tn)  // the last tile: mask keys ≥ T (zero-filled, they would score 0)
#pragma unroll
          for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                if (k0 + j * 8 + 2 * tq + (e & 1) >= Tn) s[i][j][e] = -INFINITY;
      } else if (k0 + kTile - 1 > w0)  // some key after some row: mask key > row
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (k0 + j * 8 + 2 * tq + (e & 1) > w0 + 16 * i + gr + 8 * (e >> 1)) s[i][j][e] = -INFINITY;
      uint32_t pf[MT][4][4];
#pragma unroll
      for (int i = 0; i < MT; ++i) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float mx = m[i][r];
#pragma unroll
          for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          // key 0 ≤ every row is in tile 0, so mx is finite from the first tile on
          const float alpha = exp2f((m[i][r] - mx) * sl2), off = mx * sl2;  // m = −inf at first: alpha 0
          m[i][r] = mx;
          l[i][r] *= alpha;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            o[i][j][2 * r] *= alpha;
            o[i][j][2 * r + 1] *= alpha;
            s[i][j][2 * r] = exp2f(fmaf(s[i][j][2 * r], sl2, -off));
            s[i][j][2 * r + 1] = exp2f(fmaf(s[i][j][2 * r + 1], sl2, -off));
            l[i][r] += s[i][j][2 * r] + s[i][j][2 * r + 1];
          }
        }
        to_a<T>(pf[i], s[i]);
      }
      mma_ab<MT, T>(o, pf, sV[buf]);
    }
    __syncthreads();  // the next iteration's prefetch overwrites this buffer
  }

#pragma unroll
  for (int i = 0; i < MT; ++i) {
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 1);
      l[i][r] += __shfl_xor_sync(0xffffffffu, l[i][r], 2);
      inv[r] = 1.f / l[i][r];
      const int64_t row = w0 + 16 * i + gr + 8 * r;
      if (tq == 0 && row < Tn) a.lse[bh * Tn + row] = m[i][r] * kScale + logf(l[i][r]);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[i][j][0] *= inv[0];
      o[i][j][1] *= inv[0];
      o[i][j][2] *= inv[1];
      o[i][j][3] *= inv[1];
    }
    store_rows(a.out.at(b, h), a.out.st, w0 + 16 * i, Tn, o[i], 1.f);
  }
}

// Δ (B·H, T) = rowsum(dout ∘ out) in f32: 8 lanes per row, one 16-byte pack of 8 values each
constexpr int kDeltaRows = 32;  // rows per 256-thread block
template <class T>
__global__ void __launch_bounds__(8 * kDeltaRows) flash_delta_kernel(Args<T> a) {
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
  const int64_t t = int64_t(blockIdx.x) * kDeltaRows + (threadIdx.x >> 3);
  const int j = threadIdx.x & 7;  // pack j: columns 8j .. 8j + 7
  float s = 0.f;
  if (t < a.Tn) {
    const st::cuda::Pack<T> g = st::cuda::load_pack(a.dout.at(b, h) + t * a.dout.st + 8 * j);
    const st::cuda::Pack<T> o = st::cuda::load_pack(a.o.at(b, h) + t * a.o.st + 8 * j);
#pragma unroll
    for (int e = 0; e < 8; ++e) s = fmaf(to_float(g.v[e]), to_float(o.v[e]), s);
  }
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  if (j == 0 && t < a.Tn) a.delta_out[bh * a.Tn + t] = s;
}

template <class T, bool Rope, bool Full = false, bool Acc = false>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq_kernel(Args<T> a) {
  __shared__ alignas(16) T sQ[kTileElems], sG[kTileElems], sK[2][kTileElems], sV[2][kTileElems];  // 48 KB
  const int qb = gridDim.x - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hk = h / a.rep, Tn = a.Tn, q0 = int64_t(qb) * kTile;
  const T *k = a.k.at(b, hk), *v = a.v.at(b, hk);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  load_tile(sQ, a.q.at(b, h), a.q.st, q0, Tn);
  load_tile(sG, a.dout.at(b, h), a.dout.st, q0, Tn);
  load_tile(sK[0], k, a.k.st, 0, Tn);
  load_tile(sV[0], v, a.v.st, 0, Tn);
  cp_async_commit();

  float lse2[2], dlt[2];  // per row: lse·log2 e, Δ
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = q0 + warp * 16 + gr + 8 * r;
    lse2[r] = row < Tn ? a.lse_in[bh * Tn + row] * kLog2e : 0.f;
    dlt[r] = row < Tn ? a.delta[bh * Tn + row] : 0.f;
  }
  uint32_t qf[4][4], gf[4][4];
  float dq[8][4] = {};
  const float sl2 = kScale * kLog2e;
  const int lastk = Full ? static_cast<int>((Tn - 1) / kTile) : qb;  // the last key tile
  for (int kt = 0; kt <= lastk; ++kt) {
    const int buf = kt & 1;
    if (kt < lastk) {
      load_tile(sK[buf ^ 1], k, a.k.st, int64_t(kt + 1) * kTile, Tn);
      load_tile(sV[buf ^ 1], v, a.v.st, int64_t(kt + 1) * kTile, Tn);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (Rope) {
      if (kt == 0) rope_tile<T, kTile>(sQ, q0, Tn, a.rope);
      rope_tile<T, kTile>(sK[buf], int64_t(kt) * kTile, Tn, a.rope);
      __syncthreads();
    }
    if (kt == 0) {
      load_a(qf, sQ, warp * 16);
      load_a(gf, sG, warp * 16);
    }
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<T>(s, qf, sK[buf]);
    mma_abt<T>(dp, gf, sV[buf]);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const bool masked = Full ? kt * kTile + j * 8 + 2 * tq + (e & 1) >= Tn
                                 : kt == qb && j * 8 + 2 * tq + (e & 1) > warp * 16 + gr + 8 * r;
        const float p = masked ? 0.f : exp2f(fmaf(s[j][e], sl2, -lse2[r]));
        s[j][e] = p * (dp[j][e] - dlt[r]);  // dS
      }
    uint32_t dsf[4][4];
    to_a<T>(dsf, s);
    mma_ab<T>(dq, dsf, sK[buf]);
    __syncthreads();
  }
  if constexpr (Rope) rope_back_acc<T>(dq, q0 + warp * 16, Tn, a.rope);  // dQ = Rᵀ·dQ'
  if constexpr (Acc)
    add_rows_f32(a.dq_acc + bh * Tn * kD, kD, q0 + warp * 16, Tn, dq, kScale);
  else
    store_rows(a.dq.at(b, h), a.dq.st, q0 + warp * 16, Tn, dq, kScale);
}

// dynamic shared memory of the dkdv kernel: K, V, 2 × (Q, dO) tiles, 2 × (lse, Δ) rows
constexpr size_t kDkdvSmem = 6 * kTileElems * 2 + 4 * kTile * sizeof(float);

template <class T, bool Rope, bool Full = false>
__global__ void __launch_bounds__(kThreads, 3) flash_bwd_dkdv_kernel(Args<T> a) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kTileElems;
  T* sQ = sV + kTileElems;         // [2][kTileElems]
  T* sG = sQ + 2 * kTileElems;     // [2][kTileElems]
  float* sL = reinterpret_cast<float*>(sG + 2 * kTileElems);  // [2][kTile] lse·log2 e
  float* sD = sL + 2 * kTile;                                 // [2][kTile] Δ
  const int kb = blockIdx.x;  // low key blocks see the most queries: launched first
  const int64_t bkv = blockIdx.y, b = bkv / a.Hkv, hk = bkv % a.Hkv, Tn = a.Tn, k0 = int64_t(kb) * kTile;
  const int nqt = static_cast<int>((Tn + kTile - 1) / kTile);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gr = lane >> 2, tq = lane & 3;
  // iteration it: query head hk·rep + it / n of the group, query tile first + it % n (n = nqt − first;
  // causal: the tiles from the key block's on, Full: all)
  const int first = Full ? 0 : kb, n = nqt - first, iters = static_cast<int>(a.rep) * n;
  auto head_of = [&](int it) { return hk * a.rep + it / n; };
  auto tile_of = [&](int it) { return first + it % n; };

  auto load_rows = [&](int it, int buf) {  // Q and dO tiles of iteration it
    const int64_t h = head_of(it), r0 = int64_t(tile_of(it)) * kTile;
    load_tile(sQ + buf * kTileElems, a.q.at(b, h), a.q.st, r0, Tn);
    load_tile(sG + buf * kTileElems, a.dout.at(b, h), a.dout.st, r0, Tn);
  };
  // lse·log2 e (threads 0..63) or Δ (64..127) of iteration it's query (tile·64 + thread % 64), 0 past the end
  auto row_stat = [&](int it) {
    const int64_t bh = b * a.H + head_of(it), t = int64_t(tile_of(it)) * kTile + (threadIdx.x & (kTile - 1));
    if (t >= Tn) return 0.f;
    return threadIdx.x < kTile ? a.lse_in[bh * Tn + t] * kLog2e : a.delta[bh * Tn + t];
  };
  float* stat_dst = threadIdx.x < kTile ? sL : sD;  // + buf·64 + thread % 64
  load_tile(sK, a.k.at(b, hk), a.k.st, k0, Tn);
  load_tile(sV, a.v.at(b, hk), a.v.st, k0, Tn);
  load_rows(0, 0);
  cp_async_commit();
  stat_dst[threadIdx.x & (kTile - 1)] = row_stat(0);

  uint32_t kf[4][4], vf[4][4];
  float dk[8][4] = {}, dv[8][4] = {};
  const float sl2 = kScale * kLog2e;
  const int key_row = warp * 16 + gr;  // local key of accumulator rows r = 0 (and + 8)
  for (int it = 0; it < iters; ++it) {
    const int buf = it & 1, qt = tile_of(it);
    if (it + 1 < iters) load_rows(it + 1, buf ^ 1);
    cp_async_commit();
    const float next_stat = it + 1 < iters ? row_stat(it + 1) : 0.f;  // in flight during the products
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (Rope) {
      if (it == 0) rope_tile<T, kTile>(sK, k0, Tn, a.rope);
      rope_tile<T, kTile>(sQ + buf * kTileElems, int64_t(qt) * kTile, Tn, a.rope);
      __syncthreads();
    }
    if (it == 0) {
      load_a(kf, sK, warp * 16);
      load_a(vf, sV, warp * 16);
    }
    const int64_t r0 = int64_t(qt) * kTile;
    const T* tq_ = sQ + buf * kTileElems;
    const T* tg = sG + buf * kTileElems;
    const float* L = sL + buf * kTile;
    const float* Dl = sD + buf * kTile;
    float s[8][4] = {}, dp[8][4] = {};
    mma_abt<T>(s, kf, tq_);  // Sᵀ: rows keys, columns queries
    mma_abt<T>(dp, vf, tg);  // dPᵀ
    // masks only where they can bite: the diagonal tile (query < key) and the tile past T
    const bool diag = !Full && qt == kb, tail = r0 + kTile > Tn;
    const int valid = static_cast<int>(Tn - r0);  // queries of this tile below T
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = j * 8 + 2 * tq + (e & 1);  // local query
        float p = exp2f(fmaf(s[j][e], sl2, -L[col]));
        if ((diag && col < key_row + 8 * (e >> 1)) || (tail && col >= valid)) p = 0.f;
        s[j][e] = p;
        dp[j][e] = p * (dp[j][e] - Dl[col]);  // dSᵀ
      }
    uint32_t pf[4][4], dsf[4][4];
    to_a<T>(pf, s);
    to_a<T>(dsf, dp);
    mma_ab<T>(dv, pf, tg);
    mma_ab<T>(dk, dsf, tq_);
    stat_dst[(buf ^ 1) * kTile + (threadIdx.x & (kTile - 1))] = next_stat;  // read last iteration
    __syncthreads();
  }
  if constexpr (Rope) rope_back_acc<T>(dk, k0 + warp * 16, Tn, a.rope);  // dK = Rᵀ·dK'
  store_rows(a.dk.at(b, hk), a.dk.st, k0 + warp * 16, Tn, dk, kScale);
  store_rows(a.dv.at(b, hk), a.dv.st, k0 + warp * 16, Tn, dv, 1.f);
}

template <class Fn>
void visit_half(DType t, Fn&& fn) {
  if (t == DType::f16) return fn(half{});
  if (t == DType::bf16) return fn(bf16{});
  ST_THROW(DTypeError, "causal_attention: the flash kernels take f16/bf16, got " << dtype_name(t));
}

template <class T>
Args<T> make_args(int64_t H, int64_t Hkv, int64_t Tn, const AttnRope& rope) {
  Args<T> a{};
  a.H = H;
  a.Hkv = Hkv;
  a.rep = H / Hkv;
  a.Tn = Tn;
  a.rope = rope;
  return a;
}

}  // namespace

// launchers

bool flash_attention_supported(DType dt, int64_t head_dim, int64_t BH, std::initializer_list<AttnOperand> ops) {
  if ((dt != DType::f16 && dt != DType::bf16) || head_dim != kD || BH > 65535) return false;
  for (const AttnOperand& o : ops)
    if (!st::cuda::aligned16(o.ptr) || o.sb % 8 || o.sh % 8 || o.st % 8) return false;
  return true;
}

// kernel<T, Rope>: the instantiation with rope only when the call has one
template <class Fn>
void with_rope(const AttnRope& rope, Fn&& fn) {
  if (rope.on())
    fn(std::true_type{});
  else
    fn(std::false_type{});
}

void flash_attention_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Tn, AttnOperand q, AttnOperand k,
                         AttnOperand v, AttnOperand out, float* lse, const AttnRope& rope, cudaStream_t stream) {
  if (B == 0 || H == 0 || Tn == 0) return;
  const dim3 grid(static_cast<unsigned>((Tn + 64 * kFwdMT - 1) / (64 * kFwdMT)), static_cast<unsigned>(B * H));
  visit_half(dt, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a = make_args<T>(H, Hkv, Tn, rope);
    a.q = typed<const T>(q);
    a.k = typed<const T>(k);
    a.v = typed<const T>(v);
    a.out = typed<T>(out);
    a.lse = lse;
    with_rope(rope, [&](auto r) {
      flash_fwd_kernel<T, kFwdMT, decltype(r)::value><<<grid, kThreads, 0, stream>>>(a);
      CHECK_LAUNCH();
    });
  });
}

void flash_attention_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Tn, AttnOperand q, AttnOperand k,
                         AttnOperand v, AttnOperand out, AttnOperand dout, const float* lse, AttnOperand dq,
                         AttnOperand dk, AttnOperand dv, const AttnRope& rope, cudaStream_t stream) {
  if (B == 0 || H == 0 || Tn == 0) return;
  Tensor delta = Tensor::empty({B * H, Tn}, DType::f32, Device::cuda);  // (B·H, T)
  const unsigned tiles = static_cast<unsigned>((Tn + kTile - 1) / kTile), BH = static_cast<unsigned>(B * H);
  const unsigned BHkv = static_cast<unsigned>(B * Hkv);
  visit_half(dt, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a = make_args<T>(H, Hkv, Tn, rope);
    a.q = typed<const T>(q);
    a.k = typed<const T>(k);
    a.v = typed<const T>(v);
    a.o = typed<const T>(out);
    a.dout = typed<const T>(dout);
    a.dq = typed<T>(dq);
    a.dk = typed<T>(dk);
    a.dv = typed<T>(dv);
    a.lse_in = lse;
    a.delta = a.delta_out = delta.data<float>();
    flash_delta_kernel<T><<<dim3(static_cast<unsigned>((Tn + kDeltaRows - 1) / kDeltaRows), BH), 8 * kDeltaRows, 0, stream>>>(a);
    CHECK_LAUNCH();
    with_rope(rope, [&](auto r) {
      constexpr bool kRope = decltype(r)::value;
      auto dkdv = flash_bwd_dkdv_kernel<T, kRope>;
      CHECK_CUDA(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDkdvSmem)));
      dkdv<<<dim3(tiles, BHkv), kThreads, kDkdvSmem, stream>>>(a);  // one block per key tile of a key/value head
      CHECK_LAUNCH();
      flash_bwd_dq_kernel<T, kRope><<<dim3(tiles, BH), kThreads, 0, stream>>>(a);
      CHECK_LAUNCH();
    });
  });
}

void flash_block_fwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Tn, bool full, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand out, float* lse, cudaStream_t stream) {
  if (B == 0 || H == 0 || Tn == 0) return;
  const dim3 grid(static_cast<unsigned>((Tn + 64 * kFwdMT - 1) / (64 * kFwdMT)), static_cast<unsigned>(B * H));
  visit_half(dt, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a = make_args<T>(H, Hkv, Tn, {});
    a.q = typed<const T>(q);
    a.k = typed<const T>(k);
    a.v = typed<const T>(v);
    a.out = typed<T>(out);
    a.lse = lse;
    if (full)
      flash_fwd_kernel<T, kFwdMT, false, true><<<grid, kThreads, 0, stream>>>(a);
    else
      flash_fwd_kernel<T, kFwdMT, false, false><<<grid, kThreads, 0, stream>>>(a);
    CHECK_LAUNCH();
  });
}

void flash_block_bwd(DType dt, int64_t B, int64_t H, int64_t Hkv, int64_t Tn, bool full, AttnOperand q, AttnOperand k,
                     AttnOperand v, AttnOperand dout, const float* lse, const float* delta, float* dq_acc,
                     AttnOperand dk, AttnOperand dv, cudaStream_t stream) {
  if (B == 0 || H == 0 || Tn == 0) return;
  const unsigned tiles = static_cast<unsigned>((Tn + kTile - 1) / kTile), BH = static_cast<unsigned>(B * H);
  const unsigned BHkv = static_cast<unsigned>(B * Hkv);
  visit_half(dt, [&](auto tag) {
    using T = decltype(tag);
    Args<T> a = make_args<T>(H, Hkv, Tn, {});
    a.q = typed<const T>(q);
    a.k = typed<const T>(k);
    a.v = typed<const T>(v);
    a.dout = typed<const T>(dout);
    a.dk = typed<T>(dk);
    a.dv = typed<T>(dv);
    a.lse_in = lse;
    a.delta = delta;
    a.dq_acc = dq_acc;
    auto run = [&](auto full_tag) {
      constexpr bool kFull = decltype(full_tag)::value;
      auto dkdv = flash_bwd_dkdv_kernel<T, false, kFull>;
      CHECK_CUDA(cudaFuncSetAttribute(dkdv, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kDkdvSmem)));
      dkdv<<<dim3(tiles, BHkv), kThreads, kDkdvSmem, stream>>>(a);
      CHECK_LAUNCH();
      flash_bwd_dq_kernel<T, false, kFull, true><<<dim3(tiles, BH), kThreads, 0, stream>>>(a);
      CHECK_LAUNCH();
    };
    if (full)
      run(std::true_type{});
    else
      run(std::false_type{});
  });
}

}  // namespace st::ops::cuda
