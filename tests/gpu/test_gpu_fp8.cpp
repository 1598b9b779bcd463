// FP8 on CUDA against the CPU (ops/fp8_quantize.h, fp8_scaling.h, fp8_matmul.h, fp8_linear.h):
//   - the cast bit for bit over 2^28 f32 inputs (every 16th bit pattern, all low nibbles among
//     them: NaN, ±inf, subnormals, both signs), both formats, with s = 1, and the amax bits; the
//     tensor core's Tensor::to(f8) the same;
//   - the cast with a power-of-two and a non-power-of-two s, f32, f16 and bf16 inputs, with the
//     transposed copy (shapes for the tiled and the one-element kernel), delayed recording and
//     updates: data, data_t and the state bit for bit;
//   - the one-dimensional cast and fp8_amax of misaligned views and ragged lengths (the kernels'
//     16-byte packs, their scalar heads and tails): data and amax bit for bit;
//   - fp8_matmul against the CPU emulation within the accumulation-order tolerance, on the
//     cuBLASLt path (aligned shapes: it must run) and the fallback (K not a multiple of 16);
//   - fp8_linear forward and backward against the CPU op (scales bit for bit, products within the
//     same tolerance);
//   - the casts' overflow / underflow counts (ops/fp8_quantize.h) equal the CPU's in every test
//     above that casts: the sweep (the packed one-dimensional kernel: NaN, inf, subnormals),
//     both transposing kernels, the scalar heads and tails and the one-element path of misaligned
//     views, and fp8_linear's three casts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/fp8_linear.h"
#include "ops/fp8_matmul.h"
#include "ops/fp8_quantize.h"
#include "tests/support/fp8_test_util.h"

using namespace st;
using namespace st::ops;
using st::test::normal;
using st::test::bytes;

namespace {

// index of the first differing byte, −1 when equal
int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

std::vector<int64_t> counts_of(const Tensor& counts) {  // (2) i64 [overflow, underflow]
  const Tensor h = counts.to(Device::cpu);
  return {h.data<int64_t>()[0], h.data<int64_t>()[1]};
}

// A state on `device` holding s (and 1/s) with delayed scaling, so a cast uses exactly s.
Fp8Scaling fixed_scale(Fp8Format f, float s, Device device) {
  Fp8Scaling sc = fp8_scaling({.format = f, .mode = Fp8ScaleMode::delayed, .history = 4}, device);
  sc.state.copy_(Tensor::from_vector(std::vector<float>{s, 1.f / s, 0, 0, 0, 0, 0}, {7}));
  return sc;
}

}  // namespace

TEST(GpuFp8, CastEqualsTheCpuBitForBitOverASweepOfF32) {
  constexpr int64_t kChunk = int64_t{1} << 26, kChunks = 4;  // 2^28 inputs: u = 16·i + (i mod 16)
  for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    int64_t over = 0, under = 0;  // over the chunks: 0 and 2 hold |x| ≤ 2 (no overflow), 1 and 3 |x| ≥ 2 (no underflow)
    for (int64_t ch = 0; ch < kChunks; ++ch) {
      std::vector<uint32_t> u(kChunk);
      for (int64_t j = 0; j < kChunk; ++j) {
        const uint64_t i = static_cast<uint64_t>(ch * kChunk + j);
        u[j] = static_cast<uint32_t>(16 * i + (i % 16));
      }
      Tensor x = Tensor::empty({kChunk});
      std::memcpy(x.data_ptr(), u.data(), u.size() * 4);
      Tensor xg = x.to(Device::cuda);
      // s = 1: x · s = x, a plain cast; the amax (NaN and inf among the inputs) is recorded
      Fp8Scaling sc = fixed_scale(f, 1.f, Device::cpu), sg = fixed_scale(f, 1.f, Device::cuda);
      Tensor nc = Tensor::zeros({2}, DType::i64), ng = Tensor::zeros({2}, DType::i64, Device::cuda);
      Fp8Tensor qc = fp8_quantize(x, sc, false, nc), qg = fp8_quantize(xg, sg, false, ng);
      EXPECT_EQ(counts_of(nc), counts_of(ng)) << fp8_format_name(f) << " chunk " << ch << ": [overflow, underflow]";
      over += counts_of(nc)[0];
      under += counts_of(nc)[1];
      const std::vector<uint8_t> bc = bytes(qc.data), bg = bytes(qg.data);
      const int64_t d = first_diff(bc, bg);
      ASSERT_EQ(d, -1) << fp8_format_name(f) << ": input bits " << std::hex << (d >= 0 ? u[d] : 0) << " gives "
                       << int(d >= 0 ? bg[d] : 0) << " on CUDA, " << int(d >= 0 ? bc[d] : 0) << " on the CPU";
      EXPECT_EQ(bytes(sc.state), bytes(sg.state)) << "state (amax bits) differ";
      const DType dt = fp8_dtype(f);
      EXPECT_EQ(first_diff(bytes(x.to(dt)), bytes(xg.to(dt))), -1) << "Tensor::to(" << dtype_name(dt) << ")";
    }
    // every f32 above the bound saturates and every nonzero one below it underflows: millions of each
    EXPECT_GT(over, 1000000) << fp8_format_name(f);
    EXPECT_GT(under, 1000000) << fp8_format_name(f);
  }
}

