//===- Peak.cpp - The machine's FMA peak, measured in this process --------===//
//
// Every loop updates its accumulators as a = a * x + y with x just below 1,
// so the values settle and never overflow or go subnormal; the accumulators
// are independent chains, more of them than FMA latency (4-5 cycles) times
// FMA ports (2) on current x86 cores, so the loop is bound by FMA throughput
// alone. Each loop is compiled for its own instruction set with
// __attribute__((target)) and picked with __builtin_cpu_supports, so the
// binary runs on a CPU without AVX-512 or AVX2.
//
// The threads start together behind a spin barrier and the time is the wall
// time of the slowest; calibration first finds an iteration count that takes
// one thread about 40 ms.
//
//===----------------------------------------------------------------------===//
#include "Peak.h"

#include "attnc/attnc.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTNC_PEAK_X86 1
#else
#define ATTNC_PEAK_X86 0
#endif

namespace attnc::tool {

namespace {

/// One FMA loop: `iterations` rounds of FMAs on every accumulator; returns a
/// sum of them so that the work is not optimised away.
using FmaLoop = float (*)(int64_t iterations);

#if ATTNC_PEAK_X86
constexpr int kAvx512Accumulators = 16; // of 32 zmm registers
constexpr int kAvx2Accumulators = 12;   // of 16 ymm registers, two hold x and y

__attribute__((target("avx512f"))) float fmaLoopAvx512(int64_t iterations) {
  __m512 acc[kAvx512Accumulators];
  for (int a = 0; a < kAvx512Accumulators; ++a)
    acc[a] = _mm512_set1_ps(static_cast<float>(a));
  const __m512 x = _mm512_set1_ps(0.9999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int a = 0; a < kAvx512Accumulators; ++a)
      acc[a] = _mm512_fmadd_ps(acc[a], x, y);
  }
  __m512 sum = acc[0];
  for (int a = 1; a < kAvx512Accumulators; ++a)
    sum = _mm512_add_ps(sum, acc[a]);
  alignas(64) float lanes[16]; // _mm512_reduce_add_ps trips GCC 12's -Wuninitialized
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float f : lanes)
    total += f;
  return total;
}

__attribute__((target("avx2,fma"))) float fmaLoopAvx2(int64_t iterations) {
  __m256 acc[kAvx2Accumulators];
  for (int a = 0; a < kAvx2Accumulators; ++a)
    acc[a] = _mm256_set1_ps(static_cast<float>(a));
  const __m256 x = _mm256_set1_ps(0.9999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int a = 0; a < kAvx2Accumulators; ++a)
      acc[a] = _mm256_fmadd_ps(acc[a], x, y);
  }
  __m256 sum = acc[0];
  for (int a = 1; a < kAvx2Accumulators; ++a)
    sum = _mm256_add_ps(sum, acc[a]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float f : lanes)
    total += f;
  return total;
}
#endif

/// Any CPU: GCC vector extensions of 4 floats, as the portable kernels. Where
/// the target has FMA (Arm's NEON) one per lane; otherwise (baseline x86-64:
/// SSE2) independent chains of multiplies and of adds, so that the multiply
/// and the add ports are all busy: a multiply and an add count 2 flops, as
/// an FMA does.
#if defined(__FMA__) || defined(__aarch64__)
constexpr int kGenericAccumulators = 12;
float fmaLoopGeneric(int64_t iterations) {
  typedef float Vec4 __attribute__((vector_size(16)));
  Vec4 acc[kGenericAccumulators];
  for (int a = 0; a < kGenericAccumulators; ++a)
    acc[a] = Vec4{} + static_cast<float>(a);
  const Vec4 x = Vec4{} + 0.9999999f, y = Vec4{} + 1e-7f;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int a = 0; a < kGenericAccumulators; ++a)
      acc[a] = acc[a] * x + y;
  }
  float total = 0;
  for (int a = 0; a < kGenericAccumulators; ++a)
    total += acc[a][0] + acc[a][1] + acc[a][2] + acc[a][3];
  return total;
}
#else
constexpr int kGenericAccumulators = 7; // chains of each kind: 14 of the 16 xmm registers
float fmaLoopGeneric(int64_t iterations) {
  typedef float Vec4 __attribute__((vector_size(16)));
  Vec4 mul[kGenericAccumulators], add[kGenericAccumulators];
  for (int a = 0; a < kGenericAccumulators; ++a) {
    mul[a] = Vec4{} + static_cast<float>(a + 1);
    add[a] = Vec4{} + static_cast<float>(a);
  }
  const Vec4 x = Vec4{} + 0.9999999f, y = Vec4{} + 1e-7f;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 7
    for (int a = 0; a < kGenericAccumulators; ++a) {
      mul[a] = mul[a] * x;
      add[a] = add[a] + y;
    }
  }
  float total = 0;
  for (int a = 0; a < kGenericAccumulators; ++a)
    total += mul[a][0] + mul[a][1] + mul[a][2] + mul[a][3] + add[a][0] + add[a][1] + add[a][2] + add[a][3];
  return total;
}
#endif

struct Isa {
  FmaLoop loop;
  const char *name;
  int lanes, accumulators;
};

/// The loop of the instruction set the fused kernels run (attnc_cpu_isa()).
Isa pickIsa() {
  const char *isa = attnc_cpu_isa();
  const std::string kernels = isa ? isa : "";
#if ATTNC_PEAK_X86
  if (kernels == "avx512")
    return {fmaLoopAvx512, "avx512f", 16, kAvx512Accumulators};
  if (kernels == "avx2")
    return {fmaLoopAvx2, "avx2+fma", 8, kAvx2Accumulators};
#endif
  return {fmaLoopGeneric, "generic", 4, kGenericAccumulators};
}

/// Seconds for `threads` threads to each run `iterations` rounds of `loop`,
/// started together.
double timeThreads(FmaLoop loop, int threads, int64_t iterations) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<float> sinks(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      sinks[static_cast<size_t>(t)] = loop(iterations);
    });
  while (ready.load() < threads)
    std::this_thread::yield();
  auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread &w : workers)
    w.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The sums are read so that no loop can be dropped as dead code.
  volatile float sink = 0;
  for (float s : sinks)
    sink = sink + s;
  return seconds;
}

} // namespace

Peak measurePeak(int threads) {
  constexpr double kTrialSeconds = 0.04;
  constexpr int kTrials = 5;
  const Isa isa = pickIsa();
  threads = std::max(threads, 1);
  int64_t iterations = 1 << 12;
  for (double s = timeThreads(isa.loop, 1, iterations); s < kTrialSeconds && iterations < (int64_t{1} << 40);
       s = timeThreads(isa.loop, 1, iterations))
    iterations = static_cast<int64_t>(static_cast<double>(iterations) *
                                      std::clamp(1.2 * kTrialSeconds / std::max(s, 1e-6), 1.5, 16.0));
  double best = 0;
  for (int trial = 0; trial < kTrials; ++trial)
    best = std::max(best, 1.0 / timeThreads(isa.loop, threads, iterations));
  const double flopsPerThread = 2.0 * isa.lanes * isa.accumulators * static_cast<double>(iterations);
  return {flopsPerThread * threads * best / 1e9, isa.name, isa.lanes, threads};
}

} // namespace attnc::tool
