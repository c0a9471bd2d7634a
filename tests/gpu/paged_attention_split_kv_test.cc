// Split-KV paged attention, WriteKvCache and the PagedAttention dispatcher on
// the GPU, against the CPU oracle (kernels/cpu/attention.h).
//
// Every case builds a paged cache with shuffled, non-contiguous block tables
// in which every byte no query may read is 0xFF (NaN in fp32, fp16 and bf16):
// blocks no sequence owns, slots past a sequence's last key, and keys before
// the sliding window of a sequence's first query token. Outputs and the
// workspace are poisoned the same way before every run.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cuda/paged_attention.h"
#include "tests/gpu/gpu_test_util.h"

namespace kvserve::gpu_test {
namespace {

namespace kc = kernels::cuda;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Writes `value` (already representable in `t`) as element `index` of a
// device image of dtype `t`.
void StoreElem(ElemType t, std::vector<uint8_t>& bytes, size_t index, float value) {
  if (t == ElemType::kF32) {
    std::memcpy(&bytes[index * 4], &value, 4);
    return;
  }
  const uint16_t b = t == ElemType::kBF16 ? FloatToBf16Bits(value) : FloatToHalfBits(value);
  std::memcpy(&bytes[index * 2], &b, 2);
}

struct Case {
  ElemType dtype = ElemType::kBF16;
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 128;
  int block_size = 16;
  int sliding_window = 0;
  float softcap = 0.0f;     // attention logit soft-capping (Gemma 2); 0: none
  std::vector<int> lens;    // keys of each sequence in the cache for this step
  std::vector<int> chunks;  // query tokens of each sequence (its last positions); empty: 1 each
};

std::string Describe(const Case& c) {
  std::string s = std::string(kc::ElemName(c.dtype)) + " heads=" + std::to_string(c.num_heads) +
                  "/" + std::to_string(c.num_kv_heads) + " dim=" + std::to_string(c.head_dim) +
                  " bs=" + std::to_string(c.block_size) +
                  " window=" + std::to_string(c.sliding_window);
  return s;
}

// 17 context lengths: 1, the odd sizes 54 and 97, split edges around 512 and
// 1024, and a long 4000.
std::vector<int> SeventeenLens() {
  return {1, 54, 97, 4000, 512, 513, 1023, 1025, 7, 300, 2000, 129, 64, 65, 16, 33, 1537};
}

// One step's inputs: the cache, the page table, the query tokens, host copies
// for the oracle and device copies for the kernels.
class World {
 public:
  World(const Case& c, uint32_t seed) : c_(c) {
    std::mt19937 rng(seed);
    num_seqs_ = static_cast<int>(c.lens.size());
    if (c_.chunks.empty()) c_.chunks.assign(num_seqs_, 1);
    const int bs = c.block_size;
    int needed = 0;
    for (int len : c.lens) needed += (len + bs - 1) / bs;
    num_blocks_ = needed + 5;  // spare blocks stay poisoned
    std::vector<int32_t> pool(num_blocks_);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    table_start_.push_back(0);
    query_start_.push_back(0);
    size_t next = 0;
    for (int s = 0; s < num_seqs_; ++s) {
      const int len = c.lens[s];
      for (int b = 0; b < (len + bs - 1) / bs; ++b) block_ids_.push_back(pool[next++]);
      table_start_.push_back(static_cast<int32_t>(block_ids_.size()));
      for (int pos = len - c_.chunks[s]; pos < len; ++pos) {
        token_seq_.push_back(s);
        token_pos_.push_back(pos);
      }
      query_start_.push_back(static_cast<int32_t>(token_seq_.size()));
      max_seq_len_ = std::max(max_seq_len_, len);
      max_query_len_ = std::max(max_query_len_, c_.chunks[s]);
    }
    num_tokens_ = static_cast<int>(token_seq_.size());

    // q rows inside a fused QKV-like row: the padding after the heads is NaN.
    q_stride_ = int64_t{c.num_heads + 2 * c.num_kv_heads} * c.head_dim;
    q_.assign(static_cast<size_t>(num_tokens_) * q_stride_, kNaN);
    std::uniform_real_distribution<float> qd(-2.0f, 2.0f), kvd(-1.0f, 1.0f);
    for (int t = 0; t < num_tokens_; ++t) {
      for (int i = 0; i < c.num_heads * c.head_dim; ++i) {
        q_[t * q_stride_ + i] = RoundTo(c.dtype, qd(rng));
      }
    }

    const size_t elems = static_cast<size_t>(num_blocks_) * c.num_kv_heads * bs * c.head_dim;
    const size_t esize = kc::ElemSize(c.dtype);
    k_host_.assign(elems, kNaN);
    v_host_.assign(elems, kNaN);
    k_bytes_.assign(elems * esize, 0xFF);
    v_bytes_.assign(elems * esize, 0xFF);
    for (int s = 0; s < num_seqs_; ++s) {
      const int first_pos = c.lens[s] - c_.chunks[s];
      const int first_key =
          c.sliding_window > 0 ? std::max(0, first_pos - c.sliding_window + 1) : 0;
      for (int j = first_key; j < c.lens[s]; ++j) {
        for (int h = 0; h < c.num_kv_heads; ++h) {
          const size_t row = RowOf(s, j, h);
          for (int d = 0; d < c.head_dim; ++d) {
            const float kx = RoundTo(c.dtype, kvd(rng)), vx = RoundTo(c.dtype, kvd(rng));
            k_host_[row + d] = kx;
            v_host_[row + d] = vx;
            StoreElem(c.dtype, k_bytes_, row + d, kx);
            StoreElem(c.dtype, v_bytes_, row + d, vx);
          }
        }
      }
    }

    d_q_ = UploadAs(c.dtype, q_);
    d_k_ = Upload(k_bytes_);
    d_v_ = Upload(v_bytes_);
    d_block_ids_ = Upload(block_ids_);
    d_table_start_ = Upload(table_start_);
    d_token_seq_ = Upload(token_seq_);
    d_token_pos_ = Upload(token_pos_);
    d_query_start_ = Upload(query_start_);
    d_out_ = DeviceBuffer(out_elems() * esize);
    d_ws_ = DeviceBuffer(
        kc::PagedAttentionWorkspaceBytes(num_tokens_, c.num_heads, c.head_dim, max_seq_len_));
  }

