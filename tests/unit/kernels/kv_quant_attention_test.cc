// WriteKvCache + PagedAttention over every KV row format against a naive
// fp64 reference that quantizes each row (QuantizeKvRow, checked on its own
// in kv_quant_codec_test.cc), decodes it in fp64 with its own decoder and
// attends. Random non-contiguous block tables; every row no token owns holds
// an encoded NaN (data and scale), so a kernel reading one fails the test.
// Contexts 1, 54, 97 and 4000; odd head dims; both ISA paths.
//
// Bound: the kernel and the reference see the same decoded K/V (up to the
// fp32 rounding of code * scale, 2^-24 relative), so what is left is fp32
// arithmetic: the scores' dot products (head_dim products, |q| <= 2.5 and
// |k| <= 1, error < head_dim * 2^-24 * 2.5 ~ 1e-5 at dim 64 in the worst
// case, far less on average), the exp, and the weighted sum of |v| <= 1
// values with weights summing to 1. That is the fp32 cache's bound
// (attention_test.cc), 2e-5, and it holds at 4000 keys too since the
// weights stay normalised; a wrong decode of a single key moves outputs by
// far more (a code step is >= 1/127 of the row's range).
//
// The integer-code path (attention.h) rounds q to int8 digits and each
// tile's weights x V scales to multiples of the tile's largest / 32767 (or
// / 255: CodeWeightSteps); on that path the reference rounds both the same
// way, so the same bound holds (without the reference's weight rounding the
// path misses it by up to 2.6e-5).
//
// The bf16-dot fp8 path (attention.h, UsesBf16DotFp8Attention) rounds q to
// bf16, and so does the reference. It rounds each weight times its V row's
// scale to bf16 too, a relative error of at most 2^-8 per weight; the
// reference cannot repeat that rounding (the kernel's weights are relative
// to its running max, not the final one), so the bound of output d grows by
// 2^-8 * sum_j (w_j / sum w) |v_j[d]|, what those errors can add up to.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels {
namespace {

constexpr double kBound = 2e-5;  // see the top of the file

// x rounded to bf16 (to nearest even), as vcvtne2ps2bf16 rounds finite x.
double RoundToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
}

// The test's own decoder, in fp64, from the format's definition.
double DecodeRef(KvDtype dtype, const uint8_t* row, double scale, int d) {
  auto nibble = [&] { return (row[d / 2] >> (4 * (d & 1))) & 15; };
  uint16_t h = 0;
  switch (dtype) {
    case KvDtype::kFloat32: {
      float f;
      std::memcpy(&f, row + 4 * d, 4);
      return f;
    }
    case KvDtype::kBfloat16:
      std::memcpy(&h, row + 2 * d, 2);
      return std::ldexp(1.0 + (h & 127) / 128.0, ((h >> 7) & 255) - 127) * ((h & 0x8000) ? -1 : 1) *
             (((h >> 7) & 255) == 0 ? 0.0 : 1.0);  // the tests' values have no subnormals
    case KvDtype::kFloat16: {
      std::memcpy(&h, row + 2 * d, 2);
      const int e = (h >> 10) & 31, m = h & 1023;
      const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
      return (h & 0x8000) ? -v : v;
    }
    case KvDtype::kFp8E4m3: {
      const int c = row[d], e = (c >> 3) & 15, m = c & 7;
      const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
      return ((c & 0x80) ? -v : v) * scale;
    }
    case KvDtype::kInt8:
      return static_cast<int8_t>(row[d]) * scale;
    case KvDtype::kInt4: {
      const int q = nibble();
      return (q >= 8 ? q - 16 : q) * scale;
    }
    case KvDtype::kFp4E2m1: {
      const int c = nibble(), e = (c >> 1) & 3, m = c & 1;
      const double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + m / 2.0, e - 1);
      return ((c & 8) ? -v : v) * scale;
    }
  }
  return 0.0;
}

struct Case {
  int heads, kv_heads, dim, block_size;
  std::vector<int> lens;
};

