// The decoder's description: checks, its layers' parameters and costs (see the header).
#include "models/decoder/decoder_spec.h"

#include <algorithm>
#include <string>

#include "tensor/error.h"

namespace st::models {
void DecoderSpec::check() const {
  ST_CHECK(layers >= 1 && d_model >= 1 && heads >= 1 && kv_heads >= 1 && head_dim >= 1 && ffn >= 1 && vocab >= 1 &&
               context >= 1,
           ValueError,
           family << ": sizes must be positive (layers " << layers << ", d_model " << d_model << ", heads " << heads
                  << ", kv heads " << kv_heads << ", head dim " << head_dim << ", ffn " << ffn << ", vocab " << vocab
                  << ", context " << context << ")");
  ST_CHECK(heads % kv_heads == 0, ValueError,
           family << ": " << heads << " query heads do not group evenly over " << kv_heads << " key/value heads");
  ST_CHECK(position != PositionKind::rotary || head_dim % 2 == 0, ValueError,
           family << ": rotary positions need an even head dim, got " << head_dim);
  ST_CHECK(names.qkv.empty() || kv_heads == heads, ValueError,
           family << ": a packed qkv parameter holds as many key/value heads as query heads");
}

void DecoderSpec::check_tp(int tp) const {
  if (tp <= 1) return;
  std::string valid;
  for (int t = 1; t <= heads; ++t)
    if (heads % t == 0 && kv_heads % t == 0 && ffn % t == 0) valid += (valid.empty() ? "" : ", ") + std::to_string(t);
  ST_CHECK(heads % tp == 0, ValueError,
           family << ": heads " << heads << " are not divisible by tp " << tp << " (valid tp: " << valid << ")");
  ST_CHECK(kv_heads % tp == 0, ValueError,
           family << ": " << kv_heads << " key/value heads cannot be split over tp " << tp
                  << " (each rank holds whole key/value heads; valid tp: " << valid << ")");
  ST_CHECK(ffn % tp == 0, ValueError,
           family << ": the MLP width " << ffn << " is not divisible by tp " << tp << " (valid tp: " << valid << ")");
}

std::string layer_scope(const DecoderSpec& s, int64_t i) {
  if (i == 0) return s.names.embed_scope;
  if (i <= s.layers) return s.names.block_prefix + std::to_string(i - 1);
  return s.names.head_scope;
}

std::vector<ParamInfo> layer_params(const DecoderSpec& s, int64_t i) {
  const DecoderNames& n = s.names;
  const int64_t C = s.d_model, V = s.vocab, F = s.ffn, A = s.q_width(), Akv = s.kv_width();
  const bool out_in = s.layout == WeightLayout::out_in;
  auto mat = [&](int64_t in, int64_t out) { return out_in ? Shape{out, in} : Shape{in, out}; };
  const std::string embed = join(join(n.embed_scope, n.tok_embed), "weight");
  std::vector<ParamInfo> p;
  if (i == 0) {
    p.push_back({embed, {V, C}, ParamRole::tok_embed});
    if (s.position == PositionKind::learned)
      p.push_back({join(join(n.embed_scope, n.pos_embed), "weight"), {s.context, C}, ParamRole::pos_embed});
    return p;
  }
  if (i <= s.layers) {
    const std::string b = layer_scope(s, i);
    auto norm = [&](const std::string& name) {
      p.push_back({join(b, name + ".weight"), {C}, ParamRole::norm_weight});
      if (s.norm == NormKind::layernorm) p.push_back({join(b, name + ".bias"), {C}, ParamRole::norm_bias});
    };
    auto linear = [&](const std::string& name, int64_t in, int64_t out, bool bias, ParamRole w, ParamRole bb) {
      p.push_back({join(b, name + ".weight"), mat(in, out), w});
      if (bias) p.push_back({join(b, name + ".bias"), {out}, bb});
    };
    norm(n.norm1);
    if (!n.qkv.empty()) {
      linear(n.qkv, C, A + 2 * Akv, s.qkv_bias, ParamRole::qkv_weight, ParamRole::qkv_bias);
    } else {
      linear(n.q, C, A, s.qkv_bias, ParamRole::q_weight, ParamRole::q_bias);
      linear(n.k, C, Akv, s.qkv_bias, ParamRole::k_weight, ParamRole::k_bias);
      linear(n.v, C, Akv, s.qkv_bias, ParamRole::v_weight, ParamRole::v_bias);
    }
    linear(n.o, A, C, s.o_bias, ParamRole::o_weight, ParamRole::o_bias);
    norm(n.norm2);
    if (s.mlp == MlpKind::swiglu) linear(n.gate, C, F, s.mlp_bias, ParamRole::gate_weight, ParamRole::gate_bias);
    linear(n.up, C, F, s.mlp_bias, ParamRole::up_weight, ParamRole::up_bias);
    linear(n.down, F, C, s.mlp_bias, ParamRole::down_weight, ParamRole::down_bias);
    return p;
  }
  p.push_back({s.tied_head ? embed : join(join(n.head_scope, n.lm_head), "weight"), {V, C},
               s.tied_head ? ParamRole::tok_embed : ParamRole::lm_head});
  p.push_back({join(join(n.head_scope, n.final_norm), "weight"), {C}, ParamRole::norm_weight});
  if (s.norm == NormKind::layernorm)
    p.push_back({join(join(n.head_scope, n.final_norm), "bias"), {C}, ParamRole::norm_bias});
  return p;
}

double block_flops(const DecoderSpec& s, double T, int tp) {
  const double C = static_cast<double>(s.d_model), t = static_cast<double>(tp);
  const double A = static_cast<double>(s.q_width()) / t, Akv = static_cast<double>(s.kv_width()) / t;
  const double F = static_cast<double>(s.ffn) / t;
  const double mlp_in = s.mlp == MlpKind::swiglu ? 2 * F : F;
  const double matmuls = 2.0 * (C * (A + 2 * Akv) + A * C + C * mlp_in + F * C);
  return matmuls + 4.0 * T * A;  // + q·kᵀ and p·v
}

double decoder_param_count(const DecoderSpec& s) {
  // closed form: the embedding, one block × layers (every block has the same shapes), the head;
  // in double, so absurd sizes (the memory check's) do not overflow or take long
  auto count = [](const std::vector<ParamInfo>& ps, bool skip_tied) {
    double n = 0;
    for (const ParamInfo& p : ps) {
      if (skip_tied && p.role == ParamRole::tok_embed) continue;  // the tied head: the embedding's
      double e = 1;
      for (int64_t d : p.shape) e *= static_cast<double>(d);
      n += e;
    }
    return n;
  };
  return count(layer_params(s, 0), false) + static_cast<double>(s.layers) * count(layer_params(s, 1), false) +
         count(layer_params(s, s.layers + 1), true);
}

}  // namespace st::models
