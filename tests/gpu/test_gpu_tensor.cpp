// The CUDA half of the tensor core: caching allocator (reuse, stats, OOM message), copies with
// casts and strides across and on the device, fill, add_, and Philox fills that draw the same
// numbers as the CPU. The contiguous and row fast paths are run on 16-byte aligned tensors and on
// views at an odd element offset (their scalar fallbacks), with guard elements around each view;
// pack_bytes against a host memcpy; a pinned block's download in pieces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "ops/reduce.h"
#include "tensor/cuda/runtime.h"
#include "tensor/device_ops.h"
#include "tensor/pinned.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

using namespace st;

namespace {

// Random values in [-3, 3) of `shape` (integers for i32/i64), cast to dt, on the host.
Tensor host_values(const Shape& shape, DType dt, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty(shape);
  fill_uniform(x, gen, -3.f, 3.f);
  return x.to(dt);
}

// A device view that starts `offset` elements into a zeroed buffer with one guard element after
// it (offset 1 breaks 16-byte alignment for every dtype), holding `values`.
struct Placed {
  Tensor buf, view;
  int64_t offset;
  // The guard elements (the `offset` before the view and the one after) are still zero.
  void expect_guards_zero() const {
    std::vector<double> all = buf.to_double();
    for (int64_t i = 0; i < offset; ++i) EXPECT_EQ(all[i], 0.0) << "guard before the view, element " << i;
    EXPECT_EQ(all.back(), 0.0) << "guard after the view";
  }
};
Placed device_at(const Tensor& values, int64_t offset) {
  Placed p{Tensor::zeros({values.numel() + offset + 1}, values.dtype(), Device::cuda), Tensor(), offset};
  p.view = p.buf.narrow(0, offset, values.numel()).view(values.shape());
  p.view.copy_(values);
  return p;
}

}  // namespace

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

// Keyed fills (initialisation by name): the GPU draws each element's number at the element's
// index in the full tensor, as the CPU does, through an ElementMap (a tp shard's columns with
// padding here); normals agree to a few ulp.
TEST(GpuRng, KeyedFillMatchesTheCpuOnAShard) {
  ElementMap m;
  m.outer = 300, m.local = 40, m.inner = 1, m.full = 96, m.ranges = 2;
  m.start[0] = 8, m.length[0] = 16, m.start[1] = 56, m.length[1] = 16;  // 8 padding columns
  const uint64_t key = stream_key(3, "transformer.h.0.attn.c_attn.weight");
  Tensor c = Tensor::empty({300, 40}), g = Tensor::empty({300, 40}, DType::f32, Device::cuda);
  fill_normal_keyed(c, key, 0.f, 0.02f, m);
  fill_normal_keyed(g, key, 0.f, 0.02f, m);
  std::vector<double> a = c.to_double(), b = g.to_double();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]) / 0.02);
  EXPECT_LE(worst, 1e-5);
  for (int64_t r = 0; r < 300; ++r) EXPECT_EQ(b[static_cast<size_t>(r * 40 + 39)], 0.0);  // padding
}

TEST(GpuCopy, ContiguousCastCopiesAlignedAndAtAnOffset) {
  const DType all[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
  for (int64_t n : {int64_t{1000} * 257, int64_t{16384} * 768 + 5})
    for (DType src : all)
      for (DType dst : all)
        for (int64_t so : {0, 1})
          for (int64_t dof : {0, 3}) {
            const bool big = n > 1000 * 257;  // the large size on float pairs, aligned or both shifted
            if (big && (!is_floating(src) || !is_floating(dst) || (so == 0) != (dof == 0))) continue;
            SCOPED_TRACE(std::string(dtype_name(src)) + " → " + dtype_name(dst) + " n=" + std::to_string(n) +
                         " src offset " + std::to_string(so) + " dst offset " + std::to_string(dof));
            Tensor hv = host_values({n}, src, 5);
            Placed s = device_at(hv, so);
            Placed d = device_at(Tensor::zeros({n}, dst), dof);
            d.view.copy_(s.view);
            EXPECT_EQ(d.view.to_double(), hv.to(dst).to_double());
            d.expect_guards_zero();
          }
}

TEST(GpuCopy, InnerContiguousTransposesMatchTheCpu) {
  // (B, T, H, D) ↔ (B, H, T, D): rows of D elements, vectorised when D and the offsets allow
  for (int64_t D : {64, 7})
    for (DType src : {DType::f32, DType::f16, DType::bf16})
      for (DType dst : {DType::f16, DType::f32})
        for (int64_t so : {0, 1}) {
          SCOPED_TRACE(std::string(dtype_name(src)) + " → " + dtype_name(dst) + " D=" + std::to_string(D) +
                       " src offset " + std::to_string(so));
          Tensor hv = host_values({3, 129, 12, D}, src, 9);
          Placed s = device_at(hv, so);
          Tensor cpu = hv.permute({0, 2, 1, 3}).to(dst).contiguous();
          Tensor dev = s.view.permute({0, 2, 1, 3}).to(dst).contiguous();
          EXPECT_EQ(dev.to_double(), cpu.to_double());
          Placed back = device_at(Tensor::zeros({3, 129, 12, D}, dst), 1);  // into a misaligned permuted view
          back.view.permute({0, 2, 1, 3}).copy_(dev);
          EXPECT_EQ(back.view.to_double(), hv.to(dst).to_double());
          back.expect_guards_zero();
        }
  // a broadcast source (stride 0 outside the rows), as sum's backward copies it
  Tensor row = host_values({1, 2304}, DType::f16, 3);
  Tensor dev = ops::expand(row.to(Device::cuda), {4, 3, 2304});
  EXPECT_EQ(dev.contiguous().to_double(), ops::expand(row, {4, 3, 2304}).contiguous().to_double());
}

TEST(GpuCopy, FillContiguousAlignedAndAtAnOffset) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64})
    for (int64_t n : {int64_t{1000} * 257, int64_t{16384} * 768})
      for (int64_t off : {0, 1, 3}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n) + " offset " + std::to_string(off));
        Placed d = device_at(Tensor::zeros({n}, dt), off);
        d.view.fill_(-2.5);
        Tensor cpu = Tensor::zeros({n}, dt);
        cpu.fill_(-2.5);
        EXPECT_EQ(d.view.to_double(), cpu.to_double());
        d.expect_guards_zero();
      }
  Tensor t = Tensor::zeros({1000, 257}, DType::f16, Device::cuda);  // strided destination
  t.transpose(0, 1).narrow(0, 1, 255).fill_(1.5);
  std::vector<double> v = t.to_double();
  for (int64_t r = 0; r < 1000; r += 111)
    for (int64_t c = 0; c < 257; ++c) EXPECT_EQ(v[r * 257 + c], (c >= 1 && c < 256) ? 1.5 : 0.0) << r << "," << c;
}