TEST(GpuFp8, ScaledTransposingCastsAndUpdatesEqualTheCpu) {
  // Shapes for both transposing kernels of ops/cuda/fp8_cast.cu: the tiled one needs R % 8 = 0 and
  // C % N = 0 (N = 8 for f16 / bf16, 4 for f32), else the one-element 32 × 32 kernel runs.
  //   (100, 72)  R % 8 ≠ 0: the one-element kernel for every dtype
  //   (264, 200) the tiled kernel, both dims ending in a partial tile (256 × 64 / 256 × 32 tiles)
  //   (48, 36)   f32: the tiled kernel; f16 / bf16: the one-element kernel (36 % 8 ≠ 0)
  const int64_t shapes[][2] = {{100, 72}, {264, 200}, {48, 36}};
  int64_t overflows = 0, underflows = 0;  // over every case (CPU's): the counts compared are not all 0
  for (const auto& [R, C] : shapes) {
    std::vector<float> xv = normal(R * C, 3.f, 5);
    xv[7] = 900.f;           // saturates at s ≥ 1
    xv[R * C - 3] = -950.f;  // the amax, in the last row and column tile (partial tiles are read)
    xv[11] = 1e-6f;          // underflow at every s here (1e-6 · 3 < 2^-17), in f16 too (a subnormal)
    xv[R * C - 5] = -3e-7f;  // and in the last tiles
    for (Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2})
      for (float s : {0.5f, 0.7f, 3.f})
        for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
          char trace[96];
          std::snprintf(trace, sizeof trace, "(%ld, %ld) %s s %g %s", static_cast<long>(R), static_cast<long>(C),
                        fp8_format_name(f), s, dtype_name(dt));
          SCOPED_TRACE(trace);
          Tensor x = Tensor::from_vector(xv, {R, C}, dt);
          Fp8Scaling sc = fixed_scale(f, s, Device::cpu), sg = fixed_scale(f, s, Device::cuda);
          Tensor nc = Tensor::zeros({2}, DType::i64), ng = Tensor::zeros({2}, DType::i64, Device::cuda);
          Fp8Tensor qc = fp8_quantize(x, sc, true, nc), qg = fp8_quantize(x.to(Device::cuda), sg, true, ng);
          EXPECT_EQ(counts_of(nc), counts_of(ng)) << "[overflow, underflow]";
          overflows += counts_of(nc)[0];
          underflows += counts_of(nc)[1];
          EXPECT_EQ(first_diff(bytes(qc.data), bytes(qg.data)), -1);
          EXPECT_EQ(first_diff(bytes(qc.data_t), bytes(qg.data_t)), -1);
          EXPECT_EQ(bytes(qc.scale_inv), bytes(qg.scale_inv));
          EXPECT_EQ(bytes(sc.state), bytes(sg.state));  // the recorded amax
          fp8_scaling_update(sc);
          fp8_scaling_update(sg);
          EXPECT_EQ(bytes(sc.state), bytes(sg.state));  // history, s, s⁻¹ after the update
          EXPECT_EQ(first_diff(bytes(fp8_dequantize(qc, dt)), bytes(fp8_dequantize(qg, dt))), -1);
        }
  }
  EXPECT_GT(overflows, 0);   // e4m3: 950 · 0.5, 900 · 0.7 and more past 464
  EXPECT_GT(underflows, 0);  // xv[11], xv[R·C − 5]
  const int64_t R = 100, C = 72;
  std::vector<float> xv = normal(R * C, 3.f, 5);
  xv[7] = 900.f;
  // current scaling with pow2 off and a margin: the rule on the device gives the host's bits
  Fp8Scaling sc = fp8_scaling({.margin = 1, .pow2 = false}), sg = fp8_scaling({.margin = 1, .pow2 = false}, Device::cuda);
  Tensor x = Tensor::from_vector(xv, {R, C});
  Fp8Tensor qc = fp8_quantize(x, sc, true), qg = fp8_quantize(x.to(Device::cuda), sg, true);
  EXPECT_EQ(bytes(sc.state), bytes(sg.state));
  EXPECT_EQ(first_diff(bytes(qc.data_t), bytes(qg.data_t)), -1);
}

