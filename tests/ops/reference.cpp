#include "tests/ops/reference.h"

#include <algorithm>
#include <cmath>

#include "tensor/philox.h"

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

Vec gelu(const Vec& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = 0.5 * x[i] * (1.0 + std::tanh(k * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return y;
}

Vec relu(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? x[i] : 0.0;
  return y;
}

Vec softmax(const Vec& x, int64_t C, bool log) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, x[r * C + c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(x[r * C + c] - mx);
    for (int64_t c = 0; c < C; ++c)
      y[r * C + c] = log ? x[r * C + c] - mx - std::log(s) : std::exp(x[r * C + c] - mx) / s;
  }
  return y;
}

Vec cross_entropy(const Vec& logits, int64_t V, const std::vector<int64_t>& targets, int64_t ignore) {
  Vec lsm = softmax(logits, V, true);
  double total = 0;
  int64_t count = 0;
  for (size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] == ignore) continue;
    total -= lsm[n * V + targets[n]];
    ++count;
  }
  return {total / static_cast<double>(count)};
}

Vec layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t C, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mu += x[r * C + c];
    mu /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) var += (x[r * C + c] - mu) * (x[r * C + c] - mu);
    var /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (x[r * C + c] - mu) / std::sqrt(var + eps) * w[c] + b[c];
  }
  return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, int64_t C, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / C; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < C; ++c) ms += x[r * C + c] * x[r * C + c];
    ms /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = w[c] * x[r * C + c] / std::sqrt(ms + eps);
  }
  return y;
}

Vec silu(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / (1.0 + std::exp(-x[i]));
  return y;
}

Vec swiglu(const Vec& gu, int64_t F) {
  const size_t rows = gu.size() / (2 * F);
  Vec y(rows * F);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[r * 2 * F + f], u = gu[r * 2 * F + F + f];
      y[r * F + f] = g / (1.0 + std::exp(-g)) * u;
    }
  return y;
}

Vec embedding(const Vec& weight, int64_t C, const std::vector<int64_t>& idx) {
  Vec y;
  for (int64_t t : idx)
    for (int64_t c = 0; c < C; ++c) y.push_back(weight[t * C + c]);
  return y;
}

Vec causal_attention(const Vec& q, const Vec& k, const Vec& v, int64_t BH, int64_t T, int64_t D) {
  Vec out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t i = 0; i < BH; ++i) {
    const int64_t o = i * T * D;
    for (int64_t t = 0; t < T; ++t) {
      Vec sc(static_cast<size_t>(t + 1));
      double mx = -INFINITY, sum = 0;
      for (int64_t s = 0; s <= t; ++s) {
        double d = 0;
        for (int64_t j = 0; j < D; ++j) d += q[o + t * D + j] * k[o + s * D + j];
        sc[s] = d * scale;
        mx = std::max(mx, sc[s]);
      }
      for (int64_t s = 0; s <= t; ++s) sum += (sc[s] = std::exp(sc[s] - mx));
      for (int64_t s = 0; s <= t; ++s)
        for (int64_t j = 0; j < D; ++j) out[o + t * D + j] += sc[s] / sum * v[o + s * D + j];
    }
  }
  return out;
}

Vec dropout(const Vec& x, double p, uint64_t seed, uint64_t offset) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = philox_uniform_lane(seed, offset + i) < p ? 0.0 : x[i] / (1.0 - p);
  return y;
}

}  // namespace st::test::ref
