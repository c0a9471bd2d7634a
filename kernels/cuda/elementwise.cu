// Row-wise kernels (elementwise.h). Every reduction runs in an order fixed by
// the row length alone (thread t owns the same elements whatever the row
// count; the warp and block trees are fixed), so a row's bits do not depend
// on the batch. Products and sums that mirror a CPU formula use the _rn
// intrinsics: nvcc would otherwise contract a * b + c into an FMA and round
// differently from the CPU kernels (built with -ffp-contract=off).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/elementwise.h"

namespace kvserve::kernels::cuda {
namespace {

// ---- storage types -----------------------------------------------------------

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls f(T{}) with T the storage type of t.
template <typename F>
cudaError_t DispatchType(ElemType t, F&& f) {
  switch (t) {
    case ElemType::kF32:
      return f(float{});
    case ElemType::kF16:
      return f(__half{});
    case ElemType::kBF16:
      return f(__nv_bfloat16{});
  }
  return cudaErrorInvalidValue;
}

bool ValidType(ElemType t) {
  return t == ElemType::kF32 || t == ElemType::kF16 || t == ElemType::kBF16;
}

bool Aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// 16-bit storage as raw bits: vectors are packed and unpacked with integer
// shifts (no type-punned local arrays, which the compiler may not keep).
template <typename T>
struct Bits16;
template <>
struct Bits16<__half> {
  static __device__ __forceinline__ float ToFloat(uint32_t b) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(b & 0xffffu)));
  }
  static __device__ __forceinline__ uint32_t FromFloat(float v) {
    return __half_as_ushort(__float2half_rn(v));
  }
};
template <>
struct Bits16<__nv_bfloat16> {
  static __device__ __forceinline__ float ToFloat(uint32_t b) {
    return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(b & 0xffffu)));
  }
  static __device__ __forceinline__ uint32_t FromFloat(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

// Two 16-bit elements <-> one 32-bit word (element 0 in the low half).
template <typename T>
__device__ __forceinline__ void Unpack2(uint32_t w, float* v) {
  v[0] = Bits16<T>::ToFloat(w);
  v[1] = Bits16<T>::ToFloat(w >> 16);
}
template <typename T>
__device__ __forceinline__ uint32_t Pack2(const float* v) {
  return Bits16<T>::FromFloat(v[0]) | (Bits16<T>::FromFloat(v[1]) << 16);
}

// kVec consecutive elements through 16-byte accesses (two for fp32); p must
// be 16-byte aligned.
constexpr int kVec = 8;

template <typename T>
__device__ __forceinline__ void Load8(const T* p, float (&v)[kVec]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 w = *reinterpret_cast<const uint4*>(p);
    Unpack2<T>(w.x, v);
    Unpack2<T>(w.y, v + 2);
    Unpack2<T>(w.z, v + 4);
    Unpack2<T>(w.w, v + 6);
  }
}

template <typename T>
__device__ __forceinline__ void Store8(T* p, const float (&v)[kVec]) {
  if constexpr (sizeof(T) == 4) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *reinterpret_cast<uint4*>(p) =
        make_uint4(Pack2<T>(v), Pack2<T>(v + 2), Pack2<T>(v + 4), Pack2<T>(v + 6));
  }
}

// Grid of the grid-stride kernels: enough blocks to fill any GPU, chosen
// without a device query (nothing on the launch path but the launch).
constexpr int kFlatThreads = 256;
unsigned FlatBlocks(int64_t work_items) {
  const int64_t blocks = (work_items + kFlatThreads - 1) / kFlatThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 32768 ? 32768 : blocks));
}

__device__ __forceinline__ int64_t FlatIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t FlatStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ---- row kernels: one CTA per row ---------------------------------------------

constexpr int kRowThreads = 256;
constexpr int kRowWarps = kRowThreads / 32;

// Sum over the block in a fixed tree (same bits for the same inputs).
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kRowWarps ? scratch[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) scratch[kRowWarps] = v;
  }
  __syncthreads();
  return scratch[kRowWarps];
}

