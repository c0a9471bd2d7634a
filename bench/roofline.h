// Rooflines and timing helpers shared by the benchmark programs, so that
// every speed they report is a ratio within one run on one machine.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "kernels/cpu/aligned_buffer.h"

namespace kvserve::bench {

using Clock = std::chrono::steady_clock;

inline double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Clocks. Wall time is what a user sees; on a machine shared with other
// processes it also counts time the kernel was descheduled. The calling
// thread's CPU time does not, so single-thread figures use it as well.
enum class Timer { kWall, kThreadCpu };

inline double Now(Timer timer) {
  if (timer == Timer::kWall) {
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best (minimum) time of fn over `reps` runs after one warm-up. Interference
// only ever slows a run down, so the minimum estimates what the hardware does.
inline double BestTime(int reps, const std::function<void()>& fn, Timer timer = Timer::kWall) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = Now(timer);
    fn();
    best = std::min(best, Now(timer) - t0);
  }
  return best;
}

// Evicts the data caches, as far as a program can: reads every line of a
// buffer several times the size of the last-level cache, so that what a
// timed call reads next comes from memory. Reads, not writes: dirty lines
// would be written back during the call that follows.
class CacheEvictor {
 public:
  explicit CacheEvictor(size_t bytes) : buffer_(bytes / sizeof(float)) {
    std::memset(buffer_.data(), 1, buffer_.size() * sizeof(float));
  }
  void Evict() {
    // Volatile: every read happens, though its value is dropped.
    const auto* bytes = reinterpret_cast<const volatile uint8_t*>(buffer_.data());
    for (size_t i = 0; i < buffer_.size() * sizeof(float); i += 64) (void)bytes[i];
  }

 private:
  kernels::AlignedBuffer buffer_;
};

// BestTime with the caches evicted before every timed run (and before none
// of the time): the figure of a working set that does not stay in cache
// between calls, as a server's KV blocks between two decode steps do not.
inline double BestColdTime(int reps, CacheEvictor& evictor, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    evictor.Evict();
    const double t0 = Now(Timer::kWall);
    fn();
    best = std::min(best, Now(Timer::kWall) - t0);
  }
  return best;
}

// Runs fn(thread_index) on `threads` std::threads at once (the measurements
// of machine limits do not go through the pool under test).
inline void OnAllThreads(int threads, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) ts.emplace_back(fn, t);
  fn(0);
  for (auto& t : ts) t.join();
}

// Copy bandwidth as STREAM counts it: bytes read plus bytes written per
// second, by memcpy of `bytes` (far larger than the caches) split over
// `threads` std::threads.
// One thread is timed by its CPU time, several by wall time.
// Both buffers are on huge pages, as the packed weights and the KV cache are:
// a copy on 4 KiB pages read 13-17% slower on this project's Zen 4 VM, and
// a roofline must be the best the memory does for the code measured by it.
inline double CopyBytesPerSecond(int threads, size_t bytes) {
  constexpr auto kHuge = kernels::AlignedBuffer::Pages::kHuge;
  kernels::AlignedBuffer src(bytes / sizeof(float), kHuge), dst(bytes / sizeof(float), kHuge);
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 2, bytes);  // fault the pages in before timing
  const size_t per_thread = bytes / threads / 64 * 64;
  auto copy = [&](int i) {
    std::memcpy(reinterpret_cast<char*>(dst.data()) + i * per_thread,
                reinterpret_cast<const char*>(src.data()) + i * per_thread, per_thread);
  };
  const double t = threads == 1 ? BestTime(
                                      8, [&] { copy(0); }, Timer::kThreadCpu)
                                : BestTime(8, [&] { OnAllThreads(threads, copy); });
  return 2.0 * static_cast<double>(per_thread * threads) / t;
}

// Read bandwidth: bytes read per second by summing every 8-byte word of a
// huge-page buffer of `bytes` (far larger than the caches), split over
// `threads` std::threads; nothing is written. A batch-1 decode only reads
// its weights, and where the memory feeds readers less than a copy's reads
// plus writes (this project's Zen 4 VM: two cores read 30-31 GB/s while
// they copy 38-39) this is the rate to compare a decode with, which the
// copy figure alone hides. Not a strict ceiling: a kernel that asks ahead
// (prefetches) can read faster than this plain loop. Its figure moves with
// the memory as the copy's does, and on that VM within seconds (two modes,
// about 32 and 46-59 GB/s: docs/benchmarks.md), so take it beside what it
// divides. Timed as CopyBytesPerSecond is.
inline double ReadBytesPerSecond(int threads, size_t bytes) {
  constexpr auto kHuge = kernels::AlignedBuffer::Pages::kHuge;
  kernels::AlignedBuffer src(bytes / sizeof(float), kHuge);
  std::memset(src.data(), 1, bytes);
  const size_t words_per_thread = bytes / threads / 64 * 8;  // whole cache lines
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  auto read = [&](int i) {
    const auto* words = reinterpret_cast<const uint64_t*>(src.data()) + i * words_per_thread;
    uint64_t lanes[8] = {};  // independent sums: the loop waits on memory only
    for (size_t j = 0; j < words_per_thread; j += 8) {
      for (int l = 0; l < 8; ++l) lanes[l] += words[j + l];
    }
    uint64_t sum = 0;
    for (uint64_t lane : lanes) sum += lane;
    sums[static_cast<size_t>(i)] = sum;  // used below, so no read is optimized away
  };
  const double t = threads == 1 ? BestTime(
                                      8, [&] { read(0); }, Timer::kThreadCpu)
                                : BestTime(8, [&] { OnAllThreads(threads, read); });
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  if (total != uint64_t{0x0101010101010101} * words_per_thread * threads) return 0;  // misread
  return static_cast<double>(words_per_thread * threads * sizeof(uint64_t)) / t;
}

}  // namespace kvserve::bench
