//===- RowsExecutor.cpp - A few query rows, each over its own keys --------===//
//
// Per row: the keys' intervals, then chunks of up to kChunk keys (a long
// interval's own, short intervals' together: selected tokens): their
// scores (dot products over d), the chunk's max folded into the running
// max (rescaling the sum and the output when it grows), then P V added to
// the row's output. The work is a read of each named key and value row
// once, so the loop is memory-bound: the next chunk's rows are prefetched
// while one runs (a pattern's stripes and selected tokens are short runs of
// rows far apart, where the hardware prefetchers, which follow a stream,
// start cold; of a long run, its first lines).
// Keys and values are f32, or bf16 widened as they are read. On x86-64 the
// loops are compiled for AVX-512 and for baseline x86-64 and the CPU picks.
//
// The backward pass (runRowsBackward) needs no online softmax: the forward's
// log-sum-exp gives each pair's P = exp(scale q.k - lse) on its own, so the
// pairs of a row are independent and the work can be cut along keys as well
// as rows. Per row, delta = rowsum(dO * O) first; then per key of the row
// the two dot products (scores, dP) and three updates along d (dV and dK of
// the key, dQ of the row), one pass over the key's rows.
//
//===----------------------------------------------------------------------===//
#include "RowsExecutor.h"

#include "ExpPoly.h"
#include "backends/Backend.h"

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
/// Intervals shorter than this (selected tokens, small blocks) share a
/// chunk with their neighbours; longer ones are chunks of their own.
constexpr int64_t kShortRun = 16;

inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return bf16ToFloat(x); }

template <typename T> void prefetchRows(const T *base, int64_t first, int64_t rows, int64_t d) {
  const int64_t bytes = rows * d * static_cast<int64_t>(sizeof(T));
  const char *p = reinterpret_cast<const char *>(base + first * d);
  for (int64_t at = 0; at < bytes; at += 64)
    __builtin_prefetch(p + at, 0, 3);
}

