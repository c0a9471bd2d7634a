// Sample(): the pipeline described in sampler.h.
//
// Cost per call for a vocabulary of V tokens: a copy of the row, one
// vectorised exp pass for the raw log-sum-exp, O(prompt + output) for the
// penalties, and then
//   - greedy: one max scan;
//   - no truncation (top-k off, top_p == 1, min_p == 0): one exp pass;
//   - top-k = k: one scan keeping a heap of the k best (an O(V) selection for
//     k > kHeapTopK) and an O(k log k) sort; never a full sort;
//   - top-p / min-p without top-k: for top-p one exp pass for the normaliser;
//     then only tokens that can survive (a bound, see Draw) are ranked, in a
//     sorted prefix grown by selection as far as the cut needs (a radix sort
//     for 4,096 keys or more).
// A peaked distribution thus costs about three passes over the row; a flat
// one under top-p sorts the (large) kept set. The passes over a row run as
// vector loops compiled per ISA (below), with the same bits on each.
//
// Numerics: masses are floats from ExpNonPositive (a few ulp); every sum is in
// double, over fixed blocks in a fixed order (BlockSum), so the same inputs
// give the same bits on any IEEE machine. The top-k normaliser and the top-p
// cumulative sum run in rank order; the draw's sums in ascending id.
#include "engine/sampling/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "engine/sampling/radix_sort.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/target_pragmas.h"

namespace kvserve::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kMaxFloat = std::numeric_limits<float>::max();

// SamplerScratch::marks_ word: bit 31 = repetition penalty applied to this
// token already; bits 0..30 = occurrences in the output not yet applied.
constexpr uint32_t kRepetitionBit = 1u << 31;
constexpr uint32_t kCountMask = kRepetitionBit - 1;

// Top-k up to this k keeps a heap while scanning; above, it selects.
constexpr size_t kHeapTopK = 4096;
// The least a sorted prefix grows by at a time, for top-p.
constexpr size_t kMinChunk = 64;
// Kept sets larger than this are put in id order through a bitmap.
constexpr size_t kBitmapSortMin = 512;
// Rank-order sorts of at least this many keys are radix sorts.
constexpr size_t kRadixSortMin = 4096;

// ---- Row hygiene and ranking ----------------------------------------------

// NaN -> -inf (masked); +inf -> the largest float, so that differences of
// logits stay finite and a "+inf" token simply dominates.
float Sanitize(float logit) {
  if (std::isnan(logit)) return kNegInf;
  return std::min(logit, kMaxFloat);
}

bool InVocab(int32_t token, size_t vocab) {
  return token >= 0 && static_cast<size_t>(token) < vocab;
}

// Rank order of sampler.h on a NaN-free row: a ranks before b.
struct RankBefore {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

// Rank key: ascending keys are the rank order. High half: the logit's bits
// mapped so that a larger float is a smaller integer (-0 folded onto +0
// first, so equal logits tie); low half: the id.
uint64_t RankKey(float logit, int32_t token) {
  const uint32_t bits = std::bit_cast<uint32_t>(logit + 0.0f);
  const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(token);
}

int32_t KeyToken(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

// The largest entry of a non-empty NaN-free row, with kLanes running maxima
// so that the loop vectorises. MaxOf (below) runs it for the CPU's ISA.
constexpr size_t kLanes = 8;

[[gnu::always_inline]] inline float MaxOfLoop(std::span<const float> row) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNegInf);
  const size_t body = row.size() - row.size() % kLanes;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] = row[i + j] > lanes[j] ? row[i + j] : lanes[j];
  }
  float max = kNegInf;
  for (float lane : lanes) max = lane > max ? lane : max;
  for (size_t i = body; i < row.size(); ++i) max = row[i] > max ? row[i] : max;
  return max;
}

float MaxOf(std::span<const float> row);

// The lowest id among the maximal entries.
int32_t Argmax(std::span<const float> row) {
  const float max = MaxOf(row);
  size_t i = 0;
  while (row[i] != max) ++i;
  return static_cast<int32_t>(i);
}

