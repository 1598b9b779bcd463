// Tensor-parallel sharding by name: pure split / join of tensors (copies through narrow + cat),
// and the collective gather of a whole state dict.
#include "runtime/parallel/tp_shard.h"

#include <sstream>

#include "ops/optim.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

// Padded size along the split dim.
int64_t padded(int64_t size, const ShardSpec& s, int tp) { return s.pad_to_tp ? (size + tp - 1) / tp * tp : size; }

}  // namespace

ShardRule optimizer_state_shard_rule(ShardRule param_rule) {
  return [param_rule = std::move(param_rule)](const std::string& n) -> ShardSpec {
    // step, and --fp8-scaling delayed's per-GEMM scaling states (runtime/train/fp8_delayed.h):
    // equal on every rank of the tp group
    if (n == "step" || n.compare(0, 4, "fp8.") == 0) return ShardSpec::replicate();
    for (const char* prefix : {"exp_avg.", "exp_avg_sq.", "momentum_buffer.", "master."}) {
      const std::string p = prefix;
      if (n.compare(0, p.size(), p) == 0) return param_rule(n.substr(p.size()));
    }
    ST_THROW(ValueError, "tensor parallel: '" << n << "' is not an optimizer state key (step, exp_avg.*, "
                                              << "exp_avg_sq.*, momentum_buffer.*, master.*)");
  };
}

Shape shard_shape(const Shape& full, const ShardSpec& s, int tp) {
  if (s.kind == ShardSpec::Kind::replicated) return full;
  ST_CHECK(tp >= 1 && s.chunks >= 1 && !(s.pad_to_tp && s.chunks != 1), ValueError,
           "shard: bad spec '" << describe(s) << "' for tp " << tp);
  const int64_t d = wrap_dim(s.dim, static_cast<int64_t>(full.size()), "shard");
  const int64_t size = padded(full[d], s, tp);
  ST_CHECK(size % (s.chunks * tp) == 0, ShapeError,
           "shard: dim " << d << " of " << shape_str(full) << " (" << describe(s) << ") does not divide into "
                         << s.chunks << " chunk(s) × tp " << tp);
  Shape out = full;
  out[d] = size / tp;
  return out;
}

Tensor shard_tensor(const Tensor& full_in, const ShardSpec& s, int tp, int rank) {
  ST_CHECK(rank >= 0 && rank < tp, ValueError, "shard: rank " << rank << " is outside [0, tp = " << tp << ")");
  NoGradGuard ng;
  Tensor full = full_in.detach();
  if (s.kind == ShardSpec::Kind::replicated) return full.clone();
  shard_shape(full.shape(), s, tp);  // validates
  const int64_t d = wrap_dim(s.dim, full.dim(), "shard");
  const int64_t size = padded(full.size(d), s, tp);
  if (size > full.size(d)) {  // zero rows / columns up to a multiple of tp
    Shape pad = full.shape();
    pad[d] = size - full.size(d);
    full = Tensor::cat({full, Tensor::zeros(pad, full.dtype(), full.device())}, d);
  }
  const int64_t chunk = size / s.chunks, piece = chunk / tp;
  std::vector<Tensor> parts;  // piece r of every chunk, in chunk order
  for (int64_t j = 0; j < s.chunks; ++j) parts.push_back(full.narrow(d, j * chunk + rank * piece, piece));
  return Tensor::cat(parts, d);  // fresh, contiguous
}

Tensor unshard_tensor(const std::vector<Tensor>& shards, const ShardSpec& s) {
  ST_CHECK(!shards.empty(), ValueError, "unshard: no shards");
  NoGradGuard ng;
  if (s.kind == ShardSpec::Kind::replicated) return shards[0].detach().clone();
  const int64_t tp = static_cast<int64_t>(shards.size());
  const int64_t d = wrap_dim(s.dim, shards[0].dim(), "unshard");
  for (const Tensor& t : shards)
    ST_CHECK(t.shape() == shards[0].shape(), ShapeError,
             "unshard: shards differ in shape: " << shape_str(t.shape()) << " vs " << shape_str(shards[0].shape()));
  ST_CHECK(shards[0].size(d) % s.chunks == 0, ShapeError,
           "unshard: dim " << d << " of shard " << shape_str(shards[0].shape()) << " is not " << s.chunks << " chunks");
  const int64_t piece = shards[0].size(d) / s.chunks;
  std::vector<Tensor> parts;  // chunk j = pieces j of ranks 0 … tp−1
  for (int64_t j = 0; j < s.chunks; ++j)
    for (int64_t r = 0; r < tp; ++r)
      parts.push_back(shards[static_cast<size_t>(r)].detach().narrow(d, j * piece, piece));
  Tensor full = Tensor::cat(parts, d);
  if (!s.pad_to_tp) return full;
  ST_CHECK(s.full_size >= 0 && s.full_size <= full.size(d), ShapeError,
           "unshard: full size " << s.full_size << " does not fit the gathered " << full.size(d));
  return full.narrow(d, 0, s.full_size).contiguous();
}

NamedTensors shard_state_dict(const NamedTensors& full, const ShardRule& rule, int tp, int rank) {
  NamedTensors out;
  out.reserve(full.size());
  for (const auto& [name, t] : full) out.emplace_back(name, shard_tensor(t, rule(name), tp, rank));
  return out;
}

NamedTensors gather_state_dict(const NamedTensors& local, const ShardRule& rule, comm::Communicator& tp) {
  NoGradGuard ng;
  NamedTensors out;
  out.reserve(local.size());
  const int64_t p = tp.size();
  for (const auto& [name, t] : local) {
    const ShardSpec s = rule(name);
    if (s.kind == ShardSpec::Kind::replicated) {
      out.emplace_back(name, t.detach());
      continue;
    }
    const int64_t M = t.numel();
    Tensor src = t.detach().contiguous();                        // (local shape)
    Tensor buf = Tensor::empty({p * M}, t.dtype(), t.device());  // (tp · M): rank r's shard at r·M
    tp.all_gather(src.view({M}), buf)->wait();
    std::vector<Tensor> shards;
    for (int64_t r = 0; r < p; ++r) shards.push_back(buf.narrow(0, r * M, M).view(t.shape()));
    out.emplace_back(name, unshard_tensor(shards, s));
  }
  return out;
}

double tp_local_sum_squares(const NamedTensors& grads, const ShardRule& rule, int tp_rank) {
  double total = 0;
  for (const auto& [name, g] : grads) {
    if (!g.defined()) continue;  // no gradient reached it: contributes 0
    if (rule(name).kind == ShardSpec::Kind::replicated && tp_rank != 0) continue;
    total += ops::sum_squares(g);
  }
  return total;
}

}  // namespace st::runtime
