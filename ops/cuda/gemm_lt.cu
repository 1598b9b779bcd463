// cuBLASLt GEMMs with fused epilogues (declared in ops/matmul.h, used by ops::linear and
// ops::mlp_gelu for f16/bf16). Same row-major → column-major mapping as ops/cuda/matmul.cu:
// row-major c (M, N) = op(a) · op(b) is cuBLASLt's column-major D (N × M) = op(b)ᵀ · op(a)ᵀ with
// A = b and B = a, so the epilogue's "rows of D" are our N columns:
//   bias:        c = a·b + bias (N)
//   gelu_bias:   aux (M, N) = a·b + bias; c = gelu_tanh(aux)            (aux saved for backward)
//   bgrad_b:     c = a·b; bias_grad (N) = Σ over K of b (K, N)           (cuBLASLt BGRADA)
// (DGELU_BGRAD was tried for the MLP backward and dropped: cuBLASLt ran it as a separate 0.32 ms
// pass at 16384 × 3072 f16 on the H200, 2.6× the own GELU-gradient kernel plus column sum.)
// One cuBLASLt handle per device, the stream's 32 MiB GEMM workspace (cublas_common.h); the algorithm of
// each (shape, transposes, epilogue, alignment) is chosen once by cuBLASLt's heuristic and cached,
// and a configuration cuBLASLt has no kernel for is remembered as unsupported: gemm_lt then
// returns false without touching c, and the caller computes the same result unfused.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cublas_common.h"
#include "ops/matmul.h"

namespace st::ops::cuda {
namespace {

struct LtState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;                      // per device
  using Key = std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int, int>;
  std::map<Key, std::pair<bool, cublasLtMatmulAlgo_t>> algos;  // (supported, algorithm)
  int64_t launches[3] = {0, 0, 0};                              // per LtEpilogue
};
LtState& state() {
  static auto* s = new LtState();  // leaked: outlives static destruction
  return *s;
}

cublasLtEpilogue_t lt_epilogue(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::gelu_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::bgrad_b: return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// 16-byte alignment of every pointer, as a bit mask (cuBLASLt picks kernels by alignment)
int alignment_bits(std::initializer_list<const void*> ps) {
  int bits = 0, i = 0;
  for (const void* p : ps) bits |= (st::cuda::aligned16(p) ? 1 : 0) << i++;
  return bits;
}

// RAII holders for the descriptors of one call
struct Desc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~Desc() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <class V>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

}  // namespace

bool gemm_lt(const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
             LtEpilogue ep, const Tensor& bias, const Tensor& aux, const Tensor& bias_grad) {
  check_contiguous_cuda("matmul (cuBLASLt)", {&a, &b, &c, &bias, &aux, &bias_grad});
  const DType dt = a.dtype();
  if ((dt != DType::f16 && dt != DType::bf16) || b.dtype() != dt || c.dtype() != dt) return false;
  if (M <= 0 || N <= 0 || K <= 0 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return false;
  const cudaDataType_t t = dt == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const bool needs_bias = ep == LtEpilogue::bias || ep == LtEpilogue::gelu_bias;
  const bool needs_aux = ep == LtEpilogue::gelu_bias;
  const Tensor& vec = needs_bias ? bias : bias_grad;  // (N) in or out
  if (!vec.defined() || vec.numel() != N || vec.dtype() != dt) return false;
  if (needs_aux && (!aux.defined() || aux.numel() != M * N || aux.dtype() != dt || N % 8 != 0)) return false;

  const int device = st::cuda::current_device();
  cudaStream_t stream = current_stream();
  void* ws = gemm_workspace(stream);
  LtState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cublasLtHandle_t& h = s.handles[device];
  if (!h) CHECK_CUBLAS(cublasLtCreate(&h));

  // column-major: D (N × M) = op(A)·op(B), A = b stored (N × K | K × N), B = a stored (K × M | M × K)
  Desc d;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSA, opA);
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSB, opB);
  set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(ep));
  const void* vec_ptr = vec.data_ptr();
  set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vec_ptr);
  const int32_t vec_type = t;
  set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, vec_type);
  if (needs_aux) {
    const void* aux_ptr = aux.data_ptr();
    const int64_t ld_aux = N;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux_ptr);
    set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld_aux);
    const int32_t aux_type = t;
    set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type);
  }
  CHECK_CUBLAS(tb ? cublasLtMatrixLayoutCreate(&d.a, t, K, N, K) : cublasLtMatrixLayoutCreate(&d.a, t, N, K, N));
  CHECK_CUBLAS(ta ? cublasLtMatrixLayoutCreate(&d.b, t, M, K, M) : cublasLtMatrixLayoutCreate(&d.b, t, K, M, K));
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.d, t, N, M, N));

  const LtState::Key key{device, static_cast<int>(dt), ta, tb, M, N, K, static_cast<int>(ep),
                         alignment_bits({a.data_ptr(), b.data_ptr(), c.data_ptr(), vec_ptr,
                                         needs_aux ? aux.data_ptr() : nullptr})};
  auto it = s.algos.find(key);
  if (it == s.algos.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws_bytes = kGemmWorkspaceBytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &ws_bytes, sizeof(ws_bytes));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(h, d.op, d.a, d.b, d.d, d.d, pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    const bool ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    it = s.algos.emplace(key, std::make_pair(ok, res.algo)).first;
  }
  if (!it->second.first) return false;
  const float alpha = 1.f, beta = 0.f;
  CHECK_CUBLAS(cublasLtMatmul(h, d.op, &alpha, b.data_ptr(), d.a, a.data_ptr(), d.b, &beta, c.data_ptr(), d.d,
                          c.data_ptr(), d.d, &it->second.second, ws, kGemmWorkspaceBytes, stream));
  ++s.launches[static_cast<int>(ep)];
  return true;
}

int64_t gemm_lt_launches(LtEpilogue ep) {
  LtState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.launches[static_cast<int>(ep)];
}

}  // namespace st::ops::cuda
