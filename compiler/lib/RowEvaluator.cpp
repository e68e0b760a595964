//===- RowEvaluator.cpp - Closed-form key sets for a bound length ---------===//
#include "attnc/compiler/RowEvaluator.h"

#include <algorithm>

namespace attnc::ir {

RowEvaluator::RowEvaluator(SetRef set, int64_t n) : set_(std::move(set)), n_(n) {
  ATTNC_CHECK(n >= 1, "sequence length must be at least 1");
}

IntervalSet RowEvaluator::row(int64_t i) const { return eval(*set_, i, 0, n_); }

IntervalSet RowEvaluator::row(int64_t i, int64_t lo, int64_t hi) const {
  return eval(*set_, i, std::max<int64_t>(lo, 0), std::min(hi, n_));
}

/// Evaluation cost class: cheap, narrow generators run first inside an
/// intersection so that the expensive ones see a small window.
static int costRank(Gen g) {
  switch (g) {
  case Gen::RowIf: return 0;
  case Gen::Band: case Gen::BlockDiag: case Gen::KeyRange: return 1;
  case Gen::List: case Gen::Random: return 2;
  case Gen::Stripe: case Gen::Residue: return 3;
  case Gen::Predicate: return 5;
  default: return 4;
  }
}

IntervalSet RowEvaluator::evalIntersect(const SetNode &s, int64_t i, int64_t lo, int64_t hi) const {
  std::vector<const SetNode *> order;
  for (const SetRef &c : s.children)
    order.push_back(c.get());
  std::stable_sort(order.begin(), order.end(), [](const SetNode *a, const SetNode *b) {
    return costRank(a->kind) < costRank(b->kind);
  });
  IntervalSet acc{{lo, hi}};
  for (const SetNode *c : order) {
    if (acc.empty())
      break;
    if (c->kind == Gen::Predicate) {
      // Examine only the keys that survived so far.
      IntervalSet kept;
      for (const Interval &x : acc) {
        IntervalSet part = eval(*c, i, x.lo, x.hi);
        kept.insert(kept.end(), part.begin(), part.end());
      }
      acc = std::move(kept);
      continue;
    }
    acc = intersect(acc, eval(*c, i, acc.front().lo, acc.back().hi));
  }
  return acc;
}

IntervalSet RowEvaluator::eval(const SetNode &s, int64_t i, int64_t lo, int64_t hi) const {
  IntervalSet out;
  if (lo >= hi)
    return out;
  Env env{i, 0, n_, 0};
  switch (s.kind) {
  case Gen::All:
    out.push_back({lo, hi});
    break;
  case Gen::None:
    break;
  case Gen::Band: {
    int64_t a = s.lo == kUnbounded ? lo : std::max(lo, i + s.lo);
    int64_t b = s.hi == kUnbounded ? hi : std::min(hi, i + s.hi + 1);
    if (a < b)
      out.push_back({a, b});
    break;
  }
  case Gen::BlockDiag: {
    int64_t start = floorDiv(i, s.modulus) * s.modulus;
    int64_t a = std::max(lo, start), b = std::min(hi, start + s.modulus);
    if (a < b)
      out.push_back({a, b});
    break;
  }
  case Gen::KeyRange: {
    int64_t a = lo, b = hi;
    if (s.loTerm)
      a = std::max(a, evalInt(*s.loTerm, env));
    if (s.hiTerm)
      b = std::min(b, evalInt(*s.hiTerm, env) + 1);
    if (a < b)
      out.push_back({a, b});
    break;
  }
  case Gen::Stripe: {
    int64_t m = s.modulus;
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
  case Gen::Union:
    for (const SetRef &c : s.children) {
      IntervalSet part = eval(*c, i, lo, hi);
      out.insert(out.end(), part.begin(), part.end());
    }
    normalize(out);
    break;
  case Gen::Intersect:
    return evalIntersect(s, i, lo, hi);
  case Gen::Difference: {
    IntervalSet a = eval(*s.children[0], i, lo, hi);
    if (a.empty())
      break;
    return subtract(a, eval(*s.children[1], i, a.front().lo, a.back().hi));
  }
  }
  return out;
}

} // namespace attnc::ir
