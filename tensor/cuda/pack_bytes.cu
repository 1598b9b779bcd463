// cuda::pack_bytes (tensor/device_ops.h): many pieces of device memory into one device block in a
// single launch. The pieces are cut into chunks of kChunk bytes, one thread block per chunk; the
// table holds each piece's first chunk, so a block finds its piece by a binary search over it.
// Within a chunk, 16-byte words move when source and destination share their address modulo 16
// (every piece of a checkpoint's f32 / bf16 tensors at the usual widths), else 4-byte words when
// they share it modulo 4, else single bytes; the bytes before the first whole word and after the
// last one move one at a time.
#include <algorithm>

#include "tensor/cuda/runtime.h"
#include "tensor/device_ops.h"

namespace st::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kChunk = size_t{256} << 10;  // bytes per thread block (a multiple of 16)

struct Entry {
  const unsigned char* src;
  size_t offset;           // into dst
  size_t bytes;
  unsigned long long first;  // the piece's first chunk (blocks before it: the earlier pieces')
};

// n bytes from s to d by this block's threads, in words of W where both share their address
// modulo W (the caller checked), bytes around them.
template <class W>
__device__ void move(unsigned char* d, const unsigned char* s, size_t n) {
  size_t head = (sizeof(W) - reinterpret_cast<uintptr_t>(d) % sizeof(W)) % sizeof(W);
  head = head < n ? head : n;
  for (size_t i = threadIdx.x; i < head; i += blockDim.x) d[i] = s[i];
  const size_t words = (n - head) / sizeof(W);
  W* dw = reinterpret_cast<W*>(d + head);
  const W* sw = reinterpret_cast<const W*>(s + head);
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) dw[i] = sw[i];
  for (size_t i = head + words * sizeof(W) + threadIdx.x; i < n; i += blockDim.x) d[i] = s[i];
}

__global__ void pack_kernel(unsigned char* dst, const Entry* table, int pieces) {
  const unsigned long long b = blockIdx.x;
  int lo = 0, hi = pieces - 1;  // the last entry whose first chunk is ≤ b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first <= b) lo = mid; else hi = mid - 1;
  }
  const Entry e = table[lo];
  const size_t at = static_cast<size_t>(b - e.first) * kChunk;
  const size_t n = e.bytes - at < kChunk ? e.bytes - at : kChunk;
  unsigned char* d = dst + e.offset + at;
  const unsigned char* s = e.src + at;
  const uintptr_t skew = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  if (skew % 16 == 0)
    move<uint4>(d, s, n);
  else if (skew % 4 == 0)
    move<unsigned>(d, s, n);
  else
    move<unsigned char>(d, s, n);
}

}  // namespace

void pack_bytes(void* dst, const std::vector<BytePiece>& pieces) {
  std::vector<Entry> table;
  unsigned long long chunks = 0;
  for (const BytePiece& p : pieces) {
    if (p.bytes == 0) continue;
    table.push_back({static_cast<const unsigned char*>(p.src), p.offset, p.bytes, chunks});
    chunks += (p.bytes + kChunk - 1) / kChunk;
  }
  if (table.empty()) return;
  ST_CHECK(chunks <= 0x7fffffffULL, ValueError, "pack_bytes: " << chunks << " chunks of " << kChunk
                                                                << " bytes exceed one launch's grid");
  cudaStream_t stream = current_stream();
  const size_t table_bytes = table.size() * sizeof(Entry);
  // the table on the device, from the caching allocator (stream-ordered: free to reuse once the
  // kernel ran); a pageable source, so the copy has read it when cudaMemcpyAsync returns
  Tensor on_device = Tensor::empty({static_cast<int64_t>((table_bytes + 7) / 8)}, DType::i64, Device::cuda);
  CHECK_CUDA(cudaMemcpyAsync(on_device.data_ptr(), table.data(), table_bytes, cudaMemcpyHostToDevice, stream));
  pack_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(
      static_cast<unsigned char*>(dst), static_cast<const Entry*>(on_device.data_ptr()), static_cast<int>(table.size()));
  CHECK_LAUNCH();
}

}  // namespace st::cuda
