// PagedAttentionPrefill (tensor-core prefill kernel) against the CPU paged
// attention (the oracle), fed the same inputs rounded to the storage type.
//
// Every KV slot the kernel must not read is NaN: unowned blocks (block 0
// included), the slots past each sequence's last key, and with a sliding
// window every key before the window of the sequence's first query token.
// Q padding (q_stride > heads * dim) is NaN too, and the output is NaN before
// each run, so a stray read or a missing write shows up as a NaN.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/paged_attention.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::gpu_test {
namespace {

using kernels::cuda::CudaPagedAttentionParams;
using kernels::cuda::PagedAttentionPrefill;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// One sequence of the batch: `prefix` keys already cached, then a chunk of
// `chunk` query tokens at positions prefix .. prefix + chunk - 1 (their own
// keys are in the cache too, as after WriteKvCache).
struct Seq {
  int prefix;
  int chunk;
};

struct Case {
  ElemType dtype;
  int head_dim;
  int block_size;
  int group;  // query heads per kv head
  int window = 0;
  std::vector<Seq> seqs;
  float softcap = 0.0f;  // attention logit soft-capping; 0: none
};

// 17 sequences: context lengths (prefix + chunk) include 1, 54, 97 and 4000;
// chunks of 1, 2, 63, 64, 65 and 200 tokens, cached prefixes from 0 to 3999.
std::vector<Seq> Batch17() {
  return {{0, 1},    {53, 1},    {0, 54},  {33, 64},  {0, 97},   {3935, 65},
          {3999, 1}, {0, 2},     {7, 2},   {0, 63},   {100, 63}, {0, 65},
          {130, 65}, {300, 200}, {0, 200}, {1000, 1}, {64, 64}};
}

std::string Name(const Case& c) {
  return std::string(kernels::cuda::ElemName(c.dtype)) + "_d" + std::to_string(c.head_dim) + "_bs" +
         std::to_string(c.block_size) + "_g" + std::to_string(c.group) +
         (c.window > 0 ? "_w" + std::to_string(c.window) : "");
}

// Builds the batch of `c`, runs the kernel twice (output poisoned before
// each run) and compares each sequence's output with the CPU kernel's.
void RunCase(const Case& c, uint32_t seed) {
  SCOPED_TRACE(Name(c));
  constexpr int kKvHeads = 2;
  const int heads = kKvHeads * c.group, dim = c.head_dim, bs = c.block_size;
  const int num_seqs = static_cast<int>(c.seqs.size());
  std::mt19937 rng(seed);
  auto round = [&](float f) { return RoundTo(c.dtype, f); };

  // Page tables: shuffled block ids; block 0 and some spare blocks unowned.
  std::vector<int32_t> table_start{0}, block_ids;
  int owned = 0;
  for (const Seq& s : c.seqs) owned += (s.prefix + s.chunk + bs - 1) / bs;
  const int num_blocks = owned + owned / 4 + 3;
  std::vector<int32_t> pool(num_blocks - 1);
  std::iota(pool.begin(), pool.end(), 1);
  std::shuffle(pool.begin(), pool.end(), rng);
  for (const Seq& s : c.seqs) {
    const int blocks = (s.prefix + s.chunk + bs - 1) / bs;
    for (int b = 0; b < blocks; ++b) block_ids.push_back(pool[block_ids.size()]);
    table_start.push_back(static_cast<int32_t>(block_ids.size()));
  }

  // KV cache [block][kv_head][slot][dim]: NaN except the keys some query of
  // the call may see.
  const size_t cache_elems = static_cast<size_t>(num_blocks) * kKvHeads * bs * dim;
  std::vector<float> k_cache(cache_elems, kNaN), v_cache(cache_elems, kNaN);
  std::uniform_real_distribution<float> kv_dist(-1.0f, 1.0f), q_dist(-2.5f, 2.5f);
  for (int s = 0; s < num_seqs; ++s) {
    const int first = c.window > 0 ? std::max(0, c.seqs[s].prefix - c.window + 1) : 0;
    for (int j = first; j < c.seqs[s].prefix + c.seqs[s].chunk; ++j) {
      const int64_t block = block_ids[table_start[s] + j / bs];
      for (int h = 0; h < kKvHeads; ++h) {
        const size_t row = ((static_cast<size_t>(block) * kKvHeads + h) * bs + j % bs) * dim;
        for (int d = 0; d < dim; ++d) {
          k_cache[row + d] = round(kv_dist(rng));
          v_cache[row + d] = round(kv_dist(rng));
        }
      }
    }
  }

  // Tokens, sequence by sequence; q rows padded with NaN.
  std::vector<int32_t> query_start{0}, token_seq, token_pos;
  int max_query_len = 0, max_seq_len = 0;
  for (int s = 0; s < num_seqs; ++s) {
    for (int i = 0; i < c.seqs[s].chunk; ++i) {
      token_seq.push_back(s);
      token_pos.push_back(c.seqs[s].prefix + i);
    }
    query_start.push_back(static_cast<int32_t>(token_seq.size()));
    max_query_len = std::max(max_query_len, c.seqs[s].chunk);
    max_seq_len = std::max(max_seq_len, c.seqs[s].prefix + c.seqs[s].chunk);
  }
  const int num_tokens = static_cast<int>(token_seq.size());
  const int64_t q_stride = int64_t{heads} * dim + 16;
  std::vector<float> q(num_tokens * q_stride, kNaN);
  for (int t = 0; t < num_tokens; ++t) {
    for (int e = 0; e < heads * dim; ++e) q[t * q_stride + e] = round(q_dist(rng));
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));

