//===- Shards.h - A sequence's positions shared out across ranks ----------===//
//
// Context parallelism: R ranks each hold some positions of one sequence (the
// same positions of Q, K and V) and compute O for their queries. shardContext
// chooses the positions so that every rank computes the same number of the
// pattern's pairs, and counts, from the closed forms, the key/value rows each
// rank must receive from the others (what its queries read and it does not
// hold) and, for the backward pass, the rows of its own positions whose dK and
// dV partial sums other ranks send back. Nothing of size n x n is built:
// each row's keys are periodic segments (KeySegments.h).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/IntervalSet.h"
#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnc::ir {

struct ShardPlan {
  int64_t n = 0;
  int ranks = 0;
  /// Per rank: its positions as sorted, disjoint [start, stop) ranges (none
  /// for a rank without positions: more ranks than rows to share).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges;
  /// Per rank: the pattern's pairs of its query rows, per head (the mean
  /// over heads where heads have sets of their own).
  std::vector<double> pairs;
  /// Per rank: key/value rows its queries read that other ranks hold (the
  /// forward pass receives them).
  std::vector<int64_t> recvRows;
  /// Per rank: rows it holds that other ranks' queries read, counted once
  /// per reading rank (the backward pass receives their dK and dV partial
  /// sums, sent straight to their owner).
  std::vector<int64_t> returnRows;
  /// Per rank: every key its queries read (its own positions included), over
  /// every head: what attnc.distributed exchanges.
  std::vector<IntervalSet> reads;
  /// How the positions were laid out: "runs" (one contiguous run per rank,
  /// after its heavy rows) or "zigzag" (runs r and 2R - 1 - r of 2R equal
  /// runs), whichever balances the pairs within 5% and receives fewer rows.
  std::string layout;
  /// max(pairs) / mean(pairs); 1 when no pair exists.
  double imbalance() const;
};

/// Shares [0, n) out to `ranks` ranks (n >= 1, ranks >= 1). A row whose
/// pairs exceed 1/40 of a rank's share (a global row, say) is placed first:
/// such rows, in order, are cut into one consecutive group of equal pairs
/// per rank (one range each, not a range per row). The other rows
/// are laid out two ways, and the one that balances the pairs within 5% of
/// the mean and makes the busiest rank receive fewer rows is kept: runs,
/// one contiguous run per rank in order, each filled to its rank's share
/// less its heavy rows (a causal pattern's later, heavier rows make later
/// runs shorter; a band then crosses ranks only at the runs' ends); and
/// zig-zag, 2R equal runs, rank r taking runs r and 2R - 1 - r (equal
/// positions per rank, so no rank receives more than ring attention's
/// n (R - 1) / R rows; causal stripes balance).
ShardPlan shardContext(const PatternIR &ir, int64_t n, int ranks);

} // namespace attnc::ir
