// PagedAttentionPrefill: FlashAttention-2 style paged attention on tensor
// cores (mma.sync m16n8k16, fp16/bf16 in, fp32 accumulate) for query chunks.
//
// Work split. One CTA (4 warps) per (kv head, sequence, tile of kRows query
// rows). The rows of a CTA are the sequence's (token, query head) pairs of one
// GQA group, packed token-major:
//
//   row r of the sequence  ->  token r / G, query head kv_head * G + r % G
//
// so every K/V tile a CTA loads serves all G heads of the group. For long
// prompts this costs the same as one CTA per query head (kRows rows per K/V
// tile either way); for short chunks (decode tokens, which this kernel also
// runs when the batch has a longer chunk) it reads each K/V tile once per
// group instead of once per head, and a 1-token chunk fills G rows instead
// of 1. A warp owns 16 * kMTiles consecutive rows and skips the arithmetic
// when all of them are past the chunk.
//
// Keys. A CTA whose tokens sit at positions pos_first..pos_last (ascending)
// needs keys lo_first..pos_last, lo_first = max(0, pos_first - window + 1).
// It walks key tiles of kKeys, aligned to absolute position 0, from the one
// holding pos_last down to the one holding lo_first:
//
//   keys   [tile n_lo ] ... [tile n_hi]
//            ^lo_first            ^pos_last
//   loaded:  lo_first .......... pos_last  (cp.async, 16 B per copy)
//   zeroed:  the rest of the first and last tile (never read from memory:
//            those slots may be NaN, unowned or not yet written)
//
// A tile that some row must not fully see (it reaches past pos_first, or
// starts before the last token's window start) is masked per element with
// -inf by select; every other tile is used as is. Zeroed K rows give finite
// scores that the mask removes, zeroed V rows meet weights of exactly 0.
//
// Pipeline. Two K/V buffers: the copies of the next tile are issued right
// after the barrier that starts the current one, so they land during its
// arithmetic.
// Shared memory rows are padded by 16 bytes (an odd number of 16-byte chunks
// per row), which makes every ldmatrix (8 rows, same column) conflict free.
//
// Softmax. Per row, in fp32 and base 2: m = running max of score * scale *
// log2(e), l = running sum of exp2(score * scale * log2e - m), O rescaled by
// exp2(m_old - m_new). P is rounded to the storage type for the P.V product;
// l sums the unrounded weights (as FlashAttention does).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/kv_codec.cuh"
#include "kernels/cuda/paged_attention.h"

namespace kvserve::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

// Tile shapes per head dimension. Head dims up to 128 give each warp 32
// query rows (two m16 tiles share every K/V fragment read from shared
// memory, which keeps ldmatrix traffic below the tensor-core rate); 256 has
// room in registers for one m16 tile and 32-key tiles only.
template <int D>
struct PrefillShape {
  static_assert(D % 16 == 0, "head dim must be a multiple of 16");
  static constexpr int kMTiles = D <= 128 ? 2 : 1;     // m16 tiles per warp
  static constexpr int kRows = kWarps * 16 * kMTiles;  // query rows per CTA
  static constexpr int kKeys = D <= 128 ? 64 : 32;     // keys per tile
  // Unroll of the Q K^T k-loop: fully unrolled, ptxas hoists every
  // fragment load and head dim 128 (255 registers) spills; one step at a
  // time it does not, and the other warps are left to hide the ldmatrix
  // latency (a tuning knob, not yet measured).
  static constexpr int kQkUnroll = D == 128 ? 1 : D / 16;
  static constexpr int kStride = D + 8;  // smem row, elements
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kLanes = kChunks <= 8 ? 8 : (kChunks <= 16 ? 16 : 32);  // copy lanes per row
  static constexpr int kRowsPerPass = kThreads / kLanes;
  static_assert(kRows % kRowsPerPass == 0 && kKeys % kRowsPerPass == 0);
  static constexpr int kQElems = kRows * kStride;
  static constexpr int kKvElems = kKeys * kStride;  // one K or V buffer
  static constexpr size_t kSmemBytes = sizeof(uint16_t) * (kQElems + 4 * kKvElems);
};

