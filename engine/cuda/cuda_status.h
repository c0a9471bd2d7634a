// CUDA and cuBLASLt error codes as absl::Status, for the engine's CUDA
// backend. A CUDA error becomes Internal naming the operation that failed
// ("layer 3 attention: an illegal memory access was encountered"); running
// out of device memory becomes ResourceExhausted.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string_view>

#include "absl/status/status.h"

namespace kvserve::engine::cuda {

absl::Status CudaStatus(cudaError_t err, std::string_view what);
absl::Status CublasStatus(cublasStatus_t status, std::string_view what);

}  // namespace kvserve::engine::cuda

// Returns from the enclosing function when a CUDA call fails.
#define KVSERVE_RETURN_IF_CUDA_ERROR(expr, what)                                          \
  do {                                                                                    \
    if (const cudaError_t kvserve_cuda_err_ = (expr); kvserve_cuda_err_ != cudaSuccess) { \
      return ::kvserve::engine::cuda::CudaStatus(kvserve_cuda_err_, (what));              \
    }                                                                                     \
  } while (0)
