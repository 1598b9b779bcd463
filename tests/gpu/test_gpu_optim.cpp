// CUDA optimizer kernels against the CPU ones: AdamW (f32 master, with f16/bf16 grads and the
// low-precision copy written in the same pass) and SGD bit for bit, also with the in-kernel
// GradScale (unscale, clip); sum_squares, has_inf_nan, scale_; the multi-tensor grad_stats over
// many tensors of odd sizes, mixed dtypes and 16-byte-misaligned views (several launches of its
// chunk table, vector and scalar paths, chunk tails); the multi-tensor AdamW likewise, against
// the CPU and the single-tensor kernel bit for bit, with its snapshot blocks under the step state.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/optim.h"
#include "ops/step_state.h"
#include "tensor/rng.h"

using namespace st;

namespace {
Tensor rand(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  Generator g(seed);
  Tensor t = Tensor::empty(s);
  fill_uniform(t, g, lo, hi);
  return t;
}
}  // namespace

TEST(GpuOptim, AdamWMatchesTheCpuBitForBit) {
  const Shape s{1000, 257};
  for (DType gdt : {DType::f32, DType::bf16, DType::f16}) {
    Tensor p = rand(s, 1), m = rand(s, 2, -0.1f, 0.1f), v = rand(s, 3, 0.f, 0.01f);
    Tensor pg = p.to(Device::cuda), mg = m.to(Device::cuda), vg = v.to(Device::cuda);
    Tensor lp = Tensor::empty(s, DType::bf16, Device::cuda);
    ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int64_t step = 1; step <= 3; ++step) {
      Tensor g = rand(s, 10 + step).to(gdt);
      Tensor gg = g.to(Device::cuda);
      ops::adamw_step(p, g, m, v, hp, step);
      ops::adamw_step(pg, gg, mg, vg, hp, step, lp);
    }
    EXPECT_EQ(pg.to_double(), p.to_double()) << "grad " << dtype_name(gdt);
    EXPECT_EQ(mg.to_double(), m.to_double());
    EXPECT_EQ(vg.to_double(), v.to_double());
    EXPECT_EQ(lp.to_double(), p.to(DType::bf16).to_double());
  }
}

TEST(GpuOptim, SgdMatchesTheCpu) {
  const Shape s{333, 257};
  Tensor p = rand(s, 1), buf = Tensor::zeros(s);
  Tensor pg = p.to(Device::cuda), bg = buf.to(Device::cuda);
  for (int step = 0; step < 3; ++step) {
    Tensor g = rand(s, 20 + step);
    ops::sgd_step(p, g, buf, 0.1f, 0.9f, 0.01f, step == 0);
    ops::sgd_step(pg, g.to(Device::cuda), bg, 0.1f, 0.9f, 0.01f, step == 0);
  }
  EXPECT_EQ(pg.to_double(), p.to_double());
}

TEST(GpuOptim, SumSquaresInfNanScale) {
  Tensor x = rand({1000, 257}, 5);
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor xc = x.to(dt), xg = xc.to(Device::cuda);
    const double cpu = ops::sum_squares(xc), gpu = ops::sum_squares(xg);
    EXPECT_NEAR(gpu, cpu, 1e-9 * cpu) << dtype_name(dt);
    EXPECT_FALSE(ops::has_inf_nan(xg));
    Tensor bad = xg.clone();
    bad.view({-1}).narrow(0, 256999, 1).fill_(dt == DType::f32 ? NAN : INFINITY);
    EXPECT_TRUE(ops::has_inf_nan(bad)) << dtype_name(dt);
    Tensor sc = xc.clone(), sg = xg.clone();
    ops::scale_(sc, 0.37);
    ops::scale_(sg, 0.37);
    EXPECT_EQ(sg.to_double(), sc.to_double());
  }
  EXPECT_NEAR(ops::sum_squares(Tensor::full({3, 4}, 2.0, DType::f32, Device::cuda)), 48.0, 0);
}

namespace {
// A tensor of `numel` values from rand(), as `dt` on the GPU; with offset > 0 a view starting
// `offset` elements into a larger buffer (breaks 16-byte alignment for offset % 8 ≠ 0 in f16).
Tensor gpu_grad(int64_t numel, uint64_t seed, DType dt, int64_t offset = 0, float amp = 1.f) {
  Tensor base = rand({numel + offset}, seed, -amp, amp).to(dt).to(Device::cuda);
  return offset == 0 ? base : base.narrow(0, offset, numel);
}
std::vector<Tensor> to_cpu(const std::vector<Tensor>& g) {
  std::vector<Tensor> out;
  for (const Tensor& t : g) out.push_back(t.to(Device::cpu));
  return out;
}
}  // namespace

