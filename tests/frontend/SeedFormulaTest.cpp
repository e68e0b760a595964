//===- SeedFormulaTest.cpp - The seeds' formulas, written out by hand -----===//
//
// nnz, keys per row and B x B tile counts of the Sparse Transformer's fixed
// and strided patterns computed with plain loops straight from the paper's
// definitions (no attnc code), compared with attnc's analyses of
// patterns/fixed.attn and patterns/strided.attn.
//
//===----------------------------------------------------------------------===//
#include "attnc/compiler/Analysis.h"
#include "attnc/compiler/Canonicalize.h"
#include "attnc/compiler/Driver.h"
#include "attnc/compiler/RowEvaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

namespace attnc {
namespace {

using Attends = std::function<bool(int64_t i, int64_t j)>;

// Fixed: A1 = {j : floor(j/l) == floor(i/l)}, A2 = {j : j mod l in {l-c..l-1}},
// S_i = (A1 u A2) n {j <= i}.
Attends fixedSeed(int64_t l, int64_t c) {
  return [=](int64_t i, int64_t j) { return j <= i && (j / l == i / l || j % l >= l - c); };
}

// Strided: A1 = {max(0, i-l) .. i}, A2 = {j <= i : (i - j) mod l == 0}.
Attends stridedSeed(int64_t l) {
  return [=](int64_t i, int64_t j) {
    return j <= i && (j >= std::max<int64_t>(0, i - l) || (i - j) % l == 0);
  };
}

struct Expected {
  int64_t nnz = 0, minRow = INT64_MAX, maxRow = 0, full = 0, partial = 0, empty = 0;
};

Expected byHand(const Attends &attends, int64_t n, int64_t b) {
  Expected e;
  for (int64_t i = 0; i < n; ++i) {
    int64_t row = 0;
    for (int64_t j = 0; j < n; ++j)
      row += attends(i, j);
    e.nnz += row;
    e.minRow = std::min(e.minRow, row);
    e.maxRow = std::max(e.maxRow, row);
  }
  for (int64_t r = 0; r < n; r += b)
    for (int64_t c = 0; c < n; c += b) {
      int64_t in = 0, area = 0;
      for (int64_t i = r; i < std::min(n, r + b); ++i)
        for (int64_t j = c; j < std::min(n, c + b); ++j) {
          ++area;
          in += attends(i, j);
        }
      ++(in == 0 ? e.empty : in == area ? e.full : e.partial);
    }
  return e;
}

struct SeedCase {
  const char *file;
  int64_t n, l, c, block;
};

void PrintTo(const SeedCase &s, std::ostream *os) {
  *os << s.file << " n=" << s.n << " l=" << s.l << " c=" << s.c << " B=" << s.block;
}

class SeedFormula : public ::testing::TestWithParam<SeedCase> {};

TEST_P(SeedFormula, AnalysesMatchTheHandWrittenFormula) {
  const SeedCase &sc = GetParam();
  bool fixed = std::string(sc.file) == "fixed";
  Frontend fe;
  ASSERT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + sc.file + ".attn"));
  SemaOptions sema;
  sema.defines.push_back({"l", sc.l});
  if (fixed)
    sema.defines.push_back({"c", sc.c});
  ASSERT_TRUE(fe.analyze(sema));
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  ASSERT_EQ(ir.heads.size(), 1u);
  ir::RowStats rows = ir::analyzeRows(ir.heads[0].set, sc.n);
  ir::TileStats tiles = ir::analyzeTiles(ir.heads[0].set, sc.n, sc.block, sc.block);
  Expected e = byHand(fixed ? fixedSeed(sc.l, sc.c) : stridedSeed(sc.l), sc.n, sc.block);
  EXPECT_EQ(rows.nnz, e.nnz);
  EXPECT_EQ(rows.minRow, e.minRow);
  EXPECT_EQ(rows.maxRow, e.maxRow);
  EXPECT_DOUBLE_EQ(rows.mean, double(e.nnz) / double(sc.n));
  EXPECT_EQ(rows.emptyRows, 0);
  EXPECT_EQ(rows.leaks, 0);
  EXPECT_EQ(tiles.full, e.full);
  EXPECT_EQ(tiles.partial, e.partial);
  EXPECT_EQ(tiles.empty, e.empty);
}

INSTANTIATE_TEST_SUITE_P(Seeds, SeedFormula,
                         ::testing::Values(SeedCase{"fixed", 512, 128, 8, 64},
                                           SeedCase{"fixed", 1000, 128, 8, 64},
                                           SeedCase{"fixed", 333, 32, 4, 16},
                                           SeedCase{"fixed", 100, 128, 8, 64},
                                           SeedCase{"fixed", 257, 16, 16, 7},
                                           SeedCase{"fixed", 300, 64, 1, 32},
                                           SeedCase{"strided", 512, 64, 0, 64},
                                           SeedCase{"strided", 1000, 128, 0, 64},
                                           SeedCase{"strided", 77, 8, 0, 5},
                                           SeedCase{"strided", 300, 17, 0, 32}));

TEST(SeedSemantics, FixedSummaryColumnsAre120To127ForL128C8) {
  Frontend fe;
  ASSERT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/fixed.attn"));
  ASSERT_TRUE(fe.analyze({}));
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  ir::RowStats rows = ir::analyzeRows(ir.heads[0].set, 256);
  // Row 200 (block 1) sees its own block up to itself, 128..200, and the
  // summary columns 120..127 of block 0: 73 + 8 keys.
  EXPECT_EQ(byHand(fixedSeed(128, 8), 256, 64).nnz, rows.nnz);
  int64_t row200 = 0;
  for (int64_t j = 0; j < 256; ++j)
    row200 += fixedSeed(128, 8)(200, j);
  EXPECT_EQ(row200, 73 + 8);
}

TEST(SeedSemantics, StridedBandHasLPlusOneKeys) {
  // A1 = {max(0, i - l) .. i} includes i itself: 129 keys for l = 128; A2 adds
  // the keys 300 - 128k below the band: only 44 for i = 300.
  Frontend fe;
  ASSERT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/strided.attn"));
  ASSERT_TRUE(fe.analyze({}));
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  ir::RowEvaluator eval(ir.heads[0].set, 400);
  EXPECT_EQ(cardinality(eval.row(300, 300 - 128, 301)), 129);
  EXPECT_EQ(eval.row(300, 0, 300 - 128), (IntervalSet{{44, 45}}));
}

} // namespace
} // namespace attnc