struct PrefillArgs {
  const void* q;
  int64_t q_stride;
  void* out;
  const void* k_cache;
  const void* v_cache;
  const float* k_scales;  // scaled KV formats only
  const float* v_scales;
  const int32_t* token_pos;
  const int32_t* query_start;
  const int32_t* block_table_start;
  const int32_t* block_ids;
  int num_heads;
  int num_kv_heads;
  int group;  // num_heads / num_kv_heads
  int block_size;
  // j / block_size == (umulhi(j, block_magic) + j) >> block_log for 0 <= j < 2^31.
  unsigned block_magic;
  int block_log;
  int window;  // sliding window; INT_MAX when unlimited
  float scale_log2;
  // Soft-capping: scores become softcap * tanh(score * softcap_scale) with
  // softcap_scale = scale / softcap, and scale_log2 is then log2(e) alone.
  float softcap;  // 0: none
  float softcap_scale;
};

// ---- PTX wrappers. ldmatrix/cp.async are volatile so they stay between the
// barriers and cp.async waits that order them. ----

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; with valid == false nothing is read and the
// destination is zero-filled.
__device__ __forceinline__ void CpAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void LdMatrixX4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b for one m16n8k16 tile (a: 16x16 row-major, b: 16x8 col-major).
template <typename T>
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a packed pair of T, `lo` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<const uint32_t*>(&v);
  }
  return r;
}