class Paged {
 public:
  Paged(KvDtype dtype, const Case& c, uint32_t seed) : dt_(dtype), c_(c), rng_(seed) {
    int blocks = 0;
    for (int len : c.lens) blocks += (len + c.block_size - 1) / c.block_size;
    num_blocks_ = blocks + 5;
    std::vector<int32_t> ids(num_blocks_);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng_);
    start_ = {0};
    for (int len : c.lens) {
      for (int b = 0; b < (len + c.block_size - 1) / c.block_size; ++b) {
        table_.push_back(ids[table_.size()]);
      }
      start_.push_back(static_cast<int32_t>(table_.size()));
    }
    std::uniform_real_distribution<float> kv(-1.0f, 1.0f), qd(-2.5f, 2.5f);
    for (int len : c.lens) {
      k_.emplace_back(static_cast<size_t>(len) * kv_row());
      v_.emplace_back(static_cast<size_t>(len) * kv_row());
      q_.emplace_back(static_cast<size_t>(len) * c.heads * c.dim);
      for (float& f : k_.back()) f = kv(rng_);
      for (float& f : v_.back()) f = kv(rng_);
      for (float& f : q_.back()) f = qd(rng_);
    }
    // NaN poison, encoded: every row, data and scale.
    const int64_t rows = int64_t{num_blocks_} * c.kv_heads * c.block_size;
    const int64_t rb = KvRowBytes(dtype, c.dim);
    kc_.assign((rows * rb + 3) / 4, 0.0f);
    vc_.assign(kc_.size(), 0.0f);
    std::vector<float> nan_row(c.dim, std::nanf(""));
    std::vector<uint8_t> enc(rb);
    const float nan_scale = QuantizeKvRow(dtype, nan_row.data(), c.dim, enc.data());
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(reinterpret_cast<uint8_t*>(kc_.data()) + r * rb, enc.data(), rb);
      std::memcpy(reinterpret_cast<uint8_t*>(vc_.data()) + r * rb, enc.data(), rb);
    }
    ks_.assign(rows, nan_scale);
    vs_.assign(rows, nan_scale);
  }

  // Replaces the source K/V with what a cache of `format` holds for them
  // (encoded, then decoded), before WriteAll.
  void RoundSourceTo(KvDtype format) {
    std::vector<uint8_t> enc(KvRowBytes(format, c_.dim));
    for (auto* rows : {&k_, &v_}) {
      for (std::vector<float>& seq : *rows) {
        for (size_t r = 0; r < seq.size(); r += c_.dim) {
          const float scale = QuantizeKvRow(format, &seq[r], c_.dim, enc.data());
          DequantizeKvRow(format, enc.data(), scale, c_.dim, &seq[r]);
        }
      }
    }
  }

  int64_t kv_row() const { return int64_t{c_.kv_heads} * c_.dim; }
  int64_t row_index(int s, int p, int h) const {
    const int32_t block = table_[start_[s] + p / c_.block_size];
    return (int64_t{block} * c_.kv_heads + h) * c_.block_size + p % c_.block_size;
  }

  // Writes the K/V of every token in chunks of random sizes (sequences
  // interleaved), then checks each row equals QuantizeKvRow of its source.
  void WriteAll() {
    std::vector<int> done(c_.lens.size(), 0);
    std::uniform_int_distribution<int> chunk(1, 300);
    for (bool more = true; more;) {
      more = false;
      std::vector<float> k, v;
      std::vector<int64_t> slots;
      for (size_t s = 0; s < c_.lens.size(); ++s) {
        const int take = std::min(chunk(rng_), c_.lens[s] - done[s]);
        for (int i = 0; i < take; ++i, ++done[s]) {
          const int p = done[s];
          k.insert(k.end(), &k_[s][p * kv_row()], &k_[s][(p + 1) * kv_row()]);
          v.insert(v.end(), &v_[s][p * kv_row()], &v_[s][(p + 1) * kv_row()]);
          const int32_t block = table_[start_[s] + p / c_.block_size];
          slots.push_back(int64_t{block} * c_.block_size + p % c_.block_size);
        }
        more |= done[s] < c_.lens[s];
      }
      WriteKvCache({.k = k.data(),
                    .v = v.data(),
                    .src_stride = kv_row(),
                    .k_cache = kc_.data(),
                    .v_cache = vc_.data(),
                    .kv_dtype = dt_,
                    .k_scales = ks_.data(),
                    .v_scales = vs_.data(),
                    .slot_mapping = slots.data(),
                    .num_tokens = static_cast<int>(slots.size()),
                    .num_kv_heads = c_.kv_heads,
                    .head_dim = c_.dim,
                    .block_size = c_.block_size});
    }
    const int64_t rb = KvRowBytes(dt_, c_.dim);
    std::vector<uint8_t> want(rb);
    for (size_t s = 0; s < c_.lens.size(); ++s) {
      for (int p = 0; p < c_.lens[s]; ++p) {
        for (int h = 0; h < c_.kv_heads; ++h) {
          const int64_t r = row_index(static_cast<int>(s), p, h);
          const float scale =
              QuantizeKvRow(dt_, &k_[s][p * kv_row() + h * c_.dim], c_.dim, want.data());
          ASSERT_EQ(std::memcmp(reinterpret_cast<uint8_t*>(kc_.data()) + r * rb, want.data(), rb),
                    0);
          if (KvHasScale(dt_)) {
            ASSERT_EQ(ks_[r], scale);
          }
        }
      }
    }
  }

  // Attention output [tokens][heads * dim] for (seq, pos) queries.
  std::vector<float> Attend(const std::vector<std::pair<int, int>>& tokens, ThreadPool* pool) {
    std::vector<float> q, out(tokens.size() * c_.heads * c_.dim, std::nanf(""));
    std::vector<int32_t> seq, pos;
    const int64_t qrow = int64_t{c_.heads} * c_.dim;
    for (auto [s, p] : tokens) {
      q.insert(q.end(), &q_[s][p * qrow], &q_[s][(p + 1) * qrow]);
      seq.push_back(s);
      pos.push_back(p);
    }
    PagedAttention({.q = q.data(),
                    .q_stride = qrow,
                    .out = out.data(),
                    .k_cache = kc_.data(),
                    .v_cache = vc_.data(),
                    .kv_dtype = dt_,
                    .k_scales = ks_.data(),
                    .v_scales = vs_.data(),
                    .num_tokens = static_cast<int>(tokens.size()),
                    .num_heads = c_.heads,
                    .num_kv_heads = c_.kv_heads,
                    .head_dim = c_.dim,
                    .block_size = c_.block_size,
                    .token_seq = seq.data(),
                    .token_pos = pos.data(),
                    .block_table_start = start_.data(),
                    .block_ids = table_.data(),
                    .scale = 1.0f / std::sqrt(static_cast<float>(c_.dim)),
                    .softcap = softcap_},
                   pool);
    return out;
  }

  // fp64 attention of (s, p, head) over the stored (encoded) rows, and in
  // bound each output's allowed distance from it (top of the file).
  std::vector<double> Reference(int s, int p, int head, std::vector<double>* bound) const {
    const int kvh = head / (c_.heads / c_.kv_heads);
    const int64_t rb = KvRowBytes(dt_, c_.dim);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c_.dim));
    const float* q_row = &q_[s][(int64_t{p} * c_.heads + head) * c_.dim];
    // The integer-code path attends with q rounded to int8 digits (two for
    // int8 rows; attention.h): so does the reference then, leaving the same
    // fp32 arithmetic to bound.
    std::vector<double> q(q_row, q_row + c_.dim);
    if (UsesIntegerCodeAttention(dt_, c_.dim)) {
      const bool two = dt_ == KvDtype::kInt8;
      std::vector<int8_t> q8(c_.dim), q8_low(c_.dim, 0);
      const float q_scale =
          QuantizeQueryInt8(q_row, c_.dim, q8.data(), two ? q8_low.data() : nullptr);
      for (int d = 0; d < c_.dim; ++d) q[d] = (q8[d] + q8_low[d] / 256.0) * double{q_scale};
    }
    const bool bf16_dot = UsesBf16DotFp8Attention(dt_, c_.dim);
    if (bf16_dot) {
      for (int d = 0; d < c_.dim; ++d) q[d] = RoundToBf16(q_row[d]);
    }
    std::vector<double> w(p + 1), out(c_.dim, 0.0);
    double mx = -1e300, sum = 0;
    for (int j = 0; j <= p; ++j) {
      const int64_t r = row_index(s, j, kvh);
      const auto* row = reinterpret_cast<const uint8_t*>(kc_.data()) + r * rb;
      double dot = 0;
      for (int d = 0; d < c_.dim; ++d) dot += q[d] * DecodeRef(dt_, row, ks_[r], d);
      w[j] = dot * scale;
      if (softcap_ > 0) w[j] = softcap_ * std::tanh(w[j] / softcap_);
      mx = std::max(mx, w[j]);
    }
    for (double& x : w) sum += (x = std::exp(x - mx));
    // The integer-code path sums values as integer weights times codes: per
    // aligned tile of 32 keys, w_j * v_scale_j rounded to a multiple of the
    // tile's largest / CodeWeightSteps (32767, or 255 for 4-bit rows on
    // AVX-512 VNNI). So does the reference then (the ratio does not depend
    // on the softmax's running max). The kernel's weights carry fp32 errors
    // (a few 2^-24 of a score, relative in its exp): up to steps * 2^-18 in
    // units of a step. A weight that close to half a step may round the
    // other way there, so one step of it (either_way[j]) joins the bound.
    // At 255 steps one such weight put an int4 output 2.4e-4 off; at 32767
    // a step is within the 2e-5 budget, and the same rule adds at most
    // 1/32767 of the weights' share. (A weight scale off by 1e-4 still fails
    // the tests on every such path: tried on AVX-512 int8, int4 and fp4 and
    // AVX2 int4 and fp4.)
    std::vector<double> rounded = w, either_way(p + 1, 0.0);
    if (UsesIntegerCodeAttention(dt_, c_.dim)) {
      const double steps = CodeWeightSteps(dt_);
      for (int t0 = 0; t0 <= p; t0 += kAttentionKeyTile) {
        const int t1 = std::min(p + 1, t0 + kAttentionKeyTile);
        double largest = 0;
        for (int j = t0; j < t1; ++j) largest = std::max(largest, w[j] * vs_[row_index(s, j, kvh)]);
        for (int j = t0; j < t1; ++j) {
          const double vs = vs_[row_index(s, j, kvh)];
          if (!(largest > 0 && vs > 0)) {
            rounded[j] = 0.0;
            continue;
          }
          const double x = w[j] * vs / largest * steps, step = largest / steps / vs;
          rounded[j] = std::nearbyint(x) * step;
          const double from_half = std::fabs(x - std::floor(x) - 0.5);
          if (from_half <= std::ldexp(steps, -18)) either_way[j] = step;
        }
      }
    }
    bound->assign(c_.dim, kBound);
    for (int j = 0; j <= p; ++j) {
      const int64_t r = row_index(s, j, kvh);
      const auto* row = reinterpret_cast<const uint8_t*>(vc_.data()) + r * rb;
      for (int d = 0; d < c_.dim; ++d) {
        const double v = DecodeRef(dt_, row, vs_[r], d);
        out[d] += rounded[j] / sum * v;
        if (bf16_dot) (*bound)[d] += std::ldexp(w[j] / sum * std::fabs(v), -8);
        (*bound)[d] += either_way[j] / sum * std::fabs(v);
      }
    }
    return out;
  }

  // Overwrites code byte `byte` of cache row `row` (K or V), after WriteAll.
  void SetCode(bool k, int64_t row, int byte, uint8_t code) {
    auto* base = reinterpret_cast<uint8_t*>(k ? kc_.data() : vc_.data());
    base[row * KvRowBytes(dt_, c_.dim) + byte] = code;
  }

  // The scale of V cache row `row`, after WriteAll.
  float v_scale(int64_t row) const { return vs_[row]; }

  // Scores soft-capped (PagedAttentionParams::softcap) from now on.
  void SetSoftcap(float softcap) { softcap_ = softcap; }

 private:
  KvDtype dt_;
  Case c_;
  float softcap_ = 0.0f;
  std::mt19937 rng_;
  int num_blocks_ = 0;
  std::vector<int32_t> table_, start_;
  std::vector<std::vector<float>> k_, v_, q_;
  std::vector<float> kc_, vc_, ks_, vs_;
};