  // Element offset of key j (of sequence s, kv head h) in the cache.
  size_t RowOf(int s, int j, int h) const {
    const int bs = c_.block_size;
    const int64_t block = block_ids_[table_start_[s] + j / bs];
    return static_cast<size_t>(((block * c_.num_kv_heads + h) * bs + j % bs) * c_.head_dim);
  }

  size_t out_elems() const { return static_cast<size_t>(num_tokens_) * c_.num_heads * c_.head_dim; }
  size_t row_elems() const { return static_cast<size_t>(c_.num_heads) * c_.head_dim; }

  kc::CudaPagedAttentionParams Params() const {
    kc::CudaPagedAttentionParams p;
    p.dtype = c_.dtype;
    p.q = d_q_.get();
    p.q_stride = q_stride_;
    p.out = d_out_.get();
    p.k_cache = d_k_.get();
    p.v_cache = d_v_.get();
    p.num_tokens = num_tokens_;
    p.num_heads = c_.num_heads;
    p.num_kv_heads = c_.num_kv_heads;
    p.head_dim = c_.head_dim;
    p.block_size = c_.block_size;
    p.num_seqs = num_seqs_;
    p.token_seq = d_token_seq_.as<int32_t>();
    p.token_pos = d_token_pos_.as<int32_t>();
    p.query_start = d_query_start_.as<int32_t>();
    p.block_table_start = d_table_start_.as<int32_t>();
    p.block_ids = d_block_ids_.as<int32_t>();
    p.max_query_len = max_query_len_;
    p.max_seq_len = max_seq_len_;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    p.sliding_window = c_.sliding_window;
    p.softcap = c_.softcap;
    p.workspace = d_ws_.get();
    p.workspace_bytes = d_ws_.bytes();
    return p;
  }

  // The CPU oracle on the same (rounded) values.
  std::vector<float> Reference() const {
    std::vector<float> out(out_elems());
    kernels::PagedAttentionParams p;
    p.q = q_.data();
    p.q_stride = q_stride_;
    p.out = out.data();
    p.k_cache = k_host_.data();
    p.v_cache = v_host_.data();
    p.num_tokens = num_tokens_;
    p.num_heads = c_.num_heads;
    p.num_kv_heads = c_.num_kv_heads;
    p.head_dim = c_.head_dim;
    p.block_size = c_.block_size;
    p.token_seq = token_seq_.data();
    p.token_pos = token_pos_.data();
    p.block_table_start = table_start_.data();
    p.block_ids = block_ids_.data();
    p.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    p.sliding_window = c_.sliding_window;
    p.softcap = c_.softcap;
    kernels::PagedAttention(p, &kernels::ThreadPool::Default());
    return out;
  }

