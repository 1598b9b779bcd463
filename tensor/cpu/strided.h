// Row-major iteration over a shape with K operands of arbitrary strides (0 = broadcast).
// fn receives the K element offsets. Used by copies, fills and the CPU elementwise kernels.
#pragma once
#include <array>
#include <vector>

#include "tensor/tensor.h"

namespace st::cpu {

template <size_t K, class Fn>
void for_each_offset(const Shape& shape, const std::array<const Shape*, K>& strides, Fn&& fn) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::array<int64_t, K> off{};
  if (nd == 0) {
    fn(off);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  const int64_t last = nd - 1, inner = shape[last];
  std::array<int64_t, K> step;
  for (size_t k = 0; k < K; ++k) step[k] = (*strides[k])[last];
  for (int64_t done = 0; done < n; done += inner) {
    std::array<int64_t, K> o = off;
    for (int64_t i = 0; i < inner; ++i) {
      fn(o);
      for (size_t k = 0; k < K; ++k) o[k] += step[k];
    }
    for (int64_t d = last - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (size_t k = 0; k < K; ++k) off[k] += (*strides[k])[d];
        break;
      }
      for (size_t k = 0; k < K; ++k) off[k] -= (shape[d] - 1) * (*strides[k])[d];
      idx[d] = 0;
    }
  }
}

}  // namespace st::cpu
