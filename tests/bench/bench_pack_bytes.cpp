// cuda::pack_bytes (tensor/cuda/pack_bytes.cu), the asynchronous checkpoint's one-launch copy of a
// rank's state into one device block, on GPT-2 124M's AdamW state: every parameter's f32 master,
// m and v (3 × 124.4 M floats, 1.49 GB in 444 pieces), against one device-to-device copy of the
// same bytes (the copy's ceiling). Each moves the bytes once in and once out of HBM, so GB/s here
// is 2 × bytes / time. Twice: the pieces at 16-byte aligned offsets, then as a checkpoint's
// optimizer part laid them out before 2026-12-06 — 8 bytes further (its step count first), so every source and
// destination share their address only modulo 8 (the 4-byte path; snapshot_parts now puts every
// tensor at a 16-byte boundary). Prints the median of REPS after a warm-up.
//   usage: bench_pack_bytes [REPS (10)]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "tensor/cuda/runtime.h"
#include "tensor/device_ops.h"
#include "tensor/tensor.h"

using namespace st;

namespace {

double median_ms(const std::function<void()>& fn, int reps) {
  fn();
  cuda::synchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    cuda::synchronize();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// GPT-2 124M's parameter shapes (V padded to 50 304), in elements
std::vector<int64_t> gpt2_numels() {
  const int64_t C = 768, V = 50304, T = 1024;
  std::vector<int64_t> n{V * C, T * C};
  for (int l = 0; l < 12; ++l)
    for (int64_t k : {C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * 4 * C, 4 * C, 4 * C * C, C}) n.push_back(k);
  n.push_back(C);
  n.push_back(C);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::stoi(argv[1]) : 10;
  std::vector<Tensor> src;
  for (int copy = 0; copy < 3; ++copy)  // master, m, v
    for (int64_t n : gpt2_numels()) src.push_back(Tensor::zeros({n}, DType::f32, Device::cuda));
  for (size_t first : {size_t{0}, size_t{8}}) {
    std::vector<cuda::BytePiece> pieces;
    size_t total = first;
    for (const Tensor& t : src) {
      pieces.push_back({t.data_ptr(), total, t.nbytes()});
      total += t.nbytes();
    }
    Tensor block = Tensor::empty({static_cast<int64_t>((total + 7) / 8)}, DType::i64, Device::cuda);
    Tensor whole = Tensor::zeros({static_cast<int64_t>((total + 7) / 8)}, DType::i64, Device::cuda);
    const double pack = median_ms([&] { cuda::pack_bytes(block.data_ptr(), pieces); }, reps);
    const double copy = median_ms([&] { block.copy_(whole); }, reps);
    const double gb = 2.0 * static_cast<double>(total - first) / 1e9;
    std::printf("pack_bytes, pieces from offset %zu: %zu pieces, %.3f GB: %.3f ms (%.0f GB/s moved)\n", first,
                pieces.size(), (total - first) / 1e9, pack, gb / pack * 1e3);
    std::printf("one device copy of the same bytes: %.3f ms (%.0f GB/s moved); pack / copy %.2f\n", copy,
                gb / copy * 1e3, pack / copy);
  }
  return 0;
}