// The factor a norm multiplies by: w, or offset + w in fp32 (Gemma's 1 + w).
__device__ __forceinline__ float NormWeight(float w, float offset) {
  return offset == 0.0f ? w : __fadd_rn(offset, w);
}

// residual (or x) [rows, dim] fp32; kAdd: residual[r] += float(add[r]) first.
// vec: dim % kVec == 0 and every pointer 16-byte aligned (then every row is).
template <bool kAdd, typename W, typename Y>
__global__ void __launch_bounds__(kRowThreads)
    RmsNormKernel(float* __restrict__ x, const Y* __restrict__ add, const W* __restrict__ weight,
                  Y* __restrict__ y, int64_t dim, float eps, float weight_offset, bool vec) {
  __shared__ float scratch[kRowWarps + 1];
  const int64_t row = blockIdx.x;
  float* xr = x + row * dim;
  Y* yr = y + row * dim;
  const Y* ar = kAdd ? add + row * dim : nullptr;
  float ss = 0.0f;
  if (vec) {
    for (int64_t g = threadIdx.x; g < dim / kVec; g += kRowThreads) {
      float v[kVec];
      Load8(xr + g * kVec, v);
      if constexpr (kAdd) {
        float a[kVec];
        Load8(ar + g * kVec, a);
#pragma unroll
        for (int j = 0; j < kVec; ++j) v[j] = __fadd_rn(v[j], a[j]);
        Store8(xr + g * kVec, v);
      }
#pragma unroll
      for (int j = 0; j < kVec; ++j) ss = __fmaf_rn(v[j], v[j], ss);
    }
  } else {
    for (int64_t d = threadIdx.x; d < dim; d += kRowThreads) {
      float v = xr[d];
      if constexpr (kAdd) {
        v = __fadd_rn(v, ToFloat(ar[d]));
        xr[d] = v;
      }
      ss = __fmaf_rn(v, v, ss);
    }
  }
  ss = BlockSum(ss, scratch);
  // As the CPU: 1 / sqrt(ss / dim + eps), then (x * inv) * w.
  const float inv =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(dim)), eps)));
  // Each thread re-reads only the elements it wrote above.
  if (vec) {
    for (int64_t g = threadIdx.x; g < dim / kVec; g += kRowThreads) {
      float v[kVec], w[kVec];
      Load8(xr + g * kVec, v);
      Load8(weight + g * kVec, w);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        v[j] = __fmul_rn(__fmul_rn(v[j], inv), NormWeight(w[j], weight_offset));
      }
      Store8(yr + g * kVec, v);
    }
  } else {
    for (int64_t d = threadIdx.x; d < dim; d += kRowThreads) {
      yr[d] = FromFloat<Y>(
          __fmul_rn(__fmul_rn(xr[d], inv), NormWeight(ToFloat(weight[d]), weight_offset)));
    }
  }
}

template <bool kAdd>
cudaError_t LaunchRmsNorm(float* x, const void* add, const void* weight, ElemType weight_type,
                          void* y, ElemType y_type, int64_t rows, int64_t dim, float eps,
                          float weight_offset, cudaStream_t stream) {
  if (x == nullptr || weight == nullptr || y == nullptr || (kAdd && add == nullptr) || rows < 0 ||
      rows > INT32_MAX || dim <= 0 || !ValidType(weight_type) || !ValidType(y_type)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const bool vec = dim % kVec == 0 && Aligned(x, 16) && Aligned(weight, 16) && Aligned(y, 16) &&
                   (!kAdd || Aligned(add, 16));
  return DispatchType(weight_type, [&](auto w_tag) {
    return DispatchType(y_type, [&](auto y_tag) {
      using W = decltype(w_tag);
      using Y = decltype(y_tag);
      RmsNormKernel<kAdd, W, Y><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
          x, static_cast<const Y*>(add), static_cast<const W*>(weight), static_cast<Y*>(y), dim,
          eps, weight_offset, vec);
      return cudaGetLastError();
    });
  });
}

