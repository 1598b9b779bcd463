// Zero1 under mpirun (np 1–4), and ZeRO-2 (its gradient shards, the same steps): the ownership partition (contiguous, covering, byte-balanced
// against a brute-force optimum, fewer parameters than ranks); buckets that never hold two
// owners' parameters; the reduced gradients after two accumulated backward passes against the
// closed-form sum over ranks, every element, with several buckets launched during the last
// backward, and reduced to the owner only (the others keep their local gradient); broadcast parameters against each owner's closed-form values; f32, f16 and bf16, and
// a communication dtype other than the parameters'. The optimizer state and f32 masters of a GPT
// at dp 2 and 4 against the closed form: each rank's share of the elements, below total/dp + the
// largest parameter, adding up to the total.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <functional>

#include "comm/make_communicator.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "runtime/optim/optimizer.h"
#include "runtime/parallel/zero1.h"
#include "runtime/setup/model_registry.h"
#include "tensor/autograd.h"

using namespace st;
using namespace st::runtime;

namespace {
std::shared_ptr<comm::Communicator> world() {
  static std::shared_ptr<comm::Communicator> w = comm::make_communicator("mpi", std::chrono::seconds(60)).world;
  return w;
}

const std::vector<Shape> kShapes = {{3, 5}, {17}, {4, 4}, {100}, {2, 3, 4}, {9}, {31}};

NamedTensors make_params(size_t count, DType dt) {
  NamedTensors ps;
  for (size_t i = 0; i < count; ++i) {
    Tensor t = Tensor::zeros(kShapes[i % kShapes.size()], dt);
    t.requires_grad_();
    ps.push_back({"layer" + std::to_string(i) + ".w", t});
  }
  return ps;
}

// c_i[j] = factor·((rank + 1)(i + 1) + j mod 5): ∂loss/∂p_i[j] for loss = Σ_i Σ_j p_i[j]·c_i[j]
double coef(int rank, size_t i, int64_t j, double factor) { return factor * ((rank + 1.0) * (i + 1.0) + j % 5); }

Tensor loss_of(const NamedTensors& ps, int rank, double factor) {
  Tensor total;
  for (size_t i = 0; i < ps.size(); ++i) {
    const Tensor& p = ps[i].second;
    std::vector<double> c(static_cast<size_t>(p.numel()));
    for (int64_t j = 0; j < p.numel(); ++j) c[static_cast<size_t>(j)] = coef(rank, i, j, factor);
    Tensor term = ops::sum(ops::mul(p, Tensor::from_vector(c, p.shape()).to(p.dtype())));
    total = total.defined() ? ops::add(total, term.to(DType::f32)) : term.to(DType::f32);
  }
  return total;
}

// value the owner writes into parameter i, element j
double owned_value(int owner, size_t i, int64_t j) { return 100.0 * (owner + 1) + 10.0 * i + j % 7 + 0.25; }

double tol(DType dt, double want) {
  if (dt == DType::bf16) return std::abs(want) / 128.0;
  if (dt == DType::f16) return std::abs(want) / 1024.0;
  return 0.0;
}

// Smallest possible largest run over all cuts of `bytes` into `parts` contiguous non-empty runs.
double brute_force_bottleneck(const std::vector<double>& bytes, int parts) {
  std::function<double(size_t, int)> best = [&](size_t from, int left) -> double {
    if (left == 1) {
      double s = 0;
      for (size_t k = from; k < bytes.size(); ++k) s += bytes[k];
      return s;
    }
    double out = 1e300, run = 0;
    for (size_t k = from; k + left <= bytes.size(); ++k) {
      run += bytes[k];
      out = std::min(out, std::max(run, best(k + 1, left - 1)));
    }
    return out;
  };
  return best(0, parts);
}

std::vector<int> all_ints(int v) {
  std::vector<int> out(static_cast<size_t>(world()->size()));
  MPI_Allgather(&v, 1, MPI_INT, out.data(), 1, MPI_INT, MPI_COMM_WORLD);
  return out;
}

void check_partition(const Zero1& z, const NamedTensors& ps) {
  const int n = world()->size(), rank = world()->rank();
  const int count = static_cast<int>(ps.size());
  // contiguous and covering: runs follow each other from 0 to count
  EXPECT_EQ(z.begin(0), 0);
  EXPECT_EQ(z.end(n - 1), count);
  for (int r = 0; r < n; ++r) {
    EXPECT_LE(z.begin(r), z.end(r));
    if (r + 1 < n) {
      EXPECT_EQ(z.end(r), z.begin(r + 1));
    }
  }
  // each parameter has exactly one owner, the run that holds it
  for (int k = 0; k < count; ++k) {
    int owner = z.owner(ps[static_cast<size_t>(k)].first);
    EXPECT_TRUE(z.begin(owner) <= k && k < z.end(owner)) << ps[static_cast<size_t>(k)].first;
    EXPECT_EQ(z.owns(ps[static_cast<size_t>(k)].first), owner == rank);
  }
  // owned() is this rank's run, in order, the same tensors
  ASSERT_EQ(static_cast<int>(z.owned().size()), z.end(rank) - z.begin(rank));
  for (size_t m = 0; m < z.owned().size(); ++m) {
    EXPECT_EQ(z.owned()[m].first, ps[static_cast<size_t>(z.begin(rank)) + m].first);
    EXPECT_TRUE(z.owned()[m].second.same(ps[static_cast<size_t>(z.begin(rank)) + m].second));
  }
  // every rank agrees on the cut, and the owned counts add up to all parameters
  auto begins = all_ints(z.begin(rank));
  auto owned = all_ints(static_cast<int>(z.owned().size()));
  int total = 0;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(begins[static_cast<size_t>(r)], z.begin(r));
    total += owned[static_cast<size_t>(r)];
  }
  EXPECT_EQ(total, count);
}

