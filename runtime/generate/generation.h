// Generation: continues a batch of prompts token by token (`shardtrain generate`).
//
// With the KV cache (the default, for models whose layers are runtime::CachedLayer: the decoders),
// the prompts run through the model once — right-padded to the longest, each row's logits taken
// at its own last position — and every new token then runs one position per row against the
// cache (runtime/nn/kv_cache.h); a row computes exactly what it computes alone. Without it
// (use_cache = false, any model) each row's whole sequence runs through the model again for
// every token, one row at a time (the reference the cache is tested against).
//
// Choice of a token: greedy (temperature 0: the lowest index among equal maxima), else
// softmax(logits / temperature) restricted to the top_k largest (0: all), then to the smallest
// prefix of them, by decreasing probability, whose probability reaches top_p (1: all) — drawn in
// double precision. Row r draws from a std::mt19937_64 seeded seed + r, so a row's draws do not
// depend on the other rows of the batch.
// A row ends at its stop token (not part of the output), after max_new_tokens, or when it fills
// the model's context (no position is left for another token).
//
// A tensor-parallel model (its layers split over tensor_parallel_group()) runs the same calls on
// every tp rank; the logits are gathered over the group, so every tp rank chooses the same tokens.
// A pipeline stage (a model holding some of the layers) runs generate_pipelined
// (runtime/generate/pipeline_generation.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "comm/communicator.h"
#include "runtime/nn/kv_cache.h"
#include "runtime/nn/language_model.h"

namespace st::runtime {

struct GenerationOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // 1: no limit
  int64_t stop_token = -1;   // −1: none
  uint64_t seed = 1;
  bool use_cache = true;
  int64_t micro_batches = 1;  // pipelined: the batch splits into this many (at most one row each)
  bool keep_logits = false;   // fill GenerationResult::logits (tests)
};

struct GenerationResult {
  std::vector<std::vector<int64_t>> tokens;  // per prompt, the new tokens (the stop token excluded)
  int64_t cache_bytes = 0;                   // this rank's KV cache at its largest (0 without cache)
  double prompt_seconds = 0;                 // the prompt pass (with cache; 0 without)
  double seconds = 0;                        // everything, prompt pass included
  // keep_logits, on a rank that chooses tokens: per prompt, the full logits (V) each token was chosen from
  std::vector<std::vector<std::vector<float>>> logits;
};

// Called as each token is chosen (row = the prompt's index), on every rank that knows it.
using TokenSink = std::function<void(size_t row, int64_t token)>;

// One token id from logits (V), as described above.
int64_t choose_token(const std::vector<float>& logits, double temperature, int64_t top_k, double top_p,
                     std::mt19937_64& rng);

// The whole model (or a tp shard of it) on `device`: ValueError for an empty prompt, one longer
// than the context or holding an id outside the vocabulary, and (use_cache) a model without
// cached layers.
GenerationResult generate_tokens(LanguageModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const GenerationOptions& opt, Device device, const TokenSink& sink = {});

// A pipeline stage (pp group rank = stage, stages in layer order; every rank of `pp` calls it
// with the same prompts and options). Activations (B_m, T, hidden) of the model's dtype go stage
// to stage, chosen tokens go from the last stage to every other one (so all ranks know them and
// stage 0 embeds them); micro-batches of the batch overlap across stages. Always with the cache.
GenerationResult generate_pipelined(LanguageModel& stage, const std::shared_ptr<comm::Communicator>& pp,
                                    int64_t hidden, const std::vector<std::vector<int64_t>>& prompts,
                                    const GenerationOptions& opt, Device device, const TokenSink& sink = {});

// ---- pieces shared by the two loops ------------------------------------------------------------

// The layers `model` holds on the cache: ids (B, T) or hidden (B, T, C) in; the hidden state of
// its last layer out, or — when it holds the model's last layer — each row's wanted logits
// (B, 1, V, or this rank's Vp/tp columns), on the model's device.
Tensor run_cached_layers(LanguageModel& model, const Tensor& x, KvCache& cache, const CacheStep& step);
// ValueError naming the problem unless every prompt is non-empty, fits the context and holds
// only ids of the vocabulary.
void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab, int64_t context);

// The state of the rows of a batch: their sequences, whether each has ended, their generators.
class RowStates {
 public:
  RowStates(const std::vector<std::vector<int64_t>>& prompts, size_t first_row, const GenerationOptions& opt,
            int64_t context);
  size_t size() const { return seq_.size(); }
  bool done(size_t r) const { return done_[r]; }
  bool all_done() const;
  // Chooses row r's next token from its logits (V); returns it (or −1 when the row had ended).
  int64_t choose(size_t r, const std::vector<float>& logits);
  const GenerationOptions& options() const { return opt_; }
  // Records row r's token chosen elsewhere (−1: none); calls the sink.
  void accept(size_t r, int64_t token, const TokenSink& sink);
  const std::vector<int64_t>& sequence(size_t r) const { return seq_[r]; }
  // The next step of every row: its last token at its own position (ended rows repeat theirs).
  CacheStep next_step(Device device, Tensor* ids) const;
  std::vector<std::vector<int64_t>> generated() const;

 private:
  std::vector<std::vector<int64_t>> seq_;
  std::vector<size_t> prompt_len_;
  std::vector<char> done_;
  std::vector<std::mt19937_64> rng_;
  size_t first_row_;
  GenerationOptions opt_;
  int64_t context_;
};

// The last layer's logits (B, 1, V or Vp/tp, gathered here over a tp group) → each row's next
// token (−1 for a row that had ended). Greedy: the argmax on the model's device (ops::argmax, the
// same rule as choose_token's), so B ids cross to the host instead of B·V floats (6.4 MB a token
// at batch 32 and GPT-2's vocabulary, which made the loop host-bound). Sampling, or `keep`
// (keep_logits): the logits come to the host, and each live row's are appended to
// (*keep)[first_row + r].
std::vector<int64_t> choose_tokens(const LanguageModel& model, const Tensor& logits, RowStates& rows,
                                   std::vector<std::vector<std::vector<float>>>* keep, size_t first_row);

// Prompts (B) right-padded with id 0 → ids (B, Tmax) on `device`, and the prompt pass's step.
CacheStep prompt_step(const std::vector<std::vector<int64_t>>& prompts, Device device, Tensor* ids);

}  // namespace st::runtime
