//===- KeySegments.h - A row's keys as periodic segments -------*- C++ -*-===//
//
// The keys of a row, or the union or intersection of a block of rows, as
// sorted disjoint segments [lo, hi) each holding the keys j whose j mod p
// lies in a pattern of period p. A stripe or a residue class is one segment
// however long the row, where an IntervalSet holds one interval per period
// (strided at n = 2^20 has 8,192 per row): counting a row's keys, or the
// column blocks a block of rows meets, is arithmetic on O(segments), not a
// walk over O(n / p) intervals.
//
// Patterns are interned in a PatternTable and combined through it, memoised,
// so a row allocates nothing once its patterns have been seen. Combining two
// patterns takes the lcm of their periods; past the table's limits the
// evaluation fails and the caller counts row by row instead (it never
// approximates). Predicates are not evaluated here at all (supports()).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"
#include "attnc/plan/RowEvaluator.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace attnc::ir {

/// An interned pattern; the two negative values are not patterns.
using PatternId = int32_t;
constexpr PatternId kNoKeys = -1;   ///< the empty pattern (no segment carries it)
constexpr PatternId kTooLarge = -2; ///< past the table's limits
constexpr PatternId kEveryKey = 0;  ///< period 1: every key of the segment

enum class SetOp { Unite, Intersect, Subtract };

/// Periodic key patterns, each stored once with its smallest period.
class PatternTable {
public:
  PatternTable();

  /// The pattern of period `period` holding the keys `keys` (normalised,
  /// inside [0, period)): kNoKeys when empty, kTooLarge past the limits.
  PatternId intern(int64_t period, IntervalSet keys);
  /// intern() of one interval [lo, hi) inside [0, period), without building
  /// a set when it is known (the per-row leaves).
  PatternId interval(int64_t period, int64_t lo, int64_t hi);
  /// `a op b` (either may be kNoKeys); memoised.
  PatternId combine(SetOp op, PatternId a, PatternId b);

  int64_t period(PatternId p) const { return patterns_[p].period; }
  /// The keys of one period [0, period).
  const IntervalSet &keys(PatternId p) const { return patterns_[p].keys; }
  /// Keys j < x with j mod period in pattern p (x may be negative).
  int64_t countBelow(PatternId p, int64_t x) const;

private:
  struct Pattern {
    int64_t period;
    IntervalSet keys;
    std::vector<int64_t> before; ///< keys of the intervals before each one
  };
  PatternId store(int64_t period, IntervalSet keys);

  std::vector<Pattern> patterns_;
  std::unordered_map<std::string, PatternId> byContent_;
  std::unordered_map<std::string, PatternId> byInterval_;
  std::unordered_map<uint64_t, PatternId> combined_;
  int64_t storedIntervals_ = 0;
};

struct Segment {
  int64_t lo, hi; ///< keys [lo, hi), lo < hi
  PatternId pattern;
};
/// Sorted, disjoint; adjacent segments with one pattern are merged.
using Segments = std::vector<Segment>;

/// `a op b` into `out` (not a or b); false past the table's limits.
bool combineSegments(PatternTable &table, SetOp op, const Segments &a, const Segments &b,
                     Segments &out);

/// Keys of `s` inside [lo, hi).
int64_t countKeys(const PatternTable &table, const Segments &s, int64_t lo, int64_t hi);

/// The keys of `s` inside [lo, hi) as intervals: O(keys / period) per
/// segment, for the few places that need them spelled out.
IntervalSet expandKeys(const PatternTable &table, const Segments &s, int64_t lo, int64_t hi);

/// Column blocks [c w, min(n, (c + 1) w)) that `s` meets (holds a key of),
/// or, with `whole`, that `s` holds every key of; and their total width.
struct BlockCount {
  int64_t blocks = 0, width = 0;
};
BlockCount countBlocks(const PatternTable &table, const Segments &s, int64_t n, int64_t w,
                       bool whole);

/// The union of the keys of many rows, collected without a walk over the
/// union per row: each segment's [lo, hi) is kept with its pattern, runs of
/// one pattern merged, and each pattern's ranges are spelled out once at the
/// end. O(segments) per row plus O(n / period) per pattern in all.
class KeyUnion {
public:
  void add(const Segments &row);
  void add(const IntervalSet &row);
  /// The keys in the union; `table` holds every pattern added but kEveryKey
  /// (may be null when there is no other).
  IntervalSet keys(const PatternTable *table);
  int64_t count(const PatternTable *table) { return cardinality(keys(table)); }

private:
  void addRange(PatternId pattern, int64_t lo, int64_t hi);

  std::unordered_map<PatternId, IntervalSet> ranges_;
  std::unordered_map<PatternId, size_t> limits_;
};

/// The keys of each row of a set as segments, at one n.
class SegmentEvaluator {
public:
  SegmentEvaluator(SetRef set, int64_t n, PatternTable &table);

  /// Whether rows of `s` can be evaluated as segments: every generator but
  /// the per-key predicate.
  static bool supports(const SetNode &s);

  /// Keys of row i (0 <= i < n) inside [0, n) into `out`; false past the
  /// table's limits (`out` is then meaningless).
  bool row(int64_t i, Segments &out);

private:
  bool eval(const SetNode &s, int64_t i, Segments &out, size_t depth);

  SetRef set_;
  int64_t n_;
  PatternTable &table_;
  /// List and random leaves: a few intervals per row, from the RowEvaluator;
  /// random blocks are the same for every row of a query block, so the last
  /// block's keys are kept.
  struct Leaf {
    RowEvaluator eval;
    int64_t block = -1;
    IntervalSet keys;
  };
  std::unordered_map<const SetNode *, Leaf> leaves_;
  std::vector<Segments> scratch_; ///< two per level of the tree
};

} // namespace attnc::ir
