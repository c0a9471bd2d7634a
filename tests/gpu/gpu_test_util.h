// Helpers for the GPU tests: device buffers, host <-> device copies with
// dtype conversion, NaN poisoning and relative error.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_types.h"

namespace kvserve::gpu_test {

using kernels::cuda::ElemType;

#define KVSERVE_CUDA_OK(expr)                                                                  \
  do {                                                                                         \
    const cudaError_t kvserve_err_ = (expr);                                                   \
    ASSERT_EQ(kvserve_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(kvserve_err_); \
  } while (0)

// Host conversions, round to nearest even (as __float2bfloat16_rn /
// __float2half_rn). fp16 through the compiler's _Float16.
inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16BitsToFloat(uint16_t b) {
  uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t FloatToHalfBits(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
inline float HalfBitsToFloat(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

// The value `f` becomes when stored as `t` (what the device will see).
inline float RoundTo(ElemType t, float f) {
  switch (t) {
    case ElemType::kF32:
      return f;
    case ElemType::kF16:
      return HalfBitsToFloat(FloatToHalfBits(f));
    case ElemType::kBF16:
      return Bf16BitsToFloat(FloatToBf16Bits(f));
  }
  return f;
}

// Owns one cudaMalloc'ed allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Uploads plain data (ints, floats) as is.
template <typename T>
inline DeviceBuffer Upload(const std::vector<T>& host) {
  DeviceBuffer d(host.size() * sizeof(T));
  if (!host.empty())
    cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

// Uploads fp32 values stored as `t`.
inline DeviceBuffer UploadAs(ElemType t, const std::vector<float>& host) {
  DeviceBuffer d(host.size() * kernels::cuda::ElemSize(t));
  if (t == ElemType::kF32) {
    cudaMemcpy(d.get(), host.data(), host.size() * 4, cudaMemcpyHostToDevice);
    return d;
  }
  std::vector<uint16_t> bits(host.size());
  for (size_t i = 0; i < host.size(); ++i) {
    bits[i] = t == ElemType::kBF16 ? FloatToBf16Bits(host[i]) : FloatToHalfBits(host[i]);
  }
  cudaMemcpy(d.get(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice);
  return d;
}

// Downloads n elements of type `t` as fp32.
inline std::vector<float> DownloadAs(ElemType t, const void* device, size_t n) {
  std::vector<float> out(n);
  if (t == ElemType::kF32) {
    cudaMemcpy(out.data(), device, n * 4, cudaMemcpyDeviceToHost);
    return out;
  }
  std::vector<uint16_t> bits(n);
  cudaMemcpy(bits.data(), device, n * 2, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    out[i] = t == ElemType::kBF16 ? Bf16BitsToFloat(bits[i]) : HalfBitsToFloat(bits[i]);
  }
  return out;
}

template <typename T>
inline std::vector<T> Download(const DeviceBuffer& d, size_t n) {
  std::vector<T> out(n);
  cudaMemcpy(out.data(), d.get(), n * sizeof(T), cudaMemcpyDeviceToHost);
  return out;
}

// Fills a device buffer of `bytes` with 0xFF bytes: NaN in fp32, fp16 and
// bf16 alike. Outputs are poisoned before each run so an unwritten element fails.
inline void PoisonNaN(const DeviceBuffer& d) { cudaMemset(d.get(), 0xFF, d.bytes()); }

// ||out - ref|| / ||ref||; +inf when out has a NaN or the sizes differ.
inline double RelativeError(const std::vector<float>& out, const std::vector<float>& ref) {
  if (out.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = double{out[i]} - double{ref[i]};
    num += d * d;
    den += double{ref[i]} * double{ref[i]};
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Expected relative error bound of a result computed from inputs stored as `t`.
inline double Tolerance(ElemType t) {
  return t == ElemType::kF32 ? 1e-5 : (t == ElemType::kF16 ? 3e-3 : 1e-2);
}

inline std::vector<float> RandomVector(size_t n, std::mt19937& rng, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace kvserve::gpu_test