// One CTA per (token, head) row of head_dim elements, normed in place. The
// sum of squares runs in the fixed BlockSum tree, as RmsNormKernel's.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    HeadRmsNormKernel(T* __restrict__ x, int64_t token_stride, int64_t num_heads,
                      const T* __restrict__ weight, int64_t head_dim, float eps,
                      float weight_offset) {
  __shared__ float scratch[kRowWarps + 1];
  const int64_t row = blockIdx.x;
  const int64_t t = row / num_heads, h = row - t * num_heads;
  T* xr = x + t * token_stride + h * head_dim;
  float ss = 0.0f;
  for (int64_t d = threadIdx.x; d < head_dim; d += kRowThreads) {
    const float v = ToFloat(xr[d]);
    ss = __fmaf_rn(v, v, ss);
  }
  ss = BlockSum(ss, scratch);  // every thread has read its elements before the barrier
  const float inv =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(head_dim)), eps)));
  for (int64_t d = threadIdx.x; d < head_dim; d += kRowThreads) {
    xr[d] = FromFloat<T>(__fmul_rn(__fmul_rn(ToFloat(xr[d]), inv),
                                   NormWeight(ToFloat(weight[d]), weight_offset)));
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    EmbeddingKernel(const T* __restrict__ table, int64_t dim, const int32_t* __restrict__ ids,
                    float* __restrict__ residual, bool vec) {
  const int64_t i = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[i]) * dim;
  float* dst = residual + i * dim;
  if (vec) {
    for (int64_t g = threadIdx.x; g < dim / kVec; g += kRowThreads) {
      float v[kVec];
      Load8(src + g * kVec, v);
      Store8(dst + g * kVec, v);
    }
  } else {
    for (int64_t d = threadIdx.x; d < dim; d += kRowThreads) dst[d] = ToFloat(src[d]);
  }
}

// ---- Hadamard rotation of each head: one CTA per (token, head) ----------------

constexpr int kRotateThreads = 128;
constexpr int64_t kMaxRotateDim = 1024;

// The butterflies of kernels/cpu RotateHeads in the same order (stage by
// stage, each pair a + c and a - c in fp32), then each element times norm:
// for fp32 inputs the CPU's bits.
template <typename T>
__global__ void __launch_bounds__(kRotateThreads)
    RotateHeadsKernel(T* __restrict__ x, int64_t token_stride, int64_t num_heads,
                      int64_t head_dim, int64_t block, float norm) {
  __shared__ float v[kMaxRotateDim];
  const int64_t row = blockIdx.x;
  const int64_t t = row / num_heads, h = row - t * num_heads;
  T* xr = x + t * token_stride + h * head_dim;
  for (int64_t d = threadIdx.x; d < head_dim; d += kRotateThreads) v[d] = ToFloat(xr[d]);
  __syncthreads();
  for (int64_t half = 1; half < block; half *= 2) {
    for (int64_t p = threadIdx.x; p < head_dim / 2; p += kRotateThreads) {
      const int64_t b = p / (block / 2), q = p % (block / 2);
      const int64_t j = b * block + q / half * 2 * half + q % half;
      const float a = v[j], c = v[j + half];
      v[j] = __fadd_rn(a, c);
      v[j + half] = __fsub_rn(a, c);
    }
    __syncthreads();
  }
  for (int64_t d = threadIdx.x; d < head_dim; d += kRotateThreads) {
    xr[d] = FromFloat<T>(__fmul_rn(v[d], norm));
  }
}

// ---- RoPE: one CTA per token ---------------------------------------------------

constexpr int kRopeThreads = 128;
constexpr int kMaxRopeHalf = 512;  // head_dim <= 1024

