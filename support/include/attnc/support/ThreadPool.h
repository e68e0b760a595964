//===- ThreadPool.h - One persistent pool for every parallel loop ---------===//
//
// attnc's parallel loops (a run's batch x heads slices, a slice's row blocks,
// the plan's block generation, the halide backend's block lists) all go
// through parallelFor on one process-wide pool of persistent threads, so that
// a run never starts threads of its own and `num_threads` bounds every loop.
//
// The calling thread always works on its own loop, and pool threads join it
// while they are free, at most `threads - 1` of them: a loop started from
// inside another loop's body (a slice splitting its row blocks) never waits
// for a thread that is busy, so nesting cannot deadlock. Threads are created
// on first need, up to the largest `threads` any loop asked for, and idle
// on a condition variable between loops.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <functional>

namespace attnc::support {

/// Runs body(worker, item) for every item in [0, count): on the calling
/// thread (worker 0) and on up to threads - 1 pool threads (workers 1 ..
/// threads - 1), each worker number in use by one thread at a time, items
/// handed out in increasing order. Returns when every item has run. The first
/// exception a body throws is rethrown here (items not yet started are then
/// skipped). threads <= 1 or count <= 1 runs everything on the calling thread.
void parallelFor(int64_t count, int threads, const std::function<void(int worker, int64_t item)> &body);

/// The thread count a loop gets when its caller says 0: $ATTNC_NUM_THREADS
/// when set to a positive number, else the cores this process may use.
int defaultThreads();

/// `requested` (> 0) or defaultThreads(), at least 1.
inline int resolveThreads(int64_t requested) {
  return requested > 0 ? static_cast<int>(requested < (1 << 16) ? requested : (1 << 16)) : defaultThreads();
}

} // namespace attnc::support
