#include "tests/ops/reference.h"

#include <algorithm>

namespace st::test::ref {
namespace {
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    idx[d] = i % s[d];
    i /= s[d];
  }
  return idx;
}
int64_t ravel_broadcast(const std::vector<int64_t>& idx, const Shape& s) {
  // idx is in the (larger) output space; s aligns to its trailing dims; size-1 dims broadcast
  int64_t off = 0, lead = static_cast<int64_t>(idx.size() - s.size());
  for (size_t d = 0; d < s.size(); ++d) off = off * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
  return off;
}
}  // namespace

Vec binary(const Shape& sa, const Vec& a, const Shape& sb, const Vec& b, const std::function<double(double, double)>& f) {
  size_t n = std::max(sa.size(), sb.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - sa.size() ? 1 : sa[i - (n - sa.size())];
    int64_t db = i < n - sb.size() ? 1 : sb[i - (n - sb.size())];
    out[i] = std::max(da, db);
  }
  Vec y(static_cast<size_t>(shape_numel(out)));
  for (int64_t i = 0; i < static_cast<int64_t>(y.size()); ++i) {
    auto idx = unravel(i, out);
    y[i] = f(a[ravel_broadcast(idx, sa)], b[ravel_broadcast(idx, sb)]);
  }
  return y;
}

Vec reduce(const Shape& s, const Vec& x, const std::vector<int64_t>& dims, bool mean) {
  Shape kept = s;
  int64_t count = 1;
  for (int64_t d : dims) {
    kept[d] = 1;
    count *= s[d];
  }
  Vec y(static_cast<size_t>(shape_numel(kept)), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) y[ravel_broadcast(unravel(i, s), kept)] += x[i];
  if (mean)
    for (auto& v : y) v /= static_cast<double>(count);
  return y;
}

Vec matmul(const Vec& a, const Vec& b, int64_t batch, int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool b_shared) {
  Vec c(static_cast<size_t>(batch * M * N), 0.0);
  for (int64_t p = 0; p < batch; ++p) {
    const double* A = a.data() + p * M * K;
    const double* B = b.data() + (b_shared ? 0 : p * K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += (ta ? A[k * M + i] : A[i * K + k]) * (tb ? B[j * K + k] : B[k * N + j]);
        c[p * M * N + i * N + j] = s;
      }
  }
  return c;
}

}  // namespace st::test::ref