  const Case& c() const { return c_; }
  int num_seqs() const { return num_seqs_; }
  int num_tokens() const { return num_tokens_; }
  int num_blocks() const { return num_blocks_; }
  const std::vector<int32_t>& token_seq() const { return token_seq_; }
  const std::vector<int32_t>& token_pos() const { return token_pos_; }
  const std::vector<int32_t>& query_start() const { return query_start_; }
  const std::vector<int32_t>& block_ids() const { return block_ids_; }
  const std::vector<int32_t>& table_start() const { return table_start_; }
  const std::vector<float>& k_host() const { return k_host_; }
  const std::vector<float>& v_host() const { return v_host_; }
  const std::vector<uint8_t>& k_bytes() const { return k_bytes_; }
  const std::vector<uint8_t>& v_bytes() const { return v_bytes_; }
  const DeviceBuffer& d_out() const { return d_out_; }
  const DeviceBuffer& d_ws() const { return d_ws_; }
  const DeviceBuffer& d_q() const { return d_q_; }
  const DeviceBuffer& d_k() const { return d_k_; }
  const DeviceBuffer& d_v() const { return d_v_; }
  int64_t q_stride() const { return q_stride_; }

 private:
  Case c_;
  int num_seqs_ = 0, num_tokens_ = 0, num_blocks_ = 0, max_seq_len_ = 0, max_query_len_ = 0;
  int64_t q_stride_ = 0;
  std::vector<int32_t> block_ids_, table_start_, token_seq_, token_pos_, query_start_;
  std::vector<float> q_, k_host_, v_host_;
  std::vector<uint8_t> k_bytes_, v_bytes_;
  DeviceBuffer d_q_, d_k_, d_v_, d_block_ids_, d_table_start_, d_token_seq_, d_token_pos_,
      d_query_start_, d_out_, d_ws_;
};

enum class Entry { kSplitKv, kDispatcher };

// Poisons out and workspace, runs, synchronises; returns the raw output bytes.
std::vector<uint8_t> RunRaw(const World& w, const kc::CudaPagedAttentionParams& p,
                            Entry entry = Entry::kSplitKv) {
  PoisonNaN(w.d_out());
  PoisonNaN(w.d_ws());
  const cudaError_t err = entry == Entry::kSplitKv ? kc::PagedAttentionSplitKv(p, nullptr)
                                                   : kc::PagedAttention(p, nullptr);
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  const cudaError_t sync = cudaDeviceSynchronize();
  EXPECT_EQ(sync, cudaSuccess) << cudaGetErrorString(sync);
  return Download<uint8_t>(w.d_out(), w.out_elems() * kc::ElemSize(w.c().dtype));
}

std::vector<float> ToFloats(ElemType t, const std::vector<uint8_t>& bytes) {
  const size_t n = bytes.size() / kc::ElemSize(t);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == ElemType::kF32) {
      std::memcpy(&out[i], &bytes[i * 4], 4);
    } else {
      uint16_t b;
      std::memcpy(&b, &bytes[i * 2], 2);
      out[i] = t == ElemType::kBF16 ? Bf16BitsToFloat(b) : HalfBitsToFloat(b);
    }
  }
  return out;
}

// Per-token relative error against the oracle (a wrong token cannot hide in
// the norm of a large batch).
void ExpectMatchesOracle(const World& w, const std::vector<float>& got,
                         const std::vector<float>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  const size_t row = w.row_elems();
  int failures = 0;
  for (int t = 0; t < w.num_tokens() && failures < 5; ++t) {
    const std::vector<float> g(got.begin() + t * row, got.begin() + (t + 1) * row);
    const std::vector<float> r(ref.begin() + t * row, ref.begin() + (t + 1) * row);
    const double err = RelativeError(g, r);
    if (!(err < Tolerance(w.c().dtype))) {
      ++failures;
      ADD_FAILURE() << Describe(w.c()) << ": token " << t << " (seq " << w.token_seq()[t]
                    << ", pos " << w.token_pos()[t] << ") relative error " << err;
    }
  }
}

