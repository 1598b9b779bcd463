// GradReducer under mpirun: bucket layout, the reduced gradient in closed form, accumulation
// over micro-batches without communication, bf16 communication, and hooks that launch buckets
// during backward (before finalize).
#include <gtest/gtest.h>
#include <mpi.h>

#include "comm/make_communicator.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/parallel/grad_reducer.h"
#include "tensor/autograd.h"

using namespace st;
using namespace st::runtime;

namespace {
std::shared_ptr<comm::Communicator> world() {
  static std::shared_ptr<comm::Communicator> w = comm::make_communicator("mpi", std::chrono::seconds(60)).world;
  return w;
}

std::vector<std::pair<std::string, Tensor>> make_params() {
  std::vector<std::pair<std::string, Tensor>> ps;
  for (int i = 0; i < 4; ++i) {
    Tensor t = Tensor::zeros({64, 64});  // 16 KB each
    t.requires_grad_();
    std::string name = "p";
    name += std::to_string(i);
    ps.push_back({name, t});
  }
  return ps;
}

// loss = Σ_i Σ (p_i · c_i) with c_i = (rank + 1)·(i + 1): ∂loss/∂p_i = (rank + 1)(i + 1)
Tensor loss_of(const std::vector<std::pair<std::string, Tensor>>& ps, int rank, double factor = 1.0) {
  Tensor total;
  for (size_t i = 0; i < ps.size(); ++i) {
    Tensor c = Tensor::full({64, 64}, factor * (rank + 1) * (i + 1));
    Tensor term = ops::sum(ops::mul(ps[i].second, c));
    total = total.defined() ? ops::add(total, term) : term;
  }
  return total;
}
}  // namespace

TEST(GradReducer, BucketsInReverseOrderWithSmallFirstBucket) {
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = 16384;  // one parameter
  opt.bucket_bytes = 3 * 16384;
  GradReducer r(ps, world(), opt);
  ASSERT_EQ(r.num_buckets(), 2);
  EXPECT_EQ(r.bucket_names(0), (std::vector<std::string>{"p3"}));
  EXPECT_EQ(r.bucket_names(1), (std::vector<std::string>{"p2", "p1", "p0"}));
}

TEST(GradReducer, SumsOverRanksAndAccumulates) {
  const int n = world()->size(), rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.first_bucket_bytes = 16384;
  opt.bucket_bytes = 2 * 16384;
  GradReducer r(ps, world(), opt);
  r.zero_grad();
  // two micro-batches: the first accumulates locally, the second communicates
  r.set_sync(false);
  loss_of(ps, rank).backward();
  r.set_sync(true);
  loss_of(ps, rank, 2.0).backward();
  EXPECT_GE(r.stats().buckets_launched, n > 1 ? 1 : 0) << "buckets should launch during backward";
  r.finalize();
  const double ranks_sum = n * (n + 1) / 2.0;  // Σ (rank + 1)
  for (size_t i = 0; i < ps.size(); ++i) {
    auto g = ps[i].second.grad().to_double();
    double want = 3.0 * ranks_sum * (i + 1);  // (1 + 2)·Σ(rank+1)·(i+1)
    EXPECT_EQ(g.front(), want) << ps[i].first;
    EXPECT_EQ(g.back(), want) << ps[i].first;
  }
  // next step starts from zero
  r.zero_grad();
  EXPECT_EQ(ps[0].second.grad().to_double()[0], 0.0);
}

TEST(GradReducer, Bf16CommunicationWithinOnePercent) {
  const int n = world()->size(), rank = world()->rank();
  auto ps = make_params();
  ReducerOptions opt;
  opt.comm_dtype = DType::bf16;
  GradReducer r(ps, world(), opt);
  r.zero_grad();
  r.set_sync(true);
  loss_of(ps, rank, 1.001).backward();
  r.finalize();
  const double ranks_sum = n * (n + 1) / 2.0;
  for (size_t i = 0; i < ps.size(); ++i) {
    double want = 1.001 * ranks_sum * (i + 1);
    EXPECT_NEAR(ps[i].second.grad().to_double()[7], want, 0.01 * want);
  }
}

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