// shard: ZeRO-2 (ReducerOptions::shard_gradients): the same sums on the owners, and no gradient
// nor bucket buffer of another owner's parameters left after the reduce.
void run_step(DType dt, size_t count, DType comm_dt, bool shard = false) {
  const int n = world()->size(), rank = world()->rank();
  auto ps = make_params(count, dt);
  ReducerOptions opt;  // buckets of ~200 bytes: several per owner
  opt.first_bucket_bytes = opt.bucket_bytes = 200;
  opt.comm_dtype = comm_dt;
  opt.shard_gradients = shard;
  Zero1 z(ps, world(), opt);
  check_partition(z, ps);
  GradReducer& red = z.reducer();
  // no bucket holds two owners' parameters
  for (int64_t b = 0; b < red.num_buckets(); ++b) {
    const int owner = z.owner(ps[red.bucket_params(b).front()].first);
    for (size_t k : red.bucket_params(b)) EXPECT_EQ(z.owner(ps[k].first), owner) << "bucket " << b << ": " << ps[k].first;
  }

  // two accumulated backward passes, the second one communicating
  z.zero_grad();
  loss_of(ps, rank, 1.0).backward();
  EXPECT_TRUE(red.launches().empty()) << "a micro-batch before the last one communicated";
  z.set_sync(true);
  loss_of(ps, rank, 2.0).backward();
  const size_t in_backward = red.launches().size();
  z.reduce_gradients();
  if (count > 1) {
    EXPECT_GE(in_backward, 1u) << "no bucket launched from the grad-ready hooks";
  }
  for (auto& [name, p] : z.owned()) {
    const size_t i = std::stoul(name.substr(5));
    auto g = p.grad().to_double();
    ASSERT_EQ(static_cast<int64_t>(g.size()), p.numel());
    for (int64_t j = 0; j < p.numel(); ++j) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += coef(r, i, j, 1.0) + coef(r, i, j, 2.0);
      // every rank's accumulated gradient is an integer ≤ 96, exact in every dtype; only the
      // sum over ranks (≤ 384) may round, once, in the comm dtype or the parameters' (tol)
      EXPECT_NEAR(g[static_cast<size_t>(j)], want, std::max(tol(dt, want), tol(comm_dt, want)))
          << name << "[" << j << "]";
    }
  }
  // ZeRO-2: another owner's parameters hold no gradient, their buckets no buffer.
  if (shard) {
    for (size_t i = 0; i < ps.size(); ++i) {
      if (!z.owns(ps[i].first)) {
        EXPECT_FALSE(ps[i].second.grad().defined()) << ps[i].first << ": kept under ZeRO-2";
      }
    }
    for (int64_t b = 0; b < red.num_buckets(); ++b)
      EXPECT_EQ(red.bucket_buffer(b).defined(), z.owns(ps[red.bucket_params(b).front()].first)) << "bucket " << b;
  }
  // Each bucket is reduced to its owner only (comm reduce, not an all-reduce): every parameter this
  // rank does not own still holds this rank's own accumulated gradient, exactly (integers ≤ 96).
  for (size_t i = 0; i < ps.size(); ++i) {
    if (shard || n == 1 || z.owns(ps[i].first)) continue;
    auto g = ps[i].second.grad().to_double();
    for (int64_t j = 0; j < ps[i].second.numel(); ++j)
      ASSERT_EQ(g[static_cast<size_t>(j)], coef(rank, i, j, 1.0) + coef(rank, i, j, 2.0))
          << ps[i].first << "[" << j << "]: a bucket this rank does not own was overwritten (all-reduced?)";
  }
  int64_t total = 0;
  for (auto& [name, p] : ps) total += p.numel();
  if (n > 1) {
    EXPECT_EQ(red.stats().bytes, total * static_cast<int64_t>(dtype_size(comm_dt)));
    EXPECT_EQ(red.stats().reduces, red.num_buckets()) << "every bucket reduced to its owner";
  }

  // owners write closed-form values; broadcast_updates brings them to every rank
  {
    NoGradGuard ng;
    for (auto& [name, p] : z.owned()) {
      const size_t i = std::stoul(name.substr(5));
      std::vector<double> v(static_cast<size_t>(p.numel()));
      for (int64_t j = 0; j < p.numel(); ++j) v[static_cast<size_t>(j)] = owned_value(rank, i, j);
      p.detach().copy_(Tensor::from_vector(v, p.shape()));
    }
  }
  z.broadcast_updates();
  for (size_t i = 0; i < ps.size(); ++i) {
    const Tensor& p = ps[i].second;
    const int owner = z.owner(ps[i].first);
    EXPECT_EQ(p.dtype(), dt);
    auto got = p.to_double();
    for (int64_t j = 0; j < p.numel(); ++j) {
      double want = owned_value(owner, i, j);
      EXPECT_NEAR(got[static_cast<size_t>(j)], want, tol(dt, want)) << ps[i].first << "[" << j << "]";
    }
  }
  if (n > 1) {
    EXPECT_EQ(z.stats().bytes_broadcast, total * static_cast<int64_t>(dtype_size(dt)));
  }

  // the next step starts from zero gradients everywhere (the buffers carried values meanwhile);
  // ZeRO-2: none at all for another owner's parameters
  z.zero_grad();
  for (auto& [name, p] : ps) {
    if (shard && !z.owns(name)) {
      EXPECT_FALSE(p.grad().defined()) << name;
      continue;
    }
    for (double g : p.grad().to_double()) ASSERT_EQ(g, 0.0) << name;
  }
}
}  // namespace

