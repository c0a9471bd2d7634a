// SampleRows (sampling.h): the CPU sampler's pipeline (engine/sampling/
// sampler.cc), one CTA of kThreads = 512 per row (128 registers, no spills;
// at 1024 threads the 64-register cap spills). Every pass over the row has
// a fixed per-thread order and fixed reduction trees: deterministic, and a
// row's result never depends on the other rows.
//
// Per row, in order:
//   1. masked tokens -> -inf (in place); every read sanitises (NaN -> -inf,
//      +inf -> FLT_MAX);
//   2. one pass: the raw argmax (smallest rank key) and an online
//      log-sum-exp (expf; logprobs only, no token depends on it);
//   3. top-N logprobs: the N-th rank key by Select (below), then the N keys;
//   4. penalties in place, the raw value of each penalised token saved in
//      the workspace (token-indexed) for the chosen token's logprob;
//   5. greedy: argmax of the penalised row; otherwise the kept set
//      {unmasked t : key_t <= K} with K the least of the top-k cut, the top-p
//      cut and (min-p) the key before the first token with mass < min_p,
//      and the inverse-CDF draw over it in ascending id.
//
// Masses are ExpNonPositive((l - l_max) * (1 / T)) bit for bit as the CPU
// (only +, *, conversions; _rn intrinsics so nvcc contracts nothing), so the
// kept set is exact wherever its defining sums are not within rounding of a
// boundary; the sums themselves are fixed-order (deterministic) but not the
// CPU's order.
//
// Select finds the cut of a rank-ordered prefix without sorting the row:
// a histogram of the eligible tokens over 2048 bins of the exponent
// (l - max) * inv_t in [-88, 0] (plus a tail bin), each bin a contiguous run
// of the rank order, with integer counts and fixed-point masses (integer
// atomics, so the sums do not depend on the order of the atomics; each mass
// rounded to 2^-(63 - bit_width(vocab)), a row's total within ~1e-9 of
// exact since the top mass is 1). The bin holding the cut is then either
// gathered (<= kCap tokens) into shared memory and sorted by key, or split
// again by a histogram over its key range (11 bits per level) until it fits.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/sampling.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

constexpr int kBinBits = 11;
constexpr int kBins = 1 << kBinBits;  // + the tail bin kBins
constexpr float kBinScale = static_cast<float>(kBins) / 88.0f;
constexpr int kCap = 4096;  // a power of two (bitonic sort)
constexpr int kCapPerThread = kCap / kThreads;

constexpr uint64_t kNoCut = ~uint64_t{0};
constexpr float kGreedyTemperature = 1e-5f;  // == engine::kGreedyTemperature

constexpr int kBinsPerThread = kBins / kThreads;
static_assert(kBins % kThreads == 0 && kCap % kThreads == 0);

// ---- the CPU sampler's arithmetic, bit for bit -----------------------------

__device__ __forceinline__ float NegInf() { return __int_as_float(0xff800000); }

// NaN -> -inf (masked); +inf -> the largest float.
__device__ __forceinline__ float Sanitize(float l) {
  return isnan(l) ? NegInf() : fminf(l, FLT_MAX);
}

// Ascending keys are the rank order (logit desc, id asc); -0 ranks as +0.
__device__ __forceinline__ uint64_t RankKey(float logit, int token) {
  uint32_t bits = __float_as_uint(logit);
  if (bits == 0x80000000u) bits = 0;
  const uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(~ascending) << 32) | static_cast<uint32_t>(token);
}
__device__ __forceinline__ int KeyToken(uint64_t key) {
  return static_cast<int>(key & 0xffffffffu);
}

constexpr float kInv40320 = 1.0f / 40320.0f;
constexpr float kInv5040 = 1.0f / 5040.0f;
constexpr float kInv720 = 1.0f / 720.0f;
constexpr float kInv120 = 1.0f / 120.0f;
constexpr float kInv24 = 1.0f / 24.0f;
constexpr float kInv6 = 1.0f / 6.0f;

// sampler.cc ExpNonPositive, operation for operation.
__device__ __forceinline__ float ExpNonPositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;
  constexpr float kLn2Lo = 1.42860682030941723e-6f;
  constexpr float kRound = 12582912.0f;
  constexpr uint32_t kUnderflowBits = 0xc2ae0000u;  // -87.0f
  const uint32_t bits = __float_as_uint(x);
  const uint32_t keep = 0u - static_cast<uint32_t>(bits <= kUnderflowBits);
  const float xc = __uint_as_float(bits & keep);
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(xc, kLog2e), kRound), kRound);
  const float r = __fsub_rn(__fsub_rn(xc, __fmul_rn(n, kLn2Hi)), __fmul_rn(n, kLn2Lo));
  float p = __fadd_rn(kInv5040, __fmul_rn(r, kInv40320));
  p = __fadd_rn(kInv720, __fmul_rn(r, p));
  p = __fadd_rn(kInv120, __fmul_rn(r, p));
  p = __fadd_rn(kInv24, __fmul_rn(r, p));
  p = __fadd_rn(kInv6, __fmul_rn(r, p));
  p = __fadd_rn(0.5f, __fmul_rn(r, p));
  p = __fadd_rn(1.0f, __fmul_rn(r, p));
  p = __fadd_rn(1.0f, __fmul_rn(r, p));
  const float scale = __int_as_float((__float2int_rz(n) + 127) << 23);
  return __uint_as_float(__float_as_uint(__fmul_rn(p, scale)) & keep);
}