// kPair: two consecutive i per thread (2-element accesses); needs half even
// and every head start aligned to two elements.
template <typename T, bool kPair>
__global__ void __launch_bounds__(kRopeThreads) RopeKernel(CudaRopeParams p) {
  __shared__ float cos_s[kMaxRopeHalf];
  __shared__ float sin_s[kMaxRopeHalf];
  const int t = blockIdx.x;
  const int half = (p.rotary_dim > 0 ? p.rotary_dim : p.head_dim) / 2;
  // fp32 angle as transformers (and the CPU kernel) computes it; the accurate
  // sincosf, then the scaling.
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += kRopeThreads) {
    float s, c;
    sincosf(__fmul_rn(pos, p.inv_freq[i]), &s, &c);
    cos_s[i] = __fmul_rn(c, p.attention_scaling);
    sin_s[i] = __fmul_rn(s, p.attention_scaling);
  }
  __syncthreads();
  T* q = static_cast<T*>(p.q) + static_cast<int64_t>(t) * p.q_stride;
  T* k = static_cast<T*>(p.k) + static_cast<int64_t>(t) * p.k_stride;
  constexpr int kStep = kPair ? 2 : 1;
  const int per_head = half / kStep;
  const int total = (p.num_heads + p.num_kv_heads) * per_head;
  for (int idx = threadIdx.x; idx < total; idx += kRopeThreads) {
    const int h = idx / per_head;
    const int i = (idx - h * per_head) * kStep;
    T* x = h < p.num_heads ? q + static_cast<int64_t>(h) * p.head_dim
                           : k + static_cast<int64_t>(h - p.num_heads) * p.head_dim;
    float a[kStep], b[kStep];
    if constexpr (kPair) {
      if constexpr (sizeof(T) == 4) {
        const float2 va = *reinterpret_cast<const float2*>(x + i);
        const float2 vb = *reinterpret_cast<const float2*>(x + i + half);
        a[0] = va.x, a[1] = va.y, b[0] = vb.x, b[1] = vb.y;
      } else {
        Unpack2<T>(*reinterpret_cast<const uint32_t*>(x + i), a);
        Unpack2<T>(*reinterpret_cast<const uint32_t*>(x + i + half), b);
      }
    } else {
      a[0] = ToFloat(x[i]);
      b[0] = ToFloat(x[i + half]);
    }
    float ra[kStep], rb[kStep];
#pragma unroll
    for (int j = 0; j < kStep; ++j) {
      const float c = cos_s[i + j], s = sin_s[i + j];
      ra[j] = __fsub_rn(__fmul_rn(a[j], c), __fmul_rn(b[j], s));
      rb[j] = __fadd_rn(__fmul_rn(b[j], c), __fmul_rn(a[j], s));
    }
    if constexpr (kPair) {
      if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<float2*>(x + i) = make_float2(ra[0], ra[1]);
        *reinterpret_cast<float2*>(x + i + half) = make_float2(rb[0], rb[1]);
      } else {
        *reinterpret_cast<uint32_t*>(x + i) = Pack2<T>(ra);
        *reinterpret_cast<uint32_t*>(x + i + half) = Pack2<T>(rb);
      }
    } else {
      x[i] = FromFloat<T>(ra[0]);
      x[i + half] = FromFloat<T>(rb[0]);
    }
  }
}

// ---- flat kernels --------------------------------------------------------------

// silu(g) * u with silu(g) = g / (1 + exp(-g)), as the scalar CPU kernel.
__device__ __forceinline__ float SiluTimes(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// One 16-byte access: 4 fp32 or 8 fp16/bf16 elements (SiluMul uses these:
// eight fp32 IEEE divisions in flight, each with its slow-path call, spill).
template <typename T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

template <typename T>
__device__ __forceinline__ void Load16B(const T* p, float (&v)[kVec16<T>]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  } else {
    Load8(p, v);
  }
}

template <typename T>
__device__ __forceinline__ void Store16B(T* p, const float (&v)[kVec16<T>]) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    Store8(p, v);
  }
}

