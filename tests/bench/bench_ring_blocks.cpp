// Context parallelism's attention work per rank against one rank's whole attention (issue 34,
// a program, not a test): what the fused block kernels cost when a sequence of T tokens is split
// over a ring of N ranks, without the ring's transfers (on NCCL they run beside the blocks; on the
// one-GPU machine the MPI backend would time its host staging instead).
//   single  the whole causal attention over T, as one rank runs it in the model:
//           ops::causal_attention_qkv on the packed (B, T, (H + 2·Hkv)·D) projection with rotary
//           positions (Llama's op), forward and backward through autograd;
//   ring    rank r's share of runtime/parallel/ring_attention.cpp's compute, for every r: its two
//           load-balanced query chunks (B, H, C, D), C = T / 2N, against every key/value chunk
//           the ring brings it (ops/ring_schedule.h): per non-skipped pair ops::block_attention_fwd
//           and ops::merge_attention into f32 accumulators; backward ops::attention_delta once per
//           query chunk, then per pair ops::block_attention_bwd (dq accumulated in f32) and the
//           f32 adds of dk, dv into the step's partial — the same op calls the ring makes, with
//           the key/value chunks sliced from whole tensors instead of received.
// Printed: each time in ms (median of REPS after 2 warm-ups; the host waits for the device after
// each sample), the ranks' largest and mean, the balance max/mean, and the ring's efficiency
// single / (N · max rank): 1 when splitting costs nothing; below 1 by the blocks' smaller
// launches, the merges and the f32 adds.
// Usage: bench_ring_blocks [device=cuda] [T=32768] [N=4] [B=1] [H=32] [Hkv=8] [D=64] [dtype=bf16] [reps=5]
//        [backend=deterministic] (ops/attention_backend.h: flash runs the blocks on the own kernels,
//        the others on cuDNN's graphs where it takes them; the single rank's op follows it too)
// (Llama-3.2-1B's attention: 32 heads over 8 key/value heads of 64; the CPU takes any shape, for a
// check of the program at small sizes: bench_ring_blocks cpu 256 4 1 4 2 16 f32 1.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_backend.h"
#include "ops/attention_merge.h"
#include "ops/block_attention.h"
#include "ops/ring_schedule.h"
#include "ops/rope.h"
#include "tensor/autograd.h"
#include "tensor/pinned.h"
#include "tensor/rng.h"

using namespace st;