// The mass of a penalised logit: exp((l - max) * inv_t), as MassFn.
struct MassFn {
  float max_logit;
  float inv_t;
  __device__ __forceinline__ float Exponent(float l) const {
    return __fmul_rn(__fsub_rn(l, max_logit), inv_t);
  }
};

// counter_rng.cc CounterUniform.
__device__ __forceinline__ uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ double CounterUniform(uint64_t seed, uint64_t output_index) {
  const uint64_t state = Mix64(seed ^ 0x6A09E667F3BCC909ull);
  const uint64_t bits = Mix64(state + (output_index + 1) * 0x9E3779B97F4A7C15ull);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// ---- shared memory and block collectives -----------------------------------

struct Shared {
  union {
    struct {
      unsigned int count[kBins + 1];
      unsigned long long fx[kBins + 1];
    } hist;
    uint64_t keys[kCap];
  } u;
  double red_d[kWarps + 1];
  unsigned long long red_u[kWarps + 1];
  float red_f[kWarps + 1];
  double seg[kWarps];  // the draw's segment masses
  uint64_t top_keys[kCudaMaxLogprobs];
  // Broadcast scalars.
  unsigned long long sel_pre;
  unsigned int sel_count;
  int num_keys;
  int pick;
  int last_mode;
  double base;
  double target;
  int found;
  int chosen_penalised;
};

__device__ __forceinline__ int Lane() { return threadIdx.x & 31; }
__device__ __forceinline__ int Warp() { return threadIdx.x >> 5; }

// Fixed butterfly trees: the same inputs give the same bits.
__device__ __forceinline__ uint64_t WarpMin(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t t = __shfl_xor_sync(kFull, v, o);
    v = t < v ? t : v;
  }
  return v;
}
__device__ __forceinline__ uint64_t WarpMax(uint64_t v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t t = __shfl_xor_sync(kFull, v, o);
    v = t > v ? t : v;
  }
  return v;
}
__device__ __forceinline__ unsigned long long WarpSumU64(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
__device__ __forceinline__ double WarpInclusiveScanD(double v) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double t = __shfl_up_sync(kFull, v, o);
    if (Lane() >= o) v += t;
  }
  return v;
}
__device__ __forceinline__ unsigned long long WarpInclusiveScanU64(unsigned long long v) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long t = __shfl_up_sync(kFull, v, o);
    if (Lane() >= o) v += t;
  }
  return v;
}

// Block reductions: partials to shared memory, warp 0 reduces, everyone
// reads the result (two barriers; the result slot is not a partial slot, so
// back-to-back calls do not race).
__device__ uint64_t BlockMin(uint64_t v, Shared& s) {
  v = WarpMin(v);
  if (Lane() == 0) s.red_u[Warp()] = v;
  __syncthreads();
  if (Warp() == 0) {
    v = WarpMin(Lane() < kWarps ? s.red_u[Lane()] : kNoCut);
    if (Lane() == 0) s.red_u[kWarps] = v;
  }
  __syncthreads();
  return s.red_u[kWarps];
}
__device__ uint64_t BlockMax(uint64_t v, Shared& s) {
  v = WarpMax(v);
  if (Lane() == 0) s.red_u[Warp()] = v;
  __syncthreads();
  if (Warp() == 0) {
    v = WarpMax(Lane() < kWarps ? s.red_u[Lane()] : 0);
    if (Lane() == 0) s.red_u[kWarps] = v;
  }
  __syncthreads();
  return s.red_u[kWarps];
}

