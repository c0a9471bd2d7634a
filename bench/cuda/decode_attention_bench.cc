// Decode attention (PagedAttention with one query token per sequence, i.e.
// the split-KV kernel plus its merge) in bf16, 32 query heads / 8 kv heads,
// head dim 128, on shuffled block tables and random data. Reports bytes
// moved per second as a ratio to the device copy bandwidth measured in the
// same run, and the block size 1 / block size 16 time ratio.
//
// Bytes moved = K + V rows read for every token's context + q + out + page
// table (block ids, token arrays). The workspace round trip of the partials
// (about 1% of the K/V bytes at 4096 keys) is in the time, not in the bytes.
// Batch-invariant mode uses the same kernel for decode, so it is not listed.
//
// Usage: kvserve_cuda_decode_attention_bench [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
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
constexpr size_t kElem = 2;  // bf16

struct DecodeCase {
  const char* name;
  int batch;
  int context;  // keys per sequence (the token sits at position context - 1)
  int block_size;
};

struct Result {
  double ms = 0;
  double bytes = 0;
  int64_t ctas = 0;  // CTAs of the split-KV launch that do work
};

Result RunDecode(const DecodeCase& dc, cudaStream_t stream, int warmup, int reps) {
  const int bs = dc.block_size;
  const int blocks_per_seq = (dc.context + bs - 1) / bs;
  const int num_blocks = dc.batch * blocks_per_seq;
  std::mt19937 rng(1234 + bs);
  std::vector<int32_t> block_ids(num_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  std::vector<int32_t> table_start(dc.batch + 1), query_start(dc.batch + 1);
  std::vector<int32_t> token_seq(dc.batch), token_pos(dc.batch, dc.context - 1);
  for (int s = 0; s <= dc.batch; ++s) {
    table_start[s] = s * blocks_per_seq;
    query_start[s] = s;
    if (s < dc.batch) token_seq[s] = s;
  }

  const size_t cache_bytes = static_cast<size_t>(num_blocks) * kKvHeads * bs * kDim * kElem;
  const size_t q_bytes = static_cast<size_t>(dc.batch) * kHeads * kDim * kElem;
  void *k = nullptr, *v = nullptr, *q = nullptr, *out = nullptr, *ws = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&k, cache_bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&v, cache_bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&q, q_bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&out, q_bytes));
  FillRandomBf16(k, cache_bytes, 1);
  FillRandomBf16(v, cache_bytes, 2);
  FillRandomBf16(q, q_bytes, 3);
  const size_t ws_bytes = kc::PagedAttentionWorkspaceBytes(dc.batch, kHeads, kDim, dc.context);
  KVSERVE_BENCH_CUDA(cudaMalloc(&ws, std::max<size_t>(ws_bytes, 1)));
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
  p.num_tokens = dc.batch;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = bs;
  p.num_seqs = dc.batch;
  p.token_seq = d_token_seq;
  p.token_pos = d_token_pos;
  p.query_start = d_query_start;
  p.block_table_start = d_table_start;
  p.block_ids = d_block_ids;
  p.max_query_len = 1;
  p.max_seq_len = dc.context;
  p.scale = 0.08838834764831845f;  // 1 / sqrt(128)
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;

  Result r;
  r.ms = MedianMs([&] { KVSERVE_BENCH_CUDA(kc::PagedAttention(p, stream)); }, stream, warmup, reps);
  const double kv_bytes =
      2.0 * dc.batch * static_cast<double>(dc.context) * kKvHeads * kDim * kElem;
  const double table_bytes = 4.0 * (num_blocks + 2.0 * dc.batch + 2.0 * (dc.batch + 1));
  r.bytes = kv_bytes + 2.0 * static_cast<double>(q_bytes) + table_bytes;
  r.ctas = int64_t{dc.batch} * ((dc.context + kc::kSplitKeys - 1) / kc::kSplitKeys) * kKvHeads;

  cudaFree(k);
  cudaFree(v);
  cudaFree(q);
  cudaFree(out);
  cudaFree(ws);
  cudaFree(d_block_ids);
  cudaFree(d_table_start);
  cudaFree(d_query_start);
  cudaFree(d_token_seq);
  cudaFree(d_token_pos);
  return r;
}

int Main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return 2;
    }
  }
  const int warmup = quick ? 2 : 5;
  const int reps = quick ? 7 : 30;

  cudaStream_t stream;
  KVSERVE_BENCH_CUDA(cudaStreamCreate(&stream));
  cudaDeviceProp prop;
  KVSERVE_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = MeasureCopyBandwidth(stream);
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("copy bandwidth (read + write): %.1f GB/s\n\n", copy_bw * 1e-9);
  std::printf("decode attention, bf16, %d q heads / %d kv heads, head dim %d\n", kHeads, kKvHeads,
              kDim);
  std::printf("%-26s %6s %10s %10s %9s %8s\n", "case", "CTAs", "time us", "GB/s", "of copy", "MB");

  const DecodeCase cases[] = {
      {"bs16 batch 64 x 4096", 64, 4096, 16},
      {"bs16 batch 1 x 32768", 1, 32768, 16},
      {"bs1  batch 64 x 4096", 64, 4096, 1},
      {"bs32 batch 64 x 4096", 64, 4096, 32},
  };
  double ms_bs16 = 0, ms_bs1 = 0;
  for (const DecodeCase& dc : cases) {
    const Result r = RunDecode(dc, stream, warmup, reps);
    const double bw = r.bytes / (r.ms * 1e-3);
    std::printf("%-26s %6lld %10.1f %10.1f %8.1f%% %8.1f\n", dc.name,
                static_cast<long long>(r.ctas), r.ms * 1e3, bw * 1e-9, 100.0 * bw / copy_bw,
                r.bytes * 1e-6);
    if (dc.batch == 64 && dc.block_size == 16) ms_bs16 = r.ms;
    if (dc.batch == 64 && dc.block_size == 1) ms_bs1 = r.ms;
  }
  std::printf("\nblock size 1 / block size 16 time (batch 64 x 4096): %.3f\n", ms_bs1 / ms_bs16);
  std::printf("targets: bs16 64 x 4096 >= 85%% of copy; bs1 / bs16 <= 1.25\n");
  KVSERVE_BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) { return kvserve::bench::Main(argc, argv); }
