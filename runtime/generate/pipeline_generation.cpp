// Pipelined generation (runtime/generate/generation.h: generate_pipelined).
//
// The batch splits into M micro-batches (contiguous rows), each with its own KV cache. Step i
// (0: the prompt pass, then one new position per row) of micro-batch m runs on stage s at tick
//   τ = i·W + m + s,   W = max(M, P)  (P stages),
// so while stage 1 runs micro-batch 0, stage 0 runs micro-batch 1, and the last stage's tokens of
// (i, m), sent at tick τ + 1 = i·W + m + P, reach stage 0 by its tick (i + 1)·W + m (W ≥ P).
// At every tick each rank issues ONE batch_p2p holding all its transfers of that tick — the
// activation it made at τ − 1 to the next stage, the activation it needs at τ from the previous
// one, the last stage's tokens of τ − 1 to every other stage — and both ends of each transfer
// put it in their batch of the same tick. So under NCCL's rules (SHARDTRAIN_P2P=strict: a send
// completes only once its receive is posted, one batch after another) no order of ranks can
// deadlock: tick τ's batches only wait on each other. A micro-batch whose rows have all ended
// is skipped on every rank alike (each rank has its tokens by then).
#include <algorithm>
#include <chrono>

#include "runtime/generate/generation.h"
#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

constexpr int kActivationTag = 41, kTokenTag = 42;

struct MicroBatch {
  std::vector<std::vector<int64_t>> prompts;
  size_t first_row = 0;
  std::unique_ptr<RowStates> rows;
  std::unique_ptr<KvCache> cache;
  int64_t steps_started = 0;  // on this rank
  bool active(int64_t step) const { return step == 0 || !rows->all_done(); }
};

}  // namespace

