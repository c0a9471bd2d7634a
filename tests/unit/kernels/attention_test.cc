#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Config {
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_dim = 64;
  int block_size = 16;
  int sliding_window = 0;
  float softcap = 0.0f;  // 0: none (Gemma 2 attn_logit_softcapping)
  double scale = 0.0;    // 0: 1 / sqrt(head_dim) (Gemma: query_pre_attn_scalar^-0.5)
  std::vector<int> lens;
};

std::string Describe(const Config& c) {
  std::string s = "heads=" + std::to_string(c.num_heads) + "/" + std::to_string(c.num_kv_heads) +
                  " dim=" + std::to_string(c.head_dim) + " bs=" + std::to_string(c.block_size) +
                  " window=" + std::to_string(c.sliding_window) +
                  " softcap=" + std::to_string(c.softcap) + " lens=";
  for (int l : c.lens) s += std::to_string(l) + ",";
  return s;
}

using Token = std::pair<int, int>;  // (sequence, absolute position)

// A paged KV cache holding the sequences of `cfg` in random, non-contiguous
// blocks, with every slot NaN until a step writes it. Random q/k/v per token.
class World {
 public:
  World(const Config& cfg, uint32_t seed) : cfg_(cfg), rng_(seed) {
    const int num_seqs = static_cast<int>(cfg.lens.size());
    int needed = 0;
    for (int len : cfg.lens) needed += (len + cfg.block_size - 1) / cfg.block_size;
    num_blocks_ = needed + 7;  // spare blocks stay NaN
    std::vector<int32_t> pool(num_blocks_);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng_);
    table_start_.push_back(0);
    size_t next = 0;
    for (int s = 0; s < num_seqs; ++s) {
      int blocks = (cfg.lens[s] + cfg.block_size - 1) / cfg.block_size;
      for (int b = 0; b < blocks; ++b) block_ids_.push_back(pool[next++]);
      table_start_.push_back(static_cast<int32_t>(block_ids_.size()));
    }
    std::uniform_real_distribution<float> kv(-1.0f, 1.0f), qd(-2.5f, 2.5f);
    for (int s = 0; s < num_seqs; ++s) {
      const int len = cfg.lens[s];
      k_.emplace_back(static_cast<size_t>(len) * kv_row());
      v_.emplace_back(static_cast<size_t>(len) * kv_row());
      q_.emplace_back(static_cast<size_t>(len) * q_row());
      for (float& f : k_[s]) f = kv(rng_);
      for (float& f : v_[s]) f = kv(rng_);
      for (float& f : q_[s]) f = qd(rng_);
    }
    Reset();
  }

  int64_t kv_row() const { return int64_t{cfg_.num_kv_heads} * cfg_.head_dim; }
  int64_t q_row() const { return int64_t{cfg_.num_heads} * cfg_.head_dim; }
  int num_seqs() const { return static_cast<int>(cfg_.lens.size()); }

  void Reset() {
    const size_t floats = static_cast<size_t>(num_blocks_) * kv_row() * cfg_.block_size;
    k_cache_.assign(floats, kNaN);
    v_cache_.assign(floats, kNaN);
  }

  // Writes the tokens' K/V (WriteKvCache), then attends them (PagedAttention).
  // Returns [tokens, heads, dim].
  std::vector<float> Step(const std::vector<Token>& tokens, ThreadPool* pool) {
    const int n = static_cast<int>(tokens.size());
    const int64_t src_stride = kv_row() + 3;  // rows inside a wider buffer
    const int64_t q_stride = q_row() + 5;
    std::vector<float> k(n * src_stride, kNaN), v(n * src_stride, kNaN), q(n * q_stride, kNaN);
    std::vector<int64_t> slots;
    std::vector<int32_t> seq, pos;
    for (int i = 0; i < n; ++i) {
      auto [s, p] = tokens[i];
      std::copy_n(&k_[s][p * kv_row()], kv_row(), &k[i * src_stride]);
      std::copy_n(&v_[s][p * kv_row()], kv_row(), &v[i * src_stride]);
      std::copy_n(&q_[s][p * q_row()], q_row(), &q[i * q_stride]);
      const int32_t block = block_ids_[table_start_[s] + p / cfg_.block_size];
      slots.push_back(static_cast<int64_t>(block) * cfg_.block_size + p % cfg_.block_size);
      seq.push_back(s);
      pos.push_back(p);
    }
    WriteKvParams w;
    w.k = k.data();
    w.v = v.data();
    w.src_stride = src_stride;
    w.k_cache = k_cache_.data();
    w.v_cache = v_cache_.data();
    w.slot_mapping = slots.data();
    w.num_tokens = n;
    w.num_kv_heads = cfg_.num_kv_heads;
    w.head_dim = cfg_.head_dim;
    w.block_size = cfg_.block_size;
    WriteKvCache(w);

    std::vector<float> out(static_cast<size_t>(n) * q_row(), kNaN);
    PagedAttentionParams p;
    p.q = q.data();
    p.q_stride = q_stride;
    p.out = out.data();
    p.k_cache = k_cache_.data();
    p.v_cache = v_cache_.data();
    p.num_tokens = n;
    p.num_heads = cfg_.num_heads;
    p.num_kv_heads = cfg_.num_kv_heads;
    p.head_dim = cfg_.head_dim;
    p.block_size = cfg_.block_size;
    p.token_seq = seq.data();
    p.token_pos = pos.data();
    p.block_table_start = table_start_.data();
    p.block_ids = block_ids_.data();
    p.scale = cfg_.scale > 0.0 ? static_cast<float>(cfg_.scale)
                               : 1.0f / std::sqrt(static_cast<float>(cfg_.head_dim));
    p.sliding_window = cfg_.sliding_window;
    p.softcap = cfg_.softcap;
    PagedAttention(p, pool);
    return out;
  }

  // Naive double-precision attention of one (token, head).
  std::vector<double> Reference(int s, int pos, int head) const {
    const int64_t dim = cfg_.head_dim;
    const int64_t kvh = head / (cfg_.num_heads / cfg_.num_kv_heads);
    const int lo = cfg_.sliding_window > 0 ? std::max(0, pos - cfg_.sliding_window + 1) : 0;
    const double scale = cfg_.scale > 0.0 ? cfg_.scale : 1.0 / std::sqrt(static_cast<double>(dim));
    std::vector<double> scores;
    double mx = -1e300;
    for (int j = lo; j <= pos; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < dim; ++d) {
        dot += static_cast<double>(q_[s][pos * q_row() + head * dim + d]) *
               k_[s][j * kv_row() + kvh * dim + d];
      }
      double score = dot * scale;
      if (cfg_.softcap > 0.0f) score = cfg_.softcap * std::tanh(score / cfg_.softcap);
      scores.push_back(score);
      mx = std::max(mx, score);
    }
    double sum = 0;
    for (double& x : scores) sum += (x = std::exp(x - mx));
    std::vector<double> out(dim, 0.0);
    for (int j = lo; j <= pos; ++j) {
      for (int64_t d = 0; d < dim; ++d) {
        out[d] += scores[j - lo] / sum * v_[s][j * kv_row() + kvh * dim + d];
      }
    }
    return out;
  }

  // All tokens of all sequences, position-major.
  std::vector<Token> AllTokens() const {
    std::vector<Token> all;
    for (int s = 0; s < num_seqs(); ++s) {
      for (int p = 0; p < cfg_.lens[s]; ++p) all.emplace_back(s, p);
    }
    return all;
  }

  std::mt19937& rng() { return rng_; }

 private:
  Config cfg_;
  std::mt19937 rng_;
  int num_blocks_ = 0;
  std::vector<int32_t> table_start_, block_ids_;
  std::vector<std::vector<float>> k_, v_, q_;
  std::vector<float> k_cache_, v_cache_;
};

