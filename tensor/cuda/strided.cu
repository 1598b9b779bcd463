#include "tensor/cuda/strided.cuh"

#include <vector>

namespace st::cuda {

Strided2 make_strided2(const Shape& shape, const Shape& s0, const Shape& s1, const char* op) {
  // keep dims of size > 1, outermost first
  std::vector<int64_t> sh, a, b;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!sh.empty() && a.back() == s0[d] * shape[d] && b.back() == s1[d] * shape[d]) {
      sh.back() *= shape[d];  // merge with the outer dim: contiguous in both operands
      a.back() = s0[d];
      b.back() = s1[d];
      continue;
    }
    sh.push_back(shape[d]);
    a.push_back(s0[d]);
    b.push_back(s1[d]);
  }
  if (sh.size() > static_cast<size_t>(kMaxDims))
    ST_THROW(ShapeError, op << ": CUDA strided kernels take up to " << kMaxDims << " non-mergeable dims, got "
                            << sh.size() << " for shape " << shape_str(shape));
  Strided2 r;
  r.nd = static_cast<int>(sh.size());
  for (int d = 0; d < r.nd; ++d) {
    r.shape[d] = sh[d];
    r.s0[d] = a[d];
    r.s1[d] = b[d];
  }
  return r;
}

}  // namespace st::cuda