// out = the first n tokens of the rank order (n small), best first.
void TopRanked(std::span<const float> row, size_t n, std::vector<TokenLogprob>& out) {
  out.clear();
  if (n == 0) return;
  const RankBefore before{row.data()};
  const auto token_before = [&](int32_t t, const TokenLogprob& e) { return before(t, e.token); };
  float worst = kNegInf;  // once out is full: the logit of its last entry
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] < worst) continue;  // cannot rank before the last entry
    const auto t = static_cast<int32_t>(i);
    if (out.size() == n) {
      if (!before(t, out.back().token)) continue;
      out.pop_back();
    }
    out.insert(std::upper_bound(out.begin(), out.end(), t, token_before), TokenLogprob{t, 0.0f});
    if (out.size() == n) worst = row[out.back().token];
  }
}

// Writes the rank keys of the first k unmasked tokens of the rank order,
// sorted, to the front of `keys` (room for the whole row) and returns how
// many there are: min(k, unmasked). Masked tokens rank last with mass 0;
// leaving them out changes no draw.
size_t SelectTopK(std::span<const float> row, size_t k, std::span<uint64_t> keys) {
  size_t size = 0;
  if (k <= kHeapTopK) {
    // keys[0, size) is a max-heap of the best keys so far: its front is the
    // worst of them, with logit `worst`; a smaller logit can never enter.
    float worst = kNegInf;
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i] < worst || row[i] == kNegInf) continue;
      const uint64_t key = RankKey(row[i], static_cast<int32_t>(i));
      if (size < k) {
        keys[size++] = key;
        std::push_heap(keys.begin(), keys.begin() + size);
        if (size == k) worst = row[KeyToken(keys.front())];
      } else if (key < keys.front()) {
        std::pop_heap(keys.begin(), keys.begin() + size);
        keys[size - 1] = key;
        std::push_heap(keys.begin(), keys.begin() + size);
        worst = row[KeyToken(keys.front())];
      }
    }
  } else {
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i] != kNegInf) keys[size++] = RankKey(row[i], static_cast<int32_t>(i));
    }
    if (size > k) {
      std::nth_element(keys.begin(), keys.begin() + k, keys.begin() + size);
      size = k;
    }
  }
  std::sort(keys.begin(), keys.begin() + size);
  return size;
}

// Sorts distinct token ids in O(vocab / 64 + n) through a bitmap that is all
// zero before and after.
void SortIdsWithBitmap(std::span<uint64_t> ids, std::vector<uint64_t>& bitmap) {
  uint64_t max_id = 0;
  for (uint64_t id : ids) {
    max_id = std::max(max_id, id);
  }
  if (bitmap.size() <= max_id / 64) bitmap.resize(max_id / 64 + 1, 0);
  for (uint64_t id : ids) bitmap[id / 64] |= uint64_t{1} << (id % 64);
  size_t out = 0;
  for (size_t word = 0; word <= max_id / 64; ++word) {
    for (uint64_t bits = bitmap[word]; bits != 0; bits &= bits - 1) {
      ids[out++] = word * 64 + static_cast<uint64_t>(std::countr_zero(bits));
    }
    bitmap[word] = 0;
  }
}

// ---- Masses and sums ---------------------------------------------------------

// exp(x) for x <= 0 in float: Cody-Waite reduction x = n ln2 + r with
// |r| <= ln2 / 2, a degree-7 Taylor polynomial for exp(r) (truncation < 6e-9),
// 2^n put into the exponent bits; relative error below 1e-7 measured. Exactly
// 0 below kExpUnderflow, so exp(-inf) = 0 and masked tokens have mass 0.
// Branch-free, with only +, *, conversions and bit operations (no FMA:
// -ffp-contract=off), so loops over it vectorise and every IEEE machine gives
// the same bits.
constexpr float kExpUnderflow = -87.0f;  // keeps 2^n normal: n >= -126

[[gnu::always_inline]] inline float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 9 trailing zero bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: (t + kRound) - kRound rounds t
  // For x <= 0 (or -inf), x >= kExpUnderflow compares as unsigned bits;
  // written with integers so that the compiler keeps it branch-free.
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t keep = 0u - static_cast<uint32_t>(bits <= std::bit_cast<uint32_t>(kExpUnderflow));
  const float xc = std::bit_cast<float>(bits & keep);  // 0 when underflowing
  const float n = (xc * kLog2e + kRound) - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f + r * (1.0f / 40320.0f);
  p = 1.0f / 720.0f + r * p;
  p = 1.0f / 120.0f + r * p;
  p = 1.0f / 24.0f + r * p;
  p = 1.0f / 6.0f + r * p;
  p = 0.5f + r * p;
  p = 1.0f + r * p;
  p = 1.0f + r * p;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p * scale) & keep);
}

