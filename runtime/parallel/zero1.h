// ZeRO-1 communication: each DP rank owns a contiguous run of the parameters (and so the
// optimizer state of that run only); gradients are reduce-scattered to their owners and the
// owners' updated values all-gathered back to every rank.
//
// Layout. Parameters (identical list on every rank of `dp`) are cut into dp contiguous runs in
// registration order, balanced by bytes (partition_balanced; with fewer parameters than ranks,
// rank i < n owns parameter i alone and the rest own none). A flat buffer (dp·S,) in the
// parameters' dtype holds run r at [r·S, r·S + size_r), S = the largest run, padding zero. Each
// parameter's .grad() is a view into the gradient buffer, so autograd's += accumulation over
// micro-batches lands there with no copy. reduce_scatter() reduces (SUM) the buffer in place into
// this rank's chunk: afterwards OWNED grads hold the group sum; the other views hold stale data.
// all_gather() packs the owned parameter values into a second flat buffer (dp·S,) and gathers it
// in place, then copies every non-owned parameter from its owner's chunk (= assignment).
// Communication is in the parameters' dtype (the MPI backend reduces f16/bf16 in f32). Ownership
// is fixed at construction (by bytes, so the same before and after a cast of every parameter);
// the buffers are allocated at the first zero_grad(), in the dtype the parameters have then (the
// trainer casts them to the compute dtype after this is built), and again if it changes.
// Every rank of `dp` must call zero_grad/reduce_scatter/all_gather in the same order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "runtime/common/named_tensors.h"
#include "tensor/tensor.h"

namespace st::runtime {

struct Zero1Stats {
  int64_t bytes_reduced = 0, bytes_gathered = 0;  // flat buffer bytes (dp·S·elem) per call, summed
  double reduce_ms = 0, gather_ms = 0;            // launch → wait() returned, summed
};

class Zero1 {
 public:
  // params: this rank's (full name, parameter) list in registration order, identical on every
  // rank of `dp` (same names, shapes, dtype, device).
  Zero1(NamedTensors params, std::shared_ptr<comm::Communicator> dp);
  Zero1(const Zero1&) = delete;
  Zero1& operator=(const Zero1&) = delete;

  const NamedTensors& owned() const { return owned_; }  // this rank's parameters (the optimizer covers these)
  bool owns(const std::string& name) const;
  int owner(const std::string& name) const;  // throws ValueError for an unknown name
  // First and one-past-last parameter index owned by `rank` (registration order).
  int begin(int rank) const { return first_[static_cast<size_t>(rank)]; }
  int end(int rank) const { return first_[static_cast<size_t>(rank) + 1]; }
  int64_t chunk_numel() const { return S_; }  // S: elements per rank in the flat buffers

  // Zeroes the gradient buffer (allocating it first); every parameter's .grad() becomes its view in it.
  void zero_grad();
  // After the step's backward: reduce_scatter SUM of the gradient buffer. Afterwards each OWNED
  // parameter's .grad() holds the sum over the DP group (non-owned grads are undefined).
  void reduce_scatter();
  // After the optimizer updated the owned parameters in place: every rank receives every
  // parameter's new value (in the parameters' dtype).
  void all_gather();

  const Zero1Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  Tensor chunk(const Tensor& flat, int rank) const;  // flat (dp·S,) → (S,) of `rank`

  NamedTensors params_;
  NamedTensors owned_;
  std::shared_ptr<comm::Communicator> dp_;
  std::vector<int> first_;        // (dp + 1): rank r owns params [first_[r], first_[r+1])
  std::vector<int> owner_of_;     // param index → rank
  std::vector<int64_t> offsets_;  // param index → offset within its owner's chunk
  std::unordered_map<std::string, size_t> index_;
  int64_t S_ = 0;
  Tensor grads_;   // (dp·S,) gradient buffer; grads are views of it
  Tensor values_;  // (dp·S,) parameter staging buffer for all_gather
  Zero1Stats stats_;
};

}  // namespace st::runtime