TEST(GpuOptim, GradStatsMatchesTheCpuOverManyTensors) {
  // 150 tensors (3 launches of the chunk table): odd sizes, chunk-boundary sizes, mixed dtypes,
  // views at odd offsets, weights 1 / 0 / 0.5; plus GPT-2-like aligned matrices
  const DType dts[] = {DType::f16, DType::bf16, DType::f32};
  std::vector<Tensor> g;
  std::vector<double> w;
  const int64_t sizes[] = {1, 7, 768, 1000 * 257, 32768, 32769, 65535, 3 * 768, 4099};
  for (int i = 0; i < 150; ++i) {
    const int64_t n = sizes[i % 9] + (i / 9);
    const int64_t offset = i % 4 == 1 ? 1 : i % 4 == 3 ? 3 : 0;
    g.push_back(gpu_grad(n, 100 + i, dts[i % 3], offset, 8.f));
    w.push_back(i % 5 == 2 ? 0.0 : i % 7 == 3 ? 0.5 : 1.0);
  }
  g.push_back(gpu_grad(16384 * 768, 7, DType::f16));  // aligned, vector path
  w.push_back(1.0);
  g.push_back(gpu_grad(16384 * 768, 8, DType::bf16, 5));  // same size misaligned, scalar path
  w.push_back(1.0);
  const std::vector<Tensor> gc = to_cpu(g);
  for (double inv : {1.0, 1.0 / 1024}) {
    const ops::GradStats cpu = ops::cpu::grad_stats(gc, w, static_cast<float>(inv));
    const ops::GradStats gpu = ops::grad_stats(g, w, inv);
    // double sums in another order: ~1e-13 apart; one element missed or doubled: ≥ 1e-8
    EXPECT_NEAR(gpu.sumsq, cpu.sumsq, 1e-10 * cpu.sumsq) << "inv_scale " << inv;
    EXPECT_GT(cpu.sumsq, 0.0);
    EXPECT_FALSE(gpu.found_inf);
    EXPECT_EQ(ops::grad_stats(g, w, inv).sumsq, gpu.sumsq) << "deterministic";
    // each tensor alone against sum_squares of its unscaled f32 copy
    for (size_t i : {0, 1, 3, 10, 77, 149}) {
      Tensor c = gc[i].to(DType::f32).clone();
      ops::scale_(c, inv);
      const double want = ops::sum_squares(c);
      EXPECT_NEAR(ops::grad_stats({g[i]}, {}, inv).sumsq, want, 1e-10 * want) << "tensor " << i;
    }
  }
  // weights really act: the weight-0 tensors' sum is what separates these two
  std::vector<double> ones(g.size(), 1.0);
  const double all = ops::grad_stats(g, ones).sumsq, weighted = ops::grad_stats(g, w).sumsq;
  double skipped = 0;
  for (size_t i = 0; i < g.size(); ++i) skipped += (1.0 - w[i]) * ops::sum_squares(gc[i]);
  EXPECT_NEAR(all - weighted, skipped, 1e-9 * all);
}

TEST(GpuOptim, GradStatsFindsInfNanAnywhere) {
  const DType dts[] = {DType::f16, DType::bf16, DType::f32};
  for (int where : {0, 32767, 32768, 70000, 99999}) {  // first element, chunk ends, tail
    for (int k = 0; k < 3; ++k) {
      std::vector<Tensor> g;
      for (int i = 0; i < 70; ++i) g.push_back(gpu_grad(i == 66 ? 100000 : 1000 + i, 300 + i, dts[(i + k) % 3], i % 2));
      std::vector<double> w(g.size(), 1.0);
      w[66] = 0.0;  // a weight-0 tensor is still checked
      EXPECT_FALSE(ops::grad_stats(g, w).found_inf);
      g[66].narrow(0, where, 1).fill_(k == 2 ? NAN : INFINITY);
      const ops::GradStats s = ops::grad_stats(g, w);
      EXPECT_TRUE(s.found_inf) << "at " << where << " in " << dtype_name(g[66].dtype());
      EXPECT_TRUE(std::isfinite(s.sumsq)) << "the weight-0 tensor stays out of the sum";
    }
  }
  // overflow by the unscale factor (f32), and a finite f16 maximum that is fine
  EXPECT_TRUE(ops::grad_stats({Tensor::full({3}, 3e38, DType::f32, Device::cuda)}, {}, 4.0).found_inf);
  EXPECT_FALSE(ops::grad_stats({Tensor::full({3}, 65504.0, DType::f16, Device::cuda)}, {}).found_inf);
  const ops::GradStats none = ops::grad_stats({}, {});
  EXPECT_EQ(none.sumsq, 0.0);
  EXPECT_FALSE(ops::grad_stats({Tensor::zeros({0}, DType::f16, Device::cuda)}, {}).found_inf);
  EXPECT_NEAR(ops::grad_stats({Tensor::full({3, 4}, 2.0, DType::bf16, Device::cuda)}, {0.5}).sumsq, 24.0, 0);
}

