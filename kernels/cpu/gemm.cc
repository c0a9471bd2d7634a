#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm_dot.h"
#include "kernels/cpu/gemm_internal.h"
#include "kernels/cpu/half_float.h"
#include "kernels/cpu/kv_quant.h"

namespace kvserve::kernels {
namespace {

// A thread's share should be worth waking it for.
constexpr int64_t kMinFmasPerChunk = int64_t{64} * 1024;

}  // namespace

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "float32";
    case WeightFormat::kBF16:
      return "bfloat16";
    case WeightFormat::kF16:
      return "float16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kW8A8:
      return "w8a8";
    case WeightFormat::kBF16Dot:
      return "bfloat16-dot";
  }
  return "?";
}

int64_t WeightFormatBytes(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
    case WeightFormat::kBF16Dot:
      return 2;
    case WeightFormat::kInt8:
    case WeightFormat::kW8A8:
      return 1;
  }
  return 4;
}

void PackedMatrix::ReadRow(int64_t row, float* out) const {
  if (format == WeightFormat::kW8A8) {
    const int64_t depth = internal::W8A8Depth(k);
    for (int64_t kk = 0; kk < k; ++kk) {
      const int8_t code = As<int8_t>()[internal::DotElementIndex(row, kk, depth, 4)];
      out[kk] = static_cast<float>(code) * scales[row];
    }
    RotateHeads(out, k, 1, 1, k, nullptr);  // H is its own inverse
    return;
  }
  if (format == WeightFormat::kBF16Dot) {
    const int64_t depth = internal::Bf16DotDepth(k);
    for (int64_t kk = 0; kk < k; ++kk) {
      out[kk] = BF16ToF32(As<uint16_t>()[internal::DotElementIndex(row, kk, depth, 2)]);
    }
    return;
  }
  const int64_t base = (row / kGemmPanelWidth) * k * kGemmPanelWidth + row % kGemmPanelWidth;
  for (int64_t kk = 0; kk < k; ++kk) {
    const int64_t i = base + kk * kGemmPanelWidth;
    switch (format) {
      case WeightFormat::kF32:
        out[kk] = As<float>()[i];
        break;
      case WeightFormat::kBF16:
        out[kk] = BF16ToF32(As<uint16_t>()[i]);
        break;
      case WeightFormat::kF16:
        out[kk] = F16ToF32(As<uint16_t>()[i]);
        break;
      case WeightFormat::kInt8:
        out[kk] = static_cast<float>(As<int8_t>()[i]) * scales[row];
        break;
      case WeightFormat::kW8A8:
      case WeightFormat::kBF16Dot:
        break;  // handled above
    }
  }
}

namespace {

// An empty matrix of `format` with zeroed storage for n x k (padding panels
// columns stay zero).
PackedMatrix Allocate(int64_t n, int64_t k, WeightFormat format) {
  PackedMatrix packed;
  packed.n = n;
  packed.k = k;
  packed.format = format;
  if (n == 0 || k == 0) return packed;  // nothing to pack (and no storage to point into)
  const int64_t panels = (n + kGemmPanelWidth - 1) / kGemmPanelWidth;
  const int64_t depth = format == WeightFormat::kW8A8      ? internal::W8A8Depth(k)
                        : format == WeightFormat::kBF16Dot ? internal::Bf16DotDepth(k)
                                                           : k;
  const int64_t bytes = panels * depth * kGemmPanelWidth * WeightFormatBytes(format);
  // Huge pages (see AlignedBuffer): decode streams every matrix once per token.
  packed.data = AlignedBuffer(static_cast<size_t>((bytes + 3) / 4), AlignedBuffer::Pages::kHuge);
  if (format == WeightFormat::kInt8 || format == WeightFormat::kW8A8) {
    packed.scales = AlignedBuffer(static_cast<size_t>(panels * kGemmPanelWidth));
  }
  if (format == WeightFormat::kW8A8) {
    packed.code_sums = AlignedBuffer(static_cast<size_t>(panels * kGemmPanelWidth));
  }
  return packed;
}

// dst[panel][kk][j] = convert(row j of the panel, kk) for every row < n.
template <class T, class RowFn>
void PackInto(PackedMatrix& packed, RowFn&& element) {
  T* out = reinterpret_cast<T*>(packed.data.data());
  const int64_t n = packed.n, k = packed.k;
  for (int64_t row = 0; row < n; ++row) {
    T* dst = out + (row / kGemmPanelWidth) * k * kGemmPanelWidth + row % kGemmPanelWidth;
    for (int64_t kk = 0; kk < k; ++kk) dst[kk * kGemmPanelWidth] = element(row, kk);
  }
}

// The dot formats (gemm_dot.h): DotElementIndex(row, kk) = element(row, kk).
template <class T, class RowFn>
void PackDotSteps(PackedMatrix& packed, int64_t depth, RowFn&& element) {
  T* out = reinterpret_cast<T*>(packed.data.data());
  const int64_t per_step = 4 / static_cast<int64_t>(sizeof(T));
  for (int64_t row = 0; row < packed.n; ++row) {
    for (int64_t kk = 0; kk < packed.k; ++kk) {
      out[internal::DotElementIndex(row, kk, depth, per_step)] = element(row, kk);
    }
  }
}

// Symmetric per output channel: scale = max|row| / 127, so the largest
// weight of each row maps to +-127; an all-zero row gets scale 0. Fills
// packed.scales; returns the code of (row, kk).
auto Int8Codes(const float* w, PackedMatrix& packed) {
  const int64_t n = packed.n, k = packed.k;
  float* scales = packed.scales.data();
  for (int64_t row = 0; row < n; ++row) {
    float max_abs = 0.0f;
    for (int64_t kk = 0; kk < k; ++kk) max_abs = std::max(max_abs, std::fabs(w[row * k + kk]));
    scales[row] = max_abs / 127.0f;
  }
  return [w, k, scales](int64_t row, int64_t kk) {
    if (scales[row] == 0.0f) return int8_t{0};
    const float q = std::nearbyint(w[row * k + kk] / scales[row]);
    return static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  };
}

}  // namespace

