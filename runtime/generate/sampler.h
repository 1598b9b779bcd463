// Sampler: loads a model from a checkpoint for `shardtrain generate` (runtime/generate/generation.h
// is its loop), and the plain uncached loop over one prompt that the generation is checked against.
//
// Checkpoints: ours (DIR/step_N/ or DIR itself: the newest complete step_* inside it, passing
// over incomplete ones — runtime/io/checkpoint_dir.h) hold the weights
// (model.safetensors, or HF's sharded model.safetensors.index.json and its files) and
// state.json whose "model" entry is {"family", "config"} (the model registry rebuilds the shape
// from it; tensor names must match exactly); a Hugging Face save_pretrained directory (config.json
// and the weights, no state.json) loads through its model_type's pretrained loader (HF names,
// legacy buffers, the tied lm_head). A missing or unexpected tensor is a ValueError naming it.
// Every read is checked as a resume checks it: state.json's checksum, config.json against
// state.json's model, each file's header against state.json's record, every chunk read against
// its checksum (runtime/io/safetensors.h); and every weight, with or without checksums, finite.
// A model whose f32 weights exceed this machine's available memory is refused before it is built.
//
// generate() here runs the whole
// window (the last context_length tokens) through the model for every new token: no KV cache,
// fine for the small models this samples from. Greedy (temperature 0) is deterministic and takes
// the lowest index among equal maxima; otherwise softmax(logits / temperature) over the top-k
// logits (k = 0: all), drawn with a std::mt19937_64 seeded by --seed (same seed, same text).
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/nn/language_model.h"
#include "runtime/setup/model_registry.h"

namespace st::runtime {

// The model in `dir` (see above), in eval mode on the CPU: `build`'s layers and tp shard of it
// (each rank reads only its part of the files). `resolved` (optional) receives the directory
// the weights came from, `note` the line on incomplete checkpoints passed over ("" for none).
// allow_unchecked: one of ours without checksums is read as it is (generate --allow-unchecked 1).
std::shared_ptr<LanguageModel> load_model_for_sampling(const std::string& dir, std::string* resolved = nullptr,
                                                       const ModelBuild& build = {}, std::string* note = nullptr,
                                                       bool allow_unchecked = false);

// One token id from logits (V): argmax when temperature == 0.
int64_t pick_token(const std::vector<float>& logits, double temperature, int64_t top_k, std::mt19937_64& rng);

// `prompt` ids (non-empty) followed by `n` generated ids; returns only the generated ids.
std::vector<int64_t> generate(LanguageModel& model, const std::vector<int64_t>& prompt, int64_t n,
                              double temperature, int64_t top_k, uint64_t seed, Device device = Device::cpu);

}  // namespace st::runtime
