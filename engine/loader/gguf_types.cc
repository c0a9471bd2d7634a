#include "engine/loader/gguf_types.h"

namespace kvserve::engine {

std::optional<GgmlBlock> GgmlBlockOf(uint32_t type_id) {
  constexpr int64_t kSuper = 256;  // the K-quants' super-block
  switch (static_cast<GgmlType>(type_id)) {
    case GgmlType::kF32:
      return GgmlBlock{1, 4};
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return GgmlBlock{1, 2};
    case GgmlType::kQ4_0:
      return GgmlBlock{32, 2 + 16};
    case GgmlType::kQ4_1:
      return GgmlBlock{32, 2 + 2 + 16};
    case GgmlType::kQ5_0:
      return GgmlBlock{32, 2 + 4 + 16};
    case GgmlType::kQ5_1:
      return GgmlBlock{32, 2 + 2 + 4 + 16};
    case GgmlType::kQ8_0:
      return GgmlBlock{32, 2 + 32};
    case GgmlType::kQ2_K:
      return GgmlBlock{kSuper, 16 + 64 + 2 + 2};
    case GgmlType::kQ3_K:
      return GgmlBlock{kSuper, 32 + 64 + 12 + 2};
    case GgmlType::kQ4_K:
      return GgmlBlock{kSuper, 2 + 2 + 12 + 128};
    case GgmlType::kQ5_K:
      return GgmlBlock{kSuper, 2 + 2 + 12 + 32 + 128};
    case GgmlType::kQ6_K:
      return GgmlBlock{kSuper, 128 + 64 + 16 + 2};
  }
  return std::nullopt;
}

const char* GgmlTypeName(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kBF16:
      return "BF16";
    case GgmlType::kQ4_0:
      return "Q4_0";
    case GgmlType::kQ4_1:
      return "Q4_1";
    case GgmlType::kQ5_0:
      return "Q5_0";
    case GgmlType::kQ5_1:
      return "Q5_1";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kQ2_K:
      return "Q2_K";
    case GgmlType::kQ3_K:
      return "Q3_K";
    case GgmlType::kQ4_K:
      return "Q4_K";
    case GgmlType::kQ5_K:
      return "Q5_K";
    case GgmlType::kQ6_K:
      return "Q6_K";
  }
  return "?";
}

}  // namespace kvserve::engine
