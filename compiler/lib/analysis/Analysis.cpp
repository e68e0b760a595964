//===- Analysis.cpp - Row statistics and tile classification --------------===//
#include "attnc/analysis/Analysis.h"

#include "attnc/plan/RowEvaluator.h"

#include <algorithm>
#include <limits>

namespace attnc::ir {

RowStats analyzeRows(const SetRef &set, int64_t n) {
  RowEvaluator eval(set, n);
  RowStats s;
  s.n = n;
  s.minRow = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < n; ++i) {
    IntervalSet keys = eval.row(i);
    int64_t count = cardinality(keys);
    s.nnz += count;
    s.minRow = std::min(s.minRow, count);
    s.maxRow = std::max(s.maxRow, count);
    if (count == 0) {
      ++s.emptyRows;
      if (!s.emptyWitness)
        s.emptyWitness = i;
    }
    if (!keys.empty() && keys.back().hi - 1 > i) {
      // Keys > i: the part of the row above the diagonal.
      s.leaks += cardinality(clip(keys, i + 1, n));
      if (!s.leakWitness) {
        int64_t j = std::max(keys.back().lo, i + 1);
        for (const Interval &x : keys)
          if (x.hi - 1 > i) {
            j = std::max(x.lo, i + 1);
            break;
          }
        s.leakWitness = std::make_pair(i, j);
      }
    }
  }
  s.mean = static_cast<double>(s.nnz) / static_cast<double>(n);
  return s;
}

TileStats analyzeTiles(const SetRef &set, int64_t n, int64_t blockRows, int64_t blockCols) {
  ATTNC_CHECK(blockRows >= 1 && blockCols >= 1, "tile sides must be positive");
  RowEvaluator eval(set, n);
  TileStats t;
  t.blockRows = blockRows;
  t.blockCols = blockCols;
  int64_t numColBlocks = (n + blockCols - 1) / blockCols;
  // Per column block: pairs counted at the edges of intervals, plus a
  // difference array of rows that cover the whole block.
  std::vector<int64_t> edgeCount(numColBlocks), fullRows(numColBlocks + 1);
  int64_t nnz = 0;
  for (int64_t r0 = 0; r0 < n; r0 += blockRows) {
    int64_t r1 = std::min(n, r0 + blockRows);
    std::fill(edgeCount.begin(), edgeCount.end(), 0);
    std::fill(fullRows.begin(), fullRows.end(), 0);
    for (int64_t i = r0; i < r1; ++i) {
      for (const Interval &x : eval.row(i)) {
        nnz += x.size();
        int64_t c0 = x.lo / blockCols, c1 = (x.hi - 1) / blockCols;
        if (c0 == c1) {
          edgeCount[c0] += x.size();
          continue;
        }
        edgeCount[c0] += (c0 + 1) * blockCols - x.lo;
        edgeCount[c1] += x.hi - c1 * blockCols;
        if (c0 + 1 < c1) {
          fullRows[c0 + 1] += 1;
          fullRows[c1] -= 1;
        }
      }
    }
    int64_t rows = r1 - r0, covering = 0;
    for (int64_t c = 0; c < numColBlocks; ++c) {
      covering += fullRows[c];
      int64_t cols = std::min(n, (c + 1) * blockCols) - c * blockCols;
      int64_t count = edgeCount[c] + covering * blockCols;
      int64_t area = rows * cols;
      if (count == 0) {
        ++t.empty;
      } else {
        t.executedPairs += area;
        if (count == area)
          ++t.full;
        else
          ++t.partial;
      }
    }
  }
  t.waste = nnz == 0 ? 1.0 : static_cast<double>(t.executedPairs) / static_cast<double>(nnz);
  return t;
}

} // namespace attnc::ir
