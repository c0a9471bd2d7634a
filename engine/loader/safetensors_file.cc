#include "engine/loader/safetensors_file.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvserve::engine {
namespace {

using Json = nlohmann::json;

struct DTypeBits {
  std::string_view name;
  int bits;
};
// The safetensors dtypes and their element widths. Only F32/F16/BF16 are read;
// the others are known so their byte counts can still be checked.
constexpr DTypeBits kDTypeBits[] = {
    {"F64", 64},    {"F32", 32},    {"F16", 16},    {"BF16", 16},   {"I64", 64},
    {"I32", 32},    {"I16", 16},    {"I8", 8},      {"U64", 64},    {"U32", 32},
    {"U16", 16},    {"U8", 8},      {"BOOL", 8},    {"C64", 64},    {"F8_E4M3", 8},
    {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"F4", 4},
};

int DTypeBitsOf(std::string_view name) {
  for (const DTypeBits& d : kDTypeBits) {
    if (d.name == name) return d.bits;
  }
  return 0;  // unknown
}

std::optional<DType> SupportedDType(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// Reads a JSON array of non-negative integers.
bool ReadUnsignedArray(const Json& v, std::vector<uint64_t>& out) {
  if (!v.is_array()) return false;
  out.clear();
  for (const Json& x : v) {
    if (!x.is_number_unsigned()) return false;
    out.push_back(x.get<uint64_t>());
  }
  return true;
}

class HeaderParser {
 public:
  explicit HeaderParser(const MappedFile& file) : file_(file) {}

  absl::StatusOr<std::vector<RawTensor>> Parse() {
    const size_t size = file_.size();
    if (size < 8) {
      return Error(absl::StrCat("file is ", size, " bytes, too short for a safetensors header"));
    }
    uint64_t header_len = 0;
    std::memcpy(&header_len, file_.data(), 8);  // little-endian host (static_assert elsewhere)
    if (header_len > size - 8) {
      return Error(absl::StrCat("header length ", header_len, " exceeds the ", size - 8,
                                " bytes after the length field (truncated or not safetensors)"));
    }
    const char* header = reinterpret_cast<const char*>(file_.data() + 8);
    data_begin_ = file_.data() + 8 + header_len;
    data_size_ = size - 8 - header_len;

    Json json;
    try {
      json = Json::parse(header, header + header_len);
    } catch (const Json::exception& e) {
      return Error(absl::StrCat("header is not valid JSON: ", e.what()));
    }
    if (!json.is_object()) return Error("header is not a JSON object");

    std::vector<RawTensor> tensors;
    tensors.reserve(json.size());
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // parallel to tensors
    for (const auto& [name, entry] : json.items()) {
      if (name == "__metadata__") continue;
      absl::StatusOr<RawTensor> t = ParseEntry(name, entry, ranges);
      if (!t.ok()) return t.status();
      tensors.push_back(*std::move(t));
    }
    KVSERVE_RETURN_IF_ERROR(CheckNoOverlap(tensors, ranges));
    return tensors;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_.path(), ": ", what));
  }
  absl::Status TensorError(const std::string& name, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ": tensor \"", name, "\": ", what));
  }

  absl::StatusOr<RawTensor> ParseEntry(const std::string& name, const Json& entry,
                                       std::vector<std::pair<uint64_t, uint64_t>>& ranges) {
    if (!entry.is_object()) return TensorError(name, "header entry is not an object");
    auto dtype_it = entry.find("dtype");
    auto shape_it = entry.find("shape");
    auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) {
      return TensorError(name, "\"dtype\" missing or not a string");
    }
    std::vector<uint64_t> dims, offsets;
    if (shape_it == entry.end() || !ReadUnsignedArray(*shape_it, dims)) {
      return TensorError(name, "\"shape\" missing or not a list of non-negative integers");
    }
    if (offsets_it == entry.end() || !ReadUnsignedArray(*offsets_it, offsets) ||
        offsets.size() != 2) {
      return TensorError(name, "\"data_offsets\" missing or not [begin, end]");
    }

    RawTensor t;
    t.name = name;
    t.dtype_name = dtype_it->get<std::string>();
    t.dtype = SupportedDType(t.dtype_name);
    uint64_t numel = 1;
    for (uint64_t d : dims) {
      if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, d, &numel)) {
        return TensorError(name, "shape overflows");
      }
      t.shape.push_back(static_cast<int64_t>(d));
    }
    const uint64_t begin = offsets[0], end = offsets[1];
    if (begin > end || end > data_size_) {
      return TensorError(name, absl::StrCat("data_offsets [", begin, ", ", end,
                                            "] fall outside the data section of ", data_size_,
                                            " bytes (truncated file?)"));
    }
    if (const int bits = DTypeBitsOf(t.dtype_name); bits != 0) {
      uint64_t needed_bits = 0;
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(bits), &needed_bits) ||
          needed_bits != (end - begin) * 8) {
        return TensorError(name, absl::StrCat("data_offsets [", begin, ", ", end, "] hold ",
                                              end - begin, " bytes but ", t.dtype_name, " ",
                                              ShapeString(t.shape), " needs ", numel * bits / 8));
      }
    }
    t.data = data_begin_ + begin;
    t.num_bytes = static_cast<size_t>(end - begin);
    ranges.emplace_back(begin, end);
    return t;
  }

  // Overlapping tensors mean a corrupt header (writers lay tensors end to end).
  absl::Status CheckNoOverlap(const std::vector<RawTensor>& tensors,
                              const std::vector<std::pair<uint64_t, uint64_t>>& ranges) const {
    std::vector<size_t> order;  // non-empty tensors only: an empty one overlaps nothing
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (ranges[i].first < ranges[i].second) order.push_back(i);
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return ranges[a] < ranges[b]; });
    for (size_t k = 1; k < order.size(); ++k) {
      const size_t prev = order[k - 1], cur = order[k];
      if (ranges[cur].first < ranges[prev].second) {
        return Error(absl::StrCat("tensors \"", tensors[prev].name, "\" and \"", tensors[cur].name,
                                  "\" overlap in the data section"));
      }
    }
    return absl::OkStatus();
  }

  const MappedFile& file_;
  const uint8_t* data_begin_ = nullptr;
  uint64_t data_size_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<RawTensor>> ParseSafetensorsHeader(const MappedFile& file) {
  return HeaderParser(file).Parse();
}

}  // namespace kvserve::engine
