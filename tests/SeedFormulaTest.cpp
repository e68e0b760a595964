//===- SeedFormulaTest.cpp - The seeds' formulas, written out by hand -----===//
//
// The Sparse Transformer's merged "fixed" and "strided" patterns, computed
// here with plain integer arithmetic straight from their definitions (no
// attnc code), against attnc's analyses of patterns/fixed.attn and
// patterns/strided.attn:
//
//   fixed:   A1 = {j : floor(j/l) == floor(i/l)}, A2 = {j : j mod l in {l-c..l-1}}
//   strided: A1 = {max(0, i-l) .. i},            A2 = {j : (i-j) mod l == 0}
//   S_i = (A1 u A2) n {j <= i}
//
// Small lengths are counted pair by pair from the definitions; large ones by
// per-row closed forms, which are first checked against the pair counts.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Analysis.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "attnc/plan/RowEvaluator.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace attnc {
namespace {

enum class Seed { Fixed, Strided };

struct Params {
  Seed seed;
  int64_t l, c; ///< c: fixed only
};

// All quantities below are non-negative, so C++ '/' and '%' are floor
// division and the mathematical modulo.

bool attends(const Params &p, int64_t i, int64_t j) {
  if (j > i)
    return false;
  if (p.seed == Seed::Fixed)
    return j / p.l == i / p.l || j % p.l >= p.l - p.c;
  return j >= std::max<int64_t>(0, i - p.l) || (i - j) % p.l == 0;
}

int64_t overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

/// Keys of row i inside [lo, hi), by closed form (0 <= lo <= hi).
int64_t keysIn(const Params &p, int64_t i, int64_t lo, int64_t hi) {
  const int64_t l = p.l;
  if (p.seed == Seed::Fixed) {
    // Own block up to i, plus the summary columns of the earlier blocks.
    int64_t start = i / l * l;
    auto summary = [&](int64_t x) { // j in [0, x) with j mod l >= l - c
      return x / l * p.c + std::max<int64_t>(0, x % l - (l - p.c));
    };
    return overlap(start, i + 1, lo, hi) + summary(std::min(hi, start)) -
           summary(std::min(lo, start));
  }
  // The band, plus the keys i - k*l below it.
  int64_t bandLo = std::max<int64_t>(0, i - l);
  int64_t r = i % l;
  auto congruent = [&](int64_t x) { // j in [0, x) with j mod l == i mod l
    return x <= r ? 0 : (x - r - 1) / l + 1;
  };
  return overlap(bandLo, i + 1, lo, hi) + congruent(std::min(hi, bandLo)) -
         congruent(std::min(lo, bandLo));
}

struct Expected {
  int64_t nnz = 0, minRow = INT64_MAX, maxRow = 0, emptyRows = 0;
  int64_t full = 0, partial = 0, empty = 0;
};

/// Adds one row's key count to the row statistics.
void addRow(Expected &e, int64_t row) {
  e.nnz += row;
  e.minRow = std::min(e.minRow, row);
  e.maxRow = std::max(e.maxRow, row);
  e.emptyRows += row == 0;
}

/// Pair by pair, from the definitions.
Expected byPairs(const Params &p, int64_t n, int64_t b) {
  Expected e;
  for (int64_t i = 0; i < n; ++i) {
    int64_t row = 0;
    for (int64_t j = 0; j < n; ++j)
      row += attends(p, i, j);
    addRow(e, row);
  }
  for (int64_t r0 = 0; r0 < n; r0 += b)
    for (int64_t c0 = 0; c0 < n; c0 += b) {
      int64_t in = 0, area = 0;
      for (int64_t i = r0; i < std::min(n, r0 + b); ++i)
        for (int64_t j = c0; j < std::min(n, c0 + b); ++j) {
          ++area;
          in += attends(p, i, j);
        }
      ++(in == 0 ? e.empty : in == area ? e.full : e.partial);
    }
  return e;
}

/// Row by row and tile by tile, from the closed forms.
Expected byRows(const Params &p, int64_t n, int64_t b) {
  Expected e;
  for (int64_t i = 0; i < n; ++i)
    addRow(e, keysIn(p, i, 0, n));
  for (int64_t r0 = 0; r0 < n; r0 += b)
    for (int64_t c0 = 0; c0 < n; c0 += b) {
      int64_t c1 = std::min(n, c0 + b), in = 0, area = 0;
      for (int64_t i = r0; i < std::min(n, r0 + b); ++i) {
        in += keysIn(p, i, c0, c1);
        area += c1 - c0;
      }
      ++(in == 0 ? e.empty : in == area ? e.full : e.partial);
    }
  return e;
}

ir::SetRef loadSeed(const Params &p) {
  Frontend fe;
  const char *file = p.seed == Seed::Fixed ? "fixed" : "strided";
  EXPECT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + file + ".attn"));
  SemaOptions sema;
  sema.defines.push_back({"l", p.l});
  if (p.seed == Seed::Fixed)
    sema.defines.push_back({"c", p.c});
  EXPECT_TRUE(fe.analyze(sema));
  if (fe.patterns().empty())
    return nullptr;
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  EXPECT_EQ(ir.heads.size(), 1u);
  return ir.heads.front().set;
}

