// Ring attention over the cp group (runtime/parallel/ring_attention.h): the block ops of ops/
// (block_attention, attention_merge, ring_schedule) driven step by step, each step's transfers in
// one batch_p2p posted before the step's blocks and waited after them.
#include "runtime/parallel/ring_attention.h"

#include <vector>

#include "ops/attention_merge.h"
#include "ops/block_attention.h"
#include "ops/check.h"
#include "tensor/autograd.h"

namespace st::runtime {
namespace {

using comm::P2POp;

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, int64_t ranks) {
  const char* name = "ring_attention";
  ops::check_defined(name, {q, k, v});
  ops::check_same_device(name, {q, k, v});
  ops::check_same_dtype(name, {q, k, v});
  ops::check_floating(name, q);
  const bool ok = q.dim() == 4 && k.dim() == 4 && v.shape() == k.shape() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && q.size(3) == k.size(3) && q.size(3) > 0 && k.size(1) > 0 &&
                  q.size(1) % k.size(1) == 0 && q.size(2) > 0;
  ST_CHECK(ok, ShapeError,
           name << ": q " << shape_str(q.shape()) << ", k " << shape_str(k.shape()) << ", v " << shape_str(v.shape())
                << " (expected q (B, H, Tl, D), k = v (B, Hkv, Tl, D), Hkv dividing H)");
  ST_CHECK(ranks == 1 || q.size(2) % 2 == 0, ShapeError,
           name << ": " << q.size(2) << " local rows over " << ranks
                << " context ranks (expected the rank's two chunks: an even count)");
}

// visible scores of one block over B·H rows-blocks: C(C + 1)/2 causal, Tq·Tk full
int64_t block_scores(const Tensor& q, const Tensor& k, ops::BlockMask mask) {
  const int64_t BH = q.size(0) * q.size(1), Tq = q.size(2), Tk = k.size(2);
  return BH * (mask == ops::BlockMask::causal ? Tq * (Tq + 1) / 2 : Tq * Tk);
}

// buf (2, 2, B, Hkv, C, D) contiguous → piece (a, j) (B, Hkv, C, D): a = 0 keys / 1 values (or their
// gradients), j = the chunk slot; a contiguous view
Tensor piece(const Tensor& buf, int a, int j) {
  const Shape& s = buf.shape();
  return buf.view({4, s[2], s[3], s[4], s[5]}).narrow(0, 2 * a + j, 1).view({s[2], s[3], s[4], s[5]});
}

// k, v (B, Hkv, 2C, D) → kv (2, 2, B, Hkv, C, D) in their dtype: what travels the ring
Tensor pack_kv(const Tensor& k, const Tensor& v, int64_t C) {
  Tensor kv = Tensor::empty({2, 2, k.size(0), k.size(1), C, k.size(3)}, k.dtype(), k.device());
  for (int j = 0; j < 2; ++j) {
    piece(kv, 0, j).copy_(k.narrow(2, j * C, C));
    piece(kv, 1, j).copy_(v.narrow(2, j * C, C));
  }
  return kv;
}

// (2, 2, B, Hkv, C, D) accumulator → (B, Hkv, 2C, D) of keys (a = 0) or values (a = 1), in `dt`
Tensor unpack(const Tensor& buf, int a, DType dt) {
  return Tensor::cat({piece(buf, a, 0), piece(buf, a, 1)}, 2).to(dt);
}

// cp of one rank: one causal block over the local sequence (no chunks, no transfers)
Tensor single_rank(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const std::shared_ptr<RingWork>& work) {
  const DType dt = q_in.dtype();
  Tensor q = ops::contiguous_as(q_in, dt), k = ops::contiguous_as(k_in, dt), v = ops::contiguous_as(v_in, dt);
  ops::BlockAttention y;
  {
    NoGradGuard ng;
    y = ops::block_attention_fwd(q, k, v, ops::BlockMask::causal);  // out (B, H, Tl, D), lse (B, H, Tl)
  }
  if (work) {
    work->forward_scores += block_scores(q, k, ops::BlockMask::causal);
    ++work->forward_blocks;
  }
  Tensor out = y.out, od = out.detach(), lse = y.lse;
  attach_grad_fn(out, "ring_attention", {q_in, k_in, v_in}, [q, k, v, od, lse, work](const Tensor& g) {
    Tensor dout = ops::contiguous_as(g, q.dtype());                                    // (B, H, Tl, D)
    Tensor dq = Tensor::zeros(q.shape(), DType::f32, q.device());                      // (B, H, Tl, D) f32
    ops::BlockGrads bg = ops::block_attention_bwd(q, k, v, dout, lse, ops::attention_delta(od, dout),
                                                  ops::BlockMask::causal, dq, od);
    if (work) {
      work->backward_scores += block_scores(q, k, ops::BlockMask::causal);
      ++work->backward_blocks;
    }
    return std::vector<Tensor>{dq.to(q.dtype()), bg.dk, bg.dv};
  });
  return out;
}

// Everything the backward needs of one forward.
struct RingContext {
  CpGroup cp;
  ops::ContextSplit split;
  std::shared_ptr<RingWork> work;
  Tensor q;       // (B, H, 2C, D) contiguous, input dtype
  Tensor kv;      // (2, 2, B, Hkv, C, D) this rank's own keys / values, input dtype
  Tensor out;     // (B, H, 2C, D) the op's output (detached), input dtype
  Tensor lse[2];  // (B, H, C) f32: the merged (global) log-sum-exp per query chunk
  int64_t C = 0;
};

int next_rank(const comm::Communicator& cp) { return (cp.rank() + 1) % cp.size(); }
int prev_rank(const comm::Communicator& cp) { return (cp.rank() + cp.size() - 1) % cp.size(); }

// The ring backward (see the header): g (B, H, 2C, D) → {dq, dk, dv} in the input dtype.
std::vector<Tensor> ring_backward(const RingContext& c, const Tensor& g) {
  comm::Communicator& cp = *c.cp;
  const int64_t N = cp.size(), r = cp.rank(), C = c.C;
  const DType dt = c.q.dtype();
  const Device dev = c.q.device();
  Tensor dout = ops::contiguous_as(g, dt);  // (B, H, 2C, D)
  Tensor q[2], dO[2], o[2], delta[2], dq[2];
  for (int i = 0; i < 2; ++i) {
    q[i] = c.q.narrow(2, i * C, C).contiguous();     // (B, H, C, D)
    dO[i] = dout.narrow(2, i * C, C).contiguous();   // (B, H, C, D)
    o[i] = c.out.narrow(2, i * C, C).contiguous();   // (B, H, C, D): the chunk's global output
    delta[i] = ops::attention_delta(o[i], dO[i]);    // (B, H, C) f32, once per query chunk
    dq[i] = Tensor::zeros(q[i].shape(), DType::f32, dev);                // (B, H, C, D) f32, accumulated
  }
  Tensor kv = c.kv;  // the keys / values held at this step
  Tensor acc;        // f32 (2, 2, B, Hkv, C, D): the gradients of the block held at the last step, summed so far
  for (int64_t s = 0; s < N; ++s) {
    // this step's transfers, posted before its blocks: the held kv onward (not after the last
    // step), the previous block's accumulator onward (its next hop); the same order both ends
    std::vector<P2POp> ops;
    Tensor kv_next, acc_in;
    if (s + 1 < N) {
      kv_next = kv.empty_like();
      ops.push_back(P2POp::send(kv, next_rank(cp), kRingKvTag));
    }
    if (s >= 1) {
      acc_in = acc.empty_like();
      ops.push_back(P2POp::send(acc, next_rank(cp), kRingDkvTag));
    }
    if (s + 1 < N) ops.push_back(P2POp::recv(kv_next, prev_rank(cp), kRingKvTag));
    if (s >= 1) ops.push_back(P2POp::recv(acc_in, prev_rank(cp), kRingDkvTag));
    comm::WorkPtr w = ops.empty() ? nullptr : cp.batch_p2p(ops);
    if (c.work)
      for (const P2POp& op : ops)
        if (op.kind == P2POp::Kind::send) c.work->sent_bytes += static_cast<int64_t>(op.tensor.nbytes());
    // the step's blocks: dq added into its chunk's accumulator, dk / dv into this rank's partial
    Tensor part = Tensor::zeros(kv.shape(), DType::f32, dev);  // (2, 2, B, Hkv, C, D) f32
    for (const ops::RingBlock& b : ops::ring_step_blocks(N, r, s, c.split)) {
      if (b.kind == ops::RingPair::skipped) continue;
      const int i = b.q_slot, j = b.k_slot;
      const ops::BlockMask mask = ops::ring_block_mask(b.kind);
      Tensor kj = piece(kv, 0, j), vj = piece(kv, 1, j);
      ops::BlockGrads bg = ops::block_attention_bwd(q[i], kj, vj, dO[i], c.lse[i], delta[i], mask, dq[i], o[i]);
      piece(part, 0, j).add_(bg.dk);
      piece(part, 1, j).add_(bg.dv);
      if (c.work) {
        c.work->backward_scores += block_scores(q[i], kj, mask);
        ++c.work->backward_blocks;
      }
    }
    if (w) w->wait();
    if (s >= 1) {
      acc_in.add_(part);  // the ranks before this one on the block's path, then this one
      acc = acc_in;
    } else {
      acc = part;
    }
    if (s + 1 < N) kv = kv_next;
  }
  // the last hop: the accumulator of the block held at step N − 1 (rank r + 1's) goes home, and
  // this rank's own arrives from rank r − 1, summed over all N ranks
  Tensor home = acc.empty_like();
  const std::vector<P2POp> last = {P2POp::send(acc, next_rank(cp), kRingDkvTag),
                                   P2POp::recv(home, prev_rank(cp), kRingDkvTag)};
  comm::WorkPtr w = cp.batch_p2p(last);
  if (c.work) c.work->sent_bytes += static_cast<int64_t>(acc.nbytes());
  w->wait();
  return {Tensor::cat({dq[0], dq[1]}, 2).to(dt), unpack(home, 0, dt), unpack(home, 1, dt)};
}

}  // namespace

