// CPU primitives of the tensor core: strided copy with casts, fill, accumulate.
#include <cstring>

#include "tensor/cpu/strided.h"
#include "tensor/device_ops.h"

namespace st::cpu {
namespace {

template <class Fn>
void for_each_index(const Shape& shape, const Shape& dst_strides, const Shape& src_strides, Fn&& fn) {
  for_each_offset<2>(shape, {&dst_strides, &src_strides}, [&](const std::array<int64_t, 2>& o) { fn(o[0], o[1]); });
}

template <class D, class S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (std::is_same_v<D, float> &&
                       (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>)) {
    return to_f32(v);
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
    return to_half(v);
  } else if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
    return to_bf16(v);
  } else {
    return store_from_double<D>(load_as_double(v));
  }
}

}  // namespace

void copy(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    if (dst.nbytes() > 0) std::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes());  // an empty tensor may have no storage
    return;
  }
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.data_ptr());
      const S* s = static_cast<const S*>(src.data_ptr());
      if (dst.is_contiguous() && src.is_contiguous()) {
        const int64_t n = dst.numel();
        for (int64_t i = 0; i < n; ++i) d[i] = convert<D>(s[i]);
      } else {
        for_each_index(dst.shape(), dst.strides(), src.strides(),
                       [&](int64_t od, int64_t os) { d[od] = convert<D>(s[os]); });
      }
    });
  });
}

void fill(const Tensor& dst, double value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T v = store_from_double<T>(value);
    T* d = static_cast<T*>(dst.data_ptr());
    for_each_index(dst.shape(), dst.strides(), dst.strides(), [&](int64_t od, int64_t) { d[od] = v; });
  });
}

void add(const Tensor& dst, const Tensor& src, double alpha) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = decltype(dtag);
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = decltype(stag);
      D* d = static_cast<D*>(dst.data_ptr());
      const S* s = static_cast<const S*>(src.data_ptr());
      if constexpr (std::is_same_v<D, float> && std::is_same_v<S, float>) {
        if (dst.is_contiguous() && src.is_contiguous()) {
          const int64_t n = dst.numel();
          const float a = static_cast<float>(alpha);
          if (alpha == 1.0)
            for (int64_t i = 0; i < n; ++i) d[i] += s[i];
          else
            for (int64_t i = 0; i < n; ++i) d[i] += a * s[i];
          return;
        }
      }
      for_each_index(dst.shape(), dst.strides(), src.strides(), [&](int64_t od, int64_t os) {
        // f16/bf16 accumulate in f32 and round once on store
        float acc = static_cast<float>(load_as_double(d[od])) +
                    static_cast<float>(alpha) * static_cast<float>(load_as_double(s[os]));
        d[od] = store_from_double<D>(acc);
      });
    });
  });
}

}  // namespace st::cpu
