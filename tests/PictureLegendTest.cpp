//===- PictureLegendTest.cpp - Legends name the author's sets -------------===//
//
// `attnc show` and `attnc.show` label each colour with what the pattern's
// author wrote: a let's name and definition, a set written inline as its
// text. The names travel from the AST to the layers through the source
// ranges that Sema and canonicalisation keep, so these tests pin down that
// the ranges still point at the let (not at the use, not at `causal`) for
// the library's patterns and for the shapes a researcher writes first.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Picture.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"

#include <gtest/gtest.h>

namespace attnc {
namespace {

struct Loaded {
  Frontend fe;
  ir::PatternIR ir;
};

std::unique_ptr<Loaded> loadFile(const std::string &name) {
  auto out = std::make_unique<Loaded>();
  EXPECT_TRUE(out->fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn"));
  EXPECT_TRUE(out->fe.analyze({}));
  if (!out->fe.patterns().empty())
    out->ir = ir::canonicalizePattern(out->fe.patterns().front());
  return out;
}

std::unique_ptr<Loaded> loadSource(const std::string &source) {
  auto out = std::make_unique<Loaded>();
  EXPECT_TRUE(out->fe.parseString("test.attn", source));
  EXPECT_TRUE(out->fe.analyze({}));
  if (!out->fe.patterns().empty())
    out->ir = ir::canonicalizePattern(out->fe.patterns().front());
  return out;
}

std::vector<std::string> labels(const Loaded &l, std::optional<int64_t> head = std::nullopt) {
  std::vector<std::string> out;
  for (const ir::Layer &layer : ir::layersOf(l.ir, head, ir::SetNames(l.fe, l.ir.name)))
    out.push_back(layer.label);
  return out;
}

struct LibraryLegend {
  const char *pattern;
  std::vector<std::string> labels;
};

class PictureLegend : public ::testing::TestWithParam<LibraryLegend> {};

TEST_P(PictureLegend, NamesEachLetWithItsDefinition) {
  std::unique_ptr<Loaded> l = loadFile(GetParam().pattern);
  EXPECT_EQ(labels(*l), GetParam().labels);
}

INSTANTIATE_TEST_SUITE_P(
    Library, PictureLegend,
    ::testing::Values(
        LibraryLegend{"fixed", {"A1  { j : j / l == i / l }", "A2  { j : j % l >= l - c }"}},
        LibraryLegend{"longformer",
                      {"window  { j : abs(i - j) <= w }", "to_global  { j : j < g }",
                       "from_global  { j : i < g }"}},
        LibraryLegend{"bigbird",
                      {"window  { j : i / b - 1 <= j / b && j / b <= i / b + 1 }",
                       "to_global  { j : j < g * b }", "from_global  { j : i < g * b }",
                       "random_blocks(b, r, seed)"}},
        LibraryLegend{"fixed_multihead",
                      {"head 0: { j : j / l == i / l }", "head 1: { j : j % l >= l - c }"}},
        LibraryLegend{"strided", {"A1  { max(0, i - l) .. i }", "A2  { j : (i - j) % l == 0 }"}}),
    [](const ::testing::TestParamInfo<LibraryLegend> &info) { return info.param.pattern; });

TEST(PictureLegend, OneHeadOfAMultiHeadPatternIsLabelledWithItsSet) {
  std::unique_ptr<Loaded> l = loadFile("fixed_multihead");
  EXPECT_EQ(labels(*l, 1), std::vector<std::string>{"{ j : j % l >= l - c }"});
}

TEST(PictureLegend, OneHeadOfAHeadDependentLetNamesItsLets) {
  std::unique_ptr<Loaded> l = loadFile("fixed_subblocks");
  std::vector<std::string> got = labels(*l, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "own  { j : j / l == i / l }");
  EXPECT_EQ(got[1].rfind("summary  { j : ", 0), 0u) << got[1];
}

TEST(PictureLegend, InlineSetShowsItsSourceText) {
  std::unique_ptr<Loaded> l = loadSource(R"(pattern p {
    let near = { j : abs(i - j) <= 2 }
    attend near | { j : j % 8 == 0 }
  })");
  EXPECT_EQ(labels(*l), (std::vector<std::string>{"near  { j : abs(i - j) <= 2 }",
                                                  "{ j : j % 8 == 0 }"}));
}

TEST(PictureLegend, CausalWholeSetIsLabelledWithTheAttendedLet) {
  std::unique_ptr<Loaded> l = loadSource(R"(pattern p {
    causal
    let recent = { j : i - j < 16 }
    attend recent
  })");
  EXPECT_EQ(labels(*l), std::vector<std::string>{"recent  { j : i - j < 16 }"});
}

TEST(PictureLegend, DefinitionOverSeveralLinesBecomesOneLineWithoutComments) {
  std::unique_ptr<Loaded> l = loadSource(R"(pattern p {
    let band = { j :   i - 4 <= j   # the last four keys
                 && j <= i }
    let first = { 0 }
    attend band | first
  })");
  EXPECT_EQ(labels(*l), (std::vector<std::string>{"band  { j : i - 4 <= j && j <= i }",
                                                  "first  { 0 }"}));
}

TEST(PictureLegend, LongInlineSetIsShortenedWithAnEllipsis) {
  std::unique_ptr<Loaded> l = loadSource(R"(pattern p {
    attend { j : j < 2 } | { j : (i * 7 + j * 3) % 5 == 1 && (i + j) % 3 == 0 && i - j <= 100 && j - i <= 100 }
  })");
  std::vector<std::string> got = labels(*l);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "{ j : j < 2 }");
  const std::string ellipsis = "\u2026";
  ASSERT_GE(got[1].size(), ellipsis.size());
  EXPECT_EQ(got[1].substr(got[1].size() - ellipsis.size()), ellipsis) << got[1];
  EXPECT_EQ(got[1].rfind("{ j : (i * 7 + j * 3) % 5 == 1 && ", 0), 0u) << got[1];
  // Every other character is ASCII: the cut keeps kMaxLabelText code points.
  EXPECT_EQ(got[1].size() - ellipsis.size() + 1, ir::SetNames::kMaxLabelText) << got[1];
}

TEST(PictureLegend, OperandOfAUnionLetSaysWhichLet) {
  std::unique_ptr<Loaded> l = loadSource(R"(pattern p {
    let near = { j : abs(i - j) <= 2 }
    let both = near | { j : j < 4 }
    attend both
  })");
  EXPECT_EQ(labels(*l), (std::vector<std::string>{"near  { j : abs(i - j) <= 2 }",
                                                  "{ j : j < 4 }  (in both)"}));
}

TEST(PictureLegend, WithoutTheSourceLabelsAreCanonicalForms) {
  std::unique_ptr<Loaded> l = loadFile("fixed");
  std::vector<std::string> got;
  for (const ir::Layer &layer : ir::layersOf(l->ir, std::nullopt))
    got.push_back(layer.label);
  EXPECT_EQ(got, (std::vector<std::string>{"block-diag j / 128 == i / 128",
                                           "stripe j % 128 in [120, 127]"}));
}

} // namespace
} // namespace attnc
