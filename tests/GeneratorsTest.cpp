//===- GeneratorsTest.cpp - The generator table against the rows ---------===//
//
// The promises of ir::kGenTraits that the evaluators rely on, checked on the
// rows the RowEvaluator gives for every node of every library pattern and
// every piece of its plan, at a ragged n: intervals that slide, rows that
// share keys, and translation periods that map a piece onto itself and are
// the smallest such. And the one order in which both evaluators visit an
// intersection's children.
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "attnc/plan/Generators.h"
#include "attnc/plan/Plan.h"
#include "attnc/plan/RowEvaluator.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

namespace attnc {
namespace {

using ir::Gen;

constexpr int64_t kN = 1031; // prime: no block or modulus divides it

ir::PatternIR libraryIR(const std::string &file) {
  Frontend fe;
  EXPECT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + file + ".attn"));
  EXPECT_TRUE(fe.analyze({}));
  return ir::canonicalizePattern(fe.patterns().front());
}

void collectNodes(const ir::SetRef &s, std::vector<ir::SetRef> &out) {
  out.push_back(s);
  for (const ir::SetRef &c : s->children)
    collectNodes(c, out);
}

/// Every node of every head's tree and every piece's sets.
std::vector<ir::SetRef> everyNode(const ir::PatternIR &ir) {
  std::vector<ir::SetRef> out;
  for (const ir::PatternIR::Head &h : ir.heads)
    collectNodes(h.set, out);
  for (const plan::HeadPlan &hp : plan::buildPlan(ir, {32, 64}).heads)
    for (const plan::Piece &piece : hp.pieces) {
      collectNodes(piece.set, out);
      if (piece.withoutResidue)
        collectNodes(piece.withoutResidue, out);
    }
  return out;
}

/// Row i of `s` in a window wide enough that the generators' keys past
/// [0, n) show (a band continues below 0), shifted by -shift.
IntervalSet wideRow(const ir::RowEvaluator &eval, int64_t i, int64_t shift = 0) {
  IntervalSet row;
  eval.rowIn(i, -2 * kN + shift, 3 * kN + shift, row);
  for (Interval &x : row)
    x = {x.lo - shift, x.hi - shift};
  return row;
}

/// Whether moving every row and key by p maps `s` onto itself on the rows
/// that stay below n.
bool mapsOntoItself(const ir::RowEvaluator &eval, int64_t p) {
  for (int64_t i = 0; i + p < kN; ++i)
    if (wideRow(eval, i + p, p) != wideRow(eval, i))
      return false;
  return true;
}

class GeneratorTraits : public ::testing::TestWithParam<const char *> {};

TEST_P(GeneratorTraits, SlidingIntervalsNeverMoveBack) {
  for (const ir::SetRef &s : everyNode(libraryIR(GetParam()))) {
    if (!ir::traits(s->kind).sliding)
      continue;
    ir::RowEvaluator eval(s, kN);
    IntervalSet previous;
    for (int64_t i = 0; i < kN; ++i) {
      IntervalSet row = wideRow(eval, i);
      ASSERT_LE(row.size(), 1u) << ir::printSet(*s) << "row " << i;
      if (!row.empty() && !previous.empty()) {
        ASSERT_TRUE(row[0].lo >= previous[0].lo && row[0].hi >= previous[0].hi)
            << ir::printSet(*s) << "row " << i;
      }
      if (!row.empty())
        previous = row;
    }
  }
}

TEST_P(GeneratorTraits, RowsThatShareKeysHaveEqualRows) {
  for (const ir::SetRef &s : everyNode(libraryIR(GetParam()))) {
    ir::RowEvaluator eval(s, kN);
    for (int64_t i = 0; i + 1 < kN; ++i)
      if (ir::sameKeysOnRows(*s, i, i + 1)) {
        ASSERT_EQ(eval.row(i), eval.row(i + 1)) << ir::printSet(*s) << "rows " << i << ", " << i + 1;
      }
  }
}