void CheckAgainstOracle(const World& w) {
  const std::vector<uint8_t> raw = RunRaw(w, w.Params());
  ExpectMatchesOracle(w, ToFloats(w.c().dtype, raw), w.Reference());
}

// ---- The sweep: dtype x block size x head dim x GQA group, decode tokens. ----

using SweepParam = std::tuple<ElemType, int, int, int>;  // dtype, block size, head dim, group

class SplitKvSweep : public ::testing::TestWithParam<SweepParam> {};

TEST_P(SplitKvSweep, MatchesCpuOracle) {
  const auto [dtype, block_size, head_dim, group] = GetParam();
  Case c;
  c.dtype = dtype;
  c.num_kv_heads = 2;
  c.num_heads = 2 * group;
  c.head_dim = head_dim;
  c.block_size = block_size;
  c.lens = SeventeenLens();
  World w(c, 1000 + block_size * 7 + head_dim + group);
  CheckAgainstOracle(w);
}

INSTANTIATE_TEST_SUITE_P(All, SplitKvSweep,
                         ::testing::Combine(::testing::Values(ElemType::kF32, ElemType::kF16,
                                                              ElemType::kBF16),
                                            ::testing::Values(1, 8, 16, 32, 64),
                                            ::testing::Values(64, 128), ::testing::Values(1, 4, 8)),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           return std::string(kc::ElemName(std::get<0>(info.param))) + "_bs" +
                                  std::to_string(std::get<1>(info.param)) + "_d" +
                                  std::to_string(std::get<2>(info.param)) + "_g" +
                                  std::to_string(std::get<3>(info.param));
                         });

const ElemType kAllTypes[] = {ElemType::kF32, ElemType::kF16, ElemType::kBF16};

TEST(SplitKv, OtherHeadDims) {
  for (ElemType t : kAllTypes) {
    for (int dim : {16, 32, 80, 96, 256}) {
      Case c;
      c.dtype = t;
      c.num_kv_heads = 2;
      c.num_heads = 8;
      c.head_dim = dim;
      c.block_size = dim == 80 ? 1 : 16;
      c.lens = SeventeenLens();
      World w(c, 77 + dim);
      CheckAgainstOracle(w);
    }
  }
}

// The small head dims (16, 32: one or two 16-byte chunks per row group lane,
// 32 or 64 row groups) with every heads-per-pass instantiation: 1, 2, 4 (group
// 3, a partial pass) and 8.
TEST(SplitKv, SmallHeadDimsAllGroups) {
  for (ElemType t : kAllTypes) {
    for (int dim : {16, 32}) {
      for (int group : {1, 2, 3, 8}) {
        Case c;
        c.dtype = t;
        c.num_kv_heads = 2;
        c.num_heads = 2 * group;
        c.head_dim = dim;
        c.block_size = 16;
        c.lens = SeventeenLens();
        World w(c, 500 + dim + group);
        CheckAgainstOracle(w);
      }
    }
  }
}

// Group sizes that are not a power of two and groups larger than one pass of
// eight heads.
TEST(SplitKv, OtherGroupSizes) {
  for (ElemType t : {ElemType::kF32, ElemType::kBF16}) {
    for (int group : {2, 3, 5, 12, 16}) {
      Case c;
      c.dtype = t;
      c.num_kv_heads = 3;
      c.num_heads = 3 * group;
      c.head_dim = 128;
      c.block_size = 8;
      c.lens = {1, 54, 97, 1100, 513, 7, 300};
      World w(c, 300 + group);
      CheckAgainstOracle(w);
    }
  }
}

// Sequences with query chunks of several tokens at consecutive positions
// (chunked prefill, a whole prompt, decode) in one batch.
Case MixedBatch(ElemType t, int block_size) {
  Case c;
  c.dtype = t;
  c.num_kv_heads = 2;
  c.num_heads = 8;
  c.head_dim = 128;
  c.block_size = block_size;
  c.lens = {1, 54, 97, 4000, 600, 513, 1030, 7, 300, 2000, 129, 64, 65, 16, 33, 1537, 40};
  c.chunks = {1, 54, 5, 1, 200, 2, 20, 7, 1, 3, 64, 1, 17, 16, 1, 30, 1};
  return c;
}

TEST(SplitKv, QueryChunks) {
  for (ElemType t : kAllTypes) {
    for (int bs : {1, 16}) {
      World w(MixedBatch(t, bs), 55 + bs);
      CheckAgainstOracle(w);
    }
  }
}

