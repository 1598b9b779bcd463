// MPI backend on CUDA tensors (label gpu; run under mpirun -np 2 on one GPU, the ranks sharing
// it). test_comm already runs every op and dtype on CUDA tensors at 7 elements ("mpi_cuda"); here:
// odd and aligned sizes, views whose offset breaks 16-byte alignment, f16/bf16 rounding once,
// ordering after the compute stream, several operations in flight, a staging block reused while
// its upload is still queued (on another stream), the staging pool's steady state (no
// page-locked allocation once warm), reduce to a root, no host wait at launch while the stream
// is busy (and issue order kept behind a staged operation), wait_on_stream. Expected values are
// closed forms.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "comm/mpi/mpi_communicator.h"
#include "tensor/cuda/runtime.h"
#include "tensor/pinned.h"
#include "tests/comm/comm_test_util.h"

namespace st::comm::test {
namespace {

constexpr int kOdd = 1000 * 257;    // odd element count
constexpr int kAligned = 16384 * 8;  // multiple of every vector width

class MpiCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(::st::cuda::available()) << "test_comm_mpi_cuda needs a GPU";
    world = MpiCommunicator::dup(MPI_COMM_WORLD, "mpi_cuda", kTestTimeout);
    N = world->size();
    R = world->rank();
  }
  // x_i = (rank + 1)·(i mod 7 + 1): small integers, exact in f16 / bf16 for N ≤ 4.
  std::vector<double> values(int n, int rank) const {
    std::vector<double> x(n);
    for (int i = 0; i < n; ++i) x[i] = (rank + 1) * (i % 7 + 1);
    return x;
  }
  double sum_ranks() const { return N * (N + 1) / 2.0; }  // Σ (r + 1)
  std::shared_ptr<MpiCommunicator> world;
  int N = 0, R = 0;
};

// A contiguous view of n elements starting one element into a larger buffer (offset breaks
// 16-byte alignment), filled with `x`.
Tensor misaligned(const std::vector<double>& x, DType dt) {
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor big = Tensor::zeros({n + 1}, dt, Device::cuda);
  Tensor v = big.narrow(0, 1, n);
  v.copy_(make_tensor(x, dt, Device::cuda));
  return v;
}

TEST_F(MpiCuda, AllReduceSumAvgMaxHalfAndF32) {
  for (int n : {kOdd, kAligned}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      for (bool offset : {false, true}) {
        std::vector<double> x = values(n, R);
        Tensor s = offset ? misaligned(x, dt) : make_tensor(x, dt, Device::cuda);
        Tensor a_in = make_tensor(x, dt, Device::cuda), a = Tensor::zeros({n}, dt, Device::cuda);
        Tensor m = offset ? misaligned(x, dt) : make_tensor(x, dt, Device::cuda);
        WorkPtr w1 = world->all_reduce(s);                       // in place
        WorkPtr w2 = world->all_reduce(a_in, a, ReduceOp::avg);  // out of place, in flight together
        WorkPtr w3 = world->all_reduce(m, ReduceOp::max);
        w1->wait();
        w2->wait();
        w3->wait();
        std::vector<double> gs = s.to_double(), ga = a.to_double(), gm = m.to_double(), gin = a_in.to_double();
        for (int i = 0; i < n; ++i) {
          const double k = i % 7 + 1;
          ASSERT_EQ(gs[i], sum_ranks() * k) << dtype_name(dt) << " n=" << n << " offset " << offset << " i=" << i;
          ASSERT_EQ(ga[i], sum_ranks() * k / N) << dtype_name(dt) << " avg i=" << i;
          ASSERT_EQ(gm[i], N * k) << dtype_name(dt) << " max i=" << i;
          ASSERT_EQ(gin[i], x[i]) << dtype_name(dt) << " input of out-of-place untouched";
        }
      }
    }
  }
}

// f16/bf16 sums accumulate in f32 and round once (as on the CPU): rank 0 holds B, the others 1.
TEST_F(MpiCuda, HalfSumsRoundOnce) {
  for (DType dt : {DType::f16, DType::bf16}) {
    const double big = dt == DType::f16 ? 2048.0 : 256.0;  // ulp 2 here
    Tensor t = make_tensor({R == 0 ? big : 1.0, 0.5}, dt, Device::cuda);
    world->all_reduce(t)->wait();
    const double want = make_tensor({big + (N - 1)}, dt).to_double()[0];
    EXPECT_EQ(t.to_double()[0], want) << dtype_name(dt);
    EXPECT_EQ(t.to_double()[1], 0.5 * N) << dtype_name(dt);
  }
}

