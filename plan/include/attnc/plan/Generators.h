//===- Generators.h - What each generator of the pattern IR promises -----===//
//
// One table of per-generator properties, and the questions about a tree that
// follow from it, read by every evaluator of the pattern IR: RowEvaluator
// (the keys of one row), the plan's block bounds (the keys of a range of
// rows) and Piece::period. Each question is answered here once, so that the
// evaluators cannot drift apart: they used to order an intersection's
// children by two different cost lists.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace attnc::ir {

/// How a generator's translation period (see period()) follows from its fields.
enum class PeriodRule : uint8_t {
  One,       ///< keys depend on i - j only, or on neither: all, none, band, residue
  Modulus,   ///< repeats every `modulus` rows and keys: block-diag, stripe
  RowBounds, ///< key-range: 1 when each bound is absent or i + c (c fixed), else unknown
  RowFree,   ///< row-if: 1 when the condition does not use i, else unknown
  Children,  ///< union, intersect, difference: the lcm of the children's
  Unknown,   ///< list, random, predicate, class, select, fallback: not tracked
};

/// Which rows of a generator are known to have the same keys.
enum class SameKeys : uint8_t {
  EveryRow,    ///< all, none, stripe: keys do not depend on i
  BlockOfRows, ///< block-diag, random, select: the rows i with one i / modulus
  Unknown,     ///< anything else, combinators included (ask their children)
};

/// What one generator promises to its evaluators.
struct GenTraits {
  Gen kind;
  const char *name;  ///< as printed and as the IR text spells it
  /// Rank inside an intersection, evaluated cheapest first so that the
  /// expensive children see only the keys that the cheap ones leave. Row-if
  /// comes first: O(1) per row whatever the window, and when false it leaves
  /// no window at all. Then one interval (band, block-diag, key-range), then
  /// a few keys per row (list, random), then O(window / m) intervals
  /// (stripe, residue), then subtrees, then the per-key predicate.
  int cost;
  /// Every row is one interval, narrowed in closed form by narrowToRow.
  bool oneInterval;
  /// One interval whose ends never decrease as i grows (all, band,
  /// block-diag): the rows [a, b] together cover [lo(a), hi(b)) and all have
  /// [lo(b), hi(a)).
  bool sliding;
  /// Evaluated inside an intersection only on the intervals its siblings
  /// leave, one by one: a predicate key by key, a coordinate range with one
  /// interval per period it crosses there (on the siblings' hull it would
  /// cost a period for every canvas row between the window's first and last).
  bool perKey;
  SameKeys sameKeys;
  PeriodRule period;
};

/// The table, indexed by Gen.
inline constexpr std::array<GenTraits, static_cast<size_t>(Gen::Segment) + 1> kGenTraits{{
    // kind            name          cost  1-interval sliding perKey same keys                period
    {Gen::All,        "all",        0,    true,      true,   false, SameKeys::EveryRow,    PeriodRule::One},
    {Gen::None,       "none",       0,    false,     false,  false, SameKeys::EveryRow,    PeriodRule::One},
    {Gen::Band,       "band",       1,    true,      true,   false, SameKeys::Unknown,     PeriodRule::One},
    {Gen::BlockDiag,  "block-diag", 1,    true,      true,   false, SameKeys::BlockOfRows, PeriodRule::Modulus},
    {Gen::KeyRange,   "key-range",  1,    true,      false,  false, SameKeys::Unknown,     PeriodRule::RowBounds},
    {Gen::Stripe,     "stripe",     3,    false,     false,  false, SameKeys::EveryRow,    PeriodRule::Modulus},
    {Gen::Residue,    "residue",    3,    false,     false,  false, SameKeys::Unknown,     PeriodRule::One},
    {Gen::RowIf,      "row-if",     0,    false,     false,  false, SameKeys::Unknown,     PeriodRule::RowFree},
    {Gen::List,       "list",       2,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::Random,     "random",     2,    false,     false,  false, SameKeys::BlockOfRows, PeriodRule::Unknown},
    {Gen::Predicate,  "predicate",  5,    false,     false,  true,  SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::Class,      "class",      2,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::Select,     "select",     2,    false,     false,  false, SameKeys::BlockOfRows, PeriodRule::Unknown},
    {Gen::CoordRange, "coord-range", 3,   false,     false,  true,  SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::Union,      "union",      4,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Children},
    {Gen::Intersect,  "intersect",  4,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Children},
    {Gen::Difference, "difference", 4,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Children},
    {Gen::Fallback,   "fallback",   4,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::Permuted,   "permuted",   4,    false,     false,  false, SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::WhereEmpty, "where-empty", 4,   false,     false,  false, SameKeys::Unknown,     PeriodRule::Unknown},
    {Gen::Segment,    "segment",    1,    true,      true,   false, SameKeys::Unknown,     PeriodRule::Unknown},
}};

/// The properties of generator `g`.
constexpr const GenTraits &traits(Gen g) { return kGenTraits[static_cast<size_t>(g)]; }

/// Whether every row of `s` is one interval: a oneInterval generator or an
/// intersection of such sets (a causal window, a block under `causal`).
bool oneIntervalPerRow(const SetNode &s);

