// sgemm (ops/cpu/sgemm.h): Eigen's general_matrix_matrix_product, the routine behind its large
// products, called directly with a blocking of our own instead of computeProductBlockingSizes'
// cache-derived one, and without Eigen's OpenMP split (info = nullptr: sequential even in a build
// with OpenMP). Block sizes were measured on the 512×768×3072 GEMMs of tests/bench/bench_ops_cpu:
// kc 128…512, mc 256…1024 and nc 512…4096 all ran within 5 % of each other and of Eigen's own choice.
#include "ops/cpu/sgemm.h"

#include "tensor/error.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>

namespace st::ops::cpu {
namespace {

using Eigen::Index;

// In Eigen's column-major view of the product (see run): kc the depth of one packed panel (each
// dot product is summed in blocks of kc, ascending), mc the rows of one packed lhs block, nc the
// columns of one packed rhs block.
constexpr Index kKc = 256, kMc = 512, kNc = 1024;
std::atomic<Index> g_kc{kKc};  // kKc, unless a test reorders the sums (sgemm_set_depth_block)

// Our sizes, each clipped to its dimension: that leaves the partition (blocks from 0 in steps of
// the size) unchanged and keeps the packing buffers small for small products. blockA/blockB stay
// null, so general_matrix_matrix_product allocates aligned packing buffers for the call.
class FixedBlocking : public Eigen::internal::level3_blocking<float, float> {
 public:
  FixedBlocking(Index rows, Index cols, Index depth) {
    this->m_mc = std::min(rows, kMc);
    this->m_nc = std::min(cols, kNc);
    this->m_kc = std::min(depth, g_kc.load(std::memory_order_relaxed));
  }
};

// c (M, N) row-major += lhs (M, K) · rhs (K, N), lhs/rhs in the given storage orders. Eigen computes
// a row-major result as the column-major product cᵀ = rhsᵀ·lhsᵀ: its rows are our N and its
// columns our M, which is how the blocking is built.
template <int LhsOrder, int RhsOrder>
void run(const float* a, Index lda, const float* b, Index ldb, float* c, Index M, Index N, Index K) {
  FixedBlocking blocking(N, M, K);
  Eigen::internal::general_matrix_matrix_product<Index, float, LhsOrder, false, float, RhsOrder, false,
                                                 Eigen::RowMajor, 1>::run(M, N, K, a, lda, b, ldb, c, 1, N, 1.f,
                                                                          blocking, nullptr);
}

}  // namespace

int64_t sgemm_set_depth_block(int64_t kc) {
  ST_CHECK(kc >= 1, ValueError, "sgemm_set_depth_block: kc " << kc << " must be ≥ 1");
  return g_kc.exchange(kc);
}

void sgemm(const float* a, bool ta, const float* b, bool tb, float* c, int64_t M, int64_t N, int64_t K,
           bool accumulate) {
  if (!accumulate) std::fill_n(c, M * N, 0.f);
  if (M == 0 || N == 0 || K == 0) return;
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  // op(a) (M, K): row-major with stride K, or a (K, M) row-major read transposed = column-major, stride M
  // op(b) (K, N): row-major with stride N, or b (N, K) row-major read transposed = column-major, stride K
  if (!ta && !tb)
    run<R, R>(a, K, b, N, c, M, N, K);
  else if (ta && !tb)
    run<C, R>(a, M, b, N, c, M, N, K);
  else if (!ta && tb)
    run<R, C>(a, K, b, K, c, M, N, K);
  else
    run<C, C>(a, M, b, K, c, M, N, K);
}

}  // namespace st::ops::cpu