// The batched update (one launch for up to 256 states, ops/cuda/fp8_scaling.cu) against the CPU's
// one-at-a-time updates: 300 states (two launches), both formats, histories 1 … 40, margins 0 … 2,
// pow2 on and off, amaxes normal, 0 (s kept), inf and NaN (not pushed), over three rounds; and a
// current-scaling state in the list, left alone.
TEST(GpuFp8, BatchedUpdatesEqualTheCpuStateByState) {
  std::mt19937 rng(11);
  std::vector<Fp8Scaling> cpu, gpu;
  for (int i = 0; i < 300; ++i) {
    const Fp8ScalingOptions o{.format = i % 2 ? Fp8Format::e5m2 : Fp8Format::e4m3, .mode = Fp8ScaleMode::delayed,
                              .history = 1 + i % 40, .margin = i % 3, .pow2 = i % 5 != 0};
    cpu.push_back(fp8_scaling(o));
    gpu.push_back(fp8_scaling(o, Device::cuda));
  }
  Fp8Scaling cur_c = fp8_scaling({}), cur_g = fp8_scaling({}, Device::cuda);  // current: untouched
  std::lognormal_distribution<float> amax(0.f, 4.f);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 300; ++i) {
      float a = amax(rng);
      if ((i + round) % 37 == 0) a = 0.f;
      if ((i + round) % 53 == 0) a = INFINITY;
      if ((i + round) % 71 == 0) a = NAN;
      cpu[i].amax().fill_(a);
      gpu[i].amax().fill_(a);
    }
    cur_c.amax().fill_(3.f);
    cur_g.amax().fill_(3.f);
    std::vector<Fp8Scaling*> all{&cur_g};
    for (int i = 0; i < 300; ++i) {
      fp8_scaling_update(cpu[i]);
      all.push_back(&gpu[i]);
    }
    fp8_scaling_update(all);
    for (int i = 0; i < 300; ++i) {
      SCOPED_TRACE("round " + std::to_string(round) + " state " + std::to_string(i));
      ASSERT_EQ(bytes(cpu[i].state), bytes(gpu[i].state));
    }
    EXPECT_EQ(bytes(cur_c.state), bytes(cur_g.state));
  }
  EXPECT_NE(gpu[1].scale().to(Device::cpu).data<float>()[0], 1.f) << "the updates set scales";
}

