//===- RowEvaluator.cpp - Closed-form key sets for a bound length ---------===//
#include "attnc/plan/RowEvaluator.h"

#include "PredicateLanes.h"

#include "attnc/plan/Generators.h"
#include "attnc/plan/Inputs.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <unordered_set>

namespace attnc::ir {

namespace {
void compilePredicates(const SetNode &s, std::vector<std::pair<const SetNode *, PredicateLanes>> &out) {
  if (s.kind == Gen::Predicate && s.cond) {
    PredicateLanes lanes(*s.cond);
    if (lanes.ok())
      out.emplace_back(&s, std::move(lanes));
  }
  for (const SetRef &c : s.children)
    compilePredicates(*c, out);
}
/// The nodes of the terms of `s`'s range bounds: `visits` as evalInt walks
/// them, `distinct` of them (`seen`), each counted once.
void countBoundNodes(const Term &t, std::unordered_set<const Term *> &seen, int64_t &visits) {
  ++visits;
  if (t.args().empty() || !seen.insert(&t).second) {
    if (!t.args().empty()) // (a shared node's subtree: walked again by evalInt)
      for (const TermRef &a : t.args())
        countBoundNodes(*a, seen, visits);
    return;
  }
  for (const TermRef &a : t.args())
    countBoundNodes(*a, seen, visits);
}
void countBoundNodes(const SetNode &s, std::unordered_set<const Term *> &seen, int64_t &visits) {
  if (s.kind == Gen::KeyRange || s.kind == Gen::CoordRange)
    for (const TermRef &t : {s.loTerm, s.hiTerm})
      if (t)
        countBoundNodes(*t, seen, visits);
  for (const SetRef &c : s.children)
    countBoundNodes(*c, seen, visits);
}
/// Whether `s`'s rows depend on the row only through its key and coordinate
/// ranges' bounds, each one of `tape`'s roots: `slots` gets their nodes.
bool tapeDetermined(const SetNode &s, const TermTape &tape, std::vector<int32_t> &slots) {
  switch (s.kind) {
  case Gen::All: case Gen::None: case Gen::Stripe:
    return true;
  case Gen::KeyRange: case Gen::CoordRange:
    for (const TermRef &t : {s.loTerm, s.hiTerm}) {
      if (!t)
        continue;
      const int32_t slot = tape.slotOf(*t);
      if (slot < 0)
        return false;
      if (std::find(slots.begin(), slots.end(), slot) == slots.end())
        slots.push_back(slot);
    }
    return true;
  case Gen::Union: case Gen::Intersect: case Gen::Difference:
    return std::all_of(s.children.begin(), s.children.end(),
                       [&](const SetRef &c) { return tapeDetermined(*c, tape, slots); });
  default:
    return false;
  }
}
/// The bound terms of `s`'s key and coordinate ranges.
void boundTerms(const SetNode &s, std::vector<TermRef> &out) {
  if (s.kind == Gen::KeyRange || s.kind == Gen::CoordRange)
    for (const TermRef &t : {s.loTerm, s.hiTerm})
      if (t)
        out.push_back(t);
  for (const SetRef &c : s.children)
    boundTerms(*c, out);
}
/// `tape` (or, where null, one built from `s`'s bound terms) when the values
/// of those terms decide `s`'s keys, with their nodes in `slots`; else null.
std::shared_ptr<const TermTape> decidingTape(const SetNode &s, std::shared_ptr<const TermTape> tape,
                                             std::vector<int32_t> &slots) {
  if (!tape) {
    std::vector<TermRef> roots;
    boundTerms(s, roots);
    tape = std::make_shared<const TermTape>(roots);
  }
  return tapeDetermined(s, *tape, slots) ? tape : nullptr;
}
} // namespace

std::vector<RowEvaluator::Memoised> RowEvaluator::memoGroups(const SetNode &root, const TermTape &tape) {
  constexpr size_t kMostValues = std::tuple_size<decltype(MemoEntry::values)>::value;
  std::vector<Memoised> groups;
  std::vector<std::vector<char>> inputs; // per group, the tape nodes its bounds are computed from
  for (const SetRef &c : root.children) {
    std::vector<int32_t> slots;
    if (oneIntervalPerRow(*c) || traits(c->kind).perKey || !tapeDetermined(*c, tape, slots) ||
        slots.size() > kMostValues)
      continue;
    groups.push_back({{c.get()}, std::move(slots)});
    inputs.emplace_back(tape.size(), 0);
    for (int32_t slot : groups.back().slots)
      tape.markInputs(slot, inputs.back());
  }
  // Two groups read the same quantity where their inputs meet in a node
  // that not every group reads (the row itself, its tile, do not count).
  auto joined = [&](size_t a, size_t b) {
    for (size_t k = 0; k < tape.size(); ++k)
      if (inputs[a][k] && inputs[b][k] &&
          !std::all_of(inputs.begin(), inputs.end(), [&](const std::vector<char> &x) { return x[k]; }))
        return true;
    return false;
  };
  std::vector<Memoised> merged;
  std::vector<size_t> owner(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    size_t into = merged.size();
    for (size_t h = 0; h < g && into == merged.size(); ++h)
      if (joined(g, h) && merged[owner[h]].slots.size() + groups[g].slots.size() <= kMostValues)
        into = owner[h];
    owner[g] = into;
    if (into == merged.size()) {
      merged.push_back(std::move(groups[g]));
      continue;
    }
    Memoised &m = merged[into];
    m.children.push_back(groups[g].children[0]);
    m.slots.insert(m.slots.end(), groups[g].slots.begin(), groups[g].slots.end());
  }
  if (merged.size() > 64) // (a row's applied groups are bits of a word; the rest evaluated as before)
    merged.resize(64);
  return merged;
}

RowEvaluator::RowEvaluator(SetRef set, int64_t n) : set_(std::move(set)), n_(n) {
  ATTNC_CHECK(n >= 1, "sequence length must be at least 1");
  auto predicates = std::make_shared<std::vector<std::pair<const SetNode *, PredicateLanes>>>();
  compilePredicates(*set_, *predicates);
  if (!predicates->empty())
    predicates_ = std::move(predicates);
  // Each node once per row where evalInt would walk the bounds' nodes 4
  // times over or more: a node's value kept and looked up costs about what
  // computing a small one does. Tiled NATTEN's bounds (380 nodes walked, 48
  // distinct): row blocks at n = 65,536 263 -> 185 ms; natten2d's, swin's
  // and sta3d's (3.0-3.2 times) ran 10% slower with it.
  std::unordered_set<const Term *> seen;
  int64_t visits = 0;
  countBoundNodes(*set_, seen, visits);
  sharedTerms_ = !seen.empty() && visits >= 4 * static_cast<int64_t>(seen.size());
  if (sharedTerms_) {
    std::vector<TermRef> roots;
    boundTerms(*set_, roots);
    auto tape = std::make_shared<const TermTape>(roots);
    if (tape->roots() > 0)
      tape_ = std::move(tape);
  }
  if (set_->kind == Gen::Permuted) {
    // A canvas in tiles: the child's bounds on a tape (its own where the
    // set has none) when they decide its keys, for evalPermuted's cache.
    std::vector<int32_t> slots;
    std::shared_ptr<const TermTape> tape = decidingTape(*set_->children[0], tape_, slots);
    if (tape && !slots.empty() && slots.size() <= std::tuple_size<decltype(MemoEntry::values)>::value) {
      tape_ = std::move(tape);
      permSlots_ = std::move(slots);
    }
  }
  if (tape_ && set_->kind == Gen::Intersect) {
    memo_ = memoGroups(*set_, *tape_);
    groupOf_.assign(set_->children.size(), -1);
    for (size_t m = 0; m < memo_.size(); ++m)
      for (const SetNode *c : memo_[m].children)
        for (size_t k = 0; k < set_->children.size(); ++k)
          if (set_->children[k].get() == c)
            groupOf_[k] = static_cast<int8_t>(m);
  }
  static std::atomic<uint64_t> nextId{1};
  if (!memo_.empty() || !permSlots_.empty())
    id_ = nextId.fetch_add(1, std::memory_order_relaxed);
  if (oneIntervalPerRow(*set_))
    form_ = Form::OneInterval;
  else if (set_->kind == Gen::Difference && oneIntervalPerRow(*set_->children[0]) &&
           oneIntervalPerRow(*set_->children[1]))
    form_ = Form::IntervalMinusInterval;
}

IntervalSet RowEvaluator::row(int64_t i) const { return row(i, 0, n_); }

IntervalSet RowEvaluator::row(int64_t i, int64_t lo, int64_t hi) const {
  IntervalSet out;
  row(i, lo, hi, out);
  return out;
}

void RowEvaluator::row(int64_t i, int64_t lo, int64_t hi, IntervalSet &out) const {
  rowIn(i, std::max<int64_t>(lo, 0), std::min(hi, n_), out);
}

void RowEvaluator::rowIn(int64_t i, int64_t lo, int64_t hi, IntervalSet &out) const {
  std::optional<SharedTermsScope> shared; // (the bounds of a row's ranges share their subterms)
  std::optional<TermTape::Scope> taped;
  if (sharedTerms_)
    shared.emplace();
  if (tape_ && set_->kind != Gen::Permuted) // (a Permuted row's bounds are its query's: evalPermuted)
    taped.emplace(*tape_, Env{i, 0, n_, 0});
  switch (form_) {
  case Form::OneInterval: // the common cases, in closed form
    out.clear();
    narrowToRow(*set_, i, n_, lo, hi, sharedTerms_);
    if (lo < hi)
      out.push_back({lo, hi});
    return;
  case Form::IntervalMinusInterval: { // a window minus a band, say: at most two intervals
    out.clear();
    int64_t cutLo = lo, cutHi = hi;
    narrowToRow(*set_->children[0], i, n_, lo, hi, sharedTerms_);
    narrowToRow(*set_->children[1], i, n_, cutLo, cutHi, sharedTerms_);
    if (cutLo >= cutHi) // nothing to cut out
      cutLo = cutHi = hi;
    if (lo < std::min(hi, cutLo))
      out.push_back({lo, std::min(hi, cutLo)});
    if (std::max(lo, cutHi) < hi)
      out.push_back({std::max(lo, cutHi), hi});
    return;
  }
  case Form::General:
    break;
  }
  eval(*set_, i, lo, hi, out, topFrame(taped ? &*taped : nullptr));
}

namespace {
/// Appends key k (at least the last one's end) to a sorted set, joining it
/// to an interval that ends at k.
inline void appendKey(IntervalSet &out, int64_t k) {
  if (!out.empty() && out.back().hi == k)
    ++out.back().hi;
  else
    out.push_back({k, k + 1});
}

} // namespace

/// Intermediate sets of the evaluation, two per level of the set's tree:
/// kept per thread so that evaluating rows in a loop allocates nothing once
/// they have grown.
RowEvaluator::Frame RowEvaluator::topFrame(const TermTape::Scope *tape) {
  thread_local Level top;
  return {&top, tape};
}

int64_t RowEvaluator::boundAt(const Term &t, int64_t i, Frame f) const {
  int64_t value;
  if (f.tape->lookup(t, value))
    return value;
  return evalIntShared(t, Env{i, 0, n_, 0});
}

RowEvaluator::MemoEntry *RowEvaluator::cached(const std::vector<int32_t> &slots, size_t region, int64_t lo,
                                              int64_t hi, Frame f, bool &hit) const {
  static_assert((kMemoWays & (kMemoWays - 1)) == 0, "a power of two");
  decltype(MemoEntry::values) values{};
  uint64_t hash = 0;
  for (size_t k = 0; k < slots.size(); ++k) {
    values[k] = f.tape->at(slots[k]);
    hash = (hash ^ static_cast<uint64_t>(values[k])) * 0x9E3779B97F4A7C15ull;
  }
  std::vector<MemoEntry> &cache = f.here->memo;
  if (cache.size() < (region + 1) * kMemoWays)
    cache.resize((region + 1) * kMemoWays);
  MemoEntry &e = cache[region * kMemoWays + ((hash >> 32) & (kMemoWays - 1))];
  hit = e.owner == id_ && e.values == values && e.lo <= lo && hi <= e.hi;
  if (!hit) { // (the caller fills its keys)
    e.owner = id_;
    e.values = values;
    e.lo = lo;
    e.hi = hi;
  }
  return &e;
}

const IntervalSet &RowEvaluator::memoised(size_t m, int64_t i, int64_t lo, int64_t hi, Frame f) const {
  const Memoised &c = memo_[m];
  bool hit;
  MemoEntry &e = *cached(c.slots, m, lo, hi, f, hit);
  if (hit)
    return e.keys; // (a superset of the window's keys: the caller intersects)
  IntervalSet &part = f.set(0), &next = f.set(1);
  eval(*c.children[0], i, lo, hi, e.keys, f.below());
  for (size_t k = 1; k < c.children.size() && !e.keys.empty(); ++k) {
    eval(*c.children[k], i, e.keys.front().lo, e.keys.back().hi, part, f.below());
    intersectInto(e.keys, part, next);
    e.keys.swap(next);
  }
  return e.keys;
}

void RowEvaluator::evalIntersect(const SetNode &s, int64_t i, int64_t lo, int64_t hi,
                                 IntervalSet &out, Frame f) const {
  const CostOrder order(s);
  IntervalSet &part = f.set(0), &next = f.set(1);
  out.assign(1, {lo, hi});
  // The root's memoised children, each over the window the cheaper
  // children leave (the same for the rows of a block that share a window:
  // not narrowed by the other memoised ones, which differ row to row).
  const bool memo = &s == set_.get() && f.tape && !memo_.empty();
  int64_t windowLo = 0, windowHi = -1;
  uint64_t applied = 0; // the memoised groups met so far, each applied whole at its first child
  for (size_t k = 0; k < order.size() && !out.empty(); ++k) {
    const SetNode *c = order[k].get();
    if (memo) {
      const int8_t m = groupOf_[static_cast<size_t>(&order[k] - s.children.data())];
      if (m >= 0) {
        if (applied >> m & 1)
          continue;
        applied |= uint64_t{1} << m;
        if (windowHi < windowLo) {
          windowLo = out.front().lo;
          windowHi = out.back().hi;
        }
        const IntervalSet &keys = memoised(m, i, windowLo, windowHi, f);
        intersectInto(out, keys, next);
        out.swap(next);
        continue;
      }
    }
    if (traits(c->kind).perKey) {
      // Examine only the keys that survived so far.
      next.clear();
      for (const Interval &x : out) {
        eval(*c, i, x.lo, x.hi, part, f.below());
        next.insert(next.end(), part.begin(), part.end());
      }
      out.swap(next);
      continue;
    }
    eval(*c, i, out.front().lo, out.back().hi, part, f.below());
    if (out.size() == 1) { // (the child's keys lie inside out's one interval: they are the intersection)
      out.swap(part);
      continue;
    }
    intersectInto(out, part, next);
    out.swap(next);
  }
}

const PredicateLanes *RowEvaluator::lanesOf(const SetNode &s) const {
  if (predicates_)
    for (const auto &[node, lanes] : *predicates_)
      if (node == &s)
        return &lanes;
  return nullptr;
}

namespace {
/// An equality class among an intersection's children whose other children
/// are each one interval per row (or the class alone), or null.
const SetNode *classWithIntervals(const SetNode &s) {
  if (s.kind == Gen::Class)
    return &s;
  if (s.kind != Gen::Intersect)
    return nullptr;
  const SetNode *cls = nullptr;
  for (const SetRef &c : s.children) {
    if (c->kind == Gen::Class && !cls)
      cls = c.get();
    else if (!oneIntervalPerRow(*c))
      return nullptr;
  }
  return cls;
}
} // namespace

bool RowEvaluator::anyIn(const SetNode &s, int64_t i, int64_t lo, int64_t hi, Frame f) const {
  if (lo >= hi)
    return false;
  if (traits(s.kind).oneInterval) {
    narrowToRow(s, i, n_, lo, hi, sharedTerms_);
    return lo < hi;
  }
  switch (s.kind) {
  case Gen::None:
    return false;
  case Gen::Class: {
    const InputArray &a = *s.data;
    a.at(i);
    const int32_t *begin = a.order.data() + a.classBegin[static_cast<size_t>(i)];
    const int32_t *end = a.order.data() + a.classEnd[static_cast<size_t>(i)];
    // (From the class's first position on, the usual window of a causal
    // row, no search: its first key decides.)
    const int32_t *first = *begin >= lo ? begin : std::lower_bound(begin, end, lo);
    return first != end && *first < hi;
  }
  case Gen::Union:
    for (const SetRef &c : s.children)
      if (anyIn(*c, i, lo, hi, f.below()))
        return true;
    return false;
  case Gen::Intersect: {
    // Narrow by the one-interval children; one other child left is asked alone.
    const SetNode *other = nullptr;
    int others = 0;
    for (const SetRef &c : s.children) {
      if (oneIntervalPerRow(*c)) {
        narrowToRow(*c, i, n_, lo, hi, sharedTerms_);
      } else {
        other = c.get();
        ++others;
      }
    }
    if (lo >= hi)
      return false;
    if (others == 0)
      return true;
    if (others == 1)
      return anyIn(*other, i, lo, hi, f.below());
    break;
  }
  case Gen::Difference:
    // Minus a few single keys (the query itself): the windows between them.
    if (s.children[1]->kind == Gen::List && s.children[1]->elems.size() <= 8) {
      IntervalSet &cut = f.set(0);
      eval(*s.children[1], i, lo, hi, cut, f.below());
      int64_t from = lo;
      for (const Interval &x : cut) {
        if (anyIn(*s.children[0], i, from, x.lo, f.below()))
          return true;
        from = x.hi;
      }
      return anyIn(*s.children[0], i, from, hi, f.below());
    }
    break;
  default:
    break;
  }
  IntervalSet &keys = f.set(1);
  eval(s, i, lo, hi, keys, f.below());
  return !keys.empty();
}

void RowEvaluator::evalPermuted(const SetNode &s, int64_t t, int64_t lo, int64_t hi, IntervalSet &out,
                                Frame rank) const {
  const InputArray &p = *s.data;
  const SetNode &child = *s.children[0];
  const int64_t i = p.order[static_cast<size_t>(t)];
  // The child's bounds are those of query i, not of rank t: its tape (the
  // root's) opened at i, else none.
  std::optional<TermTape::Scope> taped;
  if (tape_ && &s == set_.get())
    taped.emplace(*tape_, Env{i, 0, n_, 0});
  const Frame f{rank.here, taped ? &*taped : nullptr};
  if (const SetNode *cls = classWithIntervals(child)) {
    int64_t a = 0, b = n_;
    if (child.kind == Gen::Intersect)
      for (const SetRef &c : child.children)
        if (c.get() != cls)
          narrowToRow(*c, i, n_, a, b, sharedTerms_);
    // i's class in [a, b): a span [first, last) of its input's order.
    const InputArray &x = *cls->data;
    x.at(i); // i must have a value (an input shorter than the sequence)
    const int32_t *begin = x.order.data() + x.classBegin[static_cast<size_t>(i)];
    const int32_t *end = x.order.data() + x.classEnd[static_cast<size_t>(i)];
    const int64_t first = std::lower_bound(begin, end, a) - x.order.data();
    const int64_t last = std::lower_bound(begin, end, b) - x.order.data();
    if (&x == &p) { // the permutation's own classes: one interval
      if (std::max(lo, first) < std::min(hi, last))
        out.push_back({std::max(lo, first), std::min(hi, last)});
      return;
    }
    // Another input's class: renumber its keys, or test the window's
    // positions, whichever is fewer; with the values in this order, a
    // contiguous scan of the window (most of it matches nothing).
    const int64_t value = x.values[static_cast<size_t>(i)];
    if (s.valuesInOrder && last - first > (hi - lo) / 16) {
      const int32_t *v = s.valuesInOrder->data(), want = static_cast<int32_t>(value);
      for (int64_t u0 = lo; u0 < hi; u0 += 16) {
        const int64_t u1 = std::min(hi, u0 + 16);
        bool any = false;
        for (int64_t u = u0; u < u1; ++u)
          any |= v[u] == want;
        if (!any)
          continue;
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t j = p.order[static_cast<size_t>(u)];
          if (v[u] != want || j < a || j >= b)
            continue;
          if (!out.empty() && out.back().hi == u)
            ++out.back().hi;
          else
            out.push_back({u, u + 1});
        }
      }
      return;
    }
    if (last - first <= hi - lo) {
      for (int64_t k = first; k < last; ++k) {
        const int64_t u = p.placeOf[static_cast<size_t>(x.order[static_cast<size_t>(k)])];
        if (lo <= u && u < hi)
          out.push_back({u, u + 1});
      }
      normalize(out);
      return;
    }
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t j = p.order[static_cast<size_t>(u)];
      if (j < a || j >= b || j >= x.rows || x.values[static_cast<size_t>(j)] != value)
        continue;
      appendKey(out, u);
    }
    return;
  }
  if (child.kind == Gen::List) { // a few keys (the query itself): renumbered one by one
    Env env{i, 0, n_, 0};
    for (const TermRef &e : child.elems) {
      const int64_t j = evalInt(*e, env);
      if (j < 0 || j >= n_)
        continue;
      const int64_t u = p.placeOf[static_cast<size_t>(j)];
      if (lo <= u && u < hi)
        out.push_back({u, u + 1});
    }
    if (out.size() > 1)
      normalize(out);
    return;
  }
  // Anything else: the child's row in key positions, renumbered; where the
  // child's keys follow from its bounds alone, the rows with the same
  // bounds (a Swin window's 49 queries) read them back from the thread's
  // cache.
  if (permSlots_.empty() || !f.tape) {
    renumbered(child, p, i, lo, hi, out, f);
    return;
  }
  bool hit;
  MemoEntry &e = *cached(permSlots_, 0, lo, hi, f, hit);
  if (hit) {
    if (e.lo == lo && e.hi == hi)
      out.assign(e.keys.begin(), e.keys.end());
    else
      intersectInto(e.keys, IntervalSet{{lo, hi}}, out);
    return;
  }
  renumbered(child, p, i, lo, hi, out, f);
  e.keys.assign(out.begin(), out.end());
}

