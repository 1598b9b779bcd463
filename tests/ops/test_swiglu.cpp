// SwiGLU on a packed [gate | up] (ops/swiglu.h):
//   - the harness: f32 against the double reference silu(g)·u, d(gu) against central
//     differences, f16 / bf16 by relative error;
//   - bit-identical, forward and d(gu), to the unfused ops::mul(ops::silu(gate), up) on the two
//     narrow views of gu, in f32, bf16 and f16 (Hugging Face's rounding order: silu's output
//     rounded to the dtype, then the product), which on these inputs differs from one rounding;
//   - typed errors.
// Cost: 0.05 s for the file on the 2-core dev VM.
#include <gtest/gtest.h>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/swiglu.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"
#include "tests/ops/harness.h"
#include "tests/ops/reference.h"

using namespace st;
using namespace st::test;

// Tolerances: the harness's defaults. f32: silu is exp_f32 (within an ulp), one addition, one
// division and the product, a few ulps in all (≤ 1e-6 relative; atol 1e-5 + rtol 1e-4); central
// differences with h = 1e-5 in double are exact to ~1e-9 for |g| ≤ 4. f16 / bf16 (relative norm
// error 5e-3 / 3e-2): y is rounded twice (silu's output, the product), ≤ 2·2⁻¹¹ / 2·2⁻⁸ relative
// per element; d(gate) also rounds dy·u first, d(up) rounds silu first, held to twice that against
// the f32 op on the same rounded inputs.
TEST(OpsSwiglu, MatchesReferenceAndFiniteDifferences) {
  check_op({.name = "swiglu (3, 2·129)",
            .shapes = {{3, 258}},
            .op = [](auto& x) { return ops::swiglu(x[0]); },
            .ref = [](auto& x) { return ref::swiglu(x[0], 129); },
            .lo = -4.f,
            .hi = 4.f});
  check_op({.name = "swiglu (2,3, 2·8)",
            .shapes = {{2, 3, 16}},
            .op = [](auto& x) { return ops::swiglu(x[0]); },
            .ref = [](auto& x) { return ref::swiglu(x[0], 8); }});
}

namespace {

struct Out {
  std::vector<double> y, dgu;
};

// gu (5, 2F) in dtype dt (a leaf), y through the fused op or the unfused silu and mul of gu's two
// halves, backward with a fixed cotangent.
Out run(bool fused, DType dt, int64_t F) {
  Generator g(41 + static_cast<uint64_t>(F));
  Tensor gu0 = Tensor::empty({5, 2 * F}), u0 = Tensor::empty({5, F});
  fill_uniform(gu0, g, -6.f, 6.f);
  fill_uniform(u0, g, -1.f, 1.f);
  Tensor gu = gu0.to(dt).detach();
  gu.requires_grad_();
  Tensor y = fused ? ops::swiglu(gu) : ops::mul(ops::silu(gu.narrow(1, 0, F)), gu.narrow(1, F, F));
  y.backward(u0.to(dt));
  return {y.to_double(), gu.grad().to_double()};
}

}  // namespace

TEST(OpsSwiglu, BitIdenticalToSiluTimesUp) {
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (int64_t F : {1, 37, 64}) {
      const std::string what = std::string(dtype_name(dt)) + " F=" + std::to_string(F);
      Out f = run(true, dt, F), u = run(false, dt, F);
      EXPECT_EQ(f.y, u.y) << what;  // every element's bits
      EXPECT_EQ(f.dgu, u.dgu) << what;
      EXPECT_EQ(f.y.size(), static_cast<size_t>(5 * F)) << what;
    }
}

// The unfused ops round silu's output (a stored tensor) before the product, as HF's bf16 MLP
// does; one rounding of silu(g)·u computed in f32 gives other bits on some of these elements,
// so the bit-equality above tells the two orders apart.
TEST(OpsSwiglu, HalfPrecisionRoundsSiluBeforeTheProduct) {
  for (DType dt : {DType::bf16, DType::f16}) {
    Generator g(43);
    Tensor gu = Tensor::empty({5, 128});
    fill_uniform(gu, g, -6.f, 6.f);
    gu = gu.to(dt).to(DType::f32);  // values of dt
    Tensor once = ops::mul(ops::silu(gu.narrow(1, 0, 64)), gu.narrow(1, 64, 64)).to(dt);
    EXPECT_NE(ops::swiglu(gu.to(dt)).to_double(), once.to_double()) << dtype_name(dt);
  }
}

TEST(OpsSwiglu, KnownValues) {
  // silu(1)·2 = 2/(1 + e⁻¹) = 1.4621171572600098; silu(0)·5 = 0; silu(−1)·1 = −0.2689414213699951
  Tensor gu = Tensor::from_vector(std::vector<float>{1.f, 0.f, -1.f, 2.f, 5.f, 1.f}, {1, 6});
  const std::vector<double> y = ops::swiglu(gu).to_double();
  EXPECT_NEAR(y[0], 1.4621171572600098, 1e-6);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_NEAR(y[2], -0.2689414213699951, 1e-7);
}

TEST(OpsSwiglu, ErrorsAreTyped) {
  try {
    ops::swiglu(Tensor::ones({2, 5}));
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("swiglu"), std::string::npos) << m;
    EXPECT_NE(m.find("(2, 5)"), std::string::npos) << m;
  }
  EXPECT_THROW(ops::swiglu(Tensor::ones({0})), ShapeError);
  EXPECT_THROW(ops::swiglu(Tensor::ones({2, 4}, DType::i64)), DTypeError);
  EXPECT_THROW(ops::swiglu(Tensor()), ValueError);
}