std::vector<CpuIsa> Isas() {
  std::vector<CpuIsa> isas = {CpuIsa::kScalar};
  if (DetectedIsa() >= CpuIsa::kAvx2) isas.push_back(CpuIsa::kAvx2);
  if (DetectedIsa() >= CpuIsa::kAvx512) isas.push_back(CpuIsa::kAvx512);
  return isas;
}

class KvQuantAttentionTest : public ::testing::TestWithParam<KvDtype> {};

// Every position of every sequence of `c` in one call against the
// reference, and each alone (decode) bit-identical to its place in the
// batch (prefill chunks), on every ISA path.
void ExpectEveryPositionMatches(KvDtype dtype, const Case& c, uint32_t seed, float softcap) {
  ThreadPool two(2);
  for (CpuIsa isa : Isas()) {
    SCOPED_TRACE(std::string(IsaName(isa)) + " dim " + std::to_string(c.dim));
    ScopedIsaOverride force(isa);
    Paged w(dtype, c, seed);
    w.SetSoftcap(softcap);
    w.WriteAll();
    std::vector<std::pair<int, int>> all;
    for (int s = 0; s < static_cast<int>(c.lens.size()); ++s) {
      for (int p = 0; p < c.lens[s]; ++p) all.emplace_back(s, p);
    }
    const std::vector<float> out = w.Attend(all, &two);
    for (size_t i = 0; i < all.size(); ++i) {
      auto [s, p] = all[i];
      for (int h = 0; h < c.heads; ++h) {
        std::vector<double> bound;
        const std::vector<double> ref = w.Reference(s, p, h, &bound);
        for (int d = 0; d < c.dim; ++d) {
          ASSERT_NEAR(out[(i * c.heads + h) * c.dim + d], ref[d], bound[d])
              << "seq " << s << " pos " << p << " head " << h << " d " << d;
        }
      }
      const std::vector<float> alone = w.Attend({all[i]}, nullptr);
      ASSERT_EQ(
          0, std::memcmp(alone.data(), &out[i * c.heads * c.dim], sizeof(float) * c.heads * c.dim))
          << "batch invariance, seq " << s << " pos " << p;
    }
  }
}