// gelu_tanh(g) * u as the scalar CPU kernel: torch's tanh approximation,
// beta = sqrt(2 / pi), kappa = 0.044715.
__device__ __forceinline__ float GeluTanhTimes(float g, float u) {
  constexpr float kBeta = 0.7978845608028654f;
  constexpr float kKappa = 0.044715f;
  const float cube = __fmul_rn(__fmul_rn(g, g), g);
  const float inner = __fmul_rn(kBeta, __fadd_rn(g, __fmul_rn(kKappa, cube)));
  return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner))), u);
}

enum class Gate { kSilu, kGeluTanh };

template <Gate kGate>
__device__ __forceinline__ float GateTimes(float g, float u) {
  if constexpr (kGate == Gate::kSilu) {
    return SiluTimes(g, u);
  } else {
    return GeluTanhTimes(g, u);
  }
}

// vec: inter % kVec16<T> == 0 and both pointers 16-byte aligned.
template <typename T, Gate kGate>
__global__ void __launch_bounds__(kFlatThreads)
    GatedMulKernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t rows, int64_t inter,
                   bool vec) {
  if (vec) {
    constexpr int kN = kVec16<T>;
    const int64_t groups = inter / kN;
    for (int64_t w = FlatIndex(); w < rows * groups; w += FlatStride()) {
      const int64_t r = w / groups, c = (w - r * groups) * kN;
      const T* g = gate_up + r * 2 * inter + c;
      float gv[kN], uv[kN];
      Load16B(g, gv);
      Load16B(g + inter, uv);
#pragma unroll
      for (int j = 0; j < kN; ++j) gv[j] = GateTimes<kGate>(gv[j], uv[j]);
      Store16B(out + r * inter + c, gv);
    }
  } else {
    for (int64_t w = FlatIndex(); w < rows * inter; w += FlatStride()) {
      const int64_t r = w / inter, c = w - r * inter;
      const T* g = gate_up + r * 2 * inter + c;
      out[w] = FromFloat<T>(GateTimes<kGate>(ToFloat(g[0]), ToFloat(g[inter])));
    }
  }
}

// Copies rows of row_bytes bytes in units of U (uint4, uint32_t or uint8_t).
template <typename U>
__global__ void __launch_bounds__(kRowThreads)
    GatherRowsKernel(const U* __restrict__ src, const int32_t* __restrict__ indices,
                     int64_t row_units, U* __restrict__ dst) {
  const int64_t r = blockIdx.x;
  const U* s = src + static_cast<int64_t>(indices[r]) * row_units;
  U* d = dst + r * row_units;
  for (int64_t i = threadIdx.x; i < row_units; i += kRowThreads) d[i] = s[i];
}

template <typename S, typename D>
__global__ void __launch_bounds__(kFlatThreads)
    ConvertKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n, bool vec) {
  if (vec) {
    for (int64_t g = FlatIndex(); g < n / kVec; g += FlatStride()) {
      float v[kVec];
      Load8(src + g * kVec, v);
      Store8(dst + g * kVec, v);
    }
    // The tail (n % kVec elements) in the scalar loop below.
    const int64_t tail = n / kVec * kVec;
    for (int64_t i = tail + FlatIndex(); i < n; i += FlatStride()) {
      dst[i] = FromFloat<D>(ToFloat(src[i]));
    }
  } else {
    for (int64_t i = FlatIndex(); i < n; i += FlatStride()) dst[i] = FromFloat<D>(ToFloat(src[i]));
  }
}

__global__ void __launch_bounds__(kFlatThreads) ScaleKernel(float* __restrict__ x, int64_t n,
                                                             float s) {
  for (int64_t i = FlatIndex(); i < n; i += FlatStride()) x[i] = __fmul_rn(x[i], s);
}

// As the CPU: tanh(x / cap) * cap.
__global__ void __launch_bounds__(kFlatThreads) SoftCapKernel(float* __restrict__ x, int64_t n,
                                                               float cap) {
  for (int64_t i = FlatIndex(); i < n; i += FlatStride()) {
    x[i] = __fmul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
  }
}

