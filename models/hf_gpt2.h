// Hugging Face GPT-2 interop. A directory written by transformers' save_pretrained holds
// config.json and model.safetensors (HF names — "transformer."-prefixed for GPT2LMHeadModel,
// bare for GPT2Model — and Conv1D (in, out) weights, which is our layout: no transposes).
// Import reads the sizes from config.json and rejects what our GPT does not implement (another
// activation, untied or scaled-differently attention, cross-attention, n_inner ≠ 4C) with a
// ValueError naming the key. lm_head.weight, when present, must equal wte (tied). Legacy
// attention-mask buffers (attn.bias, attn.masked_bias) are ignored. Any float dtype loads (f32).
// The weights may be one model.safetensors or HF's sharded layout (model.safetensors.index.json
// and its files, runtime/io/safetensors_index.h); a model holding part of the GPT (a pipeline
// stage, a tp shard) reads only its tensors, and of a split tensor only its slices.
// Export writes the same two files (lm_head omitted, as save_pretrained writes a tied GPT-2; the
// fixture tests/fixtures/hf_gpt2_tiny has no lm_head.weight either).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "models/gpt.h"
#include "runtime/parallel/state_io.h"

namespace st::models {

// Validated sizes from a config.json object; `where` names the file in errors.
GptConfig gpt_config_from_hf(const nlohmann::json& j, const std::string& where);

// Model in DIR (config.json + the weights).
// dropout ≥ 0 replaces config.json's embd_pdrop and resid_pdrop.
std::shared_ptr<Gpt> load_hf_gpt2(const std::string& dir, std::shared_ptr<Generator> gen, double dropout = -1);

// DIR's weights → `model`'s parameters (a Gpt or TpGpt of DIR's sizes, all its layers or a range):
// HF names with or without "transformer.", legacy buffers ignored, lm_head.weight (when present)
// checked equal to this rank's part of wte. Holding every layer, an unknown tensor is an error.
void load_hf_gpt2_weights(runtime::LanguageModel& model, const std::string& dir);
// The same directory opened for reading in parts, headers checked (names, shapes, unknown tensors),
// nothing read yet: what a ZeRO-3 rank reads its pieces from (runtime/parallel/state_io.h).
runtime::PretrainedSource open_hf_gpt2_weights(const runtime::LanguageModel& model, const std::string& dir);

// Writes DIR/model.safetensors (f32, sorted names, {"format": "pt"}) and DIR/config.json.
void save_hf_gpt2(const Gpt& model, const std::string& dir);

}  // namespace st::models