// Contexts 1, 54, 97.
TEST_P(KvQuantAttentionTest, ShortContextsMatchReference) {
  // Dims 37 and 20 take the AVX-512 path's fallback; 64, 48 and 128 the
  // path, and 64 and 128 the integer-code path (int8, int4 and fp4 on
  // AVX-512 VNNI; int4 and fp4 on AVX2).
  for (const Case& c : {Case{6, 2, 37, 16, {1, 54, 97}}, Case{4, 1, 20, 8, {97, 1, 54}},
                        Case{9, 3, 64, 16, {54, 1, 97}}, Case{7, 1, 48, 8, {97, 54}},
                        Case{8, 2, 128, 16, {54, 97}}}) {
    ASSERT_NO_FATAL_FAILURE(ExpectEveryPositionMatches(GetParam(), c, 21, 0.0f));
  }
}

// Context 4000: the queries at a spread of positions (all tiles of the last
// ones) against the reference.
TEST_P(KvQuantAttentionTest, LongContextMatchesReference) {
  const Case c{4, 2, 64, 16, {4000, 33}};
  for (CpuIsa isa : Isas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsaOverride force(isa);
    Paged w(GetParam(), c, 22);
    w.WriteAll();
    std::vector<std::pair<int, int>> queries = {{0, 0},    {0, 31},   {0, 32}, {0, 1000},
                                                {0, 3999}, {0, 3998}, {1, 32}, {0, 2047}};
    const std::vector<float> out = w.Attend(queries, nullptr);
    for (size_t i = 0; i < queries.size(); ++i) {
      auto [s, p] = queries[i];
      for (int h = 0; h < c.heads; ++h) {
        std::vector<double> bound;
        const std::vector<double> ref = w.Reference(s, p, h, &bound);
        for (int d = 0; d < c.dim; ++d) {
          ASSERT_NEAR(out[(i * c.heads + h) * c.dim + d], ref[d], bound[d])
              << "seq " << s << " pos " << p << " head " << h << " d " << d;
        }
      }
    }
  }
}