TEST(Zero1, PartitionIsContiguousBalancedAndCovering) {
  const int n = world()->size();
  auto ps = make_params(7, DType::f32);
  Zero1 z(ps, world());
  check_partition(z, ps);
  std::vector<double> bytes;
  for (auto& [name, p] : ps) bytes.push_back(static_cast<double>(p.nbytes()));
  double largest = 0;
  for (int r = 0; r < n; ++r) {
    double run = 0;
    for (int k = z.begin(r); k < z.end(r); ++k) run += bytes[static_cast<size_t>(k)];
    largest = std::max(largest, run);
    EXPECT_GT(run, 0) << "rank " << r << " owns nothing although there are enough parameters";
  }
  EXPECT_EQ(largest, brute_force_bottleneck(bytes, n));
  // default buckets (1 MiB first, then 25 MiB) would hold every parameter: cut once per owner
  GradReducer& red = z.reducer();
  ASSERT_EQ(red.num_buckets(), n);
  for (int64_t b = 0; b < n; ++b) {
    const int owner = n - 1 - static_cast<int>(b);  // reverse registration order: the last run first
    EXPECT_EQ(static_cast<int>(red.bucket_params(b).size()), z.end(owner) - z.begin(owner)) << "bucket " << b;
    for (size_t k : red.bucket_params(b)) EXPECT_EQ(z.owner(ps[k].first), owner) << "bucket " << b;
  }
}