template <typename D>
__global__ void __launch_bounds__(kFlatThreads)
    FillKernel(D* __restrict__ dst, int64_t n, float value) {
  const D v = FromFloat<D>(value);
  for (int64_t i = FlatIndex(); i < n; i += FlatStride()) dst[i] = v;
}

// SplitMix64 exactly as engine/builtin_models.cc.
__host__ __device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// stream_base = SplitMix64(seed ^ (tensor * 0x632be59bd9b4e019)), computed on
// the host: element i is HashUniform(seed, tensor, i) = the top 24 bits of
// SplitMix64(stream_base + i) as (double)(h >> 40) / 2^23 - 1 (exact in
// double, and representable in float), then offset + scale * value in fp32
// with no contraction, as the CPU computes it.
template <typename D>
__global__ void __launch_bounds__(kFlatThreads)
    FillHashUniformKernel(D* __restrict__ dst, int64_t n, uint64_t stream_base, float scale,
                          float offset) {
  for (int64_t i = FlatIndex(); i < n; i += FlatStride()) {
    const uint64_t h = SplitMix64(stream_base + static_cast<uint64_t>(i));
    const float value =
        __double2float_rn(__dsub_rn(__ddiv_rn(static_cast<double>(h >> 40), 8388608.0), 1.0));
    dst[i] = FromFloat<D>(__fadd_rn(offset, __fmul_rn(scale, value)));
  }
}

}  // namespace

cudaError_t EmbeddingLookup(const void* table, ElemType table_type, int64_t dim, const int32_t* ids,
                            int64_t n, float* residual, cudaStream_t stream) {
  if (table == nullptr || ids == nullptr || residual == nullptr || dim <= 0 || n < 0 ||
      n > INT32_MAX || !ValidType(table_type)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  const bool vec = dim % kVec == 0 && Aligned(table, 16) && Aligned(residual, 16);
  return DispatchType(table_type, [&](auto tag) {
    using T = decltype(tag);
    EmbeddingKernel<T><<<static_cast<unsigned>(n), kRowThreads, 0, stream>>>(
        static_cast<const T*>(table), dim, ids, residual, vec);
    return cudaGetLastError();
  });
}

cudaError_t RmsNorm(const float* x, const void* weight, ElemType weight_type, void* y,
                    ElemType y_type, int64_t rows, int64_t dim, float eps, cudaStream_t stream,
                    float weight_offset) {
  // x is only read (kAdd = false).
  return LaunchRmsNorm<false>(const_cast<float*>(x), nullptr, weight, weight_type, y, y_type, rows,
                              dim, eps, weight_offset, stream);
}

cudaError_t AddRmsNorm(float* residual, const void* x, const void* weight, ElemType weight_type,
                       void* y, ElemType y_type, int64_t rows, int64_t dim, float eps,
                       cudaStream_t stream, float weight_offset) {
  return LaunchRmsNorm<true>(residual, x, weight, weight_type, y, y_type, rows, dim, eps,
                             weight_offset, stream);
}

cudaError_t HeadRmsNorm(void* x, ElemType type, int64_t token_stride, int64_t num_tokens,
                        int64_t num_heads, const void* weight, int64_t head_dim, float eps,
                        float weight_offset, cudaStream_t stream) {
  if (x == nullptr || weight == nullptr || num_tokens < 0 || num_heads < 0 || head_dim <= 0 ||
      token_stride < num_heads * head_dim || num_tokens * num_heads > INT32_MAX ||
      !ValidType(type)) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0 || num_heads == 0) return cudaSuccess;
  return DispatchType(type, [&](auto tag) {
    using T = decltype(tag);
    HeadRmsNormKernel<T><<<static_cast<unsigned>(num_tokens * num_heads), kRowThreads, 0, stream>>>(
        static_cast<T*>(x), token_stride, num_heads, static_cast<const T*>(weight), head_dim, eps,
        weight_offset);
    return cudaGetLastError();
  });
}