// Output row of `token` (a Token) per sequence and position: [seq][pos][heads*dim].
using Outputs = std::vector<std::vector<std::vector<float>>>;

void Collect(const World& w, const Config& cfg, const std::vector<Token>& tokens,
             const std::vector<float>& out, Outputs* outputs) {
  const int row = cfg.num_heads * cfg.head_dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto [s, p] = tokens[i];
    (*outputs)[s][p].assign(out.begin() + i * row, out.begin() + (i + 1) * row);
  }
}

Outputs EmptyOutputs(const Config& cfg) {
  Outputs o(cfg.lens.size());
  for (size_t s = 0; s < cfg.lens.size(); ++s) o[s].resize(cfg.lens[s]);
  return o;
}

// Whole prompts in one step: checked against the double reference.
Outputs Prefill(World& w, const Config& cfg, ThreadPool* pool) {
  w.Reset();
  std::vector<Token> all = w.AllTokens();
  std::shuffle(all.begin(), all.end(), w.rng());  // token order in the batch is arbitrary
  Outputs outputs = EmptyOutputs(cfg);
  Collect(w, cfg, all, w.Step(all, pool), &outputs);
  return outputs;
}

// One token per sequence per step, all sequences batched together.
Outputs Decode(World& w, const Config& cfg, ThreadPool* pool) {
  w.Reset();
  Outputs outputs = EmptyOutputs(cfg);
  const int max_len = *std::max_element(cfg.lens.begin(), cfg.lens.end());
  for (int p = 0; p < max_len; ++p) {
    std::vector<Token> step;
    for (int s = 0; s < w.num_seqs(); ++s) {
      if (p < cfg.lens[s]) step.emplace_back(s, p);
    }
    Collect(w, cfg, step, w.Step(step, pool), &outputs);
  }
  return outputs;
}

