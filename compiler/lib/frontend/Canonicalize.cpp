//===- Canonicalize.cpp - Terms to canonical generators -------------------===//
//
// Order of attempts for a comparison that mentions j: abs() splitting, then
// `X % m` forms (stripe / residue), then `X / l` forms (block ranges), then
// linear forms c*j + R (bands / key ranges), then grid coordinates (j, or
// `(j / s) % m`, under sums and divisions by constants: key ranges and
// coordinate ranges), then the predicate fallback.
//
// The coefficients and constants of those forms are int64 and the user's
// constants can be anywhere in that range: every sum, product and negation
// here is checked, and a comparison whose canonical form would overflow
// keeps its predicate (which is exact; only the closed form is lost).
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Canonicalize.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace attnc::ir {
namespace {

using T = TermRef;

/// Thrown where a canonical form's arithmetic overflows; caught where the
/// form is chosen (canonCompare, tidy, classifyRange), which fall back.
struct Overflow {};

int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw Overflow{};
  return r;
}
int64_t sub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r))
    throw Overflow{};
  return r;
}
int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw Overflow{};
  return r;
}
int64_t neg(int64_t a) { return sub(0, a); }

/// Term::make, whose constant folding is unchecked int64: the fold is
/// checked here first.
T mk(Op op, std::vector<T> args, SourceRange loc = {}) {
  if (!args.empty() &&
      std::all_of(args.begin(), args.end(), [](const T &a) { return a->op() == Op::Const; })) {
    int64_t a = args[0]->value(), b = args.size() > 1 ? args[1]->value() : 0;
    switch (op) {
    case Op::Add: add(a, b); break;
    case Op::Sub: sub(a, b); break;
    case Op::Mul: mul(a, b); break;
    case Op::Neg:
    case Op::Abs: neg(a); break;
    default: break;
    }
  }
  return Term::make(op, std::move(args), loc);
}
T cst(int64_t v) { return Term::constant(v); }

/// term == cj * j + rest, with rest j-free.
struct Linear {
  int64_t cj;
  T rest;
};

std::optional<Linear> linearize(const T &t) {
  if (!t->uses(kUsesJ))
    return Linear{0, t};
  switch (t->op()) {
  case Op::VarJ:
    return Linear{1, cst(0)};
  case Op::Add:
  case Op::Sub: {
    auto a = linearize(t->arg(0)), b = linearize(t->arg(1));
    if (!a || !b)
      return std::nullopt;
    if (t->op() == Op::Add)
      return Linear{add(a->cj, b->cj), mk(Op::Add, {a->rest, b->rest})};
    return Linear{sub(a->cj, b->cj), mk(Op::Sub, {a->rest, b->rest})};
  }
  case Op::Neg: {
    auto a = linearize(t->arg(0));
    if (!a)
      return std::nullopt;
    return Linear{neg(a->cj), mk(Op::Neg, {a->rest})};
  }
  case Op::Mul: {
    for (int k = 0; k < 2; ++k) {
      const T &c = t->arg(k);
      if (c->op() != Op::Const)
        continue;
      auto a = linearize(t->arg(1 - k));
      if (!a)
        return std::nullopt;
      return Linear{mul(a->cj, c->value()), mk(Op::Mul, {c, a->rest})};
    }
    return std::nullopt;
  }
  default:
    return std::nullopt;
  }
}

/// An affine form ci*i + cn*n + c0 of a j-free term, when it has one.
struct Affine {
  int64_t ci = 0, cn = 0, c0 = 0;
};

