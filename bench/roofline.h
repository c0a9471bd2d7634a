// Rooflines measured by the benchmark program itself, so that every speed it
// reports is a ratio within one run on one machine.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"
#include "kernels/cpu/thread_pool.h"

namespace kvserve::bench {

inline double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Best-of-`reps` memcpy bandwidth over a buffer far larger than the caches,
// on every thread of `pool`, counted as STREAM "Copy" counts it: bytes read
// plus bytes written. Returns bytes per second.
inline double MeasureCopyBandwidth(kernels::ThreadPool& pool, size_t bytes = size_t{512} << 20,
                                   int reps = 5) {
  const size_t floats = bytes / sizeof(float);
  kernels::AlignedBuffer src(floats), dst(floats);
  for (size_t i = 0; i < floats; i += 1024) src[i] = static_cast<float>(i);  // touch pages
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.ParallelFor(static_cast<int64_t>(floats), 1 << 20, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, (e - b) * sizeof(float));
    });
    best = std::max(best, 2.0 * static_cast<double>(bytes) / Seconds(start));
  }
  return best;
}

}  // namespace kvserve::bench
