//===- IrTextTest.cpp - The canonical IR survives its text form -----------===//
//
// The runtime rebuilds a kernel's plan from the IR text in its file, so the
// text must round-trip every library pattern exactly (same text, same plan,
// same row blocks at several n), and malformed or hostile text must be
// rejected with a message, never accepted or crashed on.
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "attnc/plan/IrText.h"
#include "attnc/plan/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace attnc {
namespace {

ir::PatternIR compileFile(const std::string &name, std::vector<Define> defines = {}) {
  Frontend fe;
  EXPECT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn"));
  EXPECT_TRUE(fe.analyze({defines}));
  return ir::canonicalizePattern(fe.patterns().front());
}

ir::PatternIR compileSource(const std::string &source) {
  Frontend fe;
  EXPECT_TRUE(fe.parseString("test.attn", source));
  EXPECT_TRUE(fe.analyze({}));
  return ir::canonicalizePattern(fe.patterns().front());
}

class IrTextRoundTrip : public ::testing::TestWithParam<const char *> {};

TEST_P(IrTextRoundTrip, GivesTheSameTextPlanAndBlocks) {
  ir::PatternIR original = compileFile(GetParam());
  std::string text = ir::writeIr(original);
  ir::PatternIR read;
  std::string error;
  ASSERT_TRUE(ir::readIr(text, read, error)) << error << "\n" << text;
  EXPECT_EQ(ir::writeIr(read), text);
  EXPECT_EQ(read.name, original.name);
  EXPECT_EQ(read.numHeads, original.numHeads);
  EXPECT_EQ(read.headsDeclared, original.headsDeclared);
  EXPECT_EQ(read.params, original.params);
  plan::Plan a = plan::buildPlan(original), b = plan::buildPlan(read);
  EXPECT_EQ(plan::printPlan(a), plan::printPlan(b));
  for (int64_t n : {1, 37, 300, 1024}) {
    auto sa = plan::planStats(a, n), sb = plan::planStats(b, n);
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t h = 0; h < sa.size(); ++h) {
      EXPECT_EQ(sa[h].useful, sb[h].useful) << "n=" << n << " head set " << h;
      EXPECT_EQ(sa[h].executed, sb[h].executed) << "n=" << n << " head set " << h;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Library, IrTextRoundTrip,
                         ::testing::Values("fixed", "strided", "fixed_multihead", "strided_multihead",
                                           "fixed_subblocks", "causal", "full", "local", "dilated",
                                           "longformer", "bigbird", "axial", "alibi_local", "capped_fixed",
                                           "sink_window", "t5_bias", "natten2d", "natten2d_tiled", "sta3d",
                                           "swin"));

namespace {
/// The distinct term nodes under a set's bounds, conditions and elements.
void collectTerms(const Term &t, std::set<const Term *> &out) {
  if (out.insert(&t).second)
    for (const TermRef &a : t.args())
      collectTerms(*a, out);
}
void collectTerms(const ir::SetNode &s, std::set<const Term *> &out) {
  for (const TermRef &t : {s.loTerm, s.hiTerm, s.cond})
    if (t)
      collectTerms(*t, out);
  for (const TermRef &e : s.elems)
    collectTerms(*e, out);
  for (const ir::SetRef &c : s.children)
    collectTerms(*c, out);
}
} // namespace

// The text writes a subterm out at every use; read back, equal subterms are
// one node again (the row evaluators keep a row's values per node): tiled
// NATTEN's bounds were 380 nodes read back, against 90 compiled.
TEST(IrText, ReadsEqualSubtermsAsOneNode) {
  ir::PatternIR original = compileFile("natten2d_tiled");
  ir::PatternIR read;
  std::string error;
  ASSERT_TRUE(ir::readIr(ir::writeIr(original), read, error)) << error;
  std::set<const Term *> a, b;
  collectTerms(*original.heads[0].set, a);
  collectTerms(*read.heads[0].set, b);
  EXPECT_LE(b.size(), a.size());
  EXPECT_LT(b.size(), 64u);
}

TEST(IrText, RoundTripsPredicatesListsAndKeyRanges) {
  ir::PatternIR original = compileSource(R"(pattern p {
    param g = 3
    attend { j : (i * 7 + j * 3) % 5 == 1 } | { 0, 2, i / 2 } | { j : i - 5 <= j && j <= n / 2 }
      | { j : i < g }
  })");
  std::string text = ir::writeIr(original);
  ir::PatternIR read;
  std::string error;
  ASSERT_TRUE(ir::readIr(text, read, error)) << error << "\n" << text;
  EXPECT_EQ(ir::writeIr(read), text);
  EXPECT_NE(text.find("(predicate"), std::string::npos) << text;
  EXPECT_NE(text.find("(list"), std::string::npos) << text;
}

struct Bad {
  const char *text;
  const char *message;
};

class IrTextRejects : public ::testing::TestWithParam<Bad> {};

TEST_P(IrTextRejects, MalformedText) {
  ir::PatternIR out;
  std::string error;
  EXPECT_FALSE(ir::readIr(GetParam().text, out, error));
  EXPECT_NE(error.find(GetParam().message), std::string::npos) << error;
}

INSTANTIATE_TEST_SUITE_P(
    Hostile, IrTextRejects,
    ::testing::Values(
        Bad{"", "no pattern"},
        Bad{"attnc-ir 2\n", "expected 'attnc-ir 1'"},
        Bad{"attnc-ir 1\npattern p heads=0 declared=0 causal=0\nhead 0 (all)\n", "malformed pattern line"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (bogus)\n", "unknown set generator"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (block-diag 0)\n", "size >= 1"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (stripe 8 5 3)\n", "stripe"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (residue 8 9)\n", "residue"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (predicate (div i 0))\n", "divisor"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (predicate (add i j))\n",
            "needs a condition"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (union (all))\n", "1 operands"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (band 0 1\n", "expected ')'"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 5 (all)\n", "bad head index"},
        Bad{"attnc-ir 1\npattern p heads=2 declared=1 causal=0\nhead 0 (all)\n", "served by 0 sets"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (row-if (lt i j))\n",
            "without j"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (key-range (add j 1) _)\n",
            "j-free integer"}));

// ---- Score modifiers --------------------------------------------------------

TEST(IrTextScores, LibraryScoresRoundTripAsEqualTrees) {
  for (const char *name : {"alibi_local", "capped_fixed", "sink_window", "t5_bias"}) {
    ir::PatternIR original = compileFile(name);
    ASSERT_TRUE(original.score || original.sink) << name;
    const std::string text = ir::writeIr(original);
    ir::PatternIR read;
    std::string error;
    ASSERT_TRUE(ir::readIr(text, read, error)) << error << "\n" << text;
    EXPECT_EQ(ir::writeIr(read), text);
    ASSERT_EQ(bool(read.score), bool(original.score)) << name;
    ASSERT_EQ(bool(read.sink), bool(original.sink)) << name;
    if (original.score)
      EXPECT_TRUE(structurallyEqual(*read.score, *original.score)) << text;
    if (original.sink)
      EXPECT_TRUE(structurallyEqual(*read.sink, *original.sink)) << text;
    ASSERT_EQ(read.inputs.size(), original.inputs.size());
    for (size_t k = 0; k < read.inputs.size(); ++k)
      EXPECT_EQ(read.inputs[k].isFloat, original.inputs[k].isFloat);
    // Scores never make the sets read data.
    EXPECT_FALSE(read.readsData()) << name;
  }
}

TEST(IrTextScores, ExactSyntax) {
  EXPECT_EQ(ir::writeIr(compileFile("capped_fixed")),
            "attnc-ir 1\n"
            "pattern capped_fixed heads=1 declared=0 causal=1\n"
            "param l 64\nparam c 8\nparam cap 20\n"
            "head 0 (intersect (union (block-diag 64) (stripe 64 56 63)) (band - 0))\n"
            "score (mul (const 20) (tanh (div s (const 20))))\n");
  const std::string alibi = ir::writeIr(compileFile("alibi_local"));
  EXPECT_NE(alibi.find("\ninput slope float h\n"), std::string::npos) << alibi;
  EXPECT_NE(alibi.find("\nscore (add s (mul (input 0 h) (sub j i)))\n"), std::string::npos) << alibi;
  const std::string sink = ir::writeIr(compileFile("sink_window"));
  EXPECT_NE(sink.find("\nsink (input 0 h)\n"), std::string::npos) << sink;
  const std::string t5 = ir::writeIr(compileFile("t5_bias"));
  EXPECT_NE(t5.find("\ninput rel float h 32\n"), std::string::npos) << t5;
  // The int form of an input is unchanged.
  const std::string lsh = ir::writeIr(compileFile("lsh"));
  EXPECT_NE(lsh.find("\ninput b0 n\n"), std::string::npos) << lsh;
}

TEST(IrTextScores, DoublesRoundTripBitForBit) {
  for (double v : {0.1, 1e-3, -2.5e300, 1.0 / 3.0, 5e-324, -0.0, 123456789.123456789}) {
    ScoreRef e = ScoreExpr::make(ScoreOp::Mul, {ScoreExpr::make(ScoreOp::S, {}, false),
                                                ScoreExpr::constant(v, false)},
                                 false);
    std::string error;
    ScoreRef back = parseScoreText(scoreText(*e), 0, error);
    ASSERT_TRUE(back) << error << " " << scoreText(*e);
    EXPECT_TRUE(structurallyEqual(*e, *back)) << scoreText(*e);
    EXPECT_EQ(std::signbit(back->args[1]->value), std::signbit(v));
  }
}

TEST(IrTextScores, ScoresMakeDistinctKernels) {
  const std::string plain = ir::writeIr(compileSource("pattern p { causal attend { j : i - j < 8 } }"));
  const std::string capped =
      ir::writeIr(compileSource("pattern p { causal attend { j : i - j < 8 } score 30 * tanh(s / 30) }"));
  const std::string capped2 =
      ir::writeIr(compileSource("pattern p { causal attend { j : i - j < 8 } score 20 * tanh(s / 20) }"));
  EXPECT_NE(plain, capped);
  EXPECT_NE(capped, capped2);
  // Everything before the score line is the same: the set is untouched.
  EXPECT_EQ(capped.substr(0, plain.size()), plain);
}

TEST(IrTextScores, ParseScoreTextRefusesGarbage) {
  for (const char *bad :
       {"", "(", ")", "s s", "(add s", "(add s)", "(add s s s)", "(foo s)", "(const)", "(const abc)",
        "(const 1 2)", "(input 5 h)", "(input -1 h)", "(input 0)", "(input 0 (const 0.5))", "(idiv i 0)",
        "(idiv i j)", "(mod i (sub j 1))", "(mod (const 1) 2)", "(div i j)", "(where s s)", "(tanh)",
        "99999999999999999999", "9007199254740993", "x", "(s)", "(i 1)", "(min s)", "((add s s))",
        "(add s s))", "(floor)", "(not)", "#t"}) {
    std::string error;
    EXPECT_FALSE(parseScoreText(bad, 1, error)) << "'" << bad << "' was accepted";
    EXPECT_FALSE(error.empty()) << bad;
  }
  std::string deep;
  for (int k = 0; k < 100000; ++k)
    deep += "(neg ";
  std::string error;
  EXPECT_FALSE(parseScoreText(deep, 0, error));
  EXPECT_NE(error.find("deeper than"), std::string::npos) << error;
}

INSTANTIATE_TEST_SUITE_P(
    Scores, IrTextRejects,
    ::testing::Values(
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (all)\nscore (add s\n", "unclosed '(add'"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput b n\nhead 0 (all)\nscore (input 0 i)\n",
            "reads int input 'b'"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput r float h 4\nhead 0 (all)\n"
            "score (input 0 h)\n",
            "with 1 indices"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput z float h\nhead 0 (all)\nsink (add s (input 0 h))\n",
            "sink that uses s or j"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (all)\nscore s\nscore s\n", "second score"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput z float i\nhead 0 (all)\n",
            "not a term of n and the head count"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput z float (sub h 1)\nhead 0 (all)\n",
            "may be 0"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput z h\nhead 0 (all)\n",
            "not a term of n"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput z float 1 2 3 4\nhead 0 (all)\n",
            "1 to 3 dimensions"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\ninput z float n\nhead 0 (class 0)\n",
            "set reads float input 'z'"},
        Bad{"attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (all)\nscore (input 0 h)\n",
            "not declared"}));

// ---- evalScore ---------------------------------------------------------------

double eval(const ir::PatternIR &ir, const ScoreRef &e, ScoreEnv env, const std::vector<FloatInput> &inputs) {
  env.inputs = &inputs;
  return evalScore(*e, env, ir.inputNames());
}

TEST(EvalScore, LibraryScoresAtHandComputedPoints) {
  {
    ir::PatternIR ir = compileFile("alibi_local");
    const float slope[] = {0.5f, 0.25f};
    std::vector<FloatInput> in{{slope, {2}}};
    EXPECT_DOUBLE_EQ(eval(ir, ir.score, {.s = 1.5, .i = 10, .j = 4, .h = 1, .n = 64}, in), 1.5 + 0.25 * -6);
    EXPECT_DOUBLE_EQ(eval(ir, ir.score, {.s = -2, .i = 7, .j = 7, .h = 0, .n = 64}, in), -2);
    EXPECT_THROW(eval(ir, ir.score, {.s = 0, .i = 1, .j = 0, .h = 2, .n = 4}, in), InputError);
  }
  {
    ir::PatternIR ir = compileFile("capped_fixed");
    for (double s : {-1000.0, -30.0, 0.0, 1.0, 30.0, 1e9})
      EXPECT_DOUBLE_EQ(eval(ir, ir.score, {.s = s}, {}), 20 * std::tanh(s / 20)) << s;
  }
  {
    ir::PatternIR ir = compileFile("sink_window");
    const float z[] = {-1.0f, 3.5f, 0.25f};
    std::vector<FloatInput> in{{z, {3}}};
    EXPECT_DOUBLE_EQ(eval(ir, ir.sink, {.i = 5, .h = 1, .n = 9}, in), 3.5);
    EXPECT_FALSE(mentions(*ir.sink, ScoreOp::S));
    EXPECT_FALSE(mentions(*ir.sink, ScoreOp::J));
  }
}

/// T5's relative_position_bucket(bidirectional=False), written out as T5
/// does in float64.
int64_t t5Bucket(int64_t i, int64_t j, int64_t buckets = 32, int64_t maxDistance = 128) {
  const int64_t d = std::max<int64_t>(i - j, 0), exact = buckets / 2;
  if (d < exact)
    return d;
  const auto large = exact + static_cast<int64_t>(std::log(double(d) / exact) /
                                                  std::log(double(maxDistance) / exact) * (buckets - exact));
  return std::min(large, buckets - 1);
}

TEST(EvalScore, T5BucketsMatchTheReference) {
  ir::PatternIR ir = compileFile("t5_bias");
  // rel[h, b] = 1000 h + b, so that the score minus s is the bucket.
  const int64_t heads = 2, buckets = 32;
  std::vector<float> rel(heads * buckets);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t b = 0; b < buckets; ++b)
      rel[h * buckets + b] = float(1000 * h + b);
  std::vector<FloatInput> in{{rel.data(), {heads, buckets}}};
  EXPECT_EQ(inputDim(ir.inputs[0], 0, 100, heads), heads);
  EXPECT_EQ(inputDim(ir.inputs[0], 1, 100, heads), buckets);
  for (int64_t d = 0; d <= 3000; ++d)
    for (int64_t h = 0; h < heads; ++h) {
      const double v = eval(ir, ir.score, {.s = 0.5, .i = d + 3, .j = 3, .h = h, .n = 4000}, in);
      ASSERT_EQ(v, 0.5 + 1000 * h + t5Bucket(d + 3, 3)) << "d=" << d << " h=" << h;
    }
  // By hand: 15 and 16 exact; 32: 16 + floor(log 2 / log 8 * 16) = 21; 127: 31; 128 and on: 31.
  for (auto [d, bucket] : {std::pair{15, 15}, {16, 16}, {32, 21}, {127, 31}, {128, 31}, {10000, 31}})
    EXPECT_EQ(eval(ir, ir.score, {.s = 0, .i = d, .j = 0, .h = 0, .n = 20000}, in), bucket) << d;
}

TEST(EvalScore, IntegersAreExactAndFloatsIeee) {
  auto score = [](const std::string &expr, const std::string &decls = "") {
    return compileSource("pattern p { " + decls + " attend { j : true } score " + expr + " }");
  };
  // Integer floor division and non-negative modulo; a float division is true division.
  ir::PatternIR a = score("s + (i - j) / 3 * 100 + (i - j) % 3");
  EXPECT_EQ(eval(a, a.score, {.s = 0, .i = 0, .j = 4}, {}), -200 + 2);
  ir::PatternIR b = score("(i - j) / 3.0");
  EXPECT_DOUBLE_EQ(eval(b, b.score, {.i = 0, .j = 4}, {}), -4.0 / 3.0);
  // log(0) = -inf, x / 0.0 = inf, 0 / 0.0 = NaN.
  ir::PatternIR c = score("s + log(i - j)");
  EXPECT_EQ(eval(c, c.score, {.s = 1, .i = 3, .j = 3}, {}), -INFINITY);
  ir::PatternIR d = score("s / (i - j)");
  EXPECT_EQ(eval(d, d.score, {.s = 1, .i = 3, .j = 3}, {}), INFINITY);
  EXPECT_TRUE(std::isnan(eval(d, d.score, {.s = 0, .i = 3, .j = 3}, {})));
  // floor takes a float to an integer, rounding down.
  ir::PatternIR f = score("s + floor(-0.5 * i) * 10");
  EXPECT_EQ(eval(f, f.score, {.s = 0, .i = 3}, {}), -20);
  // where evaluates only the branch it takes: the read outside [0, 4) is not made.
  ir::PatternIR w = score("s + where(i - j < 4 && j <= i, t[i - j], -1.5)", "input t : float[4]");
  const float t[] = {1, 2, 3, 4};
  std::vector<FloatInput> in{{t, {4}}};
  EXPECT_EQ(eval(w, w.score, {.s = 0, .i = 9, .j = 7}, in), 3);
  EXPECT_EQ(eval(w, w.score, {.s = 0, .i = 9, .j = 1}, in), -1.5);
  ir::PatternIR r = score("s + t[i - j]", "input t : float[4]");
  try {
    eval(r, r.score, {.s = 0, .i = 9, .j = 1}, in);
    ADD_FAILURE() << "no InputError";
  } catch (const InputError &e) {
    EXPECT_NE(std::string(e.what()).find("'t' at [8]"), std::string::npos) << e.what();
  }
}

TEST(EvalScore, ParametersFoldIntoConstants) {
  ir::PatternIR ir = compileFile("capped_fixed");
  ASSERT_EQ(ir.score->op, ScoreOp::Mul);
  EXPECT_EQ(ir.score->args[0]->op, ScoreOp::Const);
  EXPECT_FALSE(ir.score->args[0]->isInt); // (promoted: a float product)
  ir::PatternIR t5 = compileFile("t5_bias");
  // log(max_distance / exact) is one constant.
  EXPECT_NE(printScore(*t5.score, t5.inputNames()).find("2.0794415416798357"), std::string::npos)
      << printScore(*t5.score, t5.inputNames());
  EXPECT_EQ(printScore(*ir.score, ir.inputNames()), "20.0 * tanh(s / 20.0)");
}

TEST(IrText, RejectsNestingBeyondItsLimitWithoutOverflowingTheStack) {
  std::string deep = "attnc-ir 1\npattern p heads=1 declared=0 causal=0\nhead 0 (predicate ";
  for (int k = 0; k < 100000; ++k)
    deep += "(not ";
  ir::PatternIR out;
  std::string error;
  EXPECT_FALSE(ir::readIr(deep, out, error));
  EXPECT_NE(error.find("deeper than"), std::string::npos) << error;
}

} // namespace
} // namespace attnc
