//===- ConcurrencyTest.cpp - One kernel, many threads; threads per run -----===//
//
// attnc.h promises that a loaded kernel may be run from several threads at
// once (the per-n state is shared, each call's scratch is its own) and that
// num_threads / $ATTNC_NUM_THREADS bound the threads a run uses. Results
// are compared bitwise: a run's arithmetic does not depend on what other
// threads are doing.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "Worker.h"

#include "attnc/attnc.h"
#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace attnc::test {
namespace {

struct Shape {
  int64_t batch, heads, n, d;
};

/// Shapes the threads run side by side: single rows, ragged n, several
/// slices, head dimensions with and without specialised code.
const Shape kShapes[] = {{1, 1, 1, 8},   {1, 2, 77, 16}, {2, 1, 203, 32}, {1, 4, 64, 64},
                         {3, 2, 129, 8}, {1, 1, 400, 32}, {2, 2, 33, 128}, {1, 3, 150, 40}};

struct KernelDeleter {
  void operator()(attnc_kernel *k) const { attnc_kernel_free(k); }
};
using KernelPtr = std::unique_ptr<attnc_kernel, KernelDeleter>;

/// patterns/fixed.attn (l=16) compiled by `backend`, without the cache.
KernelPtr compileFixed(const char *backend) {
  const char *defs[] = {"l=16"};
  attnc_jit_options options{defs, 1, nullptr, nullptr, 1, backend};
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK) << attnc_last_error();
  return KernelPtr(k);
}

/// One forward call's inputs and output, in buffers of its own.
struct Call {
  Shape s;
  int32_t threads;
  std::vector<float> q, k, v, o;

  Call(Shape shape, int32_t numThreads, uint32_t seed) : s(shape), threads(numThreads) {
    const size_t count = static_cast<size_t>(s.batch * s.heads * s.n * s.d);
    q = randomFloats(count, seed, 1);
    k = randomFloats(count, seed + 1, 1);
    v = randomFloats(count, seed + 2, 1);
    o.assign(count, 0.0f);
  }
  attnc_status run(const attnc_kernel *kernel) {
    std::fill(o.begin(), o.end(), -1.0f);
    attnc_tensor tq = view(q, s.batch, s.heads, s.n, s.d), tk = view(k, s.batch, s.heads, s.n, s.d),
                 tv = view(v, s.batch, s.heads, s.n, s.d), to = view(o, s.batch, s.heads, s.n, s.d);
    attnc_run_options options{0.0f, threads};
    return attnc_run(kernel, &tq, &tk, &tv, &to, &options);
  }
};

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Runs body(t) on `threads` threads released at the same moment.
template <typename Body> void onThreadsAtOnce(int threads, Body body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ++ready;
      while (ready.load() < threads)
        std::this_thread::yield();
      body(t);
    });
  for (std::thread &th : pool)
    th.join();
}

class Concurrency : public ::testing::TestWithParam<const char *> {};