std::optional<Affine> affineOf(const T &t) {
  switch (t->op()) {
  case Op::Const: return Affine{0, 0, t->value()};
  case Op::VarI: return Affine{1, 0, 0};
  case Op::VarN: return Affine{0, 1, 0};
  case Op::Add:
  case Op::Sub: {
    auto a = affineOf(t->arg(0)), b = affineOf(t->arg(1));
    if (!a || !b)
      return std::nullopt;
    if (t->op() == Op::Add)
      return Affine{add(a->ci, b->ci), add(a->cn, b->cn), add(a->c0, b->c0)};
    return Affine{sub(a->ci, b->ci), sub(a->cn, b->cn), sub(a->c0, b->c0)};
  }
  case Op::Neg: {
    auto a = affineOf(t->arg(0));
    if (!a)
      return std::nullopt;
    return Affine{neg(a->ci), neg(a->cn), neg(a->c0)};
  }
  case Op::Mul:
    for (int k = 0; k < 2; ++k)
      if (t->arg(k)->op() == Op::Const) {
        auto a = affineOf(t->arg(1 - k));
        if (!a)
          return std::nullopt;
        int64_t c = t->arg(k)->value();
        return Affine{mul(a->ci, c), mul(a->cn, c), mul(a->c0, c)};
      }
    return std::nullopt;
  default:
    return std::nullopt;
  }
}

T tidyAffine(const T &t) {
  auto a = affineOf(t);
  if (!a)
    return t;
  T out = cst(0);
  auto addScaled = [&](int64_t c, Op var) {
    if (c == 0)
      return;
    T v = Term::var(var);
    if (c == 1)
      out = mk(Op::Add, {out, v});
    else if (c == -1)
      out = mk(Op::Sub, {out, v});
    else
      out = mk(Op::Add, {out, mk(Op::Mul, {cst(c), v})});
  };
  addScaled(a->ci, Op::VarI);
  addScaled(a->cn, Op::VarN);
  if (a->c0 > 0)
    out = mk(Op::Add, {out, cst(a->c0)});
  else if (a->c0 < 0)
    out = mk(Op::Sub, {out, cst(neg(a->c0))});
  return out;
}

/// Rebuilds an affine term in the canonical order `ci*i + cn*n + c0`, so that
/// the IR prints `i - 128` instead of `-(0 - i + 128)`; a term whose form
/// overflows stays as it is.
T tidy(const T &t) {
  try {
    return tidyAffine(t);
  } catch (const Overflow &) {
    return t;
  }
}

Op flip(Op op) {
  switch (op) {
  case Op::Lt: return Op::Gt;
  case Op::Le: return Op::Ge;
  case Op::Gt: return Op::Lt;
  case Op::Ge: return Op::Le;
  default: return op;
  }
}

/// Builds the key range for `j OP bound` (bound j-free).
SetRef keyBound(Op op, const T &bound, SourceRange loc) {
  T b = tidy(bound);
  switch (op) {
  case Op::Le: return SetNode::keyRange(nullptr, b, loc);
  case Op::Lt: return SetNode::keyRange(nullptr, tidy(mk(Op::Sub, {b, cst(1)})), loc);
  case Op::Ge: return SetNode::keyRange(b, nullptr, loc);
  case Op::Gt: return SetNode::keyRange(tidy(mk(Op::Add, {b, cst(1)})), nullptr, loc);
  case Op::Eq: return SetNode::keyRange(b, b, loc);
  case Op::Ne: return SetNode::difference(SetNode::all(loc), SetNode::keyRange(b, b, loc), loc);
  default: ATTNC_CHECK(false, "not a comparison");
  }
  return nullptr;
}

/// Turns key ranges whose bounds are i + const into bands.
SetRef classifyRange(SetRef s) {
  if (s->kind != Gen::KeyRange)
    return s;
  // Keys are clipped to [0, n) anyway: max(0, X) as a lower bound is X.
  if (s->loTerm && s->loTerm->op() == Op::Max) {
    std::vector<T> kept;
    for (const T &a : s->loTerm->args())
      if (!(a->op() == Op::Const && a->value() <= 0))
        kept.push_back(a);
    if (kept.size() != s->loTerm->args().size())
      s = SetNode::keyRange(kept.empty()     ? nullptr
                            : kept.size() == 1 ? tidy(kept[0])
                                               : mk(Op::Max, kept),
                            s->hiTerm, s->loc);
    if (s->kind != Gen::KeyRange)
      return s;
  }
  auto offset = [](const T &t, int64_t &out) {
    if (!t) {
      out = kUnbounded;
      return true;
    }
    std::optional<Affine> a;
    try {
      a = affineOf(t);
    } catch (const Overflow &) {
      return false;
    }
    if (!a || a->ci != 1 || a->cn != 0)
      return false;
    out = a->c0;
    return true;
  };
  int64_t lo, hi;
  if (offset(s->loTerm, lo) && offset(s->hiTerm, hi))
    return SetNode::band(lo, hi, s->loc);
  return s;
}