// Keys past kAttentionPartitionKeys: a batch of few (token, kv head)
// passes has its passes cut at their partitions and spread over the
// threads (PagedAttention). The queries' outputs are checked against the
// reference, and each query alone with a pool (split), alone without one
// (one pass) and within a prefill batch of 41 tokens (multi-token passes)
// is bit-identical: the positions sit at, just before and just after
// partition ends, and past a partial last partition.
TEST_P(KvQuantAttentionTest, PartitionsSplitAcrossThreadsChangeNoBit) {
  static_assert(kAttentionPartitionKeys == 1024, "the positions below straddle partition ends");
  const Case c{9, 3, 64, 16, {2200, 90}};
  ThreadPool two(2), four(4);
  for (CpuIsa isa : Isas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsaOverride force(isa);
    Paged w(GetParam(), c, 25);
    w.WriteAll();
    std::vector<std::pair<int, int>> batch;  // positions 1000 .. 1040 of sequence 0
    for (int p = 1000; p <= 1040; ++p) batch.emplace_back(0, p);
    const std::vector<float> batched = w.Attend(batch, &two);
    const int64_t row = int64_t{c.heads} * c.dim;
    for (int p : {1000, 1023, 1024, 1040, 2047, 2048, 2199}) {
      SCOPED_TRACE("pos " + std::to_string(p));
      const std::vector<float> split = w.Attend({{0, p}}, &two);
      const std::vector<float> whole = w.Attend({{0, p}}, nullptr);
      for (int h = 0; h < c.heads; ++h) {
        std::vector<double> bound;
        const std::vector<double> ref = w.Reference(0, p, h, &bound);
        for (int d = 0; d < c.dim; ++d) {
          ASSERT_NEAR(split[h * c.dim + d], ref[d], bound[d]) << "head " << h << " d " << d;
        }
      }
      ASSERT_EQ(0, std::memcmp(split.data(), whole.data(), sizeof(float) * row));
      // Two sequences, 6 passes on 4 threads: split too.
      const std::vector<float> pair = w.Attend({{1, 89}, {0, p}}, &four);
      ASSERT_EQ(0, std::memcmp(split.data(), &pair[row], sizeof(float) * row));
      if (p >= 1000 && p <= 1040) {
        ASSERT_EQ(0, std::memcmp(split.data(), &batched[(p - 1000) * row], sizeof(float) * row));
      }
    }
  }
}