INSTANTIATE_TEST_SUITE_P(Backends, Concurrency,
                         ::testing::ValuesIn(builtBackends({"fused", "halide", "sparsifier", "dense"})),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

TEST_P(Concurrency, OneKernelRunFromEightThreadsMatchesSerialRunsBitwise) {
  KernelPtr kernel = compileFixed(GetParam());
  ASSERT_TRUE(kernel);
  // Each thread its own shape and thread count (0: the default), so that
  // calls of several lengths prepare and share the kernel's per-n state.
  std::vector<Call> calls;
  for (int t = 0; t < 8; ++t)
    calls.emplace_back(kShapes[t], t % 4, 100 + 3 * t);
  std::vector<std::vector<float>> serial;
  for (Call &c : calls) {
    ASSERT_EQ(c.run(kernel.get()), ATTNC_OK) << attnc_last_error();
    serial.push_back(c.o);
  }
  std::vector<std::string> failures(calls.size());
  onThreadsAtOnce(8, [&](int t) {
    for (int round = 0; round < 3 && failures[t].empty(); ++round) {
      if (calls[t].run(kernel.get()) != ATTNC_OK)
        failures[t] = std::string("run failed: ") + attnc_last_error(); // (thread-local)
      else if (!sameBits(calls[t].o, serial[t]))
        failures[t] = "round " + std::to_string(round) + " differs from the serial run";
    }
  });
  for (size_t t = 0; t < calls.size(); ++t)
    EXPECT_EQ(failures[t], "") << "thread " << t << " [" << calls[t].s.batch << ", " << calls[t].s.heads << ", "
                               << calls[t].s.n << ", " << calls[t].s.d << "]";
}

TEST_P(Concurrency, ResultsDoNotDependOnTheThreadCount) {
  KernelPtr kernel = compileFixed(GetParam());
  ASSERT_TRUE(kernel);
  for (const Shape &s : {Shape{1, 1, 333, 32}, Shape{2, 3, 150, 16}}) {
    Call one(s, 1, 7);
    ASSERT_EQ(one.run(kernel.get()), ATTNC_OK) << attnc_last_error();
    for (int32_t threads : {2, 3, 8}) {
      Call many(s, threads, 7);
      ASSERT_EQ(many.run(kernel.get()), ATTNC_OK) << attnc_last_error();
      EXPECT_TRUE(sameBits(one.o, many.o)) << threads << " threads, n = " << s.n;
    }
  }
}

TEST_P(Concurrency, LoadRunFreeInALoopReleasesEverything) {
  // Kernels loaded, run and freed over and over (and from four threads at
  // once) leave no descriptor and no mapped code behind; the leak checker
  // of a sanitizer build sees the rest.
  ScratchDir dir;
  const char *defs[] = {"l=16"};
  attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 0, GetParam()};
  attnc_kernel *first = nullptr;
  ASSERT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &first), ATTNC_OK) << attnc_last_error();
  attnc_kernel_free(first);
  std::string path;
  for (const auto &e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().extension() == ".attnk")
      path = e.path();
  ASSERT_FALSE(path.empty());
  auto descriptors = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/fd"), std::filesystem::directory_iterator());
  };
  auto mappedKernels = [] {
    std::ifstream maps("/proc/self/maps");
    int64_t count = 0;
    for (std::string line; std::getline(maps, line);)
      count += line.find("attnc-kernel") != std::string::npos;
    return count;
  };
  auto cycle = [&](uint32_t seed) {
    attnc_kernel *k = nullptr;
    if (attnc_kernel_load(path.c_str(), &k) != ATTNC_OK)
      return std::string("load: ") + attnc_last_error();
    Call c(kShapes[seed % 8], 2, seed);
    attnc_status s = c.run(k);
    attnc_kernel_free(k);
    return s == ATTNC_OK ? std::string() : std::string("run: ") + attnc_last_error();
  };
  ASSERT_EQ(cycle(0), ""); // the first load's one-time state (the pool, Halide's runtime)
  const auto fdsBefore = descriptors();
  const int64_t mapsBefore = mappedKernels();
  for (uint32_t round = 1; round <= 20; ++round)
    ASSERT_EQ(cycle(round), "") << "round " << round;
  std::vector<std::string> failures(4);
  onThreadsAtOnce(4, [&](int t) {
    for (uint32_t round = 0; round < 5 && failures[t].empty(); ++round)
      failures[t] = cycle(100 + 10 * t + round);
  });
  for (const std::string &f : failures)
    EXPECT_EQ(f, "");
  EXPECT_EQ(descriptors(), fdsBefore);
  EXPECT_EQ(mappedKernels(), mapsBefore);
  // The count sees code: a held kernel of a backend with native code
  // (halide, sparsifier) is mapped until freed.
  attnc_kernel *held = nullptr;
  ASSERT_EQ(attnc_kernel_load(path.c_str(), &held), ATTNC_OK);
  const std::string backend = attnc_kernel_metadata(held, "backend");
  if (backend == "halide" || backend == "sparsifier") {
    EXPECT_GT(mappedKernels(), mapsBefore);
  }
  attnc_kernel_free(held);
  EXPECT_EQ(mappedKernels(), mapsBefore);
}

class ConcurrencyBackward : public ::testing::TestWithParam<const char *> {};