TEST(GpuOptim, ScaledAdamWAndSgdMatchTheCpuBitForBit) {
  // raw f16/bf16/f32 gradients with 1/scale and a clip coefficient applied in the kernel, also
  // from a misaligned view; CPU with the same GradScale is the reference (it equals the old
  // separate passes bit for bit: tests/ops/test_optim.cpp)
  for (const Shape& s : {Shape{1000, 257}, Shape{16384, 768}}) {
    for (DType gdt : {DType::f32, DType::bf16, DType::f16}) {
      Tensor p = rand(s, 1), m = rand(s, 2, -0.1f, 0.1f), v = rand(s, 3, 0.f, 0.01f), buf = rand(s, 4);
      Tensor pg = p.to(Device::cuda), mg = m.to(Device::cuda), vg = v.to(Device::cuda), bg = buf.to(Device::cuda);
      Tensor q = p.clone(), qg = pg.clone();
      Tensor lc = Tensor::empty(s, DType::f16), lg = Tensor::empty(s, DType::f16, Device::cuda);
      ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
      const ops::GradScale gs{1.0 / 4096, 0.3183};
      for (int64_t step = 1; step <= 2; ++step) {
        Tensor gg = gpu_grad(shape_numel(s), 40 + step, gdt, step == 2 ? 1 : 0, 3000.f).view(s);
        Tensor g = gg.to(Device::cpu);
        ops::adamw_step(p, g, m, v, hp, step, lc, gs);
        ops::adamw_step(pg, gg, mg, vg, hp, step, lg, gs);
        ops::sgd_step(q, g, buf, 0.1f, 0.9f, 0.01f, step == 1, gs);
        ops::sgd_step(qg, gg, bg, 0.1f, 0.9f, 0.01f, step == 1, gs);
      }
      EXPECT_EQ(pg.to_double(), p.to_double()) << "grad " << dtype_name(gdt);
      EXPECT_EQ(mg.to_double(), m.to_double());
      EXPECT_EQ(vg.to_double(), v.to_double());
      EXPECT_EQ(lg.to_double(), lc.to_double());
      EXPECT_EQ(qg.to_double(), q.to_double());
      EXPECT_EQ(bg.to_double(), buf.to_double());
    }
  }
}

