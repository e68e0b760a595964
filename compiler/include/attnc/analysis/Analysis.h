//===- Analysis.h - What a pattern is: counts, rows, tiles, reachability --===//
//
// Every analysis works from closed-form row sets, never from an n x n mask.
// The rows counted may be the last few of the n positions (QueryRows: fewer
// queries than keys, bottom-right aligned, as the runtime takes them); the
// keys are always [0, n).
// Row and tile statistics see each row's keys as periodic segments (a stripe
// or a residue class is one segment, not one interval per period), so they
// cost O(n segments): linear in n for the library's patterns. Rows of a
// generic predicate, which must examine keys, go row by row through the
// RowEvaluator's IntervalSets. The brute-force oracle in Oracle.h computes
// the same numbers by enumerating every (i, j); tests compare them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <optional>
#include <utility>
#include <vector>

namespace attnc::ir {

/// How analyzeRows and analyzeTiles visit the rows; both give the same numbers.
enum class RowMethod {
  /// Each row's keys as periodic segments: O(segments) per row. A set with
  /// a predicate, or whose combined periods pass the segments' limits (large
  /// coprime moduli), is done RowByRow instead.
  Segments,
  /// Each row's IntervalSet: O(intervals) per row, so O(n^2 / m) for a
  /// stripe or residue class of period m. The reference for Segments.
  RowByRow,
};

/// The query rows an analysis counts: the last `queries` of the n key
/// positions, i in [n - queries, n) (query row r is position
/// r + n - queries: FlashAttention's bottom-right alignment, the runtime's
/// nq <= nk). queries == n is the n x n square.
struct QueryRows {
  int64_t n = 0;       ///< Keys (and positions), >= 1.
  int64_t queries = 0; ///< Rows counted, in [1, n].
  int64_t firstRow() const { return n - queries; }
  bool square() const { return queries == n; }
};

/// Every count is over the rows [firstRow(), n) of QueryRows (all n rows for
/// the square); rows and witnesses are positions i, keys j in [0, n).
struct RowStats {
  int64_t n = 0;
  int64_t queries = 0;             ///< Rows counted: the last `queries` of n.
  int64_t nnz = 0;
  int64_t minRow = 0, maxRow = 0;
  double mean = 0;                 ///< nnz / queries
  int64_t emptyRows = 0;
  std::optional<int64_t> emptyWitness;               ///< First empty row.
  int64_t leaks = 0;                                 ///< Pairs with j > i.
  std::optional<std::pair<int64_t, int64_t>> leakWitness; ///< First (i, j) with j > i.
  /// Distinct keys that some counted row attends (the key/value rows a call
  /// with these queries reads); set only when queries < n.
  std::optional<int64_t> keysRead;
  RowMethod method = RowMethod::RowByRow;            ///< How the rows were visited.

  int64_t firstRow() const { return n - queries; }
};

/// Tiles are blockRows x blockCols rectangles from the top-left corner of
/// the rows counted, (firstRow, 0), clipped at n both ways: for the square,
/// from (0, 0). A clipped edge tile is full when every pair of it inside
/// [firstRow, n) x [0, n) is in the set and empty when none is.
struct TileStats {
  int64_t blockRows = 0, blockCols = 0;
  int64_t full = 0, partial = 0, empty = 0;
  /// Pairs a tile-granular kernel computes: the area of every non-empty tile.
  int64_t executedPairs = 0;
  /// executedPairs / nnz (1 when nnz == 0).
  double waste = 1;
  RowMethod method = RowMethod::RowByRow; ///< How the rows were visited.
};

/// The statistics of `set` at length n (>= 1), by `method` where it applies.
RowStats analyzeRows(const SetRef &set, int64_t n, RowMethod method = RowMethod::Segments);
TileStats analyzeTiles(const SetRef &set, int64_t n, int64_t blockRows, int64_t blockCols,
                       RowMethod method = RowMethod::Segments);
/// Both, from one pass over the rows (what analyzePattern runs).
std::pair<RowStats, TileStats> analyzeRowsAndTiles(const SetRef &set, int64_t n,
                                                   int64_t blockRows, int64_t blockCols,
                                                   RowMethod method = RowMethod::Segments);
/// The same over the rows of `rows` only: O(segments) per row counted, so a
/// decoding step (queries = 1) costs one row whatever n is. With
/// rows.square() the numbers are those of the overloads above.
RowStats analyzeRows(const SetRef &set, QueryRows rows, RowMethod method = RowMethod::Segments);
std::pair<RowStats, TileStats> analyzeRowsAndTiles(const SetRef &set, QueryRows rows,
                                                   int64_t blockRows, int64_t blockCols,
                                                   RowMethod method = RowMethod::Segments);

/// The Sparse Transformer's criterion 2: the smallest p such that from every
/// query i every key j <= i is reachable in at most p attention steps, where
/// one step from row r may go to any key of r in any head.
struct Connectivity {
  /// Smallest such p; unset when some j <= i is never reachable.
  std::optional<int64_t> p;
  /// When p is unset: a query and a key it does not reach.
  std::optional<std::pair<int64_t, int64_t>> unreachableWitness;
  /// True when the search stopped at maxSteps with the witness still
  /// unreached (so p > maxSteps); false when the witness is never reachable.
  bool gaveUp = false;
  /// Rows whose reachability was computed, and whether that was every row.
  int64_t rowsChecked = 0;
  bool exact = true;
  /// True when the time budget ran out before every chosen row was checked
  /// (then p is the worst over rowsChecked rows, spread over [firstRow, n)).
  bool stoppedEarly = false;
};

struct ConnectivityOptions {
  /// The query rows whose reachability is asked for: [firstRow, n) (the
  /// queries of a call with fewer queries than keys). A step may still go
  /// through any row of [0, n): each earlier position attended its own keys
  /// when it was computed.
  int64_t firstRow = 0;
  /// Every chosen row is checked when n - firstRow <= this (or <=
  /// sampleRows); otherwise a deterministic sample (the first rows, evenly
  /// spaced rows and the last rows of [firstRow, n)) is.
  int64_t exactUpTo = 4096;
  int64_t sampleRows = 512;
  /// Steps after which the search gives up (reports the pair still missing).
  int64_t maxSteps = 64;
  /// Wall-clock budget of the search in seconds; 0: none (every chosen row).
  /// The rows are checked in an order that spreads them over [firstRow, n)
  /// (the first row, the last, then halving), so a search stopped early has
  /// still seen rows everywhere.
  double timeBudgetSeconds = 0;
};

Connectivity analyzeConnectivity(const std::vector<SetRef> &heads, int64_t n,
                                 const ConnectivityOptions &options = {});

} // namespace attnc::ir