/// Solves c*j + R OP 0 (c != 0) for j.
SetRef solveLinear(Op op, Linear lin, SourceRange loc) {
  if (lin.cj < 0) {
    lin.cj = neg(lin.cj);
    lin.rest = mk(Op::Neg, {lin.rest});
    op = flip(op);
  }
  T negR = mk(Op::Neg, {lin.rest});
  T c = cst(lin.cj);
  auto fdiv = [&](T x) { return mk(Op::Div, {std::move(x), c}); };
  SetRef out;
  switch (op) {
  case Op::Le: out = keyBound(Op::Le, fdiv(negR), loc); break;
  case Op::Lt: out = keyBound(Op::Le, fdiv(mk(Op::Sub, {negR, cst(1)})), loc); break;
  case Op::Ge: out = keyBound(Op::Ge, mk(Op::Neg, {fdiv(lin.rest)}), loc); break;
  case Op::Gt: out = keyBound(Op::Ge, mk(Op::Neg, {fdiv(mk(Op::Sub, {lin.rest, cst(1)}))}), loc); break;
  case Op::Eq:
  case Op::Ne: {
    SetRef at = keyBound(Op::Eq, fdiv(negR), loc);
    if (lin.cj != 1)
      at = SetNode::intersect(
          {at, SetNode::rowIf(mk(Op::Eq, {mk(Op::Mod, {negR, c}), cst(0)}), loc)}, loc);
    out = op == Op::Eq ? at : SetNode::difference(SetNode::all(loc), at, loc);
    break;
  }
  default:
    ATTNC_CHECK(false, "not a comparison");
  }
  return classifyRange(out);
}

/// Residues x in [0, m) with x OP b; empty (second < first) when there is
/// none. Both ends must lie in [0, m): the caller shifts the range and
/// reduces it modulo m, so an end outside would wrap onto a real residue.
std::pair<int64_t, int64_t> residueRange(Op op, int64_t b, int64_t m) {
  switch (op) {
  case Op::Eq:
    if (b < 0 || b >= m)
      return {0, -1}; // 'j % 5 == 7' never holds
    return {b, b};
  case Op::Le: return {0, std::min(b, m - 1)};
  case Op::Lt: return {0, std::min(sub(b, 1), m - 1)};
  case Op::Ge: return {std::max<int64_t>(b, 0), m - 1};
  case Op::Gt: return {std::max<int64_t>(add(b, 1), 0), m - 1};
  default: ATTNC_CHECK(false, "no residue range for this operator");
  }
  return {0, -1};
}

SetRef canonCondition(const T &p);

