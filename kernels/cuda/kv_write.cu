// The KV-cache write for the formats other than the activations' own dtype:
// each (token, kv head) row is widened to fp32 (exact) and encoded with the
// CPU's rules (kernels/cuda/kv_codec.cuh), its scale stored beside the block
// (engine/kv_cache.h). WriteKvCache (paged_attention_split_kv.cu) sends the
// calls whose cache has the activations' dtype to its byte copy instead.
//
// One warp per row. A row's bytes and scale depend on that row alone (the
// max is exact in any order), never on the batch or the launch shape.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// Exact widening to fp32 with the bits the CPU's (kernels/cpu/half_float.h)
// gives, NaN payloads included (the bf16/fp16 encoders keep them).
__device__ __forceinline__ float Widen(float x) { return x; }
__device__ __forceinline__ float Widen(__nv_bfloat16 x) {
  return __uint_as_float(static_cast<uint32_t>(__bfloat16_as_ushort(x)) << 16);
}
__device__ __forceinline__ float Widen(__half x) {
  const uint32_t h = __half_as_ushort(x);
  const uint32_t sign = (h & 0x8000u) << 16, mag = h & 0x7fffu;
  uint32_t bits;
  if (mag >= 0x7c00u) {
    bits = (mag << 13) | 0x7f800000u;  // inf / NaN, payload shifted
  } else if (mag >= 0x0400u) {
    bits = (mag << 13) + ((127u - 15u) << 23);
  } else {
    bits = __float_as_uint(static_cast<float>(mag) * 0x1p-24f);  // exact
  }
  return __uint_as_float(sign | bits);
}

// max(a, b) that keeps NaN (fmaxf drops it), as the CPU's AbsMax.
__device__ __forceinline__ float MaxKeepNan(float a, float b) {
  return (a != a || b != b) ? __uint_as_float(0x7fc00000u) : fmaxf(a, b);
}

struct QuantWriteArgs {
  const void* src[2];  // k, v
  void* cache[2];
  float* scales[2];
  const int64_t* slot_mapping;
  int64_t src_stride;  // elements
  int64_t row_bytes;
  int64_t rows;  // num_tokens * num_kv_heads
  int num_kv_heads;
  int head_dim;
  int block_size;
};

// Encodes row x (head_dim fp32 values read through `at`) into dst with the
// warp; lane 0 stores the scale.
template <KvDtype F, typename T>
__device__ void EncodeRow(const T* x, int dim, uint8_t* dst, float* scale_dst) {
  const int lane = threadIdx.x % 32;
  if constexpr (F == KvDtype::kFloat32) {
    for (int d = lane; d < dim; d += 32) reinterpret_cast<float*>(dst)[d] = Widen(x[d]);
  } else if constexpr (F == KvDtype::kBfloat16 || F == KvDtype::kFloat16) {
    for (int d = lane; d < dim; d += 32) {
      const float f = Widen(x[d]);
      reinterpret_cast<uint16_t*>(dst)[d] =
          F == KvDtype::kBfloat16 ? KvEncodeBf16(f) : KvEncodeHalf(f);
    }
  } else {
    float m = 0.0f;
    for (int d = lane; d < dim; d += 32) m = MaxKeepNan(m, fabsf(Widen(x[d])));
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m = MaxKeepNan(m, __shfl_xor_sync(0xffffffffu, m, off));
    constexpr float kCodeMax = F == KvDtype::kFp8E4m3 ? 448.0f
                               : F == KvDtype::kInt8  ? 127.0f
                               : F == KvDtype::kInt4  ? 8.0f
                                                      : 6.0f;
    const float s = __fdiv_rn(m, kCodeMax);
    const bool usable = s > 0.0f && s <= 3.402823466e38f;  // finite, positive
    if (lane == 0) *scale_dst = s;
    if constexpr (F == KvDtype::kFp8E4m3 || F == KvDtype::kInt8) {
      for (int d = lane; d < dim; d += 32) {
        uint8_t c = 0;
        if (usable) {
          const float y = __fdiv_rn(Widen(x[d]), s);
          if constexpr (F == KvDtype::kFp8E4m3) {
            c = KvEncodeFp8(y);
          } else {
            c = static_cast<uint8_t>(static_cast<int8_t>(fminf(fmaxf(rintf(y), -127.0f), 127.0f)));
          }
        }
        dst[d] = c;
      }
    } else {
      // One byte per lane: elements 2i (low nibble) and 2i + 1 (high; 0 past dim).
      for (int i = lane; 2 * i < dim; i += 32) {
        uint32_t byte = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int d = 2 * i + h;
          uint32_t c = 0;
          if (usable && d < dim) {
            const float y = __fdiv_rn(Widen(x[d]), s);
            if constexpr (F == KvDtype::kInt4) {
              c = static_cast<uint32_t>(static_cast<int>(fminf(fmaxf(rintf(y), -8.0f), 7.0f))) &
                  15u;
            } else {
              c = KvEncodeFp4(y);
            }
          }
          byte |= c << (4 * h);
        }
        dst[i] = static_cast<uint8_t>(byte);
      }
    }
  }
}

