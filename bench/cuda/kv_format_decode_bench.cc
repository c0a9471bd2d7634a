// Decode attention per KV cache format (--kv_cache_dtype) on the GPU: batch
// 64 x 4096-token contexts, Llama-3-8B heads (32 q / 8 kv, head dim 128), bf16
// activations, block size 16, shuffled block tables. The cache of each
// format is filled by WriteKvCache from the same random bf16 K/V (so the
// scaled formats carry real per-row scales), then PagedAttention runs decode
// (the split-KV kernel and its merge). For the scaled formats, which run on
// tensor cores, the CUDA-core split-KV kernel is timed on the same call too.
//
// Reported per format: time, bytes moved per second and its ratio to the
// device copy bandwidth measured in the same run (issue #15's target: >= 80%),
// and the time against the bf16 cache's. Bytes moved = the format's K + V
// rows and their fp32 row scales for every context key + q + out + page
// table; the workspace round trip is in the time only (as in
// decode_attention_bench.cc). Also the KV write's rate per format (rows
// encoded per second), for the record.
//
// Usage: kvserve_cuda_kv_format_decode_bench [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda/gpu_timing.h"
#include "kernels/cpu/kv_quant.h"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::bench {
namespace {

namespace kc = kernels::cuda;
using kernels::KvDtype;

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kDim = 128;
constexpr int kBatch = 64;
constexpr int kContext = 4096;
constexpr int kBlockSize = 16;
// Tokens written per WriteKvCache call while filling the cache.
constexpr int kWriteChunk = 16384;

struct Result {
  double attention_ms = 0;
  double cuda_cores_ms = 0;  // scaled formats: the CUDA-core split-KV kernel, same call
  double bytes = 0;
  double write_ms = 0;  // one WriteKvCache call of kWriteChunk tokens
};

Result Run(KvDtype format, cudaStream_t stream, int warmup, int reps) {
  const int blocks_per_seq = kContext / kBlockSize;
  const int num_blocks = kBatch * blocks_per_seq;
  const int64_t rows = int64_t{num_blocks} * kKvHeads * kBlockSize;
  const int64_t row_bytes = kernels::KvRowBytes(format, kDim);
  const bool scaled = kernels::KvHasScale(format);
  std::mt19937 rng(99);
  std::vector<int32_t> block_ids(num_blocks);
  std::iota(block_ids.begin(), block_ids.end(), 0);
  std::shuffle(block_ids.begin(), block_ids.end(), rng);
  std::vector<int32_t> table_start(kBatch + 1), query_start(kBatch + 1);
  std::vector<int32_t> token_seq(kBatch), token_pos(kBatch, kContext - 1);
  for (int s = 0; s <= kBatch; ++s) {
    table_start[s] = s * blocks_per_seq;
    query_start[s] = s;
    if (s < kBatch) token_seq[s] = s;
  }

  const size_t cache_bytes = static_cast<size_t>(rows * row_bytes);
  const size_t q_bytes = size_t{kBatch} * kHeads * kDim * 2;
  void *k = nullptr, *v = nullptr, *q = nullptr, *out = nullptr, *ws = nullptr;
  float *ks = nullptr, *vs = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&k, cache_bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&v, cache_bytes));
  if (scaled) {
    KVSERVE_BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&ks), rows * sizeof(float)));
    KVSERVE_BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&vs), rows * sizeof(float)));
  }
  KVSERVE_BENCH_CUDA(cudaMalloc(&q, q_bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&out, q_bytes));
  FillRandomBf16(q, q_bytes, 3);

  // Fill every slot through the KV write: chunks of kWriteChunk tokens from
  // one random bf16 source, slots in order.
  const size_t src_bytes = size_t{kWriteChunk} * kKvHeads * kDim * 2;
  void *k_src = nullptr, *v_src = nullptr;
  KVSERVE_BENCH_CUDA(cudaMalloc(&k_src, src_bytes));
  KVSERVE_BENCH_CUDA(cudaMalloc(&v_src, src_bytes));
  FillRandomBf16(k_src, src_bytes, 1);
  FillRandomBf16(v_src, src_bytes, 2);
  std::vector<int64_t> slots(kWriteChunk);
  int64_t* d_slots = nullptr;
  KVSERVE_BENCH_CUDA(
      cudaMalloc(reinterpret_cast<void**>(&d_slots), slots.size() * sizeof(int64_t)));
  kc::CudaWriteKvParams w;
  w.dtype = kc::ElemType::kBF16;
  w.k = k_src;
  w.v = v_src;
  w.src_stride = int64_t{kKvHeads} * kDim;
  w.k_cache = k;
  w.v_cache = v;
  w.kv_dtype = format;
  w.k_scales = ks;
  w.v_scales = vs;
  w.slot_mapping = d_slots;
  w.num_tokens = kWriteChunk;
  w.num_kv_heads = kKvHeads;
  w.head_dim = kDim;
  w.block_size = kBlockSize;
  const int64_t slots_total = int64_t{num_blocks} * kBlockSize;
  for (int64_t first = 0; first < slots_total; first += kWriteChunk) {
    std::iota(slots.begin(), slots.end(), first);
    KVSERVE_BENCH_CUDA(
        cudaMemcpy(d_slots, slots.data(), slots.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    KVSERVE_BENCH_CUDA(kc::WriteKvCache(w, stream));
    KVSERVE_BENCH_CUDA(cudaStreamSynchronize(stream));
  }
  Result r;
  r.write_ms =
      MedianMs([&] { KVSERVE_BENCH_CUDA(kc::WriteKvCache(w, stream)); }, stream, warmup, reps);

  const size_t ws_bytes = kc::PagedAttentionWorkspaceBytes(kBatch, kHeads, kDim, kContext);
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
  p.kv_dtype = format;
  p.k_scales = ks;
  p.v_scales = vs;
  p.num_tokens = kBatch;
  p.num_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.block_size = kBlockSize;
  p.num_seqs = kBatch;
  p.token_seq = d_token_seq;
  p.token_pos = d_token_pos;
  p.query_start = d_query_start;
  p.block_table_start = d_table_start;
  p.block_ids = d_block_ids;
  p.max_query_len = 1;
  p.max_seq_len = kContext;
  p.scale = 0.08838834764831845f;  // 1 / sqrt(128)
  p.workspace = ws;
  p.workspace_bytes = ws_bytes;
  r.attention_ms =
      MedianMs([&] { KVSERVE_BENCH_CUDA(kc::PagedAttention(p, stream)); }, stream, warmup, reps);
  if (scaled) {  // the tensor-core kernel's CUDA-core predecessor, for the ratio
    r.cuda_cores_ms = MedianMs(
        [&] { KVSERVE_BENCH_CUDA(kc::internal::PagedAttentionSplitKvCudaCores(p, stream)); },
        stream, warmup, reps);
  }
  const double per_row = static_cast<double>(row_bytes) + (scaled ? 4.0 : 0.0);
  const double kv_bytes = 2.0 * kBatch * static_cast<double>(kContext) * kKvHeads * per_row;
  const double table_bytes = 4.0 * (num_blocks + 2.0 * kBatch + 2.0 * (kBatch + 1));
  r.bytes = kv_bytes + 2.0 * static_cast<double>(q_bytes) + table_bytes;

  for (void* ptr : {k, v, q, out, ws, k_src, v_src, static_cast<void*>(ks), static_cast<void*>(vs),
                    static_cast<void*>(d_slots)}) {
    if (ptr != nullptr) cudaFree(ptr);
  }
  for (int32_t* ptr : {d_block_ids, d_table_start, d_query_start, d_token_seq, d_token_pos}) {
    cudaFree(ptr);
  }
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
  std::printf(
      "decode attention per KV format, bf16 activations, batch %d x %d, %d q / %d kv heads, "
      "head dim %d, block size %d\n",
      kBatch, kContext, kHeads, kKvHeads, kDim, kBlockSize);
  std::printf("%-10s %10s %10s %9s %10s %9s %12s %12s %8s\n", "format", "time us", "GB/s",
              "of copy", "MB moved", "vs bf16", "write Mrow/s", "CUDA-core us", "speedup");
  // bfloat16 first: it is the bf16 model's own ("auto") cache, the baseline.
  const KvDtype formats[] = {KvDtype::kBfloat16, KvDtype::kFloat16, KvDtype::kFp8E4m3,
                             KvDtype::kInt8,     KvDtype::kInt4,    KvDtype::kFp4E2m1};
  double ms_bf16 = 0;
  for (KvDtype f : formats) {
    const Result r = Run(f, stream, warmup, reps);
    if (f == KvDtype::kBfloat16) ms_bf16 = r.attention_ms;
    const double bw = r.bytes / (r.attention_ms * 1e-3);
    const double write_rows = 2.0 * kWriteChunk * kKvHeads / (r.write_ms * 1e-3);  // K and V
    std::printf("%-10s %10.1f %10.1f %8.1f%% %10.1f %9.3f %12.1f",
                std::string(kernels::KvDtypeName(f)).c_str(), r.attention_ms * 1e3, bw * 1e-9,
                100.0 * bw / copy_bw, r.bytes * 1e-6, r.attention_ms / ms_bf16, write_rows * 1e-6);
    if (r.cuda_cores_ms > 0) {
      std::printf(" %12.1f %7.2fx", r.cuda_cores_ms * 1e3, r.cuda_cores_ms / r.attention_ms);
    }
    std::printf("\n");
  }
  std::printf("\ntarget (issue #15): every format >= 80%% of copy bandwidth\n");
  KVSERVE_BENCH_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace kvserve::bench

int main(int argc, char** argv) { return kvserve::bench::Main(argc, argv); }