TEST(GpuOptim, AdamWMultiMatchesTheCpuBitForBit) {
  // 152 tensors (≥ 3 launches of the 64-tensor chunk table, more for the 5 scalar sets): sizes
  // 1, 7, 8, 1000, 32768 (chunk multiple), 32768 + 5, 100003, an empty one, 1000×257 and an
  // aligned 16384×768; grad f32/f16/bf16, copy none/f16/bf16, five weight decays; grads (and
  // some params with their m, v, copy) as views at odd offsets: 16-byte and scalar paths
  const int64_t sizes[] = {1, 7, 8, 1000, 32768, 32768 + 5, 100003};
  const DType gdts[] = {DType::f32, DType::f16, DType::bf16};
  const DType lpdts[] = {DType::f32, DType::f16, DType::bf16};  // f32: no copy
  const float wds[] = {0.f, 0.1f, 0.01f, 0.3f, 0.05f};
  struct Case {
    int64_t n;
    DType gdt, lpdt;
    int64_t goff, poff;  // view offsets of grad and of param/m/v/copy (0: own allocation)
    float wd;
  };
  std::vector<Case> cases;
  for (int i = 0; i < 150; ++i)
    cases.push_back({sizes[i % 7] + (i % 3 == 0 ? 0 : i / 7), gdts[i % 3], lpdts[(i / 3) % 3],
                     i % 4 == 1 ? 1 : i % 4 == 3 ? 3 : 0, i % 5 == 4 ? 1 : 0, wds[(i / 2) % 5]});
  cases[17].n = 0;
  cases.push_back({1000 * 257, DType::bf16, DType::f16, 5, 0, 0.1f});
  cases.push_back({16384 * 768, DType::f16, DType::bf16, 0, 0, 0.1f});
  const size_t N = cases.size();

  // GPU state (maybe views) and its CPU copies
  auto view = [](int64_t n, int64_t off, DType dt, Tensor init) {  // (n) at offset `off` of a buffer
    Tensor base = Tensor::zeros({n + off}, dt, Device::cuda);
    Tensor v = base.narrow(0, off, n);
    if (init.defined()) v.copy_(init.to(dt).to(Device::cuda));
    return v;
  };
  std::vector<Tensor> pg(N), mg(N), vg(N), lg(N), pc(N), mc(N), vc(N), lc(N), p0(N);
  for (size_t i = 0; i < N; ++i) {
    const Case& c = cases[i];
    pg[i] = view(c.n, c.poff, DType::f32, rand({c.n}, 1000 + i));
    mg[i] = view(c.n, c.poff, DType::f32, rand({c.n}, 2000 + i, -0.1f, 0.1f));
    vg[i] = view(c.n, c.poff, DType::f32, rand({c.n}, 3000 + i, 0.f, 0.01f));
    if (c.lpdt != DType::f32) lg[i] = view(c.n, c.poff, c.lpdt, Tensor());
    pc[i] = pg[i].to(Device::cpu), mc[i] = mg[i].to(Device::cpu), vc[i] = vg[i].to(Device::cpu);
    if (c.lpdt != DType::f32) lc[i] = Tensor::zeros({c.n}, c.lpdt);
    p0[i] = pc[i].clone();
  }
  const ops::GradScale gs{1.0 / 4096, 0.3183};
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<Tensor> gg(N), gc(N);
    std::vector<ops::AdamWSlot> slots;
    for (size_t i = 0; i < N; ++i) {
      const Case& c = cases[i];
      gg[i] = gpu_grad(c.n, 10000 * step + i, c.gdt, c.goff + step - 1, 3000.f);
      gc[i] = gg[i].to(Device::cpu);
      const ops::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, c.wd};
      ops::adamw_step(pc[i], gc[i], mc[i], vc[i], hp, step, lc[i], gs);
      slots.push_back({&pg[i], &gg[i], &mg[i], &vg[i], lg[i], ops::adamw_scalars(hp, step)});
    }
    ops::adamw_step_multi(slots, gs);
  }
  for (size_t i = 0; i < N; ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE("tensor " + std::to_string(i) + " n " + std::to_string(c.n) + " grad " + dtype_name(c.gdt) +
                 " copy " + dtype_name(c.lpdt) + " offsets " + std::to_string(c.goff) + "/" + std::to_string(c.poff));
    ASSERT_EQ(pg[i].to_double(), pc[i].to_double());  // ASSERT: one report per broken tensor
    ASSERT_EQ(mg[i].to_double(), mc[i].to_double());
    ASSERT_EQ(vg[i].to_double(), vc[i].to_double());
    if (lg[i].defined()) {
      ASSERT_EQ(lg[i].to_double(), lc[i].to_double());
    }
    if (c.n > 0) {
      ASSERT_NE(pc[i].to_double(), p0[i].to_double()) << "the reference moved";
    }
  }
}

TEST(GpuOptim, AdamWMultiEqualsTheSingleTensorKernel) {
  // the same update through both CUDA kernels (one element function): aligned sizes, f16 grads
  Tensor p = rand({16384, 768}, 1).to(Device::cuda), q = p.clone();
  Tensor b = rand({768}, 2).to(Device::cuda), c = b.clone();
  Tensor mp = Tensor::zeros(p.shape(), DType::f32, Device::cuda), vp = mp.clone(), mq = mp.clone(), vq = mp.clone();
  Tensor mb = Tensor::zeros({768}, DType::f32, Device::cuda), vb = mb.clone(), mc = mb.clone(), vc = mb.clone();
  Tensor lp = Tensor::empty(p.shape(), DType::bf16, Device::cuda), lq = lp.empty_like();
  const ops::AdamWParams hw{6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f}, hb{6e-4f, 0.9f, 0.95f, 1e-8f, 0.f};
  for (int64_t step = 1; step <= 3; ++step) {
    Tensor gp = gpu_grad(p.numel(), 50 + step, DType::f16).view(p.shape()), gb = gpu_grad(768, 60 + step, DType::f16);
    ops::adamw_step(p, gp, mp, vp, hw, step, lp);
    ops::adamw_step(b, gb, mb, vb, hb, step);
    std::vector<ops::AdamWSlot> slots{{&q, &gp, &mq, &vq, lq, ops::adamw_scalars(hw, step)},
                                      {&c, &gb, &mc, &vc, Tensor(), ops::adamw_scalars(hb, step)}};
    ops::adamw_step_multi(slots);
  }
  EXPECT_EQ(q.to_double(), p.to_double());
  EXPECT_EQ(vq.to_double(), vp.to_double());
  EXPECT_EQ(lq.to_double(), lp.to_double());
  EXPECT_EQ(c.to_double(), b.to_double());
  EXPECT_EQ(mc.to_double(), mb.to_double());
}

