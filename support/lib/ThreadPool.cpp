//===- ThreadPool.cpp - One persistent pool for every parallel loop -------===//
#include "attnc/support/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <sched.h>
#include <thread>
#include <vector>

namespace attnc::support {

namespace {

/// One parallelFor call: its items and the threads working on it.
struct Loop {
  int64_t count = 0;
  const std::function<void(int, int64_t)> *body = nullptr;
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  int helpersWanted = 0; ///< pool threads that may still join (guarded by the pool's mutex)
  int helpersJoined = 0; ///< worker numbers handed out so far, 1 .. (guarded)
  int helpersActive = 0; ///< joined and not yet finished (guarded)
  std::exception_ptr error; ///< the first failure (guarded)
  std::condition_variable finished;

  /// Runs items until none is left; records a body's exception.
  void work(int worker, std::mutex &mutex) {
    try {
      for (int64_t item = next++; item < count && !failed; item = next++)
        (*body)(worker, item);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error)
        error = std::current_exception();
      failed = true;
    }
  }
};

class Pool {
public:
  static Pool &instance() {
    static Pool pool;
    return pool;
  }

  void run(Loop &loop, int threads) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      loop.helpersWanted = threads - 1;
      while (static_cast<int>(threads_.size()) < threads - 1)
        threads_.emplace_back([this] { serve(); });
      open_.push_back(&loop);
    }
    wake_.notify_all();
    loop.work(0, mutex_);
    std::unique_lock<std::mutex> lock(mutex_);
    close(loop); // no thread joins after this
    loop.finished.wait(lock, [&] { return loop.helpersActive == 0; });
    if (loop.error)
      std::rethrow_exception(loop.error);
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : threads_)
      t.join();
  }

private:
  Pool() = default;

  void close(Loop &loop) {
    auto it = std::find(open_.begin(), open_.end(), &loop);
    if (it != open_.end())
      open_.erase(it);
  }

  /// A pool thread: joins open loops until the process ends.
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !open_.empty(); });
      if (stopping_)
        return;
      Loop &loop = *open_.front();
      const int worker = ++loop.helpersJoined;
      ++loop.helpersActive;
      if (loop.helpersJoined >= loop.helpersWanted)
        close(loop);
      lock.unlock();
      loop.work(worker, mutex_);
      lock.lock();
      if (--loop.helpersActive == 0)
        loop.finished.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Loop *> open_; ///< loops that more threads may join, oldest first
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

} // namespace

void parallelFor(int64_t count, int threads, const std::function<void(int, int64_t)> &body) {
  threads = static_cast<int>(std::min<int64_t>(std::max(threads, 1), count));
  if (threads <= 1) {
    for (int64_t item = 0; item < count; ++item)
      body(0, item);
    return;
  }
  Loop loop;
  loop.count = count;
  loop.body = &body;
  Pool::instance().run(loop, threads);
}

int defaultThreads() {
  if (const char *env = std::getenv("ATTNC_NUM_THREADS")) {
    long v = std::strtol(env, nullptr, 10);
    if (v > 0)
      return static_cast<int>(std::min<long>(v, 1 << 16));
  }
  static const int cores = [] {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
      return CPU_COUNT(&set);
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return cores;
}

} // namespace attnc::support
