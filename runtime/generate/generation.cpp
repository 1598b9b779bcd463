// Generation (runtime/generate/generation.h): token choice, the rows' state, the cached and the
// uncached loop of one process or one tp group. Forward only, under NoGradGuard; logits go to the
// host as floats and the choice is made there in double precision.
#include "runtime/generate/generation.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "ops/reduce.h"
#include "ops/cpu_math/elementary.h"  // exp with the same bits on every CPU (docs/testing.md)
#include "runtime/parallel/tensor_parallel.h"
#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {

int64_t choose_token(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p,
                     std::mt19937_64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  ST_CHECK(V > 0, ValueError, "generate: empty logits");
  if (temperature <= 0) return ops::argmax(Tensor::from_vector(logits, {V})).data<int64_t>()[0];  // the device path's rule
  std::vector<int64_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = (top_k > 0 && top_k < V) ? top_k : V;
  // The k largest, ties by lower index (stable, so the draw is reproducible across platforms).
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  idx.resize(k);
  std::vector<double> p(k);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[i] = ops::cpu::exp_f32(static_cast<float>((logits[idx[i]] - mx) / temperature));
  int64_t n = k;  // nucleus: the shortest prefix whose probability reaches top_p
  if (top_p < 1.0) {
    double acc = 0;
    for (n = 0; n < k;) {
      acc += p[n++];
      if (acc >= top_p * sum) break;
    }
    sum = acc;
  }
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  for (int64_t i = 0; i < n; ++i) {
    if (u < p[i]) return idx[i];
    u -= p[i];
  }
  return idx[n - 1];
}

void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab, int64_t context) {
  ST_CHECK(!prompts.empty(), ValueError, "generate: no prompt");
  for (size_t r = 0; r < prompts.size(); ++r) {
    ST_CHECK(!prompts[r].empty(), ValueError, "generate: prompt " << r << " is empty (it needs at least one token)");
    ST_CHECK(static_cast<int64_t>(prompts[r].size()) <= context, ValueError,
             "generate: prompt " << r << " is " << prompts[r].size() << " tokens, longer than the model's context of "
                                 << context);
    for (int64_t t : prompts[r])
      ST_CHECK(t >= 0 && t < vocab, ValueError,
               "generate: prompt " << r << " holds token id " << t << ", outside the model's vocabulary of " << vocab);
  }
}

// ---- rows ---------------------------------------------------------------------------------------

RowStates::RowStates(const std::vector<std::vector<int64_t>>& prompts, size_t first_row, const GenerationOptions& opt,
                     int64_t context)
    : seq_(prompts), done_(prompts.size(), 0), first_row_(first_row), opt_(opt), context_(context) {
  for (size_t r = 0; r < prompts.size(); ++r) {
    prompt_len_.push_back(prompts[r].size());
    rng_.emplace_back(opt.seed + first_row + r);
    if (opt.max_new_tokens <= 0 || static_cast<int64_t>(prompts[r].size()) >= context) done_[r] = 1;
  }
}

bool RowStates::all_done() const { return std::all_of(done_.begin(), done_.end(), [](char d) { return d != 0; }); }

int64_t RowStates::choose(size_t r, const std::vector<float>& logits) {
  if (done_[r]) return -1;
  return choose_token(logits, opt_.temperature, opt_.top_k, opt_.top_p, rng_[r]);
}

void RowStates::accept(size_t r, int64_t token, const TokenSink& sink) {
  if (done_[r] || token < 0) return;
  if (token == opt_.stop_token) {
    done_[r] = 1;
    return;
  }
  seq_[r].push_back(token);
  if (sink) sink(first_row_ + r, token);
  const int64_t made = static_cast<int64_t>(seq_[r].size() - prompt_len_[r]);
  if (made >= opt_.max_new_tokens || static_cast<int64_t>(seq_[r].size()) >= context_) done_[r] = 1;
}

CacheStep RowStates::next_step(Device device, Tensor* ids) const {
  std::vector<int64_t> start, last_tok;
  for (const auto& s : seq_) {
    start.push_back(static_cast<int64_t>(s.size()) - 1);  // an ended row rewrites its last position, unseen
    last_tok.push_back(s.back());
  }
  *ids = Tensor::from_vector(last_tok, {static_cast<int64_t>(seq_.size()), 1});
  if (device != Device::cpu) *ids = ids->to(device);
  return make_cache_step(start, std::vector<int64_t>(seq_.size(), 1), device);
}

std::vector<std::vector<int64_t>> RowStates::generated() const {
  std::vector<std::vector<int64_t>> out;
  for (size_t r = 0; r < seq_.size(); ++r) out.emplace_back(seq_[r].begin() + prompt_len_[r], seq_[r].end());
  return out;
}

CacheStep prompt_step(const std::vector<std::vector<int64_t>>& prompts, Device device, Tensor* ids) {
  std::vector<int64_t> lens;
  for (const auto& p : prompts) lens.push_back(static_cast<int64_t>(p.size()));
  const int64_t B = static_cast<int64_t>(prompts.size()), T = *std::max_element(lens.begin(), lens.end());
  std::vector<int64_t> flat(static_cast<size_t>(B * T), 0);  // (B, T), padding id 0 (never seen by a real position)
  for (int64_t b = 0; b < B; ++b) std::copy(prompts[b].begin(), prompts[b].end(), flat.begin() + b * T);
  *ids = Tensor::from_vector(flat, {B, T});
  if (device != Device::cpu) *ids = ids->to(device);
  return make_cache_step(std::vector<int64_t>(prompts.size(), 0), lens, device);
}

// ---- the layers on a cache ----------------------------------------------------------------------