TEST_F(MpiCuda, AllGatherBroadcastReduceScatter) {
  for (DType dt : {DType::f32, DType::bf16, DType::i64}) {
    for (int n : {kOdd, kAligned}) {
      std::vector<double> x = values(n, R);
      // all-gather, out of place and in place (this rank's chunk of out is the input).
      Tensor in = make_tensor(x, dt, Device::cuda), out = Tensor::zeros({N * n}, dt, Device::cuda);
      world->all_gather(in, out)->wait();
      Tensor whole = Tensor::zeros({N * n}, dt, Device::cuda);
      Tensor mine = whole.narrow(0, static_cast<int64_t>(R) * n, n);
      mine.copy_(in);
      world->all_gather(mine, whole)->wait();
      std::vector<double> g = out.to_double(), gw = whole.to_double();
      for (int r = 0; r < N; ++r)
        for (int i = 0; i < n; i += 97) {
          ASSERT_EQ(g[r * n + i], (r + 1) * (i % 7 + 1)) << dtype_name(dt) << " r=" << r << " i=" << i;
          ASSERT_EQ(gw[r * n + i], (r + 1) * (i % 7 + 1)) << dtype_name(dt) << " in place r=" << r << " i=" << i;
        }
      // broadcast from the last rank.
      Tensor b = make_tensor(x, dt, Device::cuda);
      world->broadcast(b, N - 1)->wait();
      std::vector<double> gb = b.to_double();
      for (int i = 0; i < n; i += 31) ASSERT_EQ(gb[i], N * (i % 7 + 1)) << dtype_name(dt);
      // reduce-scatter of in_r[j] = (r + 1)(j mod 7 + 1), j < N·n: out[i] = Σ(r+1) · ((R·n + i) mod 7 + 1),
      // out of place and into this rank's own chunk of the input.
      std::vector<double> big = values(N * n, R);
      Tensor rin = make_tensor(big, dt, Device::cuda), rout = Tensor::zeros({n}, dt, Device::cuda);
      world->reduce_scatter(rin, rout)->wait();
      Tensor rin2 = make_tensor(big, dt, Device::cuda);
      Tensor own = rin2.narrow(0, static_cast<int64_t>(R) * n, n);
      world->reduce_scatter(rin2, own, ReduceOp::sum)->wait();
      std::vector<double> gr = rout.to_double(), go = own.to_double();
      for (int i = 0; i < n; ++i) {
        const double want = sum_ranks() * ((static_cast<int64_t>(R) * n + i) % 7 + 1);
        ASSERT_EQ(gr[i], want) << dtype_name(dt) << " i=" << i;
        ASSERT_EQ(go[i], want) << dtype_name(dt) << " into own chunk, i=" << i;
      }
    }
  }
}

TEST_F(MpiCuda, SendRecvRingAndBothDirections) {
  const int next = (R + 1) % N, prev = (R + N - 1) % N;
  for (DType dt : {DType::f32, DType::f16, DType::i32}) {
    Tensor mine = make_tensor(values(kOdd, R), dt, Device::cuda);
    Tensor got = Tensor::zeros({kOdd}, dt, Device::cuda), got2 = Tensor::zeros({kOdd}, dt, Device::cuda);
    world->batch_p2p({P2POp::send(mine, next, 1), P2POp::recv(got, prev, 1), P2POp::send(mine, prev, 2),
                     P2POp::recv(got2, next, 2)})
        ->wait();
    std::vector<double> g = got.to_double(), g2 = got2.to_double();
    for (int i = 0; i < kOdd; i += 13) {
      ASSERT_EQ(g[i], (prev + 1) * (i % 7 + 1)) << dtype_name(dt);
      ASSERT_EQ(g2[i], (next + 1) * (i % 7 + 1)) << dtype_name(dt);
    }
    // Plain send / recv between ranks 0 and 1.
    Tensor t = Tensor::full({kAligned}, R == 0 ? 7.0 : -1.0, dt, Device::cuda);
    if (R == 0) world->send(t, 1, 5)->wait();
    if (R == 1) world->recv(t, 0, 5)->wait();
    if (R <= 1) {
      EXPECT_EQ(t.to_double()[kAligned - 1], 7.0) << dtype_name(dt);
    }
  }
}