// Soft-capped scores (Gemma 2) on every format and ISA path, the integer-code
// steps included: a cap of 0.4 bends most of these scores (q . k / sqrt(64)
// of these uniform rows has a standard deviation of about 0.83), so a step
// that skipped the tanh misses the reference by far more than the bound
// (the AVX2 integer-code step without it fails: tried).
TEST_P(KvQuantAttentionTest, SoftcappedScoresMatchReference) {
  for (const Case& c : {Case{9, 3, 64, 16, {70, 33}}, Case{8, 2, 128, 16, {54}}}) {
    ASSERT_NO_FATAL_FAILURE(ExpectEveryPositionMatches(GetParam(), c, 24, 0.4f));
  }
}

// bf16 and fp16 rows are attended exactly as an fp32 cache holding their
// values is, bit for bit, on every ISA path (AVX-512 reads them in place and
// widens them in registers; the others decode them into an fp32 tile).
TEST(KvQuant16BitAttentionTest, RowsAttendAsTheirFp32Values) {
  ThreadPool two(2);
  for (const Case& c : {Case{9, 3, 64, 16, {97, 300, 54}}, Case{7, 1, 48, 8, {97, 54}},
                        Case{8, 2, 128, 16, {54, 97}}}) {
    for (KvDtype format : {KvDtype::kBfloat16, KvDtype::kFloat16}) {
      for (CpuIsa isa : Isas()) {
        SCOPED_TRACE(std::string(KvDtypeName(format)) + " " + IsaName(isa) + " dim " +
                     std::to_string(c.dim));
        ScopedIsaOverride force(isa);
        Paged packed(format, c, 23), wide(KvDtype::kFloat32, c, 23);
        wide.RoundSourceTo(format);
        packed.WriteAll();
        wide.WriteAll();
        std::vector<std::pair<int, int>> all;
        for (int s = 0; s < static_cast<int>(c.lens.size()); ++s) {
          for (int p = 0; p < c.lens[s]; ++p) all.emplace_back(s, p);
        }
        const std::vector<float> a = packed.Attend(all, &two), b = wide.Attend(all, &two);
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * a.size()));
      }
    }
  }
}