INSTANTIATE_TEST_SUITE_P(Backends, ConcurrencyBackward, ::testing::ValuesIn(builtBackends({"fused", "dense"})),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

TEST_P(ConcurrencyBackward, ForwardAndBackwardFromEightThreadsMatchSerialRunsBitwise) {
  KernelPtr kernel = compileFixed(GetParam());
  ASSERT_TRUE(kernel);
  struct Grad {
    Call fwd;
    std::vector<float> lse, dO, dq, dk, dv;
    Grad(Shape s, int32_t threads, uint32_t seed) : fwd(s, threads, seed) {
      const size_t rows = static_cast<size_t>(s.batch * s.heads * s.n);
      lse.assign(rows, 0.0f);
      dO = randomFloats(fwd.q.size(), seed + 9, 1);
      dq.assign(fwd.q.size(), 0.0f);
      dk = dq;
      dv = dq;
    }
    attnc_status run(const attnc_kernel *kernel) {
      const Shape &s = fwd.s;
      auto t4 = [&](std::vector<float> &x) { return view(x, s.batch, s.heads, s.n, s.d); };
      attnc_tensor q = t4(fwd.q), k = t4(fwd.k), v = t4(fwd.v), o = t4(fwd.o), g = t4(dO), dQ = t4(dq),
                   dK = t4(dk), dV = t4(dv), l = tensorView(lse.data(), {s.batch, s.heads, s.n, 1});
      attnc_run_options options{0.0f, fwd.threads};
      if (attnc_status st = attnc_run_forward(kernel, &q, &k, &v, &o, &l, &options); st != ATTNC_OK)
        return st;
      return attnc_run_backward(kernel, &q, &k, &v, &o, &g, &l, &dQ, &dK, &dV, &options);
    }
    std::vector<float> all() const {
      std::vector<float> out = fwd.o;
      for (const auto *x : {&lse, &dq, &dk, &dv})
        out.insert(out.end(), x->begin(), x->end());
      return out;
    }
  };
  std::vector<Grad> calls;
  for (int t = 0; t < 8; ++t)
    calls.emplace_back(kShapes[(t + 1) % 8], t % 3, 300 + 11 * t);
  std::vector<std::vector<float>> serial;
  for (Grad &c : calls) {
    ASSERT_EQ(c.run(kernel.get()), ATTNC_OK) << attnc_last_error();
    serial.push_back(c.all());
  }
  std::vector<std::string> failures(calls.size());
  onThreadsAtOnce(8, [&](int t) {
    for (int round = 0; round < 2 && failures[t].empty(); ++round) {
      if (calls[t].run(kernel.get()) != ATTNC_OK)
        failures[t] = std::string("run failed: ") + attnc_last_error();
      else if (!sameBits(calls[t].all(), serial[t]))
        failures[t] = "round " + std::to_string(round) + " differs from the serial run";
    }
  });
  for (size_t t = 0; t < calls.size(); ++t)
    EXPECT_EQ(failures[t], "") << "thread " << t;
}

TEST(Concurrency, ThreadsCompilingOnePatternAtOnceShareOneEntry) {
  ScratchDir dir;
  int64_t rebuiltBefore = 0, rebuiltAfter = 0;
  attnc_jit_cache_stats(nullptr, nullptr, &rebuiltBefore);
  std::vector<std::string> hashes(8);
  onThreadsAtOnce(8, [&](int t) {
    const char *defs[] = {"l=24"};
    attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 0, "fused"};
    attnc_kernel *k = nullptr;
    if (attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k) != ATTNC_OK) {
      hashes[t] = std::string("compile failed: ") + attnc_last_error();
      return;
    }
    hashes[t] = fixedRunHash(k, 1 + t % 2);
    attnc_kernel_free(k);
  });
  attnc_jit_cache_stats(nullptr, nullptr, &rebuiltAfter);
  EXPECT_EQ(rebuiltAfter, rebuiltBefore);
  ASSERT_FALSE(hashes[0].empty());
  for (const std::string &h : hashes)
    EXPECT_EQ(h, hashes[0]);
  std::vector<std::string> files;
  for (const auto &e : std::filesystem::directory_iterator(dir.path()))
    files.push_back(e.path().filename());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].find(".tmp."), std::string::npos) << files[0];
}

/// Threads the worker process has after one [2, 4, 300, 32] call, beyond
/// those it started with, run with `numThreads` and $ATTNC_NUM_THREADS =
/// `env` (empty: unset, the test's own value removed).
int64_t threadsStartedByARun(int32_t numThreads, const std::string &env) {
  ScratchDir dir;
  Worker worker({"threads", std::to_string(numThreads)}, {"ATTNC_NUM_THREADS=" + env}, dir.file("out"));
  EXPECT_EQ(worker.wait(), 0) << worker.output();
  std::istringstream in(worker.output());
  std::string word;
  int64_t before = -1, after = -1;
  in >> word >> before >> after;
  EXPECT_EQ(word, "threads") << worker.output();
  return after - before;
}

TEST(Concurrency, NumThreadsBoundsTheThreadsARunUses) {
  // The shared pool starts threads - 1 threads the first time a loop asks
  // for `threads` (the caller is the other): a fresh process shows how many
  // a run asked for. $ATTNC_NUM_THREADS=1 keeps the compilation to the
  // calling thread, so every thread counted is the run's.
  EXPECT_EQ(threadsStartedByARun(1, "1"), 0);
  for (int32_t threads : {2, 3, 5}) {
    const int64_t started = threadsStartedByARun(threads, "1");
    EXPECT_LE(started, threads - 1) << "num_threads = " << threads;
    EXPECT_GE(started, 1) << "num_threads = " << threads << " runs on more than one thread";
  }
}

TEST(Concurrency, TheEnvironmentSetsTheDefaultThreadCount) {
  EXPECT_EQ(threadsStartedByARun(0, "1"), 0);
  const int64_t three = threadsStartedByARun(0, "3");
  EXPECT_LE(three, 2);
  EXPECT_GE(three, 1);
  // An explicit count wins over the environment.
  EXPECT_EQ(threadsStartedByARun(1, "4"), 0);
}

} // namespace
} // namespace attnc::test