// Values written by queued kernels on the compute stream just before the call are the ones
// reduced (the download is ordered on that stream), and later stream work sees the results.
TEST_F(MpiCuda, OrderedAfterComputeStream) {
  const int64_t n = 1 << 24;
  Tensor t = Tensor::zeros({n}, DType::f32, Device::cuda);
  for (int rep = 1; rep <= 3; ++rep) {
    t.fill_(rep);  // asynchronous
    world->all_reduce(t)->wait();
    Tensor twice = t.clone();  // on the stream, after the upload
    twice.add_(t);
    std::vector<float> v = twice.to_float();
    EXPECT_EQ(v.front(), 2.0f * rep * N);
    EXPECT_EQ(v.back(), 2.0f * rep * N);
  }
}

// A staging block goes back to the pool while its upload is still queued (stream A is busy with
// large fills), and the next operation on another stream (B) leases it at once: as the input of
// an all-reduce (the download must wait on the device for A's upload) and as the output of a
// reduce-scatter (MPI must not write it before A's upload read it, a host wait). Without either
// wait, A's upload would carry B's values into `a`.
TEST_F(MpiCuda, BlockReusedWhileItsUploadIsQueued) {
  const int64_t n = 1 << 18;  // 1 MiB of f32: one pool block
  Tensor slow = Tensor::zeros({1 << 26}, DType::f32, Device::cuda);  // 256 MiB to keep A busy
  cudaStream_t b_stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&b_stream, cudaStreamNonBlocking));
  for (int round = 0; round < 4; ++round) {
    const bool as_output = round % 2 == 1;
    Tensor a = Tensor::full({n}, R + 1.0 + round, DType::f32, Device::cuda);
    WorkPtr wa = world->all_reduce(a);
    for (int i = 0; i < 8; ++i) slow.fill_(i);  // queued on A before a's upload
    wa->wait();                                  // enqueues the upload behind the fills
    wa.reset();                                  // the block goes back to the pool
    std::vector<double> got_b;
    {
      ::st::cuda::StreamGuard on_b(b_stream);
      if (!as_output) {
        Tensor b = Tensor::full({n}, 100.0 * (R + 1), DType::f32, Device::cuda);
        world->all_reduce(b)->wait();
        got_b = b.to_double();
      } else {
        Tensor in = Tensor::full({N * n}, 100.0 * (R + 1), DType::f32, Device::cuda);
        Tensor out = Tensor::zeros({n}, DType::f32, Device::cuda);
        world->reduce_scatter(in, out)->wait();
        got_b = out.to_double();
      }
      ::st::cuda::synchronize();
    }
    std::vector<double> got_a = a.to_double();
    EXPECT_EQ(got_a.front(), sum_ranks() + N * round) << "round " << round;
    EXPECT_EQ(got_a.back(), sum_ranks() + N * round) << "round " << round;
    EXPECT_EQ(got_b.front(), 100.0 * sum_ranks()) << "round " << round;
    EXPECT_EQ(got_b.back(), 100.0 * sum_ranks()) << "round " << round;
  }
  CHECK_CUDA(cudaStreamDestroy(b_stream));
}

// reduce to the first and the last rank, in place and out of place, at odd and aligned sizes and
// on misaligned views: the root's out is Σ (r+1)·(i mod 7 + 1) (avg: / N), the others' out keeps
// its fill.
TEST_F(MpiCuda, ReduceToRoot) {
  for (int n : {kOdd, kAligned}) {
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i64}) {
      for (int root : {0, N - 1}) {
        for (bool in_place : {false, true}) {
          std::vector<double> x = values(n, R);
          Tensor in = in_place ? misaligned(x, dt) : make_tensor(x, dt, Device::cuda);
          Tensor out = in_place ? in : Tensor::full({n}, -1.0, dt, Device::cuda);
          const ReduceOp op = is_floating(dt) && root == N - 1 ? ReduceOp::avg : ReduceOp::sum;
          world->reduce(in, out, root, op)->wait();
          std::vector<double> got = out.to_double();
          for (int i = 0; i < n; i += 7) {
            const double k = i % 7 + 1;
            const double want = R != root ? (in_place ? x[i] : -1.0)
                                : op == ReduceOp::avg ? sum_ranks() * k / N
                                                      : sum_ranks() * k;
            ASSERT_EQ(got[i], want) << dtype_name(dt) << " n=" << n << " root " << root << " in_place " << in_place
                                    << " i=" << i;
          }
        }
      }
    }
  }
}

