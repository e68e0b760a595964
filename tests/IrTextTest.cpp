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
                                           "longformer", "bigbird", "axial"));

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
