// The FP8 GEMM on CUDA (ops/fp8_matmul.h): c (M, N) = (sa⁻¹ · sb⁻¹) · a (M, K) · b (N, K)ᵀ.
//
// cuBLASLt path. Row-major c = a·bᵀ is cuBLASLt's column-major D (N × M) = op(A) · op(B) with
// A = b (stored (N, K) row-major = column-major K × N, ld K, op T) and B = a (column-major K × M,
// ld K, op N): exactly the "TN" form cublasLtMatmul's FP8 requirements ask for (A transposed, B
// not; CUBLAS_COMPUTE_32F; scale type CUDA_R_32F; 16-byte aligned pointers and leading dims).
// The scales go in as device pointers (A_SCALE = b's s⁻¹, B_SCALE = a's), read when the GEMM runs;
// FAST_ACCUM off for Fp8Accum::promoted (cuBLASLt promotes the tensor cores' partial sums to f32
// periodically), on for Fp8Accum::fast;
// C = D in c's dtype, β = 0; a bias (N, c's dtype) is added by the epilogue (CUBLASLT_EPILOGUE_BIAS:
// to α·Σ in f32, before the one rounding to c's dtype). The algorithm of each (device, dtypes, shape, alignment) comes from
// cuBLASLt's heuristic once and is cached; a case with no kernel is remembered as unsupported.
//
// Fallback (no cuBLASLt kernel, e.g. K not a multiple of 16): a and b widened to bf16 (exact:
// every e4m3 / e5m2 value is a bf16 value), one cuBLAS GEMM with f32 accumulation (gemm_f32), then
// c = α · acc (+ bias) with α = sa⁻¹ · sb⁻¹ (scale_kernel), the CPU emulation's formula.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "ops/cuda/common.cuh"
#include "ops/cuda/cublas_common.h"
#include "ops/fp8_matmul.h"
#include "ops/matmul.h"
#include "tensor/autograd.h"

namespace st::ops::cuda {
namespace {

struct Fp8LtState {
  std::mutex mu;
  std::map<int, cublasLtHandle_t> handles;  // per device
  // (device, a dtype, b dtype, c dtype, M, N, K, bias, fast accumulation); matrices always 16-byte aligned here
  using Key = std::tuple<int, int, int, int, int64_t, int64_t, int64_t, bool, bool>;
  std::map<Key, std::pair<bool, cublasLtMatmulAlgo_t>> algos;  // (supported, algorithm)
  int64_t launches = 0;
};
Fp8LtState& lt_state() {
  static auto* s = new Fp8LtState();  // leaked: outlives static destruction
  return *s;
}

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::f8e4m3: return CUDA_R_8F_E4M3;
    case DType::f8e5m2: return CUDA_R_8F_E5M2;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

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

// false, touching nothing, where cuBLASLt has no FP8 kernel for the case
bool fp8_gemm_lt(const Tensor& a, const float* sa, const Tensor& b, const float* sb, Tensor& c, const Tensor& bias,
                 Fp8Accum accum) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  if (M <= 0 || N <= 0 || K <= 0 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return false;
  // the documented requirements: 16-byte leading dims (fp8 operands: K elements; c: N elements)
  // and 16-byte aligned matrices
  if (K % 16 != 0 || (N * static_cast<int64_t>(dtype_size(c.dtype()))) % 16 != 0) return false;
  for (const void* p : {a.data_ptr(), b.data_ptr(), c.data_ptr()})
    if (!st::cuda::aligned16(p)) return false;
  if (bias.defined() && !st::cuda::aligned16(bias.data_ptr())) return false;

  const int device = st::cuda::current_device();
  cudaStream_t stream = current_stream();
  void* ws = gemm_workspace(stream);
  Fp8LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  cublasLtHandle_t& h = s.handles[device];
  if (!h) CHECK_CUBLAS(cublasLtCreate(&h));

  Desc d;
  CHECK_CUBLAS(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_attr(d.op, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set_attr(d.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(sb));  // A = b
  set_attr(d.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(sa));  // B = a
  const int8_t fast_accum = accum == Fp8Accum::fast ? 1 : 0;
  set_attr(d.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum);
  if (bias.defined()) {  // D = α·A·B + bias[row of D] (D's rows are c's columns), in f32, then rounded
    set_attr(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr());
    set_attr(d.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, lt_type(c.dtype()));
  }
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.a, lt_type(b.dtype()), K, N, K));  // b: K × N col-major, op T
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.b, lt_type(a.dtype()), K, M, K));  // a: K × M col-major
  CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&d.d, lt_type(c.dtype()), N, M, N));  // c: N × M col-major

  const Fp8LtState::Key key{device, static_cast<int>(a.dtype()), static_cast<int>(b.dtype()),
                            static_cast<int>(c.dtype()), M, N, K, bias.defined(), fast_accum != 0};
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
  ++s.launches;
  return true;
}

// c (n = M·N) = α · acc (n) (+ bias[i % N]), α = *sa · *sb, rounded once to c's dtype
template <class O>
__global__ void scale_kernel(const float* acc, int64_t n, const float* sa, const float* sb, const O* bias, int64_t N,
                             O* c) {
  const float alpha = __fmul_rn(*sa, *sb);
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = __fmul_rn(alpha, acc[i]);
    c[i] = from_float<O>(bias ? __fadd_rn(v, to_float(bias[i % N])) : v);
  }
}

void fp8_gemm_fallback(const Tensor& a, const float* sa, const Tensor& b, const float* sb, Tensor& c,
                       const Tensor& bias) {
  NoGradGuard ng;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(0);
  Tensor a16 = a.to(DType::bf16), b16 = b.to(DType::bf16);  // (M, K), (N, K): exact
  Tensor acc = Tensor::empty({M, N}, DType::f32, Device::cuda);
  gemm_f32(a16, b16, acc, false, true, M, N, K, false);
  const int64_t n = M * N;
  if (n == 0) return;
  visit_float_dtype(c.dtype(), "fp8_matmul", [&](auto tag) {
    using O = decltype(tag);
    scale_kernel<O><<<grid_for(n, 256), 256, 0, current_stream()>>>(
        acc.data<float>(), n, sa, sb, bias.defined() ? static_cast<const O*>(bias.data_ptr()) : nullptr, N,
        static_cast<O*>(c.data_ptr()));
    CHECK_LAUNCH();
  });
}

}  // namespace

void fp8_gemm(const Tensor& a, const float* a_scale_inv, const Tensor& b, const float* b_scale_inv, Tensor& c,
              const Tensor& bias, Fp8Accum accum) {
  check_contiguous_cuda("fp8_matmul", {&a, &b, &c});
  if (bias.defined()) check_contiguous_cuda("fp8_matmul", {&bias});
  if (!fp8_gemm_lt(a, a_scale_inv, b, b_scale_inv, c, bias, accum))  // the fallback's f32 sums serve both
    fp8_gemm_fallback(a, a_scale_inv, b, b_scale_inv, c, bias);
}

int64_t fp8_gemm_lt_launches() {
  Fp8LtState& s = lt_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.launches;
}

}  // namespace st::ops::cuda
