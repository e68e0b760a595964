//===- LoopShapesBench.cpp - The AVX2 kernels' inner loops, alone ---------===//
//
// attnc_bench_loop_shapes: the two inner loops of the fused forward on AVX2
// + FMA, each alone on one core, beside an FMA loop of register operands (the
// rate no loop can pass), in GFLOP/s:
//
//  - P V (runtime/lib/FusedTiles.inc, accumulateRows): R rows of the output
//    times X 256-bit vectors of its columns in registers; per key, the key's
//    value row through a row pointer (X vectors) and R probabilities
//    broadcast. The kernels run R = 6, X = 2 (12 of the 16 ymm registers).
//  - S^T (scoreGroup): 16 query rows as two vectors of Q^T per step of d,
//    G keys' elements broadcast from their rows. The kernels run G = 6.
//
// The value rows are a `--keys` long table (64 keys: 16 KB, in L1; 512:
// 128 KB, in L2), read in a scattered order through the pointers as a class
// order reads them. A loop whose rate stays near the FMA loop's is not what
// holds a kernel back; docs/benchmarks.md ("On an AVX2-only CPU, natively")
// has the runs. On a CPU without AVX2 + FMA it says so and exits 0.
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>

#include "attnc/support/AlignedVector.h"

namespace {

constexpr int kD = 64, kRows = 16;

/// What every loop reads and writes: V[keys][d] (rows through `rows`, a
/// scattered order), P^T[keys][16] and O[16][d] (O^T for the S^T loop).
/// (64-byte aligned, as a framework's tensors are: a std::vector's large
/// block sits 16 bytes into its page, and its 64-byte row slices would
/// straddle two cache lines.)
struct Data {
  attnc::support::AlignedVector<float> v, p, o;
  std::vector<const float *> rows;
  int keys;
  explicit Data(int k)
      : v(static_cast<size_t>(k) * kD), p(static_cast<size_t>(k) * kRows), o(kRows * kD), rows(static_cast<size_t>(k)), keys(k) {
    for (int c = 0; c < k; ++c) {
      rows[c] = v.data() + static_cast<size_t>((c * 37) % k) * kD; // (37 is prime to every power of 2)
      for (int x = 0; x < kD; ++x)
        v[static_cast<size_t>(c) * kD + x] = 1e-3f * static_cast<float>((c + x) % 7);
      for (int r = 0; r < kRows; ++r)
        p[static_cast<size_t>(c) * kRows + r] = 1e-3f;
    }
  }
};

/// P V as the kernels run it: R rows x X vectors (8 X columns) per pass;
/// passes over the 64 columns and the 12 rows R divides. Returns the flops.
template <int R, int X>
__attribute__((target("avx2,fma"), noinline)) double pv(Data &m) {
  constexpr int kUsed = 12 / R * R, kCols = kD / (8 * X) * 8 * X;
  for (int d0 = 0; d0 < kCols; d0 += 8 * X)
    for (int r0 = 0; r0 < kUsed; r0 += R) {
      __m256 acc[R][X];
      for (int r = 0; r < R; ++r)
        for (int x = 0; x < X; ++x)
          acc[r][x] = _mm256_loadu_ps(&m.o[static_cast<size_t>(r0 + r) * kD + d0 + 8 * x]);
#pragma GCC unroll 1
      for (int c = 0; c < m.keys; ++c) {
        const float *vr = m.rows[c] + d0, *pc = &m.p[static_cast<size_t>(c) * kRows + r0];
        __m256 vv[X];
        for (int x = 0; x < X; ++x)
          vv[x] = _mm256_loadu_ps(vr + 8 * x);
        for (int r = 0; r < R; ++r) {
          const __m256 pr = _mm256_broadcast_ss(pc + r);
          for (int x = 0; x < X; ++x)
            acc[r][x] = _mm256_fmadd_ps(pr, vv[x], acc[r][x]);
        }
      }
      for (int r = 0; r < R; ++r)
        for (int x = 0; x < X; ++x)
          _mm256_storeu_ps(&m.o[static_cast<size_t>(r0 + r) * kD + d0 + 8 * x], acc[r][x]);
    }
  return 2.0 * m.keys * kUsed * kCols;
}

/// S^T's shape: 16 rows as two vectors of P^T (standing in for Q^T), G
/// elements of each key's row broadcast, into G x 2 sums (O^T).
template <int G>
__attribute__((target("avx2,fma"), noinline)) double scoreShape(Data &m) {
  constexpr int kUsed = kD / G * G;
  for (int x0 = 0; x0 < kUsed; x0 += G) {
    __m256 acc[G][2];
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < 2; ++h)
        acc[g][h] = _mm256_loadu_ps(&m.o[static_cast<size_t>(x0 + g) * kRows + 8 * h]);
#pragma GCC unroll 1
    for (int c = 0; c < m.keys; ++c) {
      const __m256 p0 = _mm256_loadu_ps(&m.p[static_cast<size_t>(c) * kRows]);
      const __m256 p1 = _mm256_loadu_ps(&m.p[static_cast<size_t>(c) * kRows + 8]);
      const float *vr = m.rows[c] + x0;
      for (int g = 0; g < G; ++g) {
        const __m256 b = _mm256_broadcast_ss(vr + g);
        acc[g][0] = _mm256_fmadd_ps(b, p0, acc[g][0]);
        acc[g][1] = _mm256_fmadd_ps(b, p1, acc[g][1]);
      }
    }
    for (int g = 0; g < G; ++g)
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_ps(&m.o[static_cast<size_t>(x0 + g) * kRows + 8 * h], acc[g][h]);
  }
  return 2.0 * m.keys * kUsed * kRows;
}

