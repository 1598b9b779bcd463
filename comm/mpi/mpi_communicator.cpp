// MPI backend (see mpi_communicator.h). Every operation: stage the tensors on the host (a no-op
// for CPU tensors), post one nonblocking MPI call, and return an MpiWork whose finish() scales
// avg results, rounds widened f16 / bf16 values once, and copies results back to CUDA tensors.
#include "comm/mpi/mpi_communicator.h"

#include <functional>

#include "comm/mpi/host_stage.h"
#include "comm/mpi_wait.h"

namespace st::comm {
namespace {

using mpi::host_view;
using mpi::is_half;
using mpi::unstage;

// Everything an in-flight MPI operation touches; outlives the Work if the Work is abandoned.
struct MpiPayload {
  std::vector<MPI_Request> reqs;
  std::vector<Tensor> keep;     // buffers MPI reads or writes
  std::function<void()> after;  // runs once after completion
};

class MpiWork final : public Work {
 public:
  MpiWork(std::shared_ptr<CommState> state, std::string op, uint64_t seq, std::shared_ptr<MpiPayload> p)
      : Work(std::move(state), std::move(op), seq), p_(std::move(p)) {}
  ~MpiWork() override { settle(); }

 protected:
  bool poll() override {
    int flag = 0;
    int rc = MPI_Testall(static_cast<int>(p_->reqs.size()), p_->reqs.data(), &flag, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      std::string msg = "comm error: " + describe() + ": " + mpi_describe(rc);
      state()->mark_broken(msg);
      throw CommError(msg);
    }
    return flag != 0;
  }
  void finish() override {
    if (p_->after) p_->after();
    p_->keep.clear();
  }
  void abandon() override { keep_alive_forever(p_); }

 private:
  std::shared_ptr<MpiPayload> p_;
};

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }
MPI_Datatype raw_type(const Tensor& t) { return mpi_raw_type(static_cast<int>(t.dtype())); }
int count_of(const Tensor& t) { return static_cast<int>(t.numel()); }
bool same_memory(const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); }

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const std::string& name, Millis timeout)
    : Communicator(std::make_shared<CommState>(
          [&] {
            int r = 0;
            CHECK_MPI(MPI_Comm_rank(comm, &r));
            return r;
          }(),
          [&] {
            int s = 0;
            CHECK_MPI(MPI_Comm_size(comm, &s));
            return s;
          }(),
          name, timeout)),
      comm_(comm) {
  CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
}

MpiCommunicator::~MpiCommunicator() {
  // A broken communicator may still have requests in flight: leave its MPI_Comm alone.
  int fin = 0;
  MPI_Finalized(&fin);
  if (!broken() && !fin) MPI_Comm_free(&comm_);
}

std::shared_ptr<MpiCommunicator> MpiCommunicator::dup(MPI_Comm parent, const std::string& name, Millis timeout) {
  require_mpi("MpiCommunicator::dup");
  MPI_Comm child = MPI_COMM_NULL;
  MPI_Request req;
  CHECK_MPI(MPI_Comm_idup(parent, &child, &req));
  mpi_wait_deadline(&req, timeout, "creating communicator '" + name + "' (MPI_Comm_idup)");
  return std::make_shared<MpiCommunicator>(child, name, timeout);
}

std::vector<CollectiveSignature> MpiCommunicator::exchange_signatures(const CollectiveSignature& mine) {
  return mpi_exchange_signatures(comm_, mine, *state(), timeout());
}

WorkPtr MpiCommunicator::do_all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  const int n = count_of(in);
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  if (is_half(in.dtype())) {
    // in (n) f16/bf16 → wide (n) f32, reduced in place, rounded once into out (n).
    Tensor wide = mpi::widen_f32(host_view(in, true));
    p->keep = {wide};
    CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, wide.data_ptr(), n, MPI_FLOAT, mpi_op(op), comm_, p->reqs.data()));
    p->after = [wide, out, divisor] {
      Tensor hout = host_view(out, false);
      mpi::narrow_from_f32(wide, hout, divisor);
      unstage(hout, out);
    };
  } else {
    const bool in_place = same_memory(in, out);
    Tensor hin = host_view(in, true);
    Tensor hout = in_place ? hin : host_view(out, false);
    p->keep = {hin, hout};
    CHECK_MPI(MPI_Iallreduce(in_place ? MPI_IN_PLACE : hin.data_ptr(), hout.data_ptr(), n, raw_type(in),
                             mpi_op(op), comm_, p->reqs.data()));
    p->after = [hout, out, divisor] {
      if (divisor != 1.0) mpi::divide_f32(hout, divisor);
      unstage(hout, out);
    };
  }
  return std::make_shared<MpiWork>(state(), "allreduce", seq, p);
}

