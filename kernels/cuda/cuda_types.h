// Element types and small helpers shared by the CUDA kernels' Params structs.
// Host-compilable: the engine's .cc files include these headers with g++, so
// nothing here needs nvcc.
//
// Every launch function returns the cudaError_t of its launch
// (cudaGetLastError() after the kernel is queued); it never synchronises and
// never allocates. Buffers passed in Params are device pointers unless the
// field says "host".
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kvserve::kernels::cuda {

// The storage type of activations, weights or KV. Arithmetic is always fp32.
enum class ElemType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

inline constexpr size_t ElemSize(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }
inline constexpr const char* ElemName(ElemType t) {
  return t == ElemType::kF32 ? "f32" : (t == ElemType::kF16 ? "f16" : "bf16");
}

}  // namespace kvserve::kernels::cuda
