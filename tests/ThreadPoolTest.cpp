//===- ThreadPoolTest.cpp - The shared pool's promises ---------------------===//
#include "attnc/support/ThreadPool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace attnc::support {
namespace {

TEST(ThreadPool, EveryItemRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8})
    for (int64_t count : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
      parallelFor(count, threads, [&](int, int64_t item) { ++seen[static_cast<size_t>(item)]; });
      for (int64_t i = 0; i < count; ++i)
        EXPECT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "threads " << threads << " item " << i;
    }
}

TEST(ThreadPool, NeverMoreThreadsOrWorkerNumbersThanAskedFor) {
  for (int threads : {1, 2, 3, 5}) {
    std::mutex m;
    std::set<std::thread::id> ids;
    std::set<int> workers;
    std::atomic<int> inside{0}, most{0};
    parallelFor(400, threads, [&](int worker, int64_t) {
      const int now = ++inside;
      for (int seen = most; now > seen && !most.compare_exchange_weak(seen, now);)
        ;
      {
        std::lock_guard<std::mutex> lock(m);
        ids.insert(std::this_thread::get_id());
        workers.insert(worker);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      --inside;
    });
    EXPECT_LE(static_cast<int>(ids.size()), threads);
    EXPECT_LE(most.load(), threads);
    for (int w : workers) {
      EXPECT_GE(w, 0);
      EXPECT_LT(w, threads);
    }
    EXPECT_TRUE(workers.count(0)) << "the calling thread works too";
  }
}

TEST(ThreadPool, AWorkerNumberIsHeldByOneThreadAtATime) {
  std::vector<std::atomic<int>> busy(4);
  std::atomic<bool> clash{false};
  parallelFor(2000, 4, [&](int worker, int64_t) {
    if (busy[static_cast<size_t>(worker)]++ != 0)
      clash = true;
    busy[static_cast<size_t>(worker)]--;
  });
  EXPECT_FALSE(clash);
}

TEST(ThreadPool, NestedLoopsFinishWhenEveryThreadIsBusy) {
  // Every outer item starts an inner loop of its own while the pool's
  // threads are all inside outer items: callers run their own inner items.
  std::atomic<int64_t> total{0};
  parallelFor(8, 4, [&](int, int64_t) {
    parallelFor(100, 4, [&](int, int64_t item) { total += item; });
  });
  EXPECT_EQ(total.load(), 8 * (99 * 100 / 2));
}

TEST(ThreadPool, TheFirstExceptionReachesTheCaller) {
  std::atomic<int> ran{0};
  EXPECT_THROW(parallelFor(1000, 3,
                           [&](int, int64_t item) {
                             ++ran; // (slow enough items that the throw is seen before the last)
                             std::this_thread::sleep_for(std::chrono::microseconds(20));
                             if (item == 10)
                               throw std::runtime_error("item 10");
                           }),
               std::runtime_error);
  EXPECT_LT(ran.load(), 1000) << "items not yet started are skipped";
  // The pool still works afterwards.
  std::atomic<int> after{0};
  parallelFor(50, 3, [&](int, int64_t) { ++after; });
  EXPECT_EQ(after.load(), 50);
}

TEST(ThreadPool, DefaultThreadsFollowsTheEnvironment) {
  const char *old = std::getenv("ATTNC_NUM_THREADS");
  std::string saved = old ? old : "";
  setenv("ATTNC_NUM_THREADS", "3", 1);
  EXPECT_EQ(defaultThreads(), 3);
  EXPECT_EQ(resolveThreads(0), 3);
  EXPECT_EQ(resolveThreads(5), 5);
  setenv("ATTNC_NUM_THREADS", "junk", 1);
  EXPECT_GE(defaultThreads(), 1);
  if (old)
    setenv("ATTNC_NUM_THREADS", saved.c_str(), 1);
  else
    unsetenv("ATTNC_NUM_THREADS");
}

} // namespace
} // namespace attnc::support
