// Operations of more elements than max_count() (MPI's counts are int: 2^31−1), issued as several
// backend calls of at most max_count() elements each, behind one Work (a WorkGroup) and one
// sequence number — so a caller never sees the limit, and both backends take one code path.
// Every rank splits alike (max_count() is the same on every rank), so the calls pair up:
//   all_reduce, reduce, broadcast   contiguous chunks, in order
//   reduce_scatter                  out's block [r·n, (r+1)·n) of in is reduced to rank r, for
//                                   r = 0 … size−1, chunk by chunk (a reduce_scatter of chunks
//                                   would need strided inputs)
//   all_gather                      this rank's input copied into its block of out, then each
//                                   rank's block broadcast from it, chunk by chunk
//   point to point                  a transfer as several of the same tag, in order, in the batch
#include <algorithm>

#include "comm/communicator.h"
#include "tensor/autograd.h"

namespace st::comm {
namespace {

Tensor flat(const Tensor& t) { return t.detach().view({t.numel()}); }

// [start, start + length) of every chunk of at most `max` elements covering n.
template <class F>
void for_chunks(int64_t n, int64_t max, F&& f) {
  for (int64_t start = 0; start < n; start += max) f(start, std::min(max, n - start));
}

}  // namespace

WorkPtr Communicator::chunked_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  const Tensor fi = flat(in), fo = flat(out);  // (n)
  std::vector<WorkPtr> parts;
  for_chunks(in.numel(), max_count(), [&](int64_t s, int64_t m) {
    parts.push_back(do_all_reduce(fi.narrow(0, s, m), fo.narrow(0, s, m), op, seq));
  });
  return std::make_shared<WorkGroup>(state_, "allreduce", seq, std::move(parts));
}

WorkPtr Communicator::chunked_reduce(const Tensor& in, const Tensor& out, int root, ReduceOp op, uint64_t seq) {
  const Tensor fi = flat(in), fo = flat(out);  // (n)
  std::vector<WorkPtr> parts;
  for_chunks(in.numel(), max_count(), [&](int64_t s, int64_t m) {
    parts.push_back(do_reduce(fi.narrow(0, s, m), fo.narrow(0, s, m), root, op, seq));
  });
  return std::make_shared<WorkGroup>(state_, "reduce", seq, std::move(parts));
}

WorkPtr Communicator::chunked_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  const int64_t n = out.numel();
  const Tensor fi = flat(in), fo = flat(out);  // (size·n), (n)
  std::vector<WorkPtr> parts;
  // When out is in's own block, rank r's reduce of that block is in place; no other reduce reads it.
  for (int r = 0; r < size(); ++r)
    for_chunks(n, max_count(), [&](int64_t s, int64_t m) {
      parts.push_back(do_reduce(fi.narrow(0, r * n + s, m), fo.narrow(0, s, m), r, op, seq));
    });
  return std::make_shared<WorkGroup>(state_, "reduce_scatter", seq, std::move(parts));
}

WorkPtr Communicator::chunked_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) {
  const int64_t n = in.numel();
  const Tensor fo = flat(out);  // (size·n)
  Tensor mine = fo.narrow(0, static_cast<int64_t>(rank()) * n, n);
  if (mine.data_ptr() != in.data_ptr()) {  // not in place: on the current stream for CUDA tensors
    NoGradGuard ng;
    mine.copy_(flat(in));
  }
  std::vector<WorkPtr> parts;
  for (int r = 0; r < size(); ++r)
    for_chunks(n, max_count(),
               [&](int64_t s, int64_t m) { parts.push_back(do_broadcast(fo.narrow(0, r * n + s, m), r, seq)); });
  return std::make_shared<WorkGroup>(state_, "all_gather", seq, std::move(parts));
}

WorkPtr Communicator::chunked_broadcast(const Tensor& t, int root, uint64_t seq) {
  const Tensor ft = flat(t);  // (n)
  std::vector<WorkPtr> parts;
  for_chunks(t.numel(), max_count(),
             [&](int64_t s, int64_t m) { parts.push_back(do_broadcast(ft.narrow(0, s, m), root, seq)); });
  return std::make_shared<WorkGroup>(state_, "broadcast", seq, std::move(parts));
}

std::vector<P2POp> Communicator::chunked_p2p(const std::vector<P2POp>& ops) const {
  std::vector<P2POp> out;
  for (const P2POp& o : ops) {
    if (o.tensor.numel() <= max_count()) {
      out.push_back(o);
      continue;
    }
    const Tensor ft = flat(o.tensor);
    for_chunks(o.tensor.numel(), max_count(), [&](int64_t s, int64_t m) {
      out.push_back({o.kind, ft.narrow(0, s, m), o.peer, o.tag});
    });
  }
  return out;
}

}  // namespace st::comm