TEST(GpuOptim, AdamWSnapshotBlocksMatchTheCpuBitForBit) {
  // The trainer's step (adamw_step_multi_state) with every slot's snapshot block, on both devices:
  // 130 slots (3 launches of the 60-tensor table) of sizes off the 4-element quads and the 8192
  // chunks, some at odd offsets (the scalar path), bf16 grads and copies; the state asks for the
  // snapshot at every step and skips step 2 (the blocks: the state as it was) — after each step
  // every block, padding included, equals the CPU's bit for bit and holds the params
  const int64_t sizes[] = {1, 7, 8, 8192 + 3, 20000, 100003};
  const size_t N = 130;
  std::vector<Tensor> pc(N), mc(N), vc(N), pg(N), mg(N), vg(N), lc(N), lg(N), bc(N), bg(N);
  std::vector<bool> decays(N);
  for (size_t i = 0; i < N; ++i) {
    const int64_t n = sizes[i % 6] + static_cast<int64_t>(i / 6), off = i % 4 == 3 ? 1 : 0;
    auto at = [&](Tensor t) {  // (n) at `off` of a CUDA buffer
      Tensor base = Tensor::zeros({n + off}, t.dtype(), Device::cuda);
      Tensor view = base.narrow(0, off, n);
      view.copy_(t.to(Device::cuda));
      return view;
    };
    pc[i] = rand({n}, 100 + i), mc[i] = rand({n}, 200 + i, -0.1f, 0.1f), vc[i] = rand({n}, 300 + i, 0.f, 0.01f);
    pg[i] = at(pc[i]), mg[i] = at(mc[i]), vg[i] = at(vc[i]);
    lc[i] = Tensor::zeros({n}, DType::bf16), lg[i] = at(lc[i]);
    bc[i] = Tensor::full({ops::adamw_snapshot_floats(n) + 5}, -3.0), bg[i] = bc[i].to(Device::cuda);
    decays[i] = i % 2 == 0;
  }
  ops::DeviceStepState init;
  init.gs = {1.f / 1024, 0.5f};
  for (int64_t step = 1; step <= 3; ++step) {
    ops::DeviceStepState st = init;
    st.with_wd = ops::adamw_scalars({1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f}, step);
    st.no_wd = ops::adamw_scalars({1e-3f, 0.9f, 0.95f, 1e-8f, 0.f}, step);
    st.snapshot = 1;
    st.skip = step == 2 ? 1 : 0;
    Tensor sc = ops::step_state_tensor(st, Device::cpu), sg = ops::step_state_tensor(st, Device::cuda);
    std::vector<Tensor> gc(N), gg(N);
    std::vector<ops::AdamWSlot> cpu, gpu;
    for (size_t i = 0; i < N; ++i) {
      gg[i] = gpu_grad(pc[i].numel(), 1000 * step + i, DType::bf16, 0, 700.f);
      gc[i] = gg[i].to(Device::cpu);
      cpu.push_back({&pc[i], &gc[i], &mc[i], &vc[i], lc[i], {}, bc[i]});
      gpu.push_back({&pg[i], &gg[i], &mg[i], &vg[i], lg[i], {}, bg[i]});
    }
    ops::adamw_step_multi_state(cpu, decays, sc);
    ops::adamw_step_multi_state(gpu, decays, sg);
    for (size_t i = 0; i < N; ++i) {
      SCOPED_TRACE("step " + std::to_string(step) + " slot " + std::to_string(i) + " n " +
                   std::to_string(pc[i].numel()));
      ASSERT_EQ(pg[i].to_double(), pc[i].to_double());
      ASSERT_EQ(bg[i].to_double(), bc[i].to_double());
      ASSERT_EQ(bc[i].narrow(0, 0, pc[i].numel()).to_double(), pc[i].to_double());
      ASSERT_NE(pc[i].to_double(), rand({pc[i].numel()}, 100 + i).to_double()) << "the reference moved";
    }
  }
}