PackedMatrix PackWeights(const float* w, int64_t n, int64_t k, WeightFormat format) {
  PackedMatrix packed = Allocate(n, k, format);
  if (packed.data.size() == 0) return packed;
  switch (format) {
    case WeightFormat::kF32:
      PackInto<float>(packed, [&](int64_t row, int64_t kk) { return w[row * k + kk]; });
      break;
    case WeightFormat::kBF16:
      PackInto<uint16_t>(packed,
                         [&](int64_t row, int64_t kk) { return FloatToBf16(w[row * k + kk]); });
      break;
    case WeightFormat::kF16:
      PackInto<uint16_t>(packed,
                         [&](int64_t row, int64_t kk) { return FloatToHalf(w[row * k + kk]); });
      break;
    case WeightFormat::kInt8:
      PackInto<int8_t>(packed, Int8Codes(w, packed));
      break;
    case WeightFormat::kBF16Dot:
      PackDotSteps<uint16_t>(packed, internal::Bf16DotDepth(k), [&](int64_t row, int64_t kk) {
        return internal::RoundToBf16FlushSubnormal(w[row * k + kk]);
      });
      break;
    case WeightFormat::kW8A8: {
      // int8's codes of W H in VNNI order, and each row's code sum.
      std::vector<float> rotated(w, w + n * k);
      RotateHeads(rotated.data(), k, n, 1, k, nullptr);
      const auto code = Int8Codes(rotated.data(), packed);
      auto* sums = reinterpret_cast<int32_t*>(packed.code_sums.data());
      PackDotSteps<int8_t>(packed, internal::W8A8Depth(k), [&](int64_t row, int64_t kk) {
        const int8_t c = code(row, kk);
        sums[row] += c;
        return c;
      });
      break;
    }
  }
  return packed;
}

PackedMatrix PackWeights16(const void* w, int64_t n, int64_t k, WeightFormat format) {
  PackedMatrix packed = Allocate(n, k, format);
  if (packed.data.size() == 0) return packed;
  const auto* bytes = static_cast<const uint8_t*>(w);
  auto element = [&](int64_t row, int64_t kk) {
    uint16_t h;  // little-endian, any alignment
    std::memcpy(&h, bytes + (row * k + kk) * 2, sizeof(h));
    return h;
  };
  if (format == WeightFormat::kBF16Dot) {
    PackDotSteps<uint16_t>(packed, internal::Bf16DotDepth(k), [&](int64_t row, int64_t kk) {
      const uint16_t h = element(row, kk);
      return (h & 0x7f80) == 0 ? static_cast<uint16_t>(h & 0x8000) : h;  // subnormal: signed 0
    });
  } else {
    PackInto<uint16_t>(packed, element);
  }
  return packed;
}

