// GemmCublasLt (gemm.h): y = x · Wᵀ (+ bias) through cuBLASLt.
//
// Row-major to cuBLASLt's column-major: a row-major [r, c] matrix with row
// stride ld is a column-major [c, r] matrix with leading dimension ld, so
//   yᵀ [n, m] = W [n, k] · xᵀ [k, m]
// with A = W seen as column-major [k, n] (ld k) and transa = T, B = xᵀ as
// column-major [k, m] (ld ldx), C = D = yᵀ column-major [n, m] (ld ldy). The
// bias is a per-row vector of D (length n), which is what the
// CUBLASLT_EPILOGUE_BIAS epilogue adds.
//
// Bias: cuBLASLt's bias vector has D's type, so the epilogue is used when
// out_type == in_type; for fp16/bf16 in with fp32 out (and for a bias not
// 16-byte aligned, or a shape with no epilogue algorithm) the product runs
// without it and AddBiasRows (gemm_bias.cu) adds the bias afterwards (one
// fp32 addition, rounded once; for fp32 y identical to the epilogue).
//
// Plan cache: the heuristic (cublasLtMatmulAlgoGetHeuristic, first result)
// costs tens of microseconds, so descriptors, layouts and the algorithm are
// kept per PlanKey (handle, types, m, n, k, ldx, ldy, bias, the pointers'
// alignments, which the heuristic depends on, and the workspace size) in a
// process-wide map behind one mutex. The mutex is held through
// cublasLtMatmul because the bias pointer is written into the shared
// operation descriptor for each call; cublasLtMatmul only enqueues, so the
// hold is short. When the map reaches kMaxPlans entries it is emptied
// (descriptors are host objects read at enqueue time, so freeing them after
// cublasLtMatmul returned is safe). Entries are never freed otherwise: the
// cache lives until process exit.
#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>

#include "kernels/cuda/gemm.h"

namespace kvserve::kernels::cuda {
namespace internal {
// gemm_bias.cu.
cudaError_t AddBiasRows(void* y, ElemType out_type, int64_t ldy, const void* bias,
                        ElemType bias_type, int64_t m, int64_t n, cudaStream_t stream);
}  // namespace internal

namespace {

constexpr size_t kMaxPlans = 4096;

cudaDataType_t CudaType(ElemType t) {
  switch (t) {
    case ElemType::kF32:
      return CUDA_R_32F;
    case ElemType::kF16:
      return CUDA_R_16F;
    case ElemType::kBF16:
      return CUDA_R_16BF;
  }
  return CUDA_R_32F;
}

// Largest power of two (<= 256, cuBLASLt's default assumption) dividing p.
uint32_t Alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  const uintptr_t low = a & (~a + 1);
  return low >= 256 ? 256 : static_cast<uint32_t>(low);
}

struct PlanKey {
  cublasLtHandle_t handle;
  ElemType in_type, out_type;
  int64_t m, n, k, ldx, ldy;
  bool bias_epilogue;  // asked for; the plan may fall back (Plan::bias_epilogue)
  uint32_t align_x, align_w, align_y, align_bias;
  size_t workspace_bytes;

  bool operator==(const PlanKey& o) const {
    return handle == o.handle && in_type == o.in_type && out_type == o.out_type && m == o.m &&
           n == o.n && k == o.k && ldx == o.ldx && ldy == o.ldy &&
           bias_epilogue == o.bias_epilogue && align_x == o.align_x && align_w == o.align_w &&
           align_y == o.align_y && align_bias == o.align_bias &&
           workspace_bytes == o.workspace_bytes;
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = std::hash<const void*>()(key.handle);
    auto mix = [&h](uint64_t v) {
      h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    mix(static_cast<uint64_t>(key.in_type) * 4 + static_cast<uint64_t>(key.out_type));
    mix(key.m);
    mix(key.n);
    mix(key.k);
    mix(key.ldx);
    mix(key.ldy);
    mix(key.bias_epilogue);
    mix((uint64_t{key.align_x} << 32) | key.align_w);
    mix((uint64_t{key.align_y} << 32) | key.align_bias);
    mix(key.workspace_bytes);
    return h;
  }
};

// Owns the cuBLASLt objects of one problem shape.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo = {};
  bool bias_epilogue = false;  // the epilogue adds the bias (else AddBiasRows)

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

#define KVSERVE_LT_RETURN_IF_ERROR(expr)                          \
  do {                                                            \
    const cublasStatus_t kvserve_st_ = (expr);                    \
    if (kvserve_st_ != CUBLAS_STATUS_SUCCESS) return kvserve_st_; \
  } while (0)

// Builds descriptors and picks the heuristic's first algorithm; `bias` is
// the call's bias pointer (the heuristic reads its alignment), or nullptr
// for a plan without the epilogue.
cublasStatus_t BuildPlan(const CublasLtContext& ctx, const CudaGemmParams& p, const void* bias,
                         Plan& plan) {
  const cudaDataType_t in = CudaType(p.in_type);
  const cudaDataType_t out = CudaType(p.out_type);
  // fp32 inputs: CUBLAS_COMPUTE_32F is full fp32 (TF32 only with _FAST_TF32).
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                            &trans_a, sizeof(trans_a)));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                            &trans_b, sizeof(trans_b)));
  if (bias != nullptr) {
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = in;
    KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    plan.bias_epilogue = true;
  }
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.a, in, p.k, p.n, p.k));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.b, in, p.k, p.m, p.ldx));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan.d, out, p.n, p.m, p.ldy));

  cublasLtMatmulPreference_t pref = nullptr;
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      pref_owner(pref, cublasLtMatmulPreferenceDestroy);
  const uint64_t workspace = ctx.workspace_bytes;
  const uint32_t align_a = Alignment(p.w), align_b = Alignment(p.x), align_d = Alignment(p.y);
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof(align_d)));
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof(align_d)));

  cublasLtMatmulHeuristicResult_t result = {};
  int found = 0;
  KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(
      ctx.handle, plan.op, plan.a, plan.b, plan.d, plan.d, pref, 1, &result, &found));
  if (found == 0 || result.state != CUBLAS_STATUS_SUCCESS) return CUBLAS_STATUS_NOT_SUPPORTED;
  plan.algo = result.algo;
  return CUBLAS_STATUS_SUCCESS;
}

