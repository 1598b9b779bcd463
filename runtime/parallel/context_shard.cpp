// The context-parallel sequence sharding (runtime/parallel/context_shard.h): chunk arithmetic from
// ops/ring_schedule.h, narrow + cat for the shard, one all_gather for the inverse.
#include "runtime/parallel/context_shard.h"

#include "tensor/autograd.h"
#include "tensor/error.h"

namespace st::runtime {
namespace {

int64_t seq_dim(const Tensor& x, int64_t dim, const char* op) {
  ST_CHECK(x.defined(), ValueError, op << ": undefined tensor");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  ST_CHECK(d >= 0 && d < x.dim(), ShapeError,
           op << ": sequence dim " << dim << " of " << x.describe() << " (expected a dim of the tensor)");
  return d;
}

}  // namespace

std::vector<int64_t> context_positions(int64_t seq_len, int64_t ranks, int64_t rank, ops::ContextSplit split) {
  const int64_t C = ops::context_chunk_len(seq_len, ranks);
  std::vector<int64_t> pos;
  pos.reserve(static_cast<size_t>(2 * C));
  for (int64_t c : ops::context_chunks(ranks, rank, split))
    for (int64_t t = 0; t < C; ++t) pos.push_back(c * C + t);
  return pos;
}

Tensor context_position_ids(int64_t seq_len, int64_t ranks, int64_t rank, ops::ContextSplit split, Device device) {
  const std::vector<int64_t> pos = context_positions(seq_len, ranks, rank, split);
  Tensor t = Tensor::from_vector(pos, {static_cast<int64_t>(pos.size())});  // (2C) i64
  return device == Device::cpu ? t : t.to(device);
}

const Tensor& ContextPositionCache::get(int64_t seq_len, int64_t ranks, int64_t rank, ops::ContextSplit split,
                                        Device device) {
  if (!ids_.defined() || seq_len != seq_len_ || ranks != ranks_ || rank != rank_ || split != split_ ||
      ids_.device() != device) {
    ids_ = context_position_ids(seq_len, ranks, rank, split, device);
    seq_len_ = seq_len, ranks_ = ranks, rank_ = rank, split_ = split;
  }
  return ids_;
}

Tensor shard_sequence(const Tensor& x, int64_t ranks, int64_t rank, ops::ContextSplit split, int64_t dim) {
  const int64_t d = seq_dim(x, dim, "shard_sequence");
  const int64_t T = x.size(d);
  ST_CHECK(ranks >= 1 && T > 0 && T % (2 * ranks) == 0, ShapeError,
           "shard_sequence: sequence of " << T << " at dim " << d << " of " << x.describe() << " over " << ranks
                                          << " context ranks (expected a multiple of 2·ranks = " << 2 * ranks << ")");
  const int64_t C = T / (2 * ranks);
  std::vector<Tensor> parts;
  for (int64_t c : ops::context_chunks(ranks, rank, split)) parts.push_back(x.narrow(d, c * C, C));
  return Tensor::cat(parts, d);  // (..., 2C, ...): chunk 0 then chunk 1 of the rank
}

Tensor unshard_sequence(const std::vector<Tensor>& parts, ops::ContextSplit split, int64_t dim) {
  ST_CHECK(!parts.empty(), ValueError, "unshard_sequence: no parts");
  const int64_t N = static_cast<int64_t>(parts.size()), d = seq_dim(parts[0], dim, "unshard_sequence");
  const int64_t L = parts[0].size(d);
  ST_CHECK(L % 2 == 0, ShapeError,
           "unshard_sequence: a shard of " << L << " rows at dim " << d << " (expected two chunks: an even count)");
  for (const Tensor& p : parts)
    ST_CHECK(p.defined() && p.shape() == parts[0].shape() && p.dtype() == parts[0].dtype(), ShapeError,
             "unshard_sequence: parts " << parts[0].describe() << " and "
                                        << (p.defined() ? p.describe() : std::string("undefined"))
                                        << " (expected one shape and dtype)");
  NoGradGuard ng;
  const int64_t C = L / 2;
  std::vector<Tensor> chunks(static_cast<size_t>(2 * N));  // by global chunk index
  for (int64_t r = 0; r < N; ++r) {
    const std::vector<int64_t> cs = ops::context_chunks(N, r, split);
    for (int i = 0; i < 2; ++i) chunks[static_cast<size_t>(cs[i])] = parts[r].detach().narrow(d, i * C, C);
  }
  return Tensor::cat(chunks, d);  // (..., 2N·C, ...) global order
}

Tensor gather_sequence(const Tensor& x, const CpGroup& cp, ops::ContextSplit split, int64_t dim) {
  seq_dim(x, dim, "gather_sequence");
  NoGradGuard ng;
  Tensor src = x.detach().contiguous();
  if (cp == nullptr || cp->size() == 1) return src.clone();
  const int64_t N = cp->size(), n = src.numel();
  Tensor buf = Tensor::empty({N * n}, src.dtype(), src.device());  // rank q's shard at [q·n, (q+1)·n)
  cp->all_gather(src.view({n}), buf)->wait();
  std::vector<Tensor> parts;
  for (int64_t q = 0; q < N; ++q) parts.push_back(buf.narrow(0, q * n, n).view(src.shape()));
  return unshard_sequence(parts, split, dim);
}

}  // namespace st::runtime