TEST(SplitKv, SlidingWindow) {
  for (ElemType t : kAllTypes) {
    for (int window : {1, 100, 700, 4096}) {
      Case c = MixedBatch(t, 16);
      c.sliding_window = window;
      World w(c, 900 + window);
      CheckAgainstOracle(w);
    }
  }
}

// Gemma 2's attention soft-capping (caps small enough to bite: scores of
// these random vectors reach ~10), with and without a window.
TEST(SplitKv, SoftCap) {
  for (ElemType t : kAllTypes) {
    for (float cap : {2.0f, 50.0f}) {
      Case c = MixedBatch(t, 16);
      c.softcap = cap;
      c.sliding_window = cap < 10.0f ? 100 : 0;
      World w(c, 1200 + static_cast<int>(cap));
      CheckAgainstOracle(w);
    }
  }
}

// ---- Batch invariance: a sequence's tokens give the same bits alone as in a
// batch of 17, and a token gives the same bits alone as inside its chunk. ----

// Device copy of one subset of a world's tokens, with the sequence's own
// one-entry block table (so grid, max_seq_len and workspace layout differ).
struct Subset {
  DeviceBuffer block_ids, table_start, token_seq, token_pos, query_start, out, ws;
  kc::CudaPagedAttentionParams params;
};

Subset MakeSubset(const World& w, int seq, int first_token, int count) {
  Subset s;
  const std::vector<int32_t> ids(w.block_ids().begin() + w.table_start()[seq],
                                 w.block_ids().begin() + w.table_start()[seq + 1]);
  std::vector<int32_t> pos(w.token_pos().begin() + first_token,
                           w.token_pos().begin() + first_token + count);
  s.block_ids = Upload(ids);
  s.table_start = Upload(std::vector<int32_t>{0, static_cast<int32_t>(ids.size())});
  s.token_seq = Upload(std::vector<int32_t>(count, 0));
  s.token_pos = Upload(pos);
  s.query_start = Upload(std::vector<int32_t>{0, count});
  const int max_seq_len = pos.back() + 1;
  const size_t row_bytes = w.row_elems() * kc::ElemSize(w.c().dtype);
  s.out = DeviceBuffer(count * row_bytes);
  s.ws = DeviceBuffer(
      kc::PagedAttentionWorkspaceBytes(count, w.c().num_heads, w.c().head_dim, max_seq_len));
  kc::CudaPagedAttentionParams p = w.Params();
  p.q = static_cast<const uint8_t*>(w.d_q().get()) +
        first_token * w.q_stride() * kc::ElemSize(w.c().dtype);
  p.out = s.out.get();
  p.num_tokens = count;
  p.num_seqs = 1;
  p.token_seq = s.token_seq.as<int32_t>();
  p.token_pos = s.token_pos.as<int32_t>();
  p.query_start = s.query_start.as<int32_t>();
  p.block_table_start = s.table_start.as<int32_t>();
  p.block_ids = s.block_ids.as<int32_t>();
  p.max_query_len = count;
  p.max_seq_len = max_seq_len;
  p.workspace = s.ws.get();
  p.workspace_bytes = s.ws.bytes();
  s.params = p;
  return s;
}

std::vector<uint8_t> RunSubset(const Subset& s) {
  PoisonNaN(s.out);
  PoisonNaN(s.ws);
  const cudaError_t err = kc::PagedAttentionSplitKv(s.params, nullptr);
  EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return Download<uint8_t>(s.out, s.out.bytes());
}

