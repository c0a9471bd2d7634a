// y[r][c] += bias[c] after a cuBLASLt product whose type combination has no
// bias epilogue (gemm_cublaslt.cc). Declared there; internal to the GEMM.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_types.h"

namespace kvserve::kernels::cuda::internal {
namespace {

template <typename T>
__device__ __forceinline__ float Load(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return *p;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(*p);
  } else {
    return __half2float(*p);
  }
}

template <typename T>
__device__ __forceinline__ void Store(T* p, float v) {
  if constexpr (std::is_same_v<T, float>) {
    *p = v;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    *p = __float2bfloat16_rn(v);
  } else {
    *p = __float2half_rn(v);
  }
}

// One fp32 addition per element and one rounding to OutT: for fp32 y this is
// exactly what a bias epilogue computes.
template <typename OutT, typename BiasT>
__global__ void AddBiasKernel(OutT* __restrict__ y, int64_t ldy, const BiasT* __restrict__ bias,
                              int64_t m, int64_t n) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  const float b = Load(bias + c);
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) {
    OutT* p = y + r * ldy + c;
    Store(p, __fadd_rn(Load(p), b));
  }
}

template <typename OutT, typename BiasT>
cudaError_t Launch(void* y, int64_t ldy, const void* bias, int64_t m, int64_t n,
                   cudaStream_t stream) {
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(m < 65535 ? m : 65535));
  AddBiasKernel<OutT, BiasT><<<grid, kThreads, 0, stream>>>(static_cast<OutT*>(y), ldy,
                                                            static_cast<const BiasT*>(bias), m, n);
  return cudaGetLastError();
}

template <typename OutT>
cudaError_t LaunchForBias(void* y, int64_t ldy, const void* bias, ElemType bias_type, int64_t m,
                          int64_t n, cudaStream_t stream) {
  switch (bias_type) {
    case ElemType::kF32:
      return Launch<OutT, float>(y, ldy, bias, m, n, stream);
    case ElemType::kF16:
      return Launch<OutT, __half>(y, ldy, bias, m, n, stream);
    case ElemType::kBF16:
      return Launch<OutT, __nv_bfloat16>(y, ldy, bias, m, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

// y [m, n] with row stride ldy, of out_type; bias [n] of bias_type.
cudaError_t AddBiasRows(void* y, ElemType out_type, int64_t ldy, const void* bias,
                        ElemType bias_type, int64_t m, int64_t n, cudaStream_t stream) {
  if (y == nullptr || bias == nullptr || m < 0 || n <= 0 || ldy < n) return cudaErrorInvalidValue;
  if (m == 0) return cudaSuccess;
  switch (out_type) {
    case ElemType::kF32:
      return LaunchForBias<float>(y, ldy, bias, bias_type, m, n, stream);
    case ElemType::kF16:
      return LaunchForBias<__half>(y, ldy, bias, bias_type, m, n, stream);
    case ElemType::kBF16:
      return LaunchForBias<__nv_bfloat16>(y, ldy, bias, bias_type, m, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvserve::kernels::cuda::internal
