//===- Generators.cpp - What each generator of the pattern IR promises ---===//
#include "attnc/plan/Generators.h"

#include "attnc/plan/Inputs.h"

#include <algorithm>
#include <numeric>

namespace attnc::ir {

static_assert(
    [] {
      for (size_t k = 0; k < kGenTraits.size(); ++k)
        if (kGenTraits[k].kind != static_cast<Gen>(k))
          return false;
      return true;
    }(),
    "kGenTraits must list the generators in the order of Gen");

bool oneIntervalPerRow(const SetNode &s) {
  if (s.kind == Gen::Intersect)
    return std::all_of(s.children.begin(), s.children.end(),
                       [](const SetRef &c) { return oneIntervalPerRow(*c); });
  return traits(s.kind).oneInterval;
}

void narrowToRowOutOfLine(const SetNode &s, int64_t i, int64_t n, int64_t &lo, int64_t &hi, bool shared) {
  switch (s.kind) {
  case Gen::BlockDiag: {
    int64_t start = floorDiv(i, s.modulus) * s.modulus;
    lo = std::max(lo, start);
    hi = std::min(hi, start + s.modulus);
    break;
  }
  case Gen::KeyRange: {
    const Env env{i, 0, n, 0};
    keyRangeBounds(s, [&](const Term &t) { return shared ? evalIntShared(t, env) : evalInt(t, env); }, lo, hi);
    break;
  }
  case Gen::All:
    break;
  default:
    ATTNC_CHECK(false, "narrowToRow needs a set that oneIntervalPerRow accepts");
  }
}

void appendCoordKeys(int64_t s, int64_t m, int64_t first, int64_t last, int64_t lo, int64_t hi,
                     IntervalSet &out) {
  first = std::max<int64_t>(first, 0);
  last = std::min(last, m - 1);
  if (first > last || lo >= hi)
    return;
  // s * m does not overflow (SetNode::coordRange), and neither do the
  // periods' starts, which lie within [lo - s m, hi).
  const int64_t period = s * m, begin = first * s, end = (last + 1) * s;
  for (int64_t base = floorDiv(lo, period) * period; base < hi; base += period) {
    const int64_t a = std::max(lo, base + begin), b = std::min(hi, base + end);
    if (a < b) {
      if (!out.empty() && out.back().hi == a) // a coordinate range that wraps into the next period
        out.back().hi = b;
      else
        out.push_back({a, b});
    }
    if (hi - base <= period)
      break;
  }
}

void coordBoundsAt(const SetNode &s, int64_t i, int64_t n, int64_t &first, int64_t &last, bool shared) {
  const Env env{i, 0, n, 0};
  coordBounds(s, [&](const Term &t) { return shared ? evalIntShared(t, env) : evalInt(t, env); }, first, last);
}

bool sameKeysOnRows(const SetNode &s, int64_t a, int64_t b) {
  switch (traits(s.kind).sameKeys) {
  case SameKeys::EveryRow:
    return true;
  case SameKeys::BlockOfRows:
    return floorDiv(a, s.modulus) == floorDiv(b, s.modulus);
  case SameKeys::Unknown:
    return false;
  }
  return false;
}

namespace {

/// Whether a term mentions neither i nor j (the same for every row and key).
bool fixed(const TermRef &t) { return !t->uses(kUsesI) && !t->uses(kUsesJ); }

/// Whether a term is i + c for a fixed c.
bool movesWithRow(const Term &t) {
  switch (t.op()) {
  case Op::VarI:
    return true;
  case Op::Add:
    return (movesWithRow(*t.arg(0)) && fixed(t.arg(1))) || (fixed(t.arg(0)) && movesWithRow(*t.arg(1)));
  case Op::Sub:
    return movesWithRow(*t.arg(0)) && fixed(t.arg(1));
  default:
    return false;
  }
}

} // namespace

bool monotoneInRow(const Term &cond) {
  switch (cond.op()) {
  case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
    return (movesWithRow(*cond.arg(0)) && fixed(cond.arg(1))) ||
           (fixed(cond.arg(0)) && movesWithRow(*cond.arg(1)));
  case Op::Not:
    return monotoneInRow(*cond.arg(0));
  default:
    return false;
  }
}

int64_t period(const SetNode &s, int64_t limit) {
  switch (traits(s.kind).period) {
  case PeriodRule::One:
    return 1;
  case PeriodRule::Modulus:
    return s.modulus;
  case PeriodRule::RowBounds:
    return (!s.loTerm || movesWithRow(*s.loTerm)) && (!s.hiTerm || movesWithRow(*s.hiTerm)) ? 1 : 0;
  case PeriodRule::RowFree:
    return s.cond->uses(kUsesI) ? 0 : 1;
  case PeriodRule::Children: {
    int64_t p = 1;
    for (const SetRef &c : s.children) {
      const int64_t q = period(*c, limit);
      if (q == 0)
        return 0;
      p = std::lcm(p, q);
      if (p > limit)
        return 0;
    }
    return p;
  }
  case PeriodRule::Unknown:
    return 0;
  }
  return 0;
}

} // namespace attnc::ir