/// `X % m OP B` with X = cj*j + R, cj = +-1, B j-free.
std::optional<SetRef> tryModulo(Op op, const T &modTerm, const T &other, SourceRange loc) {
  const T &x = modTerm->arg(0);
  const T &m = modTerm->arg(1);
  if (m->op() != Op::Const || other->uses(kUsesJ))
    return std::nullopt;
  int64_t mod = m->value();
  auto lin = linearize(x);
  if (!lin || (lin->cj != 1 && lin->cj != -1))
    return std::nullopt;
  if (op == Op::Ne) {
    auto eq = tryModulo(Op::Eq, modTerm, other, loc);
    if (!eq)
      return std::nullopt;
    return SetNode::difference(SetNode::all(loc), *eq, loc);
  }
  auto restAffine = affineOf(lin->rest);
  // Stripe: (cj*j + c) % m OP b with c, b constants.
  if (restAffine && restAffine->ci == 0 && restAffine->cn == 0 && other->op() == Op::Const) {
    auto [s, e] = residueRange(op, other->value(), mod);
    if (e < s)
      return SetNode::none(loc);
    int64_t c = restAffine->c0;
    if (lin->cj == 1) // j % m in [s - c, e - c]
      return SetNode::stripe(mod, sub(s, c), sub(e, c), loc);
    return SetNode::stripe(mod, sub(c, e), sub(c, s), loc); // (c - j) % m in [s, e]
  }
  // Residue: (i - j + c) % m == b  or  (j - i + c) % m == b.
  if (op == Op::Eq && restAffine && restAffine->cn == 0 && restAffine->ci == -lin->cj &&
      other->op() == Op::Const) {
    int64_t c = restAffine->c0, b = other->value();
    if (b < 0 || b >= mod)
      return SetNode::none(loc);
    return SetNode::residueClass(mod, lin->cj == -1 ? sub(b, c) : sub(c, b), loc);
  }
  // Residue: X % m == Y % m  ==>  (X - Y) % m == 0.
  if (op == Op::Eq && other->op() == Op::Mod && other->arg(1)->op() == Op::Const &&
      other->arg(1)->value() == mod) {
    T diff = mk(Op::Mod, {mk(Op::Sub, {x, other->arg(0)}), m});
    auto r = tryModulo(Op::Eq, diff, cst(0), loc);
    if (r)
      return r;
  }
  return std::nullopt;
}

/// `X / l OP F` with X = j + c, F j-free: q = X / l is bounded, then j is.
std::optional<SetRef> tryDivision(Op op, const T &divTerm, const T &other, SourceRange loc) {
  const T &x = divTerm->arg(0);
  const T &l = divTerm->arg(1);
  if (l->uses(kUsesJ) || other->uses(kUsesJ))
    return std::nullopt;
  auto lin = linearize(x);
  if (!lin || lin->cj != 1)
    return std::nullopt;
  if (op == Op::Eq && l->op() == Op::Const && other->op() == Op::Div &&
      other->arg(0)->op() == Op::VarI && structurallyEqual(*other->arg(1), *l) &&
      lin->rest->op() == Op::Const && lin->rest->value() == 0)
    return SetNode::blockDiag(l->value(), loc);
  // j + R >= l*F  and  j + R <= l*F + l - 1.
  T first = mk(Op::Sub, {mk(Op::Mul, {l, other}), lin->rest});
  T last = mk(Op::Sub, {mk(Op::Sub, {mk(Op::Add, {mk(Op::Mul, {l, other}), l}), cst(1)}), lin->rest});
  T lastBefore = mk(Op::Sub, {mk(Op::Sub, {mk(Op::Mul, {l, other}), cst(1)}), lin->rest});
  T firstAfter = mk(Op::Sub, {mk(Op::Add, {mk(Op::Mul, {l, other}), l}), lin->rest});
  SetRef out;
  switch (op) {
  case Op::Eq: out = SetNode::keyRange(tidy(first), tidy(last), loc); break;
  case Op::Ne:
    out = SetNode::difference(SetNode::all(loc), SetNode::keyRange(tidy(first), tidy(last), loc), loc);
    break;
  case Op::Le: out = SetNode::keyRange(nullptr, tidy(last), loc); break;
  case Op::Lt: out = SetNode::keyRange(nullptr, tidy(lastBefore), loc); break;
  case Op::Ge: out = SetNode::keyRange(tidy(first), nullptr, loc); break;
  case Op::Gt: out = SetNode::keyRange(tidy(firstAfter), nullptr, loc); break;
  default: return std::nullopt;
  }
  return classifyRange(out);
}

SetRef canonCompareForm(const T &p);

/// t with a modulus or a division by a constant around another modulus by
/// a multiple of it written as a grid coordinate: `x % a % b` is `x % b`
/// and `x % a / b` is `x / b % (a / b)` when b divides a (a token's column
/// and row inside its tile, `j % 64 % 8` and `j % 64 / 8`, for tiles of 8 x 8).
T coordinateForm(const T &t) {
  if ((t->op() != Op::Mod && t->op() != Op::Div) || t->arg(1)->op() != Op::Const || t->arg(0)->op() != Op::Mod ||
      t->arg(0)->arg(1)->op() != Op::Const)
    return t;
  const int64_t a = t->arg(0)->arg(1)->value(), b = t->arg(1)->value();
  if (b < 1 || a < 1 || a % b != 0)
    return t;
  const T &x = t->arg(0)->arg(0);
  if (t->op() == Op::Mod)
    return coordinateForm(mk(Op::Mod, {x, t->arg(1)}, t->loc()));
  return mk(Op::Mod, {mk(Op::Div, {x, t->arg(1)}, t->loc()), cst(a / b)}, t->loc());
}