namespace {

Device g_device = Device::cuda;
Generator g_gen(2026);

void wait_device() {
  if (g_device == Device::cuda) cuda::synchronize();
}

double time_ms(const std::function<void()>& fn, int reps) {
  for (int i = 0; i < 2; ++i) fn();
  wait_device();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    wait_device();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Tensor rnd(const Shape& s, DType dt) {
  Tensor t = Tensor::empty(s, dt, g_device);
  fill_uniform(t, g_gen, -1.f, 1.f);
  return t;
}

// Rank r's inputs: its two query chunks and every rank's key/value chunks, (B, ·, C, D) each.
struct RankInputs {
  Tensor q[2], dout[2];
  std::vector<std::vector<Tensor>> k, v;  // [source rank][slot]
};

RankInputs rank_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, int64_t N, int64_t r) {
  const int64_t C = ops::context_chunk_len(q.size(2), N);
  RankInputs in;
  const std::vector<int64_t> mine = ops::context_chunks(N, r, ops::ContextSplit::load_balanced);
  for (int i = 0; i < 2; ++i) {
    in.q[i] = q.narrow(2, mine[i] * C, C).contiguous();
    in.dout[i] = dout.narrow(2, mine[i] * C, C).contiguous();
  }
  for (int64_t src = 0; src < N; ++src) {
    const std::vector<int64_t> theirs = ops::context_chunks(N, src, ops::ContextSplit::load_balanced);
    in.k.emplace_back();
    in.v.emplace_back();
    for (int j = 0; j < 2; ++j) {
      in.k.back().push_back(k.narrow(2, theirs[j] * C, C).contiguous());
      in.v.back().push_back(v.narrow(2, theirs[j] * C, C).contiguous());
    }
  }
  return in;
}

struct RingForward {
  Tensor out[2], lse[2];  // (B, H, C, D) f32, (B, H, C) f32
};

// The ring forward's compute on rank r (ring_attention.cpp's forward loop without the transfers).
RingForward ring_forward(const RankInputs& in, int64_t N, int64_t r) {
  const int64_t B = in.q[0].size(0), H = in.q[0].size(1), C = in.q[0].size(2), D = in.q[0].size(3);
  RingForward f;
  for (int i = 0; i < 2; ++i) ops::empty_attention(B, H, C, D, f.out[i], f.lse[i], g_device);
  for (int64_t s = 0; s < N; ++s) {
    const int64_t src = ops::ring_source(N, r, s);
    for (const ops::RingBlock& b : ops::ring_step_blocks(N, r, s, ops::ContextSplit::load_balanced)) {
      if (b.kind == ops::RingPair::skipped) continue;
      ops::BlockAttention y = ops::block_attention_fwd(in.q[b.q_slot], in.k[src][b.k_slot], in.v[src][b.k_slot],
                                                       ops::ring_block_mask(b.kind));
      ops::merge_attention(f.out[b.q_slot], f.lse[b.q_slot], y.out, y.lse);
    }
  }
  return f;
}

// The ring backward's compute on rank r, given its forward (the output in the input dtype, as
// the ring keeps it).
void ring_backward(const RankInputs& in, const RingForward& f, int64_t N, int64_t r) {
  const DType dt = in.q[0].dtype();
  Tensor o[2], delta[2], dq[2];
  for (int i = 0; i < 2; ++i) {
    o[i] = f.out[i].to(dt);                                         // (B, H, C, D): the global output
    delta[i] = ops::attention_delta(o[i], in.dout[i]);              // (B, H, C) f32
    dq[i] = Tensor::zeros(in.q[i].shape(), DType::f32, g_device);  // (B, H, C, D) f32
  }
  const Shape kv_shape = in.k[0][0].shape();  // (B, Hkv, C, D)
  for (int64_t s = 0; s < N; ++s) {
    const int64_t src = ops::ring_source(N, r, s);
    Tensor part[2][2];  // [k | v][slot] f32: the step's partial, as the ring's
    for (auto& kind : part)
      for (Tensor& t : kind) t = Tensor::zeros(kv_shape, DType::f32, g_device);
    for (const ops::RingBlock& b : ops::ring_step_blocks(N, r, s, ops::ContextSplit::load_balanced)) {
      if (b.kind == ops::RingPair::skipped) continue;
      const int i = b.q_slot, j = b.k_slot;
      ops::BlockGrads g = ops::block_attention_bwd(in.q[i], in.k[src][j], in.v[src][j], in.dout[i], f.lse[i],
                                                   delta[i], ops::ring_block_mask(b.kind), dq[i], o[i]);
      part[0][j].add_(g.dk);
      part[1][j].add_(g.dv);
    }
  }
}

DType parse_dtype(const std::string& s) {
  if (s == "bf16") return DType::bf16;
  if (s == "f16") return DType::f16;
  return DType::f32;
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, const char* d) { return std::string(argc > i ? argv[i] : d); };
  g_device = arg(1, "cuda") == "cpu" ? Device::cpu : Device::cuda;
  const int64_t T = std::stoll(arg(2, "32768")), N = std::stoll(arg(3, "4")), B = std::stoll(arg(4, "1"));
  const int64_t H = std::stoll(arg(5, "32")), Hkv = std::stoll(arg(6, "8")), D = std::stoll(arg(7, "64"));
  const DType dt = parse_dtype(arg(8, "bf16"));
  const int reps = std::stoi(arg(9, "5"));
  ops::set_attention_backend(ops::parse_attention_backend(arg(10, "deterministic"), "bench_ring_blocks's 10th argument"));
  std::printf("ring blocks: %s %s, attention backend %s, B %lld T %lld H %lld Hkv %lld D %lld, cp %lld (chunks of %lld)\n",
              g_device == Device::cuda ? "cuda" : "cpu", dtype_name(dt), ops::to_string(ops::attention_backend()).c_str(), (long long)B, (long long)T, (long long)H,
              (long long)Hkv, (long long)D, (long long)N, (long long)ops::context_chunk_len(T, N));