/// 12 chains of FMAs on register operands, as many FMAs as P V 6 x 2 does.
__attribute__((target("avx2,fma"), noinline)) double fmaPeak(Data &m) {
  __m256 acc[12];
  for (int a = 0; a < 12; ++a)
    acc[a] = _mm256_set1_ps(static_cast<float>(a));
  const __m256 x = _mm256_set1_ps(0.9999999f), y = _mm256_set1_ps(1e-7f);
  const int64_t steps = static_cast<int64_t>(m.keys) * 8; // 12 rows x 64 columns / (12 x 8 lanes)
  for (int64_t s = 0; s < steps; ++s)
#pragma GCC unroll 12
    for (int a = 0; a < 12; ++a)
      acc[a] = _mm256_fmadd_ps(acc[a], x, y);
  alignas(32) float lanes[8];
  __m256 sum = acc[0];
  for (int a = 1; a < 12; ++a)
    sum = _mm256_add_ps(sum, acc[a]);
  _mm256_store_ps(lanes, sum);
  m.o[0] += lanes[0] * 1e-30f; // (kept: the sums are used)
  return 2.0 * 8 * 12 * static_cast<double>(steps);
}

/// Best GFLOP/s of 7 timed runs of `repeat` calls.
double rate(double (*loop)(Data &), Data &m, int repeat) {
  double flops = loop(m), best = 1e30;
  for (int t = 0; t < 7; ++t) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeat; ++i)
      flops = loop(m);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return flops * repeat / best / 1e9;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<int> keyCounts{64, 512};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keys") == 0 && i + 1 < argc) {
      keyCounts.clear();
      for (const char *s = argv[++i]; *s;) {
        char *end = nullptr;
        const long k = std::strtol(s, &end, 10);
        if (end == s || k < 1 || k > 65536) {
          std::fprintf(stderr, "attnc_bench_loop_shapes: --keys takes counts in 1..65536, as 64,512\n");
          return 2;
        }
        keyCounts.push_back(static_cast<int>(k));
        s = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "usage: attnc_bench_loop_shapes [--keys 64,512]\n"
                           "The AVX2 fused forward's inner loops alone on one core, GFLOP/s (see the file's header).\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::printf("attnc_bench_loop_shapes: this CPU has no AVX2 + FMA; nothing to measure\n");
    return 0;
  }
  std::printf("| loop | keys | GFLOP/s | of the FMA loop |\n|---|---|---|---|\n");
  struct Loop {
    const char *name;
    double (*run)(Data &);
  };
  const Loop loops[] = {{"FMA loop, register operands", fmaPeak}, {"P V 6 x 2 (the kernels')", pv<6, 2>},
                        {"P V 4 x 2", pv<4, 2>},                  {"P V 2 x 4", pv<2, 4>},
                        {"S^T, 6 keys (the kernels')", scoreShape<6>}, {"S^T, 4 keys", scoreShape<4>}};
  for (int keys : keyCounts) {
    Data m(keys);
    const int repeat = std::max(1, 128000 / keys);
    double peak = 0;
    for (const Loop &l : loops) {
      const double r = rate(l.run, m, repeat);
      peak = peak > 0 ? peak : r;
      std::printf("| %s | %d | %.1f | %.0f%% |\n", l.name, keys, r, 100.0 * r / peak);
    }
  }
  return 0;
}
#else
int main() {
  std::printf("attnc_bench_loop_shapes: AVX2 loops; not an x86-64 build\n");
  return 0;
}
#endif