WorkPtr MpiCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  const int n = count_of(out);
  const double divisor = op == ReduceOp::avg ? size() : 1.0;
  if (is_half(in.dtype())) {
    // in (size·n) → wide_in (size·n) f32 → wide_out (n) f32 → out (n), rounded once.
    Tensor wide_in = mpi::widen_f32(host_view(in, true));
    Tensor wide_out = Tensor::empty({n}, DType::f32, Device::cpu);
    p->keep = {wide_in, wide_out};
    CHECK_MPI(MPI_Ireduce_scatter_block(wide_in.data_ptr(), wide_out.data_ptr(), n, MPI_FLOAT, mpi_op(op), comm_,
                                        p->reqs.data()));
    p->after = [wide_out, out, divisor] {
      Tensor hout = host_view(out, false);
      mpi::narrow_from_f32(wide_out, hout, divisor);
      unstage(hout, out);
    };
  } else {
    // out may be in's own chunk: then receive into a separate buffer and copy after.
    Tensor hin = host_view(in, true);
    const bool direct = !out.is_cuda() && !same_memory(in, out);
    Tensor hout = direct ? out.detach() : Tensor::empty(out.shape(), out.dtype(), Device::cpu);
    p->keep = {hin, hout};
    CHECK_MPI(MPI_Ireduce_scatter_block(hin.data_ptr(), hout.data_ptr(), n, raw_type(in), mpi_op(op), comm_,
                                        p->reqs.data()));
    p->after = [hout, out, divisor, direct] {
      if (divisor != 1.0) mpi::divide_f32(hout, divisor);
      if (!direct) out.detach().copy_(hout);
    };
  }
  return std::make_shared<MpiWork>(state(), "reduce_scatter", seq, p);
}

WorkPtr MpiCommunicator::do_all_gather(const Tensor& in, const Tensor& out, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  const int n = count_of(in);
  const size_t chunk_bytes = in.nbytes();
  const bool aliased = same_memory(in, out);
  const bool in_place =
      aliased && static_cast<char*>(in.data_ptr()) == static_cast<char*>(out.data_ptr()) + rank() * chunk_bytes;
  // in (n) → out (size·n). In place: MPI reads this rank's chunk from out itself.
  Tensor hout = host_view(out, in_place);
  Tensor hin;
  if (!in_place) hin = aliased ? in.detach().to(Device::cpu).clone() : host_view(in, true);
  p->keep = {hout, hin};
  CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : hin.data_ptr(), in_place ? 0 : n,
                           in_place ? MPI_DATATYPE_NULL : raw_type(in), hout.data_ptr(), n, raw_type(out), comm_,
                           p->reqs.data()));
  p->after = [hout, out] { unstage(hout, out); };
  return std::make_shared<MpiWork>(state(), "all_gather", seq, p);
}

WorkPtr MpiCommunicator::do_broadcast(const Tensor& t, int root, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  Tensor h = host_view(t, rank() == root);  // t (n)
  p->keep = {h};
  CHECK_MPI(MPI_Ibcast(h.data_ptr(), count_of(t), raw_type(t), root, comm_, p->reqs.data()));
  if (rank() != root) p->after = [h, t] { unstage(h, t); };
  return std::make_shared<MpiWork>(state(), "broadcast", seq, p);
}

WorkPtr MpiCommunicator::do_barrier(uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(1);
  CHECK_MPI(MPI_Ibarrier(comm_, p->reqs.data()));
  return std::make_shared<MpiWork>(state(), "barrier", seq, p);
}

std::shared_ptr<Communicator> MpiCommunicator::do_split(int color, int key, const std::string& name) {
  try {
    mpi_agree(comm_, timeout(), state()->where() + ", op split");
  } catch (const TimeoutError& e) {
    state()->mark_broken(e.what());
    throw;
  }
  // Every rank reached the split: the blocking MPI_Comm_split below cannot wait on a missing peer.
  MPI_Comm child = MPI_COMM_NULL;
  CHECK_MPI(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child));
  if (child == MPI_COMM_NULL) return nullptr;
  return std::make_shared<MpiCommunicator>(child, name, timeout());
}

WorkPtr MpiCommunicator::do_batch_p2p(const std::vector<P2POp>& ops, const std::string& op_name, uint64_t seq) {
  auto p = std::make_shared<MpiPayload>();
  p->reqs.resize(ops.size());
  std::vector<std::pair<Tensor, Tensor>> copy_back;  // (host, cuda dst) for CUDA receives
  // Receives first, then sends; all nonblocking, so the order across ranks cannot deadlock.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& o = ops[i];
      const bool is_recv = o.kind == P2POp::Kind::recv;
      if (is_recv != (pass == 0)) continue;
      Tensor h = host_view(o.tensor, !is_recv);
      p->keep.push_back(h);
      if (is_recv) {
        CHECK_MPI(MPI_Irecv(h.data_ptr(), count_of(h), raw_type(h), o.peer, o.tag, comm_, &p->reqs[i]));
        if (o.tensor.is_cuda()) copy_back.emplace_back(h, o.tensor);
      } else {
        CHECK_MPI(MPI_Isend(h.data_ptr(), count_of(h), raw_type(h), o.peer, o.tag, comm_, &p->reqs[i]));
      }
    }
  }
  if (!copy_back.empty())
    p->after = [copy_back] {
      for (const auto& [h, dst] : copy_back) unstage(h, dst);
    };
  return std::make_shared<MpiWork>(state(), op_name, seq, p);
}

}  // namespace st::comm