/// Whether t is a grid coordinate of j, `(j / s) % m` with constants s and
/// m (nested divisions multiply: `j / 64 / 6 % 6` is s = 384, m = 6): the
/// column `j % W` of a row-major canvas, the row `j / W % H` of a video's
/// frame. The row `j / W` itself needs no modulus: it is a key range.
bool gridCoordinate(const T &t, int64_t &s, int64_t &m) {
  if (t->op() != Op::Mod || t->arg(1)->op() != Op::Const)
    return false;
  m = t->arg(1)->value();
  s = 1;
  for (const Term *x = t->arg(0).get(); x->op() != Op::VarJ; x = x->arg(0).get()) {
    if (x->op() != Op::Div || x->arg(1)->op() != Op::Const)
      return false;
    s = mul(s, x->arg(1)->value());
  }
  mul(s, m); // the period must be an int64 too
  return true;
}

/// `coordinate OP bound` as a coordinate range (`!=` as its complement).
SetRef coordBound(int64_t s, int64_t m, Op op, const T &bound, SourceRange loc) {
  T b = tidy(bound);
  switch (op) {
  case Op::Le: return SetNode::coordRange(s, m, nullptr, b, loc);
  case Op::Lt: return SetNode::coordRange(s, m, nullptr, tidy(mk(Op::Sub, {b, cst(1)})), loc);
  case Op::Ge: return SetNode::coordRange(s, m, b, nullptr, loc);
  case Op::Gt: return SetNode::coordRange(s, m, tidy(mk(Op::Add, {b, cst(1)})), nullptr, loc);
  case Op::Eq: return SetNode::coordRange(s, m, b, b, loc);
  case Op::Ne: return SetNode::difference(SetNode::all(loc), SetNode::coordRange(s, m, b, b, loc), loc);
  default: ATTNC_CHECK(false, "not a comparison");
  }
  return nullptr;
}

std::optional<SetRef> isolateCoordinate(const T &x, Op op, const T &bound, SourceRange loc);

/// `c * A + B OP bound` (bound j-free) where B is a grid coordinate
/// (j / s) % m with m <= c, so that 0 <= B < c: then A = x / c and B = x % c,
/// and x compares as the pair (A, B) does, A first (a mixed radix). This is
/// a token's column on a canvas laid out in tiles, its tile's column times
/// the tile's width plus its column in the tile (attention-gym's tiled
/// NATTEN). x <= b is A < b / c, or A == b / c and B <= b % c; x >= b
/// likewise; x == b is A == b / c and B == b % c. A is solved as any other
/// coordinate (isolateCoordinate). nullopt for any other form.
std::optional<SetRef> mixedRadix(const T &x, Op op, const T &bound, SourceRange loc) {
  if (x->op() != Op::Add)
    return std::nullopt;
  for (int k = 0; k < 2; ++k) {
    const T &scaled = x->arg(k);
    const T low = coordinateForm(x->arg(1 - k));
    if (scaled->op() != Op::Mul)
      continue;
    T high;
    int64_t c = 0;
    for (int u = 0; u < 2; ++u)
      if (scaled->arg(u)->op() == Op::Const && scaled->arg(1 - u)->uses(kUsesJ)) {
        c = scaled->arg(u)->value();
        high = scaled->arg(1 - u);
      }
    int64_t s = 0, m = 0;
    if (!high || c < 1 || !gridCoordinate(low, s, m) || m > c)
      continue;
    switch (op) {
    case Op::Lt: return mixedRadix(x, Op::Le, tidy(mk(Op::Sub, {bound, cst(1)})), loc);
    case Op::Gt: return mixedRadix(x, Op::Ge, tidy(mk(Op::Add, {bound, cst(1)})), loc);
    default: break;
    }
    const T q = tidy(mk(Op::Div, {bound, cst(c)})), r = tidy(mk(Op::Mod, {bound, cst(c)}));
    auto atQ = [&](Op lowOp) -> std::optional<SetRef> {
      auto a = isolateCoordinate(high, Op::Eq, q, loc);
      if (!a)
        return std::nullopt;
      return SetNode::intersect({*a, coordBound(s, m, lowOp, r, loc)}, loc);
    };
    switch (op) {
    case Op::Le:
    case Op::Ge: {
      auto beyond = isolateCoordinate(high, op == Op::Le ? Op::Lt : Op::Gt, q, loc);
      auto edge = atQ(op);
      if (!beyond || !edge)
        return std::nullopt;
      return SetNode::unite({*beyond, *edge}, loc);
    }
    case Op::Eq: return atQ(Op::Eq);
    case Op::Ne: {
      auto at = atQ(Op::Eq);
      if (!at)
        return std::nullopt;
      return SetNode::difference(SetNode::all(loc), *at, loc);
    }
    default: return std::nullopt;
    }
  }
  return std::nullopt;
}