void RowEvaluator::renumbered(const SetNode &child, const InputArray &p, int64_t i, int64_t lo, int64_t hi,
                              IntervalSet &out, Frame f) const {
  // A narrow window is tested position by position; a wide one takes every
  // key.
  IntervalSet &keys = f.set(0);
  eval(child, i, 0, n_, keys, f.below());
  int64_t count = 0;
  for (const Interval &x : keys)
    count += x.size();
  if (hi - lo <= count) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t j = p.order[static_cast<size_t>(u)];
      auto at = std::upper_bound(keys.begin(), keys.end(), j, [](int64_t v, const Interval &x) { return v < x.hi; });
      if (at == keys.end() || at->lo > j)
        continue;
      appendKey(out, u);
    }
    return;
  }
  // Keys whose ranks follow each other (a tile's row of a canvas in tiles,
  // plan::tiledLayout) renumber as one interval: fewer to sort.
  for (const Interval &x : keys)
    for (int64_t j = x.lo; j < x.hi;) {
      const int64_t u = p.placeOf[static_cast<size_t>(j)];
      int64_t end = j + 1;
      while (end < x.hi && p.placeOf[static_cast<size_t>(end)] == u + (end - j))
        ++end;
      const int64_t a = std::max(lo, u), b = std::min(hi, u + (end - j));
      if (a < b)
        out.push_back({a, b});
      j = end;
    }
  normalize(out);
}