Tensor ring_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const CpGroup& cp,
                      ops::ContextSplit split, std::shared_ptr<RingWork> work) {
  const int64_t N = cp ? cp->size() : 1;
  check_inputs(q_in, k_in, v_in, N);
  if (N == 1) return single_rank(q_in, k_in, v_in, work);
  const DType dt = q_in.dtype();
  const Device dev = q_in.device();
  const int64_t B = q_in.size(0), H = q_in.size(1), D = q_in.size(3), C = q_in.size(2) / 2, r = cp->rank();
  auto ctx = std::make_shared<RingContext>();
  ctx->cp = cp;
  ctx->split = split;
  ctx->work = work;
  ctx->C = C;
  Tensor out;
  {
    NoGradGuard ng;
    ctx->q = ops::contiguous_as(q_in, dt);                                              // (B, H, 2C, D)
    ctx->kv = pack_kv(ops::contiguous_as(k_in, dt), ops::contiguous_as(v_in, dt), C);  // (2, 2, B, Hkv, C, D)
    Tensor q[2], acc[2];
    for (int i = 0; i < 2; ++i) {
      q[i] = ctx->q.narrow(2, i * C, C).contiguous();           // (B, H, C, D)
      ops::empty_attention(B, H, C, D, acc[i], ctx->lse[i], dev);  // (B, H, C, D) f32, (B, H, C) f32
    }
    Tensor kv = ctx->kv;  // held at step s: rank (r − s) mod N's
    for (int64_t s = 0; s < N; ++s) {
      // the next step's keys / values in flight while this step's blocks run
      Tensor kv_next;
      comm::WorkPtr w;
      if (s + 1 < N) {
        kv_next = kv.empty_like();
        w = cp->batch_p2p(
            {P2POp::send(kv, next_rank(*cp), kRingKvTag), P2POp::recv(kv_next, prev_rank(*cp), kRingKvTag)});
        if (work) work->sent_bytes += static_cast<int64_t>(kv.nbytes());
      }
      for (const ops::RingBlock& b : ops::ring_step_blocks(N, r, s, split)) {
        if (b.kind == ops::RingPair::skipped) continue;  // every key in the future
        const int i = b.q_slot, j = b.k_slot;
        const ops::BlockMask mask = ops::ring_block_mask(b.kind);
        Tensor kj = piece(kv, 0, j), vj = piece(kv, 1, j);
        ops::BlockAttention y = ops::block_attention_fwd(q[i], kj, vj, mask);  // (B, H, C, D), (B, H, C)
        ops::merge_attention(acc[i], ctx->lse[i], y.out, y.lse);
        if (work) {
          work->forward_scores += block_scores(q[i], kj, mask);
          ++work->forward_blocks;
        }
      }
      if (w) {
        w->wait();
        kv = kv_next;
      }
    }
    out = Tensor::cat({acc[0], acc[1]}, 2).to(dt);  // (B, H, 2C, D)
  }
  ctx->out = out.detach();
  attach_grad_fn(out, "ring_attention", {q_in, k_in, v_in},
                 [ctx](const Tensor& g) {
                   NoGradGuard ng;
                   return ring_backward(*ctx, g);
                 });
  return out;
}

}  // namespace st::runtime
