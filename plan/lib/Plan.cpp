//===- Plan.cpp - Disjoint pieces, layouts and tiles of a pattern ---------===//
#include "attnc/plan/Plan.h"

#include "attnc/plan/Generators.h"
#include "attnc/plan/RowEvaluator.h"
#include "attnc/support/ThreadPool.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <optional>
#include <limits>
#include <unordered_map>
#include <atomic>
#include <functional>
#include <sstream>

namespace attnc::plan {

namespace {

/// The residue generator a piece is built on, if any.
const ir::SetNode *findResidue(const ir::SetNode &s) {
  if (s.kind == ir::Gen::Residue)
    return &s;
  if (s.kind == ir::Gen::Intersect)
    for (const ir::SetRef &c : s.children)
      if (c->kind == ir::Gen::Residue)
        return c.get();
  return nullptr;
}

/// Keys that every row of a block has (`lower`) and keys that some row of it
/// may have (`upper`), inside a window [lo, hi): lower ⊆ each row ⊆ upper.
struct Bounds {
  IntervalSet upper, lower;
  bool exact = false; ///< every row has the same keys: `lower` is not kept (it is `upper`)
  const IntervalSet &low() const { return exact ? upper : lower; }
  /// Makes `lower` explicit (before changing one side only).
  void split() {
    if (exact)
      lower = upper;
    exact = false;
  }
};

/// Bounds of a set over the rows [a, b] in closed form for the generators
/// whose rows move with i predictably (band, block-diag, stripe, row-if,
/// every combinator); rows are evaluated one by one only for the others.
class BlockBounds {
public:
  explicit BlockBounds(int64_t n) : n_(n) {}

  Bounds eval(const ir::SetRef &s, int64_t a, int64_t b, int64_t lo, int64_t hi) const {
    Bounds out;
    if (lo >= hi) {
      out.exact = true;
      return out;
    }
    auto both = [&](IntervalSet x) {
      out.upper = std::move(x);
      out.exact = true;
      return out;
    };
    if (ir::traits(s->kind).sliding) {
      // Row i has [lo(i), hi(i)) with neither end decreasing: the block's
      // union is [lo(a), hi(b)), its intersection [lo(b), hi(a)).
      int64_t firstLo = lo, firstHi = hi, lastLo = lo, lastHi = hi;
      ir::narrowToRow(*s, a, n_, firstLo, firstHi);
      ir::narrowToRow(*s, b, n_, lastLo, lastHi);
      auto span = [](int64_t x, int64_t y) { return x < y ? IntervalSet{{x, y}} : IntervalSet{}; };
      out.upper = span(firstLo, lastHi);
      out.lower = span(lastLo, firstHi);
      out.exact = out.upper == out.lower;
      return out;
    }
    if (ir::sameKeysOnRows(*s, a, b)) // a stripe, or random blocks of one query block
      return both(rowOf(s, a, lo, hi));
    switch (s->kind) {
    case ir::Gen::KeyRange: {
      // [lo(i), hi(i)]: from the ranges of the two terms over the rows.
      std::optional<ValueRange> first = ValueRange{lo, lo}, last = ValueRange{hi - 1, hi - 1};
      if (!boundsOverRows(*s, a, b, first, last))
        return perRow(s, a, b, lo, hi);
      auto span = [&](int64_t from, int64_t to) { // keys [from, to], clipped (no overflow)
        int64_t x = std::max(lo, from), y = to >= hi ? hi : std::max(lo, to + 1);
        return x < y ? IntervalSet{{x, y}} : IntervalSet{};
      };
      out.upper = span(first->lo, last->hi);
      out.lower = span(first->hi, last->lo);
      out.exact = out.upper == out.lower;
      return out;
    }
    case ir::Gen::CoordRange: {
      // A coordinate in [lo(i), hi(i)]: some row may have the coordinates
      // from the least lo to the greatest hi, every row those from the
      // greatest lo to the least hi.
      const int64_t m = s->modulus;
      std::optional<ValueRange> first = ValueRange{0, 0}, last = ValueRange{m - 1, m - 1};
      if (!boundsOverRows(*s, a, b, first, last))
        return perRow(s, a, b, lo, hi);
      ir::appendCoordKeys(s->keyBlock, m, first->lo, last->hi, lo, hi, out.upper);
      ir::appendCoordKeys(s->keyBlock, m, first->hi, last->lo, lo, hi, out.lower);
      out.exact = out.upper == out.lower;
      return out;
    }
    case ir::Gen::RowIf: {
      bool any = false, every = true;
      if (ir::monotoneInRow(*s->cond)) { // true on a prefix or a suffix of the rows: look at the ends
        const bool first = evalBool(*s->cond, Env{a, 0, n_, 0}), last = evalBool(*s->cond, Env{b, 0, n_, 0});
        any = first || last;
        every = first && last;
      } else {
        for (int64_t i = a; i <= b && !(any && !every); ++i) { // until the rows are mixed
          bool in = evalBool(*s->cond, Env{i, 0, n_, 0});
          any = any || in;
          every = every && in;
        }
      }
      if (every)
        return both({{lo, hi}});
      if (any)
        out.upper = {{lo, hi}};
      out.exact = !any;
      return out;
    }
    case ir::Gen::Union: {
      out.exact = true;
      for (const ir::SetRef &c : s->children) {
        Bounds part = eval(c, a, b, lo, hi);
        if (out.exact && !part.exact)
          out.split();
        out.upper.insert(out.upper.end(), part.upper.begin(), part.upper.end());
        if (!out.exact)
          out.lower.insert(out.lower.end(), part.low().begin(), part.low().end());
      }
      normalize(out.upper);
      if (!out.exact)
        normalize(out.lower);
      return out;
    }
    case ir::Gen::Intersect: {
      out.upper = {{lo, hi}};
      out.exact = true;
      IntervalSet tmp;
      const ir::CostOrder order(*s);
      for (size_t k = 0; k < order.size() && !out.upper.empty(); ++k) {
        const ir::SetRef &c = order[k];
        // A child evaluated inside one interval is its own intersection with it.
        const bool window = out.upper.size() == 1;
        Bounds part = eval(c, a, b, out.upper.front().lo, out.upper.back().hi);
        if (out.exact && !part.exact)
          out.split();
        if (!out.exact) {
          intersectInto(out.lower, part.low(), tmp);
          out.lower.swap(tmp);
        }
        if (window) {
          out.upper = std::move(part.upper);
        } else {
          intersectInto(out.upper, part.upper, tmp);
          out.upper.swap(tmp);
        }
      }
      return out; // each child's lower is inside its upper, so theirs are too
    }
    case ir::Gen::Difference: {
      Bounds x = eval(s->children[0], a, b, lo, hi);
      if (x.upper.empty())
        return both({});
      Bounds y = eval(s->children[1], a, b, x.upper.front().lo, x.upper.back().hi);
      out.exact = x.exact && y.exact;
      // Usually y is one interval (a block, a band): cut it out in place.
      auto minus = [](IntervalSet a, const IntervalSet &b) {
        if (b.size() > 1)
          return subtract(a, b);
        if (b.size() == 1)
          subtractInPlace(a, b[0]);
        return a; // nothing to take out: a as it is (often, when y lies past x's keys)
      };
      if (!out.exact)
        out.lower = minus(x.exact ? x.upper : std::move(x.lower), y.upper);
      out.upper = minus(std::move(x.upper), y.low());
      return out;
    }
    default:
      return perRow(s, a, b, lo, hi);
    }
  }

private:
  /// The ranges of a key or coordinate range's bound terms over the rows
  /// [a, b] into first and last (kept where a bound has no term); false
  /// where interval arithmetic cannot bound one.
  bool boundsOverRows(const ir::SetNode &s, int64_t a, int64_t b, std::optional<ValueRange> &first,
                      std::optional<ValueRange> &last) const {
    if (s.loTerm)
      first = rangeOverRows(*s.loTerm, a, b, n_);
    if (s.hiTerm)
      last = rangeOverRows(*s.hiTerm, a, b, n_);
    return first && last;
  }

  /// Exact: the union and the intersection of the rows.
  Bounds perRow(const ir::SetRef &s, int64_t a, int64_t b, int64_t lo, int64_t hi) const {
    ir::RowEvaluator eval(s, n_);
    Bounds out;
    IntervalSet row;
    for (int64_t i = a; i <= b; ++i) {
      eval.rowIn(i, lo, hi, row);
      out.lower = i == a ? row : intersect(out.lower, row);
      out.upper.insert(out.upper.end(), row.begin(), row.end());
    }
    normalize(out.upper);
    return out;
  }

  /// Row i's keys inside [lo, hi) (which may reach past [0, n): see buildIn).
  IntervalSet rowOf(const ir::SetRef &s, int64_t i, int64_t lo, int64_t hi) const {
    IntervalSet out;
    ir::RowEvaluator(s, n_).rowIn(i, lo, hi, out);
    return out;
  }