// The unnormalised probability ("mass") of a penalised logit,
// exp((l - l_max) / T): exactly 1 for a top token, 0 for masked ones.
struct MassFn {
  float max_logit;
  float inv_temperature;
  float Exponent(float logit) const { return (logit - max_logit) * inv_temperature; }
  [[gnu::always_inline]] float operator()(float logit) const {
    return ExpNonPositive(Exponent(logit));
  }
};

// Sums run over blocks of kBlock consecutive values; within a block, value j
// goes to lane j % kLanes, the lanes are added in order, then the leftover
// values. Block sums are added in order. Fixed, so the bits are; lanes let
// the loops vectorise.
constexpr size_t kBlock = 64;

[[gnu::always_inline]] inline double BlockSum(const float* values, size_t n) {
  double lanes[kLanes] = {};
  const size_t body = n - n % kLanes;
  for (size_t i = 0; i < body; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] += values[i + j];
  }
  double sum = 0.0;
  for (double lane : lanes) sum += lane;
  for (size_t i = body; i < n; ++i) sum += values[i];
  return sum;
}

// Sum of masses of a row; with out non-null (it may alias row) the masses
// are stored there too. SumMasses (below) runs it for the CPU's ISA.
[[gnu::always_inline]] inline double SumMassesLoop(std::span<const float> row, const MassFn& mass,
                                                   float* out) {
  double total = 0.0;
  for (size_t start = 0; start < row.size(); start += kBlock) {
    const size_t n = std::min(kBlock, row.size() - start);
    float masses[kBlock];
    for (size_t j = 0; j < n; ++j) masses[j] = mass(row[start + j]);
    total += BlockSum(masses, n);
    if (out != nullptr) std::copy(masses, masses + n, out + start);
  }
  return total;
}

// The row loops for each ISA: the same source compiled for the baseline,
// AVX2 and AVX-512, picked per kernels::ActiveIsa by a plain branch (GCC's
// target_clones resolver crashes ThreadSanitizer binaries). Wider vectors
// give the same bits: every operation and its order are fixed above, and
// -ffp-contract=off forbids fusing them (EveryIsaGivesTheSameBits).
#define KVSERVE_SAMPLER_ROW_LOOPS(Isa)                                                \
  double SumMasses##Isa(std::span<const float> row, const MassFn& mass, float* out) { \
    return SumMassesLoop(row, mass, out);                                             \
  }                                                                                   \
  float MaxOf##Isa(std::span<const float> row) { return MaxOfLoop(row); }             \
  void ToMasses##Isa(std::span<float> logits, const MassFn& mass) {                   \
    for (float& value : logits) value = mass(value);                                  \
  }

KVSERVE_SAMPLER_ROW_LOOPS(Baseline)
KVSERVE_TARGET_BEGIN("avx2")
KVSERVE_SAMPLER_ROW_LOOPS(Avx2)
KVSERVE_TARGET_END
KVSERVE_TARGET_BEGIN("avx512f")
KVSERVE_SAMPLER_ROW_LOOPS(Avx512)
KVSERVE_TARGET_END
#undef KVSERVE_SAMPLER_ROW_LOOPS

// The scalar scan of IdsAtLeast* below from entry `begin` on, appending
// after the `kept` ids already written; returns the new count.
size_t AppendIdsAtLeast(std::span<const float> row, size_t begin, float threshold, uint64_t* ids,
                        size_t kept) {
  for (size_t i = begin; i < row.size(); ++i) {
    ids[kept] = i;
    kept += row[i] >= threshold ? 1 : 0;
  }
  return kept;
}

// Writes the ids of the entries >= threshold to ids (room for row.size()),
// ascending; returns their count. The scalar loop writes every id and
// advances past the kept ones (no branch to mispredict on a flat row); the
// AVX-512 one packs 8 ids at a time (vpcompressq).
size_t IdsAtLeastBaseline(std::span<const float> row, float threshold, uint64_t* ids) {
  return AppendIdsAtLeast(row, 0, threshold, ids, 0);
}