GenerationResult generate_pipelined(LanguageModel& stage, const std::shared_ptr<comm::Communicator>& pp,
                                    int64_t hidden, const std::vector<std::vector<int64_t>>& prompts,
                                    const GenerationOptions& opt, Device device, const TokenSink& sink) {
  ST_CHECK(pp, ValueError, "generate: a pipeline needs its pp group");
  ST_CHECK(opt.use_cache, ValueError, "generate: a pipeline always runs with the KV cache (--cache 1)");
  check_prompts(prompts, stage.vocab_size(), stage.context_length());
  NoGradGuard no_grad;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const int P = pp->size(), s = pp->rank();
  ST_CHECK(stage.holds_first() == (s == 0) && stage.holds_last() == (s == P - 1), ValueError,
           "generate: stage " << s << " of " << P << " does not hold its end of the model");
  const DType dtype = stage.parameters().front().dtype();
  const int64_t B = static_cast<int64_t>(prompts.size());
  const int64_t M = std::clamp<int64_t>(opt.micro_batches, 1, B), W = std::max<int64_t>(M, P);
  const int64_t N = std::max<int64_t>(opt.max_new_tokens, 1);  // steps; step 0 always runs (the prompt pass)
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int64_t capacity = std::min<int64_t>(stage.context_length(), static_cast<int64_t>(longest) + opt.max_new_tokens);

  std::vector<MicroBatch> mbs(M);
  for (int64_t m = 0, row = 0; m < M; ++m) {
    const int64_t n = B / M + (m < B % M ? 1 : 0);
    mbs[m].first_row = static_cast<size_t>(row);
    mbs[m].prompts.assign(prompts.begin() + row, prompts.begin() + row + n);
    mbs[m].rows = std::make_unique<RowStates>(mbs[m].prompts, static_cast<size_t>(row), opt, stage.context_length());
    mbs[m].cache = std::make_unique<KvCache>(capacity);
    row += n;
  }
  GenerationResult res;
  res.logits.resize(prompts.size());
  // (step, micro-batch) that stage q runs at tick τ; {-1, -1} when idle or inactive.
  auto work_at = [&](int64_t tau, int q) -> std::pair<int64_t, int64_t> {
    const int64_t k = tau - q;
    if (k < 0) return {-1, -1};
    const int64_t i = k / W, m = k % W;
    if (i >= N || m >= M || !mbs[m].active(i)) return {-1, -1};
    return {i, m};
  };
  auto tokens_len = [&](int64_t step, int64_t m) {  // T of (step, m): its longest prompt, then 1
    size_t t = 1;
    if (step == 0)
      for (const auto& p : mbs[m].prompts) t = std::max(t, p.size());
    return static_cast<int64_t>(t);
  };

  Tensor made;                       // (B_m, T, hidden) this rank's output of the previous tick
  std::pair<int64_t, int64_t> made_by{-1, -1};
  Tensor tokens_out;                 // (B_m) i64, the last stage's tokens of the previous tick
  const int64_t last_tick = (N - 1) * W + (M - 1) + P;
  for (int64_t tau = 0; tau <= last_tick; ++tau) {
    const auto [pi, pm] = work_at(tau, s);
    std::vector<comm::P2POp> ops;
    Tensor received;
    if (s + 1 < P && made_by.first >= 0) ops.push_back(comm::P2POp::send(made, s + 1, kActivationTag));
    if (s > 0 && pi >= 0) {
      const int64_t bm = static_cast<int64_t>(mbs[pm].prompts.size());
      received = Tensor::zeros({bm, tokens_len(pi, pm), hidden}, dtype, device);
      ops.push_back(comm::P2POp::recv(received, s - 1, kActivationTag));
    }
    if (s == P - 1 && made_by.first >= 0)
      for (int q = 0; q + 1 < P; ++q) ops.push_back(comm::P2POp::send(tokens_out, q, kTokenTag));
    const auto [ti, tm] = work_at(tau - 1, P - 1);  // what the last stage finished at τ − 1
    Tensor tokens_in;
    if (s + 1 < P && ti >= 0) {
      tokens_in = Tensor::zeros({static_cast<int64_t>(mbs[tm].prompts.size())}, DType::i64);
      ops.push_back(comm::P2POp::recv(tokens_in, P - 1, kTokenTag));
    }
    if (!ops.empty()) pp->batch_p2p(ops)->wait();
    if (tokens_in.defined()) {  // every stage learns the tokens: stage 0 embeds them, all know which rows ended
      const int64_t* t = tokens_in.data<int64_t>();  // (B_m) on the host
      for (int64_t r = 0; r < tokens_in.numel(); ++r) mbs[tm].rows->accept(static_cast<size_t>(r), t[r], sink);
    }
    made_by = {-1, -1};
    // Stage 0 may have just received (i − 1, m)'s tokens: decide again (for s > 0 nothing of
    // micro-batch m arrived in this tick, so the answer is the one its receive was posted for).
    const auto [i, m] = work_at(tau, s);
    if (i < 0) continue;
    MicroBatch& mb = mbs[m];
    Tensor ids;
    CacheStep step = i == 0 ? prompt_step(mb.prompts, device, &ids) : mb.rows->next_step(device, &ids);
    Tensor out = run_cached_layers(stage, s == 0 ? ids : received, *mb.cache, step);
    if (i == 0 && m == M - 1) res.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
    if (s == P - 1) {
      const std::vector<int64_t> chosen =
          choose_tokens(stage, out, *mb.rows, opt.keep_logits ? &res.logits : nullptr, mb.first_row);
      for (size_t r = 0; r < chosen.size(); ++r) mb.rows->accept(r, chosen[r], sink);
      tokens_out = Tensor::from_vector(chosen, {static_cast<int64_t>(chosen.size())});
    } else {
      made = out.contiguous();
    }
    made_by = {i, m};
  }
  for (auto& mb : mbs) {
    for (auto& g : mb.rows->generated()) res.tokens.push_back(std::move(g));
    res.cache_bytes += mb.cache->bytes();
  }
  res.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

}  // namespace st::runtime
