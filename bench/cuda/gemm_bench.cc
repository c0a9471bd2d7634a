// GemmCublasLt vs GemmInvariant (kernels/cuda/gemm.h) on Llama-3-8B's
// linear layers, bf16 in (bf16 out; fp32 out for lm_head, as the engine
// writes logits), at m = 1, 64 (decode), 512 and 4096 (prefill) rows.
//
// Reported per implementation: median time, TFLOP/s and its ratio to the
// cuBLAS 8192^3 bf16 product measured here, weight bytes / time and its
// ratio to the device copy bandwidth measured here; and the invariant /
// cuBLASLt time ratio, the price of the batch-invariant mode. Weights are
// rotated through a 1 GiB buffer so every run reads them from HBM, not L2.
//
// Usage: kvserve_cuda_gemm_bench
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "bench/cuda/gpu_timing.h"
#include "kernels/cuda/gemm.h"

namespace kvserve::bench {
namespace {

using kernels::cuda::CublasLtContext;
using kernels::cuda::CudaGemmParams;
using kernels::cuda::ElemType;
using kernels::cuda::GemmCublasLt;
using kernels::cuda::GemmInvariant;

struct Layer {
  const char* name;
  int64_t n, k;
  ElemType out_type;
};

constexpr Layer kLayers[] = {
    {"qkv", 6144, 4096, ElemType::kBF16},      {"o", 4096, 4096, ElemType::kBF16},
    {"gate_up", 28672, 4096, ElemType::kBF16}, {"down", 4096, 14336, ElemType::kBF16},
    {"lm_head", 128256, 4096, ElemType::kF32},
};
constexpr int64_t kRows[] = {1, 64, 512, 4096};

struct Result {
  double ms, tflops, gbps;
};

int Main() {
  cudaStream_t stream;
  KVSERVE_BENCH_CUDA(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  KVSERVE_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = MeasureCopyBandwidth(stream);
  const double peak = MeasureBf16MatmulFlops(stream);
  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  std::printf("ceilings: copy %.0f GB/s (read + write), cuBLAS bf16 8192^3 %.1f TFLOP/s\n",
              copy_bw / 1e9, peak / 1e12);

  CublasLtContext lt;
  if (cublasLtCreate(&lt.handle) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "cublasLtCreate failed\n");
    return 1;
  }
  lt.workspace_bytes = size_t{32} << 20;
  KVSERVE_BENCH_CUDA(cudaMalloc(&lt.workspace, lt.workspace_bytes));

  // Weights rotate through a pool of at least 1 GiB (>> L2) that holds the
  // largest W.
  size_t weight_pool = size_t{1} << 30;
  int64_t max_xk = 0, max_yn = 0;
  for (const Layer& l : kLayers) {
    weight_pool = std::max(weight_pool, static_cast<size_t>(l.n * l.k) * 2);
    max_xk = std::max(max_xk, l.k);
    max_yn = std::max(max_yn, l.n * static_cast<int64_t>(kernels::cuda::ElemSize(l.out_type)));
  }
  const int64_t max_m = kRows[std::size(kRows) - 1];
  void *w_pool = nullptr, *x = nullptr, *y = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&w_pool, weight_pool));
  KVSERVE_BENCH_CUDA(cudaMalloc(&x, static_cast<size_t>(max_m * max_xk) * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&y, static_cast<size_t>(max_m * max_yn)));
  FillRandomBf16(w_pool, weight_pool, 1);
  FillRandomBf16(x, static_cast<size_t>(max_m * max_xk) * 2, 2);

  std::printf("\n%-8s %5s %6s %6s | %-38s | %-38s | %s\n", "layer", "m", "n", "k",
              "cuBLASLt: us  TFLOP/s %peak  W GB/s %copy",
              "invariant: us TFLOP/s %peak  W GB/s %copy", "inv/lt");
  std::vector<double> ratio_log_sum(std::size(kRows), 0.0);
  std::vector<double> layer_lt(std::size(kRows), 0.0), layer_inv(std::size(kRows), 0.0);
  for (const Layer& l : kLayers) {
    const size_t w_bytes = static_cast<size_t>(l.n * l.k) * 2;
    const size_t slices = weight_pool / w_bytes;  // >= 1
    for (size_t mi = 0; mi < std::size(kRows); ++mi) {
      const int64_t m = kRows[mi];
      CudaGemmParams p;
      p.in_type = ElemType::kBF16;
      p.out_type = l.out_type;
      p.x = x;
      p.ldx = l.k;
      p.y = y;
      p.ldy = l.n;
      p.m = m;
      p.n = l.n;
      p.k = l.k;
      size_t call = 0;
      auto next_weights = [&] { p.w = static_cast<char*>(w_pool) + (call++ % slices) * w_bytes; };
      Result res[2];
      for (int impl = 0; impl < 2; ++impl) {
        const double ms = MedianMs(
            [&] {
              next_weights();
              if (impl == 0) {
                const cublasStatus_t st = GemmCublasLt(lt, p, stream);
                if (st != CUBLAS_STATUS_SUCCESS) {
                  std::fprintf(stderr, "GemmCublasLt failed: %d\n", static_cast<int>(st));
                  std::exit(1);
                }
              } else {
                KVSERVE_BENCH_CUDA(GemmInvariant(p, stream));
              }
            },
            stream);
        const double flops = 2.0 * static_cast<double>(m) * l.n * l.k;
        res[impl] = {ms, flops / (ms * 1e-3) / 1e12, w_bytes / (ms * 1e-3) / 1e9};
      }
      const double ratio = res[1].ms / res[0].ms;
      ratio_log_sum[mi] += std::log(ratio);
      if (l.out_type == ElemType::kBF16) {  // the four per-layer products
        layer_lt[mi] += res[0].ms;
        layer_inv[mi] += res[1].ms;
      }
      std::printf("%-8s %5lld %6lld %6lld |", l.name, static_cast<long long>(m),
                  static_cast<long long>(l.n), static_cast<long long>(l.k));
      for (const Result& r : res) {
        std::printf(" %9.1f %7.1f %5.1f%% %7.0f %5.1f%% |", r.ms * 1e3, r.tflops,
                    100.0 * r.tflops * 1e12 / peak, r.gbps, 100.0 * r.gbps * 1e9 / copy_bw);
      }
      std::printf(" %5.2fx\n", ratio);
    }
  }

  std::printf("\nbatch-invariant GEMM cost (invariant / cuBLASLt time):\n");
  for (size_t mi = 0; mi < std::size(kRows); ++mi) {
    std::printf(
        "  m = %4lld: geomean over layers %.2fx; one decoder layer (qkv+o+gate_up+down) "
        "%.2fx (%.1f us vs %.1f us)\n",
        static_cast<long long>(kRows[mi]),
        std::exp(ratio_log_sum[mi] / static_cast<double>(std::size(kLayers))),
        layer_inv[mi] / layer_lt[mi], layer_inv[mi] * 1e3, layer_lt[mi] * 1e3);
  }

  cudaFree(w_pool);
  cudaFree(x);
  cudaFree(y);
  cudaFree(lt.workspace);
  cublasLtDestroy(lt.handle);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main() { return kvserve::bench::Main(); }
