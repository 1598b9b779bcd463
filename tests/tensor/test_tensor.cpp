// Tensor core: factories, views (strides, offsets), contiguous copies, split/cat, casts, errors.
#include <gtest/gtest.h>

#include "tensor/tensor.h"

using namespace st;

TEST(Tensor, FactoriesAndMetadata) {
  Tensor t = Tensor::full({2, 3}, 1.5);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.size(-1), 3);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Shape{3, 1}));
  for (double v : t.to_double()) EXPECT_EQ(v, 1.5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);  // 64-byte aligned
  Tensor a = Tensor::arange(5);
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_double(), (std::vector<double>{0, 1, 2, 3, 4}));
}

TEST(Tensor, TransposeIsAViewAndContiguousCopies) {
  Tensor t = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_EQ(tt.shape(), (Shape{3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_EQ(tt.to_double(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.to_double(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Tensor, PermuteNarrowReshape) {
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  Tensor t = Tensor::from_vector(v, {2, 3, 4});
  Tensor p = t.permute({2, 0, 1});  // (4, 2, 3): p[k][i][j] = t[i][j][k]
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  auto pv = p.to_double();
  EXPECT_EQ(pv[1 * 6 + 1 * 3 + 2], 1 * 12 + 2 * 4 + 1);
  Tensor n = t.narrow(2, 1, 2);  // (2, 3, 2)
  auto nv = n.to_double();
  EXPECT_EQ(nv.size(), 12u);
  EXPECT_EQ(nv[0], 1);
  EXPECT_EQ(nv[1], 2);
  EXPECT_EQ(nv[2], 5);
  Tensor r = t.reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  Tensor r2 = p.reshape({8, 3});  // not contiguous → copy
  EXPECT_EQ(r2.to_double()[4], pv[4]);
  EXPECT_THROW(t.view({5, 5}), ShapeError);
  EXPECT_THROW(p.view({24}), ShapeError);
  EXPECT_THROW(t.narrow(1, 2, 2), ShapeError);
}

TEST(Tensor, SplitCatRoundTrip) {
  std::vector<float> v(20);
  for (int i = 0; i < 20; ++i) v[i] = static_cast<float>(i * i);
  Tensor t = Tensor::from_vector(v, {4, 5});
  auto parts = t.split(2, 1);  // widths 2, 2, 1
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{4, 1}));
  Tensor back = Tensor::cat(parts, 1);
  EXPECT_EQ(back.to_double(), t.to_double());
  Tensor rows = Tensor::cat({t.narrow(0, 2, 2), t.narrow(0, 0, 2)}, 0);
  EXPECT_EQ(rows.to_double()[0], 100);
  EXPECT_THROW(Tensor::cat({t, Tensor::zeros({3, 3})}, 0), ShapeError);
}

TEST(Tensor, CastsRoundOnStore) {
  Tensor t = Tensor::from_vector(std::vector<double>{1.0, 1.0 + 1.0 / 4096, 65504.0, 1e-8}, {4});
  Tensor h = t.to(DType::f16);
  auto hv = h.to_double();
  EXPECT_EQ(hv[0], 1.0);
  EXPECT_EQ(hv[1], 1.0);  // half-way between 1 and 1+2^-10 rounds to even (1.0)
  EXPECT_EQ(hv[2], 65504.0);
  EXPECT_EQ(hv[3], 0.0);  // below half the smallest subnormal
  Tensor b = t.to(DType::bf16);
  EXPECT_EQ(b.to_double()[0], 1.0);
  Tensor i = Tensor::from_vector(std::vector<double>{2.7, -3.2}, {2}).to(DType::i32);
  EXPECT_EQ(i.to_double(), (std::vector<double>{2, -3}));
}

TEST(Tensor, InPlaceAddFillCopy) {
  Tensor a = Tensor::ones({2, 2});
  Tensor b = Tensor::full({2, 2}, 3.0);
  a.add_(b, 0.5);
  for (double v : a.to_double()) EXPECT_EQ(v, 2.5);
  a.narrow(1, 0, 1).fill_(-1);
  EXPECT_EQ(a.to_double(), (std::vector<double>{-1, 2.5, -1, 2.5}));
  Tensor h = Tensor::zeros({2, 2}, DType::bf16);
  h.copy_(a.transpose(0, 1));
  EXPECT_EQ(h.to_double(), (std::vector<double>{-1, -1, 2.5, 2.5}));
  EXPECT_THROW(a.add_(Tensor::ones({4})), ShapeError);
}

TEST(Tensor, CudaWithoutADeviceIsAClearError) {
  if (cuda::available()) GTEST_SKIP() << "a GPU is present: CUDA tensors are covered by the gpu tests";
  // CPU-only build ("built without CUDA") or CUDA build on a machine without a GPU ("no CUDA device")
  try {
    Tensor::empty({2}, DType::f32, Device::cuda);
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("without CUDA") != std::string::npos || m.find("no CUDA device") != std::string::npos) << m;
  }
}

// The allocator's accounting by category: a storage counts its requested bytes in the category
// of the scope it was allocated in, until it is freed or moved; peaks restart on reset.
TEST(MemoryCategories, StoragesCountInTheirScopesCategory) {
  const MemoryUsage before = memory_usage(Device::cpu);
  Tensor p, g;
  {
    MemoryCategoryScope params(MemoryCategory::params);
    p = Tensor::empty({100}, DType::f32);  // 400 bytes
    {
      MemoryCategoryScope grads(MemoryCategory::grads);
      g = Tensor::empty({10}, DType::f16);  // 20 bytes
    }
    EXPECT_EQ(current_memory_category(), MemoryCategory::params);
  }
  EXPECT_EQ(current_memory_category(), MemoryCategory::other);
  MemoryUsage u = memory_usage(Device::cpu);
  EXPECT_EQ(u.in_use_of(MemoryCategory::params) - before.in_use_of(MemoryCategory::params), 400u);
  EXPECT_EQ(u.in_use_of(MemoryCategory::grads) - before.in_use_of(MemoryCategory::grads), 20u);
  EXPECT_EQ(u.total_in_use - before.total_in_use, 420u);
  p.storage()->set_category(MemoryCategory::optim);
  u = memory_usage(Device::cpu);
  EXPECT_EQ(u.in_use_of(MemoryCategory::params), before.in_use_of(MemoryCategory::params));
  EXPECT_EQ(u.in_use_of(MemoryCategory::optim) - before.in_use_of(MemoryCategory::optim), 400u);
  reset_memory_peaks(Device::cpu);
  {
    MemoryCategoryScope act(MemoryCategory::activations);
    Tensor a = Tensor::empty({250}, DType::f32);  // 1000 bytes, freed at the end of the scope
  }
  u = memory_usage(Device::cpu);
  EXPECT_EQ(u.peak_of(MemoryCategory::activations) - u.in_use_of(MemoryCategory::activations), 1000u);
  EXPECT_EQ(u.total_peak - u.total_in_use, 1000u);
  p = Tensor(), g = Tensor();
  EXPECT_EQ(memory_usage(Device::cpu).total_in_use, before.total_in_use);
}

// i64 values past 2^53 (dropout seeds, the bit patterns of doubles a graph step uploads) arrive
// exactly: from_vector must not round them through a double
TEST(Tensor, FromVectorKeepsLargeInt64Exactly) {
  const std::vector<int64_t> v = {-2366856370360807331LL, (int64_t{1} << 53) + 1, INT64_MAX, INT64_MIN};
  const Tensor t = Tensor::from_vector(v, {4});
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(t.data<int64_t>()[i], v[i]) << i;
}
