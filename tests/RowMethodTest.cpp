//===- RowMethodTest.cpp - Segment statistics against row by row ----------===//
//
// analyzeRows and analyzeTiles count from periodic segments (RowMethod::
// Segments) unless a set needs the row-by-row path. ClosedFormTest checks them
// against the brute-force oracle at n <= 130; here they are checked against
// RowMethod::RowByRow, the IntervalSet reference, at lengths the oracle cannot
// reach: below every block (1, 2, 3), ragged for every block and stripe of the
// sources (1000, 4099) and a multiple of them (4096), for every library
// pattern, patterns whose heads differ, and stripes and residue classes of
// different periods combined.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Analysis.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"

#include <gtest/gtest.h>

namespace attnc {
namespace {

struct Source {
  std::string label;
  std::string file; ///< library pattern name, or empty for `text`
  std::string text;
  std::vector<Define> defines;
};

void PrintTo(const Source &s, std::ostream *os) { *os << s.label; }

std::vector<Source> sources() {
  std::vector<Source> out;
  for (const char *name : {"axial", "bigbird", "causal", "dilated", "fixed", "fixed_multihead",
                           "fixed_subblocks", "full", "local", "longformer", "strided",
                           "strided_multihead"})
    out.push_back({std::string(name) + "_default", name, "", {}});
  const std::vector<Source> more = {
      {"axial_W7", "axial", "", {{"W", 7}}},
      {"bigbird_b5_g1_r2", "bigbird", "", {{"b", 5}, {"g", 1}, {"r", 2}}},
      {"dilated_w5_d3", "dilated", "", {{"w", 5}, {"d", 3}}},
      {"fixed_l12_c5", "fixed", "", {{"l", 12}, {"c", 5}}},
      {"fixed_subblocks_l24_c3_H5", "fixed_subblocks", "", {{"l", 24}, {"c", 3}, {"H", 5}}},
      {"strided_l9", "strided", "", {{"l", 9}}},
      {"strided_multihead_l33", "strided_multihead", "", {{"l", 33}}},
      {"residue_per_head", "",
       "pattern p { heads 3 attend { j : (i - j) % (h + 2) == 0 && j <= i } }", {}},
      {"random_per_head", "",
       "pattern p { heads 2 attend random_blocks(5, h + 1, 11) & { j : j <= i } }", {}},
      {"stripe_per_head", "",
       "pattern p { heads 3 attend { j : j % (h + 3) == 1 || abs(i - j) <= h } }", {}},
      {"stripes_of_two_periods", "", "pattern p { attend { j : j % 6 < 2 || j % 4 == 1 } }", {}},
      {"residue_and_stripe", "",
       "pattern p { causal attend { j : (i - j) % 5 == 0 || j % 3 == 2 } }", {}},
      {"residue_minus_stripe", "",
       "pattern p { attend { j : (i - j) % 4 == 1 && !(j % 6 == 0) } }", {}},
      {"stripe_above_the_diagonal", "", "pattern p { attend { j : j % 7 >= 5 && j > i - 3 } }",
       {}},
      {"rows_if_and_lists", "",
       "pattern p { attend { j : i % 3 == 0 && j % 5 == 0 } | { 0, i, i + 7 } }", {}},
      {"empty_rows", "", "pattern p { attend { j : j % 8 == 3 && j < i - 2 } }", {}},
  };
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

struct Loaded {
  std::unique_ptr<Frontend> frontend;
  ir::PatternIR ir;
  bool ok = false;
};

Loaded load(const Source &s) {
  Loaded l{std::make_unique<Frontend>(), {}, false};
  bool parsed =
      s.file.empty()
          ? l.frontend->parseString(s.label + ".attn", s.text)
          : l.frontend->parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + s.file + ".attn");
  bool checked = parsed && l.frontend->analyze({s.defines});
  for (const dsl::Diagnostic &d : l.frontend->diags().diagnostics())
    ADD_FAILURE() << l.frontend->diags().format(d);
  if (checked && !l.frontend->patterns().empty()) {
    l.ir = ir::canonicalizePattern(l.frontend->patterns().front());
    l.ok = true;
  }
  return l;
}

void expectSameRows(const ir::RowStats &fast, const ir::RowStats &slow) {
  EXPECT_EQ(fast.n, slow.n);
  EXPECT_EQ(fast.nnz, slow.nnz);
  EXPECT_EQ(fast.minRow, slow.minRow);
  EXPECT_EQ(fast.maxRow, slow.maxRow);
  EXPECT_DOUBLE_EQ(fast.mean, slow.mean);
  EXPECT_EQ(fast.emptyRows, slow.emptyRows);
  EXPECT_EQ(fast.emptyWitness, slow.emptyWitness);
  EXPECT_EQ(fast.leaks, slow.leaks);
  EXPECT_EQ(fast.leakWitness, slow.leakWitness);
}

void expectSameTiles(const ir::TileStats &fast, const ir::TileStats &slow) {
  EXPECT_EQ(fast.blockRows, slow.blockRows);
  EXPECT_EQ(fast.blockCols, slow.blockCols);
  EXPECT_EQ(fast.full, slow.full);
  EXPECT_EQ(fast.partial, slow.partial);
  EXPECT_EQ(fast.empty, slow.empty);
  EXPECT_EQ(fast.executedPairs, slow.executedPairs);
  EXPECT_DOUBLE_EQ(fast.waste, slow.waste);
}

class SegmentStats : public ::testing::TestWithParam<std::tuple<Source, int64_t>> {};

TEST_P(SegmentStats, SegmentRowStatisticsEqualRowByRow) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_TRUE(l.ok);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    ir::RowStats fast = ir::analyzeRows(head.set, n);
    EXPECT_EQ(fast.method, ir::RowMethod::Segments) << ir::printSet(*head.set);
    expectSameRows(fast, ir::analyzeRows(head.set, n, ir::RowMethod::RowByRow));
  }
}