// Random chunk sizes per sequence per step; some sequences sit out a step.
Outputs Chunked(World& w, const Config& cfg, ThreadPool* pool) {
  w.Reset();
  Outputs outputs = EmptyOutputs(cfg);
  std::vector<int> done(cfg.lens.size(), 0);
  std::uniform_int_distribution<int> chunk(0, 23);
  while (true) {
    std::vector<Token> step;
    for (int s = 0; s < w.num_seqs(); ++s) {
      int take = std::min(chunk(w.rng()), cfg.lens[s] - done[s]);
      for (int i = 0; i < take; ++i) step.emplace_back(s, done[s]++);
    }
    if (step.empty()) {
      bool finished = true;
      for (int s = 0; s < w.num_seqs(); ++s) finished &= done[s] == cfg.lens[s];
      if (finished) break;
      continue;
    }
    Collect(w, cfg, step, w.Step(step, pool), &outputs);
  }
  return outputs;
}

std::vector<CpuIsa> AvailableIsas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (DetectedIsa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (DetectedIsa() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

// The full check of one configuration on every ISA path: prefill matches the
// reference; decode, chunked prefill and another thread count are bit-identical.
void CheckConfig(const Config& cfg, uint32_t seed) {
  SCOPED_TRACE(Describe(cfg));
  ThreadPool one(1), two(2);
  // The reference is computed once: a World's q/k/v follow from cfg and the
  // seed alone, so every ISA's World below holds the same ones. (Per ISA it
  // was most of this check's time: fp64, O(len^2) per head.)
  const World reference_world(cfg, seed);
  // refs[s][p * num_heads + h]: head h of sequence s at position p.
  std::vector<std::vector<std::vector<double>>> refs(reference_world.num_seqs());
  for (int s = 0; s < reference_world.num_seqs(); ++s) {
    for (int p = 0; p < cfg.lens[s]; ++p) {
      for (int h = 0; h < cfg.num_heads; ++h) refs[s].push_back(reference_world.Reference(s, p, h));
    }
  }
  for (CpuIsa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsaOverride force(isa);
    World w(cfg, seed);
    Outputs prefill = Prefill(w, cfg, &two);
    for (int s = 0; s < w.num_seqs(); ++s) {
      for (int p = 0; p < cfg.lens[s]; ++p) {
        for (int h = 0; h < cfg.num_heads; ++h) {
          const std::vector<double>& ref = refs[s][p * cfg.num_heads + h];
          for (int d = 0; d < cfg.head_dim; ++d) {
            ASSERT_NEAR(prefill[s][p][h * cfg.head_dim + d], ref[d], 2e-5)
                << "seq " << s << " pos " << p << " head " << h << " d " << d;
          }
        }
      }
    }
    EXPECT_EQ(Decode(w, cfg, &two), prefill) << "decode != prefill";
    EXPECT_EQ(Chunked(w, cfg, &two), prefill) << "chunked != prefill";
    EXPECT_EQ(Prefill(w, cfg, &one), prefill) << "1 thread != 2 threads";
    EXPECT_EQ(Chunked(w, cfg, nullptr), prefill) << "no pool != 2 threads";
  }
}

TEST(PagedAttentionTest, GqaBlockSizes) {
  for (int bs : {1, 8, 16}) {
    Config cfg;
    cfg.block_size = bs;
    cfg.lens = {54, 97};
    CheckConfig(cfg, 100 + bs);
  }
}

TEST(PagedAttentionTest, BatchOf17) {
  Config cfg;
  cfg.block_size = 8;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> len(1, 97);
  cfg.lens = {54, 97, 1, 2, 31, 32, 33};
  while (cfg.lens.size() < 17) cfg.lens.push_back(len(rng));
  CheckConfig(cfg, 7);
}

TEST(PagedAttentionTest, MqaOddHeadDim) {
  Config cfg;
  cfg.num_kv_heads = 1;
  cfg.head_dim = 20;  // vector body plus scalar tails
  cfg.block_size = 8;
  cfg.lens = {54, 97};
  CheckConfig(cfg, 11);
}

TEST(PagedAttentionTest, MhaWideHeads) {
  Config cfg;
  cfg.num_heads = 3;
  cfg.num_kv_heads = 3;
  cfg.head_dim = 104;
  cfg.block_size = 16;
  cfg.lens = {54, 97};
  CheckConfig(cfg, 13);
}

// The AVX-512 path's shapes: head_dim in 16-lane vectors (3, 5, 16: its
// 4-vector blocks and their remainders) and query groups of 7 and 5 (its
// 4-head blocks and their remainders; a prefill pass of two tokens' 14
// heads gives others).
TEST(PagedAttentionTest, Avx512VectorAndGroupShapes) {
  struct Shape {
    int heads, kv_heads, dim;
  };
  for (const Shape& s : {Shape{14, 2, 48}, Shape{6, 2, 80}, Shape{5, 1, 256}}) {
    Config cfg;
    cfg.num_heads = s.heads;
    cfg.num_kv_heads = s.kv_heads;
    cfg.head_dim = s.dim;
    cfg.block_size = 16;
    cfg.lens = {54, 97, 17};
    CheckConfig(cfg, 29 + s.dim);
  }
}

TEST(PagedAttentionTest, SlidingWindow) {
  for (int window : {1, 20, 33, 500}) {
    Config cfg;
    cfg.block_size = window == 20 ? 1 : 8;
    cfg.sliding_window = window;
    cfg.lens = {54, 97};
    CheckConfig(cfg, 17 + window);
  }
}

// Past kAttentionPartitionKeys, with and without a window that starts inside
// the first partition: once the short sequence is done, each decode step
// has 2 passes for 2 threads and is split at the partitions
// (PagedAttention); prefill, chunks, 1 thread and no pool are not. All the
// same bits, and the reference.
TEST(PagedAttentionTest, LongContextsAcrossPartitions) {
  static_assert(kAttentionPartitionKeys == 1024, "the lengths below cross one partition end");
  for (int window : {0, 1050}) {
    Config cfg;
    cfg.sliding_window = window;
    cfg.lens = {1090, 30};
    CheckConfig(cfg, 31 + window);
  }
  // MQA with more query heads than one pass holds (kMaxHeadsPerPass).
  Config mqa;
  mqa.num_heads = 20;
  mqa.num_kv_heads = 1;
  mqa.head_dim = 16;
  mqa.lens = {1090, 30};
  CheckConfig(mqa, 37);
}

// Gemma 2: soft-capped scores with a non-default scale, with and without a
// window. A small cap (2) changes the softmax far beyond the tolerance.
TEST(PagedAttentionTest, SoftcapAndScale) {
  for (int window : {0, 24}) {
    Config cfg;
    cfg.block_size = 8;
    cfg.head_dim = window == 0 ? 32 : 24;  // 32: the AVX-512 path too
    cfg.sliding_window = window;
    cfg.softcap = 2.0f;
    cfg.scale = 0.35;  // large scores, so the cap bites
    cfg.lens = {54, 97, 5};
    CheckConfig(cfg, 23 + window);
  }
}

// The running max must move when a later tile's scores exceed it by far:
// keys 0..39 and 43..63 score 0, keys 40..42 score 200 (exactly, in fp32).
// The softmax puts all the weight on those three (exp(-200) is 0 in fp32),
// and a step that kept the first tile's max would weigh them exp(200),
// beyond fp32's range, and overflow (the AVX-512 step skips the max
// reduction when no score exceeds the running max: this is the case it
// must not skip).
TEST(PagedAttentionTest, ScoresFarAboveTheFirstTilesMax) {
  constexpr int kDim = 64, kBlock = 16, kLen = 64;
  std::vector<float> k_cache(kLen * kDim, 0.0f), v_cache(kLen * kDim);
  for (int j = 0; j < kLen; ++j) {
    for (int d = 0; d < kDim; ++d) {
      v_cache[j * kDim + d] = j >= 40 && j <= 42 ? 2.0f + 0.5f * ((j + d) % 3) : 0.25f * (d % 5);
      if (j >= 40 && j <= 42) k_cache[j * kDim + d] = 25.0f;  // q . k * 1/8 = 200
    }
  }
  std::vector<float> q(kDim, 1.0f);
  const std::vector<int32_t> block_ids = {0, 1, 2, 3}, table_start = {0, 4};
  const int32_t seq = 0, pos = kLen - 1;
  for (CpuIsa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsaOverride force(isa);
    std::vector<float> out(kDim, kNaN);
    PagedAttentionParams p;
    p.q = q.data();
    p.q_stride = kDim;
    p.out = out.data();
    p.k_cache = k_cache.data();
    p.v_cache = v_cache.data();
    p.num_tokens = 1;
    p.num_heads = 1;
    p.num_kv_heads = 1;
    p.head_dim = kDim;
    p.block_size = kBlock;
    p.token_seq = &seq;
    p.token_pos = &pos;
    p.block_table_start = table_start.data();
    p.block_ids = block_ids.data();
    p.scale = 0.125f;
    PagedAttention(p, nullptr);
    for (int d = 0; d < kDim; ++d) {
      const float expected =
          (v_cache[40 * kDim + d] + v_cache[41 * kDim + d] + v_cache[42 * kDim + d]) / 3.0f;
      ASSERT_NEAR(out[d], expected, 1e-5f) << "d " << d;
    }
  }
}

TEST(WriteKvCacheTest, LayoutAndSkippedSlots) {
  const int64_t kvh = 2, dim = 3, bs = 4, blocks = 3;
  std::vector<float> kc(blocks * kvh * bs * dim, kNaN), vc(kc.size(), kNaN);
  // Token 0 -> block 2 offset 1; token 1 skipped (-1); token 2 -> block 0 offset 3.
  std::vector<int64_t> slots = {2 * bs + 1, -1, 3};
  const int64_t stride = kvh * dim + 1;
  std::vector<float> k(3 * stride), v(3 * stride);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  WriteKvParams p;
  p.k = k.data();
  p.v = v.data();
  p.src_stride = stride;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  p.slot_mapping = slots.data();
  p.num_tokens = 3;
  p.num_kv_heads = static_cast<int>(kvh);
  p.head_dim = static_cast<int>(dim);
  p.block_size = static_cast<int>(bs);
  WriteKvCache(p);
  int written = 0;
  for (size_t i = 0; i < kc.size(); ++i) written += !std::isnan(kc[i]);
  EXPECT_EQ(written, 2 * kvh * dim);
  for (int64_t h = 0; h < kvh; ++h) {
    for (int64_t d = 0; d < dim; ++d) {
      EXPECT_EQ(kc[((2 * kvh + h) * bs + 1) * dim + d], k[h * dim + d]);
      EXPECT_EQ(vc[((2 * kvh + h) * bs + 1) * dim + d], v[h * dim + d]);
      EXPECT_EQ(kc[((0 * kvh + h) * bs + 3) * dim + d], k[2 * stride + h * dim + d]);
    }
  }
}

// QuantizeQueryInt8's vector path (AVX2 and up) gives the scalar path's
// digits and scale bit for bit: dims with and without a tail of fewer than
// 8, values that land exactly halfway between two digits (ties to even),
// and a q holding an infinity or a NaN (scale NaN) at any position.
TEST(QuantizeQueryInt8Test, VectorDigitsAreTheScalarOnes) {
  if (DetectedIsa() < CpuIsa::kAvx2) GTEST_SKIP() << "no vector path on this CPU";
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  auto quantize = [](CpuIsa isa, const std::vector<float>& q, bool two) {
    ScopedIsaOverride force(isa);
    std::vector<int8_t> q8(q.size(), 99), low(q.size(), 99);
    const float scale = QuantizeQueryInt8(q.data(), static_cast<int>(q.size()), q8.data(),
                                          two ? low.data() : nullptr);
    return std::make_tuple(scale, q8, low);
  };
  for (int dim : {8, 13, 64, 80, 127, 256}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> q(dim);
      for (float& x : q) x = u(rng);
      if (trial % 4 == 1) {
        // max|q| = 127 makes inv 1: halves of odd and even integers are ties.
        q[0] = 127.0f;
        for (int d = 1; d < dim; ++d) q[d] = std::floor(u(rng) * 40.0f) + 0.5f;
      }
      if (trial % 4 == 2) {
        // Low digits at their ties: x - high = k / 256 + 1/512.
        q[0] = -127.0f;
        for (int d = 1; d < dim; ++d) q[d] = 3.0f + (std::floor(u(rng) * 40.0f) + 0.5f) / 256.0f;
      }
      if (trial % 4 == 3) {
        q[rng() % dim] = trial % 8 == 3 ? std::numeric_limits<float>::infinity() : std::nanf("");
      }
      for (bool two : {false, true}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " trial " + std::to_string(trial) +
                     (two ? " two digits" : " one digit"));
        const auto [scale, q8, low] = quantize(CpuIsa::kScalar, q, two);
        for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
          if (DetectedIsa() < isa) continue;
          const auto [vscale, vq8, vlow] = quantize(isa, q, two);
          if (std::isnan(scale)) {
            EXPECT_TRUE(std::isnan(vscale)) << IsaName(isa);
            EXPECT_EQ(trial % 4, 3);
            continue;  // the digits are unspecified
          }
          EXPECT_EQ(scale, vscale) << IsaName(isa);
          EXPECT_EQ(q8, vq8) << IsaName(isa);
          EXPECT_EQ(low, vlow) << IsaName(isa);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::kernels
