// The decoder model: layers from the description, init by name, the losses, tp shards by name.
#include "models/decoder/decoder.h"

#include <cmath>
#include <set>

#include "models/decoder/decoder_tp_plan.h"
#include "ops/lm_head_loss.h"
#include "runtime/parallel/tp_shard.h"
#include "tensor/autograd.h"

namespace st::models {

DecoderModel::DecoderModel(DecoderSpec spec, runtime::TpGroup tp, std::shared_ptr<Generator> gen,
                           std::vector<runtime::LayerRange> ranges, const runtime::ModelForm& form)
    : spec_(std::move(spec)), tp_(std::move(tp)) {
  spec_.check();
  spec_.check_tp(runtime::tp_size(tp_));
  check_form(form);
  sp_ = form.sequence_parallel;
  chunked_ = form.chunked_head && tp_size() == 1;
  set_generator(gen);
  std::shared_ptr<DecoderEmbedding> emb;
  // one set of rotary tables for the model's blocks
  auto rope = spec_.position == PositionKind::rotary ? std::make_shared<RopeTables>(spec_) : nullptr;
  const int total = static_cast<int>(spec_.layers) + 2;
  for (int i : set_layer_ranges(std::move(ranges), total)) {
    if (i == 0) {
      emb = std::make_shared<DecoderEmbedding>(spec_, tp_, gen, form);
      add_layer(layer_scope(spec_, i), emb);
    } else if (i <= spec_.layers) {
      blocks_.push_back(std::make_shared<DecoderBlock>(spec_, tp_, gen, i, rope, form));
      add_layer(layer_scope(spec_, i), blocks_.back());
    } else {  // the head: the embedding's tensor when tied and held here, else its own (or the stage copy)
      head_ = std::make_shared<DecoderHead>(spec_, tp_, emb && spec_.tied_head ? emb->token_weight() : Tensor(), form);
      add_layer(layer_scope(spec_, i), head_);
    }
  }
}

void DecoderModel::check_form(const runtime::ModelForm& form) const {
  const bool dropout = spec_.embd_pdrop != 0.0 || spec_.resid_pdrop != 0.0;
  if (form.sequence_parallel) {
    ST_CHECK(tp_size() > 1, ValueError, spec_.family << ": sequence parallelism needs tp > 1 (--tp), got tp " << tp_size());
    ST_CHECK(!dropout, ValueError,
             spec_.family << ": sequence parallelism runs without dropout (masks are drawn per whole sequence); "
                          << "the model has dropout " << spec_.resid_pdrop << ": use --dropout 0");
  }
  if (form.context_parallel()) {
    ST_CHECK(!dropout, ValueError,
             spec_.family << ": --cp " << form.cp->size() << " runs without dropout (masks are drawn per whole sequence); "
                          << "the model has dropout " << spec_.resid_pdrop << ": use --dropout 0");
    ST_CHECK(!form.sequence_parallel, ValueError,
             spec_.family << ": --cp " << form.cp->size() << " with --sequence-parallel 1 is not supported");
  }
}

std::vector<std::shared_ptr<ops::Fp8LinearState>> DecoderModel::fp8_states() const {
  std::vector<std::shared_ptr<ops::Fp8LinearState>> out;
  for (const auto& b : blocks_)
    for (auto& [name, st] : b->fp8_states()) out.push_back(st);
  return out;
}

runtime::LanguageModel::NamedFp8States DecoderModel::fp8_named_states() const {
  NamedFp8States out;
  for (const auto& b : blocks_)
    for (auto& [name, st] : b->fp8_states()) out.emplace_back(b->scope() + "." + name, st);
  return out;
}

Tensor DecoderModel::loss(const Tensor& out, const Tensor& targets) const {
  if (tp_size() > 1) return runtime::vocab_parallel_cross_entropy(out, targets, tp_, spec_.vocab);
  if (!chunked_) return LanguageModel::loss(out, targets);
  ST_CHECK(head_ != nullptr, ValueError, spec_.family << ": loss() on a range of layers without the head");
  const int64_t C = spec_.d_model;
  ST_CHECK(out.dim() == 3 && out.size(2) == C && targets.dim() == 2 && targets.size(0) == out.size(0) &&
               targets.size(1) == out.size(1),
           ShapeError,
           spec_.family << " (chunked head): hidden " << shape_str(out.shape()) << " (expected (B, T, " << C
                        << ")) vs targets " << shape_str(targets.shape()));
  // (B·T, C) against the head's weight (V, C) and targets (B·T) → () f32
  return ops::lm_head_cross_entropy(out.reshape({-1, C}), head_->weight, targets.reshape({-1}));
}

runtime::ShardRule DecoderModel::shard_rule() const { return tp_ ? decoder_tp_rule(spec_) : nullptr; }

Shape DecoderModel::full_shape(const std::string& name) const {
  Shape shape = parameter(name).shape();
  if (tp_size() == 1) return shape;
  const runtime::ShardSpec s = shard_rule()(name);
  if (s.kind == runtime::ShardSpec::Kind::replicated) return shape;
  const int64_t d = wrap_dim(s.dim, static_cast<int64_t>(shape.size()), "full_shape");
  shape[d] = s.pad_to_tp ? s.full_size : shape[d] * tp_size();
  return shape;
}

void DecoderModel::init_parameter(const std::string& name, Tensor& t, uint64_t seed, int64_t first) const {
  // the role of `name` in its layer (a block's names stand for every block's)
  const ParamInfo* info = nullptr;
  std::vector<ParamInfo> params;
  for (size_t i = 0; i < layers().size() && !info; ++i) {
    params = layer_params(spec_, global_layer(i));
    for (const ParamInfo& p : params)
      if (p.name == name) {
        info = &p;
        break;
      }
  }
  ST_CHECK(info != nullptr, ValueError, spec_.family << ": no parameter named '" << name << "' to initialise");
  NoGradGuard ng;
  switch (info->role) {
    case ParamRole::norm_weight: t.fill_(1.0); return;
    case ParamRole::norm_bias:
    case ParamRole::qkv_bias:
    case ParamRole::q_bias:
    case ParamRole::k_bias:
    case ParamRole::v_bias:
    case ParamRole::o_bias:
    case ParamRole::gate_bias:
    case ParamRole::up_bias:
    case ParamRole::down_bias: t.fill_(0.0); return;
    default: break;
  }
  const bool residual = info->role == ParamRole::o_weight || info->role == ParamRole::down_weight;
  const float std_ = static_cast<float>(spec_.scaled_residual_init && residual
                                            ? spec_.init_std / std::sqrt(2.0 * static_cast<double>(spec_.layers))
                                            : spec_.init_std);
  // this rank's elements of the full tensor's stream (a tp shard draws its slice, padding rows zero)
  const ElementMap map =
      tp_ ? runtime::element_map(runtime::shard_slice(shard_rule()(name), full_shape(name), tp_size(),
                                                                runtime::tp_rank(tp_)),
                                           full_shape(name))
                    : ElementMap::whole(parameter(name).numel());
  fill_normal_keyed(t, stream_key(seed, name), 0.f, std_, map.window(first, t.numel()));
}

void DecoderModel::load_full_state_dict(const std::map<std::string, Tensor>& full, bool strict) {
  if (tp_size() == 1) return LanguageModel::load_full_state_dict(full, strict);
  const runtime::ShardRule rule = shard_rule();
  std::map<std::string, Tensor> local;
  std::set<std::string> mine;
  for (auto& [name, param] : named_parameters()) {  // check everything before sharding anything
    mine.insert(name);
    auto it = full.find(name);
    ST_CHECK(it != full.end(), ValueError, "load_full_state_dict: missing key '" << name << "'");
    ST_CHECK(it->second.shape() == full_shape(name), ValueError,
             "load_full_state_dict: '" << name << "' has shape " << shape_str(it->second.shape())
                                       << ", the full model expects " << shape_str(full_shape(name)));
  }
  if (strict)
    for (auto& [name, t] : full)
      ST_CHECK(mine.count(name), ValueError, "load_full_state_dict: unexpected key '" << name << "'");
  for (const std::string& name : mine)
    local[name] = runtime::shard_tensor(full.at(name), rule(name), tp_size(), runtime::tp_rank(tp_));
  load_state_dict(local, true);
}

runtime::NamedTensors DecoderModel::full_state_dict() const {
  if (tp_size() == 1) return state_dict();
  return runtime::gather_state_dict(state_dict(), shard_rule(), *tp_);
}

Tensor DecoderModel::gather_logits(const Tensor& local_logits) const {
  if (tp_size() == 1) return local_logits;
  Tensor all = runtime::gather_from_tp(local_logits, tp_);  // (B, T, Vp)
  return all.narrow(-1, 0, spec_.vocab);                    // (B, T, V)
}

runtime::ModelDescription describe_decoder(const DecoderSpec& s, int64_t seq_len) {
  s.check();
  runtime::ModelDescription d;
  d.vocab_size = s.vocab;
  d.context_length = s.context;
  const double C = static_cast<double>(s.d_model), V = static_cast<double>(s.vocab);
  for (int64_t i = 0; i <= s.layers + 1; ++i) {
    runtime::LayerInfo l;
    l.scope = layer_scope(s, i);
    for (const ParamInfo& p : layer_params(s, i)) l.params.emplace_back(p.name, p.shape);
    l.flops_per_token = i == 0 ? C : i <= s.layers ? block_flops(s, static_cast<double>(seq_len)) : 2.0 * V * C;
    d.layers.push_back(std::move(l));
  }
  runtime::DecoderShape b;
  b.d_model = s.d_model, b.heads = s.heads, b.kv_heads = s.kv_heads, b.head_dim = s.head_dim, b.ffn = s.ffn;
  b.swiglu = s.mlp == MlpKind::swiglu;
  b.rmsnorm = s.norm == NormKind::rmsnorm;
  b.rotary = s.position == PositionKind::rotary;
  b.tied_head = s.tied_head;
  b.embd_pdrop = s.embd_pdrop, b.resid_pdrop = s.resid_pdrop;
  d.decoder = b;
  return d;
}

}  // namespace st::models