namespace {

// x (B, T, C) → each row's wanted position (B, 1, C)
Tensor select_last(const Tensor& x, const CacheStep& step) {
  const int64_t T = x.size(1);
  if (T == 1) return x;
  if (std::all_of(step.last.begin(), step.last.end(), [&](int64_t l) { return l == T - 1; })) return x.narrow(1, T - 1, 1);
  std::vector<Tensor> rows;
  for (size_t b = 0; b < step.last.size(); ++b) rows.push_back(x.narrow(0, static_cast<int64_t>(b), 1).narrow(1, step.last[b], 1));
  return Tensor::cat(rows, 0);
}

// logits (B, 1, V or Vp/tp) → (B, V) on the model's device, gathered over the tp group
Tensor full_logits(const LanguageModel& model, const Tensor& local) {
  Tensor full = local;
  if (auto tp = model.tensor_parallel_group(); tp && tp->size() > 1) full = gather_from_tp(local.contiguous(), tp);
  return full.narrow(-1, 0, model.vocab_size()).reshape({full.size(0), model.vocab_size()});
}

}  // namespace

std::vector<int64_t> choose_tokens(const LanguageModel& model, const Tensor& logits, RowStates& rows,
                                   std::vector<std::vector<std::vector<float>>>* keep, size_t first_row) {
  const Tensor full = full_logits(model, logits);  // (B, V)
  const int64_t B = full.size(0), V = full.size(1);
  std::vector<int64_t> chosen(static_cast<size_t>(B), -1);
  if (rows.options().temperature <= 0 && !keep) {
    const Tensor ids = ops::argmax(full).to(Device::cpu);  // (B) i64
    for (int64_t r = 0; r < B; ++r)
      if (!rows.done(static_cast<size_t>(r))) chosen[r] = ids.data<int64_t>()[r];
    return chosen;
  }
  const std::vector<float> flat = full.contiguous().to_float();  // (B, V) on the host
  for (int64_t r = 0; r < B; ++r) {
    if (rows.done(static_cast<size_t>(r))) continue;
    std::vector<float> row(flat.begin() + r * V, flat.begin() + (r + 1) * V);
    if (keep) (*keep)[first_row + r].push_back(row);
    chosen[r] = rows.choose(static_cast<size_t>(r), row);
  }
  return chosen;
}

Tensor run_cached_layers(LanguageModel& model, const Tensor& x_in, KvCache& cache, const CacheStep& step) {
  Tensor x = x_in;
  const auto& layers = model.layers();
  for (size_t i = 0; i < layers.size(); ++i) {
    // A capability, not a feature's hook: a layer that can run on a KV cache implements
    // CachedLayer beside Layer (every decoder layer does; the seed's Transformer and the MLP do
    // not), and generation asks each layer once per step. The side cast is that question.
    auto* cached = dynamic_cast<CachedLayer*>(layers[i].get());
    ST_CHECK(cached, ValueError,
             "generate: the " << model.family() << " model has no KV cache (layer " << model.global_layer(i)
                              << "); run it without the cache (--cache 0)");
    const int g = model.global_layer(i);
    if (g + 1 == model.total_layers()) x = select_last(x, step);  // the head only on the wanted positions
    x = cached->forward_cached(x, cache.slot(g), step);
  }
  return x;
}

// ---- one process (or one tp group) --------------------------------------------------------------

GenerationResult generate_tokens(LanguageModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerationOptions& opt, Device device, const TokenSink& sink) {
  ST_CHECK(model.holds_all(), ValueError, "generate: a pipeline stage runs generate_pipelined");
  check_prompts(prompts, model.vocab_size(), model.context_length());
  NoGradGuard no_grad;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  GenerationResult res;
  res.logits.resize(prompts.size());
  RowStates rows(prompts, 0, opt, model.context_length());
  auto* keep = opt.keep_logits ? &res.logits : nullptr;
  auto take = [&](const Tensor& logits) {  // the last layer's logits (B, 1, ·) → every live row's next token
    const std::vector<int64_t> chosen = choose_tokens(model, logits, rows, keep, 0);
    for (size_t r = 0; r < rows.size(); ++r) rows.accept(r, chosen[r], sink);
  };
  if (opt.use_cache) {
    size_t longest = 0;
    for (const auto& p : prompts) longest = std::max(longest, p.size());
    KvCache cache(std::min<int64_t>(model.context_length(), static_cast<int64_t>(longest) + opt.max_new_tokens));
    Tensor ids;
    CacheStep step = prompt_step(prompts, device, &ids);
    bool first = true;
    while (!rows.all_done()) {
      take(run_cached_layers(model, ids, cache, step));
      if (first) res.prompt_seconds = std::chrono::duration<double>(clock::now() - t0).count();
      first = false;
      if (rows.all_done()) break;
      step = rows.next_step(device, &ids);
    }
    res.cache_bytes = cache.bytes();
  } else {
    while (!rows.all_done()) {
      for (size_t r = 0; r < rows.size(); ++r) {
        if (rows.done(r)) continue;
        const std::vector<int64_t>& s = rows.sequence(r);
        Tensor ids = Tensor::from_vector(s, {1, static_cast<int64_t>(s.size())});
        if (device != Device::cpu) ids = ids.to(device);
        Tensor out = model.forward(ids);  // (1, T, V or Vp/tp)
        const std::vector<float> lg = full_logits(model, out.narrow(1, out.size(1) - 1, 1)).contiguous().to_float();  // (V)
        if (keep) res.logits[r].push_back(lg);
        rows.accept(r, rows.choose(r, lg), sink);
      }
    }
  }
  res.tokens = rows.generated();
  res.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return res;
}

}  // namespace st::runtime
