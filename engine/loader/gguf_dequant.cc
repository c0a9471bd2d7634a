#include "engine/loader/gguf_dequant.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/half_float.h"

namespace kvserve::engine {
namespace {

using kernels::BF16ToF32;
using kernels::F16ToF32;

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// The 4-bit quant of element j of a 32-value block (see the header).
uint8_t Nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0F : qs[j - 16] >> 4; }

void Q4_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(Nibble(b + 2, j) - 8);
}

void Q4_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(Nibble(b + 4, j)) + m;
}

// The 5-bit quants of a Q5 block: the nibble plus bit j of qh as bit 4.
void Q5Quants(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 32; ++j) q[j] = Nibble(qs, j) | (((qh >> j) & 1) << 4);
}

void Q5_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  int q[32];
  Q5Quants(b + 2, b + 6, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

void Q5_1(const uint8_t* b, float* y) {
  const float d = Half(b), m = Half(b + 2);
  int q[32];
  Q5Quants(b + 4, b + 8, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

void Q8_0(const uint8_t* b, float* y) {
  const float d = Half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// 2-bit field k (0..3) of qs[h * 32 + l] holds element h * 128 + k * 32 + l.
int TwoBits(const uint8_t* qs, int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  return (qs[h * 32 + l] >> (2 * k)) & 3;
}

void Q2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = Half(b + 80), dmin = Half(b + 82);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * static_cast<float>(scales[g] & 0x0F);
    const float ml = dmin * static_cast<float>(scales[g] >> 4);
    for (int i = 0; i < 16; ++i) {
      const int e = g * 16 + i;
      y[e] = dl * static_cast<float>(TwoBits(qs, e)) - ml;
    }
  }
}

void Q3_K(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = Half(b + 108);
  for (int g = 0; g < 16; ++g) {
    const int low = g < 8 ? sc[g] & 0x0F : sc[g - 8] >> 4;
    const int high = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float dl = d * static_cast<float>(static_cast<int8_t>(low | (high << 4)) - 32);
    for (int i = 0; i < 16; ++i) {
      const int e = g * 16 + i;
      // Bit e / 32 of hmask[e % 32] clear means the quant is 4 lower.
      const int high_bit = (hmask[e % 32] >> (e / 32)) & 1;
      const int q = TwoBits(qs, e) - ((high_bit ^ 1) << 2);
      y[e] = dl * static_cast<float>(q);
    }
  }
}

// The 6-bit scale and min of group g (0..7) of a Q4_K / Q5_K block.
void ScaleMinK4(const uint8_t* s, int g, int* scale, int* min) {
  if (g < 4) {
    *scale = s[g] & 0x3F;
    *min = s[g + 4] & 0x3F;
  } else {
    *scale = (s[g + 4] & 0x0F) | ((s[g - 4] >> 2) & 0x30);
    *min = (s[g + 4] >> 4) | ((s[g] >> 2) & 0x30);
  }
}

// Groups 2c and 2c + 1 are the low and high nibbles of qs[32c, 32c + 32).
int KNibble(const uint8_t* qs, int e) {
  const int g = e / 32, l = e % 32;
  const uint8_t byte = qs[(g / 2) * 32 + l];
  return g % 2 == 0 ? byte & 0x0F : byte >> 4;
}

void Q4_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int g = 0; g < 8; ++g) {
    int scale, min;
    ScaleMinK4(scales, g, &scale, &min);
    const float dg = d * static_cast<float>(scale), mg = dmin * static_cast<float>(min);
    for (int l = 0; l < 32; ++l) {
      const int e = g * 32 + l;
      y[e] = dg * static_cast<float>(KNibble(qs, e)) - mg;
    }
  }
}

void Q5_K(const uint8_t* b, float* y) {
  const float d = Half(b), dmin = Half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int g = 0; g < 8; ++g) {
    int scale, min;
    ScaleMinK4(scales, g, &scale, &min);
    const float dg = d * static_cast<float>(scale), mg = dmin * static_cast<float>(min);
    for (int l = 0; l < 32; ++l) {
      const int e = g * 32 + l;
      const int q = KNibble(qs, e) | (((qh[l] >> g) & 1) << 4);
      y[e] = dg * static_cast<float>(q) - mg;
    }
  }
}

void Q6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const uint8_t* scales = b + 192;
  const float d = Half(b + 208);
  for (int e = 0; e < 256; ++e) {
    // Each half of 128 values: ql's 64 bytes give the low nibbles of values
    // [0, 64) then the high nibbles of [64, 128); qh's 32 bytes give bits
    // 4-5 of values k * 32 + l from their 2-bit field k.
    const int h = e / 128, j = e % 128;
    const int low = (ql[h * 64 + j % 64] >> (4 * (j / 64))) & 0x0F;
    const int high = (qh[h * 32 + j % 32] >> (2 * (j / 32))) & 3;
    const int q = static_cast<int8_t>(low | (high << 4)) - 32;
    const float dg = d * static_cast<float>(static_cast<int8_t>(scales[e / 16]));
    y[e] = dg * static_cast<float>(q);
  }
}

}  // namespace

absl::Status DequantizeGgml(GgmlType type, const uint8_t* data, size_t num_bytes,
                            int64_t num_elements, float* out) {
  const std::optional<GgmlBlock> block = GgmlBlockOf(static_cast<uint32_t>(type));
  if (!block.has_value()) return absl::InvalidArgumentError("unknown ggml type");
  if (num_elements < 0 || num_elements % block->elements != 0 ||
      static_cast<uint64_t>(num_elements / block->elements) * block->bytes != num_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(GgmlTypeName(type), ": ", num_elements, " values do not fill ", num_bytes,
                     " bytes of ", block->bytes, "-byte blocks of ", block->elements));
  }
  const int64_t blocks = num_elements / block->elements;
  void (*decode)(const uint8_t*, float*) = nullptr;
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, data, num_bytes);
      return absl::OkStatus();
    case GgmlType::kF16:
    case GgmlType::kBF16:
      for (int64_t i = 0; i < num_elements; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = type == GgmlType::kF16 ? F16ToF32(h) : BF16ToF32(h);
      }
      return absl::OkStatus();
    case GgmlType::kQ4_0:
      decode = Q4_0;
      break;
    case GgmlType::kQ4_1:
      decode = Q4_1;
      break;
    case GgmlType::kQ5_0:
      decode = Q5_0;
      break;
    case GgmlType::kQ5_1:
      decode = Q5_1;
      break;
    case GgmlType::kQ8_0:
      decode = Q8_0;
      break;
    case GgmlType::kQ2_K:
      decode = Q2_K;
      break;
    case GgmlType::kQ3_K:
      decode = Q3_K;
      break;
    case GgmlType::kQ4_K:
      decode = Q4_K;
      break;
    case GgmlType::kQ5_K:
      decode = Q5_K;
      break;
    case GgmlType::kQ6_K:
      decode = Q6_K;
      break;
  }
  for (int64_t i = 0; i < blocks; ++i) {
    decode(data + i * block->bytes, out + i * block->elements);
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