namespace internal {

namespace {

// The contract's order (gemm.h) one element at a time; `weight(i)` widens
// element i of the matrix exactly.
template <class WeightFn>
void ScalarPanels(const GemmParams& p, int64_t panel_begin, int64_t panel_end, WeightFn&& weight) {
  const int64_t k = p.w->k, n = p.w->n;
  const float* scales = p.w->scales.size() != 0 ? p.w->scales.data() : nullptr;
  for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
    const int64_t w0 = panel * k * kGemmPanelWidth;
    const int64_t col0 = panel * kGemmPanelWidth;
    const int64_t cols = std::min(kGemmPanelWidth, n - col0);
    for (int64_t row = 0; row < p.m; ++row) {
      const float* x = p.x + row * p.ldx;
      float acc[kGemmPanelWidth] = {};
      for (int64_t kk = 0; kk < k; ++kk) {
        for (int64_t j = 0; j < kGemmPanelWidth; ++j) {
          acc[j] = std::fma(x[kk], weight(w0 + kk * kGemmPanelWidth + j), acc[j]);
        }
      }
      float* y = p.y + row * p.ldy + col0;
      for (int64_t j = 0; j < cols; ++j) {
        float v = acc[j];
        if (scales != nullptr) v = v * scales[col0 + j];
        y[j] = p.bias != nullptr ? v + p.bias[col0 + j] : v;
      }
    }
  }
}

}  // namespace

void GemmPanelsScalar(const GemmParams& p, int64_t panel_begin, int64_t panel_end) {
  const PackedMatrix& w = *p.w;
  switch (w.format) {
    case WeightFormat::kF32:
      return ScalarPanels(p, panel_begin, panel_end, [&](int64_t i) { return w.As<float>()[i]; });
    case WeightFormat::kBF16:
      return ScalarPanels(p, panel_begin, panel_end,
                          [&](int64_t i) { return BF16ToF32(w.As<uint16_t>()[i]); });
    case WeightFormat::kF16:
      return ScalarPanels(p, panel_begin, panel_end,
                          [&](int64_t i) { return F16ToF32(w.As<uint16_t>()[i]); });
    case WeightFormat::kInt8:
      return ScalarPanels(p, panel_begin, panel_end,
                          [&](int64_t i) { return static_cast<float>(w.As<int8_t>()[i]); });
    case WeightFormat::kW8A8:
    case WeightFormat::kBF16Dot:
      break;  // GemmDot (never reaches here)
  }
}

}  // namespace internal