/// A key range's bounds narrowing [lo, hi) (Gen::KeyRange), and a
/// coordinate range's bounds [first, last] (unbounded sides as 0 and m - 1),
/// each bound term's value given by `value` (evalInt at a row, or a row's
/// precomputed values).
template <typename Value>
inline void keyRangeBounds(const SetNode &s, Value &&value, int64_t &lo, int64_t &hi) {
  if (s.loTerm)
    lo = std::max(lo, value(*s.loTerm));
  if (s.hiTerm)
    hi = std::min(hi, value(*s.hiTerm) + 1);
}
template <typename Value>
inline void coordBounds(const SetNode &s, Value &&value, int64_t &first, int64_t &last) {
  first = s.loTerm ? value(*s.loTerm) : 0;
  last = s.hiTerm ? value(*s.hiTerm) : s.modulus - 1;
}

/// narrowToRow of the generators it does not take inline (key ranges,
/// block-diagonals, All).
void narrowToRowOutOfLine(const SetNode &s, int64_t i, int64_t n, int64_t &lo, int64_t &hi, bool shared);

/// Narrows [lo, hi) to row i of a set that oneIntervalPerRow accepts, at
/// length n (it may become empty): no interval list, no allocation.
/// `shared`: its bounds' terms through evalIntShared (a SharedTermsScope open).
/// Bands, a class's segment and their intersections inline: the ends of
/// every row of a data pattern's blocks, at every call.
inline void narrowToRow(const SetNode &s, int64_t i, int64_t n, int64_t &lo, int64_t &hi, bool shared = false) {
  switch (s.kind) {
  case Gen::Band:
    if (s.lo != kUnbounded)
      lo = std::max(lo, i + s.lo);
    if (s.hi != kUnbounded)
      hi = std::min(hi, i + s.hi + 1);
    return;
  case Gen::Segment: {
    const InputArray &a = *s.data;
    const auto at = static_cast<size_t>(a.order[static_cast<size_t>(i)]);
    lo = std::max<int64_t>(lo, a.classBegin[at]);
    hi = std::min<int64_t>(hi, a.classEnd[at]);
    return;
  }
  case Gen::Intersect:
    for (const SetRef &c : s.children)
      narrowToRow(*c, i, n, lo, hi, shared);
    return;
  default:
    narrowToRowOutOfLine(s, i, n, lo, hi, shared);
  }
}

/// Appends to `out` the keys of [lo, hi) whose coordinate (j / s) % m lies
/// in [first, last] (clipped to [0, m)): one interval per period s * m that
/// [lo, hi) crosses, ascending, after the keys already in `out` (which must
/// end before lo). The keys of a coordinate range (Gen::CoordRange) for
/// bounds evaluated at a row, or over a block of rows.
void appendCoordKeys(int64_t s, int64_t m, int64_t first, int64_t last, int64_t lo, int64_t hi,
                     IntervalSet &out);

/// The coordinate bounds [first, last] of a coordinate range at row i and
/// length n (unbounded sides as 0 and m - 1); `shared` as for narrowToRow.
void coordBoundsAt(const SetNode &s, int64_t i, int64_t n, int64_t &first, int64_t &last, bool shared = false);

/// Whether the rows a <= i <= b of `s` have the same keys, by its own
/// generator's SameKeys (false for a combinator: its children know).
bool sameKeysOnRows(const SetNode &s, int64_t a, int64_t b);

/// Whether a j-free condition holds on a prefix or a suffix of any range of
/// rows: a comparison of i + c with a row-free value, or its negation. Its
/// value on a range of rows then follows from the first and the last row.
bool monotoneInRow(const Term &cond);

/// The smallest p >= 1 such that moving every row and key by p maps `s`
/// onto itself, as far as its generators tell (the lcm of theirs; see
/// PeriodRule), or 0 when one does not tell or, combining children, the lcm
/// passes `limit`.
int64_t period(const SetNode &s, int64_t limit);

/// The children of a combinator in evaluation order: by GenTraits::cost,
/// ties in tree order (a stable sort). It points into `s`, which must
/// outlive it, and allocates only for more than a handful of children.
class CostOrder {
public:
  explicit CostOrder(const SetNode &s) : size_(s.children.size()) {
    const SetRef **order = inline_;
    if (size_ > kInline) {
      heap_.resize(size_);
      order = heap_.data();
    }
    for (size_t k = 0; k < size_; ++k) { // insertion sort: stable, and no buffer
      const SetRef *c = &s.children[k];
      const int cost = traits((*c)->kind).cost;
      size_t at = k;
      for (; at > 0 && traits((*order[at - 1])->kind).cost > cost; --at)
        order[at] = order[at - 1];
      order[at] = c;
    }
    order_ = order;
  }
  CostOrder(const CostOrder &) = delete;
  CostOrder &operator=(const CostOrder &) = delete;

  size_t size() const { return size_; }
  /// The k-th child to evaluate.
  const SetRef &operator[](size_t k) const { return *order_[k]; }

private:
  static constexpr size_t kInline = 8;
  const SetRef *inline_[kInline];
  std::vector<const SetRef *> heap_;
  const SetRef *const *order_ = nullptr;
  size_t size_;
};

} // namespace attnc::ir
