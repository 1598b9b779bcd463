// cuda::pack_bytes (tensor/device_ops.h): many pieces of device memory into one device block in a
// single launch. The pieces are cut into chunks of kChunk bytes, one thread block per chunk; the
// table holds each piece's first chunk, so a block finds its piece by a binary search over it.
// The table travels as the kernel's argument (up to kTable pieces in ~32 KB, the launch limit
// since CUDA 12.1; more pieces take more launches): no upload, so no host wait — a pageable
// host-to-device copy would wait for the stream to drain first.
// Within a chunk, 16-byte words move when source and destination share their address modulo 16
// (every piece of a checkpoint's f32 / bf16 tensors at the usual widths), else 4-byte words when
// they share it modulo 4, else single bytes; the bytes before the first whole word and after the
// last one move one at a time.
#include <memory>

#include "tensor/cuda/runtime.h"
#include "tensor/device_ops.h"

namespace st::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kChunk = size_t{256} << 10;  // bytes per thread block (a multiple of 16)
constexpr int kTable = 1000;                   // pieces per launch: 32 000 of the 32 764 argument bytes

struct Entry {
  const unsigned char* src;
  size_t offset;           // into dst
  size_t bytes;
  unsigned long long first;  // the piece's first chunk (blocks before it: the earlier pieces')
};
struct Table {
  Entry e[kTable];
  int n;
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

__global__ void pack_kernel(unsigned char* dst, const __grid_constant__ Table table) {
  const unsigned long long b = blockIdx.x;
  int lo = 0, hi = table.n - 1;  // the last entry whose first chunk is ≤ b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.e[mid].first <= b) lo = mid; else hi = mid - 1;
  }
  const Entry e = table.e[lo];
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
  cudaStream_t stream = current_stream();
  auto table = std::make_unique<Table>();  // 32 KB: not on the stack
  size_t k = 0;
  while (k < pieces.size()) {
    table->n = 0;
    unsigned long long chunks = 0;
    for (; k < pieces.size() && table->n < kTable; ++k) {
      const BytePiece& p = pieces[k];
      if (p.bytes == 0) continue;
      table->e[table->n++] = {static_cast<const unsigned char*>(p.src), p.offset, p.bytes, chunks};
      chunks += (p.bytes + kChunk - 1) / kChunk;
    }
    if (table->n == 0) continue;
    ST_CHECK(chunks <= 0x7fffffffULL, ValueError, "pack_bytes: " << chunks << " chunks of " << kChunk
                                                                  << " bytes exceed one launch's grid");
    pack_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(static_cast<unsigned char*>(dst), *table);
    CHECK_LAUNCH();
  }
}

}  // namespace st::cuda