// Launching a staged operation does not wait for the stream on the host: with 200 fills of 256 MiB
// queued on the current stream, all_reduce() returns long before they ran, and the values
// reduced are those the last queued fill wrote. Rank 0 then issues a CPU all-reduce behind it
// (rank 1 has no queue): were it posted before the staged one, MPI would pair rank 0's CPU
// operation with rank 1's staged one (same size and dtype) and both sums would be wrong.
TEST_F(MpiCuda, NoHostWaitAtLaunchAndIssueOrderKept) {
  if (world->cuda_aware()) GTEST_SKIP() << "CUDA-aware MPI: device pointers, no staging";
  const int64_t n = 1 << 16;
  Tensor slow = Tensor::zeros({1 << 26}, DType::f32, Device::cuda);  // 256 MiB
  Tensor t = Tensor::zeros({n}, DType::f32, Device::cuda);
  // the time of the fills alone, measured once
  ::st::cuda::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 200; ++i) slow.fill_(i);
  ::st::cuda::synchronize();
  const double fills_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (int round = 0; round < 3; ++round) {
    world->barrier()->wait();
    if (R == 0)
      for (int i = 0; i < 200; ++i) slow.fill_(i);
    t.fill_(R + 1.0 + round);  // behind the fills on rank 0
    t0 = std::chrono::steady_clock::now();
    WorkPtr staged = world->all_reduce(t);
    const double issue_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    Tensor host = Tensor::full({n}, 100.0 * (R + 1), DType::f32);
    WorkPtr cpu = world->all_reduce(host);
    if (R == 0) {
      EXPECT_LT(issue_ms, fills_ms / 4) << "the launch waited for the stream (" << fills_ms << " ms of fills queued)";
    }
    cpu->wait();
    staged->wait();
    EXPECT_EQ(t.to_double().back(), sum_ranks() + N * round) << "round " << round;
    EXPECT_EQ(host.to_double().back(), 100.0 * sum_ranks()) << "round " << round;
  }
}

// wait_on_stream on the MPI backend is wait(): complete afterwards, results visible to later
// stream work.
TEST_F(MpiCuda, WaitOnStreamIsWait) {
  Tensor t = Tensor::full({kOdd}, R + 1.0, DType::f32, Device::cuda);
  WorkPtr w = world->all_reduce(t);
  w->wait_on_stream();
  EXPECT_TRUE(w->is_completed());
  Tensor twice = t.clone();
  twice.add_(t);
  EXPECT_EQ(twice.to_double().back(), 2.0 * sum_ranks());
}

// A training-like step: several bucket all-reduces in flight at once, an all-gather, a
// reduce-scatter, f16 and f32. After two warm-up steps the pool allocates nothing more.
TEST_F(MpiCuda, StagingPoolDoesNotGrowInSteadyState) {
  std::vector<Tensor> buckets{Tensor::zeros({kOdd}, DType::f32, Device::cuda),
                              Tensor::zeros({kAligned}, DType::f32, Device::cuda),
                              Tensor::zeros({kAligned}, DType::f16, Device::cuda),
                              Tensor::zeros({3 * kAligned + 5}, DType::bf16, Device::cuda)};
  Tensor shard = Tensor::zeros({kOdd}, DType::f32, Device::cuda), full = Tensor::zeros({N * kOdd}, DType::f32, Device::cuda);
  auto step = [&](int s) {
    std::vector<WorkPtr> works;
    for (Tensor& b : buckets) {
      b.fill_(R + s);
      works.push_back(world->all_reduce(b, ReduceOp::avg));
    }
    for (auto& w : works) w->wait();
    world->reduce_scatter(full, shard)->wait();
    world->all_gather(shard, full)->wait();
    for (Tensor& b : buckets) ASSERT_EQ(b.to_double().back(), s + (N - 1) / 2.0) << b.describe();
  };
  step(0);
  step(1);
  const uint64_t pool_allocs = world->staging_allocations(), pinned = ::st::cuda::pinned_alloc_count();
  const size_t held = world->staging_bytes();
  if (!world->cuda_aware()) {
    EXPECT_GT(pool_allocs, 0u);
    // At most a few blocks: the 4 buckets (plus f32 widenings of 2) in flight, then 2 for the others.
    EXPECT_LE(pool_allocs, 8u);
  }
  for (int s = 2; s < 12; ++s) step(s);
  EXPECT_EQ(world->staging_allocations(), pool_allocs);
  EXPECT_EQ(::st::cuda::pinned_alloc_count(), pinned);
  EXPECT_EQ(world->staging_bytes(), held);
}

}  // namespace
}  // namespace st::comm::test
