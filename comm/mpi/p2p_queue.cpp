// The MPI backend's point-to-point transfers in default and strict mode (see p2p_queue.h).
#include "comm/mpi/p2p_queue.h"

#include <sstream>

#include "comm/keep_alive.h"
#include "comm/mpi_wait.h"
#include "comm/p2p_check.h"

namespace st::comm::mpi {
namespace {

MPI_Datatype raw_type(DType t) { return mpi_raw_type(static_cast<int>(t)); }

// "..., receive from rank 0 with tag 7 into 4 x f32" for errors on transfer `t`.
std::string transfer_where(const P2PBatch& b, const P2PBatch::Transfer& t) {
  std::ostringstream os;
  os << b.who << ", " << (t.recv ? "receive from" : "send to") << " rank " << t.peer << " with tag " << t.tag
     << (t.recv ? " into " : " of ") << t.count << " x " << dtype_name(t.dtype);
  return os.str();
}

class MpiP2PWork final : public Work {
 public:
  MpiP2PWork(std::shared_ptr<CommState> state, std::string op, uint64_t seq, std::shared_ptr<P2PQueue> q,
             std::shared_ptr<P2PBatch> b, std::shared_ptr<PostQueue> posts, std::shared_ptr<Postable> posted)
      : Work(std::move(state), std::move(op), seq),
        q_(std::move(q)),
        b_(std::move(b)),
        posts_(std::move(posts)),
        posted_(std::move(posted)) {}
  ~MpiP2PWork() override { settle(); }
  std::string pending_note() const override {
    return posted_->posted ? q_->pending_note(*b_) : kNotPostedNote;
  }
  bool started() const override { return posted_->posted && b_->posted; }

 protected:
  bool poll() override {
    if (!posted_->posted) posts_->progress();
    if (!posted_->error.empty() && b_->error.empty()) throw CommError(posted_->error);
    if (!posted_->posted) return false;
    return q_->poll(*b_);
  }
  void finish() override {
    if (b_->after) b_->after();
    b_->after = nullptr;  // returns the leases it holds to the pool
    b_->keep.clear();
    b_->staged.clear();
  }
  void abandon() override { keep_alive_forever(b_); }

 private:
  std::shared_ptr<P2PQueue> q_;
  std::shared_ptr<P2PBatch> b_;
  std::shared_ptr<PostQueue> posts_;
  std::shared_ptr<Postable> posted_;
};

}  // namespace

P2PQueue::P2PQueue(MPI_Comm comm, std::shared_ptr<CommState> state)
    : comm_(comm), state_(std::move(state)), recv_index_(static_cast<size_t>(state_->size()), 0) {}

void P2PQueue::issue(const std::shared_ptr<P2PBatch>& b) {
  for (auto& t : b->transfers)
    if (t.recv) t.index = ++recv_index_[static_cast<size_t>(t.peer)];
  if (!b->strict) {
    try {
      post(*b);
    } catch (const CommError& e) {
      fail(*b, e.what());
      keep_alive_forever(b);  // what was posted may still touch its buffers
      throw;
    }
    return;
  }
  queue_.push_back(b);
  progress();
}

void P2PQueue::post(P2PBatch& b) {
  const size_t n = b.transfers.size();
  b.reqs.assign(n, MPI_REQUEST_NULL);
  b.done.assign(n, 0);
  // Receives first, then sends; all nonblocking.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < n; ++i) {
      const P2PBatch::Transfer& t = b.transfers[i];
      if (t.recv != (pass == 0)) continue;
      const MPI_Datatype type = raw_type(t.dtype);
      if (t.recv)
        CHECK_MPI(MPI_Irecv(t.buf, t.count, type, t.peer, b.strict ? MPI_ANY_TAG : t.tag, comm_, &b.reqs[i]),
                  transfer_where(b, t));
      else if (b.strict)
        CHECK_MPI(MPI_Issend(t.buf, t.count, type, t.peer, t.tag, comm_, &b.reqs[i]), transfer_where(b, t));
      else
        CHECK_MPI(MPI_Isend(t.buf, t.count, type, t.peer, t.tag, comm_, &b.reqs[i]), transfer_where(b, t));
    }
  }
  b.posted = true;
}