namespace {

// Runs body(panel_begin, panel_end) over p.w's column panels, split across
// the pool's threads.
template <class Body>
void ForEachPanelChunk(const GemmParams& p, ThreadPool* pool, Body&& body) {
  const int64_t panels = (p.w->n + kGemmPanelWidth - 1) / kGemmPanelWidth;
  if (pool == nullptr || pool->num_threads() == 1) {
    body(0, panels);
    return;
  }
  // Threads own disjoint column panels; k is never split (gemm.h).
  const int64_t fmas_per_panel = std::max<int64_t>(1, p.m * p.w->k * kGemmPanelWidth);
  if (p.m <= 4 && panels * fmas_per_panel >= 2 * kMinFmasPerChunk) {
    // Decode re-reads almost nothing per chunk, and the memory serves the
    // threads unevenly, so whoever finishes first waits for the other's
    // last chunk. The chunks shrink (sizes in the ratio P, P-1, ..., 1),
    // so the last ones are small. A batch-1 SmolLM 16-bit-dot decode (perf,
    // both threads) spent 10-12% of its samples waiting in the pool with two
    // equal chunks per thread, 8-9% with four, 5-9% (median 7%) so; timed,
    // the calling thread's waits in its GEMVs fell from 0.45 ms a token
    // (four equal chunks per thread) to 0.14.
    const int64_t pieces = std::min<int64_t>(panels, 4 * pool->num_threads());
    const int64_t parts = pieces * (pieces + 1) / 2;
    const auto first_panel = [&](int64_t piece) {  // of piece `piece`; panels at pieces
      return panels * (piece * pieces - piece * (piece - 1) / 2) / parts;
    };
    pool->ParallelFor(
        pieces, 1, [&](int64_t begin, int64_t end) { body(first_panel(begin), first_panel(end)); });
    return;
  }
  // About two chunks per thread: few enough that each re-reads x rarely,
  // enough to rebalance when a core is busy with something else.
  const int64_t grain = std::max(
      {int64_t{1}, kMinFmasPerChunk / fmas_per_panel, panels / (int64_t{2} * pool->num_threads())});
  pool->ParallelFor(panels, grain, [&](int64_t begin, int64_t end) { body(begin, end); });
}

// Runs convert(r0, r1) over rows [0, m): split across the pool when there
// are enough elements to pay for a fork/join. Each row's conversion depends
// on that row alone, so the split cannot change a bit.
template <class Convert>
void ConvertRows(int64_t m, int64_t k, ThreadPool* pool, Convert convert) {
  constexpr int64_t kMinElementsPerChunk = 32 * 1024;
  if (pool == nullptr || pool->num_threads() < 2 || m < 2 || m * k < 2 * kMinElementsPerChunk) {
    convert(int64_t{0}, m);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerChunk / std::max<int64_t>(1, k));
  pool->ParallelFor(m, grain, convert);
}

// kW8A8 / kBF16Dot (gemm_dot.h): convert x's rows once into the calling
// thread's scratch (split across the pool by rows), then every thread reads
// them.
void GemmDot(const GemmParams& p, CpuIsa isa, ThreadPool* pool) {
  using Body = void (*)(const GemmParams&, const internal::DotRows&, int64_t, int64_t);
  const bool avx512 = isa == CpuIsa::kAvx512, vector = avx512 || isa == CpuIsa::kAvx2;
  thread_local std::vector<int8_t> bytes;
  thread_local std::vector<float> scales;
  internal::DotRows x;
  Body body;
  if (p.w->format == WeightFormat::kW8A8) {
    body = avx512 && HasAvx512Vnni() ? internal::GemmW8A8PanelsAvx512Vnni
           : vector                  ? internal::GemmW8A8PanelsAvx2
                                     : internal::GemmW8A8PanelsScalar;
    x.ld = internal::W8A8Depth(p.w->k);
    x.shifted = body == internal::GemmW8A8PanelsAvx512Vnni;
    bytes.resize(static_cast<size_t>(p.m * x.ld));
    scales.resize(static_cast<size_t>(p.m));
    // H x, the rotation the weights were packed with (gemm.h).
    thread_local std::vector<float> rotated;
    rotated.resize(static_cast<size_t>(p.m * p.w->k));
    for (int64_t r = 0; r < p.m; ++r) {
      std::memcpy(rotated.data() + r * p.w->k, p.x + r * p.ldx, p.w->k * sizeof(float));
    }
    RotateHeads(rotated.data(), p.w->k, p.m, 1, p.w->k, pool);
    const float* rotated_x = rotated.data();  // (the lambda may run on the pool's threads)
    auto quantize = avx512   ? internal::QuantizeRowsW8A8Avx512
                    : vector ? internal::QuantizeRowsW8A8Avx2
                             : internal::QuantizeRowsW8A8;
    int8_t* codes = bytes.data();
    float* row_scales = scales.data();
    ConvertRows(p.m, p.w->k, pool, [&](int64_t r0, int64_t r1) {
      quantize(rotated_x + r0 * p.w->k, p.w->k, r1 - r0, p.w->k, x.shifted, codes + r0 * x.ld,
               row_scales + r0);
    });
    x.scales = scales.data();
  } else {
    body = avx512 && HasAvx512Bf16() ? internal::GemmBf16DotPanelsAvx512Bf16
           : vector                  ? internal::GemmBf16DotPanelsAvx2
                                     : internal::GemmBf16DotPanelsScalar;
    x.ld = internal::Bf16DotDepth(p.w->k) * 2;
    bytes.resize(static_cast<size_t>(p.m * x.ld));
    auto round = avx512   ? internal::RoundRowsBf16Avx512
                 : vector ? internal::RoundRowsBf16Avx2
                          : internal::RoundRowsBf16;
    auto* rounded = reinterpret_cast<uint16_t*>(bytes.data());
    ConvertRows(p.m, p.w->k, pool, [&](int64_t r0, int64_t r1) {
      round(p.x + r0 * p.ldx, p.ldx, r1 - r0, p.w->k, rounded + r0 * (x.ld / 2));
    });
  }
  x.codes = bytes.data();
  ForEachPanelChunk(p, pool, [&](int64_t begin, int64_t end) { body(p, x, begin, end); });
}

}  // namespace

void GemmWithIsa(const GemmParams& p, CpuIsa isa, ThreadPool* pool) {
  if (p.m <= 0 || p.w->n <= 0) return;
  if (static_cast<int>(isa) > static_cast<int>(DetectedIsa())) isa = DetectedIsa();
  if (p.w->format == WeightFormat::kW8A8 || p.w->format == WeightFormat::kBF16Dot) {
    return GemmDot(p, isa, pool);
  }
  void (*body)(const GemmParams&, int64_t, int64_t) = internal::GemmPanelsScalar;
  if (isa == CpuIsa::kAvx512) body = internal::GemmPanelsAvx512;
  if (isa == CpuIsa::kAvx2) body = internal::GemmPanelsAvx2;
  ForEachPanelChunk(p, pool, [&](int64_t begin, int64_t end) { body(p, begin, end); });
}

void Gemm(const GemmParams& p, ThreadPool* pool) { GemmWithIsa(p, ActiveIsa(), pool); }

}  // namespace kvserve::kernels
