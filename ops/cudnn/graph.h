// A small C++ layer over cuDNN's backend (graph) API, enough to describe an operation graph of
// tensors, pointwise ops, reductions, matmuls and reshapes, let cuDNN's heuristics pick an engine,
// and run the resulting plan. Used by ops/cudnn/sdpa.cpp (fused attention); nothing here knows
// about attention.
//
// Every descriptor is owned (Desc, destroyed with its Graph/Plan); every backend call is checked
// with CHECK_CUDNN, which throws CudaError carrying cuDNN's own last error message. A graph that no
// engine supports throws too (NotSupported below), so callers can fall back to another kernel.
#pragma once
#include <cudnn.h>

#include <array>
#include <initializer_list>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/error.h"

namespace st::ops::cudnn {

bool cudnn_ok(cudnnStatus_t s);
std::string cudnn_describe(cudnnStatus_t s);  // status name + cudnnGetLastErrorString
#define CHECK_CUDNN(expr) ST_CHECK_GEN(expr, ::st::ops::cudnn::cudnn_ok, ::st::ops::cudnn::cudnn_describe, ::st::CudaError)

// No engine of this cuDNN runs the graph (or the graph does not finalize): callers may fall back.
class NotSupported : public CudaError {
  using CudaError::CudaError;
};

// One cuDNN handle per (device, stream), created at first use and kept for the process.
cudnnHandle_t handle_for(cudaStream_t stream);

// An owned backend descriptor.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type);
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Desc(const Desc&) = delete;
  ~Desc();
  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  void set_desc(cudnnBackendAttributeName_t name, const Desc& value);
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using Dims = std::array<int64_t, 4>;
Dims packed_strides(const Dims& dims);  // row-major

// A finalized execution plan, with every descriptor it references and the by-value scalars.
class Plan {
 public:
  int64_t workspace_bytes() const { return workspace_; }
  std::string engine() const { return engine_; }  // "engine N" for logs
  // uids/pointers: every non-virtual, non-scalar tensor of the graph.
  void execute(cudnnHandle_t h, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
               void* workspace) const;

 private:
  friend class Graph;
  std::vector<Desc> keep_;  // tensors and operations the graph references
  std::unique_ptr<Desc> graph_, plan_;
  std::vector<int64_t> scalar_uids_;
  std::vector<float> scalar_values_;
  int64_t workspace_ = 0;
  std::string engine_;
};

// Builds one operation graph. Tensors are named by uids the caller picks; virtual tensors
// (intermediates that never reach memory) get uids from 1000 up.
class Graph {
 public:
  // A tensor in device memory (the caller passes its pointer to Plan::execute under `uid`).
  int64_t tensor(int64_t uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides);
  // An intermediate; packed strides unless given.
  int64_t virt(cudnnDataType_t dt, const Dims& dims);
  int64_t virt(cudnnDataType_t dt, const Dims& dims, const Dims& strides);
  int64_t scalar(float value);  // an f32 passed by value

  // y = op(x [, b [, t]]); compute in `math` (f32 unless given). For GEN_INDEX, `axis` is the
  // dimension whose index is produced.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b = -1, int64_t t = -1,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1);
  // over the dims where y is 1, and over groups of x's size where y's divides it (the heads of a
  // grouped-query group: x (B, H, T, D) → y (B, Hkv, T, D))
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);
  void matmul(int64_t a, int64_t b, int64_t c);                     // batched over dims 0, 1
  void reshape(int64_t x, int64_t y);

  // Finalizes the graph on `h` and takes the first engine configuration (heuristics mode A, then
  // the fallback list) that builds a plan. Throws NotSupported when none does.
  std::shared_ptr<Plan> build(cudnnHandle_t h);

 private:
  using Link = std::pair<cudnnBackendAttributeName_t, const Desc*>;
  const Desc& desc_of(int64_t uid) const;
  // An operation descriptor linked to `links` (null ones left unset), finalized and kept.
  void add_op(cudnnBackendDescriptorType_t type, std::initializer_list<Link> links);
  std::vector<std::pair<int64_t, size_t>> index_;  // uid → position in tensors_
  std::vector<Desc> tensors_, ops_, aux_;
  std::vector<int64_t> scalar_uids_;
  std::vector<float> scalar_values_;
  int64_t next_virtual_ = 1000;
};

}  // namespace st::ops::cudnn