class PlanCache {
 public:
  static PlanCache& Get() {
    static PlanCache* cache = new PlanCache();  // never destroyed: usable during exit
    return *cache;
  }

  cublasStatus_t Run(const CublasLtContext& ctx, const CudaGemmParams& p, cudaStream_t stream) {
    const bool want_epilogue =
        p.bias != nullptr && p.out_type == p.in_type && Alignment(p.bias) >= 16;
    const PlanKey key{ctx.handle,
                      p.in_type,
                      p.out_type,
                      p.m,
                      p.n,
                      p.k,
                      p.ldx,
                      p.ldy,
                      want_epilogue,
                      Alignment(p.x),
                      Alignment(p.w),
                      Alignment(p.y),
                      want_epilogue ? Alignment(p.bias) : 0u,
                      ctx.workspace_bytes};
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      if (plans_.size() >= kMaxPlans) plans_.clear();
      auto plan = std::make_unique<Plan>();
      cublasStatus_t st = BuildPlan(ctx, p, want_epilogue ? p.bias : nullptr, *plan);
      if (st != CUBLAS_STATUS_SUCCESS && want_epilogue) {
        // No algorithm with the epilogue for this shape: bias by kernel.
        plan = std::make_unique<Plan>();
        st = BuildPlan(ctx, p, nullptr, *plan);
      }
      if (st != CUBLAS_STATUS_SUCCESS) return st;
      it = plans_.emplace(key, std::move(plan)).first;
    }
    Plan& plan = *it->second;
    if (plan.bias_epilogue) {
      KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
          plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p.bias, sizeof(p.bias)));
    }
    const float alpha = 1.0f, beta = 0.0f;  // beta = 0: C (= D) is never read
    KVSERVE_LT_RETURN_IF_ERROR(cublasLtMatmul(ctx.handle, plan.op, &alpha, p.w, plan.a, p.x, plan.b,
                                              &beta, p.y, plan.d, p.y, plan.d, &plan.algo,
                                              ctx.workspace, ctx.workspace_bytes, stream));
    if (p.bias != nullptr && !plan.bias_epilogue) {
      if (internal::AddBiasRows(p.y, p.out_type, p.ldy, p.bias, p.in_type, p.m, p.n, stream) !=
          cudaSuccess) {
        return CUBLAS_STATUS_EXECUTION_FAILED;
      }
    }
    return CUBLAS_STATUS_SUCCESS;
  }

 private:
  std::mutex mu_;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans_;
};

}  // namespace

cublasStatus_t GemmCublasLt(const CublasLtContext& ctx, const CudaGemmParams& p,
                            cudaStream_t stream) {
  if (ctx.handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool types_ok = p.in_type == ElemType::kF32
                            ? p.out_type == ElemType::kF32
                            : (p.out_type == p.in_type || p.out_type == ElemType::kF32);
  if (!types_ok || p.x == nullptr || p.w == nullptr || p.y == nullptr || p.m < 0 || p.n <= 0 ||
      p.k <= 0 || p.ldx < p.k || p.ldy < p.n ||
      (ctx.workspace == nullptr && ctx.workspace_bytes > 0)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (p.m == 0) return CUBLAS_STATUS_SUCCESS;  // an empty batch: nothing to write
  return PlanCache::Get().Run(ctx, p, stream);
}

}  // namespace kvserve::kernels::cuda