// The one-dimensional cast and the amax take 16-byte packs from the first aligned element and the
// rest one by one (ops/cuda/fp8_cast.cu): views starting 0 … 3 elements past an aligned address,
// lengths with and without a ragged tail (8005: enough packs that the kernels' four-loads-in-flight
// loop runs too), the largest |x| at the first, a middle and the last element in turn (so a head,
// body or tail left unread changes the amax), every input dtype.
TEST(GpuFp8, CastAndAmaxOfUnalignedViewsEqualTheCpu) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t off : {0, 1, 3})
      for (int64_t n : {1, 5, 64, 8005}) {
        const std::vector<int64_t> peaks = {0, n / 2, n - 1};
        for (int64_t peak : peaks) {
          char trace[96];
          std::snprintf(trace, sizeof trace, "%s offset %ld n %ld peak %ld", dtype_name(dt), static_cast<long>(off),
                        static_cast<long>(n), static_cast<long>(peak));
          SCOPED_TRACE(trace);
          std::vector<float> xv = normal(static_cast<size_t>(off + n), 1.f, static_cast<uint32_t>(n + off));
          for (int64_t i = 3; i < n; i += 7) xv[off + i] = i % 2 ? 1e-7f : -1e-30f;  // underflows (f16: 1e-30 is 0)
          xv[off + peak] = -40.f;  // |x| ≤ ~5 elsewhere
          Tensor base = Tensor::from_vector(xv, {off + n}, dt), baseg = base.to(Device::cuda);
          Tensor x = base.narrow(0, off, n), xg = baseg.narrow(0, off, n);  // views: a misaligned start
          EXPECT_EQ(bytes(fp8_amax(x)), bytes(fp8_amax(xg)));
          Fp8Scaling sc = fixed_scale(Fp8Format::e4m3, 0.7f, Device::cpu),
                     sg = fixed_scale(Fp8Format::e4m3, 0.7f, Device::cuda);
          Tensor nc = Tensor::zeros({2}, DType::i64), ng = Tensor::zeros({2}, DType::i64, Device::cuda);
          Fp8Tensor qc = fp8_quantize(x, sc, false, nc), qg = fp8_quantize(xg, sg, false, ng);
          EXPECT_EQ(first_diff(bytes(qc.data), bytes(qg.data)), -1);
          EXPECT_EQ(bytes(sc.state), bytes(sg.state));  // the recorded amax
          EXPECT_EQ(counts_of(nc), counts_of(ng)) << "[overflow, underflow]";
          if (n >= 64) {
            EXPECT_GT(counts_of(nc)[1], 0);  // the tiny values above
          }
        }
      }
}