TEST(GpuCopy, AddContiguousAlignedAndAtAnOffsetMatchesTheCpu) {
  const std::pair<DType, DType> pairs[] = {{DType::f32, DType::f32}, {DType::f16, DType::f16},
                                           {DType::bf16, DType::bf16}, {DType::f32, DType::f16},
                                           {DType::bf16, DType::f32}, {DType::i64, DType::i32}};
  for (auto [dt, st] : pairs)
    for (int64_t n : {int64_t{1000} * 257, int64_t{16384} * 768 + 3})
      for (int64_t doff : {0, 1})
        for (int64_t soff : {0, 1})
          for (double alpha : {1.0, -0.5}) {
            const bool big = n > 1000 * 257;  // the large size with alpha 1, aligned or both shifted
            if (big && (alpha != 1.0 || doff != soff)) continue;
            SCOPED_TRACE(std::string(dtype_name(dt)) + " += " + dtype_name(st) + " n=" + std::to_string(n) +
                         " offsets " + std::to_string(doff) + "," + std::to_string(soff) +
                         " alpha " + std::to_string(alpha));
            Tensor hd = host_values({n}, dt, 21), hs = host_values({n}, st, 22);
            Placed d = device_at(hd, doff), s = device_at(hs, soff);
            d.view.add_(s.view, alpha);
            Tensor cpu = hd.clone();
            cpu.add_(hs, alpha);
            EXPECT_EQ(d.view.to_double(), cpu.to_double());
            d.expect_guards_zero();
          }
  // strided operands: a transposed source into a narrowed destination
  Tensor hd = host_values({300, 257}, DType::f16, 23), hs = host_values({256, 300}, DType::f16, 24);
  Tensor dd = hd.to(Device::cuda);
  dd.narrow(1, 1, 256).add_(hs.to(Device::cuda).transpose(0, 1));
  Tensor cpu = hd.clone();
  cpu.narrow(1, 1, 256).add_(hs.transpose(0, 1));
  EXPECT_EQ(dd.to_double(), cpu.to_double());
}