__device__ __forceinline__ float Exp2(float x) {  // exp2(-inf) = +0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The KV format whose rows are T itself (the cp.async path).
template <typename T>
constexpr KvDtype kNativeKv =
    std::is_same_v<T, __nv_bfloat16> ? KvDtype::kBfloat16 : KvDtype::kFloat16;

// Other formats (fp8_e4m3, int8, int4, fp4_e2m1, or the other 16-bit type):
// where the cp.async path issues the next tile's copies (right after the
// barrier that starts a tile), the tile loader reads each row's 8-element
// chunks (KvChunk<F>, 16 / 8 / 4 bytes) into registers, decodes them and
// stores them as T where the cp.async path would have put T rows. For the
// scaled formats the tile holds the codes, which T represents exactly (int8
// and int4 integers, e4m3 and e2m1 values), and the rows' scales go to
// shared memory beside it: score column j is multiplied by K's scale of key
// j after Q K^T (q . (c s) = (q . c) s, in fp32), and the weight p of key j
// by V's scale before P is rounded to T for P V (p (c s) = (p s) c), while
// l sums the unscaled p. So K and V enter the MMAs without a rounding of
// their own (decoding c * s to bf16 would cost 2^-9 of every element); the
// other 16-bit type is converted to T (rounding fp16 -> bf16). No
// dequantized copy of the cache exists outside this CTA's shared memory.
//
// Holding the raw chunks across the tile's arithmetic (to overlap the loads
// as cp.async does) spills at head dims 80-128 (ptxas, seen at build), so
// the loads' latency is hidden only by the other warps and the second
// resident CTA: not tuned, not measured (no GPU).
template <typename T, KvDtype F, int D>
__global__ void __launch_bounds__(kThreads, 2) PrefillKernel(const PrefillArgs a) {
  using S = PrefillShape<D>;
  constexpr bool kNative = F == kNativeKv<T>;
  using Cv = KvChunk<F>;
  using Chunk = typename Cv::Chunk;
  static_assert(kNative || Cv::kVec == 8, "a T chunk of the tile is 8 elements");
  constexpr int kLoadIters = S::kKeys / S::kRowsPerPass;
  constexpr bool kScaled = Cv::kScaled;
  // [buffer][K, V][key of the tile]: the scaled formats' row scales.
  __shared__ float kv_scale[kScaled ? 2 : 1][2][kScaled ? S::kKeys : 1];
  constexpr int kMT = S::kMTiles;
  constexpr int kNT = S::kKeys / 8;  // n8 score tiles per row block
  constexpr int kDT = D / 8;         // n8 output tiles per row block
  extern __shared__ __align__(16) unsigned char smem[];
  T* const sq = reinterpret_cast<T*>(smem);  // [kRows][kStride]; later the output
  T* const sk = sq + S::kQElems;             // [2][kKeys][kStride]
  T* const sv = sk + 2 * S::kKvElems;        // [2][kKeys][kStride]

  // ---- Which rows and keys this CTA owns (uniform across the CTA). ----
  const int kv_head = blockIdx.x;
  const int seq = blockIdx.y;
  const int row0 = (gridDim.z - 1 - blockIdx.z) * S::kRows;  // heaviest tiles first
  const int q0 = a.query_start[seq];
  const int num_rows = (a.query_start[seq + 1] - q0) * a.group;
  if (row0 >= num_rows) return;
  const int rows_here = min(S::kRows, num_rows - row0);
  const int pos_first = a.token_pos[q0 + row0 / a.group];
  const int pos_last = a.token_pos[q0 + (row0 + rows_here - 1) / a.group];
  const int kv_end = pos_last + 1;
  const int lo_first = max(0, pos_first - a.window + 1);
  const int lo_last = max(0, pos_last - a.window + 1);
  const int n_lo = lo_first / S::kKeys;
  const int n_hi = (kv_end - 1) / S::kKeys;

  const T* const q = static_cast<const T*>(a.q);
  const T* const kc = static_cast<const T*>(a.k_cache);
  const T* const vc = static_cast<const T*>(a.v_cache);
  const int32_t* const table = a.block_ids + a.block_table_start[seq];

  // Copies: kLanes threads per smem row (lanes past kChunks idle), so each
  // thread keeps one column and steps by whole rows.
  const int ld_row = threadIdx.x / S::kLanes, ld_col = threadIdx.x % S::kLanes;
  const bool ld_lane = ld_col < S::kChunks;

  // Q rows past the chunk are zero-filled; their results are never stored.
#pragma unroll
  for (int it = 0; it < S::kRows / S::kRowsPerPass; ++it) {
    const int r = ld_row + it * S::kRowsPerPass;
    const bool valid = r < rows_here;
    const T* src = q;
    if (valid) {
      const int t = (row0 + r) / a.group, g = (row0 + r) - t * a.group;
      src = q + (q0 + t) * a.q_stride + int64_t{kv_head * a.group + g} * D + ld_col * 8;
    }
    if (ld_lane) CpAsync16(SmemAddr(sq + r * S::kStride + ld_col * 8), src, valid);
  }

  // Copies key tile n into buffer `buf`; keys outside lo_first..pos_last are
  // zero-filled without touching their (possibly unowned) pages.
  const uint32_t ld_dst = SmemAddr(sk) + (ld_row * S::kStride + ld_col * 8) * 2;
  auto load_kv = [&](int n, int buf) {
    if (!ld_lane) return;
    const int key0 = n * S::kKeys + ld_row;
    const uint32_t dst = ld_dst + buf * S::kKvElems * 2;
#pragma unroll
    for (int it = 0; it < S::kKeys / S::kRowsPerPass; ++it) {
      const int j = key0 + it * S::kRowsPerPass;
      const bool valid = j >= lo_first && j < kv_end;
      int64_t off = 0;
      if (valid) {
        const int blk = static_cast<int>((__umulhi(j, a.block_magic) + j) >> a.block_log);
        const int slot = j - blk * a.block_size;
        const int64_t id = __ldg(table + blk);
        off = ((id * a.num_kv_heads + kv_head) * a.block_size + slot) * D + ld_col * 8;
      }
      const uint32_t row_dst = dst + it * S::kRowsPerPass * S::kStride * 2;
      CpAsync16(row_dst, kc + off, valid);
      CpAsync16(row_dst + 2 * S::kKvElems * 2, vc + off, valid);
    }
  };
  // The other formats' load_kv: registers, decode, shared memory.
  auto load_encoded = [&](int n, int buf) {
    if (!ld_lane) return;
    const int key0 = n * S::kKeys + ld_row;
#pragma unroll
    for (int it = 0; it < kLoadIters; ++it) {
      const int j = key0 + it * S::kRowsPerPass;
      Chunk kr{}, vr{};
      float ks = 0.0f, vs = 0.0f;  // keys outside lo_first..pos_last: zeros, no read
      if (j >= lo_first && j < kv_end) {
        const int blk = static_cast<int>((__umulhi(j, a.block_magic) + j) >> a.block_log);
        const int slot = j - blk * a.block_size;
        const int64_t id = __ldg(table + blk);
        const int64_t row = (id * a.num_kv_heads + kv_head) * a.block_size + slot;
        kr = __ldg(static_cast<const Chunk*>(a.k_cache) + row * S::kChunks + ld_col);
        vr = __ldg(static_cast<const Chunk*>(a.v_cache) + row * S::kChunks + ld_col);
        if constexpr (Cv::kScaled) {
          ks = __ldg(a.k_scales + row);
          vs = __ldg(a.v_scales + row);
        }
      }
      const int e = buf * S::kKvElems + (ld_row + it * S::kRowsPerPass) * S::kStride + ld_col * 8;
#pragma unroll
      for (int kv = 0; kv < 2; ++kv) {
        float f[8];
        Cv::Decode(kv == 0 ? kr : vr, f);  // codes (exact in T) for the scaled formats
        *reinterpret_cast<uint4*>((kv == 0 ? sk : sv) + e) = make_uint4(
            Pack<T>(f[0], f[1]), Pack<T>(f[2], f[3]), Pack<T>(f[4], f[5]), Pack<T>(f[6], f[7]));
      }
      if constexpr (kScaled) {
        if (ld_col == 0) {  // one lane per row; 0 for keys outside the range
          kv_scale[buf][0][ld_row + it * S::kRowsPerPass] = ks;
          kv_scale[buf][1][ld_row + it * S::kRowsPerPass] = vs;
        }
      }
    }
  };
  if constexpr (kNative) {
    load_kv(n_hi, 0);
  } else {
    load_encoded(n_hi, 0);
  }
  CpAsyncCommit();  // group: Q and the first K/V tile

  // Position of each row for the mask (read in masked tiles only, so it
  // lives in shared memory, not registers); -1 past the chunk: all masked.
  __shared__ int row_pos[S::kRows];
  for (int r = threadIdx.x; r < S::kRows; r += kThreads) {
    row_pos[r] = r < rows_here ? a.token_pos[q0 + (row0 + r) / a.group] : -1;
  }

  // ---- Per-thread row state. Thread (warp w, lane) holds rows
  // w * 16 * kMT + i * 16 + lane / 4 + 8 * h of the CTA (i < kMT, h < 2). ----
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row0 = warp * 16 * kMT;
  const bool warp_active = warp_row0 < rows_here;
  float o[kMT][kDT][4];
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int d = 0; d < kDT; ++d) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.0f;
    row_max[i][0] = row_max[i][1] = -INFINITY;
    row_sum[i][0] = row_sum[i][1] = 0.0f;
  }

  // ldmatrix lane addresses (bytes). A (Q) and trans-B (V): lane l points at
  // row l % 16, column 8 * (l / 16). B (K): row l % 8 + 8 * (l / 16), column
  // 8 * ((l / 8) % 2).
  constexpr int kRowBytes = S::kStride * 2;
  const uint32_t q_addr = SmemAddr(sq) + (warp_row0 + lane % 16) * kRowBytes + (lane / 16) * 16;
  const uint32_t k_addr =
      SmemAddr(sk) + (lane % 8 + 8 * (lane / 16)) * kRowBytes + ((lane / 8) % 2) * 16;
  const uint32_t v_addr = SmemAddr(sv) + (lane % 16) * kRowBytes + (lane / 16) * 16;

  for (int n = n_hi, buf = 0; n >= n_lo; --n, buf ^= 1) {
    CpAsyncWaitAll();
    __syncthreads();  // tile n visible to all; everyone is done with tile n + 1's buffer
    if (n > n_lo) {
      if constexpr (kNative) {
        load_kv(n - 1, buf ^ 1);
      } else {
        load_encoded(n - 1, buf ^ 1);  // visible after the next barrier
      }
    }
    CpAsyncCommit();
    if (!warp_active) continue;
    const uint32_t kb_addr = k_addr + buf * S::kKvElems * 2;
    const uint32_t vb_addr = v_addr + buf * S::kKvElems * 2;

    // S = Q K^T.
    float s[kMT][kNT][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
#pragma unroll
      for (int t = 0; t < kNT; ++t) s[i][t][0] = s[i][t][1] = s[i][t][2] = s[i][t][3] = 0.0f;
    }
#pragma unroll S::kQkUnroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int i = 0; i < kMT; ++i) LdMatrixX4(q_addr + i * 16 * kRowBytes + kk * 32, qa[i]);
#pragma unroll
      for (int nn = 0; nn < kNT / 2; ++nn) {
        uint32_t kb[4];
        LdMatrixX4(kb_addr + nn * 16 * kRowBytes + kk * 32, kb);
#pragma unroll
        for (int i = 0; i < kMT; ++i) {
          Mma<T>(s[i][2 * nn], qa[i], kb[0], kb[1]);
          Mma<T>(s[i][2 * nn + 1], qa[i], kb[2], kb[3]);
        }
      }
    }

    if constexpr (kScaled) {  // score column j times K's scale of key j
#pragma unroll
      for (int t = 0; t < kNT; ++t) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float ks = kv_scale[buf][0][t * 8 + (lane % 4) * 2 + e];
#pragma unroll
          for (int i = 0; i < kMT; ++i) {
            s[i][t][e] *= ks;
            s[i][t][e + 2] *= ks;
          }
        }
      }
    }

    if (a.softcap > 0.0f) {  // uniform per call
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[i][t][e] = a.softcap * tanhf(s[i][t][e] * a.softcap_scale);
        }
      }
    }

    // Mask: key j is visible to a row at position p iff 0 <= p - j < window.
    const int key0 = n * S::kKeys;
    if (key0 + S::kKeys - 1 > pos_first || key0 < lo_last) {
#pragma unroll
      for (int i = 0; i < kMT; ++i) {
        const int* pos = row_pos + warp_row0 + i * 16 + lane / 4;
        const int pos_h[2] = {pos[0], pos[8]};
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int j = key0 + t * 8 + (lane % 4) * 2 + (e & 1);
            const bool visible =
                static_cast<unsigned>(pos_h[e >> 1] - j) < static_cast<unsigned>(a.window);
            s[i][t][e] = visible ? s[i][t][e] : -INFINITY;
          }
        }
      }
    }

    // Online softmax. The weights P, rounded to T, are packed straight into
    // A operands for P V: the accumulator layout of two adjacent n8 score
    // tiles is the A layout of one k16 step (half h of a row pair lands in
    // registers h and h + 2).
    uint32_t pa[kMT][S::kKeys / 16][4];