cudaError_t RotateHeads(void* x, ElemType type, int64_t token_stride, int64_t num_tokens,
                        int64_t num_heads, int64_t head_dim, int64_t block, float norm,
                        cudaStream_t stream) {
  if (x == nullptr || num_tokens < 0 || num_heads < 0 || head_dim <= 0 ||
      head_dim > kMaxRotateDim || block < 1 || (block & (block - 1)) != 0 ||
      head_dim % block != 0 || token_stride < num_heads * head_dim ||
      num_tokens * num_heads > INT32_MAX || !ValidType(type)) {
    return cudaErrorInvalidValue;
  }
  if (num_tokens == 0 || num_heads == 0) return cudaSuccess;
  return DispatchType(type, [&](auto tag) {
    using T = decltype(tag);
    RotateHeadsKernel<T><<<static_cast<unsigned>(num_tokens * num_heads), kRotateThreads, 0,
                           stream>>>(static_cast<T*>(x), token_stride, num_heads, head_dim, block,
                                     norm);
    return cudaGetLastError();
  });
}

cudaError_t ApplyRope(const CudaRopeParams& p, cudaStream_t stream) {
  const int rotary_dim = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  if (p.num_tokens < 0 || p.num_heads < 0 || p.num_kv_heads < 0 || p.head_dim <= 0 ||
      p.head_dim % 2 != 0 || p.head_dim / 2 > kMaxRopeHalf || !ValidType(p.dtype) ||
      p.rotary_dim < 0 || rotary_dim % 2 != 0 || rotary_dim > p.head_dim) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0 || p.num_heads + p.num_kv_heads == 0) return cudaSuccess;
  if (p.positions == nullptr || p.inv_freq == nullptr || (p.num_heads > 0 && p.q == nullptr) ||
      (p.num_kv_heads > 0 && p.k == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const size_t e = ElemSize(p.dtype);
  // Pairs of elements: every head start (and i + half) must be 2-aligned.
  const bool pair = (rotary_dim / 2) % 2 == 0 && p.q_stride % 2 == 0 && p.k_stride % 2 == 0 &&
                    (p.q == nullptr || Aligned(p.q, 2 * e)) &&
                    (p.k == nullptr || Aligned(p.k, 2 * e));
  return DispatchType(p.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (pair) {
      RopeKernel<T, true><<<static_cast<unsigned>(p.num_tokens), kRopeThreads, 0, stream>>>(p);
    } else {
      RopeKernel<T, false><<<static_cast<unsigned>(p.num_tokens), kRopeThreads, 0, stream>>>(p);
    }
    return cudaGetLastError();
  });
}

template <Gate kGate>
cudaError_t LaunchGatedMul(const void* gate_up, void* out, ElemType type, int64_t rows,
                           int64_t inter, cudaStream_t stream) {
  if (gate_up == nullptr || out == nullptr || rows < 0 || inter <= 0 || !ValidType(type)) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  return DispatchType(type, [&](auto tag) {
    using T = decltype(tag);
    const bool vec = inter % kVec16<T> == 0 && Aligned(gate_up, 16) && Aligned(out, 16);
    const int64_t items = vec ? rows * (inter / kVec16<T>) : rows * inter;
    GatedMulKernel<T, kGate><<<FlatBlocks(items), kFlatThreads, 0, stream>>>(
        static_cast<const T*>(gate_up), static_cast<T*>(out), rows, inter, vec);
    return cudaGetLastError();
  });
}

cudaError_t SiluMul(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                    cudaStream_t stream) {
  return LaunchGatedMul<Gate::kSilu>(gate_up, out, type, rows, inter, stream);
}

cudaError_t GeluTanhMul(const void* gate_up, void* out, ElemType type, int64_t rows,
                        int64_t inter, cudaStream_t stream) {
  return LaunchGatedMul<Gate::kGeluTanh>(gate_up, out, type, rows, inter, stream);
}

