// ThreadPool: a fixed set of worker threads for data-parallel kernels.
//
// Kernels split work by output rows/columns/heads, never across a reduction
// dimension, so results do not depend on the number of threads (docs/architecture.md,
// batch invariance). The calling thread takes part in every ParallelFor.
// Thread affinity: one ParallelFor at a time per pool (a concurrent second
// call is a bug; it aborts when detected); the pool is used by the thread that
// owns the ModelRunner (the engine loop). A ParallelFor issued from inside a
// chunk runs inline on that thread.
// Idle workers spin ~200 us after each job, then block on a condition variable.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace kvserve::kernels {

class ThreadPool {
 public:
  // num_threads counts the caller: ThreadPool(1) runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;

  // Calls fn(begin, end) over contiguous, disjoint chunks that cover [0, n)
  // and returns when all have run. Chunks are at least `grain` items long.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Process-wide pool sized by $KVSERVE_NUM_THREADS, else the hardware thread count.
  static ThreadPool& Default();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::kernels