TEST(SplitKv, BatchInvariance) {
  for (ElemType t : kAllTypes) {
    Case c = MixedBatch(t, 16);
    c.sliding_window = t == ElemType::kF16 ? 700 : 0;
    World w(c, 4242);
    const std::vector<uint8_t> batch = RunRaw(w, w.Params());
    const size_t row_bytes = w.row_elems() * kc::ElemSize(t);

    // A looser max_seq_len bound (bigger grid, other workspace layout).
    kc::CudaPagedAttentionParams loose = w.Params();
    loose.max_seq_len += 777;
    DeviceBuffer ws(kc::PagedAttentionWorkspaceBytes(loose.num_tokens, loose.num_heads,
                                                     loose.head_dim, loose.max_seq_len));
    PoisonNaN(ws);
    loose.workspace = ws.get();
    loose.workspace_bytes = ws.bytes();
    EXPECT_TRUE(batch == RunRaw(w, loose)) << kc::ElemName(t) << ": max_seq_len bound changed bits";

    for (int s = 0; s < w.num_seqs(); ++s) {
      const int first = w.query_start()[s];
      const int count = w.query_start()[s + 1] - first;
      const std::vector<uint8_t> alone = RunSubset(MakeSubset(w, s, first, count));
      ASSERT_EQ(alone.size(), count * row_bytes);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + first * row_bytes, alone.size()))
          << kc::ElemName(t) << ": sequence " << s << " alone differs from the batch";
    }
    // Every token of a chunk alone (seq 4: positions 400..599, across a split edge).
    const int s = 4;
    for (int tok = w.query_start()[s]; tok < w.query_start()[s + 1]; ++tok) {
      const std::vector<uint8_t> alone = RunSubset(MakeSubset(w, s, tok, 1));
      ASSERT_EQ(alone.size(), row_bytes);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + tok * row_bytes, row_bytes))
          << kc::ElemName(t) << ": token at pos " << w.token_pos()[tok] << " alone differs";
    }
  }
}

// ---- The dispatcher. ----

TEST(PagedAttentionDispatch, SplitKvPathIsBitIdentical) {
  // Decode-only bf16, fp32 with chunks, and batch-invariant bf16 with chunks
  // all go through split-KV.
  // Also bf16/fp16 chunks with head dims 16 and 32, which the prefill kernel
  // does not have.
  struct Variant {
    ElemType t;
    bool chunks;
    bool invariant;
    int head_dim = 128;
  };
  for (const Variant& v :
       {Variant{ElemType::kBF16, false, false}, Variant{ElemType::kF32, true, false},
        Variant{ElemType::kBF16, true, true}, Variant{ElemType::kF16, true, true},
        Variant{ElemType::kBF16, true, false, 32}, Variant{ElemType::kF16, true, false, 16}}) {
    Case c = MixedBatch(v.t, 8);
    c.head_dim = v.head_dim;
    if (!v.chunks) c.chunks.clear();
    World w(c, 31);
    kc::CudaPagedAttentionParams p = w.Params();
    p.batch_invariant = v.invariant;
    const std::vector<uint8_t> direct = RunRaw(w, p, Entry::kSplitKv);
    const std::vector<uint8_t> dispatched = RunRaw(w, p, Entry::kDispatcher);
    EXPECT_TRUE(direct == dispatched)
        << kc::ElemName(v.t) << " chunks=" << v.chunks << " dim=" << v.head_dim;
    ExpectMatchesOracle(w, ToFloats(v.t, dispatched), w.Reference());
  }
}

// fp16/bf16 batches with query chunks go to the prefill kernel (every token,
// decode tokens included): the dispatcher's result must still match the oracle.
TEST(PagedAttentionDispatch, PrefillPathMatchesOracle) {
  for (ElemType t : {ElemType::kF16, ElemType::kBF16}) {
    World w(MixedBatch(t, 16), 77);
    const std::vector<uint8_t> raw = RunRaw(w, w.Params(), Entry::kDispatcher);
    ExpectMatchesOracle(w, ToFloats(t, raw), w.Reference());
  }
}

