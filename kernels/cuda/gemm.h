// Matrix products y = x · Wᵀ (+ bias) for linear layers on the GPU.
//
// W is stored as Hugging Face nn.Linear does: [n, k] row-major, the
// checkpoint's own layout (no packing). x is [m, k] with row stride ldx, y is
// [m, n] with row stride ldy. Inputs are fp32, fp16 or bf16 (x, W and bias of
// one type); y is the input type or fp32 (the lm_head writes fp32 logits).
// Accumulation is fp32 (fp32 inputs: full fp32, no TF32).
//
// Two implementations:
//  * GemmCublasLt: cuBLASLt with its heuristic's first algorithm for the
//    shape. Fast; its algorithm (and so the reduction order over k) may
//    change with m, so a row's result may depend on the batch.
//  * GemmInvariant: kvserve's own tiled kernel, tensor cores for fp16/bf16.
//    Every y[r][c] is reduced over k in one fixed order that depends on
//    neither m nor r (no split-k, one tile shape for every m), so a row's
//    result is bit-identical whatever else is in the batch. The
//    batch-invariant mode's product.
#pragma once

#include <cublasLt.h>

#include "kernels/cuda/cuda_types.h"

namespace kvserve::kernels::cuda {

struct CudaGemmParams {
  ElemType in_type = ElemType::kBF16;   // x, w and bias
  ElemType out_type = ElemType::kBF16;  // y: in_type or kF32
  const void* x = nullptr;
  int64_t ldx = 0;
  const void* w = nullptr;     // [n, k] row-major, row stride k
  const void* bias = nullptr;  // [n] or nullptr
  void* y = nullptr;
  int64_t ldy = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
};

// What cuBLASLt needs besides the operands. The caller (the engine) creates
// and owns the handle and the workspace; kernels allocate nothing.
struct CublasLtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;  // device memory
  size_t workspace_bytes = 0;
};

// Returns CUBLAS_STATUS_SUCCESS or the first failing cuBLASLt status
// (CUBLAS_STATUS_INVALID_VALUE for a type pair it does not support).
cublasStatus_t GemmCublasLt(const CublasLtContext& ctx, const CudaGemmParams& p,
                            cudaStream_t stream);

cudaError_t GemmInvariant(const CudaGemmParams& p, cudaStream_t stream);

}  // namespace kvserve::kernels::cuda