// Exclusive prefix over the threads in thread order; *total gets the sum.
__device__ unsigned long long BlockExclusiveScanU64(unsigned long long v, Shared& s,
                                                    unsigned long long* total) {
  const unsigned long long incl = WarpInclusiveScanU64(v);
  if (Lane() == 31) s.red_u[Warp()] = incl;
  __syncthreads();
  if (Warp() == 0) {
    const unsigned long long t = Lane() < kWarps ? s.red_u[Lane()] : 0;
    const unsigned long long t_incl = WarpInclusiveScanU64(t);
    __syncwarp();
    if (Lane() < kWarps) s.red_u[Lane()] = t_incl - t;  // integers: exact
    if (Lane() == 31) s.red_u[kWarps] = t_incl;
  }
  __syncthreads();
  *total = s.red_u[kWarps];
  const unsigned long long base = s.red_u[Warp()];
  // Lane 0 of this warp writes red_u[Warp()] again in the next block
  // reduction: every lane's read above comes first (racecheck).
  __syncwarp();
  return base + (incl - v);
}
__device__ double BlockExclusiveScanD(double v, Shared& s) {
  const double incl = WarpInclusiveScanD(v);
  double excl = __shfl_up_sync(kFull, incl, 1);
  if (Lane() == 0) excl = 0.0;
  if (Lane() == 31) s.red_d[Warp()] = incl;
  __syncthreads();
  if (Warp() == 0) {
    const double t_incl = WarpInclusiveScanD(Lane() < kWarps ? s.red_d[Lane()] : 0.0);
    double t_excl = __shfl_up_sync(kFull, t_incl, 1);
    if (Lane() == 0) t_excl = 0.0;
    __syncwarp();
    if (Lane() < kWarps) s.red_d[Lane()] = t_excl;
  }
  __syncthreads();
  const double result = s.red_d[Warp()] + excl;
  __syncthreads();  // red_d is reused by the next call
  return result;
}

// ---- the row ---------------------------------------------------------------

struct Row {
  float* logits;  // [vocab], written only by the mask and the penalties
  int vocab;
  bool vec4;  // vocab % 4 == 0 and 16-byte aligned rows
};

// f(token, sanitised logit, valid) over the row. Trip counts are uniform in
// a warp (lanes past the end get valid = false), so f may use warp
// collectives. Thread t always visits the same tokens in the same order.
template <typename F>
__device__ __forceinline__ void ForEachLogit(const Row& row, F&& f) {
  if (row.vec4) {
    // Two 16-byte loads in flight per thread and iteration.
    const int quads = row.vocab / 4;
    const float4* q4 = reinterpret_cast<const float4*>(row.logits);
    for (int q0 = threadIdx.x & ~31; q0 < quads; q0 += 2 * kThreads) {
      const int qa = q0 + Lane();
      const int qb = qa + kThreads;
      const bool va = qa < quads, vb = qb < quads;
      const float4 a = va ? q4[qa] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float4 b = vb ? q4[qb] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      f(4 * qa, Sanitize(a.x), va);
      f(4 * qa + 1, Sanitize(a.y), va);
      f(4 * qa + 2, Sanitize(a.z), va);
      f(4 * qa + 3, Sanitize(a.w), va);
      f(4 * qb, Sanitize(b.x), vb);
      f(4 * qb + 1, Sanitize(b.y), vb);
      f(4 * qb + 2, Sanitize(b.z), vb);
      f(4 * qb + 3, Sanitize(b.w), vb);
    }
  } else {
    for (int i0 = threadIdx.x & ~31; i0 < row.vocab; i0 += kThreads) {
      const int i = i0 + Lane();
      const bool valid = i < row.vocab;
      f(i, valid ? Sanitize(row.logits[i]) : NegInf(), valid);
    }
  }
}

// ---- Select: the cut of a rank-ordered prefix -------------------------------

struct SelectArgs {
  MassFn fn;              // bins by fn.Exponent; masses (mass mode)
  bool all_tail = false;  // fn.max_logit == -inf: every token in the tail bin
  bool mass_mode = false;
  uint64_t count_target = 0;    // count mode: the count_target-th key (1-based)
  float top_p = 1.0f;           // mass mode: first key whose cumulative mass >= top_p * total
  bool skip_masked = false;     // eligible: logit != -inf ...
  uint64_t key_limit = kNoCut;  // ... and key <= key_limit
  double fx_scale = 0.0;        // 2^fx_bits: fixed-point masses (vocab * 2^fx_bits < 2^63)
};

struct Level {
  int depth = 0;  // 0: exponent bins; >= 1: key bins over [lo, hi]
  uint64_t lo = 0, hi = kNoCut;
  int shift = 0;
};

// The token's bin at this level, or -1 if it is not a member. Level 0 bins
// are non-decreasing along the rank order (the exponent is monotone in the
// logit, ties share it), so each bin is a contiguous run of it.
__device__ __forceinline__ int BinOf(const SelectArgs& a, const Level& lv, float l, int token,
                                     uint64_t* key, float* x) {
  if (a.skip_masked && l == NegInf()) return -1;
  *key = RankKey(l, token);
  if (*key > a.key_limit) return -1;
  *x = a.fn.Exponent(l);
  if (lv.depth == 0) {
    if (a.all_tail) return kBins;
    const float f = __fmul_rn(-*x, kBinScale);
    return f < static_cast<float>(kBins) ? static_cast<int>(f) : kBins;
  }
  if (*key < lv.lo || *key > lv.hi) return -1;
  return static_cast<int>((*key - lv.lo) >> lv.shift);
}