  int64_t n_;
};

/// Fills a block from the keys every row has (`common`) and each row's other
/// keys (`own[r]`, disjoint from `common`), all in key coordinates.
void fillShape(IntervalSet common, const std::vector<IntervalSet> &own, BlockShape &out) {
  const int32_t rows = out.rows;
  thread_local IntervalSet others, merged; // per thread and reused, as below
  others.clear();
  for (int32_t r = 0; r < rows; ++r) {
    out.useful += cardinality(own[r]);
    if (own[r].empty())
      continue;
    uniteInto(others, own[r], merged); // rows are sorted: merges, not a sort of them all
    others.swap(merged);
  }
  out.partial.clear();
  if (others.empty()) {
    out.keys = compressRuns(common);
    out.useful += int64_t{rows} * cardinality(out.keys); // O(runs)
    return;
  }
  out.useful += int64_t{rows} * cardinality(common);
  out.keys = compressRuns(unite(common, others));
  // Row masks of the keys outside `common`, indexed by rank in `others`.
  thread_local std::vector<int64_t> start; // rank of each interval's first key
  start.assign(others.size() + 1, 0);
  for (size_t x = 0; x < others.size(); ++x)
    start[x + 1] = start[x] + others[x].size();
  // Row r's bit flips at each end of its intervals (one interval of `own[r]`
  // is one run of ranks); the masks are the running XOR: O(intervals + keys),
  // not O(pairs).
  thread_local std::vector<uint64_t> masks;
  masks.assign(static_cast<size_t>(start.back()) + 1, 0);
  auto rankOf = [&](int64_t key) {
    size_t x = std::upper_bound(others.begin(), others.end(), key,
                                [](int64_t k, const Interval &iv) { return k < iv.lo; }) -
               others.begin() - 1;
    return start[x] + (key - others[x].lo);
  };
  for (int32_t r = 0; r < rows; ++r)
    for (const Interval &x : own[r]) {
      const int64_t first = rankOf(x.lo);
      masks[static_cast<size_t>(first)] ^= uint64_t{1} << r;
      masks[static_cast<size_t>(first + x.size())] ^= uint64_t{1} << r;
    }
  uint64_t running = 0;
  for (uint64_t &m : masks)
    m = running ^= m;
  // Their positions in the compacted list: keys of `common` before them count too.
  size_t c = 0;
  int64_t commonBefore = 0;
  for (size_t x = 0; x < others.size(); ++x) {
    while (c < common.size() && common[c].lo < others[x].lo)
      commonBefore += common[c++].size();
    for (int64_t k = 0; k < others[x].size(); ++k) {
      uint64_t m = masks[static_cast<size_t>(start[x] + k)];
      if (m != out.allRows)
        out.partial.push_back({static_cast<int32_t>(commonBefore + start[x] + k), m});
    }
  }
}

/// Fills a block from each row's keys (`own[r]`, the block's rows): the
/// keys they all have need no mask and are taken out of each row's own.
void fillFromRows(std::vector<IntervalSet> &own, BlockShape &out) {
  thread_local IntervalSet common, part;
  common = own[0];
  for (int32_t r = 1; r < out.rows && !common.empty(); ++r) {
    intersectInto(common, own[r], part);
    common.swap(part);
  }
  if (!common.empty())
    for (int32_t r = 0; r < out.rows; ++r) {
      subtractInto(own[r], common, part);
      own[r].swap(part);
    }
  fillShape(common, own, out);
}

const char *strategyName(Strategy s) {
  return s == Strategy::RowTiles ? "row-tiles" : "residue-relayout";
}

} // namespace

namespace {
/// The pairs every head of the plan with `options` executes at length n.
int64_t executedPairs(const ir::PatternIR &ir, const PlanOptions &options, int64_t n) {
  int64_t total = 0;
  for (const HeadStats &h : planStats(buildPlan(ir, options), n))
    total += h.executed;
  return total;
}
} // namespace

namespace {
bool hasGen(const ir::SetNode &s, ir::Gen kind) {
  if (s.kind == kind)
    return true;
  for (const ir::SetRef &c : s.children)
    if (hasGen(*c, kind))
      return true;
  return false;
}
} // namespace

namespace {
/// The length at which the plan's choices count executed pairs: `preferred`,
/// but no more than 512 when a head has a per-pair predicate, whose rows
/// are evaluated pair by pair (at 4,096 that is 16 M evaluations of its
/// terms for each option counted: seconds of compile time for tiled NATTEN).
int64_t referenceLength(const ir::PatternIR &ir, int64_t preferred) {
  for (const ir::PatternIR::Head &h : ir.heads)
    if (ir::hasPredicate(*h.set))
      return std::min<int64_t>(preferred, 512);
  return preferred;
}
} // namespace

int64_t defaultTileRows(const ir::PatternIR &ir) {
  // A pattern that reads data has no rows to count before a call: an
  // equality class in raster order scatters a block's keys (32 rows keep
  // their union smaller), a selection lists blocks that taller blocks share.
  if (ir.readsData()) {
    for (const ir::PatternIR::Head &h : ir.heads)
      if (hasGen(*h.set, ir::Gen::Class))
        return 32;
    return 64;
  }
  const int64_t reference = referenceLength(ir, 1024);
  return double(executedPairs(ir, {64, 64}, reference)) <= 1.005 * double(executedPairs(ir, {32, 64}, reference))
             ? 64
             : 32;
}

int64_t gradTileRows(const ir::PatternIR &ir, const PlanOptions &forward) {
  ATTNC_CHECK(forward.tileRows > 0, "gradTileRows takes the forward's resolved options (resolveOptions)");
  constexpr int64_t kTaller = 64;
  if (forward.tileRows >= kTaller || ir.readsData())
    return forward.tileRows;
  const int64_t reference = referenceLength(ir, 4096);
  return double(executedPairs(ir, {kTaller, forward.tileCols}, reference)) <=
                 kGradTallerWork * double(executedPairs(ir, forward, reference))
             ? kTaller
             : forward.tileRows;
}

PlanOptions resolveOptions(const ir::PatternIR &ir, PlanOptions options) {
  if (options.tileRows == 0)
    options.tileRows = defaultTileRows(ir);
  return options;
}

Plan bindPlan(const Plan &plan, size_t head, const InputArrays &arrays) {
  ATTNC_CHECK(head < plan.heads.size(), "head set out of range");
  Plan out = plan;
  for (Piece &piece : out.heads[head].pieces) {
    piece.set = ir::bindSet(piece.set, arrays);
    if (piece.withoutResidue)
      piece.withoutResidue = ir::bindSet(piece.withoutResidue, arrays);
  }
  return out;
}

namespace {
std::shared_ptr<const InputArray> classesOf(const ir::SetNode &s) {
  switch (s.kind) {
  case ir::Gen::Class:
    return s.data;
  case ir::Gen::Intersect:
    for (const ir::SetRef &c : s.children)
      if (std::shared_ptr<const InputArray> classes = classesOf(*c))
        return classes;
    return nullptr;
  case ir::Gen::Difference:
    return classesOf(*s.children[0]);
  default:
    return nullptr;
  }
}

/// Whether a band compares positions only (j <= i, j < i, j >= i, j > i):
/// inside one class, whose positions keep their order, it is the same band
/// in the class order.
bool orderBand(const ir::SetNode &s) {
  return s.kind == ir::Gen::Band && ((s.lo == ir::kUnbounded && (s.hi == 0 || s.hi == -1)) ||
                                     (s.hi == ir::kUnbounded && (s.lo == 0 || s.lo == 1)));
}

/// `s` renumbered by `classes`' order in closed form, or null: the class
/// of that input is its segment there, with order bands kept as they are
/// (a causal class is one interval per row, sliding), and the query itself
/// is the diagonal.
ir::SetRef permutedInClosedForm(const ir::SetRef &s, const std::shared_ptr<const InputArray> &classes) {
  if (s->kind == ir::Gen::Class && s->data == classes)
    return ir::SetNode::segment(classes, s->loc);
  if (s->kind == ir::Gen::List && s->elems.size() == 1 && s->elems[0]->op() == Op::VarI)
    return ir::SetNode::band(0, 0, s->loc);
  if (s->kind != ir::Gen::Intersect)
    return nullptr;
  std::vector<ir::SetRef> children;
  bool segment = false;
  for (const ir::SetRef &c : s->children) {
    if (c->kind == ir::Gen::Class && c->data == classes && !segment) {
      children.push_back(ir::SetNode::segment(classes, c->loc));
      segment = true;
    } else if (orderBand(*c)) {
      children.push_back(c);
    } else {
      return nullptr;
    }
  }
  return segment ? ir::SetNode::intersect(std::move(children), s->loc) : nullptr;
}

/// The offset c of a set that is the diagonal j - i = c (the query itself:
/// the list {i} in raster order, the band [0, 0] in a class order).
std::optional<int64_t> diagonalOffset(const ir::SetNode &s) {
  if (s.kind == ir::Gen::Band && s.lo == s.hi && s.lo != ir::kUnbounded)
    return s.lo;
  if (s.kind == ir::Gen::List && s.elems.size() == 1 && s.elems[0]->op() == Op::VarI)
    return 0;
  return std::nullopt;
}

/// `a - b` as one set without a difference, or null: `b` the diagonal
/// j - i = c and `a` a band ending at c, or an intersection with one: that
/// band one shorter at that end. A causal class minus the query is then one
/// interval per row (in its class order), and asks nothing of the list.
ir::SetRef withoutDiagonalEnd(const ir::SetRef &a, const ir::SetNode &b) {
  const std::optional<int64_t> c = diagonalOffset(b);
  if (!c)
    return nullptr;
  auto trimmed = [&](const ir::SetNode &band) -> ir::SetRef {
    if (band.kind != ir::Gen::Band || band.lo == band.hi)
      return nullptr;
    if (band.hi == *c)
      return ir::SetNode::band(band.lo, *c - 1, band.loc);
    if (band.lo == *c)
      return ir::SetNode::band(*c + 1, band.hi, band.loc);
    return nullptr;
  };
  if (ir::SetRef t = trimmed(*a))
    return t;
  if (a->kind != ir::Gen::Intersect)
    return nullptr;
  for (size_t k = 0; k < a->children.size(); ++k)
    if (ir::SetRef t = trimmed(*a->children[k])) {
      std::vector<ir::SetRef> children = a->children;
      children[k] = std::move(t);
      return ir::SetNode::intersect(std::move(children), a->loc);
    }
  return nullptr;
}

ir::SetRef pushPermutation(const ir::SetRef &s, const std::shared_ptr<const InputArray> &classes) {
  switch (s->kind) {
  case ir::Gen::Union: {
    std::vector<ir::SetRef> children;
    for (const ir::SetRef &c : s->children)
      children.push_back(pushPermutation(c, classes));
    return ir::SetNode::unite(std::move(children), s->loc);
  }
  case ir::Gen::Difference:
    return ir::SetNode::difference(pushPermutation(s->children[0], classes),
                                   pushPermutation(s->children[1], classes), s->loc);
  case ir::Gen::Fallback:
    return ir::SetNode::fallback(pushPermutation(s->children[0], classes),
                                 pushPermutation(s->children[1], classes), s->loc);
  case ir::Gen::WhereEmpty:
    return ir::SetNode::whereEmpty(pushPermutation(s->children[0], classes),
                                   pushPermutation(s->children[1], classes), s->loc);
  default:
    if (ir::SetRef closed = permutedInClosedForm(s, classes))
      return closed;
    return ir::SetNode::permuted(s, classes, s->loc);
  }
}
} // namespace

std::shared_ptr<const InputArray> pieceClasses(const Piece &piece) {
  if (piece.strategy != Strategy::RowTiles)
    return nullptr;
  std::shared_ptr<const InputArray> classes = classesOf(*piece.set);
  return classes && classes->bound && classes->hasClasses() ? classes : nullptr;
}

namespace {
/// Whether every pair of `s` lies in band `b`: `s` is a band inside it, or
/// an intersection with such a child.
bool insideBand(const ir::SetNode &s, const ir::SetNode &b) {
  auto within = [&](const ir::SetNode &x) {
    return x.kind == ir::Gen::Band && (b.lo == ir::kUnbounded || (x.lo != ir::kUnbounded && x.lo >= b.lo)) &&
           (b.hi == ir::kUnbounded || (x.hi != ir::kUnbounded && x.hi <= b.hi));
  };
  if (within(s))
    return true;
  if (s.kind == ir::Gen::Intersect)
    for (const ir::SetRef &c : s.children)
      if (within(*c))
        return true;
  return false;
}

/// The input whose class `y` is, when `x - y` is `x` less the pairs whose
/// row and key share that input's class: `y` is the class, or the class
/// intersected with bands that hold all of `x`. The input must be another
/// one than `classes`, indexed over the same positions (a tag per row and key).
std::shared_ptr<const InputArray> pairTestClass(const ir::SetNode &x, const ir::SetNode &y,
                                                const InputArray &classes) {
  const ir::SetNode *cls = y.kind == ir::Gen::Class ? &y : nullptr;
  if (y.kind == ir::Gen::Intersect)
    for (const ir::SetRef &c : y.children) {
      if (c->kind == ir::Gen::Class && !cls)
        cls = c.get();
      else if (c->kind != ir::Gen::Band || !insideBand(x, *c))
        return nullptr;
    }
  if (!cls || cls->data.get() == &classes || !cls->data->bound || cls->data->rows != classes.rows ||
      !cls->data->hasClasses())
    return nullptr;
  return cls->data;
}

/// Each position of `classes`' order tagged with its class in `other`
/// (where that class starts in other's order: equal values, equal tags).
std::shared_ptr<const std::vector<int32_t>> tagsInOrder(const InputArray &other, const InputArray &classes) {
  auto tags = std::make_shared<std::vector<int32_t>>(classes.order.size());
  for (size_t t = 0; t < tags->size(); ++t)
    (*tags)[t] = other.classBegin[static_cast<size_t>(classes.order[t])];
  return tags;
}
} // namespace

Piece permutePiece(const Piece &piece, const std::shared_ptr<const InputArray> &classes) {
  ATTNC_CHECK(piece.strategy == Strategy::RowTiles, "only row-tiles pieces are permuted");
  Piece out = piece;
  ir::SetRef set = piece.set;
  // X - (Y | class(c) & band): X - Y with the pairs that share c's class
  // dropped per pair (X inside the band), not subtracted row by row.
  if (set->kind == ir::Gen::Difference) {
    const ir::SetRef &x = set->children[0], &y = set->children[1];
    const std::vector<ir::SetRef> parts = y->kind == ir::Gen::Union ? y->children : std::vector<ir::SetRef>{y};
    std::vector<ir::SetRef> kept;
    for (const ir::SetRef &part : parts) {
      if (std::shared_ptr<const InputArray> other = pairTestClass(*x, *part, *classes))
        out.distinctTags.push_back(tagsInOrder(*other, *classes));
      else
        kept.push_back(part);
    }
    if (!out.distinctTags.empty())
      set = kept.empty() ? x : ir::SetNode::difference(x, ir::SetNode::unite(std::move(kept), set->loc), set->loc);
  }
  out.set = pushPermutation(set, classes);
  out.period = 0;
  return out;
}

bool rowwisePiece(const ir::SetNode &s) {
  constexpr int64_t kRowwiseBlock = 16;
  if (s.kind == ir::Gen::Select)
    return s.keyBlock < kRowwiseBlock;
  if (s.kind == ir::Gen::Difference)
    return rowwisePiece(*s.children[0]);
  if (s.kind == ir::Gen::Intersect)
    return std::any_of(s.children.begin(), s.children.end(), [](const ir::SetRef &c) { return rowwisePiece(*c); });
  return false;
}

std::shared_ptr<const InputArray> runOrder(const Piece &piece, int64_t n) {
  if (rowwisePiece(*piece.set))
    return nullptr;
  std::shared_ptr<const InputArray> classes = pieceClasses(piece);
  return classes && classes->rows == n ? classes : nullptr;
}

namespace {
/// One disjunct of a set that reads data: `core` minus each of `minus`.
struct Part {
  ir::SetRef core;
  std::vector<ir::SetRef> minus;
  ir::SetRef set() const {
    return minus.empty() ? core : ir::SetNode::difference(core, ir::SetNode::unite(minus, core->loc), core->loc);
  }
};

/// `s` as a union of parts, each an intersection with the differences
/// hoisted out: (X | Y) - Z & R = ((X & R) - Z) | ((Y & R) - Z), so that an
/// equality class meets the causal band in one intersection (one interval
/// per row once sorted by the class: pieceClasses).
std::vector<Part> splitParts(const ir::SetRef &s) {
  switch (s->kind) {
  case ir::Gen::Union: {
    std::vector<Part> out;
    for (const ir::SetRef &c : s->children) {
      std::vector<Part> part = splitParts(c);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  case ir::Gen::Difference: {
    std::vector<Part> out = splitParts(s->children[0]);
    for (Part &p : out)
      p.minus.push_back(s->children[1]);
    return out;
  }
  case ir::Gen::Intersect: {
    // Distribute over the first child that is a union; hoist every child's differences.
    std::vector<std::vector<Part>> children;
    size_t split = s->children.size();
    for (size_t k = 0; k < s->children.size(); ++k) {
      children.push_back(splitParts(s->children[k]));
      if (children.back().size() > 1 && split == s->children.size())
        split = k;
    }
    std::vector<ir::SetRef> cores;
    std::vector<ir::SetRef> minus;
    for (size_t k = 0; k < children.size(); ++k)
      if (k != split)
        for (const Part &p : children[k]) { // one part each
          cores.push_back(p.core);
          minus.insert(minus.end(), p.minus.begin(), p.minus.end());
        }
    if (split == s->children.size())
      return {{ir::SetNode::intersect(cores, s->loc), minus}};
    std::vector<Part> out;
    for (const Part &p : children[split]) {
      std::vector<ir::SetRef> conj{p.core};
      conj.insert(conj.end(), cores.begin(), cores.end());
      Part q{ir::SetNode::intersect(conj, s->loc), p.minus};
      q.minus.insert(q.minus.end(), minus.begin(), minus.end());
      out.push_back(std::move(q));
    }
    return out;
  }
  default:
    return {{s, {}}};
  }
}

/// `s` with the query itself (`{ i }`, alone or in an intersection) as the
/// band [0, 0]: the same keys, one interval per row (the self rule's B).
ir::SetRef diagonalAsBand(const ir::SetRef &s) {
  auto diagonal = [](const ir::SetRef &c) {
    return c->kind == ir::Gen::List && diagonalOffset(*c) ? ir::SetNode::band(0, 0, c->loc) : c;
  };
  if (s->kind != ir::Gen::Intersect)
    return diagonal(s);
  std::vector<ir::SetRef> children;
  for (const ir::SetRef &c : s->children)
    children.push_back(diagonal(c));
  return ir::SetNode::intersect(std::move(children), s->loc);
}

/// `y` without its bands that hold all of `x` (x - y is then x less the
/// rest): a window less the causal selected blocks before it is the window
/// less the selected blocks, whose keys are the same on a block's rows.
ir::SetRef withoutBandsHolding(const ir::SetRef &y, const ir::SetNode &x) {
  if (y->kind != ir::Gen::Intersect)
    return y;
  std::vector<ir::SetRef> kept;
  for (const ir::SetRef &c : y->children)
    if (c->kind != ir::Gen::Band || !insideBand(x, *c))
      kept.push_back(c);
  if (kept.size() == y->children.size() || kept.empty())
    return y;
  return kept.size() == 1 ? kept[0] : ir::SetNode::intersect(std::move(kept), y->loc);
}

/// The pieces of a head set that reads data: its parts, each without the
/// ones before it; a fallback `A else B` gives A's pieces and last the rows
/// where A is empty, with B's keys. Row tiles only (a residue factor is run
/// as it is).
std::vector<Piece> dataPieces(const ir::SetRef &s) {
  std::vector<Part> parts;
  ir::SetRef fallback;
  if (s->kind == ir::Gen::Fallback) {
    parts = splitParts(s->children[0]);
    fallback = ir::SetNode::whereEmpty(s->children[0], s->children[1], s->loc);
  } else {
    parts = splitParts(s);
  }
  // A part minus the query itself whose band ends at the diagonal: the
  // band one shorter instead (causal - {i} is j < i).
  for (Part &part : parts)
    for (auto m = part.minus.begin(); m != part.minus.end();) {
      if (ir::SetRef trimmed = withoutDiagonalEnd(part.core, **m)) {
        part.core = std::move(trimmed);
        m = part.minus.erase(m);
      } else {
        ++m;
      }
    }
  // The rows the fallback takes: where each part is empty (the parts
  // trimmed as above, which anyIn asks in closed form).
  if (fallback && !parts.empty()) {
    std::vector<ir::SetRef> sets;
    for (const Part &part : parts)
      sets.push_back(part.set());
    fallback = ir::SetNode::whereEmpty(ir::SetNode::unite(std::move(sets), s->loc), diagonalAsBand(s->children[1]),
                                       s->loc);
  }
  std::vector<Piece> pieces;
  std::vector<ir::SetRef> ownMinus;
  for (size_t k = 0; k < parts.size(); ++k) {
    // Minus the parts before it: an earlier part whose own exclusions this
    // part excludes too (the query itself, say) is taken out as its core,
    // one set fewer to evaluate per row.
    ownMinus = parts[k].minus;
    for (size_t m = 0; m < k; ++m) {
      const bool covered = std::all_of(parts[m].minus.begin(), parts[m].minus.end(), [&](const ir::SetRef &x) {
        return std::find(ownMinus.begin(), ownMinus.end(), x) != ownMinus.end();
      });
      parts[k].minus.push_back(covered ? withoutBandsHolding(parts[m].core, *parts[k].core) : parts[m].set());
    }
    Piece piece;
    piece.set = parts[k].set();
    pieces.push_back(std::move(piece));
  }
  if (fallback) {
    Piece piece;
    piece.set = fallback;
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

/// Whether a set holds a grid coordinate's range. A union of such sets
/// inside an intersection is one comparison solved on a canvas in tiles
/// (`kx <= b`: the tile columns before b's, or b's tile up to b's column in
/// it) and the intersection a neighbourhood: split into pieces, each piece's
/// blocks would run the keys its tiles share with the other's once more
/// (tiled NATTEN 7x7, 64 x 64: executed / useful 2.60 as one piece, 3.63 as two).
bool holdsCoordinates(const ir::SetNode &s) {
  if (s.kind == ir::Gen::CoordRange)
    return true;
  return std::any_of(s.children.begin(), s.children.end(),
                     [](const ir::SetRef &c) { return holdsCoordinates(*c); });
}
} // namespace

Plan buildPlan(const ir::PatternIR &ir, const PlanOptions &options) {
  ATTNC_CHECK(options.tileRows >= 0 && options.tileRows <= 64, "tile rows must be in [1, 64] (0: the default)");
  ATTNC_CHECK(options.tileCols >= 1, "tile columns must be positive");
  Plan plan;
  plan.pattern = ir.name;
  plan.options = resolveOptions(ir, options);
  for (const ir::PatternIR::Head &head : ir.heads) {
    HeadPlan hp;
    hp.heads = head.heads;
    const ir::SetRef &s = head.set;
    if (ir::readsData(*s)) {
      hp.pieces = dataPieces(s);
      plan.heads.push_back(std::move(hp));
      continue;
    }
    std::vector<ir::SetRef> parts, rest;
    if (s->kind == ir::Gen::Union) {
      parts = s->children;
    } else if (s->kind == ir::Gen::Intersect) {
      for (const ir::SetRef &c : s->children) {
        if (c->kind == ir::Gen::Union && parts.empty() && !holdsCoordinates(*c))
          parts = c->children;
        else
          rest.push_back(c);
      }
    }
    if (parts.empty()) {
      parts = {s};
      rest.clear();
    }
    std::vector<ir::SetRef> earlier;
    for (const ir::SetRef &part : parts) {
      std::vector<ir::SetRef> conj{part};
      conj.insert(conj.end(), rest.begin(), rest.end());
      ir::SetRef pieceSet = ir::SetNode::intersect(conj, part->loc);
      Piece piece;
      ir::SetRef rest = nullptr;
      if (const ir::SetNode *res = findResidue(*pieceSet)) {
        piece.strategy = Strategy::ResidueRelayout;
        piece.modulus = res->modulus;
        piece.residue = res->residue;
        std::vector<ir::SetRef> others;
        if (pieceSet->kind == ir::Gen::Intersect)
          for (const ir::SetRef &c : pieceSet->children)
            if (c.get() != res)
              others.push_back(c);
        rest = ir::SetNode::intersect(others, part->loc);
      }
      if (!earlier.empty()) {
        ir::SetRef before = ir::SetNode::unite(earlier, part->loc);
        pieceSet = ir::SetNode::difference(pieceSet, before, part->loc);
        if (rest)
          rest = ir::SetNode::difference(rest, before, part->loc);
      }
      piece.withoutResidue = rest;
      piece.set = pieceSet;
      constexpr int64_t kMaxPeriod = int64_t{1} << 20;
      piece.period = ir::period(rest ? *rest : *pieceSet, kMaxPeriod);
      earlier.push_back(part);
      hp.pieces.push_back(piece);
    }
    plan.heads.push_back(std::move(hp));
  }
  return plan;
}

/// A reference block and, per partial position, the pairs its rows lack
/// before it (the useful pairs of any clipped copy, without a popcount per
/// key).
struct BlockSource::Reference {
  BlockShape shape;
  std::vector<int64_t> missingBefore; ///< [k]: rows lacking keys at partial entries < k
  explicit Reference(BlockShape s) : shape(std::move(s)) {
    missingBefore.assign(shape.partial.size() + 1, 0);
    for (size_t k = 0; k < shape.partial.size(); ++k)
      missingBefore[k + 1] = missingBefore[k] + shape.rows - std::popcount(shape.partial[k].second);
  }
};

namespace {
/// Whether a set reads data its rows must be evaluated for one by one (a
/// segment is closed form: its blocks are bounded like a block-diagonal's).
bool rowwiseData(const ir::SetNode &s) {
  if (s.kind == ir::Gen::Segment)
    return false;
  if (s.kind == ir::Gen::Band || s.kind == ir::Gen::All || s.kind == ir::Gen::None)
    return false;
  if (s.kind == ir::Gen::Union || s.kind == ir::Gen::Intersect || s.kind == ir::Gen::Difference) {
    for (const ir::SetRef &c : s.children)
      if (rowwiseData(*c))
        return true;
    return false;
  }
  return ir::readsData(s);
}
} // namespace

namespace {
/// Appends to `out` the tests of `s` when it is a union of classes within a
/// band below some diagonal (`{ j : b[j] == b[i] } & { j : j <= i + c }`,
/// the rounds of a causal LSH less the query): row i has a key in such a
/// part iff the first position of its class is at most i + c.
bool classesBefore(const ir::SetNode &s, int64_t n, std::vector<BlockSource::ClassBefore> &out) {
  if (s.kind == ir::Gen::Union) {
    for (const ir::SetRef &c : s.children)
      if (!classesBefore(*c, n, out))
        return false;
    return true;
  }
  if (s.kind != ir::Gen::Intersect || s.children.size() != 2)
    return false;
  const ir::SetNode *cls = nullptr, *band = nullptr;
  for (const ir::SetRef &c : s.children)
    (c->kind == ir::Gen::Class ? cls : band) = c.get();
  if (!cls || !band || band->kind != ir::Gen::Band || band->lo != ir::kUnbounded || band->hi == ir::kUnbounded ||
      !cls->data->bound || !cls->data->hasClasses() || cls->data->rows < n)
    return false;
  out.push_back({cls->data.get(), band->hi});
  return true;
}
} // namespace

namespace {
/// The keys a set can hold at most, as bounds on j (inclusive terms of i;
/// null: none on that side): a key range's own, an intersection's tightest
/// child's, a union's widest over its children. Other generators: none.
struct KeyHull {
  TermRef lo, hi;
};
KeyHull keyHull(const ir::SetNode &s) {
  switch (s.kind) {
  case ir::Gen::KeyRange:
    return {s.loTerm, s.hiTerm};
  case ir::Gen::Intersect: {
    KeyHull out;
    for (const ir::SetRef &c : s.children) {
      KeyHull h = keyHull(*c);
      if (h.lo)
        out.lo = out.lo ? Term::make(Op::Max, {out.lo, h.lo}) : h.lo;
      if (h.hi)
        out.hi = out.hi ? Term::make(Op::Min, {out.hi, h.hi}) : h.hi;
    }
    return out;
  }
  case ir::Gen::Union: {
    KeyHull out;
    for (size_t k = 0; k < s.children.size(); ++k) {
      KeyHull h = keyHull(*s.children[k]);
      out.lo = !h.lo ? nullptr : k == 0 ? h.lo : out.lo ? Term::make(Op::Min, {out.lo, h.lo}) : nullptr;
      out.hi = !h.hi ? nullptr : k == 0 ? h.hi : out.hi ? Term::make(Op::Max, {out.hi, h.hi}) : nullptr;
      if (!out.lo && !out.hi)
        break;
    }
    return out;
  }
  default:
    return {};
  }
}

/// A neighbourhood on a canvas in tiles (patterns/natten2d_tiled.attn) is an
/// intersection of unions, one per side of the window on each axis, the
/// axes compared in mixed radix: the unions that bound the canvas row bound
/// the keys (`j < X` or `X <= j <= Y` with a column test), those that bound
/// the column hold coordinates on every period of the whole sequence. Their
/// key hulls, as key ranges beside them (the same set), make the window a
/// few tile rows before a coordinate's periods are listed: its row blocks at
/// n = 65,536 took 203 ms listing the column tests over every key.
ir::SetRef withKeyHulls(const ir::SetRef &s) {
  if (s->kind != ir::Gen::Intersect || ir::readsData(*s) || !holdsCoordinates(*s))
    return s;
  std::vector<ir::SetRef> children = s->children;
  for (const ir::SetRef &c : s->children)
    if (c->kind == ir::Gen::Union)
      if (KeyHull h = keyHull(*c); h.lo || h.hi)
        children.push_back(ir::SetNode::keyRange(h.lo, h.hi, c->loc));
  return children.size() == s->children.size() ? s : ir::SetNode::intersect(std::move(children), s->loc);
}
} // namespace

BlockSource::BlockSource(ir::SetRef set, int64_t n, int64_t R, bool evaluator)
    : set_(withKeyHulls(set)), n_(n), R_(R), rows_(n), perKeyWork_(ir::hasPredicate(*set_)),
      rowsOnce_(!perKeyWork_ && rowwiseData(*set_)),
      oneInterval_(!perKeyWork_ && ir::readsData(*set_) && ir::oneIntervalPerRow(*set_)),
      eval_(evaluator || ir::readsData(*set_) ? std::make_shared<const ir::RowEvaluator>(set_, n) : nullptr) {
  if (oneInterval_ || perKeyWork_ || !ir::readsData(*set_))
    return;
  // `A else B`'s last piece with B one interval per row, A causal classes:
  // A asked in closed form, B's ends where it has no key.
  if (set_->kind == ir::Gen::WhereEmpty && ir::oneIntervalPerRow(*set_->children[1]) &&
      classesBefore(*set_->children[0], n, before_)) {
    ends_ = set_->children[1];
    return;
  }
  before_.clear();
  // A set that reads data, one interval per row intersected with (or less)
  // sets whose rows are the same on a block's rows (a block selection):
  // those evaluated once per block, the rest from each row's ends.
  auto common = [](const ir::SetNode &c) { return ir::traits(c.kind).sameKeys != ir::SameKeys::Unknown; };
  std::vector<ir::SetRef> ends, same;
  if (set_->kind == ir::Gen::Intersect) {
    for (const ir::SetRef &c : set_->children)
      (ir::oneIntervalPerRow(*c) ? ends : common(*c) ? same : ends).push_back(c);
    auto interval = [](const ir::SetRef &c) { return ir::oneIntervalPerRow(*c); };
    if (same.empty() || !std::all_of(ends.begin(), ends.end(), interval))
      return;
  } else if (set_->kind == ir::Gen::Difference && ir::oneIntervalPerRow(*set_->children[0]) &&
             common(*set_->children[1])) {
    ends.push_back(set_->children[0]);
    same.push_back(set_->children[1]);
    commonMinus_ = true;
  } else {
    return;
  }
  ends_ = ends.size() == 1 ? ends[0] : ends.empty() ? ir::SetNode::all() : ir::SetNode::intersect(ends, set_->loc);
  for (const ir::SetRef &c : same)
    common_.push_back(std::make_shared<const ir::RowEvaluator>(c, n));
}

BlockSource::BlockSource(const Plan &plan, const Piece &piece, int64_t n, int64_t residueClass,
                         bool translates)
    : BlockSource(piece.set, n, plan.options.tileRows, piece.strategy != Strategy::ResidueRelayout) {
  distinct_ = piece.distinctTags;
  if (piece.strategy == Strategy::ResidueRelayout) {
    const int64_t m = piece.modulus, c = residueClass;
    ATTNC_CHECK(0 <= c && c < numClasses(piece, n), "residue class out of range");
    rest_ = piece.withoutResidue;
    modulus_ = m;
    keyClass_ = plan::keyClass(piece, c);
    rows_ = classRows(piece, n, c);
    rowBase_ = c;
    rowStride_ = m;
  }
  // References: P blocks whose moves by P R rows (R m queries apart in a
  // class) are moves of the piece by multiples of its period. Built with
  // keys in [-2n, 3n): a move by less than n then brings every key of
  // [0, n) from inside that window. Worth it from a few copies on; key
  // positions must fit int32.
  const int64_t P = referenceBlocks(plan, piece);
  if (!translates || P == 0 || 5 * n >= (int64_t{1} << 31) || numBlocks() < 2 * P + 2) {
    if (translates && piece.strategy == Strategy::RowTiles)
      enableMoves();
    return;
  }
  auto refs = std::make_shared<std::vector<Reference>>();
  BlockShape shape;
  for (int64_t b = 0; b < P; ++b) {
    buildIn(b, shape, -2 * n, 3 * n);
    refs->emplace_back(shape);
  }
  refs_ = std::move(refs);
}

BlockSource BlockSource::dense(const Plan &plan, const HeadPlan &head, int64_t n) {
  std::vector<ir::SetRef> sets;
  for (const Piece &p : head.pieces)
    sets.push_back(p.set);
  BlockSource src(ir::SetNode::unite(sets, {}), n, plan.options.tileRows, true);
  src.dense_ = true;
  return src;
}

namespace {

/// Keys of `runs` (ascending) below x, in O(runs).
int64_t keysBelow(const KeyRuns &runs, int64_t x) {
  int64_t total = 0;
  for (const KeyRun &r : runs) {
    if (x <= r.lo)
      break;
    // Intervals that start below x: all but the last are whole (period > len).
    const int64_t started = r.count == 1 ? 1 : std::min(r.count, floorDiv(x - r.lo - 1, r.period) + 1);
    const int64_t lastStart = r.lo + (started - 1) * r.period;
    total += (started - 1) * r.len + std::min(r.len, x - lastStart);
  }
  return total;
}

/// The runs' keys inside [lo, hi) into `out`: whole intervals stay one run,
/// an interval cut by lo or hi becomes a run of its own.
void clipRuns(const KeyRuns &runs, int64_t lo, int64_t hi, KeyRuns &out) {
  out.clear();
  for (const KeyRun &r : runs) {
    const int64_t period = r.count == 1 ? 1 : r.period;
    // Intervals k in [first, last] meet [lo, hi).
    int64_t first = std::max<int64_t>(0, floorDiv(lo - r.lo - r.len, period) + 1);
    int64_t last = std::min(r.count - 1, floorDiv(hi - 1 - r.lo, period));
    if (first > last)
      continue;
    auto start = [&](int64_t k) { return r.lo + k * period; };
    KeyRun head{}, tail{};
    bool cutHead = start(first) < lo, cutTail = start(last) + r.len > hi;
    if (first == last && (cutHead || cutTail)) {
      const int64_t a = std::max(lo, start(first)), b = std::min(hi, start(first) + r.len);
      out.push_back({a, b - a, 0, 1});
      continue;
    }
    if (cutHead)
      head = {lo, start(first) + r.len - lo, 0, 1}, ++first;
    if (cutTail)
      tail = {start(last), hi - start(last), 0, 1}, --last;
    if (cutHead)
      out.push_back(head);
    if (first <= last)
      out.push_back({start(first), r.len, last > first ? r.period : 0, last - first + 1});
    if (cutTail)
      out.push_back(tail);
  }
}

} // namespace

namespace {

/// `ref` moved by `shift` rows and keys (in its own coordinates: a class's
/// rows and keys for relayout) and clipped to keys [0, keyLimit). Clipping
/// drops a prefix and a suffix of the sorted keys, so partial positions
/// only move down by the keys dropped in front.
void translateBlock(const BlockSource::Reference &reference, int64_t shift, int64_t keyLimit,
                    BlockShape &out) {
  const BlockShape &ref = reference.shape;
  out.firstRow = ref.firstRow + shift;
  out.rows = ref.rows;
  out.allRows = ref.allRows;
  out.keyBase = ref.keyBase;
  out.keyStride = ref.keyStride;
  thread_local KeyRuns moved;
  moved = ref.keys;
  for (KeyRun &r : moved)
    r.lo += shift;
  const int64_t front = keysBelow(moved, 0), end = keysBelow(moved, keyLimit);
  clipRuns(moved, 0, keyLimit, out.keys);
  auto pos = [](const std::pair<int32_t, uint64_t> &e, int64_t p) { return e.first < p; };
  auto from = std::lower_bound(ref.partial.begin(), ref.partial.end(), front, pos);
  auto to = std::lower_bound(from, ref.partial.end(), end, pos);
  out.partial.assign(from, to);
  for (auto &entry : out.partial)
    entry.first = static_cast<int32_t>(entry.first - front);
  out.useful = int64_t{out.rows} * (end - front) -
               (reference.missingBefore[static_cast<size_t>(to - ref.partial.begin())] -
                reference.missingBefore[static_cast<size_t>(from - ref.partial.begin())]);
}

} // namespace

namespace {
/// The smallest constant c > 1 of a term `i / c` or `i % c` in `s`: how far
/// a row moves before its coordinates' digits repeat (a canvas row, a
/// tile); 0 when there is none.
int64_t rowRadix(const ir::SetNode &s) {
  int64_t best = 0;
  std::function<void(const Term &)> visit = [&](const Term &t) {
    if ((t.op() == Op::Div || t.op() == Op::Mod) && t.arg(0)->op() == Op::VarI && t.arg(1)->op() == Op::Const &&
        t.arg(1)->value() > 1)
      best = best ? std::min(best, t.arg(1)->value()) : t.arg(1)->value();
    for (const TermRef &a : t.args())
      visit(*a);
  };
  for (const TermRef &t : {s.loTerm, s.hiTerm, s.cond})
    if (t)
      visit(*t);
  for (const TermRef &t : s.elems)
    visit(*t);
  for (const ir::SetRef &c : s.children) {
    const int64_t r = rowRadix(*c);
    best = r && best ? std::min(best, r) : std::max(best, r);
  }
  return best;
}

/// Whether `b` is `a` with every interval moved by `shift`.
bool isMoved(const IntervalSet &a, const IntervalSet &b, int64_t shift) {
  if (a.size() != b.size())
    return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (b[k].lo != a[k].lo + shift || b[k].hi != a[k].hi + shift)
      return false;
  return true;
}

/// The blocks a thread built last, per source (BlockSource::buildMoved):
/// each one's shape and its rows' keys, in a ring of moveBlocks_ entries.
struct MoveMemory {
  uint64_t source = 0;
  /// Checks and moves on this source: a source whose blocks seldom move
  /// (windows that do not repeat at the move's distance, Swin's of 7 on
  /// tiles of 8) stops checking, which costs a row evaluation per row.
  int64_t tries = 0, hits = 0;
  struct Entry {
    int64_t block = -1;
    BlockShape shape;
    std::vector<IntervalSet> rows;
  };
  std::vector<Entry> ring;
};
thread_local MoveMemory moveMemory;
thread_local int64_t canvasMoves = 0;
std::atomic<uint64_t> nextSourceId{1};
} // namespace

int64_t BlockSource::canvasMovesOnThisThread() { return canvasMoves; }

void BlockSource::enableMoves() {
  // Worth it from a few blocks a thread can move, on a canvas (a set with
  // a grid coordinate); a set with a period has references (build), one
  // that reads data changes with each call, and a predicate's rows cost
  // their whole window.
  constexpr int64_t kMostBlocksBack = 8;
  if (dense_ || perKeyWork_ || rest_)
    return;
  int64_t back = 0;
  if (set_->kind == ir::Gen::Permuted && set_->data->tileCols > 0 && !ir::readsData(*set_->children[0])) {
    const InputArray &order = *set_->data;
    const int64_t tile = order.tileRows * order.tileCols;
    if (tile % R_ != 0 || order.rows != n_)
      return;
    back = tile / R_;
    tiles_ = &order;
    rasterEval_ = std::make_shared<const ir::RowEvaluator>(set_->children[0], n_);
  } else if (!ir::readsData(*set_) && eval_ && hasGen(*set_, ir::Gen::CoordRange)) {
    const int64_t radix = rowRadix(*set_);
    if (radix == 0)
      return;
    // Blocks whose bounds are exact (sta3d's, in tiles of whole blocks) are
    // built without a row evaluation: cheaper than checking a move.
    const int64_t middle = numBlocks() / 2 * R_;
    if (BlockBounds(n_).eval(set_, middle, std::min(rows_, middle + R_) - 1, 0, n_).exact)
      return;
    back = std::lcm(R_, radix) / R_;
  }
  if (back == 0 || back > kMostBlocksBack || numBlocks() < 4 * back)
    return;
  moveBlocks_ = back;
  id_ = nextSourceId.fetch_add(1, std::memory_order_relaxed);
}

void BlockSource::buildMoved(int64_t block, BlockShape &out) const {
  MoveMemory &memory = moveMemory;
  if (memory.source != id_) {
    memory = {};
    memory.source = id_;
    memory.ring.resize(static_cast<size_t>(moveBlocks_));
  }
  constexpr int64_t kTrial = 16; // checks before a source's hit rate counts
  if (memory.tries >= kTrial && 4 * memory.hits < memory.tries) {
    buildIn(block, out, 0, n_);
    return;
  }
  MoveMemory::Entry &before = memory.ring[static_cast<size_t>(block % moveBlocks_)];
  const int64_t t0 = block * R_, shift = moveBlocks_ * R_;
  // The rows' keys: the set's own, or on a canvas in tiles its child's in
  // raster order, where the block moves by one tile: tileCols positions,
  // every key staying in its canvas row (then its rank moves by a tile's
  // tokens, `shift`).
  const int64_t step = tiles_ ? tiles_->tileCols : shift;
  const bool reference = block >= moveBlocks_ && before.block == block - moveBlocks_;
  bool moved = reference;
  thread_local std::vector<IntervalSet> rows;
  rows.resize(static_cast<size_t>(R_));
  int64_t r = 0;
  for (; r < R_; ++r) {
    IntervalSet &keys = rows[static_cast<size_t>(r)];
    if (tiles_) {
      const int64_t q = tiles_->order[static_cast<size_t>(t0 + r)];
      rasterEval_->row(q, 0, n_, keys);
      if (reference) {
        moved = q - tiles_->order[static_cast<size_t>(t0 + r - shift)] == step;
        const int64_t width = tiles_->canvasWidth;
        for (const Interval &x : before.rows[static_cast<size_t>(r)])
          moved = moved && x.lo / width == (x.hi - 1) / width && (x.hi - 1) % width + step < width;
      }
    } else {
      eval_->row(t0 + r, 0, n_, keys);
    }
    // A row that did not move ends the check. On a canvas in tiles that
    // ends the rows too (theirs are in raster order: the block is built
    // anew); else the rest are evaluated and make the block, with those
    // already checked (not twice: tiled NATTEN's rows that did not move
    // were a fifth of its row evaluations).
    if (moved)
      moved = isMoved(before.rows[static_cast<size_t>(r)], keys, step);
    if (reference && !moved && tiles_)
      break;
  }
  if (reference) {
    ++memory.tries;
    memory.hits += moved;
  }
  if (moved) {
    ++canvasMoves;
    out = before.shape;
    out.firstRow += shift;
    for (KeyRun &k : out.keys)
      k.lo += shift;
  } else if (!tiles_) {
    out.firstRow = t0;
    out.rows = static_cast<int32_t>(R_);
    out.allRows = R_ == 64 ? ~uint64_t{0} : ((uint64_t{1} << R_) - 1);
    out.useful = 0;
    out.keyBase = 0;
    out.keyStride = 1;
    thread_local std::vector<IntervalSet> own; // (fillFromRows takes the rows' own keys apart)
    own.assign(rows.begin(), rows.end());
    fillFromRows(own, out);
  } else {
    buildIn(block, out, 0, n_);
  }
  // A block that failed its check is no reference either, as when its
  // rows stopped at the first that did not move: the next block a move
  // away is then not checked, nor counted (a clamped window's first canvas
  // rows, which never move, would otherwise stop the checks of a whole
  // canvas within 16 tries).
  const bool keep = r == R_ && (moved || !reference);
  before.block = keep ? block : -1;
  if (keep) {
    before.shape = out;
    before.rows.swap(rows);
  }
}

int64_t referenceBlocks(const Plan &plan, const Piece &piece) {
  if (piece.period == 0)
    return 0;
  // Queries between a block and the next: R, or R m within a residue class.
  const int64_t step =
      plan.options.tileRows * (piece.strategy == Strategy::ResidueRelayout ? piece.modulus : 1);
  return std::lcm(step, piece.period) / step;
}

int64_t BlockSource::references() const { return refs_ ? static_cast<int64_t>(refs_->size()) : 0; }

void BlockSource::build(int64_t block, BlockShape &out) const {
  const int64_t P = references();
  if (P > 0 && (block + 1) * R_ <= rows_) { // a full block: move its reference
    const int64_t ref = block % P, limit = rest_ ? keyRows() : n_;
    translateBlock((*refs_)[static_cast<size_t>(ref)], (block - ref) * R_, limit, out);
    return;
  }
  if (moveBlocks_ > 0 && (block + 1) * R_ <= rows_) {
    buildMoved(block, out);
    return;
  }
  buildIn(block, out, 0, n_);
}

void BlockSource::buildIn(int64_t block, BlockShape &out, int64_t lo, int64_t hi) const {
  const int64_t t0 = block * R_;
  out.firstRow = t0;
  out.rows = static_cast<int32_t>(std::min(R_, rows_ - t0));
  out.allRows = out.rows == 64 ? ~uint64_t{0} : ((uint64_t{1} << out.rows) - 1);
  out.useful = 0;
  out.keyBase = 0;
  out.keyStride = 1;
  // Each row's own keys, per thread and reused: generating blocks in a loop
  // allocates little more than the shapes themselves.
  thread_local std::vector<IntervalSet> own;
  if (own.size() < static_cast<size_t>(out.rows))
    own.resize(static_cast<size_t>(out.rows));
  for (int32_t r = 0; r < out.rows; ++r)
    own[r].clear();
  thread_local IntervalSet part;
  if (rest_) {
    // Relayout: row t is query c + t m; its keys are j = keyClass + u m
    // inside the intervals of the piece without its residue factor, so work
    // in u.
    const int64_t m = modulus_;
    ir::RowEvaluator eval(rest_, n_);
    for (int32_t r = 0; r < out.rows; ++r) {
      eval.rowIn(query(t0 + r), lo, hi, part);
      for (const Interval &x : part) {
        int64_t first = floorDiv(x.lo - keyClass_ + m - 1, m);
        int64_t last = floorDiv(x.hi - keyClass_ + m - 1, m); // exclusive
        if (first < last)
          own[r].push_back({first, last});
      }
      normalize(own[r]);
    }
    fillFromRows(own, out);
    out.keyBase = keyClass_;
    out.keyStride = m;
    return;
  }
  const ir::RowEvaluator &eval = *eval_; // (every source but a relayout's, which returned above)
  if (dense_) {
    for (int32_t r = 0; r < out.rows; ++r) {
      own[r] = eval.row(t0 + r);
      out.useful += cardinality(own[r]);
    }
    out.keys = {{0, n_, n_, 1}}; // every key, the pattern only as masks
    out.partial.clear();
    std::vector<uint64_t> masks(static_cast<size_t>(n_), 0);
    for (int32_t r = 0; r < out.rows; ++r)
      for (const Interval &x : own[r])
        for (int64_t k = x.lo; k < x.hi; ++k)
          masks[static_cast<size_t>(k)] |= uint64_t{1} << r;
    for (int64_t k = 0; k < n_; ++k)
      if (masks[static_cast<size_t>(k)] != out.allRows)
        out.partial.push_back({static_cast<int32_t>(k), masks[static_cast<size_t>(k)]});
    return;
  }
  if (rowsOnce_) {
    // A set that reads data has no bounds worth computing: every row once.
    for (int32_t r = 0; r < out.rows; ++r)
      eval.rowIn(t0 + r, lo, hi, own[r]);
    fillFromRows(own, out);
    return;
  }
  // Keys every row has need no per-row work; rows are evaluated only where
  // the bounds disagree.
  Bounds bd = BlockBounds(n_).eval(set_, t0, t0 + out.rows - 1, lo, hi);
  // Exact bounds (the usual case: bands, stripes, blocks) leave no row to
  // evaluate; comparing them is cheaper than subtracting.
  IntervalSet unsure = bd.exact ? IntervalSet{} : subtract(bd.upper, bd.lower);
  // Many unsure intervals (the scattered keys of an equality class or a
  // selection), or a few that fill an eighth of their span or more (a
  // neighbourhood's rows on a canvas in tiles: 4 intervals, 360 keys over
  // 1,208 at a width of 128, over 2,232 at 256): each row once over their
  // span, then cut to them, rather than a row evaluation per interval
  // (tiled NATTEN's row blocks: half the work). A per-key predicate stays
  // inside them.
  const bool overSpan = unsure.size() > kManyUnsure ||
                        (unsure.size() > 1 && unsure.back().hi - unsure.front().lo <= 8 * cardinality(unsure));
  if (overSpan && !perKeyWork_) {
    thread_local IntervalSet cut;
    for (int32_t r = 0; r < out.rows; ++r) {
      eval.rowIn(t0 + r, unsure.front().lo, unsure.back().hi, part);
      intersectInto(part, unsure, cut);
      own[r].insert(own[r].end(), cut.begin(), cut.end());
    }
  } else if (!unsure.empty())
    for (int32_t r = 0; r < out.rows; ++r)
      for (const Interval &x : unsure) {
        eval.rowIn(t0 + r, x.lo, x.hi, part);
        own[r].insert(own[r].end(), part.begin(), part.end());
      }
  if (bd.exact)
    bd.lower = std::move(bd.upper);
  fillShape(std::move(bd.lower), own, out);
}

void BlockSource::buildTiles(int64_t block, BlockTiles &out, BlockShape &shape, bool classLocal) const {
  auto general = [&] {
    build(block, shape);
    out.expand(shape, classLocal);
    dropSameTags(out);
  };
  if ((!oneInterval_ && common_.empty() && before_.empty()) || rest_ || dense_)
    return general();
  const int64_t t0 = block * R_;
  out.firstRow = t0;
  out.rows = static_cast<int32_t>(std::min(R_, rows_ - t0));
  out.allRows = out.rows == 64 ? ~uint64_t{0} : ((uint64_t{1} << out.rows) - 1);
  // Each row's ends (a fallback's row without B where A has a key), the
  // rows in the order of their first keys (a sliding set's already are).
  int64_t lo[64], hi[64];
  int32_t byLo[64], used = 0;
  const ir::SetNode &ends = ends_ ? *ends_ : *set_;
  auto anyBefore = [&](int64_t i) {
    for (const ClassBefore &c : before_)
      if (c.classes->order[static_cast<size_t>(c.classes->classBegin[static_cast<size_t>(i)])] <= i + c.hi)
        return true;
    return false;
  };
  for (int32_t r = 0; r < out.rows; ++r) {
    int64_t a = 0, b = n_;
    if (!before_.empty() && anyBefore(t0 + r))
      b = 0;
    else
      ir::narrowToRow(ends, t0 + r, n_, a, b);
    lo[r] = a;
    hi[r] = b;
    if (a < b)
      byLo[used++] = r;
  }
  if (!std::is_sorted(byLo, byLo + used, [&](int32_t x, int32_t y) { return lo[x] < lo[y]; }))
    std::sort(byLo, byLo + used, [&](int32_t x, int32_t y) { return lo[x] < lo[y]; });
  // The keys: the union of the rows' intervals, then with (or less) the sets
  // common to the block's rows, evaluated once inside the rows' span. Row r
  // has exactly the keys inside its own interval.
  thread_local IntervalSet keys, part, tmp;
  keys.clear();
  for (int32_t x = 0; x < used; ++x) {
    const int32_t r = byLo[x];
    if (!keys.empty() && lo[r] <= keys.back().hi)
      keys.back().hi = std::max(keys.back().hi, hi[r]);
    else
      keys.push_back({lo[r], hi[r]});
  }
  if (!common_.empty() && !keys.empty()) {
    const int64_t last = t0 + out.rows - 1;
    auto sameOnRows = [&](const auto &c) { return ir::sameKeysOnRows(*c->set(), t0, last); };
    if (!std::all_of(common_.begin(), common_.end(), sameOnRows))
      return general(); // (rows of two query blocks)
    const int64_t from = keys.front().lo, to = keys.back().hi;
    for (const auto &c : common_) {
      c->rowIn(t0, from, to, part);
      if (commonMinus_)
        subtractInto(keys, part, tmp);
      else
        intersectInto(keys, part, tmp);
      keys.swap(tmp);
    }
  }
  // The keys in order, and the rank of each interval's first one.
  thread_local std::vector<int64_t> rank;
  rank.resize(keys.size() + 1);
  rank[0] = 0;
  for (size_t x = 0; x < keys.size(); ++x)
    rank[x + 1] = rank[x] + keys[x].size();
  out.keys.resize(static_cast<size_t>(rank.back()));
  int32_t *key = out.keys.data();
  for (const Interval &x : keys)
    for (int64_t u = x.lo; u < x.hi; ++u)
      *key++ = static_cast<int32_t>(u);
  // The keys below position p: in few intervals (one or two for a class's
  // segment, one per selected block), found by a search over them.
  auto rankOf = [&](int64_t p) {
    const size_t x = static_cast<size_t>(
        std::upper_bound(keys.begin(), keys.end(), p, [](int64_t v, const Interval &iv) { return v < iv.hi; }) -
        keys.begin());
    return x == keys.size() ? rank[x] : rank[x] + std::max<int64_t>(0, p - keys[x].lo);
  };
  // Row r's bit flips at the ranks of its ends; the masks are the running XOR.
  out.masks.assign(out.keys.size() + 1, 0);
  for (int32_t x = 0; x < used; ++x) {
    const int32_t r = byLo[x];
    out.masks[static_cast<size_t>(rankOf(lo[r]))] ^= uint64_t{1} << r;
    out.masks[static_cast<size_t>(rankOf(hi[r]))] ^= uint64_t{1} << r;
  }
  uint64_t running = 0;
  for (uint64_t &m : out.masks)
    m = running ^= m;
  out.masks.pop_back();
  dropSameTags(out);
}

void BlockSource::dropSameTags(BlockTiles &block) const {
  // The rows' mask of each tag, indexed by the tag (a position of the other
  // input's order, so below n): one lookup per key instead of a compare per
  // row; cleared again for the next block.
  thread_local std::vector<uint64_t> rowsOf;
  for (const auto &tags : distinct_) {
    const int32_t *tag = tags->data(), *rowTag = tag + block.firstRow;
    if (rowsOf.size() < tags->size())
      rowsOf.resize(tags->size(), 0);
    for (int32_t r = 0; r < block.rows; ++r)
      rowsOf[static_cast<size_t>(rowTag[r])] |= uint64_t{1} << r;
    for (size_t c = 0; c < block.keys.size(); ++c)
      block.masks[c] &= ~rowsOf[static_cast<size_t>(tag[block.keys[c]])];
    for (int32_t r = 0; r < block.rows; ++r)
      rowsOf[static_cast<size_t>(rowTag[r])] = 0;
  }
}

size_t BlockShape::bytes() const {
  return sizeof(BlockShape) + keys.size() * sizeof(KeyRun) + partial.size() * sizeof(partial[0]);
}

void BlockShape::mapKeys(const int32_t *order) {
  // Key k of the block's list is at position at[k]; `sorted` lists the k
  // by position: over a bitmap of the positions' span where that is at most
  // 64 times the keys (a window's patch: one pass, a word per 64
  // positions), else by a sort.
  std::vector<int32_t> at;
  at.reserve(static_cast<size_t>(numKeys()));
  for (const KeyRun &x : keys)
    for (int64_t k = 0, lo = x.lo; k < x.count; ++k, lo += x.period)
      for (int64_t u = lo; u < lo + x.len; ++u)
        at.push_back(order[keyBase + u * keyStride]);
  if (at.empty())
    return;
  const auto [lowest, highest] = std::minmax_element(at.begin(), at.end());
  const int64_t first = *lowest, span = int64_t{*highest} - first + 1;
  std::vector<int32_t> sorted;
  sorted.reserve(at.size());
  if (span <= 64 * static_cast<int64_t>(at.size())) {
    std::vector<uint64_t> present(static_cast<size_t>((span + 63) / 64));
    std::vector<int32_t> keyAt(static_cast<size_t>(span));
    for (size_t k = 0; k < at.size(); ++k) {
      const int64_t x = at[k] - first;
      present[static_cast<size_t>(x / 64)] |= uint64_t{1} << (x % 64);
      keyAt[static_cast<size_t>(x)] = static_cast<int32_t>(k);
    }
    for (size_t w = 0; w < present.size(); ++w)
      for (uint64_t bits = present[w]; bits; bits &= bits - 1)
        sorted.push_back(keyAt[64 * w + static_cast<size_t>(std::countr_zero(bits))]);
  } else {
    sorted.resize(at.size());
    std::iota(sorted.begin(), sorted.end(), 0);
    std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return at[static_cast<size_t>(a)] < at[static_cast<size_t>(b)]; });
  }
  IntervalSet runs;
  for (const int32_t k : sorted) {
    const int64_t position = at[static_cast<size_t>(k)];
    if (!runs.empty() && runs.back().hi == position)
      ++runs.back().hi;
    else
      runs.push_back({position, position + 1});
  }
  keys = compressRuns(runs);
  keyBase = 0;
  keyStride = 1;
  if (partial.empty())
    return;
  std::vector<uint64_t> maskOf(at.size(), allRows);
  for (const auto &[index, mask] : partial)
    maskOf[static_cast<size_t>(index)] = mask;
  partial.clear();
  for (size_t k = 0; k < sorted.size(); ++k)
    if (const uint64_t mask = maskOf[static_cast<size_t>(sorted[k])]; mask != allRows)
      partial.emplace_back(static_cast<int32_t>(k), mask);
}

KeyRuns compressRuns(const IntervalSet &s) {
  KeyRuns out;
  for (size_t k = 0; k < s.size();) {
    KeyRun run{s[k].lo, s[k].size(), 0, 1};
    if (k + 1 < s.size() && s[k + 1].size() == run.len) {
      run.period = s[k + 1].lo - s[k].lo;
      while (k + run.count < s.size() && s[k + run.count].size() == run.len &&
             s[k + run.count].lo - s[k + run.count - 1].lo == run.period)
        ++run.count;
    }
    out.push_back(run);
    k += static_cast<size_t>(run.count);
  }
  return out;
}

int64_t cardinality(const KeyRuns &runs) {
  int64_t total = 0;
  for (const KeyRun &x : runs)
    total += x.len * x.count;
  return total;
}

void BlockTiles::expand(const BlockShape &shape, bool classLocal) {
  firstRow = shape.firstRow;
  rows = shape.rows;
  allRows = shape.allRows;
  keys.resize(static_cast<size_t>(shape.numKeys()));
  int32_t *dst = keys.data();
  const int64_t base = classLocal ? 0 : shape.keyBase, stride = classLocal ? 1 : shape.keyStride;
  for (const KeyRun &x : shape.keys)
    for (int64_t k = 0, lo = x.lo; k < x.count; ++k, lo += x.period)
      for (int64_t u = lo; u < lo + x.len; ++u)
        *dst++ = static_cast<int32_t>(base + u * stride);
  masks.assign(keys.size(), allRows);
  for (const auto &[pos, mask] : shape.partial)
    masks[static_cast<size_t>(pos)] = mask;
}

void BlockTiles::assignRange(const BlockTiles &all, size_t begin, size_t end) {
  firstRow = all.firstRow;
  rows = all.rows;
  allRows = all.allRows;
  const auto b = static_cast<std::ptrdiff_t>(begin), e = static_cast<std::ptrdiff_t>(end);
  keys.assign(all.keys.begin() + b, all.keys.begin() + e);
  masks.assign(all.masks.begin() + b, all.masks.begin() + e);
}

int64_t numClasses(const Piece &piece, int64_t n) {
  return piece.strategy == Strategy::ResidueRelayout ? std::min(piece.modulus, n) : 1;
}

int64_t classRows(const Piece &piece, int64_t n, int64_t c) {
  return (n - c + piece.modulus - 1) / piece.modulus;
}

int64_t keyClass(const Piece &piece, int64_t c) { return floorMod(c - piece.residue, piece.modulus); }

namespace {

/// Adds one block's pairs and tiles to `st` (tiles of C keys, as the executor cuts them).
void countBlock(const BlockShape &b, int64_t C, PieceStats &st) {
  st.useful += b.useful;
  st.bytes += static_cast<int64_t>(b.bytes());
  ++st.blocks;
  const int64_t keys = b.numKeys();
  st.tiles += (keys + C - 1) / C;
  st.executed += int64_t{b.rows} * keys;
  int64_t lastTile = -1;
  for (const auto &entry : b.partial)
    if (entry.first / C != lastTile) {
      lastTile = entry.first / C;
      ++st.partial;
    }
}

/// countBlock of a block's expanded masks (bytes: what its masks take).
void countTiles(const BlockTiles &b, int64_t C, PieceStats &st) {
  ++st.blocks;
  const int64_t keys = static_cast<int64_t>(b.keys.size());
  st.bytes += static_cast<int64_t>(sizeof(BlockTiles) + b.keys.size() * (sizeof(int32_t) + sizeof(uint64_t)));
  st.tiles += (keys + C - 1) / C;
  st.executed += int64_t{b.rows} * keys;
  for (int64_t c0 = 0; c0 < keys; c0 += C) {
    bool partial = false;
    for (int64_t c = c0; c < std::min(keys, c0 + C); ++c) {
      st.useful += std::popcount(b.masks[static_cast<size_t>(c)]);
      partial |= b.masks[static_cast<size_t>(c)] != b.allRows;
    }
    st.partial += partial;
  }
}

void addUp(HeadStats &h) {
  for (const PieceStats &p : h.pieces) {
    h.useful += p.useful;
    h.executed += p.executed;
  }
}

/// Calls fn(piece, class, source) for every block source of a head: each
/// piece and residue class, or the dense baseline's one (piece 0, class 0).
/// Stops and returns false when fn does.
template <class Fn>
bool forEachSource(const Plan &plan, const HeadPlan &hp, int64_t n, bool dense, Fn fn) {
  if (dense)
    return fn(size_t{0}, int64_t{0}, BlockSource::dense(plan, hp, n));
  for (size_t p = 0; p < hp.pieces.size(); ++p)
    for (int64_t c = 0; c < numClasses(hp.pieces[p], n); ++c)
      if (!fn(p, c, BlockSource(plan, hp.pieces[p], n, c)))
        return false;
  return true;
}

std::vector<HeadStats> stats(const Plan &plan, int64_t n, bool dense) {
  std::vector<HeadStats> out;
  BlockShape b;
  BlockTiles tiles;
  for (const HeadPlan &hp : plan.heads) {
    HeadStats &h = out.emplace_back();
    h.pieces.resize(dense ? 1 : hp.pieces.size());
    forEachSource(plan, hp, n, dense, [&](size_t p, int64_t, const BlockSource &src) {
      // Pairs of keys another input's class already holds are dropped from the masks only (distinctTags).
      const bool tagged = !dense && !hp.pieces[p].distinctTags.empty();
      for (int64_t k = 0; k < src.numBlocks(); ++k) {
        if (!tagged) {
          src.build(k, b);
          countBlock(b, plan.options.tileCols, h.pieces[p]);
          continue;
        }
        src.buildTiles(k, tiles, b, false);
        countTiles(tiles, plan.options.tileCols, h.pieces[p]);
      }
      if (!dense && rowwisePiece(*hp.pieces[p].set)) { // run row by row over each row's own keys: no tiles
        PieceStats &st = h.pieces[p];
        st.executed = st.useful;
        st.tiles = st.partial = 0;
      }
      return true;
    });
    addUp(h);
  }
  return out;
}

} // namespace

std::vector<HeadStats> planStats(const Plan &plan, int64_t n) { return stats(plan, n, false); }

std::vector<HeadStats> denseStats(const Plan &plan, int64_t n) { return stats(plan, n, true); }

bool buildShapes(const Plan &plan, int64_t n, bool dense, size_t maxBytes,
                 std::vector<HeadShapes> &out, int threads, const int32_t *keyOrder) {
  // Lay out every source's blocks first, then generate them on `threads` threads.
  struct Job {
    size_t head, piece, cls;
    BlockSource src;
  };
  std::vector<Job> jobs;
  out.clear();
  for (const HeadPlan &hp : plan.heads) {
    HeadShapes &h = out.emplace_back();
    h.pieces.resize(dense ? 1 : hp.pieces.size());
    forEachSource(plan, hp, n, dense, [&](size_t p, int64_t, const BlockSource &src) {
      h.pieces[p].emplace_back(static_cast<size_t>(src.numBlocks()));
      jobs.push_back({out.size() - 1, p, h.pieces[p].size() - 1, src});
      return true;
    });
  }
  std::vector<std::pair<std::vector<BlockShape> *, const BlockSource *>> work;
  for (const Job &j : jobs)
    work.push_back({&out[j.head].pieces[j.piece][j.cls], &j.src});
  std::vector<std::pair<size_t, int64_t>> blocks; // (work item, block)
  for (size_t w = 0; w < work.size(); ++w)
    for (int64_t k = 0; k < work[w].second->numBlocks(); ++k)
      blocks.push_back({w, k});
  std::atomic<size_t> bytes{0};
  std::atomic<bool> over{false};
  constexpr size_t kChunk = 32; // (consecutive blocks on one thread: it moves most of them, buildMoved)
  const int64_t chunks = static_cast<int64_t>((blocks.size() + kChunk - 1) / kChunk);
  const int workers = static_cast<int>(
      std::min<int64_t>(support::resolveThreads(threads), static_cast<int64_t>(blocks.size() / 256 + 1)));
  support::parallelFor(chunks, workers, [&](int, int64_t chunk) {
    const size_t first = static_cast<size_t>(chunk) * kChunk;
    for (size_t x = first; x < std::min(first + kChunk, blocks.size()) && !over; ++x) {
      auto [w, k] = blocks[x];
      BlockShape &shape = (*work[w].first)[static_cast<size_t>(k)];
      work[w].second->build(k, shape);
      shape.partial.shrink_to_fit(); // kept for every run at this n: no slack
      if (bytes.fetch_add(shape.bytes()) + shape.bytes() > maxBytes)
        over = true;
    }
  });
  if (over) {
    out.clear();
    return false;
  }
  if (keyOrder) // (apart: a thread moves the block it built before, in its own order)
    support::parallelFor(chunks, workers, [&](int, int64_t chunk) {
      const size_t first = static_cast<size_t>(chunk) * kChunk;
      for (size_t x = first; x < std::min(first + kChunk, blocks.size()); ++x)
        (*work[blocks[x].first].first)[static_cast<size_t>(blocks[x].second)].mapKeys(keyOrder);
    });
  return true;
}

double executedOverUseful(const std::vector<HeadStats> &stats) {
  int64_t useful = 0, executed = 0;
  for (const HeadStats &h : stats) {
    useful += h.useful;
    executed += h.executed;
  }
  return useful ? double(executed) / double(useful) : 1.0;
}

namespace {
/// The width W of the canvas whose column `(j / 1) % W` a set's coordinate
/// ranges read; 0 when none does, or two read different widths.
int64_t canvasWidth(const ir::SetNode &s) {
  int64_t width = s.kind == ir::Gen::CoordRange && s.keyBlock == 1 ? s.modulus : 0;
  for (const ir::SetRef &c : s.children) {
    const int64_t w = canvasWidth(*c);
    if (w && width && w != width)
      return -1;
    width = width ? width : w;
  }
  return width;
}

int64_t executedPairs(const std::vector<HeadStats> &stats) {
  int64_t total = 0;
  for (const HeadStats &h : stats)
    total += h.executed;
  return total;
}
} // namespace

namespace {
/// The positions [0, length) grouped by their rows' keys in every piece of
/// every head (equal keys together, the groups in the order of their first
/// position, positions ascending inside a group), or null when fewer than
/// 4 positions share their keys on average; `groups` gets their count.
std::shared_ptr<InputArray> equalRowsOrder(const Plan &plan, int64_t length, int64_t &groups) {
  // Rows whose bounds have equal values have equal keys: where the values
  // decide every piece's keys they are compared (a Swin window's), else the
  // rows themselves.
  std::vector<ir::BoundValues> bounds;
  for (const HeadPlan &hp : plan.heads)
    for (const Piece &piece : hp.pieces)
      bounds.emplace_back(*piece.set);
  const bool byValues =
      std::all_of(bounds.begin(), bounds.end(), [](const ir::BoundValues &b) { return b.decide(); });
  std::vector<ir::RowEvaluator> evals;
  if (!byValues)
    for (const HeadPlan &hp : plan.heads)
      for (const Piece &piece : hp.pieces)
        evals.emplace_back(piece.set, length);
  // Each row's keys as one list of ends, hashed; a bucket keeps each group's
  // list and first position (equal hashes are compared).
  std::unordered_map<uint64_t, std::vector<std::pair<std::vector<int64_t>, int64_t>>> seen;
  std::vector<int64_t> groupOf(static_cast<size_t>(length));
  std::vector<int64_t> ends;
  IntervalSet row;
  groups = 0;
  for (int64_t p = 0; p < length; ++p) {
    ends.clear();
    if (byValues)
      for (const ir::BoundValues &b : bounds)
        b.append(p, length, ends);
    else
      for (const ir::RowEvaluator &e : evals) {
        e.row(p, 0, length, row);
        for (const Interval &x : row) {
          ends.push_back(x.lo);
          ends.push_back(x.hi);
        }
        ends.push_back(-1); // (the next piece's)
      }
    uint64_t hash = 0;
    for (int64_t v : ends)
      hash = (hash ^ static_cast<uint64_t>(v)) * 0x9E3779B97F4A7C15ull;
    auto &bucket = seen[hash];
    auto it = std::find_if(bucket.begin(), bucket.end(), [&](const auto &g) { return g.first == ends; });
    if (it == bucket.end()) {
      if (4 * ++groups > length)
        return nullptr;
      bucket.emplace_back(ends, p);
      groupOf[static_cast<size_t>(p)] = p;
    } else {
      groupOf[static_cast<size_t>(p)] = it->second;
    }
  }
  std::vector<int64_t> byGroup(static_cast<size_t>(length));
  std::iota(byGroup.begin(), byGroup.end(), 0);
  std::stable_sort(byGroup.begin(), byGroup.end(), [&](int64_t a, int64_t b) {
    return groupOf[static_cast<size_t>(a)] < groupOf[static_cast<size_t>(b)];
  });
  auto order = std::make_shared<InputArray>();
  order->name = "(equal rows)";
  order->bound = true;
  order->rows = length;
  order->values.resize(static_cast<size_t>(length));
  for (int64_t r = 0; r < length; ++r)
    order->values[static_cast<size_t>(byGroup[static_cast<size_t>(r)])] = static_cast<int32_t>(r);
  order->indexClasses();
  return order;
}

Plan permuted(const Plan &plan, const std::shared_ptr<const InputArray> &order) {
  Plan out = plan;
  for (HeadPlan &hp : out.heads)
    for (Piece &piece : hp.pieces)
      piece = permutePiece(piece, order);
  return out;
}
} // namespace

namespace {
/// The width of the one canvas every piece of `plan` reads (row tiles, no
/// data), 0 for none; `fixed`: no set depends on n.
int64_t planCanvas(const Plan &plan, bool &fixed) {
  int64_t width = 0;
  fixed = true;
  for (const HeadPlan &hp : plan.heads)
    for (const Piece &piece : hp.pieces) {
      const int64_t w = canvasWidth(*piece.set);
      if (piece.strategy != Strategy::RowTiles || ir::readsData(*piece.set) || w <= 0 || (width && w != width))
        return 0;
      width = w;
      fixed = fixed && !ir::dependsOnLength(*piece.set);
    }
  return width;
}
} // namespace

bool narrowsOnACanvas(const Plan &plan) {
  bool fixed;
  return plan.options.tileRows == 32 && planCanvas(plan, fixed) > 0;
}

std::optional<Layout> tiledLayout(const Plan &plan, int64_t n, bool narrowBlocks) {
  bool fixed; // (sets that do not depend on n: their work per canvas row is n's at fewer rows)
  const int64_t width = planCanvas(plan, fixed);
  if (width <= 0 || n % width != 0 || n >= (int64_t{1} << 31))
    return std::nullopt;
  const int64_t height = n / width;
  // Counted on a canvas of at most 32 rows (the edges and the middle of a
  // taller one alike): the choice costs a fraction of the blocks at n.
  constexpr int64_t kReferenceRows = 32;
  const int64_t reference = fixed && height > kReferenceRows ? width * kReferenceRows : n;
  // The first of `shapes` (tile rows x columns) whose tiles cut the canvas
  // and make plan p execute at most 3/4 of raster order's pairs (`raster`,
  // counted once) and at most `most`, counted on the reference canvas;
  // built at n.
  auto tilesOf = [&](const Plan &p, std::initializer_list<std::pair<int64_t, int64_t>> shapes,
                     std::optional<int64_t> &raster, int64_t most) -> std::optional<Layout> {
    for (const auto &[rows, cols] : shapes) {
      // (Tiles as wide as the canvas would be its raster order.)
      if (height % rows != 0 || width % cols != 0 || width < 2 * cols)
        continue;
      Layout layout;
      layout.width = width;
      layout.tileRows = rows;
      layout.tileCols = cols;
      auto tiledPlan = [&](int64_t length) {
        // Each position's rank in the tiled order: tiles in raster order, the
        // positions of a tile row by row.
        auto order = std::make_shared<InputArray>();
        order->name = "(tiles)";
        order->bound = true;
        order->rows = length;
        order->values.resize(static_cast<size_t>(length));
        const int64_t across = width / cols;
        for (int64_t q = 0; q < length; ++q) {
          const int64_t r = q / width, c = q % width;
          order->values[static_cast<size_t>(q)] =
              ((r / rows) * across + c / cols) * rows * cols + (r % rows) * cols + c % cols;
        }
        order->indexClasses();
        order->canvasWidth = width;
        order->tileRows = rows;
        order->tileCols = cols;
        return std::make_pair(std::shared_ptr<const InputArray>(order), permuted(p, order));
      };
      if (!raster)
        raster = executedPairs(planStats(p, reference));
      layout.rasterExecuted = *raster;
      auto [refOrder, refPlan] = tiledPlan(reference);
      layout.executed = executedPairs(planStats(refPlan, reference));
      if (4 * layout.executed > 3 * layout.rasterExecuted || layout.executed > most)
        continue;
      if (reference == n) {
        layout.order = refOrder;
        layout.plan = std::move(refPlan);
      } else {
        std::tie(layout.order, layout.plan) = tiledPlan(n);
      }
      return layout;
    }
    return std::nullopt;
  };
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  std::optional<int64_t> raster;
  // (A block of 16 rows or fewer is a 4 x 4 patch in tiles of 4 x 4, a strip
  // of two canvas rows in wider ones.)
  std::optional<Layout> tiles = plan.options.tileRows <= 16 ? tilesOf(plan, {{4, 4}, {8, 8}, {4, 8}}, raster, kAny)
                                                            : tilesOf(plan, {{8, 8}, {4, 8}}, raster, kAny);
  // Queries with equal keys together, where they execute fewer pairs than
  // the tiles (or than 3/4 of raster order's, without tiles).
  int64_t groups = 0;
  if (std::shared_ptr<const InputArray> refOrder = equalRowsOrder(plan, reference, groups)) {
    if (!raster)
      raster = executedPairs(planStats(plan, reference));
    Layout layout;
    layout.width = width;
    layout.rasterExecuted = *raster;
    Plan refPlan = permuted(plan, refOrder);
    layout.executed = executedPairs(planStats(refPlan, reference));
    if (4 * layout.executed <= 3 * layout.rasterExecuted && (!tiles || layout.executed < tiles->executed)) {
      layout.groups = groups;
      if (reference == n) {
        layout.order = std::move(refOrder);
        layout.plan = std::move(refPlan);
      } else if (std::shared_ptr<const InputArray> order = equalRowsOrder(plan, n, layout.groups)) {
        layout.order = order;
        layout.plan = permuted(plan, order);
      } else {
        return tiles;
      }
      return layout;
    }
  }
  // A forward pass of 32-row blocks in tiles takes blocks of 16 rows, each a
  // 4 x 4 patch of the canvas, where those execute at most kNarrowWork of the
  // pairs: a patch's keys are the union of 16 windows, a 32-row block's of
  // 32 in a strip twice as wide.
  constexpr double kNarrowWork = 0.85;
  if (narrowBlocks && tiles && plan.options.tileRows == 32) {
    // In tiles of 128 keys or more: a 7 x 7 patch's 100 keys one tile (two of
    // 64 cost a second pass of the softmax's corrections; NATTEN 7 x 7 on
    // 64 x 64 about 10% faster, 13 x 13's 256 keys 4%; 256 no faster).
    constexpr int64_t kNarrowCols = 128;
    Plan narrow = plan;
    narrow.options.tileRows = 16;
    narrow.options.tileCols = std::max(plan.options.tileCols, kNarrowCols);
    std::optional<int64_t> narrowRaster;
    if (std::optional<Layout> patches = tilesOf(narrow, {{4, 4}}, narrowRaster,
                                                static_cast<int64_t>(kNarrowWork * double(tiles->executed))))
      return patches;
  }
  return tiles;
}

std::string printPlan(const Plan &plan, int64_t n) {
  std::ostringstream os;
  os << "plan " << plan.pattern << " tiles=" << plan.options.tileRows << "x" << plan.options.tileCols
     << "\n";
  std::vector<HeadStats> stats;
  if (n > 0)
    stats = planStats(plan, n);
  for (size_t h = 0; h < plan.heads.size(); ++h) {
    const HeadPlan &hp = plan.heads[h];
    os << "head";
    for (int64_t k : hp.heads)
      os << " " << k;
    os << ": " << hp.pieces.size() << (hp.pieces.size() == 1 ? " piece" : " disjoint pieces")
       << ", merged by log-sum-exp (one online-softmax state per row)\n";
    for (size_t p = 0; p < hp.pieces.size(); ++p) {
      const Piece &piece = hp.pieces[p];
      const bool rowwise = rowwisePiece(*piece.set);
      os << "  piece " << p << ": " << (rowwise ? "rows" : strategyName(piece.strategy));
      if (piece.strategy == Strategy::ResidueRelayout)
        os << " m=" << piece.modulus << " r=" << piece.residue
           << " (gather rows and keys by class i % " << piece.modulus
           << ": the piece becomes a dense band per class, then scatter back)";
      else if (rowwise)
        os << " (one by one, each over its own keys: selected tokens)";
      else
        os << " (row blocks of " << plan.options.tileRows << ", the block's keys compacted, chunks of "
           << plan.options.tileCols << ")";
      if (const int64_t refs = referenceBlocks(plan, piece)) {
        os << "\n    translation period " << piece.period << ": full blocks are " << refs << " reference block"
           << (refs == 1 ? "" : "s") << " moved along the diagonal";
      }
      if (n > 0) {
        const PieceStats &st = stats[h].pieces[p];
        int64_t useful = st.useful, executed = st.executed, tiles = st.tiles, partial = st.partial;
        char buf[160];
        std::snprintf(buf, sizeof buf, "\n    at n=%lld: useful %lld, executed %lld (%.3fx), tiles %lld (%lld partial)",
                      static_cast<long long>(n), static_cast<long long>(useful),
                      static_cast<long long>(executed), useful ? double(executed) / double(useful) : 1.0,
                      static_cast<long long>(tiles), static_cast<long long>(partial));
        os << buf;
      }
      os << "\n" << ir::printSet(*piece.set, {}, 4);
    }
    if (n > 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "  total at n=%lld: executed/useful = %.3f\n",
                    static_cast<long long>(n),
                    stats[h].useful ? double(stats[h].executed) / double(stats[h].useful) : 1.0);
      os << buf;
    }
  }
  if (n > 0)
    if (const std::optional<Layout> layout = tiledLayout(plan, n, true)) {
      int64_t useful = 0, raster = 0; // (raster order's: the stats above)
      for (const HeadStats &h : stats) {
        useful += h.useful;
        raster += h.executed;
      }
      const int64_t executed = executedPairs(planStats(layout->plan, n));
      char buf[256];
      char how[128];
      if (layout->tileRows == 0)
        std::snprintf(how, sizeof how, "grouped by equal keys, %lld groups", static_cast<long long>(layout->groups));
      else if (layout->plan.options.tileRows != plan.options.tileRows) // (narrower blocks: tiledLayout)
        std::snprintf(how, sizeof how, "in tiles of %lld x %lld of a canvas %lld wide, row blocks of %lld, chunks of %lld",
                      static_cast<long long>(layout->tileRows), static_cast<long long>(layout->tileCols),
                      static_cast<long long>(layout->width), static_cast<long long>(layout->plan.options.tileRows),
                      static_cast<long long>(layout->plan.options.tileCols));
      else
        std::snprintf(how, sizeof how, "in tiles of %lld x %lld of a canvas %lld wide",
                      static_cast<long long>(layout->tileRows), static_cast<long long>(layout->tileCols),
                      static_cast<long long>(layout->width));
      std::snprintf(buf, sizeof buf,
                    "layout at n=%lld: tokens %s (rows and keys in that order, in place): executed/useful = %.3f "
                    "(raster order %.3f)\n",
                    static_cast<long long>(n), how, useful ? double(executed) / double(useful) : 1.0,
                    useful ? double(raster) / double(useful) : 1.0);
      os << buf;
    }
  return os.str();
}

std::string formatTunedTiles(const TunedTiles &tiles) {
  std::string out;
  for (const auto &[d, t] : tiles)
    out += (out.empty() ? "" : ",") + std::to_string(d) + ":" + std::to_string(t.tileRows) + "x" +
           std::to_string(t.tileCols);
  return out;
}

bool parseTunedTiles(const std::string &text, TunedTiles &out) {
  out.clear();
  if (!text.empty() && text.back() == ',')
    return false;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    long long d = 0, rows = 0, cols = 0;
    int used = 0;
    if (std::sscanf(item.c_str(), "%lld:%lldx%lld%n", &d, &rows, &cols, &used) != 3 ||
        used != static_cast<int>(item.size()) || d < 1 || rows < 1 || rows > 64 || cols < 1 || cols > 4096)
      return false;
    out.push_back({d, PlanOptions{rows, cols}});
  }
  return true;
}

} // namespace attnc::plan
