//===- Analysis.cpp - Row statistics and tile classification --------------===//
//
// Two ways to the same numbers (RowMethod): row by row over IntervalSets, the
// reference, and over periodic segments (KeySegments.h), which a row of
// strided or fixed needs O(1) of instead of O(n / l) intervals. The segment
// path gives up as a whole (std::nullopt) when its patterns pass their
// limits; the caller then starts over row by row. Both visit only the rows
// asked for (QueryRows): the last `queries` of the n positions.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Analysis.h"

#include "KeySegments.h"

#include "attnc/plan/RowEvaluator.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace attnc::ir {

namespace {

/// (i, j) for the first key j > i of row i's keys, if any.
std::optional<std::pair<int64_t, int64_t>> firstLeak(const IntervalSet &keys, int64_t i) {
  for (const Interval &x : keys)
    if (x.hi - 1 > i)
      return std::make_pair(i, std::max(x.lo, i + 1));
  return std::nullopt;
}

/// Row i with `count` keys into the totals, extremes and empty-row witness.
void addRow(RowStats &s, int64_t i, int64_t count) {
  s.nnz += count;
  s.minRow = std::min(s.minRow, count);
  s.maxRow = std::max(s.maxRow, count);
  if (count == 0) {
    ++s.emptyRows;
    if (!s.emptyWitness)
      s.emptyWitness = i;
  }
}

/// 1 to n rows of n positions (n = 0, no rows, is let through as before:
/// its mean is not a number).
bool validRows(QueryRows rows) {
  return rows.queries <= rows.n && (rows.queries >= 1 || rows.n == 0);
}

RowStats rowsByRow(const SetRef &set, QueryRows rows) {
  const int64_t n = rows.n;
  RowEvaluator eval(set, n);
  RowStats s;
  s.n = n;
  s.queries = rows.queries;
  s.minRow = std::numeric_limits<int64_t>::max();
  KeyUnion read;
  for (int64_t i = rows.firstRow(); i < n; ++i) {
    IntervalSet keys = eval.row(i);
    const int64_t count = cardinality(keys);
    addRow(s, i, count);
    if (!rows.square())
      read.add(keys);
    if (!keys.empty() && keys.back().hi - 1 > i) {
      // Keys > i: the part of the row above the diagonal.
      s.leaks += cardinality(clip(keys, i + 1, n));
      if (!s.leakWitness)
        s.leakWitness = firstLeak(keys, i);
    }
  }
  s.mean = static_cast<double>(s.nnz) / static_cast<double>(rows.queries);
  if (!rows.square())
    s.keysRead = read.count(nullptr);
  return s;
}

TileStats tilesByRow(const SetRef &set, QueryRows rows, int64_t blockRows, int64_t blockCols) {
  const int64_t n = rows.n;
  RowEvaluator eval(set, n);
  TileStats t;
  t.blockRows = blockRows;
  t.blockCols = blockCols;
  int64_t numColBlocks = (n + blockCols - 1) / blockCols;
  // Per column block: pairs counted at the edges of intervals, plus a
  // difference array of rows that cover the whole block.
  std::vector<int64_t> edgeCount(numColBlocks), fullRows(numColBlocks + 1);
  int64_t nnz = 0;
  for (int64_t r0 = rows.firstRow(); r0 < n; r0 += blockRows) {
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

/// Row statistics and, with tileCols > 0, tiles from one pass over the rows'
/// segments. A tile is empty when no row of its row block has a key in it
/// and full when every row has all of its keys: from the union and the
/// intersection of the block's rows, whose column blocks are counted
/// segment by segment.
std::optional<std::pair<RowStats, TileStats>> bySegments(const SetRef &set, QueryRows rows,
                                                         int64_t tileRows, int64_t tileCols) {
  if (!SegmentEvaluator::supports(*set))
    return std::nullopt;
  const int64_t n = rows.n;
  PatternTable table;
  SegmentEvaluator eval(set, n, table);
  Segments keys, some, every, combined;
  KeyUnion read;
  RowStats s;
  s.n = n;
  s.queries = rows.queries;
  s.method = RowMethod::Segments;
  s.minRow = std::numeric_limits<int64_t>::max();
  TileStats t;
  t.blockRows = tileRows;
  t.blockCols = tileCols;
  t.method = RowMethod::Segments;
  const bool tiles = tileCols > 0;
  const int64_t numColBlocks = tiles ? (n + tileCols - 1) / tileCols : 0;
  for (int64_t r0 = rows.firstRow(); r0 < n; r0 += tileRows) {
    const int64_t r1 = std::min(n, r0 + tileRows);
    for (int64_t i = r0; i < r1; ++i) {
      if (!eval.row(i, keys))
        return std::nullopt;
      const int64_t count = countKeys(table, keys, 0, n);
      addRow(s, i, count);
      if (!rows.square())
        read.add(keys);
      if (!keys.empty() && keys.back().hi - 1 > i) {
        const int64_t above = countKeys(table, keys, i + 1, n);
        s.leaks += above;
        if (above > 0 && !s.leakWitness) // once: the row's intervals find the key
          s.leakWitness = firstLeak(RowEvaluator(set, n).row(i), i);
      }
      if (!tiles)
        continue;
      if (i == r0) {
        some = keys;
        every = keys;
        continue;
      }
      if (!combineSegments(table, SetOp::Unite, some, keys, combined))
        return std::nullopt;
      some.swap(combined);
      if (!combineSegments(table, SetOp::Intersect, every, keys, combined))
        return std::nullopt;
      every.swap(combined);
    }
    if (!tiles)
      continue;
    const BlockCount met = countBlocks(table, some, n, tileCols, false);
    const BlockCount full = countBlocks(table, every, n, tileCols, true);
    t.empty += numColBlocks - met.blocks;
    t.full += full.blocks;
    t.partial += met.blocks - full.blocks;
    t.executedPairs += (r1 - r0) * met.width;
  }
  s.mean = static_cast<double>(s.nnz) / static_cast<double>(rows.queries);
  if (!rows.square())
    s.keysRead = read.count(&table);
  t.waste = s.nnz == 0 ? 1.0 : static_cast<double>(t.executedPairs) / static_cast<double>(s.nnz);
  return std::make_pair(s, t);
}

} // namespace

RowStats analyzeRows(const SetRef &set, int64_t n, RowMethod method) {
  return analyzeRows(set, QueryRows{n, n}, method);
}

TileStats analyzeTiles(const SetRef &set, int64_t n, int64_t blockRows, int64_t blockCols,
                       RowMethod method) {
  ATTNC_CHECK(blockRows >= 1 && blockCols >= 1, "tile sides must be positive");
  const QueryRows rows{n, n};
  if (method == RowMethod::Segments)
    if (auto fast = bySegments(set, rows, blockRows, blockCols))
      return fast->second;
  return tilesByRow(set, rows, blockRows, blockCols);
}

std::pair<RowStats, TileStats> analyzeRowsAndTiles(const SetRef &set, int64_t n,
                                                   int64_t blockRows, int64_t blockCols,
                                                   RowMethod method) {
  return analyzeRowsAndTiles(set, QueryRows{n, n}, blockRows, blockCols, method);
}

RowStats analyzeRows(const SetRef &set, QueryRows rows, RowMethod method) {
  ATTNC_CHECK(validRows(rows), "the rows counted must be the last 1 to n of n positions");
  if (method == RowMethod::Segments)
    if (auto fast = bySegments(set, rows, rows.queries, 0))
      return fast->first;
  return rowsByRow(set, rows);
}

std::pair<RowStats, TileStats> analyzeRowsAndTiles(const SetRef &set, QueryRows rows,
                                                   int64_t blockRows, int64_t blockCols,
                                                   RowMethod method) {
  ATTNC_CHECK(blockRows >= 1 && blockCols >= 1, "tile sides must be positive");
  ATTNC_CHECK(validRows(rows), "the rows counted must be the last 1 to n of n positions");
  if (method == RowMethod::Segments)
    if (auto fast = bySegments(set, rows, blockRows, blockCols))
      return *fast;
  return {rowsByRow(set, rows), tilesByRow(set, rows, blockRows, blockCols)};
}

} // namespace attnc::ir
