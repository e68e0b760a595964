//===- RowsExecutor.h - A few query rows, each over its own keys ----------===//
//
// The fused backend's path for a handful of queries at the end of a long
// sequence (a decoding step with a key/value cache): each row's keys come
// from the pattern's closed forms (RowEvaluator, O(intervals) per row), and
// only the key and value rows they name are read. Nothing is prepared per
// n, so a decoder whose cache grows by one key per step builds no plan.
// The backward pass of such rows works the same way (runRowsBackward).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include "FusedExecutor.h"

#include <cstdint>
#include <vector>

namespace attnc::rt {

/// Queries at positions firstRow .. n - 1 of `set` at length n: q and o are
/// [n - firstRow, d], k and v [n, d], contiguous row-major f32; lse (n -
/// firstRow floats, may be null) gets each row's log-sum-exp. A row without
/// keys gives zeros and -inf; a NaN score makes its row NaN. `threads`
/// threads of the shared pool share the rows.
/// With `score`, each pair's score goes through that code first (rows are
/// positions firstRow.., keys 0.., never gathered).
///
/// With `held` (attnc_call::key_positions), the keys are not positions
/// 0 .. n - 1 but held.count rows at the ascending positions held.at, and
/// the queries are the held.queries positions from firstRow on (q, o and
/// lse that many rows): a cache that dropped the keys no query reads any
/// more. A query whose keys include a position not held is refused
/// (RunError naming both positions), before anything is written.
struct HeldKeys {
  const int64_t *at = nullptr; ///< null: the keys are positions 0 .. n - 1
  int64_t count = 0;
  int64_t queries = 0;
};
void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const float *k,
             const float *v, float *o, float *lse, float scale, int threads, const ScoreCode *score = nullptr,
             HeldKeys held = {});
/// The same on bf16 q, k and v (uint16_t), widened as they are read, so
/// that only the named rows are touched.
void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const uint16_t *q, const uint16_t *k,
             const uint16_t *v, float *o, float *lse, float scale, int threads, const ScoreCode *score = nullptr,
             HeldKeys held = {});

/// runRowsBackward's scratch, reused across the slices and calls of a worker.
struct RowsGradScratch {
  std::vector<float> delta;             ///< rowsum(dO * O) of each query row
  std::vector<int64_t> keyPairs;        ///< per key position: the (row, key) pairs up to it (n + 1)
  std::vector<int64_t> cuts;            ///< the key ranges the threads share out: parts + 1 positions
  std::vector<int64_t> rowStart;        ///< row r's keys: rowKeys[rowStart[r] .. rowStart[r + 1]) (count + 1)
  std::vector<Interval> rowKeys;        ///< each row's key intervals, listed once for every range
  struct RowKeys {
    int64_t row;
    Interval keys;
  };
  std::vector<int64_t> rangeStart;      ///< key range x's rows: rangeKeys[rangeStart[x] .. rangeStart[x + 1])
  std::vector<RowKeys> rangeKeys;       ///< rowKeys cut at the ranges, by range, each range's by row
  std::vector<int32_t> rangeOfKey;      ///< the range each key position lies in (n)
  std::vector<std::vector<float>> dq;   ///< workers 1 .. threads - 1: their partial dQ ([rows, d])
  std::vector<char> used;               ///< per worker: whether its partial dQ holds a sum of this call
  std::vector<std::vector<double>> inputGrad; ///< per worker: a score's float-input gradient sums
  /// The key lists are kept for the next call up to kKeptBytes (topk's at
  /// n = 16,384 hold about 40 MB): a longer sequence's are dropped after it.
  static constexpr size_t kKeptBytes = size_t{64} << 20;
  size_t listBytes() const {
    return rowStart.capacity() * sizeof(int64_t) + rowKeys.capacity() * sizeof(Interval) +
           rangeStart.capacity() * sizeof(int64_t) + rangeKeys.capacity() * sizeof(RowKeys) +
           keyPairs.capacity() * sizeof(int64_t) + rangeOfKey.capacity() * sizeof(int32_t);
  }
  void trim() {
    if (listBytes() > kKeptBytes)
      rowStart = {}, rowKeys = {}, rangeStart = {}, rangeKeys = {}, keyPairs = {}, rangeOfKey = {};
  }
};

/// The gradients of the queries at positions firstRow .. n - 1 of `set` at
/// length n (see attnc_run_backward): q, o, dO and dq are [n - firstRow, d],
/// k, v, dk and dv [n, d], contiguous row-major; lse has n - firstRow floats
/// (the forward's). Each row's P is recomputed from q, k and lse over the
/// row's keys, which the closed forms give as for runRows. dq is
/// overwritten (zeros for a row without keys, lse -inf); dk and dv are
/// added to, so that the caller clears them once and the query heads of a
/// group sum into them in place. NaN reaches what it touches, as in the
/// block kernels: a NaN in row r's q, dO, o or lse makes dQ row r and the
/// dK and dV rows of r's keys NaN. `threads` threads of the shared pool
/// split the keys into ranges (each key's dK, dV rows written by one).
void runRowsBackward(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const float *k,
                     const float *v, const float *o, const float *dO, const float *lse, float *dq, float *dk,
                     float *dv, float scale, RowsGradScratch &scratch, int threads, const ScoreRun *score = nullptr,
                     double *inputGrad = nullptr);
/// The same on bf16 k and v (uint16_t), widened as they are read, so that
/// only the key and value rows the queries name are touched.
void runRowsBackward(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q,
                     const uint16_t *k, const uint16_t *v, const float *o, const float *dO, const float *lse,
                     float *dq, float *dk, float *dv, float scale, RowsGradScratch &scratch, int threads,
                     const ScoreRun *score = nullptr, double *inputGrad = nullptr);

} // namespace attnc::rt