void RowEvaluator::eval(const SetNode &s, int64_t i, int64_t lo, int64_t hi, IntervalSet &out,
                        Frame f) const {
  out.clear();
  if (lo >= hi)
    return;
  Env env{i, 0, n_, 0};
  switch (s.kind) {
  case Gen::All:
    out.push_back({lo, hi});
    break;
  case Gen::None:
    break;
  case Gen::Band: case Gen::BlockDiag: case Gen::KeyRange: case Gen::Segment: {
    int64_t a = lo, b = hi;
    if (s.kind == Gen::KeyRange && f.tape) { // (narrowToRow's, from the row's tape)
      keyRangeBounds(s, [&](const Term &t) { return boundAt(t, i, f); }, a, b);
    } else {
      narrowToRow(s, i, n_, a, b, sharedTerms_);
    }
    if (a < b)
      out.push_back({a, b});
    break;
  }
  case Gen::Stripe: {
    int64_t m = s.modulus;
    out.reserve(static_cast<size_t>((hi - lo) / m + 2));
    for (int64_t base = floorDiv(lo, m) * m; base < hi; base += m) {
      int64_t a = std::max(lo, base + s.lo), b = std::min(hi, base + s.hi + 1);
      if (a < b)
        out.push_back({a, b});
    }
    break;
  }
  case Gen::CoordRange: {
    int64_t first, last;
    if (f.tape) { // (coordBoundsAt's, from the row's tape)
      coordBounds(s, [&](const Term &t) { return boundAt(t, i, f); }, first, last);
    } else {
      coordBoundsAt(s, i, n_, first, last, sharedTerms_);
    }
    appendCoordKeys(s.keyBlock, s.modulus, first, last, lo, hi, out);
    break;
  }
  case Gen::Residue: {
    // j = i - r (mod m)
    int64_t m = s.modulus;
    int64_t first = lo + floorMod(i - s.residue - lo, m);
    for (int64_t j = first; j < hi; j += m)
      out.push_back({j, j + 1});
    break;
  }
  case Gen::RowIf:
    if (evalBool(*s.cond, env))
      out.push_back({lo, hi});
    break;
  case Gen::List:
    for (const TermRef &e : s.elems) {
      int64_t k = evalInt(*e, env);
      if (lo <= k && k < hi)
        out.push_back({k, k + 1});
    }
    normalize(out);
    break;
  case Gen::Random: {
    int64_t numBlocks = floorDiv(n_ + s.modulus - 1, s.modulus);
    for (int64_t b : randomBlocksOf(s.seed, floorDiv(i, s.modulus), s.count, numBlocks)) {
      int64_t a = std::max(lo, b * s.modulus), e = std::min(hi, (b + 1) * s.modulus);
      if (a < e)
        out.push_back({a, e});
    }
    normalize(out);
    break;
  }
  case Gen::Predicate:
    if (const PredicateLanes *lanes = lanesOf(s); lanes && lanes->keys(env, lo, hi, out))
      break; // (compiled over lanes of keys)
    for (int64_t j = lo; j < hi; ++j) {
      env.j = j;
      if (!evalBool(*s.cond, env))
        continue;
      appendKey(out, j);
    }
    break;
  case Gen::Class: {
    // i's class is a span of the positions sorted by value, ascending.
    const InputArray &a = *s.data;
    if (!a.bound)
      throw InputError("input '" + a.name + "' has no data (it is given with every call)");
    a.at(i); // i must have a value
    const int32_t *begin = a.order.data() + a.classBegin[static_cast<size_t>(i)];
    const int32_t *end = a.order.data() + a.classEnd[static_cast<size_t>(i)];
    for (const int32_t *p = *begin >= lo ? begin : std::lower_bound(begin, end, lo); p != end && *p < hi; ++p) {
      appendKey(out, *p);
    }
    break;
  }
  case Gen::Select: {
    const InputArray &a = *s.data;
    if (!a.bound)
      throw InputError("input '" + a.name + "' has no data (it is given with every call)");
    const int64_t r = floorDiv(i, s.modulus), B = s.keyBlock;
    if (a.cols > 0)
      a.at(r, 0); // (the row is checked once; its entries read in place)
    const int64_t *entries = a.values.data() + r * a.cols;
    for (int64_t c = 0; c < a.cols; ++c) {
      const int64_t block = entries[c];
      if (block < 0)
        continue;
      const int64_t x = std::max(lo, block * B), y = std::min(hi, block * B + B);
      if (x < y)
        out.push_back({x, y});
    }
    normalize(out);
    break;
  }
  case Gen::Fallback:
    // The first operand's whole row decides, not its part inside [lo, hi).
    if (anyIn(*s.children[0], i, 0, n_, f.below()))
      eval(*s.children[0], i, lo, hi, out, f.below());
    else
      eval(*s.children[1], i, lo, hi, out, f.below());
    break;
  case Gen::WhereEmpty:
    if (!anyIn(*s.children[0], i, 0, n_, f.below()))
      eval(*s.children[1], i, lo, hi, out, f.below());
    break;
  case Gen::Permuted:
    evalPermuted(s, i, lo, hi, out, f);
    break;
  case Gen::Union: {
    IntervalSet &part = f.set(0);
    if (s.children.size() <= 4) {
      // Each child's row is sorted already: merge them (an equality
      // class's row is many single keys, which a sort would pay for).
      IntervalSet &merged = f.set(1);
      for (const SetRef &c : s.children) {
        eval(*c, i, lo, hi, part, f.below());
        if (!out.empty()) {
          uniteInto(out, part, merged);
          out.swap(merged);
        } else {
          out.swap(part); // (the first keys: nothing to merge them with)
        }
      }
      break;
    }
    for (const SetRef &c : s.children) {
      eval(*c, i, lo, hi, part, f.below());
      out.insert(out.end(), part.begin(), part.end());
    }
    normalize(out);
    break;
  }
  case Gen::Intersect:
    evalIntersect(s, i, lo, hi, out, f);
    break;
  case Gen::Difference: {
    IntervalSet &a = f.set(0), &b = f.set(1);
    eval(*s.children[0], i, lo, hi, a, f.below());
    if (a.empty())
      break;
    eval(*s.children[1], i, a.front().lo, a.back().hi, b, f.below());
    subtractInto(a, b, out);
    break;
  }
  }
}