cudaError_t ScaleF32(float* x, int64_t n, float s, cudaStream_t stream) {
  if (x == nullptr || n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  ScaleKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(x, n, s);
  return cudaGetLastError();
}

cudaError_t SoftCapF32(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (x == nullptr || n < 0 || !(cap > 0.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  SoftCapKernel<<<FlatBlocks(n), kFlatThreads, 0, stream>>>(x, n, cap);
  return cudaGetLastError();
}

cudaError_t GatherRows(const void* src, const int32_t* indices, int64_t rows, int64_t row_bytes,
                       void* dst, cudaStream_t stream) {
  if (src == nullptr || indices == nullptr || dst == nullptr || rows < 0 || rows > INT32_MAX ||
      row_bytes <= 0) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0) return cudaSuccess;
  const auto grid = static_cast<unsigned>(rows);
  if (row_bytes % 16 == 0 && Aligned(src, 16) && Aligned(dst, 16)) {
    GatherRowsKernel<uint4><<<grid, kRowThreads, 0, stream>>>(
        static_cast<const uint4*>(src), indices, row_bytes / 16, static_cast<uint4*>(dst));
  } else if (row_bytes % 4 == 0 && Aligned(src, 4) && Aligned(dst, 4)) {
    GatherRowsKernel<uint32_t><<<grid, kRowThreads, 0, stream>>>(
        static_cast<const uint32_t*>(src), indices, row_bytes / 4, static_cast<uint32_t*>(dst));
  } else {
    GatherRowsKernel<uint8_t><<<grid, kRowThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src), indices, row_bytes, static_cast<uint8_t*>(dst));
  }
  return cudaGetLastError();
}

namespace {

cudaError_t LaunchConvert(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                          int64_t n, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr || n < 0 || !ValidType(src_type) || !ValidType(dst_type)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  const bool vec = Aligned(src, 16) && Aligned(dst, 16);
  const int64_t items = vec ? n / kVec + n % kVec : n;
  return DispatchType(src_type, [&](auto s_tag) {
    return DispatchType(dst_type, [&](auto d_tag) {
      using S = decltype(s_tag);
      using D = decltype(d_tag);
      ConvertKernel<S, D><<<FlatBlocks(items), kFlatThreads, 0, stream>>>(
          static_cast<const S*>(src), static_cast<D*>(dst), n, vec);
      return cudaGetLastError();
    });
  });
}

}  // namespace

cudaError_t ConvertFromF32(const float* src, void* dst, ElemType dst_type, int64_t n,
                           cudaStream_t stream) {
  return LaunchConvert(src, ElemType::kF32, dst, dst_type, n, stream);
}

cudaError_t ConvertElems(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                         int64_t n, cudaStream_t stream) {
  return LaunchConvert(src, src_type, dst, dst_type, n, stream);
}

cudaError_t FillHashUniform(void* dst, ElemType dst_type, int64_t n, uint64_t seed,
                            uint64_t tensor_index, float scale, float offset, cudaStream_t stream) {
  if (dst == nullptr || n < 0 || !ValidType(dst_type)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const uint64_t stream_base = SplitMix64(seed ^ (tensor_index * 0x632be59bd9b4e019ULL));
  return DispatchType(dst_type, [&](auto tag) {
    using D = decltype(tag);
    FillHashUniformKernel<D><<<FlatBlocks(n), kFlatThreads, 0, stream>>>(
        static_cast<D*>(dst), n, stream_base, scale, offset);
    return cudaGetLastError();
  });
}

cudaError_t Fill(void* dst, ElemType type, int64_t n, float value, cudaStream_t stream) {
  if (dst == nullptr || n < 0 || !ValidType(type)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return DispatchType(type, [&](auto tag) {
    using D = decltype(tag);
    FillKernel<D><<<FlatBlocks(n), kFlatThreads, 0, stream>>>(static_cast<D*>(dst), n, value);
    return cudaGetLastError();
  });
}

}  // namespace kvserve::kernels::cuda
