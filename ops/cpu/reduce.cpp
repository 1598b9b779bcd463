#include <array>
#include <vector>

#include "ops/cpu/common.h"
#include "ops/reduce.h"
#include "tensor/cpu/strided.h"

namespace st::ops::cpu {

// out (keepdim shape, f32) = Σ over the dims where out has size 1 and x does not.
void sum_fwd(const Tensor& x, Tensor& out) {
  Tensor x32 = as_f32(x);
  std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
  Shape ostr = contiguous_strides(out.shape());
  for (int64_t i = 0; i < x.dim(); ++i)
    if (out.shape()[i] == 1) ostr[i] = 0;
  const float* xs = x32.data<float>();
  st::cpu::for_each_offset<2>(x.shape(), {&x32.strides(), &ostr},
                              [&](const std::array<int64_t, 2>& o) { acc[o[1]] += xs[o[0]]; });
  float* d = out.data<float>();
  for (size_t i = 0; i < acc.size(); ++i) d[i] = static_cast<float>(acc[i]);
}

// out[r] = the first v with x[r][v] the largest non-NaN value of row r (0 when there is none).
void argmax_fwd(const Tensor& x, Tensor& out) {
  Tensor x32 = as_f32(x);
  const int64_t R = x.size(0), V = x.size(1);
  const float* xs = x32.data<float>();
  int64_t* o = out.data<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    const float* row = xs + r * V;
    int64_t best = 0;
    bool found = false;
    for (int64_t v = 0; v < V; ++v) {
      if (row[v] != row[v]) continue;  // NaN
      if (!found || row[v] > row[best]) best = v;
      found = true;
    }
    o[r] = best;
  }
}

}  // namespace st::ops::cpu
