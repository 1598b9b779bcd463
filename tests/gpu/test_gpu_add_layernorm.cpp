// CUDA residual add + layernorm (ops/add_layernorm.h, ops/cuda/add_layernorm.cu):
//   - against the CPU op (the harness's check_gpu: f32 / f16 / bf16, forward and every gradient,
//     on cat(r, y) so the backward gets dr and dy together), with and without dropout (the CPU's
//     mask) and without a;
//   - against the unfused CUDA ops (add, dropout, layernorm, autograd's sum of r's gradients) bit
//     for bit, on every kernel path: the register-resident forward and fused backward (C = 64 …
//     1024, every lane width; 16384 rows at C = 768), the looping kernels (C = 1032), the scalar
//     ones (C = 257; a shifted x and a at C = 768); gradients on r and y, on y only, on r only;
//   - the seed read from device memory draws the seed-by-value mask;
//   - launches: a GPT block's and an encoder layer's forward + backward, captured as a CUDA graph,
//     against the same modules run through the unfused ops (the counts are printed).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "models/gpt.h"
#include "models/simple_transformer.h"
#include "ops/activation.h"
#include "ops/add_layernorm.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/layernorm.h"
#include "tensor/autograd.h"
#include "tensor/cuda/runtime.h"
#include "tests/gpu/gpu_cases.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

namespace {

// A GPT-2 block of width C, H heads, MLP 4C and residual dropout p (models/gpt.h's description).
models::DecoderSpec gpt_block(int64_t C, int64_t H, double p) {
  models::GptConfig c;
  c.n_embd = C;
  c.n_head = H;
  c.resid_pdrop = p;
  return models::gpt_spec(c);
}


constexpr float kP = 0.1f;
constexpr uint64_t kSeed = 4242, kOffset = 1000;

Tensor both(const ops::ResidualNorm& o) { return Tensor::cat({o.r.reshape({-1}), o.y.reshape({-1})}, 0); }

// ---- CUDA fused against CUDA unfused, bit for bit ------------------------------------------

struct Grads {
  std::vector<double> r, y, dx, da, dw, db;
};
enum class Used { both, y_only, r_only };
struct Shape2 {
  int64_t N, C, shift;  // shift: x and a start `shift` elements into their buffers (misaligned)
};

Tensor device_leaf(const Tensor& host, DType dt, int64_t shift) {
  const int64_t n = host.numel();
  Tensor buf = Tensor::zeros({n + shift}, dt, Device::cuda);
  buf.narrow(0, shift, n).copy_(host.reshape({n}));
  Tensor t = buf.narrow(0, shift, n).view(host.shape()).detach();  // contiguous, offset `shift`
  t.requires_grad_();
  return t;
}

Grads run(bool fused, DType dt, Shape2 s, float p, bool with_a, Used used, bool seed_tensor = false) {
  Generator g(31 + static_cast<uint64_t>(s.C));
  auto host = [&](Shape sh, float lo, float hi) {
    Tensor t = Tensor::empty(sh);
    fill_uniform(t, g, lo, hi);
    return t;
  };
  Tensor x = device_leaf(host({s.N, s.C}, -2.f, 2.f), dt, s.shift);
  Tensor a = device_leaf(host({s.N, s.C}, -1.f, 1.f), dt, s.shift);
  Tensor w = device_leaf(host({s.C}, 0.5f, 1.5f), dt, 0), b = device_leaf(host({s.C}, -0.5f, 0.5f), dt, 0);
  Tensor ur = host({s.N, s.C}, -1.f, 1.f).to(dt).to(Device::cuda), uy = host({s.N, s.C}, -1.f, 1.f).to(dt).to(Device::cuda);
  Tensor xin = x.view({s.N, s.C});  // a non-leaf, as in a model
  Tensor r, y;
  if (fused) {
    ops::ResidualNorm o;
    if (!with_a)
      o = ops::add_layernorm(xin, Tensor(), w, b);
    else if (seed_tensor)
      o = ops::dropout_add_layernorm(xin, a, p, Tensor::from_vector(std::vector<int64_t>{int64_t(kSeed)}, {1}, Device::cuda),
                                     kOffset, true, w, b);
    else
      o = ops::dropout_add_layernorm(xin, a, p, kSeed, kOffset, true, w, b);
    r = o.r;
    y = o.y;
  } else {
    r = with_a ? ops::add(xin, ops::dropout(a, p, kSeed, kOffset, true)) : xin;
    y = ops::layernorm(r, w, b);
  }
  std::vector<Tensor> terms;
  if (used != Used::y_only) terms.push_back(ops::mul(r, ur));
  if (used != Used::r_only) terms.push_back(ops::mul(y, uy));
  Tensor loss_in = terms.size() == 2 ? Tensor::cat({terms[0], terms[1]}, 0) : terms[0];
  loss_in.backward(Tensor::ones(loss_in.shape(), dt, Device::cuda));
  auto grad = [](const Tensor& t) { return t.grad().defined() ? t.grad().to_double() : std::vector<double>{}; };
  return {r.to_double(), y.to_double(), grad(x), grad(a), grad(w), grad(b)};
}

}  // namespace

