// CPU op timings (one thread): the GEMM shapes of a GPT-2-sized MLP (512 tokens, C 768, 4C 3072)
// in the three forms forward and backward use, and causal attention forward + backward. Prints
// the median of --reps runs in ms of the thread's CPU time (so that other processes on a shared
// machine do not count) and GFLOP/s for the GEMMs. Used for docs/testing.md's "CPU numerics"
// cost figures.
//   usage: bench_ops_cpu [--reps 9]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"
#include "tensor/rng.h"

using namespace st;

namespace {

double thread_cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double median_ms(int reps, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_cpu_ms();
    fn();
    ms.push_back(thread_cpu_ms() - t0);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Tensor uniform(const Shape& s, uint64_t seed) {
  Tensor t = Tensor::empty(s);
  Generator g(seed);
  fill_uniform(t, g, -1.f, 1.f);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--reps") reps = std::stoi(argv[i + 1]);
  const int64_t M = 512, K = 768, N = 3072;
  Tensor x = uniform({M, K}, 1), w = uniform({K, N}, 2), g = uniform({M, N}, 3);
  struct Case {
    const char* name;
    std::function<Tensor()> fn;
  };
  const std::vector<Case> gemms = {
      {"x·w      (512x768)·(768x3072)", [&] { return ops::matmul(x, w); }},
      {"g·wᵀ     (512x3072)·(3072x768)", [&] { return ops::matmul(g, w, false, true); }},
      {"xᵀ·g     (768x512)·(512x3072)", [&] { return ops::matmul(x, g, true, false); }},
  };
  const double flop = 2.0 * M * K * N;
  for (const Case& c : gemms) {
    const double ms = median_ms(reps, [&] {
      NoGradGuard ng;
      c.fn();
    });
    std::printf("gemm %s: %8.2f ms  %6.1f GFLOP/s\n", c.name, ms, flop / ms / 1e6);
  }
  // attention: B 4, H 12, T 128, D 64 (a GPT-2 head layout at a short context)
  Tensor q = uniform({4, 12, 128, 64}, 4), k = uniform({4, 12, 128, 64}, 5), v = uniform({4, 12, 128, 64}, 6);
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  const double ms = median_ms(reps, [&] {
    Tensor o = ops::causal_attention(q, k, v);
    o.backward(Tensor::ones(o.shape()));
  });
  std::printf("attention fwd+bwd (4,12,128,64): %8.2f ms\n", ms);
  return 0;
}