TEST_P(GeneratorTraits, PiecePeriodIsTheSmallestTranslation) {
  ir::PatternIR ir = libraryIR(GetParam());
  for (const plan::HeadPlan &hp : plan::buildPlan(ir, {32, 64}).heads)
    for (const plan::Piece &piece : hp.pieces) {
      const ir::SetRef &s = piece.withoutResidue ? piece.withoutResidue : piece.set;
      const int64_t p = piece.period;
      if (p == 0)
        continue;
      ir::RowEvaluator eval(s, kN);
      EXPECT_TRUE(mapsOntoItself(eval, p)) << ir::printSet(*s) << "period " << p;
      // Every period is a multiple of the smallest: p / f for each prime f of p must fail.
      for (int64_t f = 2, rest = p; rest > 1; ++f) {
        if (rest % f)
          continue;
        while (rest % f == 0)
          rest /= f;
        EXPECT_FALSE(mapsOntoItself(eval, p / f)) << ir::printSet(*s) << "period " << p / f;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Library, GeneratorTraits,
                         ::testing::Values("axial", "bigbird", "causal", "dilated", "fixed",
                                           "fixed_multihead", "fixed_subblocks", "full", "local",
                                           "longformer", "strided", "strided_multihead", "natten2d",
                                           "natten2d_tiled", "sta3d", "swin"));

/// Row evaluation and block bounds both visit an intersection's children in
/// CostOrder: cheapest rank first (row-if before the one-interval generators),
/// ties in tree order.
TEST(Generators, IntersectionChildrenRunCheapestFirstInTreeOrder) {
  auto i = Term::var(Op::VarI), j = Term::var(Op::VarJ);
  auto c = [](int64_t v) { return Term::constant(v); };
  ir::SetRef s = ir::SetNode::intersect(
      {ir::SetNode::predicate(Term::make(Op::Eq, {Term::make(Op::Mod, {Term::make(Op::Mul, {i, j}), c(7)}), c(1)}),
                              {}),
       ir::SetNode::stripe(8, 0, 1, {}),
       ir::SetNode::unite({ir::SetNode::residueClass(3, 0, {}), ir::SetNode::band(-2, 0, {})}, {}),
       ir::SetNode::list({c(3), c(40)}, {}), ir::SetNode::blockDiag(16, {}),
       ir::SetNode::keyRange(nullptr, c(100), {}), ir::SetNode::rowIf(Term::make(Op::Lt, {i, c(500)}), {}),
       ir::SetNode::band(-64, 0, {})},
      {});
  ASSERT_EQ(s->kind, Gen::Intersect);
  std::vector<Gen> tree, order;
  for (const ir::SetRef &child : s->children)
    tree.push_back(child->kind);
  // The band comes last in the tree (intersect() merges bands into one).
  ASSERT_EQ(tree, (std::vector<Gen>{Gen::Predicate, Gen::Stripe, Gen::Union, Gen::List, Gen::BlockDiag,
                                    Gen::KeyRange, Gen::RowIf, Gen::Band}));
  const ir::CostOrder cost(*s);
  for (size_t k = 0; k < cost.size(); ++k)
    order.push_back(cost[k]->kind);
  EXPECT_EQ(order, (std::vector<Gen>{Gen::RowIf, Gen::BlockDiag, Gen::KeyRange, Gen::Band, Gen::List,
                                     Gen::Stripe, Gen::Union, Gen::Predicate}));
}

/// evalIntShared equals evalInt: inside a scope each shared node is computed
/// once per set of variables (a node met again at another row is computed
/// again), a scope opened inside another keeps values of its own, and with
/// none open it is evalInt.
TEST(Generators, SharedSubtermsEvaluateLikeTheirTerms) {
  auto i = Term::var(Op::VarI), n = Term::var(Op::VarN);
  auto c = [](int64_t v) { return Term::constant(v); };
  // NATTEN's clamped centre of a canvas column in tiles of 8, shared by two bounds.
  TermRef column = Term::make(Op::Add, {Term::make(Op::Mul, {Term::make(Op::Mod, {Term::make(Op::Div, {i, c(64)}), c(8)}), c(8)}),
                                        Term::make(Op::Mod, {Term::make(Op::Mod, {i, c(64)}), c(8)})});
  TermRef centre = Term::make(Op::Max, {c(3), Term::make(Op::Min, {column, Term::make(Op::Sub, {n, c(4)})})});
  TermRef lo = Term::make(Op::Div, {Term::make(Op::Sub, {centre, c(3)}), c(8)});
  TermRef hi = Term::make(Op::Mod, {Term::make(Op::Add, {centre, c(3)}), c(8)});
  for (int64_t row : {0, 1, 7, 63, 64, 200, 511, -5}) {
    const Env env{row, 0, 60, 0};
    const int64_t wantLo = evalInt(*lo, env), wantHi = evalInt(*hi, env);
    EXPECT_EQ(evalIntShared(*lo, env), wantLo); // (no scope open)
    const SharedTermsScope scope;
    EXPECT_EQ(evalIntShared(*lo, env), wantLo) << row;
    EXPECT_EQ(evalIntShared(*hi, env), wantHi) << row;
    const Env next{row + 1, 0, 60, 0}; // the same nodes at another row
    EXPECT_EQ(evalIntShared(*hi, next), evalInt(*hi, next)) << row + 1;
    EXPECT_EQ(evalIntShared(*lo, env), wantLo) << row;
    {
      const SharedTermsScope inner;
      const Env other{row, 0, 1000, 0};
      EXPECT_EQ(evalIntShared(*hi, other), evalInt(*hi, other)) << row;
    }
    EXPECT_EQ(evalIntShared(*hi, env), wantHi) << row;
  }
}

/// A TermTape's roots read back through evalIntShared equal evalInt on
/// random terms of i and n (wrapping products, floor division and modulo of
/// negative values, min and max of three), at the scope's variables only;
/// a root that divides by a term (which may be 0 at some row) is left out of
/// the tape and still evaluates; scopes nest.
TEST(Generators, TermTapesEvaluateLikeTheirTerms) {
  auto i = Term::var(Op::VarI), n = Term::var(Op::VarN);
  auto c = [](int64_t v) { return Term::constant(v); };
  std::mt19937_64 rng(43);
  std::function<TermRef(int)> random = [&](int depth) -> TermRef {
    const int pick = static_cast<int>(rng() % (depth <= 0 ? 3 : 12));
    switch (pick) {
    case 0: return i;
    case 1: return n;
    case 2: return c(static_cast<int64_t>(rng() % 41) - 20);
    case 3: return Term::make(Op::Add, {random(depth - 1), random(depth - 1)});
    case 4: return Term::make(Op::Sub, {random(depth - 1), random(depth - 1)});
    case 5: return Term::make(Op::Mul, {random(depth - 1), rng() % 2 ? i : c(static_cast<int64_t>(rng() % 7) - 3)});
    case 6: return Term::make(Op::Div, {random(depth - 1), c(static_cast<int64_t>(rng() % 9) + 1)});
    case 7: return Term::make(Op::Mod, {random(depth - 1), c(static_cast<int64_t>(rng() % 9) + 1)});
    case 8: return Term::make(Op::Neg, {random(depth - 1)});
    case 9: return Term::make(Op::Abs, {random(depth - 1)});
    case 10: return Term::make(Op::Min, {random(depth - 1), random(depth - 1), random(depth - 1)});
    default: return Term::make(Op::Max, {random(depth - 1), random(depth - 1)});
    }
  };
  std::vector<TermRef> roots;
  for (int k = 0; k < 24; ++k)
    roots.push_back(random(5));
  roots.push_back(roots[3]); // (a root twice: held once)
  const TermRef byTerm = Term::make(Op::Div, {n, Term::make(Op::Sub, {i, c(3)})}); // (an error below row 4)
  roots.push_back(byTerm);
  const TermTape tape(roots);
  EXPECT_LE(tape.roots(), 25u);
  EXPECT_GE(tape.roots(), 20u); // (only the constants folded away would be missing)
  for (int64_t row : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{-7}, int64_t{63}, int64_t{4095},
                      int64_t{1} << 40, -(int64_t{1} << 50)}) {
    const Env env{row, 0, 4096, 0};
    const TermTape::Scope scope(tape, env);
    size_t found = 0;
    for (size_t k = 0; k + 1 < roots.size(); ++k) {
      ASSERT_EQ(evalIntShared(*roots[k], env), evalInt(*roots[k], env)) << "root " << k << " row " << row;
      int64_t value = 0; // (the scope's own answer, as the row evaluator reads it)
      if (scope.lookup(*roots[k], value)) {
        ++found;
        ASSERT_EQ(value, evalInt(*roots[k], env)) << "root " << k << " row " << row;
      }
    }
    EXPECT_GE(found, tape.roots()); // (every root on the tape answers; one is listed twice)
    int64_t unused = 0;
    EXPECT_FALSE(scope.lookup(*byTerm, unused)); // (not on the tape)
    EXPECT_FALSE(scope.lookup(*Term::make(Op::Add, {i, n}), unused)); // (no root of it)
    const Env other{row + 1, 0, 4096, 0}; // not the scope's variables: evaluated
    EXPECT_EQ(evalIntShared(*roots[0], other), evalInt(*roots[0], other));
    {
      const Env inner{row * 3 + 1, 0, 100, 0};
      const TermTape::Scope nested(tape, inner);
      EXPECT_EQ(evalIntShared(*roots[1], inner), evalInt(*roots[1], inner)) << row;
    }
    EXPECT_EQ(evalIntShared(*roots[1], env), evalInt(*roots[1], env)) << row;
    if (row > 3) { // (a divisor below 1 is an error)
      EXPECT_EQ(evalIntShared(*byTerm, env), evalInt(*byTerm, env)) << row;
    }
  }
  const Env three{3, 0, 4096, 0};
  const TermTape::Scope scope(tape, three); // (no division by zero: that root is not on the tape)
  EXPECT_EQ(evalIntShared(*roots[0], three), evalInt(*roots[0], three));
}

} // namespace
} // namespace attnc
