//===- Report.h - Every analysis of a pattern at one n, and its JSON ------===//
//
// What `attnc analyze` prints and the Python package's `attnc.analyze`
// returns: the row and tile statistics of each distinct head set and the
// Sparse Transformer's criterion 2, for one sequence length. The JSON form is
// a contract (docs/cli.md): one object with "pattern", "n", "params" and one
// "heads" entry per distinct head set holding "head", "nnz", "row_nnz" {min,
// max, mean}, "empty_rows" and "blocks" {size, full, partial, empty}; the
// other fields are extensions. With fewer queries than keys (ReportOptions::
// queries < n) every per-head number counts those query rows only, and the
// object says so with the extensions "queries", "first_row" and
// "heads[].keys_read"; for the square it is what it always was. With ranks
// (context parallelism) the extension "context_parallel" holds the shards,
// pairs and bytes per rank beside ring attention's.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/analysis/Analysis.h"
#include "attnc/analysis/Shards.h"
#include "attnc/plan/PatternIR.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc::ir {

struct ReportOptions {
  int64_t n = 0;               ///< Sequence length (keys), >= 1.
  /// Query rows: the last `queries` of the n positions (QueryRows), in
  /// [1, n]; 0: n, the square.
  int64_t queries = 0;
  int64_t blockRows = 64;      ///< Tile side for the full/partial/empty count, >= 1.
  int64_t blockCols = 0;       ///< Tile width; 0: blockRows.
  bool connectivity = true;    ///< Compute criterion 2 (the costliest analysis).
  double connectivitySeconds = 1.0; ///< Its time budget (ConnectivityOptions); 0: none.
  /// Context parallelism over this many ranks (shardContext); 0: none.
  /// The bytes moved count K and V rows of `headDim` elements of
  /// `elementBytes` for each of `kvHeads` key/value heads.
  int ranks = 0;
  int64_t headDim = 128, kvHeads = 8, elementBytes = 2;
};

/// What context parallelism over ReportOptions::ranks ranks moves, beside
/// ring attention (every rank receives the K and V blocks of every other
/// rank: (R - 1) / R of n rows forward; in the backward pass those again and
/// as many rows of dK and dV partial sums).
struct ContextReport {
  ShardPlan shards;
  int64_t rowBytes = 0;            ///< One position's K and V rows over the key/value heads.
  int64_t ringRows = 0;            ///< Rows each rank receives in ring attention's forward.
  /// Per rank, bytes received: forward (K and V rows) and backward (the same
  /// K and V rows again, and the dK and dV partial sums of its positions).
  std::vector<int64_t> forwardBytes, backwardBytes;
  int64_t ringForwardBytes = 0, ringBackwardBytes = 0;
};

/// The statistics of one distinct head set.
struct HeadReport {
  std::vector<int64_t> heads;  ///< The heads that share the set, first one first.
  RowStats rows;
  TileStats tiles;
};

struct PatternReport {
  int64_t n = 0;
  int64_t queries = 0;                     ///< Rows counted, the last of n; n: the square.
  std::vector<HeadReport> heads;           ///< One per distinct set, in the IR's order.
  std::optional<Connectivity> connectivity; ///< Unset when not asked for.
  std::optional<ContextReport> context;    ///< Unset when not asked for (ranks = 0).
  double seconds = 0;                      ///< Wall time of the analyses.
};

/// Runs every analysis of `ir` at `options.n` over its query rows: one pass
/// over those rows per set, O(segments) each (Analysis.h), plus criterion
/// 2's reachability search from those rows when asked for.
PatternReport analyzePattern(const PatternIR &ir, const ReportOptions &options);

/// The report as one JSON object and a newline (the schema in docs/cli.md).
std::string reportJson(const PatternIR &ir, const PatternReport &report);

} // namespace attnc::ir
