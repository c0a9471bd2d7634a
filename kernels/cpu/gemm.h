// Matrix products y = x · Wᵀ (+ bias) for linear layers.
//
// W is stored as Hugging Face nn.Linear does, [n, k] row-major, and packed
// once at load time into panels of kGemmPanelWidth output columns:
//   packed[panel][kk][j] = W[panel * 16 + j][kk]      (zero for j past n)
// so one k-step of one panel is 16 consecutive elements: 64 bytes in fp32,
// 32 in bf16 / fp16, 16 in int8 (WeightFormat).
//
// Batch invariance (docs/architecture.md): every y[m][n] is accumulated as
//   acc = 0; for kk in 0..k-1: acc = fma(x[m][kk], w(n, kk), acc)
//   y = acc * scale[n] (int8 only) + bias[n]
// in exactly this order, whatever m, the row tiling, the ISA path or the thread
// count. Work is split across threads by column panels, never across k.
// w(n, kk) is the stored element widened to fp32 in registers: exact for
// bf16 / fp16 (so a 16-bit matrix gives bit for bit the products of its fp32
// widening), the int8 code as a float for int8.
//
// kW8A8 and kBF16Dot are the exceptions: x is converted too (quantized per
// row to int8, or rounded to bf16) and multiplied with dot-product
// instructions, in the orders gemm_dot.h fixes: an exact integer dot product
// then y = float(dot) * (x_scale[m] * scale[n]) + bias[n]; or bf16 pairs,
// odd product first. Neither order depends on m, tiling or threads.
#pragma once

#include <cstdint>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::kernels {

inline constexpr int64_t kGemmPanelWidth = 16;

// How a packed matrix stores its elements.
//   kF32, kBF16, kF16: the values themselves (16-bit ones widened exactly).
//   kInt8: symmetric weight-only quantization, one fp32 scale per output
//          channel: W[n][kk] ~ q[n][kk] * scale[n], q in [-127, 127].
//   kW8A8: int8 codes and per-channel scales of W rotated along k (below),
//          stored for int8 dot products (VNNI order: four consecutive k of
//          one column side by side, packed[panel][kk / 4][j][kk % 4], k padded
//          with zeros to a multiple of 4); the activations are rotated the
//          same way and quantized per row at run time.
//          The rotation: each block of HadamardBlock(k) consecutive k is
//          multiplied by H, the normalized Walsh-Hadamard matrix
//          (kernels::RotateHeads with one head of k values). H is symmetric
//          and orthogonal, so (W H)(H x) = W x; rotated, an activation's
//          outlier channels (real models have a few, 10-100x the rest) share
//          their magnitude with the block instead of setting the row's
//          scale alone (docs/engine.md has the effect on real models).
//   kBF16Dot: bf16 (subnormals flushed to zero), two consecutive k of one
//          column side by side (packed[panel][kk / 2][j][kk % 2], k padded to
//          even); x is rounded to bf16 too and the products are bf16 dot
//          products (vdpbf16ps), not fp32 FMAs.
enum class WeightFormat : uint8_t { kF32, kBF16, kF16, kInt8, kW8A8, kBF16Dot };
const char* WeightFormatName(WeightFormat format);
int64_t WeightFormatBytes(WeightFormat format);  // bytes per element

struct PackedMatrix {
  int64_t n = 0;  // output features (rows of W)
  int64_t k = 0;  // input features
  WeightFormat format = WeightFormat::kF32;
  // ceil(n / 16) * k * 16 elements of `format` (the buffer counts 4-byte
  // words; 16-bit and int8 elements are packed two and four to a word).
  AlignedBuffer data;
  AlignedBuffer scales;  // kInt8, kW8A8: ceil(n / 16) * 16 (0 past n); else empty
  // kW8A8: per column, sum over k of its codes, as int32 words (0 past n);
  // the VNNI kernel's unsigned-activation correction (gemm_dot.h).
  AlignedBuffer code_sums;

  template <class T>
  const T* As() const {
    return reinterpret_cast<const T*>(data.data());
  }
  // Bytes of elements and scales (what a product streams).
  int64_t StorageBytes() const {
    return static_cast<int64_t>((data.size() + scales.size() + code_sums.size()) * sizeof(float));
  }
  // W[row][0..k) as the kernels see it (widened; int8 times its scale,
  // one fp32 product per element; kW8A8 rotated back by H) into out[k].
  void ReadRow(int64_t row, float* out) const;
};

// Packs row-major fp32 w[n][k] into `format`: kF32 as is, kBF16 / kF16 rounded
// to nearest even, kInt8 and kW8A8 quantized per output channel (scale =
// max|row| / 127, codes rounded to nearest; kW8A8 of the rotated rows).
PackedMatrix PackWeights(const float* w, int64_t n, int64_t k,
                         WeightFormat format = WeightFormat::kF32);
// Packs row-major 16-bit w[n][k] without widening: bf16 bit patterns for
// kBF16 and kBF16Dot, fp16 for kF16. w may be unaligned (a memory-mapped
// checkpoint).
PackedMatrix PackWeights16(const void* w, int64_t n, int64_t k, WeightFormat format);

struct GemmParams {
  const float* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  const PackedMatrix* w = nullptr;
  const float* bias = nullptr;  // [n] or nullptr
  float* y = nullptr;           // [m, n], row stride ldy
  int64_t ldy = 0;
  int64_t m = 0;
};

// Runs on ActiveIsa(). pool == nullptr runs on the calling thread alone.
// (The scalar path, for CPUs without AVX2, is correct but slow.)
void Gemm(const GemmParams& p, ThreadPool* pool);

// Gemm on an explicit ISA path (tests compare paths bit for bit; benchmarks).
// An isa the CPU lacks falls back to DetectedIsa().
void GemmWithIsa(const GemmParams& p, CpuIsa isa, ThreadPool* pool);

}  // namespace kvserve::kernels