TEST(PagedAttentionDispatch, InvalidParams) {
  Case c;
  c.lens = {54, 97};
  World w(c, 5);
  using Mutation = void (*)(kc::CudaPagedAttentionParams&);
  const Mutation mutations[] = {
      [](kc::CudaPagedAttentionParams& p) { p.head_dim = 100; },
      [](kc::CudaPagedAttentionParams& p) { p.head_dim = 0; },
      [](kc::CudaPagedAttentionParams& p) { p.block_size = 0; },
      [](kc::CudaPagedAttentionParams& p) { p.block_size = 65; },
      [](kc::CudaPagedAttentionParams& p) { p.num_heads = 7; },
      [](kc::CudaPagedAttentionParams& p) { p.num_kv_heads = 0; },
      [](kc::CudaPagedAttentionParams& p) { p.workspace_bytes -= 1; },
      [](kc::CudaPagedAttentionParams& p) { p.workspace = nullptr; },
      [](kc::CudaPagedAttentionParams& p) { p.q = nullptr; },
      [](kc::CudaPagedAttentionParams& p) { p.block_ids = nullptr; },
      [](kc::CudaPagedAttentionParams& p) { p.max_seq_len = 0; },
      [](kc::CudaPagedAttentionParams& p) { p.dtype = static_cast<ElemType>(7); },
  };
  int i = 0;
  for (Mutation m : mutations) {
    kc::CudaPagedAttentionParams p = w.Params();
    m(p);
    EXPECT_EQ(kc::PagedAttentionSplitKv(p, nullptr), cudaErrorInvalidValue) << "mutation " << i;
    EXPECT_EQ(kc::PagedAttention(p, nullptr), cudaErrorInvalidValue) << "mutation " << i;
    ++i;
  }
  // A larger workspace than needed is fine, no tokens is a no-op.
  kc::CudaPagedAttentionParams p = w.Params();
  p.num_tokens = 0;
  EXPECT_EQ(kc::PagedAttentionSplitKv(p, nullptr), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// ---- WriteKvCache. ----

struct WriteCase {
  ElemType dtype;
  int head_dim;
  int block_size;
  bool odd_stride;  // forces copies narrower than 16 bytes
};

TEST(WriteKvCache, WritesSlotsAndSkipsNegative) {
  const WriteCase cases[] = {
      {ElemType::kBF16, 128, 16, false}, {ElemType::kF16, 80, 1, false},
      {ElemType::kF32, 64, 8, false},    {ElemType::kF32, 96, 16, true},
      {ElemType::kBF16, 64, 3, true},    {ElemType::kF16, 256, 64, false},
  };
  for (const WriteCase& wc : cases) {
    std::mt19937 rng(wc.head_dim + wc.block_size);
    // At least one slot per token (block size 1 and 3 included), plus spare blocks.
    const int num_kv_heads = 3, num_heads = 12, num_tokens = 37,
              num_blocks = (num_tokens + wc.block_size - 1) / wc.block_size + 2;
    const int64_t kv_row = int64_t{num_kv_heads} * wc.head_dim;
    // Fused [q | k | v] rows; the odd case adds one element per row.
    const int64_t stride = (num_heads + 2 * num_kv_heads) * wc.head_dim + (wc.odd_stride ? 1 : 0);
    std::vector<float> src = RandomVector(num_tokens * stride, rng);
    for (float& x : src) x = RoundTo(wc.dtype, x);
    std::vector<int64_t> all_slots(num_blocks * wc.block_size);
    std::iota(all_slots.begin(), all_slots.end(), 0);
    std::shuffle(all_slots.begin(), all_slots.end(), rng);
    std::vector<int64_t> slots(num_tokens);
    for (int t = 0; t < num_tokens; ++t) slots[t] = (t % 5 == 2) ? -1 : all_slots[t];

    const size_t esize = kc::ElemSize(wc.dtype);
    const size_t cache_elems = static_cast<size_t>(num_blocks) * wc.block_size * kv_row;
    std::vector<uint8_t> k_expect(cache_elems * esize, 0xFF), v_expect(cache_elems * esize, 0xFF);
    for (int t = 0; t < num_tokens; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / wc.block_size, off = slots[t] % wc.block_size;
      for (int h = 0; h < num_kv_heads; ++h) {
        const size_t dst = ((block * num_kv_heads + h) * wc.block_size + off) * wc.head_dim;
        for (int d = 0; d < wc.head_dim; ++d) {
          const size_t k_src = t * stride + num_heads * wc.head_dim + h * wc.head_dim + d;
          StoreElem(wc.dtype, k_expect, dst + d, src[k_src]);
          StoreElem(wc.dtype, v_expect, dst + d, src[k_src + kv_row]);
        }
      }
    }

    DeviceBuffer d_src = UploadAs(wc.dtype, src);
    DeviceBuffer d_slots = Upload(slots);
    DeviceBuffer k_cache(cache_elems * esize), v_cache(cache_elems * esize);
    PoisonNaN(k_cache);
    PoisonNaN(v_cache);
    kc::CudaWriteKvParams p;
    p.dtype = wc.dtype;
    p.k = static_cast<const uint8_t*>(d_src.get()) + num_heads * wc.head_dim * esize;
    p.v = static_cast<const uint8_t*>(d_src.get()) + (num_heads * wc.head_dim + kv_row) * esize;
    p.src_stride = stride;
    p.k_cache = k_cache.get();
    p.v_cache = v_cache.get();
    p.slot_mapping = d_slots.as<int64_t>();
    p.num_tokens = num_tokens;
    p.num_kv_heads = num_kv_heads;
    p.head_dim = wc.head_dim;
    p.block_size = wc.block_size;
    KVSERVE_CUDA_OK(kc::WriteKvCache(p, nullptr));
    KVSERVE_CUDA_OK(cudaDeviceSynchronize());
    const std::string what = std::string(kc::ElemName(wc.dtype)) + " dim " +
                             std::to_string(wc.head_dim) + " bs " + std::to_string(wc.block_size) +
                             (wc.odd_stride ? " odd stride" : "");
    EXPECT_TRUE(Download<uint8_t>(k_cache, k_cache.bytes()) == k_expect) << what << " (K)";
    EXPECT_TRUE(Download<uint8_t>(v_cache, v_cache.bytes()) == v_expect) << what << " (V)";

    // Invalid params.
    kc::CudaWriteKvParams bad = p;
    bad.head_dim = 0;
    EXPECT_EQ(kc::WriteKvCache(bad, nullptr), cudaErrorInvalidValue);
    bad = p;
    bad.k = nullptr;
    EXPECT_EQ(kc::WriteKvCache(bad, nullptr), cudaErrorInvalidValue);
    bad = p;
    bad.src_stride = kv_row - 1;
    EXPECT_EQ(kc::WriteKvCache(bad, nullptr), cudaErrorInvalidValue);
    bad = p;
    bad.block_size = 0;
    EXPECT_EQ(kc::WriteKvCache(bad, nullptr), cudaErrorInvalidValue);
  }
}

// The step's K/V written by WriteKvCache into a poisoned cache, then
// attention over it: the cache must equal the world's image byte for byte
// and attention must match the oracle.
TEST(WriteKvCache, RoundTripWithAttention) {
  for (ElemType t : kAllTypes) {
    for (int bs : {1, 16}) {
      Case c = MixedBatch(t, bs);
      c.lens = {54, 97, 700, 1, 513};
      c.chunks = {54, 1, 150, 1, 2};
      World w(c, 8080 + bs);
      const int kvh = c.num_kv_heads, dim = c.head_dim;
      const int64_t kv_row = int64_t{kvh} * dim;
      // Every key of every sequence is a new token of this "step", in
      // sequence order; its K and V come from the world's cache image.
      std::vector<float> k_src, v_src;
      std::vector<int64_t> slots;
      for (int s = 0; s < w.num_seqs(); ++s) {
        for (int j = 0; j < c.lens[s]; ++j) {
          const int64_t block = w.block_ids()[w.table_start()[s] + j / bs];
          slots.push_back(block * bs + j % bs);
          for (int h = 0; h < kvh; ++h) {
            const size_t row = w.RowOf(s, j, h);
            k_src.insert(k_src.end(), w.k_host().begin() + row, w.k_host().begin() + row + dim);
            v_src.insert(v_src.end(), w.v_host().begin() + row, w.v_host().begin() + row + dim);
          }
        }
      }
      DeviceBuffer d_k = UploadAs(t, k_src), d_v = UploadAs(t, v_src);
      DeviceBuffer d_slots = Upload(slots);
      PoisonNaN(w.d_k());
      PoisonNaN(w.d_v());
      kc::CudaWriteKvParams wp;
      wp.dtype = t;
      wp.k = d_k.get();
      wp.v = d_v.get();
      wp.src_stride = kv_row;
      wp.k_cache = w.d_k().get();
      wp.v_cache = w.d_v().get();
      wp.slot_mapping = d_slots.as<int64_t>();
      wp.num_tokens = static_cast<int>(slots.size());
      wp.num_kv_heads = kvh;
      wp.head_dim = dim;
      wp.block_size = bs;
      KVSERVE_CUDA_OK(kc::WriteKvCache(wp, nullptr));
      KVSERVE_CUDA_OK(cudaDeviceSynchronize());
      EXPECT_TRUE(Download<uint8_t>(w.d_k(), w.d_k().bytes()) == w.k_bytes()) << kc::ElemName(t);
      EXPECT_TRUE(Download<uint8_t>(w.d_v(), w.d_v().bytes()) == w.v_bytes()) << kc::ElemName(t);
      CheckAgainstOracle(w);
    }
  }
}

}  // namespace
}  // namespace kvserve::gpu_test