KVSERVE_TARGET_BEGIN("avx512f")
size_t IdsAtLeastAvx512(std::span<const float> row, float threshold, uint64_t* ids) {
  const __m512 limit = _mm512_set1_ps(threshold);
  const __m512i eight = _mm512_set1_epi64(8);
  __m512i index = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  size_t kept = 0, i = 0;
  // Each store writes 8 slots from ids + kept; kept <= i, so they stay below
  // i + 16 <= row.size().
  for (; i + 16 <= row.size(); i += 16) {
    const __mmask16 at_least =
        _mm512_cmp_ps_mask(_mm512_loadu_ps(row.data() + i), limit, _CMP_GE_OQ);
    for (const __mmask8 half :
         {static_cast<__mmask8>(at_least), static_cast<__mmask8>(at_least >> 8)}) {
      _mm512_storeu_si512(ids + kept, _mm512_maskz_compress_epi64(half, index));
      kept += static_cast<size_t>(std::popcount(static_cast<unsigned>(half)));
      index = _mm512_add_epi64(index, eight);
    }
  }
  return AppendIdsAtLeast(row, i, threshold, ids, kept);  // the last 0-15 entries
}
KVSERVE_TARGET_END

// The loops of one ISA; RowLoopsForIsa picks per kernels::ActiveIsa (read
// on every call: tests switch it with ScopedIsaOverride).
struct RowLoops {
  double (*sum_masses)(std::span<const float> row, const MassFn& mass, float* out);
  float (*max_of)(std::span<const float> row);
  void (*to_masses)(std::span<float> logits, const MassFn& mass);  // each logit -> its mass
  size_t (*ids_at_least)(std::span<const float> row, float threshold, uint64_t* ids);
};

const RowLoops& RowLoopsForIsa() {
  static constexpr RowLoops kBaseline{SumMassesBaseline, MaxOfBaseline, ToMassesBaseline,
                                      IdsAtLeastBaseline};
  static constexpr RowLoops kAvx2{SumMassesAvx2, MaxOfAvx2, ToMassesAvx2, IdsAtLeastBaseline};
  static constexpr RowLoops kAvx512{SumMassesAvx512, MaxOfAvx512, ToMassesAvx512, IdsAtLeastAvx512};
  switch (kernels::ActiveIsa()) {
    case kernels::CpuIsa::kAvx512:
      return kAvx512;
    case kernels::CpuIsa::kAvx2:
      return kAvx2;
    case kernels::CpuIsa::kScalar:
      break;
  }
  return kBaseline;
}

double SumMasses(std::span<const float> row, const MassFn& mass, float* out) {
  return RowLoopsForIsa().sum_masses(row, mass, out);
}

void ToMasses(std::span<float> logits, const MassFn& mass) {
  RowLoopsForIsa().to_masses(logits, mass);
}

float MaxOf(std::span<const float> row) { return RowLoopsForIsa().max_of(row); }

size_t IdsAtLeast(std::span<const float> row, float threshold, uint64_t* ids) {
  return RowLoopsForIsa().ids_at_least(row, threshold, ids);
}

// log(sum exp(row)); -inf when every entry is -inf.
double LogSumExp(std::span<const float> row) {
  const float max = MaxOf(row);
  if (max == kNegInf) return -std::numeric_limits<double>::infinity();
  return max + std::log(SumMasses(row, MassFn{max, 1.0f}, nullptr));
}

float LogProb(float sanitized_logit, double log_sum_exp) {
  if (sanitized_logit == kNegInf) return kNegInf;  // also covers an all-masked row
  return static_cast<float>(static_cast<double>(sanitized_logit) - log_sum_exp);
}

// The draw: the index of the first value whose cumulative sum exceeds
// u * total, the sums blocked as in SumMasses. A zero mass never moves the
// sum, so it is never chosen. At least one mass must be positive.
size_t InverseCdf(std::span<const float> masses, double u) {
  double total = 0.0;
  for (size_t start = 0; start < masses.size(); start += kBlock) {
    total += BlockSum(masses.data() + start, std::min(kBlock, masses.size() - start));
  }
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t start = 0; start < masses.size(); start += kBlock) {
    const size_t n = std::min(kBlock, masses.size() - start);
    const double block = BlockSum(masses.data() + start, n);
    if (cumulative + block <= target) {
      cumulative += block;
      continue;
    }
    for (size_t j = start; j < start + n; ++j) {
      if (masses[j] == 0.0f) continue;
      cumulative += masses[j];
      if (cumulative > target) return j;
    }
    // Rounding: this block's in-order sum fell short of its block sum; the
    // walk carries on into the next block.
  }
  // Rounding left the target unreached (u close to 1): the last positive mass.
  size_t j = masses.size();
  while (j > 0 && masses[j - 1] == 0.0f) --j;
  assert(j > 0);
  return j > 0 ? j - 1 : 0;
}

}  // namespace