template <KvDtype F, typename T>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) QuantWriteKernel(const QuantWriteArgs a) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarpsPerBlock;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
       row < a.rows; row += warps) {  // uniform per warp
    const int64_t t = row / a.num_kv_heads;
    const int64_t h = row - t * a.num_kv_heads;
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) continue;
    const int64_t block = slot / a.block_size;
    const int64_t dst_row =
        (block * a.num_kv_heads + h) * a.block_size + (slot - block * a.block_size);
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      const T* x = static_cast<const T*>(a.src[kv]) + t * a.src_stride + h * a.head_dim;
      uint8_t* dst = static_cast<uint8_t*>(a.cache[kv]) + dst_row * a.row_bytes;
      float* scale = a.scales[kv] != nullptr ? a.scales[kv] + dst_row : nullptr;
      EncodeRow<F, T>(x, a.head_dim, dst, scale);
    }
  }
}

template <typename T>
cudaError_t LaunchFormat(KvDtype f, const QuantWriteArgs& a, unsigned grid, cudaStream_t stream) {
  constexpr int kThreads = kWarpsPerBlock * 32;
  switch (f) {
    case KvDtype::kFloat32:
      QuantWriteKernel<KvDtype::kFloat32, T><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvDtype::kBfloat16:
      QuantWriteKernel<KvDtype::kBfloat16, T><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvDtype::kFloat16:
      QuantWriteKernel<KvDtype::kFloat16, T><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvDtype::kFp8E4m3:
      QuantWriteKernel<KvDtype::kFp8E4m3, T><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvDtype::kInt8:
      QuantWriteKernel<KvDtype::kInt8, T><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvDtype::kInt4:
      QuantWriteKernel<KvDtype::kInt4, T><<<grid, kThreads, 0, stream>>>(a);
      break;
    case KvDtype::kFp4E2m1:
      QuantWriteKernel<KvDtype::kFp4E2m1, T><<<grid, kThreads, 0, stream>>>(a);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

namespace internal {

// Called by WriteKvCache with validated params whose cache format differs
// from p.dtype.
cudaError_t WriteKvCacheEncoded(const CudaWriteKvParams& p, KvDtype format, cudaStream_t stream) {
  if (KvHasScale(format) && (p.k_scales == nullptr || p.v_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  QuantWriteArgs a{};
  a.src[0] = p.k;
  a.src[1] = p.v;
  a.cache[0] = p.k_cache;
  a.cache[1] = p.v_cache;
  a.scales[0] = KvHasScale(format) ? p.k_scales : nullptr;
  a.scales[1] = KvHasScale(format) ? p.v_scales : nullptr;
  a.slot_mapping = p.slot_mapping;
  a.src_stride = p.src_stride;
  a.row_bytes = KvRowBytes(format, p.head_dim);
  a.rows = static_cast<int64_t>(p.num_tokens) * p.num_kv_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.block_size = p.block_size;
  const int64_t blocks = (a.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const auto grid =
      static_cast<unsigned>(blocks < (int64_t{1} << 20) ? blocks : (int64_t{1} << 20));
  switch (p.dtype) {
    case ElemType::kF32:
      return LaunchFormat<float>(format, a, grid, stream);
    case ElemType::kF16:
      return LaunchFormat<__half>(format, a, grid, stream);
    case ElemType::kBF16:
      return LaunchFormat<__nv_bfloat16>(format, a, grid, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace internal
}  // namespace kvserve::kernels::cuda
