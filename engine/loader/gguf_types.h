// ggml tensor types as a GGUF file numbers them (llama.cpp's ggml_type), with
// the block geometry the parser needs to check a tensor's size before any
// byte of it is read: a tensor of `n` elements along its row (ne[0]) holds
// n / block_elements blocks of block_bytes bytes each. Private to
// engine/loader/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kvserve::engine {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

struct GgmlBlock {
  int64_t elements;  // values per block (1 for the plain float types)
  int64_t bytes;     // bytes per block
};

// The geometry of a type kvserve can dequantize; nullopt for any other id
// (a type the parser must refuse, since it cannot size the tensor).
std::optional<GgmlBlock> GgmlBlockOf(uint32_t type_id);
// "F32", "Q4_K", ...; "type <id>" style callers handle unknown ids.
const char* GgmlTypeName(GgmlType type);

}  // namespace kvserve::engine
