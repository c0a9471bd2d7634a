// Causal prefill attention in bf16, 32 query heads / 8 kv heads, head dim
// 128, block size 16 on shuffled block tables, whole prompts in one chunk
// (K/V already in the cache, random data). Two shapes: one 16384-token
// prompt and four 4096-token prompts.
//
// FLOPs = 4 * head_dim * num_heads * (causal (query, key) pairs), pairs =
// sum over prompts of L (L + 1) / 2. Reported as TFLOP/s and as a ratio to a
// cuBLAS bf16 matrix product measured in the same run.
//
// The same prefill through the split-KV kernel (the batch-invariant mode's
// path, CUDA cores) is timed too: its slowdown is the cost of batch-invariant
// prefill. The two outputs are compared (relative L2 difference) as a sanity
// line, not an assertion.
//
// Usage: kvserve_cuda_prefill_attention_bench [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "bench/cuda/gpu_timing.h"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::bench {
namespace {

namespace kc = kernels::cuda;

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kDim = 128;
constexpr int kBlockSize = 16;

struct PrefillCase {
  const char* name;
  int num_prompts;
  int prompt_len;
};

float Bf16ToFloat(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Result {
  double prefill_ms = 0;
  double split_ms = -1;  // < 0: not run
  double flops = 0;
  double rel_diff = -1;
};

Result Run(const PrefillCase& pc, cudaStream_t stream, int reps) {
  const int len = pc.prompt_len, n = pc.num_prompts;
  const int blocks_per_seq = (len + kBlockSize - 1) / kBlockSize;
  const int num_blocks = n * blocks_per_seq;
  std::mt19937 rng(77);
  std::vector<int32_t> block_ids(num_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  std::vector<int32_t> table_start(n + 1), query_start(n + 1), token_seq, token_pos;
  for (int s = 0; s <= n; ++s) {
    table_start[s] = s * blocks_per_seq;
    query_start[s] = s * len;
  }
  for (int s = 0; s < n; ++s) {
    for (int i = 0; i < len; ++i) {
      token_seq.push_back(s);
      token_pos.push_back(i);
    }
  }
  const int num_tokens = n * len;

  const size_t cache_elems = static_cast<size_t>(num_blocks) * kKvHeads * kBlockSize * kDim;
  const size_t q_elems = static_cast<size_t>(num_tokens) * kHeads * kDim;
  void *k = nullptr, *v = nullptr, *q = nullptr, *out = nullptr, *out_split = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&k, cache_elems * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&v, cache_elems * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&q, q_elems * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&out, q_elems * 2));
  KVSERVE_BENCH_CUDA(cudaMalloc(&out_split, q_elems * 2));
  FillRandomBf16(k, cache_elems * 2, 1);
  FillRandomBf16(v, cache_elems * 2, 2);
  FillRandomBf16(q, q_elems * 2, 3);
  int32_t* d_block_ids = UploadVector(block_ids);
  int32_t* d_table_start = UploadVector(table_start);
  int32_t* d_query_start = UploadVector(query_start);
  int32_t* d_token_seq = UploadVector(token_seq);
  int32_t* d_token_pos = UploadVector(token_pos);

  kc::CudaPagedAttentionParams p;
  p.dtype = kc::ElemType::kBF16;
  p.q = q;
  p.q_stride = int64_t{kHeads} * kDim;
  p.out = out;
  p.k_cache = k;
  p.v_cache = v;
  p.num_tokens = num_tokens;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = kBlockSize;
  p.num_seqs = n;
  p.token_seq = d_token_seq;
  p.token_pos = d_token_pos;
  p.query_start = d_query_start;
  p.block_table_start = d_table_start;
  p.block_ids = d_block_ids;
  p.max_query_len = len;
  p.max_seq_len = len;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kDim));

  Result r;
  const double pairs = static_cast<double>(n) * len * (len + 1.0) / 2.0;
  r.flops = 4.0 * kDim * kHeads * pairs;
  r.prefill_ms =
      MedianMs([&] { KVSERVE_BENCH_CUDA(kc::PagedAttentionPrefill(p, stream)); }, stream, 3, reps);

  // Split-KV on the same prefill, if its workspace fits on the device.
  const size_t ws_bytes = kc::PagedAttentionWorkspaceBytes(num_tokens, kHeads, kDim, len);
  void* ws = nullptr;
  if (cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1)) == cudaSuccess) {
    kc::CudaPagedAttentionParams ps = p;
    ps.out = out_split;
    ps.workspace = ws;
    ps.workspace_bytes = ws_bytes;
    r.split_ms = MedianMs([&] { KVSERVE_BENCH_CUDA(kc::PagedAttentionSplitKv(ps, stream)); },
                          stream, 1, std::max(3, reps / 3));
    cudaFree(ws);
    std::vector<uint16_t> a(q_elems), b(q_elems);
    KVSERVE_BENCH_CUDA(cudaMemcpy(a.data(), out, q_elems * 2, cudaMemcpyDeviceToHost));
    KVSERVE_BENCH_CUDA(cudaMemcpy(b.data(), out_split, q_elems * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t i = 0; i < q_elems; ++i) {
      const double x = Bf16ToFloat(a[i]), y = Bf16ToFloat(b[i]);
      num += (x - y) * (x - y);
      den += y * y;
    }
    r.rel_diff = den > 0 ? std::sqrt(num / den) : NAN;
  } else {
    (void)cudaGetLastError();  // clear the failed allocation
    std::fprintf(stderr, "%s: split-KV workspace of %.1f GiB does not fit; skipped\n", pc.name,
                 ws_bytes / 1073741824.0);
  }

  for (void* ptr : {k, v, q, out, out_split}) cudaFree(ptr);
  for (int32_t* ptr : {d_block_ids, d_table_start, d_query_start, d_token_seq, d_token_pos}) {
    cudaFree(ptr);
  }
  return r;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) {
  using namespace kvserve::bench;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int reps = quick ? 5 : 20;
  cudaDeviceProp prop;
  KVSERVE_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  KVSERVE_BENCH_CUDA(cudaStreamCreate(&stream));
  const double matmul = MeasureBf16MatmulFlops(stream);
  std::printf("device: %s, cuBLAS bf16 matmul (8192^3): %.1f TFLOP/s\n", prop.name, matmul / 1e12);
  std::printf("causal prefill, bf16, %d q heads / %d kv heads, head dim %d, block size %d\n",
              kHeads, kKvHeads, kDim, kBlockSize);
  std::printf("%-10s %10s %9s %8s | %12s %9s %9s %10s\n", "shape", "prefill ms", "TFLOP/s",
              "/cuBLAS", "split-KV ms", "TFLOP/s", "slowdown", "rel diff");
  const PrefillCase cases[] = {{"1x16384", 1, 16384}, {"4x4096", 4, 4096}};
  for (const PrefillCase& pc : cases) {
    const Result r = Run(pc, stream, reps);
    const double tflops = r.flops / (r.prefill_ms * 1e-3) / 1e12;
    std::printf("%-10s %10.3f %9.1f %8.3f | ", pc.name, r.prefill_ms, tflops,
                tflops * 1e12 / matmul);
    if (r.split_ms > 0) {
      std::printf("%12.3f %9.1f %8.1fx %10.2e\n", r.split_ms, r.flops / (r.split_ms * 1e-3) / 1e12,
                  r.split_ms / r.prefill_ms, r.rel_diff);
    } else {
      std::printf("%12s\n", "skipped");
    }
  }
  KVSERVE_BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}