  // Oracle.
  const size_t out_elems = static_cast<size_t>(num_tokens) * heads * dim;
  std::vector<float> ref(out_elems, kNaN);
  kernels::PagedAttentionParams cp;
  cp.q = q.data();
  cp.q_stride = q_stride;
  cp.out = ref.data();
  cp.k_cache = k_cache.data();
  cp.v_cache = v_cache.data();
  cp.num_tokens = num_tokens;
  cp.num_heads = heads;
  cp.num_kv_heads = kKvHeads;
  cp.head_dim = dim;
  cp.block_size = bs;
  cp.token_seq = token_seq.data();
  cp.token_pos = token_pos.data();
  cp.block_table_start = table_start.data();
  cp.block_ids = block_ids.data();
  cp.scale = scale;
  cp.sliding_window = c.window;
  cp.softcap = c.softcap;
  kernels::PagedAttention(cp, &kernels::ThreadPool::Default());

  // Device.
  DeviceBuffer d_q = UploadAs(c.dtype, q), d_k = UploadAs(c.dtype, k_cache),
               d_v = UploadAs(c.dtype, v_cache);
  DeviceBuffer d_seq = Upload(token_seq), d_pos = Upload(token_pos), d_qstart = Upload(query_start),
               d_tstart = Upload(table_start), d_blocks = Upload(block_ids);
  DeviceBuffer d_out(out_elems * kernels::cuda::ElemSize(c.dtype));
  ASSERT_NE(d_out.get(), nullptr);
  CudaPagedAttentionParams p;
  p.dtype = c.dtype;
  p.q = d_q.get();
  p.q_stride = q_stride;
  p.out = d_out.get();
  p.k_cache = d_k.get();
  p.v_cache = d_v.get();
  p.num_tokens = num_tokens;
  p.num_heads = heads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = dim;
  p.block_size = bs;
  p.num_seqs = num_seqs;
  p.token_seq = d_seq.as<int32_t>();
  p.token_pos = d_pos.as<int32_t>();
  p.query_start = d_qstart.as<int32_t>();
  p.block_table_start = d_tstart.as<int32_t>();
  p.block_ids = d_blocks.as<int32_t>();
  p.max_query_len = max_query_len;
  p.max_seq_len = max_seq_len;
  p.scale = scale;
  p.sliding_window = c.window;
  p.softcap = c.softcap;

  std::vector<float> first_run;
  for (int run = 0; run < 2; ++run) {
    PoisonNaN(d_out);
    KVSERVE_CUDA_OK(PagedAttentionPrefill(p, nullptr));
    KVSERVE_CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> out = DownloadAs(c.dtype, d_out.get(), out_elems);
    if (run == 0) {
      // Per sequence, so a wrong short sequence is not hidden by long ones.
      const size_t row = static_cast<size_t>(heads) * dim;
      for (int s = 0; s < num_seqs; ++s) {
        if (c.seqs[s].chunk == 0) continue;
        const std::vector<float> got(out.begin() + query_start[s] * row,
                                     out.begin() + query_start[s + 1] * row);
        const std::vector<float> want(ref.begin() + query_start[s] * row,
                                      ref.begin() + query_start[s + 1] * row);
        EXPECT_LE(RelativeError(got, want), Tolerance(c.dtype))
            << "sequence " << s << " (prefix " << c.seqs[s].prefix << ", chunk " << c.seqs[s].chunk
            << ")";
      }
      first_run = std::move(out);
    } else {
      // No atomics, no order dependence: a rerun is bit-identical.
      EXPECT_EQ(0, std::memcmp(out.data(), first_run.data(), out.size() * sizeof(float)));
    }
  }
}

