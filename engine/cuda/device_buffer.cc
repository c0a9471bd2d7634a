#include "engine/cuda/device_buffer.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_status.h"

namespace kvserve::engine::cuda {

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, const char* what) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  if (cudaError_t err = cudaMalloc(&b.ptr_, bytes); err != cudaSuccess) {
    b.ptr_ = nullptr;
    return CudaStatus(err,
                      absl::StrCat("allocating ", bytes, " bytes of device memory for ", what));
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) cudaFree(ptr_);
}

absl::StatusOr<PinnedBuffer> PinnedBuffer::Allocate(size_t bytes, const char* what) {
  PinnedBuffer b;
  if (bytes == 0) return b;
  if (cudaError_t err = cudaMallocHost(&b.ptr_, bytes); err != cudaSuccess) {
    b.ptr_ = nullptr;
    return CudaStatus(err,
                      absl::StrCat("allocating ", bytes, " bytes of pinned memory for ", what));
  }
  b.bytes_ = bytes;
  return b;
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) cudaFreeHost(ptr_);
}

}  // namespace kvserve::engine::cuda
