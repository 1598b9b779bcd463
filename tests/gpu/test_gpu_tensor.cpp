// The CUDA half of the tensor core: caching allocator (reuse, stats, OOM message), copies with
// casts and strides across and on the device, fill, add_, and Philox fills that draw the same
// numbers as the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "tensor/cuda/runtime.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

using namespace st;

TEST(GpuAllocator, SteadyStateReusesBlocksWithoutMalloc) {
  cuda::synchronize();
  { Tensor warm = Tensor::empty({1000, 257}, DType::f32, Device::cuda); }
  const uint64_t before = cuda::malloc_count();
  const size_t in_use = cuda::bytes_in_use();
  for (int step = 0; step < 20; ++step) {
    Tensor a = Tensor::empty({1000, 257}, DType::f32, Device::cuda);  // same size class every step
    EXPECT_EQ(cuda::bytes_in_use(), in_use + 1000 * 257 * 4);
  }
  EXPECT_EQ(cuda::malloc_count(), before) << "steady state must be served from the cache";
  EXPECT_EQ(cuda::bytes_in_use(), in_use);
  EXPECT_GE(cuda::bytes_peak(), in_use + 1000 * 257 * 4);
}

TEST(GpuAllocator, BlocksAreCachedPerStream) {
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  void* first = nullptr;
  {
    Tensor a = Tensor::empty({4096}, DType::f32, Device::cuda);
    first = a.data_ptr();
  }
  {
    cuda::StreamGuard g(other);  // a freed block of the default stream is not handed to another stream
    Tensor b = Tensor::empty({4096}, DType::f32, Device::cuda);
    EXPECT_NE(b.data_ptr(), first);
  }
  Tensor c = Tensor::empty({4096}, DType::f32, Device::cuda);  // back on the default stream: reused
  EXPECT_EQ(c.data_ptr(), first);
  cuda::synchronize();
  cudaStreamSynchronize(other);
  cudaStreamDestroy(other);
}

TEST(GpuAllocator, OutOfMemoryNamesBytesAskedAndFree) {
  const int64_t huge = int64_t{1} << 50;  // 4 PiB of f32
  try {
    Tensor t = Tensor::empty({huge}, DType::f32, Device::cuda);
    FAIL() << "allocation of 4 PiB succeeded";
  } catch (const OutOfMemoryError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("asked for " + std::to_string(huge * 4) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bytes free"), std::string::npos) << msg;
  }
  Tensor ok = Tensor::ones({10}, DType::f32, Device::cuda);  // the allocator still works
  EXPECT_EQ(ok.to_double()[9], 1.0);
}

TEST(GpuCopy, CastsAndStridesMatchTheCpu) {
  Generator gen(11);
  Tensor x = Tensor::empty({3, 5, 7, 2});
  fill_uniform(x, gen, -3.f, 3.f);
  for (DType src : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64})
    for (DType dst : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
      Tensor xs = x.to(src);
      Tensor cpu = xs.permute({2, 0, 3, 1}).to(dst).contiguous();
      Tensor dev = Tensor::empty(cpu.shape(), dst, Device::cuda);
      dev.copy_(xs.to(Device::cuda).permute({2, 0, 3, 1}));  // strided device copy with a cast
      EXPECT_EQ(dev.to_double(), cpu.to_double()) << dtype_name(src) << " → " << dtype_name(dst);
    }
  // into a strided device destination (a narrow of a transpose)
  Tensor big = Tensor::zeros({7, 9}, DType::f32, Device::cuda);
  Tensor part = big.transpose(0, 1).narrow(0, 2, 5);  // (5, 7) view with strides (1, 9)
  Tensor src = Tensor::arange(35, DType::f32).view({5, 7});
  part.copy_(src);
  std::vector<double> b = big.to_double();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(b[j * 9 + (i + 2)], static_cast<double>(i * 7 + j));
  EXPECT_EQ(b[0], 0.0);
}

TEST(GpuCopy, FillAndAddOnViews) {
  Tensor t = Tensor::zeros({4, 6}, DType::bf16, Device::cuda);
  t.narrow(1, 1, 3).fill_(2.5);
  Tensor one = Tensor::ones({4, 3}, DType::f32, Device::cuda);
  t.narrow(1, 2, 3).add_(one, -0.5);
  std::vector<double> v = t.to_double();
  for (int64_t r = 0; r < 4; ++r) {
    const double expect[6] = {0, 2.5, 2.0, 2.0, -0.5, 0};
    for (int64_t c = 0; c < 6; ++c) EXPECT_EQ(v[r * 6 + c], expect[c]) << r << "," << c;
  }
}

TEST(GpuRng, UniformIsBitIdenticalToTheCpuAndNormalWithinUlps) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Generator gc(42, 1000), gg(42, 1000);
    Tensor c = Tensor::empty({1000, 257}, dt), g = Tensor::empty({1000, 257}, dt, Device::cuda);
    fill_uniform(c, gc, -0.7f, 1.3f);
    fill_uniform(g, gg, -0.7f, 1.3f);
    EXPECT_EQ(gc.offset(), gg.offset());
    EXPECT_EQ(c.to_double(), g.to_double()) << dtype_name(dt);
  }
  Generator gc(7), gg(7);
  Tensor c = Tensor::empty({1000, 257}), g = Tensor::empty({1000, 257}, DType::f32, Device::cuda);
  fill_normal(c, gc, 0.5f, 2.f);
  fill_normal(g, gg, 0.5f, 2.f);
  std::vector<double> a = c.to_double(), b = g.to_double();
  double worst = 0, mean = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(a[i])));
    mean += b[i];
  }
  EXPECT_LE(worst, 1e-5);  // libm vs CUDA logf/cosf: a few ulp
  EXPECT_NEAR(mean / b.size(), 0.5, 0.02);
}
