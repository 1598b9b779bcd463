// NCCL point-to-point envelopes over MPI (see envelopes.h).
#include "comm/nccl/envelopes.h"

#include "comm/keep_alive.h"
#include "comm/mpi_wait.h"

namespace st::comm {
namespace {

constexpr int kEnvelopeTag = 7;  // the only point-to-point traffic on the NCCL communicator's MPI_Comm
constexpr int kEnvelopeInts = 4;
static_assert(sizeof(Envelope) == kEnvelopeInts * sizeof(int64_t));

}  // namespace

std::shared_ptr<EnvelopeBatch> EnvelopeBatch::post(MPI_Comm comm, int me, const std::vector<P2POp>& ops,
                                                   std::vector<uint64_t>& sent, std::vector<uint64_t>& received,
                                                   std::string who) {
  auto b = std::make_shared<EnvelopeBatch>();
  b->me_ = me;
  b->who_ = std::move(who);
  size_t sends = 0;
  for (const P2POp& o : ops) sends += o.kind == P2POp::Kind::send;
  // Sized before any request points into them.
  b->out_.reserve(sends);
  b->want_.reserve(ops.size() - sends);
  b->got_.resize(ops.size() - sends);
  b->reqs_.assign(ops.size(), MPI_REQUEST_NULL);
  b->done_.assign(ops.size(), 0);
  size_t next_recv = 0;
  try {
  for (const P2POp& o : ops) {
    const auto peer = static_cast<size_t>(o.peer);
    const std::string where = b->who_ + ", envelope " + (o.kind == P2POp::Kind::send ? "to" : "from") + " rank " +
                              std::to_string(o.peer) + " with tag " + std::to_string(o.tag);
    const Envelope e{o.tag, o.tensor.numel(), static_cast<int64_t>(o.tensor.dtype()), 0};
    if (o.kind == P2POp::Kind::send) {
      Envelope& s = b->out_.emplace_back(e);
      s.index = static_cast<int64_t>(++sent[peer]);
      CHECK_MPI(MPI_Isend(&s, kEnvelopeInts, MPI_INT64_T, o.peer, kEnvelopeTag, comm, &b->reqs_[b->out_.size() - 1]),
                where);
    } else {
      Envelope& w = b->want_.emplace_back(e);
      w.index = static_cast<int64_t>(++received[peer]);
      b->from_.push_back(o.peer);
      CHECK_MPI(MPI_Irecv(&b->got_[next_recv], kEnvelopeInts, MPI_INT64_T, o.peer, kEnvelopeTag, comm,
                          &b->reqs_[sends + next_recv]),
                where);
      ++next_recv;
    }
  }
  } catch (const CommError&) {
    keep_alive_forever(b);  // the envelopes posted so far point into it
    throw;
  }
  return b;
}

bool EnvelopeBatch::poll() {
  bool all = true;
  for (size_t i = 0; i < reqs_.size(); ++i) {
    if (done_[i]) continue;
    int flag = 0;
    CHECK_MPI(MPI_Test(&reqs_[i], &flag, MPI_STATUS_IGNORE), who_ + ", p2p envelope");
    if (!flag) {
      all = false;
      continue;
    }
    done_[i] = 1;
    if (i < out_.size()) continue;
    const size_t r = i - out_.size();
    std::string m = p2p_mismatch(who_, me_, from_[r], want_[r], got_[r], false);
    if (!m.empty()) throw CommError(m);
  }
  return all;
}

}  // namespace st::comm