struct SeedCase {
  Params params;
  int64_t n, block;
};

void PrintTo(const SeedCase &s, std::ostream *os) {
  *os << (s.params.seed == Seed::Fixed ? "fixed" : "strided") << " n=" << s.n << " l=" << s.params.l
      << " c=" << s.params.c << " B=" << s.block;
}

class SeedFormula : public ::testing::TestWithParam<SeedCase> {};

TEST_P(SeedFormula, RowClosedFormAgreesWithThePairDefinition) {
  // Checks this file's own closed forms before they are trusted at scale.
  const SeedCase &sc = GetParam();
  for (int64_t i = 0; i < sc.n; ++i)
    for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, sc.n}, {sc.n / 3, sc.n / 2 + 5}}) {
      hi = std::min(hi, sc.n);
      int64_t count = 0;
      for (int64_t j = lo; j < hi; ++j)
        count += attends(sc.params, i, j);
      ASSERT_EQ(keysIn(sc.params, i, lo, hi), count)
          << "row " << i << " [" << lo << ", " << hi << ")";
    }
}

TEST_P(SeedFormula, RowStatisticsMatchTheDefinition) {
  const SeedCase &sc = GetParam();
  ir::SetRef set = loadSeed(sc.params);
  ASSERT_NE(set, nullptr);
  Expected e = byPairs(sc.params, sc.n, sc.block);
  ir::RowStats rows = ir::analyzeRows(set, sc.n);
  EXPECT_EQ(rows.nnz, e.nnz);
  EXPECT_EQ(rows.minRow, e.minRow);
  EXPECT_EQ(rows.maxRow, e.maxRow);
  EXPECT_DOUBLE_EQ(rows.mean, double(e.nnz) / double(sc.n));
  EXPECT_EQ(rows.emptyRows, e.emptyRows);
  EXPECT_EQ(rows.emptyRows, 0);
  EXPECT_EQ(rows.leaks, 0) << "both seeds are causal";
}

TEST_P(SeedFormula, TileCountsMatchTheDefinition) {
  const SeedCase &sc = GetParam();
  ir::SetRef set = loadSeed(sc.params);
  ASSERT_NE(set, nullptr);
  Expected e = byPairs(sc.params, sc.n, sc.block);
  ir::TileStats tiles = ir::analyzeTiles(set, sc.n, sc.block, sc.block);
  EXPECT_EQ(tiles.full, e.full);
  EXPECT_EQ(tiles.partial, e.partial);
  EXPECT_EQ(tiles.empty, e.empty);
}

TEST_P(SeedFormula, KeysOfEveryRowMatchTheRowFormula) {
  const SeedCase &sc = GetParam();
  ir::SetRef set = loadSeed(sc.params);
  ASSERT_NE(set, nullptr);
  ir::RowEvaluator eval(set, sc.n);
  for (int64_t i = 0; i < sc.n; ++i)
    ASSERT_EQ(cardinality(eval.row(i)), keysIn(sc.params, i, 0, sc.n)) << "row " << i;
}

