#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace kvserve::kernels {
namespace {

// Records every chunk; checks they are disjoint, cover [0, n) and respect grain.
void CheckCover(ThreadPool& pool, int64_t n, int64_t grain) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
  });
  if (n <= 0) {
    EXPECT_TRUE(chunks.empty());
    return;
  }
  std::sort(chunks.begin(), chunks.end());
  int64_t next = 0;
  for (auto [b, e] : chunks) {
    EXPECT_EQ(b, next) << "n=" << n << " grain=" << grain;
    EXPECT_LT(b, e);
    if (chunks.size() > 1) {
      EXPECT_GE(e - b, std::min<int64_t>(grain, n)) << "n=" << n << " grain=" << grain;
    }
    next = e;
  }
  EXPECT_EQ(next, n);
}

TEST(ThreadPoolTest, CoversRangeForManySizes) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 4, 7, 17, 100, 1000}) {
      for (int64_t grain : {1, 3, 16, 1000}) CheckCover(pool, n, grain);
    }
  }
}

TEST(ThreadPoolTest, NegativeAndZeroAreNoOps) {
  ThreadPool pool(2);
  int calls = 0;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t) { ++calls; });
  pool.ParallelFor(-5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, UsesWorkerThreads) {
  ThreadPool pool(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Enough slow chunks that the worker must take some.
  for (int rep = 0; rep < 20 && ids.size() < 2; ++rep) {
    pool.ParallelFor(8, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
  }
  EXPECT_EQ(ids.size(), 2u);
}

// Many back-to-back jobs, with pauses long enough that workers fall asleep.
TEST(ThreadPoolTest, ManyJobsAndSleepWake) {
  ThreadPool pool(3);
  std::vector<std::atomic<int64_t>> hits(64);
  for (int job = 0; job < 20000; ++job) {
    pool.ParallelFor(64, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    if (job % 5000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 20000);
}

TEST(ThreadPoolTest, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.ParallelFor(10, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 40);
}

TEST(ThreadPoolTest, DestroyWhileWorkersSleep) {
  auto pool = std::make_unique<ThreadPool>(4);
  pool->ParallelFor(100, 1, [](int64_t, int64_t) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  pool.reset();  // must not hang
}

TEST(ThreadPoolTest, DefaultIsUsable) {
  ThreadPool& pool = ThreadPool::Default();
  EXPECT_GE(pool.num_threads(), 1);
  EXPECT_EQ(&pool, &ThreadPool::Default());
  CheckCover(pool, 33, 2);
}

}  // namespace
}  // namespace kvserve::kernels
