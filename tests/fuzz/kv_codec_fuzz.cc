// The KV row codecs (kernels/cpu/kv_quant.h) on arbitrary rows. Input:
//   Byte()   format (mod 7, kAllKvDtypes order)
//   Byte()   dim - 1 (1..256)
//   Rest()   the row's fp32 values, little-endian, repeated to fill dim
//            (zeros when empty): any bit pattern, NaN and infinity included
// Properties:
//   - the AVX-512 encoder writes the scalar one's bytes and scale, and the
//     AVX-512 decoder its values (when the CPU has AVX-512 and, for the
//     decoder, dim % 16 == 0);
//   - a finite row decodes to within the format's rounding bound of itself
//     (16-bit formats: where they do not overflow), a row holding NaN decodes
//     to NaN.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/kv_quant.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

using kvserve::kernels::KvDtype;

bool SameFloat(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b));
}

// The largest |decoded - x| rounding to nearest can give for x in a row of
// scale s (x / s within the code range).
double Bound(KvDtype dtype, double x, double s) {
  const double a = std::fabs(x);
  switch (dtype) {
    case KvDtype::kFloat32:
      return 0.0;
    case KvDtype::kBfloat16:
      return std::max(a * 0x1p-8, 0x1p-134);
    case KvDtype::kFloat16:
      return std::max(a * 0x1p-11, 0x1p-25);
    case KvDtype::kFp8E4m3:  // 3 mantissa bits; subnormal step 2^-9 of s
      return std::max(a * 0x1p-4, s * 0x1p-10);
    case KvDtype::kInt8:
      return s * 0.5;
    case KvDtype::kInt4:  // s = max / 8: a value above 7.5 s is clamped to 7 s
      return x > 7.5 * s ? s : s * 0.5;
    case KvDtype::kFp4E2m1:  // 1 mantissa bit; step .5 of s below 1
      return std::max(a * 0.25, s * 0.25);
  }
  return 0.0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace k = kvserve::kernels;
  kvserve::fuzz::FuzzInput in(data, size);
  const KvDtype dtype = k::kAllKvDtypes[in.Byte() % 7];
  const int dim = 1 + in.Byte();
  const std::string_view rest = in.Rest();
  std::vector<float> row(dim, 0.0f);
  const size_t values = rest.size() / 4;
  for (int d = 0; values > 0 && d < dim; ++d) {
    std::memcpy(&row[d], rest.data() + 4 * (d % values), 4);
  }
  const std::string what = std::string(k::KvDtypeName(dtype)) + " dim " + std::to_string(dim);

  std::vector<uint8_t> bytes(k::KvRowBytes(dtype, dim));
  const float s = k::QuantizeKvRow(dtype, row.data(), dim, bytes.data());
  std::vector<float> decoded(dim);
  k::DequantizeKvRow(dtype, bytes.data(), s, dim, decoded.data());

  if (k::DetectedIsa() == k::CpuIsa::kAvx512) {
    std::vector<uint8_t> vector_bytes(bytes.size());
    const float vector_s = k::QuantizeKvRowAvx512(dtype, row.data(), dim, vector_bytes.data());
    if (vector_bytes != bytes || !SameFloat(vector_s, s)) {
      kvserve::fuzz::PropertyFailed("AVX-512 encoder differs from the scalar one", what);
    }
    if (dim % 16 == 0) {
      std::vector<float> vector_decoded(dim);
      k::DequantizeKvRowsAvx512(dtype, bytes.data(), &s, 1, dim, vector_decoded.data());
      for (int d = 0; d < dim; ++d) {
        if (!SameFloat(vector_decoded[d], decoded[d])) {
          kvserve::fuzz::PropertyFailed("AVX-512 decoder differs from the scalar one", what);
        }
      }
    }
  }

  const bool has_nan = std::any_of(row.begin(), row.end(), [](float x) { return std::isnan(x); });
  const bool finite = std::all_of(row.begin(), row.end(), [](float x) { return std::isfinite(x); });
  float row_max = 0.0f;
  for (float x : row) row_max = std::max(row_max, std::fabs(x));
  for (int d = 0; d < dim; ++d) {
    if (has_nan && k::KvHasScale(dtype) && !std::isnan(decoded[d])) {
      kvserve::fuzz::PropertyFailed("a row with NaN decodes to a number", what);
    }
    if (std::isnan(row[d]) && !std::isnan(decoded[d])) {
      kvserve::fuzz::PropertyFailed("NaN decodes to a number", what);
    }
    // Beyond the 16-bit formats' largest value plus half a step, rounding
    // gives infinity (fp16: 65520, bf16: 0x1.ffp127). A scaled row whose max
    // is within rounding of FLT_MAX may decode its largest codes to infinity
    // (code x s rounds past FLT_MAX): known, left alone, as no activation
    // comes near.
    const float a = std::fabs(row[d]);
    if (!finite || (dtype == KvDtype::kFloat16 && a >= 65520.0f) ||
        (dtype == KvDtype::kBfloat16 && a >= 0x1.ffp127f) ||
        (k::KvHasScale(dtype) && std::isinf(decoded[d]) && row_max > 0x1p127f)) {
      continue;
    }
    const double err = std::fabs(static_cast<double>(decoded[d]) - row[d]);
    // The scaled formats' x / s may round past the largest code by an ulp.
    const double slack = 1e-6 * std::fabs(static_cast<double>(row[d])) + 1e-30;
    if (!(err <= Bound(dtype, row[d], s) + slack)) {
      kvserve::fuzz::PropertyFailed("decoded value beyond the format's rounding bound",
                                    what + " d " + std::to_string(d));
    }
  }
  return 0;
}