__device__ __forceinline__ unsigned long long FixedPoint(float mass, double fx_scale) {
  return mass > 0.0f ? __double2ull_rn(static_cast<double>(mass) * fx_scale) : 0ull;
}

// Histogram of the level's members: counts, and fixed-point masses in mass
// mode. A warp whose members all fall in one bin adds once (a row of equal
// logits would otherwise serialise on one address); tail tokens (mass 0)
// are counted in registers.
__device__ __forceinline__ void Histogram(const Row& row, const SelectArgs& a, const Level& lv,
                                          Shared& s) {
  for (int b = threadIdx.x; b <= kBins; b += kThreads) {
    s.u.hist.count[b] = 0;
    s.u.hist.fx[b] = 0;
  }
  __syncthreads();
  unsigned int tail = 0;
  ForEachLogit(row, [&](int i, float l, bool valid) {
    uint64_t key;
    float x;
    int bin = valid ? BinOf(a, lv, l, i, &key, &x) : -1;
    unsigned long long w = 0;
    if (bin == kBins) {
      ++tail;  // exponent < -88: mass 0
      bin = -1;
    } else if (bin >= 0 && a.mass_mode) {
      w = FixedPoint(ExpNonPositive(x), a.fx_scale);
    }
    const int bin0 = __shfl_sync(kFull, bin, 0);
    if (__all_sync(kFull, bin >= 0 && bin == bin0)) {
      const unsigned long long ws = a.mass_mode ? WarpSumU64(w) : 0ull;
      if (Lane() == 0) {
        atomicAdd(&s.u.hist.count[bin0], 32u);
        if (ws != 0) atomicAdd(&s.u.hist.fx[bin0], ws);
      }
    } else if (bin >= 0) {
      atomicAdd(&s.u.hist.count[bin], 1u);
      if (w != 0) atomicAdd(&s.u.hist.fx[bin], w);
    }
  });
  for (int o = 16; o > 0; o >>= 1) tail += __shfl_xor_sync(kFull, tail, o);
  if (Lane() == 0 && tail != 0) atomicAdd(&s.u.hist.count[kBins], tail);
  __syncthreads();
}