TEST(Zero1, FewerParametersThanRanks) {
  const int n = world()->size(), rank = world()->rank();
  auto ps = make_params(2, DType::f32);
  Zero1 z(ps, world());
  check_partition(z, ps);
  if (n >= 2) {
    EXPECT_EQ(z.owner("layer0.w"), 0);
    EXPECT_EQ(z.owner("layer1.w"), 1);
    EXPECT_EQ(z.owned().size(), rank < 2 ? 1u : 0u);
  }
  EXPECT_THROW(z.owner("nope"), ValueError);
}

TEST(Zero1, StepF32) { run_step(DType::f32, 7, DType::f32); }
TEST(Zero1, StepF16) { run_step(DType::f16, 7, DType::f16); }
TEST(Zero1, StepBf16) { run_step(DType::bf16, 7, DType::bf16); }
TEST(Zero1, StepBf16CommunicatedInF32) { run_step(DType::bf16, 7, DType::f32); }
TEST(Zero1, StepF32CommunicatedInBf16) { run_step(DType::f32, 7, DType::bf16); }
TEST(Zero1, StepWithIdleRanks) { run_step(DType::f32, 2, DType::f32); }
TEST(Zero2, StepF32) { run_step(DType::f32, 7, DType::f32, /*shard=*/true); }
TEST(Zero2, StepBf16) { run_step(DType::bf16, 7, DType::bf16, true); }
TEST(Zero2, StepBf16CommunicatedInF32) { run_step(DType::bf16, 7, DType::f32, true); }
TEST(Zero2, StepF32CommunicatedInBf16) { run_step(DType::f32, 7, DType::bf16, true); }
TEST(Zero2, StepWithIdleRanks) { run_step(DType::f32, 2, DType::f32, true); }

// Optimizer state and masters of a GPT (bf16 compute, so AdamW keeps f32 masters) at dp 2 and 4
// (dp 2 at np 4: two groups of 2): on each rank exactly 8 bytes of state and 4 of master per
// owned element, each rank's elements below total/dp + the largest parameter (parameter
// granularity, zero1.h), the shares adding up to the total.
TEST(Zero1, OptimizerStateAndMastersAreOneDpthOfTheTotal) {
  const int np = world()->size(), rank = world()->rank();
  bool ran = false;
  for (int dp : {2, 4}) {
    if (dp > np || np % dp != 0) continue;
    ran = true;
    auto group = world()->split(rank / dp, rank, "dp" + std::to_string(dp));
    TrainConfig cfg;
    cfg.model = "gpt";
    cfg.layers = 3;
    cfg.d_model = 64;
    cfg.heads = 4;
    cfg.vocab = 256;
    cfg.seq_len = 32;
    cfg.seed = 5;
    auto model = build_model(cfg);
    const NamedTensors ps = model->named_parameters();
    int64_t total = 0, largest = 0;
    for (auto& [name, p] : ps) {
      total += p.numel();
      largest = std::max(largest, p.numel());
    }
    Zero1 z(ps, group);
    AdamW opt(z.owned(), AdamWOptions{}, DType::bf16);
    int64_t state = 0, master = 0;
    for (auto& [key, t] : opt.state_dict()) {
      if (key.rfind("exp_avg", 0) == 0) state += static_cast<int64_t>(t.nbytes());
      if (key.rfind("master.", 0) == 0) master += static_cast<int64_t>(t.nbytes());
    }
    const int me = group->rank();
    const int64_t mine = z.owned_numel(me);
    EXPECT_EQ(state, 8 * mine) << "dp " << dp;
    EXPECT_EQ(master, 4 * mine) << "dp " << dp;
    EXPECT_LT(static_cast<double>(mine), static_cast<double>(total) / dp + static_cast<double>(largest)) << "dp " << dp;
    int64_t sum = 0;
    for (int r = 0; r < dp; ++r) sum += z.owned_numel(r);
    EXPECT_EQ(sum, total) << "dp " << dp;
    if (rank == 0)
      std::printf("dp %d: %lld parameter elements, largest %lld; rank 0 owns %lld (total/dp = %.0f)\n", dp,
                  static_cast<long long>(total), static_cast<long long>(largest), static_cast<long long>(mine),
                  static_cast<double>(total) / dp);
  }
  if (!ran) GTEST_SKIP() << "dp 2 or 4 needs np 2 or 4";
}

TEST(Zero1, RejectsMixedDtypes) {
  auto ps = make_params(2, DType::f32);
  ps[1].second = Tensor::zeros({3}, DType::bf16);
  EXPECT_THROW(Zero1(ps, world()), DTypeError);
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
