#include "engine/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace kvserve::engine::cuda {

absl::Status CudaStatus(cudaError_t err, std::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  const std::string message = absl::StrCat(
      "CUDA: ", std::string(what), ": ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status CublasStatus(cublasStatus_t status, std::string_view what) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat("cuBLASLt: ", std::string(what), ": status ", static_cast<int>(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

}  // namespace kvserve::engine::cuda
