//===- IntervalSet.h - Sorted disjoint integer intervals ------------------===//
//
// The closed form of "the keys of one row": half-open intervals [lo, hi),
// sorted, disjoint and non-adjacent (adjacent ones are merged). Operations are
// linear merges, so a row costs O(number of intervals), never O(n).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <vector>

namespace attnc {

struct Interval {
  int64_t lo; ///< first key
  int64_t hi; ///< one past the last key
  int64_t size() const { return hi - lo; }
  bool operator==(const Interval &o) const { return lo == o.lo && hi == o.hi; }
};

using IntervalSet = std::vector<Interval>;

/// Sorts, drops empty intervals and merges overlapping/adjacent ones.
void normalize(IntervalSet &s);
IntervalSet unite(const IntervalSet &a, const IntervalSet &b);
IntervalSet intersect(const IntervalSet &a, const IntervalSet &b);
IntervalSet subtract(const IntervalSet &a, const IntervalSet &b);
/// The same into `out` (cleared first, its capacity reused; not a or b).
void uniteInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out);
void intersectInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out);
void subtractInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out);
/// a = a minus [w.lo, w.hi), in place: moves only the intervals after w
/// (a block's own keys at the end of a long list cost O(log n)).
void subtractInPlace(IntervalSet &a, Interval w);
/// Clips every interval to [lo, hi).
IntervalSet clip(const IntervalSet &s, int64_t lo, int64_t hi);
/// Number of keys.
int64_t cardinality(const IntervalSet &s);
bool containsKey(const IntervalSet &s, int64_t key);

} // namespace attnc