BoundValues::BoundValues(const SetNode &set) {
  tape_ = decidingTape(set, nullptr, slots_); // (slots_ is made after tape_: not in the initialiser list)
}

void BoundValues::append(int64_t i, int64_t n, std::vector<int64_t> &out) const {
  const TermTape::Scope scope(*tape_, Env{i, 0, n, 0});
  for (int32_t slot : slots_)
    out.push_back(scope.at(slot));
}

std::vector<int64_t> lastReaders(const std::vector<SetRef> &sets, int64_t n) {
  std::vector<int64_t> last(static_cast<size_t>(std::max<int64_t>(n, 0)), -1);
  if (n <= 0)
    return last;
  std::vector<RowEvaluator> rows;
  for (const SetRef &set : sets)
    rows.emplace_back(set, n);
  IntervalSet open{{0, n}}, keys, met, rest;
  for (int64_t i = n - 1; i >= 0 && !open.empty(); --i) {
    for (const RowEvaluator &r : rows) {
      r.row(i, 0, n, keys);
      intersectInto(keys, open, met);
      if (met.empty())
        continue;
      for (const Interval &iv : met)
        std::fill(last.begin() + iv.lo, last.begin() + iv.hi, i);
      subtractInto(open, met, rest);
      open.swap(rest);
    }
  }
  return last;
}

} // namespace attnc::ir