class PrefillBatchTest : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillBatchTest, MatchesCpuOracle) { RunCase(GetParam(), 1234); }

// Head dims 64 and 128 get every (block size, group) pair; 80, 96 and 256 two
// each, both dtypes throughout.
std::vector<Case> BatchCases() {
  struct Paging {
    int block_size, group;
  };
  const std::vector<Paging> all = {{16, 4}, {1, 1}, {8, 8}, {32, 4}, {64, 1}};
  std::vector<Case> cases;
  for (ElemType t : {ElemType::kBF16, ElemType::kF16}) {
    for (int dim : {64, 128}) {
      for (const Paging& pg : all) cases.push_back({t, dim, pg.block_size, pg.group, 0, Batch17()});
    }
    cases.push_back({t, 80, 16, 4, 0, Batch17()});
    cases.push_back({t, 80, 8, 1, 0, Batch17()});
    cases.push_back({t, 96, 32, 8, 0, Batch17()});
    cases.push_back({t, 96, 1, 4, 0, Batch17()});
    cases.push_back({t, 256, 16, 8, 0, Batch17()});
    cases.push_back({t, 256, 64, 1, 0, Batch17()});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, PrefillBatchTest, ::testing::ValuesIn(BatchCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return Name(info.param);
                         });

// Sliding windows (not multiples of the key tile) over long prefixes whose
// keys before the window are NaN; one sequence has no token in the call.
TEST(PrefillWindowTest, MatchesCpuOracle) {
  const std::vector<Seq> seqs = {{3935, 65}, {0, 200}, {300, 200}, {53, 1},
                                 {0, 54},    {50, 0},  {1000, 64}, {90, 7}};
  RunCase({ElemType::kBF16, 128, 16, 4, 37, seqs}, 7);
  RunCase({ElemType::kF16, 64, 8, 1, 200, seqs}, 8);
  RunCase({ElemType::kBF16, 256, 32, 8, 100, seqs}, 9);
  RunCase({ElemType::kF16, 80, 1, 4, 64, seqs}, 10);
  RunCase({ElemType::kBF16, 128, 64, 8, 1, seqs}, 11);  // each token sees itself only
}

// Gemma 2's attention soft-capping in the tensor-core kernel.
TEST(PrefillSoftCapTest, MatchesCpuOracle) {
  const std::vector<Seq> seqs = {{0, 200}, {300, 65}, {0, 54}, {90, 7}};
  RunCase({ElemType::kBF16, 128, 16, 4, 0, seqs, 2.0f}, 31);
  RunCase({ElemType::kF16, 256, 16, 2, 100, seqs, 50.0f}, 32);
}

// A single long prompt (many query tiles, processed heaviest first).
TEST(PrefillLongPromptTest, MatchesCpuOracle) {
  RunCase({ElemType::kBF16, 128, 16, 4, 0, {{0, 1500}}}, 21);
}

TEST(PrefillRejectTest, InvalidParams) {
  DeviceBuffer buf(4096);
  CudaPagedAttentionParams p;
  p.dtype = ElemType::kBF16;
  p.q = p.k_cache = p.v_cache = buf.get();
  p.out = buf.get();
  p.q_stride = 128;
  p.num_tokens = 1;
  p.num_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = 128;
  p.block_size = 16;
  p.num_seqs = 1;
  p.token_pos = p.query_start = p.block_table_start = p.block_ids = buf.as<int32_t>();
  p.max_query_len = 1;
  p.max_seq_len = 1;
  p.scale = 0.1f;

  CudaPagedAttentionParams f32 = p;
  f32.dtype = ElemType::kF32;
  EXPECT_EQ(PagedAttentionPrefill(f32, nullptr), cudaErrorInvalidValue);
  CudaPagedAttentionParams dim = p;
  dim.head_dim = 72;
  EXPECT_EQ(PagedAttentionPrefill(dim, nullptr), cudaErrorInvalidValue);
  CudaPagedAttentionParams block = p;
  block.block_size = 65;
  EXPECT_EQ(PagedAttentionPrefill(block, nullptr), cudaErrorInvalidValue);
  CudaPagedAttentionParams gqa = p;
  gqa.num_heads = 3;
  gqa.num_kv_heads = 2;
  EXPECT_EQ(PagedAttentionPrefill(gqa, nullptr), cudaErrorInvalidValue);
  CudaPagedAttentionParams null_q = p;
  null_q.q = nullptr;
  EXPECT_EQ(PagedAttentionPrefill(null_q, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace kvserve::gpu_test
