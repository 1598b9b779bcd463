#include "ops/cudnn/graph.h"

#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "tensor/cuda/runtime.h"

namespace st::ops::cudnn {

bool cudnn_ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }

std::string cudnn_describe(cudnnStatus_t s) {
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string out = cudnnGetErrorString(s);
  if (last[0]) out += std::string(": ") + last;
  return out;
}

cudnnHandle_t handle_for(cudaStream_t stream) {
  static std::mutex mu;
  static auto* handles = new std::map<std::pair<int, cudaStream_t>, cudnnHandle_t>();  // leaked: outlives statics
  const int device = st::cuda::current_device();
  std::lock_guard<std::mutex> lock(mu);
  cudnnHandle_t& h = (*handles)[{device, stream}];
  if (!h) {
    CHECK_CUDNN(cudnnCreate(&h));
    CHECK_CUDNN(cudnnSetStream(h, stream));
  }
  return h;
}

// ---- descriptors

Desc::Desc(cudnnBackendDescriptorType_t type) { CHECK_CUDNN(cudnnBackendCreateDescriptor(type, &d_)); }

Desc::~Desc() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

void Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
               const void* values) {
  CHECK_CUDNN(cudnnBackendSetAttribute(d_, name, type, count, values));
}

void Desc::set_desc(cudnnBackendAttributeName_t name, const Desc& value) {
  cudnnBackendDescriptor_t v = value.get();
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

void Desc::finalize() { CHECK_CUDNN(cudnnBackendFinalize(d_)); }

Dims packed_strides(const Dims& dims) {
  Dims s{};
  int64_t acc = 1;
  for (int i = 3; i >= 0; --i) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

// ---- graph

int64_t Graph::tensor(int64_t uid, cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t align = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (uid >= 1000) {
    const bool yes = true;
    t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  t.finalize();
  index_.emplace_back(uid, tensors_.size());
  tensors_.push_back(std::move(t));
  return uid;
}

int64_t Graph::virt(cudnnDataType_t dt, const Dims& dims) { return virt(dt, dims, packed_strides(dims)); }

int64_t Graph::virt(cudnnDataType_t dt, const Dims& dims, const Dims& strides) {
  return tensor(next_virtual_++, dt, dims, strides);
}

int64_t Graph::scalar(float value) {
  const int64_t uid = 900 + static_cast<int64_t>(scalar_uids_.size());
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t dt = CUDNN_DATA_FLOAT;
  const Dims one{1, 1, 1, 1};
  const int64_t align = 16;
  const bool yes = true;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  t.finalize();
  index_.emplace_back(uid, tensors_.size());
  tensors_.push_back(std::move(t));
  scalar_uids_.push_back(uid);
  scalar_values_.push_back(value);
  return uid;
}

const Desc& Graph::desc_of(int64_t uid) const {
  for (const auto& [u, i] : index_)
    if (u == uid) return tensors_[i];
  ST_THROW(ValueError, "cudnn graph: no tensor with uid " << uid);
}

void Graph::add_op(cudnnBackendDescriptorType_t type, std::initializer_list<Link> links) {
  Desc op(type);
  for (const auto& [name, desc] : links)
    if (desc) op.set_desc(name, *desc);
  op.finalize();
  ops_.push_back(std::move(op));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t y, int64_t b, int64_t t, cudnnDataType_t math,
                      int64_t axis) {
  Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw.set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (axis >= 0) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  pw.finalize();
  add_op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, &pw},
          {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, &desc_of(x)},
          {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b >= 0 ? &desc_of(b) : nullptr},
          {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t >= 0 ? &desc_of(t) : nullptr},
          {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, &desc_of(y)}});
  aux_.push_back(std::move(pw));
}

void Graph::reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y) {
  Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  r.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op);
  r.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
  r.finalize();
  add_op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, &desc_of(x)},
                                                        {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, &desc_of(y)},
                                                        {CUDNN_ATTR_OPERATION_REDUCTION_DESC, &r}});
  aux_.push_back(std::move(r));
}

