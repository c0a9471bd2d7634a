// CounterUniform: a counter-based uniform generator. The value for
// (seed, index) is output number index + 1 of a SplitMix64 stream whose
// initial state is a mix of the seed; computing it needs no state besides the
// two arguments, so draws never depend on call order, batching or threads.
#include <cstdint>

#include "engine/sampling/sampler.h"

namespace kvserve::engine {
namespace {

// The Weyl-sequence increment of SplitMix64 (2^64 / golden ratio, odd).
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// SplitMix64's finaliser: a bijection on 64-bit words with full avalanche.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

double CounterUniform(uint64_t seed, uint64_t output_index) {
  // Mixing the seed first decorrelates the streams of nearby seeds (0, 1, 2,
  // ...), which would otherwise be shifted copies of one Weyl sequence.
  const uint64_t state = Mix64(seed ^ 0x6A09E667F3BCC909ull);
  const uint64_t bits = Mix64(state + (output_index + 1) * kGolden);
  // Top 53 bits as an integer in [0, 2^53), scaled exactly: u in [0, 1).
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

}  // namespace kvserve::engine