// cuda::pack_bytes (the asynchronous checkpoint's one-launch snapshot): pieces whose source and
// destination share their address modulo 16 (the 16-byte path), only modulo 4 (4-byte words),
// neither (bytes); pieces of several 256 KiB chunks with a ragged tail, one byte, none. Every byte
// of the block equals a host memcpy of the same table, the gaps between pieces still zero.
TEST(GpuPackBytes, EveryPieceLandsWhereTheTableSaysAtEverySkew) {
  const int64_t words = 1 << 20;  // a 4 MiB source of random i32
  Generator gen(31);
  Tensor hsrc = Tensor::empty({words});
  fill_uniform(hsrc, gen, -1e9f, 1e9f);
  hsrc = hsrc.to(DType::i32);
  const Tensor dsrc = hsrc.to(Device::cuda);
  const auto* hs = static_cast<const unsigned char*>(hsrc.data_ptr());
  const auto* ds = static_cast<const unsigned char*>(dsrc.data_ptr());
  struct P {
    size_t from, to, bytes;
  };
  const size_t chunk = size_t{256} << 10;
  const std::vector<P> table = {
      {0, 0, 3 * chunk + 100},              // 16-byte path, three whole chunks and a tail
      {16 * 3, 3 * chunk + 112, 5000},      // 16-byte path at another offset
      {4, 3 * chunk + 5120 + 8, chunk + 12},  // skew 4 (src ≡ 4, dst ≡ 8 mod 16): 4-byte words
      {1, 4 * chunk + 6000, chunk + 7},     // skew 1: bytes
      {999, 5 * chunk + 8000, 1},           // one byte
      {77, 5 * chunk + 8100, 0},            // none
      {123, 5 * chunk + 8101, 15},          // shorter than a word, odd addresses
  };
  size_t end = 0;
  std::vector<cuda::BytePiece> pieces;
  for (const P& p : table) {
    pieces.push_back({ds + p.from, p.to, p.bytes});
    end = std::max(end, p.to + p.bytes);
  }
  Tensor block = Tensor::zeros({static_cast<int64_t>((end + 7) / 8)}, DType::i64, Device::cuda);
  cuda::pack_bytes(block.data_ptr(), pieces);
  const Tensor got = block.to(Device::cpu);
  std::vector<unsigned char> want(static_cast<size_t>(got.nbytes()), 0);
  for (const P& p : table) std::memcpy(want.data() + p.to, hs + p.from, p.bytes);
  const auto* g = static_cast<const unsigned char*>(got.data_ptr());
  size_t wrong = 0, first = want.size();
  for (size_t i = 0; i < want.size(); ++i)
    if (g[i] != want[i]) {
      ++wrong;
      first = std::min(first, i);
    }
  EXPECT_EQ(wrong, 0u) << "bytes differing from the host memcpy; the first at " << first;
}

// More pieces than one launch's argument table holds (1 000): 2 500 pieces of 1–64 bytes at
// every skew, packed end to end.
TEST(GpuPackBytes, MorePiecesThanOneLaunchHolds) {
  Generator gen(32);
  Tensor hsrc = Tensor::empty({1 << 16});
  fill_uniform(hsrc, gen, -1e9f, 1e9f);
  hsrc = hsrc.to(DType::i32);
  const Tensor dsrc = hsrc.to(Device::cuda);
  const auto* hs = static_cast<const unsigned char*>(hsrc.data_ptr());
  const auto* ds = static_cast<const unsigned char*>(dsrc.data_ptr());
  std::vector<cuda::BytePiece> pieces;
  size_t at = 0;
  for (size_t k = 0; k < 2500; ++k) {
    const size_t bytes = 1 + (k * 37) % 64, from = (k * 101) % 200000;
    pieces.push_back({ds + from, at, bytes});
    at += bytes;
  }
  Tensor block = Tensor::zeros({static_cast<int64_t>((at + 7) / 8)}, DType::i64, Device::cuda);
  cuda::pack_bytes(block.data_ptr(), pieces);
  const Tensor got = block.to(Device::cpu);
  const auto* g = static_cast<const unsigned char*>(got.data_ptr());
  size_t wrong = 0;
  for (const cuda::BytePiece& p : pieces)
    wrong += std::memcmp(g + p.offset, hs + (static_cast<const unsigned char*>(p.src) - ds), p.bytes) != 0;
  EXPECT_EQ(wrong, 0u) << "pieces differing from the source";
}

// download_on_wait queues nothing until wait(), which copies in kDownloadPiece pieces — from
// another thread here, as the checkpoint's writer does: every byte of a block spanning two whole
// pieces and a ragged third lands at its offset, and the guard bytes before and after stay put.
TEST(GpuPinned, DownloadOnWaitInPiecesFromAnotherThreadLandsEveryByte) {
  constexpr size_t kPiece = cuda::PinnedBuffer::kDownloadPiece;
  const size_t bytes = 2 * kPiece + 12344, offset = 24;  // i32 elements; a ragged last piece
  Generator gen(33);
  Tensor hsrc = Tensor::empty({static_cast<int64_t>(bytes / 4)});
  fill_uniform(hsrc, gen, -1e9f, 1e9f);
  hsrc = hsrc.to(DType::i32);
  const Tensor dsrc = hsrc.to(Device::cuda);
  cuda::PinnedBuffer buf(offset + bytes + 8);
  auto* b = static_cast<unsigned char*>(buf.data());
  std::memset(b, 0xA5, buf.bytes());
  buf.download_on_wait(dsrc.data_ptr(), bytes, offset);
  EXPECT_FALSE(buf.query()) << "the download is deferred to wait()";
  std::thread([&] { buf.wait(); }).join();
  EXPECT_TRUE(buf.query());
  EXPECT_EQ(std::memcmp(b + offset, hsrc.data_ptr(), bytes), 0) << "the downloaded bytes differ from the source";
  for (size_t i = 0; i < offset; ++i) ASSERT_EQ(b[i], 0xA5) << "guard byte " << i << " before the block";
  for (size_t i = offset + bytes; i < buf.bytes(); ++i) ASSERT_EQ(b[i], 0xA5) << "guard byte " << i << " after it";
}
