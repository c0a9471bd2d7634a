// RadixSort: sorts 64-bit keys ascending in O(n) per significant byte; the
// sampler's rank-order sort for large kept sets (a flat row under top-p
// keeps most of the vocabulary).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::engine {

// Sorts keys ascending (the order std::sort gives): a least-significant-
// digit radix sort over bytes, skipping every byte that all keys share (for
// the sampler's rank keys, the zero high bytes of the ids and the logits'
// common exponent bits). Stable. buffer: scratch, grown to keys.size().
void RadixSort(std::span<uint64_t> keys, std::vector<uint64_t>& buffer);

}  // namespace kvserve::engine