/// `x OP bound` (bound j-free) with the one j of x inside sums, negations
/// and floor divisions by constants around j itself or a grid coordinate:
/// the operations are undone one at a time on the bound, so
/// `max(3, min(i / 64, 60)) - j / 64 <= 3` becomes `j >= 64 * (... - 3)`
/// and `(j % 56 + 4) / 7 == F` becomes `7 F - 4 <= j % 56 <= 7 F + 2`.
/// These are NATTEN's, Swin's and STA's windows on a canvas flattened row
/// by row: key ranges and coordinate ranges, one interval per canvas row in
/// the window, instead of a predicate over every key. nullopt for any other
/// form.
std::optional<SetRef> isolateCoordinate(const T &x, Op op, const T &bound, SourceRange loc) {
  // a + c and a - c with a constant c < 0 print as a - |c| and a + |c|.
  auto plus = [](const T &a, const T &c) {
    return c->op() == Op::Const && c->value() < 0 ? mk(Op::Sub, {a, cst(neg(c->value()))}) : mk(Op::Add, {a, c});
  };
  auto minus = [](const T &a, const T &c) {
    return c->op() == Op::Const && c->value() < 0 ? mk(Op::Add, {a, cst(neg(c->value()))}) : mk(Op::Sub, {a, c});
  };
  if (x->op() == Op::VarJ)
    return classifyRange(keyBound(op, bound, loc));
  int64_t s = 0, m = 0;
  if (gridCoordinate(coordinateForm(x), s, m))
    return coordBound(s, m, op, bound, loc);
  auto free = [](const T &t) { return !t->uses(kUsesJ); };
  switch (x->op()) {
  case Op::Add:
    for (int k = 0; k < 2; ++k)
      if (free(x->arg(1 - k)))
        return isolateCoordinate(x->arg(k), op, minus(bound, x->arg(1 - k)), loc);
    return mixedRadix(x, op, bound, loc);
  case Op::Sub:
    if (free(x->arg(1)))
      return isolateCoordinate(x->arg(0), op, plus(bound, x->arg(1)), loc);
    if (free(x->arg(0)))
      return isolateCoordinate(x->arg(1), flip(op), minus(x->arg(0), bound), loc);
    return std::nullopt;
  case Op::Neg:
    return isolateCoordinate(x->arg(0), flip(op), mk(Op::Neg, {bound}), loc);
  case Op::Div: {
    // X / l OP F with floor division: X in [l F, l F + l - 1] for ==.
    const T &l = x->arg(1);
    if (l->op() != Op::Const)
      return std::nullopt;
    const T first = mk(Op::Mul, {l, bound});
    const T last = plus(first, cst(sub(l->value(), 1)));
    switch (op) {
    case Op::Eq:
    case Op::Ne: {
      auto from = isolateCoordinate(x->arg(0), Op::Ge, first, loc);
      auto to = isolateCoordinate(x->arg(0), Op::Le, last, loc);
      if (!from || !to)
        return std::nullopt;
      SetRef at = SetNode::intersect({*from, *to}, loc);
      return op == Op::Eq ? at : SetNode::difference(SetNode::all(loc), at, loc);
    }
    case Op::Le: return isolateCoordinate(x->arg(0), Op::Le, last, loc);
    case Op::Lt: return isolateCoordinate(x->arg(0), Op::Lt, first, loc);
    case Op::Ge: return isolateCoordinate(x->arg(0), Op::Ge, first, loc);
    case Op::Gt: return isolateCoordinate(x->arg(0), Op::Gt, last, loc);
    default: return std::nullopt;
    }
  }
  default:
    return std::nullopt;
  }
}