// The steps of Sample() that work on SamplerScratch internals.
class SamplerImpl {
 public:
  static SampleResult Run(std::span<const float> logits, const SamplingParams& params,
                          std::span<const int32_t> prompt_tokens,
                          std::span<const int32_t> output_tokens, SamplerScratch& scratch);

 private:
  static void ApplyLogitBias(std::span<const TokenBias> logit_bias, SamplerScratch& scratch);
  static void ApplyPenalties(const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                             std::span<const int32_t> output_tokens, SamplerScratch& scratch);
  // Steps 3-7 on the penalised row; u is the uniform for this position.
  static int32_t Draw(const SamplingParams& params, double u, SamplerScratch& scratch);
};

SampleResult SamplerImpl::Run(std::span<const float> logits, const SamplingParams& params,
                              std::span<const int32_t> prompt_tokens,
                              std::span<const int32_t> output_tokens, SamplerScratch& scratch) {
  SampleResult result;
  assert(!logits.empty());
  if (logits.empty()) {
    result.logprob = kNegInf;
    return result;
  }
  std::vector<float>& row = scratch.logits_;
  row.resize(logits.size());
  std::transform(logits.begin(), logits.end(), row.begin(), Sanitize);

  // Logprobs come from the raw row, so they are taken before the penalties.
  const double log_sum_exp =
      params.logprobs ? LogSumExp(row) : std::numeric_limits<double>::quiet_NaN();
  const size_t num_top =
      params.logprobs ? std::min(static_cast<size_t>(std::max(params.num_logprobs, 0)), row.size())
                      : 0;
  TopRanked(row, num_top, result.top_logprobs);
  for (TokenLogprob& entry : result.top_logprobs) {
    entry.logprob = LogProb(row[entry.token], log_sum_exp);
  }

  ApplyLogitBias(params.logit_bias, scratch);
  ApplyPenalties(params, prompt_tokens, output_tokens, scratch);
  if (params.temperature < kGreedyTemperature) {
    result.token = Argmax(row);
  } else {
    result.token = Draw(params, CounterUniform(params.seed, output_tokens.size()), scratch);
  }
  result.logprob = params.logprobs ? LogProb(Sanitize(logits[result.token]), log_sum_exp)
                                   : std::numeric_limits<float>::quiet_NaN();
  return result;
}

void SamplerImpl::ApplyLogitBias(std::span<const TokenBias> logit_bias, SamplerScratch& scratch) {
  std::vector<float>& row = scratch.logits_;
  for (const TokenBias& entry : logit_bias) {
    if (!InVocab(entry.token, row.size())) continue;
    float& l = row[entry.token];
    // A masked logit stays masked (-inf + bias); the largest float plus a
    // positive bias stays finite.
    if (l != kNegInf) l = std::clamp(l + entry.bias, -kMaxFloat, kMaxFloat);
  }
}

void SamplerImpl::ApplyPenalties(const SamplingParams& params,
                                 std::span<const int32_t> prompt_tokens,
                                 std::span<const int32_t> output_tokens, SamplerScratch& scratch) {
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (!repetition && !additive) return;
  std::vector<float>& row = scratch.logits_;
  std::vector<uint32_t>& marks = scratch.marks_;
  const size_t vocab = row.size();
  // Entries past an earlier, smaller vocab are value-initialised to 0, and
  // entries in use are 0 by the at-rest invariant.
  if (marks.size() < vocab) marks.resize(vocab, 0);

  if (repetition) {
    const float penalty = params.repetition_penalty;
    const auto penalise = [&](int32_t t) {
      if (!InVocab(t, vocab) || (marks[t] & kRepetitionBit) != 0) return;
      marks[t] |= kRepetitionBit;
      float& l = row[t];
      // Dividing by a penalty < 1 can overflow; keep the logit finite.
      l = l > 0.0f ? std::min(l / penalty, kMaxFloat) : l * penalty;
    };
    for (int32_t t : prompt_tokens) penalise(t);
    for (int32_t t : output_tokens) penalise(t);
  }

  if (additive) {
    for (int32_t t : output_tokens) {
      if (InVocab(t, vocab)) ++marks[t];
    }
    // As vLLM: logits -= frequency * count, then logits -= presence * (count > 0).
    for (int32_t t : output_tokens) {
      if (!InVocab(t, vocab)) continue;
      const uint32_t count = marks[t] & kCountMask;
      if (count == 0) continue;  // a repeat of a token already applied
      marks[t] &= ~kCountMask;
      row[t] -= params.frequency_penalty * static_cast<float>(count);
      row[t] -= params.presence_penalty;
    }
  }

  // Restore the at-rest invariant: every mark is 0.
  for (int32_t t : prompt_tokens) {
    if (InVocab(t, vocab)) marks[t] = 0;
  }
  for (int32_t t : output_tokens) {
    if (InVocab(t, vocab)) marks[t] = 0;
  }
}