void Graph::matmul(int64_t a, int64_t b, int64_t c) {
  Desc m(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t math = CUDNN_DATA_FLOAT;
  m.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math);
  m.finalize();
  add_op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, &desc_of(a)}, {CUDNN_ATTR_OPERATION_MATMUL_BDESC, &desc_of(b)},
          {CUDNN_ATTR_OPERATION_MATMUL_CDESC, &desc_of(c)}, {CUDNN_ATTR_OPERATION_MATMUL_DESC, &m}});
  aux_.push_back(std::move(m));
}

void Graph::reshape(int64_t x, int64_t y) {
  add_op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, &desc_of(x)}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, &desc_of(y)}});
}

namespace {

// Engine configurations the heuristics of `mode` propose for a finalized operation graph.
std::vector<Desc> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) return {};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                               nullptr) != CUDNN_STATUS_SUCCESS ||
      count <= 0)
    return {};
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  CHECK_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                       &got, raw.data()));
  while (static_cast<int64_t>(cfgs.size()) > got) cfgs.pop_back();
  return cfgs;
}

int64_t engine_index(const Desc& cfg) {
  cudnnBackendDescriptor_t engine = nullptr;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return -1;
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               &engine) == CUDNN_STATUS_SUCCESS)
    cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  cudnnBackendDestroyDescriptor(engine);
  return index;
}

}  // namespace

std::shared_ptr<Plan> Graph::build(cudnnHandle_t h) {
  auto plan = std::make_shared<Plan>();
  plan->graph_ = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc& op : ops_) raw.push_back(op.get());
  Desc& g = *plan->graph_;
  g.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  g.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(raw.size()), raw.data());
  if (cudnnStatus_t s = cudnnBackendFinalize(g.get()); s != CUDNN_STATUS_SUCCESS)
    ST_THROW(NotSupported, "cuDNN does not accept the operation graph: " << cudnn_describe(s));

  std::ostringstream why;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> cfgs = engine_configs(g, mode);
    for (Desc& cfg : cfgs) {
      auto p = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
      p->set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
      if (cudnnStatus_t s = cudnnBackendFinalize(p->get()); s != CUDNN_STATUS_SUCCESS) {
        why << " [engine " << engine_index(cfg) << ": " << cudnn_describe(s) << "]";
        continue;
      }
      int64_t n = 0;
      CHECK_CUDNN(cudnnBackendGetAttribute(p->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                           &plan->workspace_));
      plan->engine_ = "engine " + std::to_string(engine_index(cfg));
      plan->plan_ = std::move(p);
      plan->keep_ = std::move(tensors_);
      for (Desc& d : ops_) plan->keep_.push_back(std::move(d));
      for (Desc& d : aux_) plan->keep_.push_back(std::move(d));
      plan->keep_.push_back(std::move(cfg));
      plan->scalar_uids_ = scalar_uids_;
      plan->scalar_values_ = scalar_values_;
      return plan;
    }
    if (cfgs.empty()) why << " [heuristics mode " << static_cast<int>(mode) << ": no engine]";
  }
  ST_THROW(NotSupported, "no cuDNN engine runs the graph:" << why.str());
}

void Plan::execute(cudnnHandle_t h, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                   void* workspace) const {
  std::vector<int64_t> all_uids = uids;
  std::vector<void*> all_ptrs = ptrs;
  for (size_t i = 0; i < scalar_uids_.size(); ++i) {
    all_uids.push_back(scalar_uids_[i]);
    all_ptrs.push_back(const_cast<float*>(&scalar_values_[i]));
  }
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(all_uids.size()),
           all_uids.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(all_ptrs.size()),
           all_ptrs.data());
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  CHECK_CUDNN(cudnnBackendExecute(h, plan_->get(), pack.get()));
}

}  // namespace st::ops::cudnn