// Sorts keys[0, n) ascending (n <= kCap), padding to a power of two.
__device__ void BitonicSort(uint64_t* keys, int n) {
  int size = 2;
  while (size < n) size <<= 1;
  for (int i = n + threadIdx.x; i < size; i += kThreads) keys[i] = kNoCut;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int partner = i ^ j;
        if (partner > i) {
          const uint64_t a = keys[i], b = keys[partner];
          if ((a > b) == ((i & k) == 0)) {
            keys[i] = b;
            keys[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// The next level for bin `want` of lv: its members' key range, split into
// kBins bins of 2^shift keys.
__device__ __forceinline__ Level SplitLevel(const Row row, const SelectArgs a, const Level lv,
                                            int want, Shared& s) {
  uint64_t lo = kNoCut, hi = 0;
  ForEachLogit(row, [&](int i, float l, bool valid) {
    uint64_t key;
    float x;
    if (valid && BinOf(a, lv, l, i, &key, &x) == want) {
      lo = key < lo ? key : lo;
      hi = key > hi ? key : hi;
    }
  });
  Level next;
  next.depth = lv.depth + 1;
  next.lo = BlockMin(lo, s);
  next.hi = BlockMax(hi, s);
  const int width = 64 - __clzll(static_cast<long long>(next.hi - next.lo));
  next.shift = width > kBinBits ? width - kBinBits : 0;
  return next;
}

// The cut key: count mode, the count_target-th smallest eligible key;
// mass mode, the first eligible key (rank order) at which the cumulative
// mass reaches top_p times the eligible total. kNoCut when never reached.
// Block-uniform: every thread calls it and gets the same result.
__device__ __forceinline__ uint64_t Select(const Row row, const SelectArgs a, Shared& s) {
  Level lv;
  unsigned long long pre = 0;  // weight of the eligible tokens ranked before the level's range
  double target_mass = 0.0;    // fixed-point units
  for (;;) {
    Histogram(row, a, lv, s);
    // Thread t owns bins [t, t + 1) * kBinsPerThread (the last one also the tail).
    const int b0 = kBinsPerThread * threadIdx.x;
    const int b_end = threadIdx.x == kThreads - 1 ? kBins + 1 : b0 + kBinsPerThread;
    unsigned long long mine = 0;
    for (int b = b0; b < b_end; ++b) mine += a.mass_mode ? s.u.hist.fx[b] : s.u.hist.count[b];
    unsigned long long total;
    const unsigned long long excl = BlockExclusiveScanU64(mine, s, &total);
    if (lv.depth == 0) {
      if (a.mass_mode) {
        if (total == 0) return kNoCut;
        target_mass = static_cast<double>(a.top_p) * static_cast<double>(total);
      } else if (total < a.count_target) {
        return kNoCut;
      }
    }
    unsigned long long run = pre + excl;
    uint64_t chosen = kNoCut;
    for (int b = b0; b < b_end; ++b) {
      const unsigned long long w = a.mass_mode ? s.u.hist.fx[b] : s.u.hist.count[b];
      const bool reached =
          a.mass_mode ? static_cast<double>(run + w) >= target_mass : run + w >= a.count_target;
      if (reached) {
        chosen = static_cast<uint64_t>(b);
        break;
      }
      run += w;
    }
    // Only the owner of the smallest reaching bin keeps its write.
    const uint64_t bin = BlockMin(chosen, s);
    if (bin == kNoCut) return kNoCut;  // rounding only; unreachable by construction
    if (chosen == bin) {
      s.sel_pre = run;
      s.sel_count = s.u.hist.count[bin];
    }
    __syncthreads();
    pre = s.sel_pre;
    const unsigned int members = s.sel_count;
    const int want = static_cast<int>(bin);

    if (members <= static_cast<unsigned int>(kCap)) {
      // Gather the bin's keys (any order) and sort them.
      if (threadIdx.x == 0) s.num_keys = 0;
      __syncthreads();
      ForEachLogit(row, [&](int i, float l, bool valid) {
        uint64_t key;
        float x;
        const bool member = valid && BinOf(a, lv, l, i, &key, &x) == want;
        const unsigned ballot = __ballot_sync(kFull, member);
        if (ballot == 0) return;
        const int leader = __ffs(ballot) - 1;
        int slot = 0;
        if (Lane() == leader) slot = atomicAdd(&s.num_keys, __popc(ballot));
        slot = __shfl_sync(kFull, slot, leader) + __popc(ballot & ((1u << Lane()) - 1));
        if (member && slot < kCap) s.u.keys[slot] = key;
      });
      __syncthreads();
      const int n = min(s.num_keys, kCap);
      BitonicSort(s.u.keys, n);
      uint64_t cut;
      if (!a.mass_mode) {
        const auto rank = static_cast<int>(a.count_target - pre);  // 1-based, in [1, n]
        cut = s.u.keys[min(max(rank, 1), n) - 1];
      } else {
        // Cumulative masses in rank order: thread t owns kCapPerThread keys.
        double m[kCapPerThread];
        double mine_d = 0.0;
#pragma unroll
        for (int j = 0; j < kCapPerThread; ++j) {
          const int k = threadIdx.x * kCapPerThread + j;
          m[j] = 0.0;
          if (k < n) {
            const float l = Sanitize(row.logits[KeyToken(s.u.keys[k])]);
            m[j] = static_cast<double>(ExpNonPositive(a.fn.Exponent(l))) * a.fx_scale;
          }
          mine_d += m[j];
        }
        double cum = static_cast<double>(pre) + BlockExclusiveScanD(mine_d, s);
        uint64_t first = kNoCut;
#pragma unroll
        for (int j = 0; j < kCapPerThread; ++j) {
          const int k = threadIdx.x * kCapPerThread + j;
          cum += m[j];
          if (first == kNoCut && k < n && cum >= target_mass) first = static_cast<uint64_t>(k);
        }
        first = BlockMin(first, s);
        cut = s.u.keys[first == kNoCut ? n - 1 : static_cast<int>(first)];
      }
      __syncthreads();  // keys are overwritten by the next Select
      return cut;
    }

    // Too many: split the bin's key range again.
    lv = SplitLevel(row, a, lv, want, s);
  }
}

// ---- the draw --------------------------------------------------------------

// Mass of token i in the kept set {unmasked, key <= cut}, else 0.
__device__ __forceinline__ float KeptMass(const Row& row, const MassFn& fn, uint64_t cut, int i) {
  const float l = Sanitize(row.logits[i]);
  if (l == NegInf()) return 0.0f;
  if (cut != kNoCut && RankKey(l, i) > cut) return 0.0f;
  return ExpNonPositive(fn.Exponent(l));
}

// Of [begin, end) split into kWarps equal segments, picks the segment where
// the cumulative mass (from s.base) first exceeds s.target, or in last mode
// (or when rounding leaves the target unreached) the last segment with
// positive mass. Updates s.pick, s.base, s.last_mode. Returns the segment size.
__device__ int PickSegment(const Row& row, const MassFn& fn, uint64_t cut, int begin, int end,
                           double u, bool first_level, Shared& s) {
  const int size = (end - begin + kWarps - 1) / kWarps;
  const int s0 = begin + Warp() * size;
  const int s1 = min(end, s0 + size);
  double acc = 0.0;
  for (int i = s0 + Lane(); i < s1; i += 32) acc += KeptMass(row, fn, cut, i);
  acc = WarpSumD(acc);
  if (Lane() == 0) s.seg[Warp()] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double off = first_level ? 0.0 : s.base;
    if (first_level) {
      double total = 0.0;
#pragma unroll 1
      for (int w = 0; w < kWarps; ++w) total += s.seg[w];
      s.target = u * total;
      s.last_mode = 0;
    }
    int pick = -1, last = -1;
    double pick_base = 0.0, last_base = 0.0;
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) {
      const double end_w = off + s.seg[w];
      if (s.seg[w] > 0.0) {
        last = w;
        last_base = off;
        if (pick < 0 && !s.last_mode && end_w > s.target) {
          pick = w;
          pick_base = off;
        }
      }
      off = end_w;
    }
    if (pick < 0) {
      pick = last;  // -1 only for an all-zero range (cannot happen: the top token has mass 1)
      pick_base = last_base;
      s.last_mode = 1;
    }
    s.pick = pick;
    s.base = pick_base;
  }
  __syncthreads();
  return size;
}

// Inverse CDF over the kept set in ascending id: the first token whose
// cumulative mass exceeds u * total; zero masses are never drawn. Sums are
// hierarchical (kWarps segments, kWarps sub-segments, then a warp scan), each in a
// fixed order.
__device__ __forceinline__ int Draw(const Row row, const MassFn fn, uint64_t cut, double u,
                                    Shared& s) {
  const int size_a = PickSegment(row, fn, cut, 0, row.vocab, u, true, s);
  if (s.pick < 0) return 0;
  const int a0 = s.pick * size_a;
  const int a1 = min(row.vocab, a0 + size_a);
  const int size_b = PickSegment(row, fn, cut, a0, a1, u, false, s);
  if (s.pick < 0) return 0;
  const int c0 = a0 + s.pick * size_b;
  const int c1 = min(a1, c0 + size_b);
  if (Warp() == 0) {
    double base = s.base;
    const double target = s.target;
    const bool last_mode = s.last_mode != 0;
    int found = -1, last = -1;
    for (int i0 = c0; i0 < c1; i0 += 32) {
      const int i = i0 + Lane();
      const float m = i < c1 ? KeptMass(row, fn, cut, i) : 0.0f;
      const double incl = WarpInclusiveScanD(static_cast<double>(m));
      const unsigned hit = __ballot_sync(kFull, !last_mode && m > 0.0f && base + incl > target);
      if (hit != 0) {
        found = i0 + __ffs(hit) - 1;
        break;
      }
      const unsigned positive = __ballot_sync(kFull, m > 0.0f);
      if (positive != 0) last = i0 + 31 - __clz(positive);
      base += __shfl_sync(kFull, incl, 31);
    }
    if (Lane() == 0) s.found = found >= 0 ? found : (last >= 0 ? last : 0);
  }
  __syncthreads();
  return s.found;
}

// The smallest key among tokens with mass < min_p (kNoCut if none). The
// exponent decides far from log(min_p) (ExpNonPositive is within 1e-6 of
// exp there); near it, and below -86 where ExpNonPositive flushes to 0, the
// mass itself does, exactly as the CPU compares it.
__device__ __forceinline__ uint64_t MinPCut(const Row row, const MassFn fn, float min_p,
                                            Shared& s) {
  const float log_min_p = logf(min_p);
  uint64_t best = kNoCut;
  ForEachLogit(row, [&](int i, float l, bool valid) {
    if (!valid) return;
    const float x = fn.Exponent(l);
    bool below;
    if (x < log_min_p - 1e-3f) {
      below = true;
    } else if (x > log_min_p + 1e-3f && x > -86.0f) {
      below = false;
    } else {
      below = ExpNonPositive(x) < min_p;
    }
    if (below) {
      const uint64_t key = RankKey(l, i);
      best = key < best ? key : best;
    }
  });
  return BlockMin(best, s);
}

__device__ __forceinline__ float LogProb(float logit, double log_sum_exp) {
  if (logit == NegInf()) return NegInf();
  return static_cast<float>(static_cast<double>(logit) - log_sum_exp);
}

// Online log-sum-exp pairs (max, sum of exp(l - max)); combining is
// symmetric, so both lanes of a butterfly get the same bits.
__device__ __forceinline__ void LseCombine(float& m, double& sum, float m2, double s2) {
  const float mx = fmaxf(m, m2);
  if (mx == NegInf()) {
    m = mx;
    sum = 0.0;
    return;
  }
  sum = sum * static_cast<double>(expf(m - mx)) + s2 * static_cast<double>(expf(m2 - mx));
  m = mx;
}

__global__ void __launch_bounds__(kThreads, 1)
    SampleKernel(CudaSamplingParams p, bool vec4, double fx_scale) {
  __shared__ Shared s;
  const int r = blockIdx.x;
  const CudaSampleRow rp = p.rows[r];
  const Row row{p.logits + static_cast<int64_t>(r) * p.vocab, p.vocab, vec4};
  float* raw_saved = static_cast<float*>(p.workspace) + static_cast<int64_t>(r) * p.vocab;

  if (threadIdx.x == 0) s.chosen_penalised = 0;
  // 1. Masked tokens first: they are part of the raw distribution.
  for (int e = rp.mask_begin + threadIdx.x; e < rp.mask_end; e += kThreads) {
    const int t = p.masked_tokens[e];
    if (t >= 0 && t < p.vocab) row.logits[t] = NegInf();
  }
  __syncthreads();

  // 2. Raw argmax and log-sum-exp.
  uint64_t best = kNoCut;
  float lse_max = NegInf();
  double lse_sum = 0.0;
  ForEachLogit(row, [&](int i, float l, bool valid) {
    if (!valid) return;
    const uint64_t key = RankKey(l, i);
    best = key < best ? key : best;
    if (l == NegInf()) return;
    if (l > lse_max) {
      lse_sum = lse_sum * static_cast<double>(expf(lse_max - l)) + 1.0;
      lse_max = l;
    } else {
      lse_sum += static_cast<double>(expf(l - lse_max));
    }
  });
  for (int o = 16; o > 0; o >>= 1) {
    LseCombine(lse_max, lse_sum, __shfl_xor_sync(kFull, lse_max, o),
               __shfl_xor_sync(kFull, lse_sum, o));
  }
  if (Lane() == 0) {
    s.red_f[Warp()] = lse_max;
    s.red_d[Warp()] = lse_sum;
  }
  best = BlockMin(best, s);  // its barriers also publish red_f / red_d
  if (Warp() == 0) {
    lse_max = Lane() < kWarps ? s.red_f[Lane()] : NegInf();
    lse_sum = Lane() < kWarps ? s.red_d[Lane()] : 0.0;
    for (int o = 16; o > 0; o >>= 1) {
      LseCombine(lse_max, lse_sum, __shfl_xor_sync(kFull, lse_max, o),
                 __shfl_xor_sync(kFull, lse_sum, o));
    }
    if (Lane() == 0) {
      s.red_f[kWarps] = lse_max;
      s.red_d[kWarps] = lse_sum;
    }
  }
  __syncthreads();
  const float raw_max = Sanitize(row.logits[KeyToken(best)]);
  const double log_sum_exp = s.red_f[kWarps] == NegInf()
                                 ? -HUGE_VAL
                                 : static_cast<double>(s.red_f[kWarps]) + log(s.red_d[kWarps]);
  __syncthreads();  // red_* are reused below

  // 3. Top-N of the raw distribution (rank order), before the penalties.
  const int num_top = min(max(rp.num_logprobs, 0), min(kCudaMaxLogprobs, p.vocab));
  if (num_top > 0) {
    SelectArgs a;
    a.fn = MassFn{raw_max, 1.0f};
    a.all_tail = raw_max == NegInf();
    a.count_target = static_cast<uint64_t>(num_top);
    a.fx_scale = fx_scale;
    const uint64_t cut = Select(row, a, s);
    if (threadIdx.x == 0) s.num_keys = 0;
    __syncthreads();
    ForEachLogit(row, [&](int i, float l, bool valid) {
      if (!valid) return;
      const uint64_t key = RankKey(l, i);
      if (key <= cut) {
        const int slot = atomicAdd(&s.num_keys, 1);
        if (slot < kCudaMaxLogprobs) s.top_keys[slot] = key;
      }
    });
    __syncthreads();
    if (threadIdx.x < num_top) {
      const uint64_t key = s.top_keys[threadIdx.x];
      int rank = 0;
      for (int j = 0; j < num_top; ++j) rank += s.top_keys[j] < key ? 1 : 0;
      const int token = KeyToken(key);
      p.out_top[static_cast<int64_t>(r) * kCudaMaxLogprobs + rank] =
          CudaTokenLogprob{token, LogProb(Sanitize(row.logits[token]), log_sum_exp)};
    }
    __syncthreads();
  }

  // 4. Penalties, in place (tokens are distinct: no two threads share one).
  const bool repetition = rp.repetition_penalty != 1.0f;
  const bool additive = rp.frequency_penalty != 0.0f || rp.presence_penalty != 0.0f;
  const bool penalised = (repetition || additive) && rp.penalty_end > rp.penalty_begin;
  if (penalised) {
    for (int e = rp.penalty_begin + threadIdx.x; e < rp.penalty_end; e += kThreads) {
      const int t = p.penalty_tokens[e];
      if (t < 0 || t >= p.vocab) continue;
      const float raw = Sanitize(row.logits[t]);
      raw_saved[t] = raw;
      float l = raw;
      if (repetition) {
        // Dividing by a penalty < 1 can overflow; kept finite as the CPU does.
        l = l > 0.0f ? fminf(__fdiv_rn(l, rp.repetition_penalty), FLT_MAX)
                     : __fmul_rn(l, rp.repetition_penalty);
      }
      const int count = p.penalty_counts[e];
      if (additive && count > 0) {
        l = __fsub_rn(l, __fmul_rn(rp.frequency_penalty, static_cast<float>(count)));
        l = __fsub_rn(l, rp.presence_penalty);
      }
      row.logits[t] = l;
    }
    __syncthreads();
    uint64_t pen_best = kNoCut;
    ForEachLogit(row, [&](int i, float l, bool valid) {
      if (!valid) return;
      const uint64_t key = RankKey(l, i);
      pen_best = key < pen_best ? key : pen_best;
    });
    best = BlockMin(pen_best, s);
  }
  const float max_logit = Sanitize(row.logits[KeyToken(best)]);

  // 5. The token.
  int token;
  if (rp.temperature < kGreedyTemperature) {
    token = KeyToken(best);  // lowest id among the maxima; 0 when all are -inf
  } else if (max_logit == NegInf()) {
    token = 0;  // everything masked
  } else {
    const MassFn fn{max_logit, __fdiv_rn(1.0f, rp.temperature)};
    const bool top_k_on = rp.top_k >= 1 && rp.top_k < p.vocab;
    uint64_t cut = kNoCut;
    if (top_k_on) {
      SelectArgs a;
      a.fn = MassFn{max_logit, 1.0f};
      a.count_target = static_cast<uint64_t>(rp.top_k);
      a.skip_masked = true;
      a.fx_scale = fx_scale;
      cut = Select(row, a, s);
    }
    if (rp.top_p < 1.0f) {
      SelectArgs a;
      a.fn = fn;
      a.mass_mode = true;
      a.top_p = rp.top_p;
      a.skip_masked = true;
      a.key_limit = cut;  // top-p is relative to the top-k survivors
      a.fx_scale = fx_scale;
      const uint64_t top_p_cut = Select(row, a, s);
      cut = top_p_cut < cut ? top_p_cut : cut;
    }
    if (rp.min_p > 0.0f) {
      // The top token has mass 1 >= min_p, so a cut key is never the first.
      const uint64_t below = MinPCut(row, fn, rp.min_p, s);
      if (below != kNoCut && below - 1 < cut) cut = below - 1;
    }
    token = Draw(row, fn, cut, CounterUniform(rp.seed, rp.output_index), s);
  }

  // 6. The chosen token's raw logprob (its saved value if it was penalised).
  if (penalised) {
    for (int e = rp.penalty_begin + threadIdx.x; e < rp.penalty_end; e += kThreads) {
      if (p.penalty_tokens[e] == token) s.chosen_penalised = 1;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const float raw = s.chosen_penalised != 0 ? raw_saved[token] : Sanitize(row.logits[token]);
    p.out_tokens[r] = token;
    p.out_logprobs[r] = LogProb(raw, log_sum_exp);
  }
}

int BitWidth(uint32_t v) {
  int w = 0;
  while (v != 0) {
    ++w;
    v >>= 1;
  }
  return w;
}

}  // namespace

size_t SamplingWorkspaceBytes(int num_rows, int vocab) {
  if (num_rows <= 0 || vocab <= 0) return 0;
  // The raw logit of each penalised token, token-indexed per row.
  return static_cast<size_t>(num_rows) * static_cast<size_t>(vocab) * sizeof(float);
}

cudaError_t SampleRows(const CudaSamplingParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.vocab <= 0) return cudaErrorInvalidValue;
  if (p.num_rows == 0) return cudaSuccess;
  if (p.logits == nullptr || p.rows == nullptr || p.out_tokens == nullptr ||
      p.out_logprobs == nullptr || p.out_top == nullptr || p.workspace == nullptr ||
      p.workspace_bytes < SamplingWorkspaceBytes(p.num_rows, p.vocab)) {
    return cudaErrorInvalidValue;
  }
  // Fixed-point masses: each <= 2^fx_bits, so a row sums below 2^63.
  const int fx_bits = 63 - BitWidth(static_cast<uint32_t>(p.vocab));
  const double fx_scale = std::ldexp(1.0, fx_bits);
  const bool vec4 = p.vocab % 4 == 0 && (reinterpret_cast<uintptr_t>(p.logits) & 15) == 0;
  SampleKernel<<<static_cast<unsigned>(p.num_rows), kThreads, 0, stream>>>(p, vec4, fx_scale);
  return cudaGetLastError();
}

}  // namespace kvserve::kernels::cuda