TEST(GpuAddLayernorm, MatchesTheCpuOp) {
  // the harness's default tolerances (relative norm error 1e-5 f32, 1e-2 f16, 4e-2 bf16), as
  // layernorm's own gpu cases: the CPU reduces in double, CUDA in f32 warp sums
  for (int64_t C : {200, 768, 1032, 257}) {
    const std::string c = std::to_string(C);
    check_gpu({.name = "add_layernorm C=" + c, .shapes = {{333, C}, {333, C}, {C}, {C}},
               .op = [](auto& x) { return both(ops::add_layernorm(x[0], x[1], x[2], x[3])); }});
    check_gpu({.name = "dropout_add_layernorm C=" + c, .shapes = {{333, C}, {333, C}, {C}, {C}},
               .op = [](auto& x) {
                 return both(ops::dropout_add_layernorm(x[0], x[1], kP, kSeed, kOffset, true, x[2], x[3]));
               }});
    check_gpu({.name = "add_layernorm without a C=" + c, .shapes = {{333, C}, {C}, {C}},
               .op = [](auto& x) { return both(ops::add_layernorm(x[0], Tensor(), x[1], x[2])); }});
  }
}

TEST(GpuAddLayernorm, BitIdenticalToTheUnfusedCudaOps) {
  const Shape2 shapes[] = {{333, 64, 0},  {333, 200, 0},  {333, 512, 0}, {16384, 768, 0},
                           {333, 1024, 0}, {333, 1032, 0}, {333, 257, 0}, {1000, 768, 1}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (const Shape2& s : shapes)
      for (float p : {0.f, kP})
        for (Used used : {Used::both, Used::y_only, Used::r_only})
          for (bool with_a : {true, false}) {
            if (!with_a && p > 0) continue;
            const std::string what = std::string(dtype_name(dt)) + " (" + std::to_string(s.N) + ", " +
                                     std::to_string(s.C) + ") shift " + std::to_string(s.shift) + " p " +
                                     std::to_string(p) + " used " + std::to_string(int(used)) + (with_a ? "" : " no a");
            Grads f = run(true, dt, s, p, with_a, used), u = run(false, dt, s, p, with_a, used);
            ASSERT_FALSE(f.dx.empty()) << what;
            EXPECT_EQ(f.r, u.r) << what;  // element bits, no tolerance
            EXPECT_EQ(f.y, u.y) << what;
            EXPECT_EQ(f.dx, u.dx) << what;
            EXPECT_EQ(f.da, u.da) << what;
            EXPECT_EQ(f.dw, u.dw) << what;
            EXPECT_EQ(f.db, u.db) << what;
          }
}

TEST(GpuAddLayernorm, DeviceSeedDrawsTheSameMask) {
  for (DType dt : {DType::f32, DType::bf16})
    for (Used used : {Used::both, Used::r_only}) {  // r only: the mask kernel without layernorm
      Grads v = run(true, dt, {333, 768, 0}, kP, true, used), t = run(true, dt, {333, 768, 0}, kP, true, used, true);
      EXPECT_EQ(v.r, t.r);
      EXPECT_EQ(v.y, t.y);
      EXPECT_EQ(v.da, t.da);
    }
}

// ---- launches --------------------------------------------------------------------------------

namespace {

struct Launches {
  size_t kernels = 0, copies = 0;  // kernel nodes; memcpy + memset nodes
};

// fn() captured on the current stream (relaxed mode) after a warm-up call, so that the caching
// allocator already holds every block the captured call asks for.
template <class Fn>
Launches count_launches(Fn fn) {
  fn();
  cudaStream_t s = cuda::current_stream();
  CHECK_CUDA(cudaStreamSynchronize(s));
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  try {
    fn();
  } catch (...) {
    cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  CHECK_CUDA(cudaStreamEndCapture(s, &graph));
  size_t n = 0;
  CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CHECK_CUDA(cudaGraphGetNodes(graph, nodes.data(), &n));
  Launches l;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    CHECK_CUDA(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeKernel) ++l.kernels;
    if (t == cudaGraphNodeTypeMemcpy || t == cudaGraphNodeTypeMemset) ++l.copies;
  }
  CHECK_CUDA(cudaGraphDestroy(graph));
  return l;
}

void init_on_cuda(runtime::Layer& layer, DType dt) {
  Generator g(5);
  NoGradGuard ng;
  for (auto& [name, p] : layer.named_parameters()) {
    Tensor t = p.detach();
    fill_uniform(t, g, -0.3f, 0.3f);
  }
  layer.cast_parameters(dt);
  layer.move_parameters(Device::cuda);
}

template <class Fwd>
Launches fwd_bwd_launches(DType dt, int64_t B, int64_t T, int64_t C, Fwd fwd) {
  Generator g(9);
  Tensor x0 = Tensor::empty({B, T, C}), u = Tensor::empty({B, T, C});
  fill_uniform(x0, g, -1.f, 1.f);
  fill_uniform(u, g, -1.f, 1.f);
  Tensor leaf = x0.to(dt).to(Device::cuda).detach(), ud = u.to(dt).to(Device::cuda);
  leaf.requires_grad_();
  return count_launches([&] { fwd(leaf.view({B, T, C})).backward(ud); });  // the input a non-leaf, as in a model
}

void print(const char* what, Launches unfused, Launches fused) {
  std::printf("%s, forward + backward: unfused %zu kernels + %zu copies, fused %zu kernels + %zu copies\n", what,
              unfused.kernels, unfused.copies, fused.kernels, fused.copies);
}

}  // namespace

// The launches the fusion removes, by the code: GPT block, forward: x + drop(attn) (1, + 1 with
// dropout); backward: autograd's sums of the residual stream's two gradients at x and at h (each a
// copy and an add kernel), + attn's dropout with dropout (the MLP's dropout and the block's last
// add are not next to a layernorm of this layer and stay). Encoder layer, forward: the two
// residual adds (+ their 2 dropouts); backward: the 2 dropouts' (its residual gradients meet
// linear layers' dx, not a layernorm's, and stay autograd's sums).
TEST(GpuAddLayernorm, FewerLaunchesPerBlock) {
  const DType dt = DType::bf16;
  for (double p : {0.0, 0.1}) {
    auto gen = std::make_shared<Generator>(1);
    models::DecoderBlock blk(gpt_block(768, 12, p), nullptr, gen, 1);
    init_on_cuda(blk, dt);
    models::Dropout drop(p, gen, 1);
    const Launches fused = fwd_bwd_launches(dt, 2, 128, 768, [&](const Tensor& x) { return blk.forward(x); });
    const Launches unfused = fwd_bwd_launches(dt, 2, 128, 768, [&](const Tensor& x) {
      Tensor h = ops::add(x, drop.forward(blk.attention(blk.norm1().forward(x)), true));
      return ops::add(h, drop.forward(blk.mlp(blk.norm2().forward(h)), true));
    });
    print(p > 0 ? "GPT block (C 768, dropout 0.1)" : "GPT block (C 768)", unfused, fused);
    EXPECT_EQ(unfused.kernels - fused.kernels, p > 0 ? 5u : 3u);
    EXPECT_EQ(unfused.copies - fused.copies, 2u);
  }
  for (double p : {0.0, 0.1}) {
    auto gen = std::make_shared<Generator>(1);
    models::StEncoderLayer layer(256, 8, 2048, p, 1e-5, gen, 0);
    init_on_cuda(layer, dt);
    models::Dropout drop(p, gen, 0);
    const Launches fused = fwd_bwd_launches(dt, 4, 128, 256, [&](const Tensor& x) { return layer.forward(x); });
    const Launches unfused = fwd_bwd_launches(dt, 4, 128, 256, [&](const Tensor& x) {
      Tensor a = layer.out_proj->forward(models::causal_self_attention(layer.in_proj->forward(x), 8, 32));
      Tensor h = layer.norm1->forward(ops::add(x, drop.forward(a, true)));
      Tensor f = layer.linear2->forward(drop.forward(ops::relu(layer.linear1->forward(h)), true));
      return layer.norm2->forward(ops::add(h, drop.forward(f, true)));
    });
    print(p > 0 ? "encoder layer (d 256, dropout 0.1)" : "encoder layer (d 256)", unfused, fused);
    EXPECT_EQ(unfused.kernels - fused.kernels, p > 0 ? 6u : 2u);
    EXPECT_EQ(unfused.copies, fused.copies);
  }
}
