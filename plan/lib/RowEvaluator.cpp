//===- RowEvaluator.cpp - Closed-form key sets for a bound length ---------===//
#include "attnc/plan/RowEvaluator.h"

#include "attnc/plan/Generators.h"

#include <algorithm>
#include <deque>

namespace attnc::ir {

RowEvaluator::RowEvaluator(SetRef set, int64_t n) : set_(std::move(set)), n_(n) {
  ATTNC_CHECK(n >= 1, "sequence length must be at least 1");
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
  switch (form_) {
  case Form::OneInterval: // the common cases, in closed form
    out.clear();
    narrowToRow(*set_, i, n_, lo, hi);
    if (lo < hi)
      out.push_back({lo, hi});
    return;
  case Form::IntervalMinusInterval: { // a window minus a band, say: at most two intervals
    out.clear();
    int64_t cutLo = lo, cutHi = hi;
    narrowToRow(*set_->children[0], i, n_, lo, hi);
    narrowToRow(*set_->children[1], i, n_, cutLo, cutHi);
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
  eval(*set_, i, lo, hi, out, 0);
}

namespace {
/// Intermediate sets of the evaluation, two per level of the set's tree:
/// kept per thread so that evaluating rows in a loop allocates nothing once
/// they have grown (a deque: growing it keeps the others in place).
IntervalSet &scratch(int depth, int which) {
  thread_local std::deque<IntervalSet> sets;
  while (sets.size() < static_cast<size_t>(2 * depth + 2))
    sets.emplace_back();
  return sets[static_cast<size_t>(2 * depth + which)];
}
} // namespace

void RowEvaluator::evalIntersect(const SetNode &s, int64_t i, int64_t lo, int64_t hi,
                                 IntervalSet &out, int depth) const {
  const CostOrder order(s);
  IntervalSet &part = scratch(depth, 0), &next = scratch(depth, 1);
  out.assign(1, {lo, hi});
  for (size_t k = 0; k < order.size() && !out.empty(); ++k) {
    const SetNode *c = order[k].get();
    if (traits(c->kind).perKey) {
      // Examine only the keys that survived so far.
      next.clear();
      for (const Interval &x : out) {
        eval(*c, i, x.lo, x.hi, part, depth + 1);
        next.insert(next.end(), part.begin(), part.end());
      }
      out.swap(next);
      continue;
    }
    eval(*c, i, out.front().lo, out.back().hi, part, depth + 1);
    intersectInto(out, part, next);
    out.swap(next);
  }
}

void RowEvaluator::eval(const SetNode &s, int64_t i, int64_t lo, int64_t hi, IntervalSet &out,
                        int depth) const {
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
  case Gen::Band: case Gen::BlockDiag: case Gen::KeyRange: {
    int64_t a = lo, b = hi;
    narrowToRow(s, i, n_, a, b);
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
    for (int64_t j = lo; j < hi; ++j) {
      env.j = j;
      if (!evalBool(*s.cond, env))
        continue;
      if (!out.empty() && out.back().hi == j)
        ++out.back().hi;
      else
        out.push_back({j, j + 1});
    }
    break;
  case Gen::Union: {
    IntervalSet &part = scratch(depth, 0);
    for (const SetRef &c : s.children) {
      eval(*c, i, lo, hi, part, depth + 1);
      out.insert(out.end(), part.begin(), part.end());
    }
    normalize(out);
    break;
  }
  case Gen::Intersect:
    evalIntersect(s, i, lo, hi, out, depth);
    break;
  case Gen::Difference: {
    IntervalSet &a = scratch(depth, 0), &b = scratch(depth, 1);
    eval(*s.children[0], i, lo, hi, a, depth + 1);
    if (a.empty())
      break;
    eval(*s.children[1], i, a.front().lo, a.back().hi, b, depth + 1);
    subtractInto(a, b, out);
    break;
  }
  }
}

} // namespace attnc::ir
