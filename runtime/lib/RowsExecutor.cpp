//===- RowsExecutor.cpp - A few query rows, each over its own keys --------===//
//
// Per row: the keys' intervals, then chunks of up to kChunk keys: their
// scores (dot products over d), the chunk's max folded into the running
// max (rescaling the sum and the output when it grows), then P V added to
// the row's output. The work is a read of each named key and value row
// once, so the loop is memory-bound: the next intervals' first lines are
// prefetched while one runs (a pattern's stripes are short runs of rows far
// apart, where the hardware prefetchers, which follow a stream, start cold).
// Keys and values are f32, or bf16 widened as they are read. On x86-64 the
// loops are compiled for AVX-512 and for baseline x86-64 and the CPU picks.
//
//===----------------------------------------------------------------------===//
#include "RowsExecutor.h"

#include "attnc/attnc.hpp"
#include "attnc/plan/RowEvaluator.h"
#include "attnc/support/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

// Not under TSan: GCC instruments a target_clones resolver with
// __tsan_func_entry, and the dynamic loader runs resolvers before TSan is up.
#if defined(__x86_64__) && !defined(ATTNC_FUSED_GENERIC_ONLY) && !defined(__SANITIZE_THREAD__)
#define ATTNC_ROWS_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define ATTNC_ROWS_CLONES
#endif

namespace attnc::rt {

namespace {

constexpr int64_t kChunk = 64;
/// Intervals ahead whose first rows are prefetched, and how many rows each.
constexpr size_t kAheadIntervals = 2;
constexpr int64_t kAheadRows = 4;

inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return bf16ToFloat(x); }

template <typename T> void prefetchRows(const T *base, int64_t first, int64_t rows, int64_t d) {
  const int64_t bytes = rows * d * static_cast<int64_t>(sizeof(T));
  const char *p = reinterpret_cast<const char *>(base + first * d);
  for (int64_t at = 0; at < bytes; at += 64)
    __builtin_prefetch(p + at, 0, 3);
}

/// One row: keys `keys` of k and v, output row o, its log-sum-exp.
template <typename T>
ATTNC_ROWS_CLONES void runRow(const IntervalSet &keys, int64_t d, const float *q, const T *k, const T *v, float *o,
                              float *lse, float scale) {
  float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
  bool nan = false;
  float scores[kChunk];
  std::fill(o, o + d, 0.0f);
  for (size_t at = 0; at < keys.size(); ++at) {
    for (size_t ahead = at + 1; ahead <= at + kAheadIntervals && ahead < keys.size(); ++ahead) {
      const int64_t rows = std::min(kAheadRows, keys[ahead].size());
      prefetchRows(k, keys[ahead].lo, rows, d);
      prefetchRows(v, keys[ahead].lo, rows, d);
    }
    const Interval &iv = keys[at];
    for (int64_t j0 = iv.lo; j0 < iv.hi; j0 += kChunk) {
      const int64_t count = std::min(kChunk, iv.hi - j0);
      float chunkMax = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < count; ++t) {
        const T *key = k + (j0 + t) * d;
        // Eight partial sums: a reduction the compiler can keep in vector
        // lanes without reassociating one sum.
        float part[8] = {};
        int64_t c = 0;
        for (; c + 8 <= d; c += 8)
          for (int x = 0; x < 8; ++x)
            part[x] += q[c + x] * widen(key[c + x]);
        for (; c < d; ++c)
          part[c % 8] += q[c] * widen(key[c]);
        const float s =
            scale * (((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])));
        nan |= s != s;
        scores[t] = s;
        chunkMax = std::max(chunkMax, s);
      }
      if (chunkMax > m) {
        const float correction = std::exp(m - chunkMax);
        sum *= correction;
        for (int64_t c = 0; c < d; ++c)
          o[c] *= correction;
        m = chunkMax;
      }
      for (int64_t t = 0; t < count; ++t) {
        const float p = std::exp(scores[t] - m);
        sum += p;
        const T *value = v + (j0 + t) * d;
        for (int64_t c = 0; c < d; ++c)
          o[c] += p * widen(value[c]);
      }
    }
  }
  if (nan) {
    std::fill(o, o + d, std::numeric_limits<float>::quiet_NaN());
    if (lse)
      *lse = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  const float inv = sum > 0 ? 1.0f / sum : 0.0f;
  for (int64_t c = 0; c < d; ++c)
    o[c] *= inv;
  if (lse)
    *lse = sum > 0 ? m + std::log(sum) : -std::numeric_limits<float>::infinity();
}

template <typename T>
void runRowsOf(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const T *q, const T *k, const T *v,
               float *o, float *lse, float scale, int threads) {
  const ir::RowEvaluator rows(set, n);
  const int64_t count = n - firstRow;
  support::parallelFor(count, static_cast<int>(std::min<int64_t>(threads, count)), [&](int, int64_t r) {
    thread_local IntervalSet keys;
    thread_local std::vector<float> query;
    rows.row(firstRow + r, 0, n, keys);
    const float *qr;
    if constexpr (std::is_same_v<T, float>) {
      qr = q + r * d;
    } else {
      query.resize(static_cast<size_t>(d));
      for (int64_t c = 0; c < d; ++c)
        query[static_cast<size_t>(c)] = widen(q[r * d + c]);
      qr = query.data();
    }
    runRow(keys, d, qr, k, v, o + r * d, lse ? lse + r : nullptr, scale);
  });
}

} // namespace

void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const float *k,
             const float *v, float *o, float *lse, float scale, int threads) {
  runRowsOf(set, n, firstRow, d, q, k, v, o, lse, scale, threads);
}

void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const uint16_t *q, const uint16_t *k,
             const uint16_t *v, float *o, float *lse, float scale, int threads) {
  runRowsOf(set, n, firstRow, d, q, k, v, o, lse, scale, threads);
}

} // namespace attnc::rt