TEST_P(SegmentStats, SegmentTileCountsEqualRowByRow) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_TRUE(l.ok);
  std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 64}, {16, 4}, {3, 8}, {128, 32}, {7, 5}};
  if (n <= 1000)
    shapes.push_back({1, 1});
  for (const ir::PatternIR::Head &head : l.ir.heads)
    for (auto [br, bc] : shapes) {
      SCOPED_TRACE(std::to_string(br) + "x" + std::to_string(bc));
      ir::TileStats fast = ir::analyzeTiles(head.set, n, br, bc);
      EXPECT_EQ(fast.method, ir::RowMethod::Segments);
      expectSameTiles(fast, ir::analyzeTiles(head.set, n, br, bc, ir::RowMethod::RowByRow));
    }
}

TEST_P(SegmentStats, OnePassGivesWhatTheSeparateAnalysesGive) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_TRUE(l.ok);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    auto [rows, tiles] = ir::analyzeRowsAndTiles(head.set, n, 32, 16);
    expectSameRows(rows, ir::analyzeRows(head.set, n, ir::RowMethod::RowByRow));
    expectSameTiles(tiles, ir::analyzeTiles(head.set, n, 32, 16, ir::RowMethod::RowByRow));
  }
}

std::string paramName(const ::testing::TestParamInfo<SegmentStats::ParamType> &info) {
  return std::get<0>(info.param).label + "_n" + std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Patterns, SegmentStats,
                         ::testing::Combine(::testing::ValuesIn(sources()),
                                            ::testing::Values(1, 2, 3, 1000, 4096, 4099)),
                         paramName);

/// Sets that segments cannot count: they are counted row by row, with the
/// oracle's numbers.
class RowByRowFallback : public ::testing::TestWithParam<Source> {};

TEST_P(RowByRowFallback, IsTakenAndMatchesTheOracle) {
  const Source &source = GetParam();
  Loaded l = load(source);
  ASSERT_TRUE(l.ok);
  const int64_t n = 101;
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    std::vector<char> mask = oracle::denseMask(*head.term, n);
    auto [rows, tiles] = ir::analyzeRowsAndTiles(head.set, n, 8, 16);
    EXPECT_EQ(rows.method, ir::RowMethod::RowByRow);
    EXPECT_EQ(tiles.method, ir::RowMethod::RowByRow);
    expectSameRows(rows, oracle::rowStats(mask, n));
    expectSameTiles(tiles, oracle::tileStats(mask, n, 8, 16));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sets, RowByRowFallback,
    ::testing::Values(
        Source{"predicate", "", "pattern p { attend { j : (i * j) % 7 == 1 } }", {}},
        // lcm(65521, 65519) keys per period: past the segments' limits.
        Source{"coprime_large_stripes", "",
               "pattern p { attend { j : j % 65521 < 40 && j % 65519 >= 30 } }", {}}),
    [](const ::testing::TestParamInfo<Source> &info) { return info.param.label; });

} // namespace
} // namespace attnc
