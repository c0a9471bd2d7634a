#include "engine/sampling/radix_sort.h"

#include <algorithm>
#include <array>
#include <utility>

namespace kvserve::engine {

void RadixSort(std::span<uint64_t> keys, std::vector<uint64_t>& buffer) {
  if (keys.size() < 2) return;
  if (buffer.size() < keys.size()) buffer.resize(keys.size());
  // Every byte's histogram in one pass over the keys (16 KiB on the stack:
  // no allocation per call).
  std::array<std::array<size_t, 256>, 8> counts{};
  for (uint64_t key : keys) {
    for (int byte = 0; byte < 8; ++byte) ++counts[byte][(key >> (8 * byte)) & 0xFF];
  }
  uint64_t* from = keys.data();
  uint64_t* to = buffer.data();
  for (int byte = 0; byte < 8; ++byte) {
    const int shift = 8 * byte;
    if (counts[byte][(keys[0] >> shift) & 0xFF] == keys.size()) continue;  // all share it
    size_t next[256];
    size_t total = 0;
    for (int digit = 0; digit < 256; ++digit) {
      next[digit] = total;
      total += counts[byte][digit];
    }
    for (size_t i = 0; i < keys.size(); ++i) to[next[(from[i] >> shift) & 0xFF]++] = from[i];
    std::swap(from, to);
  }
  if (from != keys.data()) std::copy(from, from + keys.size(), keys.data());
}

}  // namespace kvserve::engine