// The quantizer never writes an fp8 NaN code (0x7f / 0xff: a row holding
// NaN gets a NaN scale and zero codes), but a row that holds one decodes to
// NaN, and attention must not hide it: every head that attends such a key
// (K row) or value (V row) gets a NaN in its output, the others none, on
// every ISA path (AVX2 and AVX-512 read fp8 rows in place and test each
// tile's rows for NaN codes once). Dims 64 and 80 take both widths of the
// AVX-512 test.
TEST(KvQuantFp8AttentionTest, NanCodesInStoredRowsReachTheHeadsThatAttendThem) {
  ThreadPool two(2);
  constexpr int kNanKey = 40, kNanValue = 70;  // positions; kv heads 0 and 1
  for (const Case& c : {Case{6, 2, 64, 16, {97}}, Case{6, 2, 80, 8, {97}}}) {
    for (CpuIsa isa : Isas()) {
      SCOPED_TRACE(std::string(IsaName(isa)) + " dim " + std::to_string(c.dim));
      ScopedIsaOverride force(isa);
      Paged w(KvDtype::kFp8E4m3, c, 31);
      w.WriteAll();
      w.SetCode(/*k=*/true, w.row_index(0, kNanKey, 0), c.dim - 3, 0x7f);
      w.SetCode(/*k=*/false, w.row_index(0, kNanValue, 1), 5, 0xff);
      std::vector<std::pair<int, int>> all;
      for (int p = 0; p < c.lens[0]; ++p) all.emplace_back(0, p);
      const std::vector<float> out = w.Attend(all, &two);
      const int group = c.heads / c.kv_heads;
      for (int p = 0; p < c.lens[0]; ++p) {
        for (int h = 0; h < c.heads; ++h) {
          const int kv = h / group;
          const bool attends = (kv == 0 && p >= kNanKey) || (kv == 1 && p >= kNanValue);
          const float* o = &out[(int64_t{p} * c.heads + h) * c.dim];
          const bool has_nan = std::any_of(o, o + c.dim, [](float x) { return std::isnan(x); });
          ASSERT_EQ(has_nan, attends) << "pos " << p << " head " << h;
          if (!attends) {
            ASSERT_TRUE(std::all_of(o, o + c.dim, [](float x) { return std::isfinite(x); }));
          }
        }
      }
    }
  }
}

// Every e4m3 code's value reaches the output exactly: a context of one key
// (weight exactly 1) over a V row holding 64 codes; four runs cover all 256
// (the two NaN codes written as 0). The output is then the row's scale times each
// code's value: the bf16-dot step (attention.h) rounds that scale to bf16,
// and its products of bf16 values are exact, so there it is equal; the other
// paths round a product or two in fp32 (2^-24 each). The attention tests
// above cannot see a small code decoded wrongly (their values sit near the
// rows' largest); this one sees every code.
TEST(KvQuantFp8AttentionTest, EveryCodeDecodesExactly) {
  const Case c{1, 1, 64, 16, {1}};
  for (CpuIsa isa : Isas()) {
    SCOPED_TRACE(IsaName(isa));
    ScopedIsaOverride force(isa);
    for (int first = 0; first < 256; first += 64) {
      Paged w(KvDtype::kFp8E4m3, c, 32);
      w.WriteAll();
      const int64_t row = w.row_index(0, 0, 0);
      std::vector<uint8_t> codes(64);
      for (int d = 0; d < 64; ++d) {
        const int code = first + d;
        codes[d] = (code & 0x7f) == 0x7f ? 0 : static_cast<uint8_t>(code);  // NaN codes: 0
        w.SetCode(/*k=*/false, row, d, codes[d]);
      }
      const std::vector<float> out = w.Attend({{0, 0}}, nullptr);
      const bool bf16_dot = UsesBf16DotFp8Attention(KvDtype::kFp8E4m3, c.dim);
      const double scale = bf16_dot ? RoundToBf16(w.v_scale(row)) : w.v_scale(row);
      for (int d = 0; d < 64; ++d) {
        const double want = DecodeRef(KvDtype::kFp8E4m3, codes.data(), scale, d);
        if (bf16_dot) {
          ASSERT_EQ(out[d], want) << "code " << int{codes[d]};
        } else {
          ASSERT_NEAR(out[d], want, std::fabs(want) * 1e-6) << "code " << int{codes[d]};
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, KvQuantAttentionTest, ::testing::ValuesIn(kAllKvDtypes),
                         [](const auto& info) { return std::string(KvDtypeName(info.param)); });

}  // namespace
}  // namespace kvserve::kernels