#pragma unroll
    for (int i = 0; i < kMT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int t = 0; t < kNT; ++t) mx = fmaxf(mx, fmaxf(s[i][t][2 * h], s[i][t][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(row_max[i][h], mx * a.scale_log2);
        // A row with nothing visible yet keeps weights 0 and no NaN.
        const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
        const float corr = Exp2(row_max[i][h] - m_ref);
        row_max[i][h] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int t = 0; t < kNT; ++t) {
          const float p0 = Exp2(fmaf(s[i][t][2 * h], a.scale_log2, -m_ref));
          const float p1 = Exp2(fmaf(s[i][t][2 * h + 1], a.scale_log2, -m_ref));
          sum += p0 + p1;
          if constexpr (kScaled) {  // P V with V's codes: weight times V's scale
            const int col = t * 8 + (lane % 4) * 2;
            pa[i][t / 2][h + 2 * (t % 2)] =
                Pack<T>(p0 * kv_scale[buf][1][col], p1 * kv_scale[buf][1][col + 1]);
          } else {
            pa[i][t / 2][h + 2 * (t % 2)] = Pack<T>(p0, p1);
          }
        }
        row_sum[i][h] = row_sum[i][h] * corr + sum;  // per-thread partial; reduced at the end
#pragma unroll
        for (int d = 0; d < kDT; ++d) {
          o[i][d][2 * h] *= corr;
          o[i][d][2 * h + 1] *= corr;
        }
      }
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < S::kKeys / 16; ++kk) {
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t vb[4];
        LdMatrixX4Trans(vb_addr + kk * 16 * kRowBytes + dd * 32, vb);
#pragma unroll
        for (int i = 0; i < kMT; ++i) {
          Mma<T>(o[i][2 * dd], pa[i][kk], vb[0], vb[1]);
          Mma<T>(o[i][2 * dd + 1], pa[i][kk], vb[2], vb[3]);
        }
      }
    }
  }
  if (!warp_active) return;

  // ---- Epilogue: normalise, stage in this warp's own Q rows (no other warp
  // reads them), then 16-byte stores of whole rows. ----
  __syncwarp();  // the warp's last ldmatrix of its Q rows precedes these writes (racecheck)
