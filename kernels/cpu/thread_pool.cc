#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace kvserve::kernels {
namespace {

// Idle workers spin this long after their last job before blocking, so the
// ~150 back-to-back ParallelFor calls of a decode step find them awake.
constexpr auto kSpinTime = std::chrono::microseconds(200);
// A job is cut into at most this many chunks per thread; more chunks balance
// load when a core is shared, fewer keep each thread's data contiguous.
constexpr int64_t kChunksPerThread = 4;
constexpr int64_t kMaxChunks = 0xffff;

// The job word packs generation (bits 32..63), chunk count (16..31) and the
// next unclaimed chunk (0..15). Claiming a chunk is one CAS on this word, so a
// worker that wakes late can never claim a chunk of a finished job: the
// chunk count of a finished job is exhausted and a new job bumps generation.
inline uint32_t Generation(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
inline uint64_t NumChunks(uint64_t word) { return (word >> 16) & 0xffff; }
inline uint64_t NextChunk(uint64_t word) { return word & 0xffff; }

inline void CpuRelax() { __builtin_ia32_pause(); }

// True on a thread that is running a chunk; nested ParallelFor calls run inline.
thread_local bool t_in_parallel_region = false;

}  // namespace

struct ThreadPool::Impl {
  explicit Impl(int n) : num_threads(std::max(1, n)) {}

  // Runs one unclaimed chunk of the current job; false when none is left.
  bool RunOneChunk() {
    uint64_t word = work.load(std::memory_order_acquire);
    while (NextChunk(word) < NumChunks(word)) {
      if (work.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        // The job fields below are stable: the caller cannot publish another
        // job until this chunk is counted in `done`.
        // Balanced chunks: sizes differ by at most one, all >= grain.
        const int64_t index = static_cast<int64_t>(NextChunk(word));
        const int64_t chunks = static_cast<int64_t>(NumChunks(word));
        const int64_t begin = index * n / chunks;
        const int64_t end = (index + 1) * n / chunks;
        (*fn)(begin, end);
        done.fetch_add(1, std::memory_order_acq_rel);
        return true;
      }
    }
    return false;
  }

  void WorkerLoop() {
    t_in_parallel_region = true;
    uint32_t seen = Generation(work.load(std::memory_order_acquire));
    while (true) {
      auto spin_start = std::chrono::steady_clock::now();
      int spins = 0;
      uint64_t word;
      while (Generation(word = work.load(std::memory_order_acquire)) == seen) {
        if (stop.load(std::memory_order_relaxed)) return;
        CpuRelax();
        if ((++spins & 63) != 0 || std::chrono::steady_clock::now() - spin_start < kSpinTime) {
          continue;
        }
        // Block. sleepers++ then re-check (seq_cst) pairs with the caller's
        // publish then sleepers check, so a wake-up cannot be lost.
        std::unique_lock<std::mutex> lock(mu);
        sleepers.fetch_add(1, std::memory_order_seq_cst);
        cv.wait(lock, [&] {
          return stop.load(std::memory_order_seq_cst) ||
                 Generation(work.load(std::memory_order_seq_cst)) != seen;
        });
        sleepers.fetch_sub(1, std::memory_order_relaxed);
        spin_start = std::chrono::steady_clock::now();
      }
      seen = Generation(word);
      while (RunOneChunk()) {
      }
    }
  }

  const int num_threads;
  std::vector<std::thread> workers;

  alignas(64) std::atomic<uint64_t> work{0};
  alignas(64) std::atomic<int64_t> done{0};
  alignas(64) std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> busy{false};  // a ParallelFor is in progress (contract check)
  std::mutex mu;
  std::condition_variable cv;

  // The current job; written only by the caller before it publishes `work`.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
};

ThreadPool::ThreadPool(int num_threads) : impl_(std::make_unique<Impl>(num_threads)) {
  for (int i = 1; i < impl_->num_threads; ++i) {
    impl_->workers.emplace_back([impl = impl_.get()] { impl->WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop.store(true, std::memory_order_seq_cst);
  }
  impl_->cv.notify_all();
  for (std::thread& t : impl_->workers) t.join();
}

int ThreadPool::num_threads() const { return impl_->num_threads; }

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  Impl& im = *impl_;
  // Chunks of at least `grain` items: floor(n / grain) chunks at most.
  int64_t num_chunks = std::min({n / grain, im.num_threads * kChunksPerThread, kMaxChunks});
  if (im.num_threads == 1 || num_chunks <= 1 || t_in_parallel_region) {
    fn(0, n);
    return;
  }

  if (im.busy.exchange(true, std::memory_order_acquire)) {
    // Two threads in ParallelFor on one pool at once: a bug in the caller.
    std::fprintf(stderr, "ThreadPool::ParallelFor called concurrently on one pool\n");
    std::abort();
  }
  im.fn = &fn;
  im.n = n;
  im.done.store(0, std::memory_order_relaxed);
  uint64_t generation = Generation(im.work.load(std::memory_order_relaxed)) + 1ull;
  im.work.store((generation << 32) | (static_cast<uint64_t>(num_chunks) << 16),
                std::memory_order_seq_cst);
  if (im.sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(im.mu);
    im.cv.notify_all();
  }

  t_in_parallel_region = true;
  while (im.RunOneChunk()) {
  }
  t_in_parallel_region = false;
  // Wait for chunks that workers claimed. On an oversubscribed machine such a
  // worker may be descheduled: yield the core after a short spin.
  for (int spins = 0; im.done.load(std::memory_order_acquire) < num_chunks; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  im.busy.store(false, std::memory_order_release);
}

ThreadPool& ThreadPool::Default() {
  // Leaked on purpose: kernels may run during static destruction elsewhere.
  static ThreadPool* pool = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("KVSERVE_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) n = v;
    }
    return new ThreadPool(std::max(1, n));
  }();
  return *pool;
}

}  // namespace kvserve::kernels