// c on CUDA against the CPU emulation. Both sum exact products (two FP8 values multiply exactly in
// f32); they differ in the order and precision of the sums. Hopper's FP8 tensor cores keep fewer
// bits than f32 inside an MMA (about 14: DeepSeek-V3's report, §3.3.2) and cuBLASLt, with
// FAST_ACCUM off, promotes the partial sums to f32 periodically, so an element may move by about
// 2^-13 · α Σ|a·b|; the tolerance is 2^-11 of it (4× over), plus half a bf16 ulp on each side for
// bf16 outputs (2^-8 |c|). A wrong scale, operand, transpose or format is off by far more.
TEST(GpuFp8, MatmulEqualsTheCpuEmulation) {
  struct Case {
    int64_t M, N, K;
    Fp8Format fa, fb;
    DType out;
    bool lt;  // cuBLASLt must run (else: the bf16 fallback)
  };
  const Case cases[] = {{256, 512, 384, Fp8Format::e4m3, Fp8Format::e4m3, DType::bf16, true},
                        {256, 512, 384, Fp8Format::e4m3, Fp8Format::e4m3, DType::f32, true},
                        {128, 64, 256, Fp8Format::e5m2, Fp8Format::e4m3, DType::bf16, true},
                        {128, 64, 256, Fp8Format::e4m3, Fp8Format::e5m2, DType::f32, true},
                        {33, 20, 40, Fp8Format::e4m3, Fp8Format::e4m3, DType::f32, false},
                        {7, 20, 16, Fp8Format::e5m2, Fp8Format::e4m3, DType::bf16, false}};  // 20·2 bytes % 16 ≠ 0
  for (const Case& c : cases)
    for (bool with_bias : {false, true})
      for (Fp8Accum accum : {Fp8Accum::promoted, Fp8Accum::fast}) {
        const bool fast = accum == Fp8Accum::fast;
        SCOPED_TRACE(std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) + " " +
                     fp8_format_name(c.fa) + "·" + fp8_format_name(c.fb) + " → " + dtype_name(c.out) +
                     (with_bias ? " + bias" : "") + (fast ? ", fast accumulation" : ""));
        Fp8Scaling sa = fp8_scaling({.format = c.fa, .pow2 = false}), sb = fp8_scaling({.format = c.fb});
        Fp8Tensor qa = fp8_quantize(Tensor::from_vector(normal(c.M * c.K, 2.f, 1), {c.M, c.K}), sa);
        Fp8Tensor qb = fp8_quantize(Tensor::from_vector(normal(c.N * c.K, 0.05f, 2), {c.N, c.K}), sb);
        const Tensor bias = with_bias ? Tensor::from_vector(normal(c.N, 0.5f, 3), {c.N}) : Tensor();  // (N)
        Tensor amax_c = Tensor::zeros({1}), amax_g = Tensor::zeros({1}, DType::f32, Device::cuda);
        Tensor cc = fp8_matmul(qa.data, qa.scale_inv, qb.data, qb.scale_inv, c.out, amax_c, bias);
        const int64_t lt0 = ops::cuda::fp8_gemm_lt_launches();
        Tensor cg = fp8_matmul(qa.data.to(Device::cuda), qa.scale_inv.to(Device::cuda), qb.data.to(Device::cuda),
                               qb.scale_inv.to(Device::cuda), c.out, amax_g,
                               with_bias ? bias.to(Device::cuda) : Tensor(), accum);
        // the bias epilogue: on cuBLASLt for bf16 outputs (what fp8_linear runs); an f32 D with a bias
        // may take the fallback (cuBLASLt's FP8 table gives f32 outputs a bf16 bias), so it is not asserted
        if (!with_bias || c.out == DType::bf16) {
          EXPECT_EQ(ops::cuda::fp8_gemm_lt_launches() - lt0, c.lt ? 1 : 0) << "cuBLASLt path";
        }
        const std::vector<double> a = qa.data.to_double(), b = qb.data.to_double(), vc = cc.to_double(), vg = cg.to_double();
        const double alpha = qa.scale_inv.item() * qb.scale_inv.item();
        int bad = 0;
        double cmax = 0;
        for (int64_t m = 0; m < c.M; ++m)
          for (int64_t n = 0; n < c.N; ++n) {
            double sabs = 0;
            for (int64_t k = 0; k < c.K; ++k) sabs += std::fabs(a[m * c.K + k] * b[n * c.K + k]);
            const double ref = vc[m * c.N + n];
            // the accumulations' difference, plus for bf16 one ulp (≤ |ref|·2⁻⁷): each side rounds its own
            // f32 sum to nearest, so sums a hair apart can land on neighbouring bf16 values (seen on the
            // H100, 2026-12-05: 46 of 131072 outputs of the 256x512 case one ulp apart; half an ulp failed);
            // for f32 with a bias two f32 roundings of the add (an FMA or not: 2⁻²²·|ref|)
            // fast accumulation keeps the tensor cores' ~14-bit sums over all of K: each of the
            // K/32 MMA additions may lose 2^-13 of the running sum, so (K/32 + 1)·2^-12 (2× over)
            const double acc_tol = fast ? (c.K / 32.0 + 1) * std::ldexp(sabs, -12) : std::ldexp(sabs, -11);
            const double tol = alpha * acc_tol + std::ldexp(std::fabs(ref), c.out == DType::bf16 ? -7 : -22);
            if (std::fabs(vg[m * c.N + n] - ref) > tol && bad++ < 5)
              ADD_FAILURE() << "c[" << m << ", " << n << "] = " << vg[m * c.N + n] << " on CUDA, " << ref << " on the CPU";
            cmax = std::max(cmax, std::fabs(vg[m * c.N + n]));
          }
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(amax_g.item(), cmax);
      }
}

// The cast's column sums on CUDA equal the CPU's bit for bit on every path: the transposing
// cast's tiles (bf16 (16384, 768), GPT-2's dy at B 16, and f32 (4096, 2304): several tiles of
// 256 rows), the one-element transposing cast with colsum_kernel (R % 8 ≠ 0: (1003, 72)), the
// plain cast with colsum_kernel (no transpose: (600, 96)).
TEST(GpuFp8, ColumnSumsEqualTheCpuBitForBit) {
  struct Case {
    int64_t R, C;
    DType dt;
    bool transpose;
  };
  for (const Case& k : {Case{16384, 768, DType::bf16, true}, Case{4096, 2304, DType::f32, true},
                        Case{1003, 72, DType::bf16, true}, Case{600, 96, DType::f32, false}}) {
    SCOPED_TRACE(std::to_string(k.R) + " x " + std::to_string(k.C) + " " + dtype_name(k.dt));
    const Tensor x = Tensor::from_vector(normal(k.R * k.C, 1e-3f, 31), {k.R, k.C}).to(k.dt);
    Tensor sums[2];
    for (int dev = 0; dev < 2; ++dev) {
      const Device d = dev ? Device::cuda : Device::cpu;
      Fp8Scaling sc = fixed_scale(Fp8Format::e5m2, 4096.f, d);
      sums[dev] = fp8_quantize(x.to(d), sc, k.transpose, Tensor(), /*column_sums=*/true).column_sums.to(Device::cpu);
    }
    EXPECT_EQ(first_diff(bytes(sums[0]), bytes(sums[1])), -1) << "the first differing byte";
  }
}

