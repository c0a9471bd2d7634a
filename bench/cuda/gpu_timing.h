// Timing and ceiling helpers shared by the GPU benchmarks (bench/cuda/).
// Times are medians over repeated runs between CUDA events, after warm-up.
// The ceilings are measured in the same program: device-to-device copy
// bandwidth (bytes read + bytes written per second) and a cuBLAS bf16 matrix
// product's FLOP/s, so each result is reported as a ratio to what this GPU
// actually does, not to a datasheet.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

namespace kvserve::bench {

#define KVSERVE_BENCH_CUDA(expr)                                                                 \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Median milliseconds of `fn` (which enqueues work on `stream`) over `reps`
// runs after `warmup` runs; checks the last error after every run.
inline double MedianMs(const std::function<void()>& fn, cudaStream_t stream, int warmup = 5,
                       int reps = 30) {
  for (int i = 0; i < warmup; ++i) fn();
  KVSERVE_BENCH_CUDA(cudaGetLastError());
  KVSERVE_BENCH_CUDA(cudaStreamSynchronize(stream));
  cudaEvent_t start, stop;
  KVSERVE_BENCH_CUDA(cudaEventCreate(&start));
  KVSERVE_BENCH_CUDA(cudaEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    KVSERVE_BENCH_CUDA(cudaEventRecord(start, stream));
    fn();
    KVSERVE_BENCH_CUDA(cudaEventRecord(stop, stream));
    KVSERVE_BENCH_CUDA(cudaEventSynchronize(stop));
    KVSERVE_BENCH_CUDA(cudaGetLastError());
    float t = 0;
    KVSERVE_BENCH_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes
// written, over a buffer far larger than L2 (1 GiB each way).
inline double MeasureCopyBandwidth(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&a, bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&b, bytes));
  KVSERVE_BENCH_CUDA(cudaMemsetAsync(a, 1, bytes, stream));
  const double ms = MedianMs(
      [&] { KVSERVE_BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);
}

// A bf16 matrix product (m = n = k = 8192, fp32 accumulation) through
// cuBLAS on random data, in FLOP/s.
inline double MeasureBf16MatmulFlops(cudaStream_t stream) {
  const int n = 8192;
  const size_t elems = size_t{n} * n;
  std::vector<__nv_bfloat16> host(elems);
  uint32_t state = 12345;
  for (auto& x : host) {
    state = state * 1664525u + 1013904223u;  // LCG: random, not zeros
    x = __float2bfloat16(static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  }
  void *a = nullptr, *b = nullptr, *c = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&a, elems * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&b, elems * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&c, elems * 2));
  KVSERVE_BENCH_CUDA(cudaMemcpy(a, host.data(), elems * 2, cudaMemcpyHostToDevice));
  KVSERVE_BENCH_CUDA(cudaMemcpy(b, host.data(), elems * 2, cudaMemcpyHostToDevice));
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasCreate failed\n");
    std::exit(1);
  }
  cublasSetStream(handle, stream);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = MedianMs(
      [&] {
        if (cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                         CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
          std::fprintf(stderr, "cublasGemmEx failed\n");
          std::exit(1);
        }
      },
      stream, 3, 10);
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  return 2.0 * n * double{n} * n / (ms * 1e-3);
}

// Fills `bytes` of device memory with random bf16 values in [-1, 1): a
// 32 MiB random pattern copied as often as needed (never zeros).
inline void FillRandomBf16(void* dst, size_t bytes, uint32_t seed) {
  static std::vector<uint16_t> pattern;
  static uint32_t pattern_seed = 0;
  if (pattern.empty() || pattern_seed != seed) {
    pattern.resize(size_t{16} << 20);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (uint16_t& x : pattern) {
      const float f = dist(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      x = static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
    }
    pattern_seed = seed;
  }
  const size_t chunk = pattern.size() * sizeof(uint16_t);
  auto* out = static_cast<char*>(dst);
  for (size_t off = 0; off < bytes; off += chunk) {
    KVSERVE_BENCH_CUDA(cudaMemcpy(out + off, pattern.data(), std::min(chunk, bytes - off),
                                  cudaMemcpyHostToDevice));
  }
}

// Copies a host vector into a new device allocation, which the caller owns
// (cudaFree).
template <typename T>
inline T* UploadVector(const std::vector<T>& v) {
  void* raw = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&raw, std::max<size_t>(v.size(), 1) * sizeof(T)));
  T* d = static_cast<T*>(raw);
  KVSERVE_BENCH_CUDA(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace kvserve::bench