#pragma unroll
  for (int i = 0; i < kMT; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[i][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int r = warp_row0 + i * 16 + lane / 4 + 8 * h;
#pragma unroll
      for (int d = 0; d < kDT; ++d) {
        *reinterpret_cast<uint32_t*>(sq + r * S::kStride + d * 8 + (lane % 4) * 2) =
            Pack<T>(o[i][d][2 * h] * inv, o[i][d][2 * h + 1] * inv);
      }
    }
  }
  __syncwarp();
  T* const out = static_cast<T*>(a.out);
  for (int c = lane; c < 16 * kMT * S::kChunks; c += 32) {
    const int r = warp_row0 + c / S::kChunks, col = c % S::kChunks;
    if (r >= rows_here) break;  // rows grow with c
    const int t = (row0 + r) / a.group, g = (row0 + r) - t * a.group;
    T* dst = out + (int64_t{q0 + t} * a.num_heads + kv_head * a.group + g) * D + col * 8;
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(sq + r * S::kStride + col * 8);
  }
}

template <typename T, KvDtype F, int D>
cudaError_t LaunchPrefill(const CudaPagedAttentionParams& p, const PrefillArgs& args,
                          cudaStream_t stream) {
  using S = PrefillShape<D>;
  const int64_t tiles = (int64_t{p.max_query_len} * args.group + S::kRows - 1) / S::kRows;
  if (tiles > 65535 || p.num_seqs > 65535) return cudaErrorInvalidValue;
  const auto kernel = PrefillKernel<T, F, D>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(S::kSmemBytes));
  if (err != cudaSuccess) return err;
  const dim3 grid(p.num_kv_heads, p.num_seqs, static_cast<unsigned>(tiles));
  kernel<<<grid, kThreads, S::kSmemBytes, stream>>>(args);
  return cudaGetLastError();
}