  // single: the model's op on the packed projection, rotary positions, forward + backward
  ops::RopeConfig rc;
  rc.theta = 500000.0;
  rc.head_dim = D;
  const ops::RopeTable rope(rc, T);
  Tensor qkv = rnd({B, T, (H + 2 * Hkv) * D}, dt), dy = rnd({B, T, H * D}, dt);
  qkv.requires_grad_();
  Tensor y;
  const double single_f = time_ms([&] { NoGradGuard ng; y = ops::causal_attention_qkv(qkv, H, Hkv, &rope); }, reps);
  const double single_fb = time_ms([&] { ops::causal_attention_qkv(qkv, H, Hkv, &rope).backward(dy); }, reps);
  const double flops = 2.0 * B * H * T * T * D;  // causal forward: half of 4·B·H·T²·D
  std::printf("single rank, T %lld: fwd %.3f ms (%.1f TFLOP/s), fwd+bwd %.3f ms (%.1f TFLOP/s at 3.5x the forward)\n",
              (long long)T, single_f, flops / single_f / 1e9, single_fb, 3.5 * flops / single_fb / 1e9);
  qkv = Tensor();
  y = Tensor();

  // ring: every rank's share of the same attention (no rotary: the ring receives rotated q, k)
  Tensor q = rnd({B, H, T, D}, dt), k = rnd({B, Hkv, T, D}, dt), v = rnd({B, Hkv, T, D}, dt), dout = rnd({B, H, T, D}, dt);
  std::vector<double> fwd, bwd;
  for (int64_t r = 0; r < N; ++r) {
    const RankInputs in = rank_inputs(q, k, v, dout, N, r);
    RingForward f;
    fwd.push_back(time_ms([&] { f = ring_forward(in, N, r); }, reps));
    bwd.push_back(time_ms([&] { ring_backward(in, f, N, r); }, reps));
    std::printf("  cp rank %lld: fwd %.3f ms, bwd %.3f ms\n", (long long)r, fwd.back(), bwd.back());
  }
  auto max_of = [](const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); };
  auto mean_of = [](const std::vector<double>& x) {
    double s = 0;
    for (double v : x) s += v;
    return s / static_cast<double>(x.size());
  };
  std::vector<double> both;
  for (size_t i = 0; i < fwd.size(); ++i) both.push_back(fwd[i] + bwd[i]);
  std::printf("ring cp %lld: fwd max %.3f mean %.3f ms (balance %.3f), fwd+bwd max %.3f mean %.3f ms (balance %.3f)\n",
              (long long)N, max_of(fwd), mean_of(fwd), max_of(fwd) / mean_of(fwd), max_of(both), mean_of(both),
              max_of(both) / mean_of(both));
  std::printf("efficiency single / (cp x max rank): fwd %.3f, fwd+bwd %.3f (1 = splitting costs nothing)\n",
              single_f / (N * max_of(fwd)), single_fb / (N * max_of(both)));

  // where a rank's forward goes: one block of each kind alone, and rank 0's blocks without the merges
  {
    const RankInputs in = rank_inputs(q, k, v, dout, N, 0);
    const int64_t C = in.q[0].size(2);
    const double causal = time_ms([&] { ops::block_attention_fwd(in.q[0], in.k[0][0], in.v[0][0], ops::BlockMask::causal); }, reps);
    const double full = time_ms([&] { ops::block_attention_fwd(in.q[1], in.k[0][0], in.v[0][0], ops::BlockMask::full); }, reps);
    const double fl = 4.0 * B * H * C * C * D;  // a full block's forward FLOPs
    std::printf("one block of %lld: causal fwd %.3f ms (%.1f TFLOP/s), full fwd %.3f ms (%.1f TFLOP/s)\n", (long long)C,
                causal, fl / 2 / causal / 1e9, full, fl / full / 1e9);
    int blocks = 0;
    const double no_merge = time_ms([&] {
      blocks = 0;
      for (int64_t s = 0; s < N; ++s) {
        const int64_t src = ops::ring_source(N, 0, s);
        for (const ops::RingBlock& b : ops::ring_step_blocks(N, 0, s, ops::ContextSplit::load_balanced)) {
          if (b.kind == ops::RingPair::skipped) continue;
          ops::block_attention_fwd(in.q[b.q_slot], in.k[src][b.k_slot], in.v[src][b.k_slot], ops::ring_block_mask(b.kind));
          ++blocks;
        }
      }
    }, reps);
    std::printf("rank 0: %d blocks, fwd without the merges %.3f ms (with them: %.3f ms)\n", blocks, no_merge, fwd[0]);
  }
  return 0;
}