/// Whether t is x[v] for a 1-D input x and the variable v (i or j).
bool isInputAt(const T &t, Op v) {
  return t->op() == Op::Input && t->args().size() == 1 && t->arg(0)->op() == v;
}

/// Whether t is v / B for a constant B >= 1, or v itself (B = 1).
bool isBlockOf(const T &t, Op v, int64_t &block) {
  if (t->op() == v) {
    block = 1;
    return true;
  }
  if (t->op() == Op::Div && t->arg(0)->op() == v && t->arg(1)->op() == Op::Const && t->arg(1)->value() >= 1) {
    block = t->arg(1)->value();
    return true;
  }
  return false;
}

/// j / B in sel[i / R] (B, R >= 1, either may be absent): a selection; else null.
SetRef trySelect(const T &key, const T &row, SourceRange loc) {
  int64_t keyBlock = 0, rowBlock = 0;
  if (row->op() != Op::InputRow || !isBlockOf(key, Op::VarJ, keyBlock) || !isBlockOf(row->arg(0), Op::VarI, rowBlock))
    return nullptr;
  return SetNode::select(row->value(), row->dataRef(), rowBlock, keyBlock, loc);
}

SetRef canonCompare(const T &p) {
  try {
    return canonCompareForm(p);
  } catch (const Overflow &) {
    return SetNode::predicate(p, p->loc());
  }
}

SetRef canonCompareForm(const T &p) {
  SourceRange loc = p->loc();
  Op op = p->op();
  T a = p->arg(0), b = p->arg(1);
  if (!a->uses(kUsesJ)) { // keep the j side on the left
    std::swap(a, b);
    op = flip(op);
  }
  // b[j] == b[i]: an equality class of an input (!= is its complement).
  if ((op == Op::Eq || op == Op::Ne) && isInputAt(a, Op::VarJ) && isInputAt(b, Op::VarI) &&
      a->value() == b->value()) {
    SetRef cls = SetNode::equalClass(a->value(), a->dataRef(), loc);
    return op == Op::Eq ? cls : SetNode::difference(SetNode::all(loc), cls, loc);
  }
  // abs(X) OP B
  if (a->op() == Op::Abs && !b->uses(kUsesJ)) {
    T x = a->arg(0);
    T negB = mk(Op::Neg, {b});
    switch (op) {
    case Op::Le:
    case Op::Lt:
      return canonCondition(mk(Op::And, {mk(op, {x, b}, loc), mk(flip(op), {x, negB}, loc)}, loc));
    case Op::Ge:
    case Op::Gt:
      return canonCondition(mk(Op::Or, {mk(op, {x, b}, loc), mk(flip(op), {x, negB}, loc)}, loc));
    case Op::Eq:
      return canonCondition(mk(Op::And, {mk(Op::Ge, {b, cst(0)}, loc),
                                         mk(Op::Or, {mk(Op::Eq, {x, b}, loc), mk(Op::Eq, {x, negB}, loc)}, loc)},
                               loc));
    default:
      break;
    }
  }
  if (a->op() == Op::Mod && !b->uses(kUsesJ) ) {
    if (auto s = tryModulo(op, a, b, loc))
      return *s;
  }
  if (op == Op::Eq && a->op() == Op::Mod && b->op() == Op::Mod) {
    if (auto s = tryModulo(op, a, b, loc))
      return *s;
  }
  if (a->op() == Op::Div && !b->uses(kUsesJ)) {
    if (auto s = tryDivision(op, a, b, loc))
      return *s;
  }
  if (auto lin = linearize(mk(Op::Sub, {a, b})); lin && lin->cj != 0)
    return solveLinear(op, *lin, loc);
  if (!b->uses(kUsesJ))
    if (auto s = isolateCoordinate(a, op, b, loc))
      return *s;
  return SetNode::predicate(p, loc);
}