TEST(GpuFp8, LinearForwardAndBackwardEqualTheCpu) {
  const int64_t B = 4, T = 64, K = 256, N = 128, M = B * T;
  for (Fp8Format gf : {Fp8Format::e5m2, Fp8Format::e4m3}) {
    SCOPED_TRACE(std::string("grad ") + fp8_format_name(gf));
    const std::vector<float> xv = normal(M * K, 1.f, 3), wv = normal(K * N, 0.02f, 4), bv = normal(N, 0.1f, 5),
                             gv = normal(M * N, 1e-3f, 6);
    Tensor outs[2][4];  // [cpu, cuda] × (y, dx, dw, db)
    Tensor states[2][3];
    std::vector<int64_t> counts[2];  // [cpu, cuda]: the three casts' [overflow, underflow]
    for (int dev = 0; dev < 2; ++dev) {
      const Device d = dev ? Device::cuda : Device::cpu;
      Tensor x = Tensor::from_vector(xv, {B, T, K}, DType::f32, d).requires_grad_();
      Tensor w = Tensor::from_vector(wv, {K, N}, DType::f32, d).requires_grad_();
      Tensor b = Tensor::from_vector(bv, {N}, DType::f32, d).requires_grad_();
      Fp8LinearState st = fp8_linear_state({.grad_format = gf}, d);
      st.counts = Tensor::zeros({2}, DType::i64, d);
      Tensor y = fp8_linear(x, w, b, st);
      y.backward(Tensor::from_vector(gv, {B, T, N}, DType::f32, d));
      outs[dev][0] = y.detach().to(Device::cpu);
      outs[dev][1] = x.grad().to(Device::cpu);
      outs[dev][2] = w.grad().to(Device::cpu);
      outs[dev][3] = b.grad().to(Device::cpu);
      states[dev][0] = st.x.state.to(Device::cpu);
      states[dev][1] = st.w.state.to(Device::cpu);
      states[dev][2] = st.grad.state.to(Device::cpu);
      counts[dev] = counts_of(st.counts);
    }
    EXPECT_EQ(counts[0], counts[1]) << "[overflow, underflow] of x, w and g's casts";
    for (int j = 0; j < 3; ++j) EXPECT_EQ(bytes(states[0][j]), bytes(states[1][j])) << "scaling state " << j;
    // The scales and the FP8 operands are the same bits on both (the states above; the casts by
    // the tests before), so the products differ only by accumulation, as in
    // MatmulEqualsTheCpuEmulation: per element up to ~2^-13 of Σ|a·b|, which for sums of K ≥ 128
    // terms of mixed sign is ~2^-13 · √K of |c| (≤ 2^-9 here). The bound on the relative norm error
    // is 2^-7: 5× below the error FP8 itself adds (3.7e-2, tests/bench/bench_fp8_error), so a
    // wrong cast, scale or layout still fails. db is g's column sums in one order on both
    // (ops/fp8_quantize.h): the same bits.
    EXPECT_EQ(bytes(outs[0][3]), bytes(outs[1][3])) << "db";
    const char* names[3] = {"y", "dx", "dw"};
    for (int j = 0; j < 3; ++j) {
      const std::vector<double> c = outs[0][j].to_double(), g = outs[1][j].to_double();
      double num = 0, den = 0;
      for (size_t i = 0; i < c.size(); ++i) {
        num += (g[i] - c[i]) * (g[i] - c[i]);
        den += c[i] * c[i];
      }
      EXPECT_LE(std::sqrt(num / den), std::ldexp(1.0, -7)) << names[j];
    }
  }
}