template <typename T, KvDtype F>
cudaError_t DispatchHeadDim(const CudaPagedAttentionParams& p, const PrefillArgs& args,
                            cudaStream_t stream) {
  switch (p.head_dim) {
    case 64:
      return LaunchPrefill<T, F, 64>(p, args, stream);
    case 80:
      return LaunchPrefill<T, F, 80>(p, args, stream);
    case 96:
      return LaunchPrefill<T, F, 96>(p, args, stream);
    case 128:
      return LaunchPrefill<T, F, 128>(p, args, stream);
    case 256:
      return LaunchPrefill<T, F, 256>(p, args, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t DispatchFormat(KvDtype f, const CudaPagedAttentionParams& p, const PrefillArgs& args,
                           cudaStream_t stream) {
  switch (f) {
    case KvDtype::kBfloat16:
      return DispatchHeadDim<T, KvDtype::kBfloat16>(p, args, stream);
    case KvDtype::kFloat16:
      return DispatchHeadDim<T, KvDtype::kFloat16>(p, args, stream);
    case KvDtype::kFp8E4m3:
      return DispatchHeadDim<T, KvDtype::kFp8E4m3>(p, args, stream);
    case KvDtype::kInt8:
      return DispatchHeadDim<T, KvDtype::kInt8>(p, args, stream);
    case KvDtype::kInt4:
      return DispatchHeadDim<T, KvDtype::kInt4>(p, args, stream);
    case KvDtype::kFp4E2m1:
      return DispatchHeadDim<T, KvDtype::kFp4E2m1>(p, args, stream);
    case KvDtype::kFloat32:  // an fp32 cache under 16-bit activations: split-KV only
      break;
  }
  return cudaErrorInvalidValue;
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

cudaError_t PagedAttentionPrefill(const CudaPagedAttentionParams& p, cudaStream_t stream) {
  if (p.dtype != ElemType::kF16 && p.dtype != ElemType::kBF16) return cudaErrorInvalidValue;
  const int d = p.head_dim;
  if (d != 64 && d != 80 && d != 96 && d != 128 && d != 256) return cudaErrorInvalidValue;
  if (p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.block_size < 1 || p.block_size > 64 || p.sliding_window < 0 || p.num_tokens < 0 ||
      p.num_seqs < 0 || p.max_query_len < 0 || !(p.scale > 0.0f) || !std::isfinite(p.scale) ||
      !(p.softcap >= 0.0f) || !std::isfinite(p.softcap)) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0 || p.num_seqs == 0 || p.max_query_len == 0) return cudaSuccess;
  if (p.q == nullptr || p.out == nullptr || p.k_cache == nullptr || p.v_cache == nullptr ||
      p.token_pos == nullptr || p.query_start == nullptr || p.block_table_start == nullptr ||
      p.block_ids == nullptr) {
    return cudaErrorInvalidValue;
  }
  // 16-byte copies of whole rows.
  if (!Aligned16(p.q) || !Aligned16(p.out) || !Aligned16(p.k_cache) || !Aligned16(p.v_cache) ||
      p.q_stride % 8 != 0 || p.q_stride < int64_t{p.num_heads} * d) {
    return cudaErrorInvalidValue;
  }
  PrefillArgs args;
  args.q = p.q;
  args.q_stride = p.q_stride;
  args.out = p.out;
  args.k_cache = p.k_cache;
  args.v_cache = p.v_cache;
  args.k_scales = p.k_scales;
  args.v_scales = p.v_scales;
  args.token_pos = p.token_pos;
  args.query_start = p.query_start;
  args.block_table_start = p.block_table_start;
  args.block_ids = p.block_ids;
  args.num_heads = p.num_heads;
  args.num_kv_heads = p.num_kv_heads;
  args.group = p.num_heads / p.num_kv_heads;
  args.block_size = p.block_size;
  int log = 0;
  while ((1 << log) < p.block_size) ++log;
  args.block_log = log;
  args.block_magic = static_cast<unsigned>(
      ((uint64_t{1} << 32) * ((uint64_t{1} << log) - p.block_size)) / p.block_size + 1);
  args.window = p.sliding_window > 0 ? p.sliding_window : INT_MAX;
  args.scale_log2 = p.softcap > 0.0f ? kLog2e : p.scale * kLog2e;
  args.softcap = p.softcap;
  args.softcap_scale = p.softcap > 0.0f ? p.scale / p.softcap : 0.0f;
  const KvDtype format = ResolveKvDtype(p.dtype, p.kv_dtype);
  if (KvHasScale(format) && (p.k_scales == nullptr || p.v_scales == nullptr)) {
    return cudaErrorInvalidValue;
  }
  return p.dtype == ElemType::kBF16 ? DispatchFormat<__nv_bfloat16>(format, p, args, stream)
                                    : DispatchFormat<__half>(format, p, args, stream);
}

}  // namespace kvserve::kernels::cuda