SetRef canonCondition(const T &p) {
  SourceRange loc = p->loc();
  if (!p->uses(kUsesJ))
    return SetNode::rowIf(p, loc);
  switch (p->op()) {
  case Op::And:
    return SetNode::intersect({canonCondition(p->arg(0)), canonCondition(p->arg(1))}, loc);
  case Op::Or:
    return SetNode::unite({canonCondition(p->arg(0)), canonCondition(p->arg(1))}, loc);
  case Op::Not:
    return SetNode::difference(SetNode::all(loc), canonCondition(p->arg(0)), loc);
  case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
    return canonCompare(p);
  case Op::In:
    if (SetRef sel = trySelect(p->arg(0), p->arg(1), loc))
      return sel;
    if (p->arg(0)->op() == Op::VarJ)
      return canonicalizeSet(p->arg(1));
    return SetNode::predicate(p, loc);
  default:
    return SetNode::predicate(p, loc);
  }
}

} // namespace

SetRef canonicalizeSet(const TermRef &set) {
  SourceRange loc = set->loc();
  switch (set->op()) {
  case Op::Builder:
    return canonCondition(set->arg(0));
  case Op::Range:
    return classifyRange(SetNode::keyRange(tidy(set->arg(0)), tidy(set->arg(1)), loc));
  case Op::List: {
    std::vector<TermRef> elems;
    for (const TermRef &e : set->args())
      elems.push_back(tidy(e));
    return SetNode::list(std::move(elems), loc);
  }
  case Op::Union:
    return SetNode::unite({canonicalizeSet(set->arg(0)), canonicalizeSet(set->arg(1))}, loc);
  case Op::Intersect:
    return SetNode::intersect({canonicalizeSet(set->arg(0)), canonicalizeSet(set->arg(1))}, loc);
  case Op::Difference:
    return SetNode::difference(canonicalizeSet(set->arg(0)), canonicalizeSet(set->arg(1)), loc);
  case Op::InputRow:
    if (SetRef sel = trySelect(Term::var(Op::VarJ, loc), set, loc))
      return sel;
    return SetNode::predicate(Term::make(Op::In, {Term::var(Op::VarJ, loc), set}, loc), loc);
  case Op::Fallback:
    return SetNode::fallback(canonicalizeSet(set->arg(0)), canonicalizeSet(set->arg(1)), loc);
  case Op::RandomBlocks:
    ATTNC_CHECK(set->arg(0)->isConst() && set->arg(1)->isConst() && set->arg(2)->isConst(),
                "random_blocks arguments must be constant after head substitution");
    return SetNode::random(set->arg(0)->value(), set->arg(1)->value(), set->arg(2)->value(), loc);
  default:
    ATTNC_CHECK(false, "canonicalizeSet on a non-set term");
  }
  return nullptr;
}

PatternIR canonicalizePattern(const Pattern &pattern) {
  PatternIR ir;
  ir.name = pattern.name;
  ir.numHeads = pattern.numHeads();
  ir.headsDeclared = pattern.headsDeclared;
  ir.causal = pattern.causal;
  for (const ParamValue &p : pattern.params)
    ir.params.push_back({p.name, p.value});
  ir.inputs = pattern.inputs;
  ir.score = pattern.score; // (never part of the sets: Sema keeps them apart)
  ir.sink = pattern.sink;
  for (const Pattern::Group &g : pattern.distinctHeads())
    ir.heads.push_back({g.heads, canonicalizeSet(g.set), g.set});
  return ir;
}

} // namespace attnc::ir