constexpr Params fixedP(int64_t l, int64_t c) { return {Seed::Fixed, l, c}; }
constexpr Params stridedP(int64_t l) { return {Seed::Strided, l, 0}; }

// Lengths that are multiples of l and of B, ragged ones, n < l, n < B, c = l,
// c = 1, l = 1.
INSTANTIATE_TEST_SUITE_P(
    Seeds, SeedFormula,
    ::testing::Values(SeedCase{fixedP(128, 8), 512, 64}, SeedCase{fixedP(128, 8), 1000, 64},
                      SeedCase{fixedP(128, 8), 100, 64}, SeedCase{fixedP(32, 4), 333, 16},
                      SeedCase{fixedP(16, 4), 130, 7}, SeedCase{fixedP(16, 16), 257, 7},
                      SeedCase{fixedP(64, 1), 300, 32}, SeedCase{fixedP(16, 4), 64, 100},
                      SeedCase{fixedP(16, 4), 1, 16}, SeedCase{fixedP(1, 1), 40, 8},
                      SeedCase{stridedP(64), 512, 64}, SeedCase{stridedP(128), 1000, 64},
                      SeedCase{stridedP(128), 100, 64}, SeedCase{stridedP(8), 77, 5},
                      SeedCase{stridedP(17), 300, 32}, SeedCase{stridedP(1), 50, 4},
                      SeedCase{stridedP(8), 2, 16}));

TEST(SeedFormulaAtScale, NnzAtSixtyFiveThousandKeysMatchesTheRowFormula) {
  for (Params p : {fixedP(128, 8), stridedP(128), fixedP(100, 7), stridedP(256)}) {
    const int64_t n = 65536;
    ir::SetRef set = loadSeed(p);
    ASSERT_NE(set, nullptr);
    Expected e = byRows(p, n, n);
    ir::RowStats rows = ir::analyzeRows(set, n);
    EXPECT_EQ(rows.nnz, e.nnz) << "l=" << p.l;
    EXPECT_EQ(rows.minRow, e.minRow) << "l=" << p.l;
    EXPECT_EQ(rows.maxRow, e.maxRow) << "l=" << p.l;
  }
}

TEST(SeedFormulaAtScale, TilesOfARaggedLongSequenceMatchTheRowFormula) {
  for (Params p : {fixedP(128, 8), stridedP(128)})
    for (int64_t block : {64, 48}) {
      const int64_t n = 16411; // not a multiple of l or of either block
      ir::SetRef set = loadSeed(p);
      ASSERT_NE(set, nullptr);
      Expected e = byRows(p, n, block);
      ir::TileStats tiles = ir::analyzeTiles(set, n, block, block);
      EXPECT_EQ(tiles.full, e.full) << "l=" << p.l << " B=" << block;
      EXPECT_EQ(tiles.partial, e.partial) << "l=" << p.l << " B=" << block;
      EXPECT_EQ(tiles.empty, e.empty) << "l=" << p.l << " B=" << block;
    }
}

TEST(SeedSemantics, FixedRowSeesItsBlockAndEarlierSummaryColumns) {
  // l = 128, c = 8: row 200 (block 1) attends 128..200 and 120..127.
  ir::SetRef set = loadSeed(fixedP(128, 8));
  ASSERT_NE(set, nullptr);
  ir::RowEvaluator eval(set, 256);
  EXPECT_EQ(eval.row(200), (IntervalSet{{120, 201}}));
  // Row 300 (block 2) attends 256..300 and 120..127, 248..255.
  ir::RowEvaluator longer(set, 400);
  EXPECT_EQ(longer.row(300), (IntervalSet{{120, 128}, {248, 301}}));
}

TEST(SeedSemantics, StridedBandHoldsLPlusOneKeys) {
  // A1 = {max(0, i - 128) .. i} includes i: 129 keys for i = 300; A2 adds
  // 300 - 256 = 44 below the band (172 = 300 - 128 is the band's edge).
  ir::SetRef set = loadSeed(stridedP(128));
  ASSERT_NE(set, nullptr);
  ir::RowEvaluator eval(set, 400);
  EXPECT_EQ(eval.row(300), (IntervalSet{{44, 45}, {172, 301}}));
}

} // namespace
} // namespace attnc