int32_t SamplerImpl::Draw(const SamplingParams& params, double u, SamplerScratch& scratch) {
  std::vector<float>& row = scratch.logits_;
  const size_t vocab = row.size();
  const float max_logit = MaxOf(row);
  if (max_logit == kNegInf) return 0;  // everything masked
  const MassFn mass{max_logit, 1.0f / params.temperature};
  const size_t top_k =
      params.top_k >= 1 && static_cast<size_t>(params.top_k) < vocab ? params.top_k : vocab;
  const bool top_p_on = params.top_p < 1.0f;
  const bool min_p_on = params.min_p > 0.0f;

  if (top_k == vocab && !top_p_on && !min_p_on) {
    // No truncation: the kept set is the whole row, already in id order;
    // masses replace the logits in place.
    SumMasses(row, mass, row.data());
    return static_cast<int32_t>(InverseCdf(row, u));
  }

  // keys: rank keys of the candidates, a prefix of the rank order holding
  // every token that can be kept. [0, sorted) is in rank order and precedes
  // everything in [sorted, size).
  std::vector<uint64_t>& storage = scratch.keys_;
  if (storage.size() < vocab) storage.resize(vocab);  // never shrunk: no refilling
  size_t num_keys = 0;
  size_t sorted = 0;
  double top_p_target = std::numeric_limits<double>::infinity();
  if (top_k < vocab) {
    num_keys = SelectTopK(row, top_k, storage);
    sorted = num_keys;
    // Top-p is relative to the mass of the top-k survivors (in rank order).
    double top_k_mass = 0.0;
    for (size_t j = 0; j < num_keys; ++j) top_k_mass += mass(row[KeyToken(storage[j])]);
    if (top_p_on) top_p_target = params.top_p * top_k_mass;
  } else {
    // Every kept token has mass >= min_p (min-p) and >= (1 - top_p) * Z / V
    // (top-p: if the cut reached a token below that, the tokens from it on
    // would hold less than (1 - top_p) * Z, so those before it more than
    // top_p * Z, and the cut would have ended earlier). Candidates: logits
    // above the one whose exponent is the log of the larger bound, halved,
    // less 1e-3 (relative rounding in the exponent is ~1e-7 of at most 87);
    // a logit threshold keeps a rank prefix.
    double min_mass = min_p_on ? params.min_p : 0.0;
    if (top_p_on) {
      const double z = SumMasses(row, mass, nullptr);
      top_p_target = params.top_p * z;
      min_mass = std::max(min_mass, 0.5 * (1.0 - params.top_p) * z / static_cast<double>(vocab));
    }
    const double min_exponent = std::max(std::log(min_mass), double{kExpUnderflow}) - 1e-3;
    const double threshold = max_logit + min_exponent * static_cast<double>(params.temperature);
    // double(l) >= threshold exactly when l >= the least float that is, so
    // the scan compares floats; the kept ids' keys follow.
    float float_threshold = static_cast<float>(threshold);
    if (static_cast<double>(float_threshold) < threshold) {
      float_threshold = std::nextafter(float_threshold, std::numeric_limits<float>::infinity());
    }
    uint64_t* const ids = storage.data();
    const float* const logits = row.data();
    num_keys = IdsAtLeast(row, float_threshold, ids);
    for (size_t j = 0; j < num_keys; ++j) {
      const auto token = static_cast<int32_t>(ids[j]);
      ids[j] = RankKey(logits[token], token);
    }
  }
  const std::span<uint64_t> keys(storage.data(), num_keys);

  const auto sort_prefix = [&](size_t end) {
    if (end <= sorted) return;
    const size_t rest = keys.size() - sorted;
    if (end - sorted >= kRadixSortMin && 2 * (end - sorted) >= rest) {
      // Most of the rest: radix-sorting all of it beats selecting first.
      RadixSort(keys.subspan(sorted), scratch.sort_buffer_);
      sorted = keys.size();
      return;
    }
    const auto first = keys.begin() + sorted;
    const auto mid = keys.begin() + end;
    if (mid != keys.end()) std::nth_element(first, mid, keys.end());
    if (end - sorted >= kRadixSortMin) {
      RadixSort(keys.subspan(sorted, end - sorted), scratch.sort_buffer_);
    } else {
      std::sort(first, mid);
    }
    sorted = end;
  };

  // Walk the ranking, sorting more of it only as needed. Both cuts are
  // prefixes: top-p ends after the first token where the cumulative mass
  // reaches the target; min-p ends before the first token with mass < min_p
  // (the top token has mass exactly 1 >= min_p, so one token always stays).
  // The walk takes masses kBlock keys at a time (gathered, then ToMasses):
  // the same values as one at a time.
  float block[kBlock];
  size_t block_begin = 0, block_end = 0;
  size_t kept = keys.size();
  double cumulative = 0.0;
  float last_mass = 1.0f;
  for (size_t j = 0; j < keys.size(); ++j) {
    if (j == sorted) {
      // Min-p alone keeps nearly every candidate: sort them all. For top-p,
      // the tokens still to come have mass <= last_mass each, so at least
      // (target - cumulative) / last_mass more are needed; sort a bit more.
      double grow = static_cast<double>(keys.size());
      if (top_p_on && last_mass > 0.0f) {
        grow = std::max(1.25 * (top_p_target - cumulative) / last_mass, double{kMinChunk});
      }
      sort_prefix(sorted +
                  static_cast<size_t>(std::min(grow, static_cast<double>(keys.size() - sorted))));
    }
    if (j == block_end) {
      block_begin = j;
      block_end = std::min(sorted, j + kBlock);
      for (size_t i = j; i < block_end; ++i) block[i - j] = row[KeyToken(keys[i])];
      ToMasses(std::span(block, block_end - j), mass);
    }
    const float m = block[j - block_begin];
    last_mass = m;
    if (m < params.min_p) {
      kept = j;
      break;
    }
    cumulative += m;
    if (cumulative >= top_p_target) {
      kept = j + 1;
      break;
    }
  }

  // The draw visits the kept set in ascending id, like the untruncated one.
  for (size_t j = 0; j < kept; ++j) keys[j] = static_cast<uint64_t>(KeyToken(keys[j]));
  if (kept < kBitmapSortMin) {
    std::sort(keys.begin(), keys.begin() + kept);
  } else {
    SortIdsWithBitmap(keys.first(kept), scratch.bitmap_);
  }
  std::vector<float>& masses = scratch.masses_;
  masses.resize(kept);
  for (size_t j = 0; j < kept; ++j) masses[j] = row[keys[j]];
  ToMasses(masses, mass);
  return static_cast<int32_t>(keys[InverseCdf(masses, u)]);
}

SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                    SamplerScratch& scratch) {
  return SamplerImpl::Run(logits, params, prompt_tokens, output_tokens, scratch);
}

TokenScore ScoreToken(std::span<const float> logits, int32_t token, int32_t num_top) {
  assert(!logits.empty() && InVocab(token, logits.size()));
  thread_local std::vector<float> row;
  row.resize(logits.size());
  std::transform(logits.begin(), logits.end(), row.begin(), Sanitize);
  TokenScore score;
  score.token = token;
  const double log_sum_exp = LogSumExp(row);
  score.logprob = LogProb(row[token], log_sum_exp);
  const RankBefore before{row.data()};
  int32_t ahead = 0;
  for (size_t i = 0; i < row.size(); ++i) ahead += before(static_cast<int32_t>(i), token) ? 1 : 0;
  score.rank = ahead + 1;
  TopRanked(row, std::min(static_cast<size_t>(std::clamp(num_top, 0, kMaxLogprobs)), row.size()),
            score.top_logprobs);
  for (TokenLogprob& entry : score.top_logprobs) {
    entry.logprob = LogProb(row[entry.token], log_sum_exp);
  }
  return score;
}

SampleResult Sample(std::span<const float> logits, const SamplingParams& params,
                    std::span<const int32_t> prompt_tokens,
                    std::span<const int32_t> output_tokens) {
  thread_local SamplerScratch scratch;
  return SamplerImpl::Run(logits, params, prompt_tokens, output_tokens, scratch);
}

}  // namespace kvserve::engine