void P2PQueue::fail(P2PBatch& b, const std::string& msg) {
  if (b.error.empty()) b.error = msg;
  state_->mark_broken(msg);
}

void P2PQueue::test(P2PBatch& b) {
  try {
    bool all = true;
    for (size_t i = 0; i < b.transfers.size(); ++i) {
      if (b.done[i]) continue;
      const P2PBatch::Transfer& t = b.transfers[i];
      MPI_Status s;
      s.MPI_TAG = -1;
      int flag = 0;
      const int rc = MPI_Test(&b.reqs[i], &flag, &s);  // an error code means the request completed
      int cls = rc;
      if (rc != MPI_SUCCESS) CHECK_MPI(MPI_Error_class(rc, &cls), transfer_where(b, t));
      const bool truncated = cls == MPI_ERR_TRUNCATE;
      if (t.recv && b.strict && (rc == MPI_SUCCESS ? flag != 0 : truncated)) {
        // The message matched in issue order: is it the one this receive expects?
        int count = MPI_UNDEFINED;
        CHECK_MPI(MPI_Get_count(&s, raw_type(t.dtype), &count), transfer_where(b, t));
        if (count == MPI_UNDEFINED || (truncated && count <= t.count)) count = -1;  // only "longer" is known
        const Envelope want{t.tag, t.count, static_cast<int64_t>(t.dtype), static_cast<int64_t>(t.index)};
        const Envelope got{s.MPI_TAG, count, static_cast<int64_t>(t.dtype), 0};
        std::string m = p2p_mismatch(b.who, state_->rank(), t.peer, want, got, truncated);
        if (!m.empty()) return fail(b, m);
      } else if (rc != MPI_SUCCESS) {
        int count = MPI_UNDEFINED;
        if (t.recv && truncated) MPI_Get_count(&s, raw_type(t.dtype), &count);  // best effort, for the message
        std::string where = transfer_where(b, t);
        if (count != MPI_UNDEFINED && count > t.count) where += " (the message holds " + std::to_string(count) + ")";
        CHECK_MPI_RC(rc, "MPI_Test", where);
      }
      if (flag)
        b.done[i] = 1;
      else
        all = false;
    }
    b.complete = all;
  } catch (const CommError& e) {
    fail(b, e.what());
  }
}

void P2PQueue::progress() {
  while (!queue_.empty() && !state_->broken()) {
    P2PBatch& head = *queue_.front();
    if (!head.posted) {
      try {
        post(head);
      } catch (const CommError& e) {
        return fail(head, e.what());
      }
    }
    test(head);
    if (!head.complete) return;
    queue_.pop_front();  // the next batch may start
  }
}

bool P2PQueue::poll(P2PBatch& b) {
  if (b.strict)
    progress();
  else if (!b.complete && b.error.empty())
    test(b);
  if (!b.error.empty()) throw CommError(b.error);
  return b.complete;
}

void P2PQueue::on_poll() {
  if (!queue_.empty()) progress();
}

std::string P2PQueue::pending_note(const P2PBatch& b) const {
  if (!b.strict || b.posted || queue_.empty() || queue_.front().get() == &b) return "";
  const P2PBatch& head = *queue_.front();
  return "strict p2p mode: this batch is queued behind " + head.op + " seq " + std::to_string(head.seq) +
         ", which has not completed (a communicator's batches run one at a time, as on NCCL's stream)";
}

WorkPtr make_p2p_work(std::shared_ptr<CommState> state, std::string op, uint64_t seq, std::shared_ptr<P2PQueue> queue,
                      std::shared_ptr<P2PBatch> batch, std::shared_ptr<PostQueue> posts,
                      std::shared_ptr<Postable> posted) {
  return std::make_shared<MpiP2PWork>(std::move(state), std::move(op), seq, std::move(queue), std::move(batch),
                                      std::move(posts), std::move(posted));
}

}  // namespace st::comm::mpi
