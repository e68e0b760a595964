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
// Keys and values are f32, or bf16 widened as they are read. The loops
// (RowKernels.inc) are compiled per instruction set like the tile kernels,
// and run on the one fusedIsa() names (the CPU's best, or ATTNC_FUSED_ISA's).
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
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#ifndef ATTNC_FUSED_GENERIC_ONLY
#define ATTNC_FUSED_GENERIC_ONLY 0
#endif
#if defined(__x86_64__) && !ATTNC_FUSED_GENERIC_ONLY
#define ATTNC_ROWS_X86 1
#else
#define ATTNC_ROWS_X86 0
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

} // namespace

// The loops, once per instruction set (see FusedExecutor.cpp: the same
// target regions, and the same choice at run time).
#if ATTNC_ROWS_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,bmi,bmi2")
namespace rows_avx512 {
namespace {
constexpr int kVecBytes = 64, kDotKeys = 8;
#include "RowKernels.inc"
} // namespace
} // namespace rows_avx512
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2")
namespace rows_avx2 {
namespace {
constexpr int kVecBytes = 32, kDotKeys = 4;
#include "RowKernels.inc"
} // namespace
} // namespace rows_avx2
#pragma GCC pop_options
#endif
namespace rows_generic {
namespace {
constexpr int kVecBytes = 16, kDotKeys = 2;
#include "RowKernels.inc"
} // namespace
} // namespace rows_generic

namespace {

/// The loops of the instruction set fusedIsa() names.
template <typename T> struct RowLoops {
  decltype(&rows_generic::runRow<T>) row;
  decltype(&rows_generic::gradRow<T>) grad;
};

template <typename T> RowLoops<T> rowLoops() {
#if ATTNC_ROWS_X86
  const std::string isa = fusedIsa();
  if (isa == "avx512")
    return {&rows_avx512::runRow<T>, &rows_avx512::gradRow<T>};
  if (isa == "avx2")
    return {&rows_avx2::runRow<T>, &rows_avx2::gradRow<T>};
#endif
  return {&rows_generic::runRow<T>, &rows_generic::gradRow<T>};
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
  const RowLoops<T> loops = rowLoops<T>();
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
        query[static_cast<size_t>(c)] = rows_generic::widen(q[r * d + c]);
      qr = query.data();
    }
    const size_t x = static_cast<size_t>(r);
    loops.row(held.at ? mapped.keys[x] : keys, d, qr, k, v, o + r * d, lse ? lse + r : nullptr, scale, firstRow + r,
           code, held.at ? mapped.shifts[x].data() : nullptr);
  });
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
  const RowLoops<T> loops = rowLoops<T>();
  const float empty = -std::numeric_limits<float>::infinity(); // lse of a row without keys (NaN is not empty)
  s.delta.resize(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r)
    s.delta[static_cast<size_t>(r)] = rows_generic::dotRow(dO + r * d, o + r * d, d);
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
        loops.grad(keys, d, q + r * d, dO + r * d, lse[r], s.delta[static_cast<size_t>(r)], k, v, dqOut + r * d, dk,
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
      loops.grad(keys, d, q + r * d, dO + r * d, lse[r], s.delta[static_cast<size_t>(r)], k, v, dqOut + r * d, dk, dv,
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