/// A dot product over d in eight partial sums: a
/// reduction the compiler keeps in vector lanes without reassociating.
template <typename T> inline float dotRow(const float *a, const T *b, int64_t d) {
  float part[8] = {};
  int64_t c = 0;
  for (; c + 8 <= d; c += 8)
    for (int x = 0; x < 8; ++x)
      part[x] += a[c + x] * widen(b[c + x]);
  for (; c < d; ++c)
    part[c % 8] += a[c] * widen(b[c]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

/// scale times the dot products of q with `count` consecutive rows of d
/// (keys), into out: eight rows at a time where d allows, each in its own
/// 16 partial sums (eight independent chains of FMAs, which the vector
/// units overlap, where one row's chain waits on each FMA's latency),
/// summed in a fixed order.
template <typename T>
inline void dotRows(const float *q, const T *keys, int64_t count, int64_t d, float scale, float *out) {
  int64_t t = 0;
  if (d % 16 == 0)
    for (; t + 8 <= count; t += 8) {
      float part[8][16] = {};
      const T *rows = keys + t * d;
      for (int64_t c = 0; c < d; c += 16)
        for (int u = 0; u < 8; ++u)
          for (int x = 0; x < 16; ++x)
            part[u][x] += q[c + x] * widen(rows[u * d + c + x]);
      for (int u = 0; u < 8; ++u) {
        float half[8];
        for (int x = 0; x < 8; ++x)
          half[x] = part[u][x] + part[u][x + 8];
        out[t + u] = scale * (((half[0] + half[1]) + (half[2] + half[3])) + ((half[4] + half[5]) + (half[6] + half[7])));
      }
    }
  for (; t < count; ++t)
    out[t] = scale * dotRow(q, keys + t * d, d);
}

/// The same with the rows given by pointers (a chunk's keys need not be
/// consecutive rows: selected tokens are one key per interval); while row t
/// is read, the lines of `next[t]` (null: none) are prefetched, a chunk ahead.
template <typename T>
inline void dotRows(const float *q, const T *const *keys, int64_t count, int64_t d, float scale, float *out,
                    const T *const *next) {
  int64_t t = 0;
  if (d % 16 == 0)
    for (; t + 8 <= count; t += 8) {
      for (int u = 0; u < 8; ++u)
        if (next[t + u])
          prefetchRows(next[t + u], 0, 1, d);
      float part[8][16] = {};
      const T *rows[8];
      for (int u = 0; u < 8; ++u)
        rows[u] = keys[t + u];
      for (int64_t c = 0; c < d; c += 16)
        for (int u = 0; u < 8; ++u)
          for (int x = 0; x < 16; ++x)
            part[u][x] += q[c + x] * widen(rows[u][c + x]);
      for (int u = 0; u < 8; ++u) {
        float half[8];
        for (int x = 0; x < 8; ++x)
          half[x] = part[u][x] + part[u][x + 8];
        out[t + u] = scale * (((half[0] + half[1]) + (half[2] + half[3])) + ((half[4] + half[5]) + (half[6] + half[7])));
      }
    }
  for (; t < count; ++t) {
    if (next[t])
      prefetchRows(next[t], 0, 1, d);
    out[t] = scale * dotRow(q, keys[t], d);
  }
}

/// One row: keys `keys` of k and v, output row o, its log-sum-exp.
/// A score modifier on `count` scores of row `row`, keys j0 .. j0 + count
/// (count <= kChunk): scores[t] = f(scores[t]); with dP (the backward),
/// also P, dS' = P (dP - delta) into weight and dS into dP's place, the
/// inputs' gradients added into grad.
struct RowScore {
  const ScoreCode *code = nullptr;
  std::vector<float> slots;
  uint64_t filledFor = 0;
  float weight[kChunk];

  const float *run(int64_t row, int64_t j0, int64_t count, const float *scores) {
    bindScoreSlots(*code, slots, filledFor);
    constexpr int M = ScoreCode::kMaxLanes;
    static_assert(kChunk <= M);
    std::copy_n(scores, count, slots.data() + ScoreCode::kS * M);
    if (code->usesI)
      std::fill_n(slots.data() + ScoreCode::kI * M, count, static_cast<float>(row));
    // (Each lane a key of one row: Rel's positions are the row's and the keys'.)
    rowPos = static_cast<float>(row);
    for (int64_t t = 0; t < count; ++t)
      keyPos[t] = static_cast<float>(j0 + t);
    if (code->usesJ)
      std::copy_n(keyPos, count, slots.data() + ScoreCode::kJ * M);
    lanes = ScoreLanes{slots.data(), static_cast<int>(count)};
    lanes.rowPos = &rowPos;
    lanes.keyPos = keyPos;
    lanes.width = 1;
    scoreRunner()(*code, lanes);
    return lanes.slot(code->value);
  }
  const float *dValue() const { return lanes.slot(code->dValue); }
  float rowPos = 0, keyPos[ScoreCode::kMaxLanes];
  ScoreLanes lanes{nullptr, 0};
};

RowScore &rowScore(const ScoreCode *code) {
  thread_local RowScore score;
  score.code = code;
  return score;
}

template <typename T>
ATTNC_ROWS_CLONES void runRow(const IntervalSet &keys, int64_t d, const float *q, const T *k, const T *v, float *o,
                              float *lse, float scale, int64_t row, const ScoreCode *code,
                              const int64_t *shift = nullptr) {
  // Interval `at`'s key j is row j - shift[at] of k and v (held keys), else row j.
  auto rowOf = [shift](size_t at, int64_t j) { return shift ? j - shift[at] : j; };
  // The keys in chunks of up to kChunk, each chunk's key and value rows as
  // pointers: a long interval's keys in chunks of their own, short ones
  // (selected tokens are an interval each) together; with a score modifier
  // a chunk stays in one interval, whose positions j0, j0 + 1, ... the code
  // reads. The next chunk is listed while one runs.
  struct Chunk {
    const T *k[kChunk], *v[kChunk]; ///< (a run: k[0] and v[0] only, its rows consecutive)
    int64_t count = 0, j0 = 0;
    bool run = false;
    const T *keyRow(int64_t t, int64_t d) const { return run ? k[0] + t * d : k[t]; }
    const T *valueRow(int64_t t, int64_t d) const { return run ? v[0] + t * d : v[t]; }
  };
  Chunk chunks[2];
  size_t at = 0;
  int64_t j = keys.empty() ? 0 : keys[0].lo;
  auto list = [&](Chunk &c) {
    c.count = 0;
    c.run = false;
    if (at < keys.size() && j < keys[at].hi && keys[at].size() >= kShortRun) { // a long interval's next run
      c.run = true;
      c.j0 = j;
      c.count = std::min(kChunk, keys[at].hi - j);
      c.k[0] = k + rowOf(at, j) * d;
      c.v[0] = v + rowOf(at, j) * d;
      if ((j += c.count) >= keys[at].hi && ++at < keys.size())
        j = keys[at].lo;
      return;
    }
    while (at < keys.size() && c.count < kChunk) {
      if (j >= keys[at].hi) {
        // Short intervals share chunks; a long one keeps its own, a run.
        const bool longRun = keys[at].size() >= kShortRun;
        if (++at < keys.size())
          j = keys[at].lo;
        if (c.count > 0 && (code || longRun || (at < keys.size() && keys[at].size() >= kShortRun)))
          break;
        continue;
      }
      if (c.count == 0)
        c.j0 = j;
      const int64_t take = std::min(kChunk - c.count, keys[at].hi - j);
      for (int64_t t = 0; t < take; ++t) {
        c.k[c.count + t] = k + rowOf(at, j + t) * d;
        c.v[c.count + t] = v + rowOf(at, j + t) * d;
      }
      c.count += take;
      j += take;
    }
  };
  float m = -std::numeric_limits<float>::infinity(), sum = 0.0f;
  bool nan = false;
  float scores[kChunk + 16];
  std::fill(o, o + d, 0.0f);
  list(chunks[0]);
  for (int cur = 0; chunks[cur].count > 0; cur ^= 1) {
    const Chunk &c = chunks[cur];
    Chunk &next = chunks[cur ^ 1];
    list(next);
    const int64_t count = c.count;
    // Consecutive rows (a window, say): read as one run, which the hardware
    // prefetchers follow; the next chunk's first rows prefetched. Scattered
    // ones: every row of the next chunk prefetched as this one's are read.
    const bool run = c.run;
    const T *ahead[kChunk]; // scattered: the next chunk's key rows (its value rows: in the P V loop)
    for (int64_t t = 0; !run && t < count; ++t)
      ahead[t] = t < next.count ? next.keyRow(t, d) : nullptr;
    {
      float chunkMax = -std::numeric_limits<float>::infinity();
      if (run) {
        for (int64_t t = 0; t < std::min(kAheadRows, next.count); ++t) {
          prefetchRows(next.keyRow(t, d), 0, 1, d);
          prefetchRows(next.valueRow(t, d), 0, 1, d);
        }
        dotRows(q, c.k[0], count, d, scale, scores);
      } else {
        dotRows(q, c.k, count, d, scale, scores, ahead);
      }
      if (code) {
        const float *f = rowScore(code).run(row, c.j0, count, scores);
        std::copy_n(f, count, scores);
      }
      // The chunk's max and whether it holds a NaN, in 16 lanes (a loop the
      // compiler vectorises: each lane its own max, no reassociation); the
      // lanes past `count` hold -inf.
      const int64_t padded = (count + 15) / 16 * 16;
      std::fill(scores + count, scores + padded, -std::numeric_limits<float>::infinity());
      float laneMax[16];
      int32_t laneNan[16] = {};
      std::fill_n(laneMax, 16, -std::numeric_limits<float>::infinity());
      for (int64_t t0 = 0; t0 < padded; t0 += 16)
        for (int l = 0; l < 16; ++l) {
          const float x = scores[t0 + l];
          laneNan[l] |= x != x;
          laneMax[l] = x > laneMax[l] ? x : laneMax[l];
        }
      for (int l = 0; l < 16; ++l) {
        nan |= laneNan[l] != 0;
        chunkMax = std::max(chunkMax, laneMax[l]);
      }
      if (chunkMax > m) {
        const float correction = std::exp(m - chunkMax);
        sum *= correction;
        for (int64_t x = 0; x < d; ++x)
          o[x] *= correction;
        m = chunkMax;
      }
      // (A loop of its own: e^x in vector lanes, not a libm call per key.)
      float weights[kChunk];
      for (int64_t t = 0; t < count; ++t)
        weights[t] = expPoly(scores[t] - m);
      // P V four keys at a time: o stays in memory (d is not known here), so
      // one store and load of o per four keys rather than per key.
      const int64_t prefetched = run ? 0 : next.count; // (a run's next rows: above)
      int64_t t = 0;
      for (; t + 4 <= count; t += 4) {
        for (int64_t u = t; u < t + 4; ++u)
          if (u < prefetched)
            prefetchRows(next.valueRow(u, d), 0, 1, d);
        const float p0 = weights[t], p1 = weights[t + 1], p2 = weights[t + 2], p3 = weights[t + 3];
        sum += (p0 + p1) + (p2 + p3);
        const T *v0 = c.valueRow(t, d), *v1 = c.valueRow(t + 1, d), *v2 = c.valueRow(t + 2, d),
                *v3 = c.valueRow(t + 3, d);
        for (int64_t x = 0; x < d; ++x)
          o[x] += (p0 * widen(v0[x]) + p1 * widen(v1[x])) + (p2 * widen(v2[x]) + p3 * widen(v3[x]));
      }
      for (; t < count; ++t) {
        if (t < prefetched)
          prefetchRows(next.valueRow(t, d), 0, 1, d);
        const float p = weights[t];
        sum += p;
        const T *value = c.valueRow(t, d);
        for (int64_t x = 0; x < d; ++x)
          o[x] += p * widen(value[x]);
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

/// Each query's keys as intervals of positions and, per interval, the
/// shift from a position to its row among the held keys; throws RunError
/// for a query that reads a position the call does not hold.
struct HeldRows {
  std::vector<IntervalSet> keys;
  std::vector<std::vector<int64_t>> shifts;
};

HeldRows heldRows(const ir::RowEvaluator &rows, int64_t firstRow, const HeldKeys &held) {
  HeldRows out;
  out.keys.resize(static_cast<size_t>(held.queries));
  out.shifts.resize(static_cast<size_t>(held.queries));
  const int64_t *begin = held.at, *end = held.at + held.count;
  for (int64_t r = 0; r < held.queries; ++r) {
    IntervalSet &keys = out.keys[static_cast<size_t>(r)];
    rows.row(firstRow + r, 0, rows.n(), keys);
    for (const Interval &iv : keys) {
      // Positions ascend strictly, so [lo, hi) is held exactly when its
      // first position's row plus the length lands on hi - 1.
      const int64_t *at = std::lower_bound(begin, end, iv.lo);
      const int64_t idx = at - begin;
      if (at == end || *at != iv.lo || idx + iv.size() > held.count || begin[idx + iv.size() - 1] != iv.hi - 1) {
        const int64_t *gap = at;
        int64_t want = iv.lo;
        while (gap != end && *gap == want && want < iv.hi)
          ++gap, ++want;
        throw RunError{ATTNC_ERROR_INVALID_ARGUMENT,
                       "the query at position " + std::to_string(firstRow + r) + " reads the key at position " +
                           std::to_string(want) + ", which the call's key_positions do not hold (a cache dropped "
                           "a key the pattern still reads)"};
      }
      out.shifts[static_cast<size_t>(r)].push_back(iv.lo - idx);
    }
  }
  return out;
}

template <typename T>
void runRowsOf(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const T *q, const T *k, const T *v,
               float *o, float *lse, float scale, int threads, const ScoreCode *code, const HeldKeys &held) {
  const ir::RowEvaluator rows(set, n);
  // Held keys: every row mapped onto them (and refused) before any is computed.
  const HeldRows mapped = held.at ? heldRows(rows, firstRow, held) : HeldRows{};
  const int64_t count = held.at ? held.queries : n - firstRow;
  support::parallelFor(count, static_cast<int>(std::min<int64_t>(threads, count)), [&](int, int64_t r) {
    thread_local IntervalSet keys;
    thread_local std::vector<float> query;
    if (!held.at)
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
    const size_t x = static_cast<size_t>(r);
    runRow(held.at ? mapped.keys[x] : keys, d, qr, k, v, o + r * d, lse ? lse + r : nullptr, scale, firstRow + r,
           code, held.at ? mapped.shifts[x].data() : nullptr);
  });
}


/// One pair's updates along d: dV_j += p dO_i, dK_j += ds q_i, dQ_i += ds k_j.
template <typename T>
inline void updatePair(int64_t d, float p, float ds, const float *__restrict q, const float *__restrict dO,
                       const T *__restrict key, float *__restrict dq, float *__restrict dk, float *__restrict dv) {
  for (int64_t c = 0; c < d; ++c) {
    dv[c] += p * dO[c];
    dk[c] += ds * q[c];
    dq[c] += ds * widen(key[c]);
  }
}

/// One row's gradients over keys `keys`: its dQ row dq (added to) and the
/// keys' dK and dV rows (added to). `delta` is rowsum(dO * O).
template <typename T>
ATTNC_ROWS_CLONES void gradRow(const IntervalSet &keys, int64_t d, const float *q, const float *dO, float lse,
                               float delta, const T *k, const T *v, float *dq, float *dk, float *dv, float scale,
                               int64_t row, const ScoreRun *score, double *inputGrad) {
  for (size_t at = 0; at < keys.size(); ++at) {
    for (size_t ahead = at + 1; ahead <= at + kAheadIntervals && ahead < keys.size(); ++ahead) {
      const int64_t rows = std::min(kAheadRows, keys[ahead].size());
      prefetchRows(k, keys[ahead].lo, rows, d);
      prefetchRows(v, keys[ahead].lo, rows, d);
      prefetchRows(dk, keys[ahead].lo, rows, d);
      prefetchRows(dv, keys[ahead].lo, rows, d);
    }
    const Interval &iv = keys[at];
    if (score) { // chunks of keys through the score's code
      RowScore &rs = rowScore(score->code);
      float s[kChunk], dp[kChunk];
      for (int64_t j0 = iv.lo; j0 < iv.hi; j0 += kChunk) {
        const int64_t count = std::min(kChunk, iv.hi - j0);
        for (int64_t t = 0; t < count; ++t) {
          s[t] = scale * dotRow(q, k + (j0 + t) * d, d);
          dp[t] = dotRow(dO, v + (j0 + t) * d, d);
        }
        const float *f = rs.run(row, j0, count, s), *df = rs.dValue();
        for (int64_t t = 0; t < count; ++t) {
          const float p = std::exp(f[t] - lse), dsp = p * (dp[t] - delta);
          rs.weight[t] = dsp;
          updatePair(d, p, scale * dsp * df[t], q, dO, k + (j0 + t) * d, dq, dk + (j0 + t) * d, dv + (j0 + t) * d);
        }
        if (rs.code->hasInputGrads())
          accumulateScoreGrads(*rs.code, rs.lanes, rs.weight, score->gradOffsets, inputGrad);
      }
      continue;
    }
    for (int64_t j = iv.lo; j < iv.hi; ++j) {
      const T *key = k + j * d;
      const float p = std::exp(scale * dotRow(q, key, d) - lse);
      const float ds = scale * p * (dotRow(dO, v + j * d, d) - delta);
      updatePair(d, p, ds, q, dO, key, dq, dk + j * d, dv + j * d);
    }
  }
}

/// Work (pairs x d) below which one more thread costs more than it saves:
/// about 1,000 pairs at d = 64, some 30 us of the loop above.
constexpr int64_t kWorkPerThread = int64_t{1} << 16;
/// Key ranges per thread: enough for the pool to even out ranges whose
/// pairs differ in cost (cache misses), few enough that each row's keys are
/// evaluated only a few times.
constexpr int64_t kRangesPerThread = 4;
/// The bytes of K, V, dK and dV rows a key range may touch: a quarter of a
/// typical 1-2 MiB L2, so that they stay there while every row passes over
/// the range.
constexpr int64_t kRangeBytes = int64_t{256} << 10;

template <typename T>
void runRowsBackwardOf(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const T *k,
                       const T *v, const float *o, const float *dO, const float *lse, float *dq, float *dk, float *dv,
                       float scale, RowsGradScratch &s, int threads, const ScoreRun *score, double *inputGrad) {
  const ir::RowEvaluator rows(set, n);
  const int64_t count = n - firstRow;
  const float empty = -std::numeric_limits<float>::infinity(); // lse of a row without keys (NaN is not empty)
  s.delta.resize(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r)
    s.delta[static_cast<size_t>(r)] = dotRow(dO + r * d, o + r * d, d);
  std::fill(dq, dq + count * d, 0.0f);
  // Rows [0, count) over keys [lo, hi), into dQ rows `dqOut`.
  // With a score modifier, each worker sums the float inputs' gradients
  // apart (s.inputGrad[w]), added into inputGrad at the end.
  const bool scored = score && score->code;
  if (scored)
    s.inputGrad.assign(static_cast<size_t>(std::max(1, threads)),
                       std::vector<double>(static_cast<size_t>(score->gradSize), 0.0));
  bool listed = false, bucketed = false; // each row's keys in s.rowKeys; cut by range in s.rangeKeys
  auto runRange = [&](int64_t lo, int64_t hi, float *dqOut, int worker, int64_t range) {
    thread_local IntervalSet keys;
    if (bucketed) { // the range's rows in order, each with its keys inside the range
      const int64_t end = s.rangeStart[static_cast<size_t>(range) + 1];
      for (int64_t e = s.rangeStart[static_cast<size_t>(range)]; e < end;) {
        const int64_t r = s.rangeKeys[static_cast<size_t>(e)].row;
        keys.clear();
        for (; e < end && s.rangeKeys[static_cast<size_t>(e)].row == r; ++e)
          keys.push_back(s.rangeKeys[static_cast<size_t>(e)].keys);
        gradRow(keys, d, q + r * d, dO + r * d, lse[r], s.delta[static_cast<size_t>(r)], k, v, dqOut + r * d, dk,
                dv, scale, firstRow + r, scored ? score : nullptr,
                scored ? s.inputGrad[static_cast<size_t>(worker)].data() : nullptr);
      }
      return;
    }
    for (int64_t r = 0; r < count; ++r) {
      if (lse[r] == empty)
        continue;
      if (listed) { // the row's intervals inside [lo, hi)
        const auto first = s.rowKeys.begin() + s.rowStart[static_cast<size_t>(r)],
                   last = s.rowKeys.begin() + s.rowStart[static_cast<size_t>(r) + 1];
        keys.clear();
        for (auto x = std::upper_bound(first, last, lo, [](int64_t v, const Interval &iv) { return v < iv.hi; });
             x != last && x->lo < hi; ++x)
          keys.push_back({std::max(lo, x->lo), std::min(hi, x->hi)});
      } else {
        rows.row(firstRow + r, lo, hi, keys);
      }
      gradRow(keys, d, q + r * d, dO + r * d, lse[r], s.delta[static_cast<size_t>(r)], k, v, dqOut + r * d, dk, dv,
              scale, firstRow + r, scored ? score : nullptr,
              scored ? s.inputGrad[static_cast<size_t>(worker)].data() : nullptr);
    }
  };
  // (Adds the workers' sums of the inputs' gradients: every return below.)
  struct AddGrads {
    RowsGradScratch &s;
    bool scored;
    double *to;
    ~AddGrads() {
      if (scored && to)
        for (const std::vector<double> &part : s.inputGrad)
          for (size_t e = 0; e < part.size(); ++e)
            to[e] += part[e];
    }
  } addGrads{s, scored, inputGrad};
  if (count == 1 && threads <= 1) {
    runRange(0, n, dq, 0, -1);
    return;
  }
  // Rows pass over the keys one range at a time, so that the range's key
  // rows are read from cache by every row after the first (the rows of a
  // block mostly share their keys: the pattern's stripes and blocks).
  // Threads split those ranges, not the rows: every key's dK and dV rows are
  // then written by one thread, and only dQ ([rows, d], at most a quarter of
  // the keys' size) needs per-thread partial sums. Split by rows, each
  // thread would need partial dK and dV over the keys its rows touch, which
  // would be nearly all the touched keys, once per thread. With threads, a
  // range also holds at most an even share of the pairs (from a prefix sum
  // of pairs per key: O(n), as clearing dK and dV is anyway); a small slice
  // runs on one thread.
  // Each row's keys are listed here once, for the count and for every range
  // (a row of selected tokens evaluated per range was most of topk's
  // backward: 64 ranges at n = 16,384).
  s.keyPairs.assign(static_cast<size_t>(n + 1), 0);
  s.rowStart.assign(static_cast<size_t>(count + 1), 0);
  s.rowKeys.clear();
  int64_t pairs = 0;
  {
    IntervalSet keys;
    for (int64_t r = 0; r < count; ++r) {
      s.rowStart[static_cast<size_t>(r)] = static_cast<int64_t>(s.rowKeys.size());
      if (lse[r] == empty)
        continue;
      rows.row(firstRow + r, 0, n, keys);
      for (const Interval &iv : keys) {
        ++s.keyPairs[static_cast<size_t>(iv.lo)];
        --s.keyPairs[static_cast<size_t>(iv.hi)];
        pairs += iv.size();
      }
      s.rowKeys.insert(s.rowKeys.end(), keys.begin(), keys.end());
    }
    s.rowStart[static_cast<size_t>(count)] = static_cast<int64_t>(s.rowKeys.size());
    listed = true;
  }
  threads = static_cast<int>(std::clamp<int64_t>(pairs * d / kWorkPerThread, 1, std::max(1, threads)));
  if (count == 1 && threads <= 1) {
    runRange(0, n, dq, 0, -1);
    return;
  }
  // keyPairs[j]: pairs with a key before j.
  int64_t perKey = 0, before = 0;
  for (int64_t j = 0; j <= n; ++j) {
    perKey += s.keyPairs[static_cast<size_t>(j)];
    s.keyPairs[static_cast<size_t>(j)] = before;
    before += perKey;
  }
  const int64_t keysPerRange = std::max<int64_t>(16, kRangeBytes / (4 * d * static_cast<int64_t>(sizeof(float))));
  const int64_t pairsPerRange =
      threads > 1 ? std::max<int64_t>(1, pairs / (threads * kRangesPerThread)) : std::numeric_limits<int64_t>::max();
  s.cuts.assign(1, 0);
  int64_t touched = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = static_cast<int64_t>(s.cuts.back());
    touched += s.keyPairs[static_cast<size_t>(j + 1)] > s.keyPairs[static_cast<size_t>(j)];
    if (touched >= keysPerRange ||
        s.keyPairs[static_cast<size_t>(j + 1)] - s.keyPairs[static_cast<size_t>(at)] >= pairsPerRange) {
      s.cuts.push_back(j + 1);
      touched = 0;
    }
  }
  if (s.cuts.back() != n)
    s.cuts.push_back(n);
  const int64_t ranges = static_cast<int64_t>(s.cuts.size()) - 1;
  // Each row's keys cut at the ranges, by range (rows ascending in each):
  // a range then visits only the rows with keys in it, where a search of
  // every row's list per range was 15% of topk's forward + backward. Only
  // where the rows' intervals are short next to the ranges (selected
  // tokens): long ones (queries at an offset under causality, each over
  // most ranges) would be cut into rows x ranges parts; those rows search.
  s.rangeOfKey.resize(static_cast<size_t>(n));
  for (int64_t x = 0; x < ranges; ++x)
    std::fill(s.rangeOfKey.begin() + s.cuts[static_cast<size_t>(x)],
              s.rangeOfKey.begin() + s.cuts[static_cast<size_t>(x) + 1], static_cast<int32_t>(x));
  auto rangeOf = [&](int64_t key) { return int64_t{s.rangeOfKey[static_cast<size_t>(key)]}; };
  int64_t parts = 0;
  for (const Interval &iv : s.rowKeys)
    parts += rangeOf(iv.hi - 1) - rangeOf(iv.lo) + 1;
  if (parts <= 2 * static_cast<int64_t>(s.rowKeys.size()) + ranges) {
    s.rangeStart.assign(static_cast<size_t>(ranges + 1), 0);
    auto forEachPart = [&](auto &&fn) {
      for (int64_t r = 0; r < count; ++r)
        for (int64_t e = s.rowStart[static_cast<size_t>(r)]; e < s.rowStart[static_cast<size_t>(r) + 1]; ++e) {
          const Interval iv = s.rowKeys[static_cast<size_t>(e)];
          for (int64_t x = rangeOf(iv.lo); x < ranges && s.cuts[static_cast<size_t>(x)] < iv.hi; ++x)
            fn(x, r, Interval{std::max(iv.lo, s.cuts[static_cast<size_t>(x)]),
                              std::min(iv.hi, s.cuts[static_cast<size_t>(x) + 1])});
        }
    };
    forEachPart([&](int64_t x, int64_t, Interval) { ++s.rangeStart[static_cast<size_t>(x) + 1]; });
    for (int64_t x = 0; x < ranges; ++x)
      s.rangeStart[static_cast<size_t>(x) + 1] += s.rangeStart[static_cast<size_t>(x)];
    s.rangeKeys.resize(static_cast<size_t>(s.rangeStart.back()));
    std::vector<int64_t> fill(s.rangeStart.begin(), s.rangeStart.end() - 1);
    forEachPart([&](int64_t x, int64_t r, Interval iv) {
      s.rangeKeys[static_cast<size_t>(fill[static_cast<size_t>(x)]++)] = {r, iv};
    });
    bucketed = true;
  }
  auto hasPairs = [&](int64_t lo, int64_t hi) {
    return s.keyPairs[static_cast<size_t>(hi)] > s.keyPairs[static_cast<size_t>(lo)];
  };
  if (threads <= 1) {
    for (int64_t x = 0; x < ranges; ++x)
      if (hasPairs(s.cuts[static_cast<size_t>(x)], s.cuts[static_cast<size_t>(x + 1)]))
        runRange(s.cuts[static_cast<size_t>(x)], s.cuts[static_cast<size_t>(x + 1)], dq, 0, x);
    return;
  }
  s.dq.resize(static_cast<size_t>(threads));
  s.used.assign(static_cast<size_t>(threads), 0);
  support::parallelFor(ranges, threads, [&](int w, int64_t x) {
    const int64_t lo = s.cuts[static_cast<size_t>(x)], hi = s.cuts[static_cast<size_t>(x + 1)];
    if (!hasPairs(lo, hi))
      return;
    float *dqOut = dq;
    if (w > 0) {
      std::vector<float> &partial = s.dq[static_cast<size_t>(w)];
      if (!s.used[static_cast<size_t>(w)]) {
        partial.assign(static_cast<size_t>(count * d), 0.0f);
        s.used[static_cast<size_t>(w)] = 1;
      }
      dqOut = partial.data();
    }
    runRange(lo, hi, dqOut, w, x);
  });
  for (int w = 1; w < threads; ++w)
    if (s.used[static_cast<size_t>(w)])
      for (int64_t x = 0; x < count * d; ++x)
        dq[x] += s.dq[static_cast<size_t>(w)][static_cast<size_t>(x)];
}

} // namespace

void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const float *k,
             const float *v, float *o, float *lse, float scale, int threads, const ScoreCode *score, HeldKeys held) {
  runRowsOf(set, n, firstRow, d, q, k, v, o, lse, scale, threads, score, held);
}

void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const uint16_t *q, const uint16_t *k,
             const uint16_t *v, float *o, float *lse, float scale, int threads, const ScoreCode *score,
             HeldKeys held) {
  runRowsOf(set, n, firstRow, d, q, k, v, o, lse, scale, threads, score, held);
}

void runRowsBackward(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const float *k,
                     const float *v, const float *o, const float *dO, const float *lse, float *dq, float *dk,
                     float *dv, float scale, RowsGradScratch &scratch, int threads, const ScoreRun *score,
                     double *inputGrad) {
  runRowsBackwardOf(set, n, firstRow, d, q, k, v, o, dO, lse, dq, dk, dv, scale, scratch, threads, score, inputGrad);
  scratch.trim();
}

void runRowsBackward(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q,
                     const uint16_t *k, const uint16_t *v, const float *o, const float *dO, const float *lse,
                     float *dq, float *dk, float *dv, float scale, RowsGradScratch &scratch, int threads,
                     const ScoreRun *score, double *inputGrad) {
  runRowsBackwardOf(set, n, firstRow, d, q, k, v, o, dO, lse, dq, dk, dv, scale, scratch, threads, score, inputGrad);
  scratch.trim();
}

} // namespace attnc::rt
