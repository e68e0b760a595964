//===- PlanTest.cpp - The fused plan covers each head exactly once --------===//
//
// For every library pattern and several n: the pieces of each head are
// pairwise disjoint and their union is the head's set (checked against the
// brute-force oracle), every mask bit of every generated row block names a
// pair of its piece, every pair of a piece is in exactly one block, and
// executed >= useful.
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"
#include "attnc/plan/Plan.h"
#include "attnc/plan/RowEvaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <stdexcept>

namespace attnc {
namespace {

struct PlanCase {
  const char *file;            ///< a library pattern, or the label of `source`
  std::vector<Define> defines;
  int64_t n;
  const char *source = nullptr; ///< inline pattern text instead of the file
};

void PrintTo(const PlanCase &c, std::ostream *os) { *os << c.file << " n=" << c.n; }

class PlanCoverage : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanCoverage, PiecesPartitionTheHeadAndTilesCoverEachPairOnce) {
  const PlanCase &pc = GetParam();
  Frontend fe;
  ASSERT_TRUE(pc.source ? fe.parseString(std::string(pc.file) + ".attn", pc.source)
                        : fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + pc.file + ".attn"));
  ASSERT_TRUE(fe.analyze({pc.defines}));
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  for (int64_t rows : {32, 7, 64})
    for (int64_t cols : {32, 5}) {
      plan::Plan plan = plan::buildPlan(ir, {rows, cols});
      const int64_t n = pc.n;
      std::vector<plan::HeadStats> stats = plan::planStats(plan, n);
      ASSERT_EQ(stats.size(), ir.heads.size());
      plan::BlockShape shape;
      plan::BlockTiles b;
      std::vector<plan::HeadShapes> cached;
      ASSERT_TRUE(plan::buildShapes(plan, n, false, size_t{1} << 30, cached));
      for (size_t h = 0; h < ir.heads.size(); ++h) {
        std::vector<char> expected = oracle::denseMask(*ir.heads[h].term, n);
        std::vector<int> covered(static_cast<size_t>(n * n), 0);
        int64_t useful = 0;
        for (size_t p = 0; p < plan.heads[h].pieces.size(); ++p) {
          const plan::Piece &piece = plan.heads[h].pieces[p];
          EXPECT_GE(stats[h].pieces[p].executed, stats[h].pieces[p].useful);
          for (int64_t c = 0; c < plan::numClasses(piece, n); ++c) {
            plan::BlockSource src(plan, piece, n, c);
            int64_t nextRow = 0;
            for (int64_t k = 0; k < src.numBlocks(); ++k) {
              src.build(k, shape);
              b.expand(shape);
              const plan::BlockShape &same = cached[h].pieces[p][static_cast<size_t>(c)][static_cast<size_t>(k)];
              EXPECT_TRUE(same.keys == shape.keys && same.partial == shape.partial &&
                          same.useful == shape.useful)
                  << "buildShapes and BlockSource::build agree";
              ASSERT_EQ(b.firstRow, nextRow) << "blocks tile the rows in order";
              ASSERT_TRUE(b.rows >= 1 && b.rows <= rows);
              nextRow += b.rows;
              ASSERT_EQ(b.keys.size(), b.masks.size());
              ASSERT_TRUE(std::is_sorted(b.keys.begin(), b.keys.end()));
              int64_t blockPairs = 0;
              for (size_t key = 0; key < b.keys.size(); ++key) {
                ASSERT_NE(b.masks[key], 0u) << "a key no row of the block has";
                ASSERT_EQ(b.masks[key] & ~b.allRows, 0u);
                for (int32_t r = 0; r < b.rows; ++r) {
                  if (!(b.masks[key] >> r & 1))
                    continue;
                  int64_t i = src.query(b.firstRow + r);
                  int64_t j = b.keys[key];
                  ASSERT_TRUE(i < n && j < n);
                  ++covered[i * n + j];
                  ++blockPairs;
                }
              }
              EXPECT_EQ(shape.useful, blockPairs);
              useful += blockPairs;
              // The class-major rows the executor copies the keys into.
              plan::BlockTiles local;
              local.expand(shape, true);
              ASSERT_EQ(local.keys.size(), b.keys.size());
              for (size_t key = 0; key < b.keys.size(); ++key) {
                ASSERT_GE(local.keys[key], 0);
                ASSERT_LT(local.keys[key], src.keyRows());
                ASSERT_EQ(src.keyClass() + local.keys[key] * src.rowStride(), b.keys[key]);
              }
            }
          }
        }
        EXPECT_EQ(stats[h].useful, useful);
        for (int64_t x = 0; x < n * n; ++x)
          ASSERT_EQ(covered[x], expected[x] ? 1 : 0)
              << "pair (" << x / n << ", " << x % n << ") tiles " << rows << "x" << cols;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Library, PlanCoverage,
    ::testing::Values(PlanCase{"fixed", {{"l", 16}, {"c", 4}}, 100}, PlanCase{"fixed", {}, 130},
                      PlanCase{"strided", {{"l", 8}}, 100}, PlanCase{"strided", {{"l", 8}}, 7},
                      PlanCase{"strided_multihead", {{"l", 5}}, 64},
                      PlanCase{"fixed_subblocks", {{"l", 16}, {"c", 2}, {"H", 4}}, 70},
                      PlanCase{"local", {{"w", 5}}, 100}, PlanCase{"dilated", {{"w", 3}, {"d", 2}}, 61},
                      PlanCase{"longformer", {{"w", 4}, {"g", 2}}, 100},
                      PlanCase{"bigbird", {{"b", 8}, {"g", 1}, {"r", 2}}, 90},
                      PlanCase{"axial", {{"W", 8}}, 77}, PlanCase{"causal", {}, 40},
                      PlanCase{"full", {}, 33},
                      PlanCase{"natten2d", {{"H", 8}, {"W", 8}, {"K", 3}}, 64},
                      PlanCase{"natten2d", {{"H", 5}, {"W", 7}, {"K", 3}}, 35},
                      PlanCase{"natten2d", {{"H", 5}, {"W", 7}, {"K", 3}}, 50},
                      PlanCase{"natten2d", {{"H", 12}, {"W", 11}, {"K", 5}}, 132},
                      PlanCase{"sta3d", {{"T", 4}, {"H", 4}, {"W", 4}, {"KT", 2}, {"KH", 2}, {"KW", 2},
                                         {"TT", 1}, {"TH", 1}, {"TW", 1}}, 64},
                      PlanCase{"sta3d", {{"T", 4}, {"H", 4}, {"W", 6}, {"KT", 2}, {"KH", 4}, {"KW", 4},
                                         {"TT", 2}, {"TH", 1}, {"TW", 2}}, 100},
                      PlanCase{"swin", {{"H", 6}, {"W", 6}, {"M", 3}, {"S", 1}}, 36},
                      PlanCase{"swin", {{"H", 7}, {"W", 9}, {"M", 3}, {"S", 2}}, 70},
                      // A 8 x 12 canvas in tiles of 2 x 4, kernel 3 (its coordinates in mixed
                      // radix, one piece), and 12 tokens past it.
                      PlanCase{"natten2d_tiled", {{"H", 8}, {"W", 12}, {"K", 3}, {"TH", 2}, {"TW", 4}}, 108}),
    [](const ::testing::TestParamInfo<PlanCase> &info) {
      return std::string(info.param.file) + "_n" + std::to_string(info.param.n) + "_" +
             std::to_string(info.index);
    });

// Generators whose block bounds are not exact (row-if and block-diag
// blocks that straddle a boundary, key ranges and lists that move with i,
// differences of them, the per-key predicate), each where a row block sees
// rows that disagree.
INSTANTIATE_TEST_SUITE_P(
    BlockBounds, PlanCoverage,
    ::testing::Values(
        PlanCase{"row_if", {}, 90, "pattern p { attend { j : j < 3 } | { j : i < 40 } }"},
        PlanCase{"row_if_minus", {}, 90, "pattern p { causal attend { j : true } - { j : i % 5 == 0 } }"},
        PlanCase{"block_diag_11", {}, 70, "pattern p { attend { j : j / 11 == i / 11 } }"},
        PlanCase{"key_range_moving", {}, 80, "pattern p { attend { j : 2 * j <= i && 3 * j >= i } }"},
        PlanCase{"list", {}, 50, "pattern p { attend { 0, i / 2, n - 1 } }"},
        PlanCase{"band_minus_stripe", {}, 75, "pattern p { attend { j : abs(i - j) <= 9 } - { j : j % 4 == 1 } }"},
        PlanCase{"stripe_minus_band", {}, 75, "pattern p { causal attend { j : j % 6 < 2 } - { j : i - j <= 7 } }"},
        PlanCase{"predicate", {}, 45, "pattern p { attend { j : (i * j) % 7 == 1 } }"},
        PlanCase{"residue_mixed", {}, 66, "pattern p { causal attend { j : (i - j) % 5 == 2 } | { j : j / 8 == i / 8 } }"},
        // Key ranges bounded by interval arithmetic on their terms over a
        // block's rows: min, modulo (within and across a period), abs,
        // negative products, n.
        PlanCase{"key_range_min_mod", {}, 83, "pattern p { attend { max(0, i - 7) .. min(n - 1, i + i % 5) } }"},
        PlanCase{"key_range_mod_period", {}, 95, "pattern p { attend { i % 40 .. i } }"},
        PlanCase{"key_range_abs", {}, 90, "pattern p { attend { abs(i - 40) / 3 .. n - 1 - i / 2 } }"},
        PlanCase{"key_range_negative", {}, 77, "pattern p { attend { -2 * (i / 9) + 30 .. 3 * (i % 4) + i / 2 } }"},
        PlanCase{"key_range_large", {}, 61, "pattern p { attend { (i % 3) * 1000000000000 - 1000000000000 .. n - 1 } }"},
        // Random blocks of 5 rows: row blocks inside one draw the same keys,
        // the others straddle two draws.
        PlanCase{"random_blocks", {}, 71, "pattern p { attend random_blocks(5, 2, 7) | { j : j == i } }"},
        // Rows conditions true on a prefix or a suffix (decided from a
        // block's first and last rows).
        PlanCase{"row_if_suffix", {}, 90, "pattern p { attend { j : j < 3 } | { j : !(i < 37) } }"},
        PlanCase{"row_if_shifted", {}, 90, "pattern p { attend { j : j < 3 } | { j : 50 > i + 7 } }"},
        // Translation-invariant pieces with enough blocks for moved copies:
        // periods 11, 6 and 1 against rows per block 7, 32 and 64.
        PlanCase{"block_diag_11_long", {}, 400, "pattern p { causal attend { j : j / 11 == i / 11 } }"},
        PlanCase{"stripe_long", {}, 400, "pattern p { causal attend { j : j % 6 < 2 } | { j : i - j <= 7 } }"},
        PlanCase{"key_range_long", {}, 300, "pattern p { attend { i - 9 .. i + 3 } - { j : (i - j) % 4 == 0 } }"},
        PlanCase{"residue_band_long", {}, 400, "pattern p { causal attend { j : (i - j) % 3 == 0 && i - j > 20 } }"},
        PlanCase{"residue_offset_long", {}, 301, "pattern p { attend { j : (i - j) % 4 == 3 && abs(i - j) < 90 } }"}),
    [](const ::testing::TestParamInfo<PlanCase> &info) { return std::string(info.param.file); });

/// Blocks moved from a translation-invariant piece's references are the
/// blocks built directly, at lengths past the oracle's reach: every block
/// of every piece and class of every library pattern, ragged n, three block
/// heights.
TEST(Plan, MovedBlocksEqualDirectlyBuiltOnes) {
  int moved = 0;
  for (const char *file : {"fixed", "strided", "local", "longformer", "bigbird", "causal", "full", "dilated",
                           "axial", "fixed_subblocks", "strided_multihead", "fixed_multihead"}) {
    Frontend fe;
    ASSERT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + file + ".attn"));
    ASSERT_TRUE(fe.analyze({}));
    ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
    for (int64_t rows : {7, 32, 64}) {
      plan::Plan plan = plan::buildPlan(ir, {rows, 64});
      for (int64_t n : {1000, 4099}) {
        plan::BlockShape a, b;
        plan::BlockTiles ta, tb;
        for (const plan::HeadPlan &hp : plan.heads)
          for (const plan::Piece &piece : hp.pieces)
            for (int64_t c = 0; c < plan::numClasses(piece, n); ++c) {
              plan::BlockSource fast(plan, piece, n, c), slow(plan, piece, n, c, false);
              ASSERT_EQ(slow.references(), 0);
              moved += fast.references() > 0;
              for (int64_t k = 0; k < fast.numBlocks(); ++k) {
                fast.build(k, a);
                slow.build(k, b);
                ta.expand(a);
                tb.expand(b);
                ASSERT_TRUE(ta.keys == tb.keys && ta.masks == tb.masks && a.useful == b.useful &&
                            ta.firstRow == tb.firstRow && ta.rows == tb.rows)
                    << file << " n=" << n << " rows=" << rows << " class " << c << " block " << k;
              }
            }
      }
    }
  }
  EXPECT_GT(moved, 100) << "bands, blocks and residue classes are moved, not rebuilt";
}

TEST(Plan, TranslationPeriods) {
  auto periods = [](const char *text) {
    Frontend fe;
    EXPECT_TRUE(fe.parseString("p.attn", text));
    EXPECT_TRUE(fe.analyze({}));
    // (A named plan: a range-for over a temporary's member would outlive the temporary.)
    const plan::Plan built = plan::buildPlan(ir::canonicalizePattern(fe.patterns().front()), {32, 64});
    std::vector<int64_t> out;
    for (const plan::Piece &piece : built.heads[0].pieces)
      out.push_back(piece.period);
    return out;
  };
  EXPECT_EQ(periods("pattern p { causal attend { j : i - j <= 9 } }"), std::vector<int64_t>{1});
  EXPECT_EQ(periods("pattern p { causal attend { j : j / 128 == i / 128 } | { j : j % 128 >= 120 } }"),
            (std::vector<int64_t>{128, 128}));
  // Strided: the band, and the residue piece's rows without their class.
  EXPECT_EQ(periods("pattern p { causal attend { max(0, i - 8) .. i } | { j : (i - j) % 8 == 0 } }"),
            (std::vector<int64_t>{1, 1}));
  // Global tokens and rows, random blocks, a predicate: not translates.
  EXPECT_EQ(periods("pattern p { attend { j : abs(i - j) <= 4 } | { j : j < 2 } | { j : i < 2 } }"),
            (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(periods("pattern p { attend random_blocks(8, 2, 1) }"), std::vector<int64_t>{0});
  EXPECT_EQ(periods("pattern p { attend { j : (i * j) % 7 == 1 } }"), std::vector<int64_t>{0});
}

TEST(Plan, SeedPatternsGetTheirDisjointPiecesAndRelayout) {
  Frontend fe;
  ASSERT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/strided.attn"));
  ASSERT_TRUE(fe.analyze({}));
  plan::Plan plan = plan::buildPlan(ir::canonicalizePattern(fe.patterns().front()));
  ASSERT_EQ(plan.heads.size(), 1u);
  ASSERT_EQ(plan.heads[0].pieces.size(), 2u);
  EXPECT_EQ(plan.heads[0].pieces[0].strategy, plan::Strategy::RowTiles);
  EXPECT_EQ(plan.heads[0].pieces[1].strategy, plan::Strategy::ResidueRelayout);
  EXPECT_EQ(plan.heads[0].pieces[1].modulus, 128);
  // Close to the useful work at n = 4096 (tile-granular peers: ~15x).
  EXPECT_LE(plan::executedOverUseful(plan::planStats(plan, 4096)), 1.35);
}

/// The IR of library pattern `file` with `defines` over its parameters'
/// defaults (a file that does not check throws: the test fails).
ir::PatternIR irOf(const char *file, const std::vector<Define> &defines = {}) {
  Frontend fe;
  if (!fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + file + ".attn") || !fe.analyze({defines}) ||
      fe.patterns().empty())
    throw std::runtime_error(std::string("patterns/") + file + ".attn does not check");
  return ir::canonicalizePattern(fe.patterns().front());
}

/// A neighbourhood on a canvas in tiles is one piece: its comparisons in
/// mixed radix are unions inside the intersection, and split into pieces
/// (as `causal & (local | global)` is) each piece's blocks would run the
/// keys their tiles share once more.
TEST(Plan, TiledNeighbourhoodsRunAsOnePiece) {
  plan::Plan plan = plan::buildPlan(irOf("natten2d_tiled")); // (7 x 7 on 64 x 64 in tiles of 8 x 8)
  ASSERT_EQ(plan.heads.size(), 1u);
  EXPECT_EQ(plan.heads[0].pieces.size(), 1u);
  EXPECT_FALSE(ir::hasPredicate(*plan.heads[0].pieces[0].set)) << "the coordinates in closed form";
  // 32-row blocks of 4 tile rows x 8 columns need 10 x 14 keys for 49 per
  // row (2.60 at 64 x 64); two pieces ran 3.63.
  EXPECT_LE(plan::executedOverUseful(plan::planStats(plan, 4096)), 2.7);
}

/// The layout's blocks, their rows and keys taken through its order, cover
/// each pair of the pattern once.
void expectEachPairOnce(const plan::Layout &layout, const ir::PatternIR &ir, int64_t n) {
  const std::vector<char> expected = oracle::denseMask(*ir.heads[0].term, n);
  std::vector<int> covered(static_cast<size_t>(n * n), 0);
  plan::BlockShape shape;
  plan::BlockTiles b;
  for (const plan::Piece &piece : layout.plan.heads[0].pieces) {
    plan::BlockSource src(layout.plan, piece, n, 0);
    for (int64_t k = 0; k < src.numBlocks(); ++k) {
      src.build(k, shape);
      b.expand(shape);
      for (size_t key = 0; key < b.keys.size(); ++key)
        for (int32_t r = 0; r < b.rows; ++r)
          if (b.masks[key] >> r & 1) {
            const int64_t i = layout.order->order[static_cast<size_t>(b.firstRow + r)];
            const int64_t j = layout.order->order[static_cast<size_t>(b.keys[key])];
            ++covered[static_cast<size_t>(i * n + j)];
          }
    }
  }
  for (int64_t x = 0; x < n * n; ++x)
    ASSERT_EQ(covered[static_cast<size_t>(x)], expected[static_cast<size_t>(x)] ? 1 : 0)
        << "pair (" << x / n << ", " << x % n << ")";
}

/// The fused backend runs a grid pattern in tiles when that executes at most
/// 3/4 of raster order's pairs, or with its queries grouped by equal keys
/// where that executes fewer still (Swin's windows; NATTEN's rows past the
/// canvas, which all have its last window) (tests/runtime GradientTest's
/// GridLayout runs these): the plan's blocks, their rows and keys taken
/// through the order, cover each pair of the pattern once.
TEST(Plan, GridPatternsRunInTilesWhereTheyExecuteLess) {
  struct Grid {
    const char *file;
    std::vector<Define> defines;
    int64_t width, height, tileRows; // tileRows 0: grouped by equal keys on the whole canvas, else either
  };
  const Grid grids[] = {{"natten2d", {{"H", 12}, {"W", 16}, {"K", 5}}, 16, 12, 8},
                        {"natten2d", {{"H", 24}, {"W", 24}, {"K", 3}}, 24, 24, 8},
                        {"swin", {{"H", 16}, {"W", 32}, {"M", 8}, {"S", 4}}, 32, 16, 0}};
  for (const Grid &g : grids) {
    const ir::PatternIR ir = irOf(g.file, g.defines);
    const plan::Plan plan = plan::buildPlan(ir);
    EXPECT_FALSE(plan::tiledLayout(plan, 5 * g.width + 3)) << g.file << ": not a whole number of canvas rows";
    for (int64_t rows : {8, 16, 24}) {
      const int64_t n = rows * g.width;
      SCOPED_TRACE(std::string(g.file) + " n=" + std::to_string(n));
      const std::optional<plan::Layout> layout = plan::tiledLayout(plan, n);
      ASSERT_TRUE(layout);
      EXPECT_EQ(layout->width, g.width);
      if (g.tileRows > 0 && rows <= g.height)
        EXPECT_EQ(layout->tileRows, g.tileRows);
      else if (g.tileRows == 0 && rows == g.height)
        EXPECT_EQ(layout->tileRows, 0);
      else // (past the canvas, or Swin on part of it: either)
        EXPECT_TRUE(layout->tileRows == 0 || layout->tileRows == 4 || layout->tileRows == 8) << layout->tileRows;
      if (layout->tileRows == 0)
        EXPECT_LE(4 * layout->groups, n);
      EXPECT_LE(4 * layout->executed, 3 * layout->rasterExecuted);
      expectEachPairOnce(*layout, ir, n);
    }
  }
  // Tokens already in tiles, a band, a video in tiles: raster order it is.
  for (const char *file : {"natten2d_tiled", "local", "sta3d"})
    EXPECT_FALSE(plan::tiledLayout(plan::buildPlan(irOf(file)), 4096)) << file;
}

/// A forward pass of 32-row blocks on a canvas takes blocks of 16 rows, each
/// a 4 x 4 patch (tiles of 4 x 4), where those execute at most 0.85 of the
/// pairs: a patch's keys are the union of 16 windows, not of 32 (a 7 x 7
/// neighbourhood's 10 x 10 against 10 x 14). The backward pass (no narrow
/// blocks) keeps its 32 rows.
TEST(Plan, ForwardBlocksOfACanvasNarrowToFourByFourPatches) {
  struct Grid {
    const char *file;
    std::vector<Define> defines;
    int64_t n;
    bool narrows;
  };
  const Grid grids[] = {{"natten2d", {{"H", 32}, {"W", 32}, {"K", 7}}, 1024, true},
                        {"natten2d", {{"H", 32}, {"W", 48}, {"K", 13}}, 1536, true},
                        {"natten2d", {{"H", 32}, {"W", 40}, {"K", 13}}, 1280, false}, // (1.54 in 8 x 8)
                        {"swin", {{"H", 16}, {"W", 56}, {"M", 7}, {"S", 3}}, 896, false}};
  for (const Grid &g : grids) {
    SCOPED_TRACE(g.file);
    const ir::PatternIR ir = irOf(g.file, g.defines);
    const plan::Plan plan = plan::buildPlan(ir);
    ASSERT_EQ(plan.options.tileRows, 32);
    const std::optional<plan::Layout> wide = plan::tiledLayout(plan, g.n);
    const std::optional<plan::Layout> forward = plan::tiledLayout(plan, g.n, true);
    ASSERT_TRUE(wide && forward);
    EXPECT_EQ(wide->plan.options.tileRows, 32);
    if (!g.narrows) { // (too few pairs saved; Swin's windows grouped, in 32-row blocks either way)
      EXPECT_EQ(forward->tileRows, wide->tileRows);
      EXPECT_EQ(forward->executed, wide->executed);
      EXPECT_EQ(forward->plan.options.tileRows, 32);
      continue;
    }
    EXPECT_EQ(forward->plan.options.tileRows, 16);
    EXPECT_EQ(forward->plan.options.tileCols, 128); // (a 7 x 7 patch's 100 keys in one chunk)
    EXPECT_EQ(forward->tileRows, 4);
    EXPECT_EQ(forward->tileCols, 4);
    EXPECT_LE(double(forward->executed), 0.85 * double(wide->executed));
    int64_t executed = 0; // (the layout's count is its blocks')
    for (const plan::HeadStats &h : plan::planStats(forward->plan, g.n))
      executed += h.executed;
    EXPECT_EQ(forward->executed, executed);
    expectEachPairOnce(*forward, ir, g.n);
    // A plan of 16-row blocks (`attnc tune`'s) takes the same patches.
    const std::optional<plan::Layout> tuned = plan::tiledLayout(plan::buildPlan(ir, {16, 64}), g.n);
    ASSERT_TRUE(tuned);
    EXPECT_EQ(tuned->tileRows, 4);
    EXPECT_EQ(tuned->tileCols, 4);
    EXPECT_EQ(tuned->executed, forward->executed);
  }
}

/// A block's (key, rows) pairs, each key through `order` (none: as it is), sorted.
std::vector<std::pair<int32_t, uint64_t>> keyPairs(const plan::BlockTiles &b, const int32_t *order = nullptr) {
  std::vector<std::pair<int32_t, uint64_t>> pairs;
  for (size_t k = 0; k < b.keys.size(); ++k)
    pairs.emplace_back(order ? order[static_cast<size_t>(b.keys[k])] : b.keys[k], b.masks[k]);
  std::sort(pairs.begin(), pairs.end());
  return pairs;
}

/// The fused backend caches a layout's blocks with their keys mapped to
/// positions (buildShapes' keyOrder, BlockShape::mapKeys): each block holds
/// the same (key, rows) pairs as through the order, ascending, and a patch's
/// keys come back as runs of the window's width (one pointer per run in the
/// kernels), not of the tile's.
TEST(Plan, LayoutBlocksMappedToPositionsKeepTheirPairs) {
  struct Grid {
    const char *file;
    std::vector<Define> defines;
    int64_t n;
    bool narrow;
  };
  const Grid grids[] = {{"natten2d", {{"H", 32}, {"W", 48}, {"K", 13}}, 1536, true},
                        {"natten2d", {{"H", 32}, {"W", 32}, {"K", 7}}, 1024, false},
                        {"swin", {{"H", 16}, {"W", 56}, {"M", 7}, {"S", 3}}, 896, true}};
  for (const Grid &g : grids) {
    SCOPED_TRACE(g.file);
    const plan::Plan plan = plan::buildPlan(irOf(g.file, g.defines));
    const std::optional<plan::Layout> layout = plan::tiledLayout(plan, g.n, g.narrow);
    ASSERT_TRUE(layout);
    const int32_t *order = layout->order->order.data();
    std::vector<plan::HeadShapes> raw, mapped;
    ASSERT_TRUE(plan::buildShapes(layout->plan, g.n, false, size_t{1} << 30, raw, 2));
    ASSERT_TRUE(plan::buildShapes(layout->plan, g.n, false, size_t{1} << 30, mapped, 2, order));
    ASSERT_EQ(raw.size(), mapped.size());
    int64_t widest = 0;
    for (size_t h = 0; h < raw.size(); ++h)
      for (size_t p = 0; p < raw[h].pieces.size(); ++p)
        for (size_t c = 0; c < raw[h].pieces[p].size(); ++c)
          for (size_t b = 0; b < raw[h].pieces[p][c].size(); ++b) {
            plan::BlockTiles before, after;
            before.expand(raw[h].pieces[p][c][b]);
            after.expand(mapped[h].pieces[p][c][b]);
            ASSERT_EQ(after.firstRow, before.firstRow);
            ASSERT_EQ(after.rows, before.rows);
            EXPECT_EQ(mapped[h].pieces[p][c][b].useful, raw[h].pieces[p][c][b].useful);
            ASSERT_TRUE(std::is_sorted(after.keys.begin(), after.keys.end())) << "block " << b;
            ASSERT_EQ(keyPairs(after), keyPairs(before, order)) << "block " << b;
            for (const plan::KeyRun &run : mapped[h].pieces[p][c][b].keys)
              widest = std::max(widest, run.len);
          }
    if (std::string(g.file) == "natten2d")
      EXPECT_EQ(widest, g.narrow ? 16 : 14); // (a 4 x 4 patch of 13 x 13 windows; 8 x 8 tiles, 7 x 7: 14)
  }
  // Keys spread far wider than their count (sorted, not over a bitmap), a
  // stride, a partial mask.
  std::vector<int32_t> order(8192);
  for (size_t u = 0; u < order.size(); ++u)
    order[u] = static_cast<int32_t>((u * 4099) % order.size()); // (a permutation: 4099 is odd)
  plan::BlockShape shape;
  shape.rows = 2;
  shape.allRows = 3;
  shape.keys = {{1, 3, 0, 1}, {100, 2, 10, 2}}; // u = 1, 2, 3, 100, 101, 110, 111
  shape.keyBase = 5;
  shape.keyStride = 2;
  shape.partial = {{1, 1}, {6, 2}};
  plan::BlockTiles before;
  before.expand(shape);
  shape.mapKeys(order.data());
  plan::BlockTiles after;
  after.expand(shape);
  EXPECT_TRUE(std::is_sorted(after.keys.begin(), after.keys.end()));
  EXPECT_EQ(keyPairs(after), keyPairs(before, order.data()));
  EXPECT_EQ(shape.partial.size(), 2u);
}

/// Blocks of a canvas moved from the block a thread built before them
/// (BlockSource::buildMoved) are the blocks built directly: neighbourhoods
/// in raster order, in the fused backend's tiles and written in tiles, with
/// their clamped edges, odd canvases and Swin's windows, whose blocks seldom
/// move; built in order, in reverse (nothing to move from) and two sources
/// interleaved on one thread.
TEST(Plan, CanvasBlocksMovedEqualDirectlyBuiltOnes) {
  struct Grid {
    const char *file;
    std::vector<Define> defines;
    int64_t n;
    bool moves; // whether its sources move most blocks (in raster order, and in the layout's tiles if any)
  };
  const Grid grids[] = {
      {"natten2d", {{"H", 48}, {"W", 80}, {"K", 5}}, 48 * 80, true},
      {"natten2d", {{"H", 64}, {"W", 64}, {"K", 13}}, 4096, true},
      {"natten2d", {{"H", 32}, {"W", 64}, {"K", 3}}, 32 * 64 + 17, true}, // (ragged: part of a canvas row)
      {"natten2d", {{"H", 16}, {"W", 16}, {"K", 7}}, 256, false},       // (all edges)
      {"natten2d_tiled", {{"H", 64}, {"W", 64}, {"K", 7}}, 4096, true},
      // (Its coordinate j % 16 reads as a canvas 16 wide, which the fused
      // backend lays out in tiles: no neighbourhood there, nothing moves.)
      {"natten2d_tiled", {{"H", 16}, {"W", 128}, {"K", 5}, {"TH", 4}, {"TW", 16}}, 2048, false},
      {"swin", {{"H", 32}, {"W", 56}, {"M", 7}, {"S", 3}}, 32 * 56, false},
      {"sta3d", {{"T", 8}, {"H", 8}, {"W", 8}, {"KT", 4}, {"KH", 4}, {"KW", 4}, {"TT", 2}, {"TH", 2}, {"TW", 2}}, 512, false},
  };
  int moving = 0;
  for (const Grid &g : grids) {
    const ir::PatternIR ir = irOf(g.file, g.defines);
    for (int64_t rows : {16, 32}) {
      const plan::Plan raster = plan::buildPlan(ir, {rows, 64});
      const std::optional<plan::Layout> layout = plan::tiledLayout(raster, g.n);
      for (const plan::Plan *plan : {&raster, layout ? &layout->plan : nullptr}) {
        if (!plan)
          continue;
        SCOPED_TRACE(std::string(g.file) + " n=" + std::to_string(g.n) + " rows=" + std::to_string(rows) +
                     (plan == &raster ? " raster" : " in tiles"));
        for (const plan::Piece &piece : plan->heads[0].pieces) {
          plan::BlockSource fast(*plan, piece, g.n), slow(*plan, piece, g.n, 0, false), other(*plan, piece, g.n);
          ASSERT_EQ(slow.moveBlocks(), 0);
          moving += fast.moveBlocks() > 0;
          if (g.moves)
            EXPECT_GT(fast.moveBlocks(), 0);
          const int64_t blocks = fast.numBlocks();
          std::vector<plan::BlockTiles> expected(static_cast<size_t>(blocks));
          plan::BlockShape shape, spare;
          for (int64_t k = 0; k < blocks; ++k) {
            slow.build(k, shape);
            expected[static_cast<size_t>(k)].expand(shape);
          }
          auto check = [&](const plan::BlockSource &src, int64_t k, const char *how) {
            src.build(k, shape);
            plan::BlockTiles got;
            got.expand(shape);
            const plan::BlockTiles &want = expected[static_cast<size_t>(k)];
            ASSERT_TRUE(got.keys == want.keys && got.masks == want.masks && got.firstRow == want.firstRow &&
                        got.rows == want.rows)
                << how << ": block " << k;
            slow.build(k, spare);
            ASSERT_EQ(shape.useful, spare.useful) << how << ": block " << k;
          };
          const int64_t movesBefore = plan::BlockSource::canvasMovesOnThisThread();
          for (int64_t k = 0; k < blocks; ++k)
            check(fast, k, "in order");
          // In order, a third of a neighbourhood's blocks move or more (not
          // those at the canvas's edges, nor the first of each tile row).
          if (fast.moveBlocks() > 0 && g.moves)
            EXPECT_GE(3 * (plan::BlockSource::canvasMovesOnThisThread() - movesBefore), blocks);
          for (int64_t k = blocks - 1; k >= 0; --k)
            check(fast, k, "in reverse");
          for (int64_t k = 0; k < blocks; ++k) {
            check(fast, k, "interleaved");
            check(other, blocks - 1 - k, "interleaved, the other from the end");
          }
        }
      }
    }
  }
  EXPECT_GE(moving, 8);
}

/// The rows of a canvas in tiles (a Permuted set) are their queries' rows
/// in raster order, renumbered, in every window: for sets whose bounds run
/// as one program per row (a TermTape, read at the query's raster position,
/// not at its rank: tiled NATTEN in a hand-made order of 8 x 8 tiles over a
/// canvas 16 wide, as its coordinate j % 16 reads) and for the fused
/// backend's own layouts of natten2d and swin.
TEST(Plan, RowsInTilesAreTheirRasterRowsRenumbered) {
  struct Grid {
    const char *file;
    std::vector<Define> defines;
    int64_t n;
    int64_t handWidth; // > 0: tiles of 8 x 8 on a canvas this wide, else tiledLayout's
  };
  const Grid grids[] = {
      {"natten2d_tiled", {{"H", 16}, {"W", 128}, {"K", 5}, {"TH", 4}, {"TW", 16}}, 2048, 16},
      {"natten2d", {{"H", 32}, {"W", 48}, {"K", 7}}, 32 * 48, 0},
      {"swin", {{"H", 32}, {"W", 56}, {"M", 7}, {"S", 3}}, 32 * 56, 0},
  };
  for (const Grid &g : grids) {
    SCOPED_TRACE(g.file);
    const ir::PatternIR ir = irOf(g.file, g.defines);
    const plan::Plan raster = plan::buildPlan(ir, {32, 64});
    std::shared_ptr<const InputArray> order;
    plan::Plan tiled = raster;
    if (g.handWidth > 0) {
      auto made = std::make_shared<InputArray>();
      const int64_t width = g.handWidth;
      made->name = "(tiles)";
      made->bound = true;
      made->rows = g.n;
      made->values.resize(static_cast<size_t>(g.n));
      for (int64_t p = 0; p < g.n; ++p) {
        const int64_t r = p / width, c = p % width;
        made->values[static_cast<size_t>(p)] = ((r / 8) * (width / 8) + c / 8) * 64 + (r % 8) * 8 + c % 8;
      }
      made->indexClasses();
      made->canvasWidth = width;
      made->tileRows = 8;
      made->tileCols = 8;
      for (plan::Piece &piece : tiled.heads[0].pieces)
        piece = plan::permutePiece(piece, made);
      order = made;
    } else {
      std::optional<plan::Layout> layout = plan::tiledLayout(raster, g.n);
      ASSERT_TRUE(layout.has_value());
      order = layout->order;
      tiled = layout->plan;
    }
    ASSERT_EQ(tiled.heads[0].pieces.size(), raster.heads[0].pieces.size());
    for (size_t p = 0; p < raster.heads[0].pieces.size(); ++p) {
      const ir::RowEvaluator inTiles(tiled.heads[0].pieces[p].set, g.n);
      const ir::RowEvaluator plain(raster.heads[0].pieces[p].set, g.n);
      IntervalSet got, want;
      for (int64_t t = 0; t < g.n; t += 3) {
        const int64_t lo = t % 5 == 0 ? 0 : (t * 7) % g.n, hi = t % 5 == 0 ? g.n : std::min(g.n, lo + 400);
        inTiles.row(t, lo, hi, got);
        want.clear();
        for (const Interval &x : plain.row(order->order[static_cast<size_t>(t)]))
          for (int64_t j = x.lo; j < x.hi; ++j)
            if (const int64_t u = order->placeOf[static_cast<size_t>(j)]; lo <= u && u < hi)
              want.push_back({u, u + 1});
        normalize(want);
        ASSERT_EQ(got, want) << "piece " << p << " row " << t << " (query " << order->order[static_cast<size_t>(t)]
                             << ") window [" << lo << ", " << hi << ")";
      }
    }
  }
}

/// A canvas in tiles whose rows' keys wrap from one canvas row into the
/// next (a raster band, which moves with its query exactly): a key past the
/// canvas's right edge does not keep its rank's distance to the moved one,
/// so those blocks are built, not moved; each block equals the one built
/// directly.
TEST(Plan, CanvasMovesStopWhereKeysWrapACanvasRow) {
  const ir::PatternIR ir = ir::canonicalizePattern([] {
    Frontend fe;
    EXPECT_TRUE(fe.parseString("band.attn", "pattern p { attend { j : abs(i - j) <= 5 } }"));
    EXPECT_TRUE(fe.analyze({}));
    return fe.patterns().front();
  }());
  const plan::Plan raster = plan::buildPlan(ir, {32, 64});
  constexpr int64_t width = 64, rows = 8, cols = 8, n = width * 32;
  auto order = std::make_shared<InputArray>();
  order->name = "(tiles)";
  order->bound = true;
  order->rows = n;
  order->values.resize(n);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t r = p / width, c = p % width;
    order->values[static_cast<size_t>(p)] = ((r / rows) * (width / cols) + c / cols) * rows * cols + (r % rows) * cols + c % cols;
  }
  order->indexClasses();
  order->canvasWidth = width;
  order->tileRows = rows;
  order->tileCols = cols;
  plan::Plan tiled = raster;
  for (plan::Piece &piece : tiled.heads[0].pieces)
    piece = plan::permutePiece(piece, order);
  for (const plan::Piece &piece : tiled.heads[0].pieces) {
    plan::BlockSource fast(tiled, piece, n), slow(tiled, piece, n, 0, false);
    ASSERT_GT(fast.moveBlocks(), 0);
    plan::BlockShape a, b;
    plan::BlockTiles ta, tb;
    const int64_t movesBefore = plan::BlockSource::canvasMovesOnThisThread();
    for (int64_t k = 0; k < fast.numBlocks(); ++k) {
      fast.build(k, a);
      slow.build(k, b);
      ta.expand(a);
      tb.expand(b);
      ASSERT_TRUE(ta.keys == tb.keys && ta.masks == tb.masks && a.useful == b.useful && ta.firstRow == tb.firstRow)
          << "block " << k;
    }
    EXPECT_GT(plan::BlockSource::canvasMovesOnThisThread(), movesBefore); // (the blocks whose keys do not wrap)
  }
}

/// The rows per block picked when none is given: 64 only where the bigger
/// blocks compute no more pairs (blocks aligned to the pattern's own).
TEST(Plan, DefaultRowsPerBlockFollowTheExecutedPairs) {
  for (const char *file : {"bigbird", "full"}) {
    ir::PatternIR ir = irOf(file);
    EXPECT_EQ(plan::defaultTileRows(ir), 64) << file;
    EXPECT_EQ(plan::buildPlan(ir).options.tileRows, 64) << file;
    EXPECT_EQ(plan::resolveOptions(ir, {0, 48}).tileRows, 64) << file;
    EXPECT_EQ(plan::resolveOptions(ir, {0, 48}).tileCols, 48) << file;
  }
  // A band's or block's diagonal is cut finer by 32 rows.
  for (const char *file : {"fixed", "strided", "local", "longformer", "causal"}) {
    ir::PatternIR ir = irOf(file);
    EXPECT_EQ(plan::defaultTileRows(ir), 32) << file;
    EXPECT_EQ(plan::buildPlan(ir).options.tileRows, 32) << file;
    EXPECT_EQ(plan::buildPlan(ir, {16, 24}).options.tileRows, 16) << "a given shape is kept";
  }
}

/// The backward's rows: 64 where 64-row blocks execute at most
/// kGradTallerWork times the forward's pairs, the forward's elsewhere.
TEST(Plan, BackwardRowsPerBlockFollowTheExecutedPairs) {
  auto executed = [](const ir::PatternIR &ir, int64_t rows) {
    int64_t total = 0;
    for (const plan::HeadStats &h : plan::planStats(plan::buildPlan(ir, {rows, 64}), 4096))
      total += h.executed;
    return double(total);
  };
  for (const char *file : {"fixed", "local", "longformer", "causal"}) {
    ir::PatternIR ir = irOf(file);
    EXPECT_LE(executed(ir, 64), plan::kGradTallerWork * executed(ir, 32)) << file;
    EXPECT_EQ(plan::gradTileRows(ir, plan::buildPlan(ir).options), 64) << file;
  }
  // The band of 128 and the residue classes lose more than that at 64 rows.
  for (const char *file : {"strided", "dilated"}) {
    ir::PatternIR ir = irOf(file);
    EXPECT_GT(executed(ir, 64), plan::kGradTallerWork * executed(ir, 32)) << file;
    EXPECT_EQ(plan::gradTileRows(ir, plan::buildPlan(ir).options), 32) << file;
    EXPECT_EQ(plan::gradTileRows(ir, {16, 64}), 16) << file << ": the forward's rows";
  }
  for (const char *file : {"bigbird", "full"}) { // (already 64 rows)
    ir::PatternIR ir = irOf(file);
    EXPECT_EQ(plan::gradTileRows(ir, plan::buildPlan(ir).options), 64) << file;
  }
}

/// A pattern that reads data, bound to random buckets: each piece run as
/// the fused backend runs it (in its classes' order when it has one,
/// permutePiece, with other inputs' classes dropped per pair by
/// dropSameTags) covers exactly its pairs, and the pieces together the
/// pattern's, against a mask computed from the data here. `tested`: how
/// many pieces must drop pairs by tags (LSH's later rounds), so the fast
/// path cannot silently turn into the per-row one, nor be taken where the
/// subtracted class has a band that does not hold the piece.
struct DataPlanCase {
  const char *name;
  const char *source;
  int64_t n;
  size_t tested; ///< pieces with Piece::distinctTags
  std::function<bool(const std::vector<std::vector<int64_t>> &b, int64_t i, int64_t j)> mask;
};

void PrintTo(const DataPlanCase &c, std::ostream *os) { *os << c.name; }

class DataPlanCoverage : public ::testing::TestWithParam<DataPlanCase> {};

TEST_P(DataPlanCoverage, PiecesInClassOrderCoverEachPairOnce) {
  const DataPlanCase &pc = GetParam();
  Frontend fe;
  ASSERT_TRUE(fe.parseString(std::string(pc.name) + ".attn", pc.source));
  ASSERT_TRUE(fe.analyze({}));
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  const int64_t n = pc.n;
  std::mt19937 rng(7);
  for (int64_t buckets : {int64_t{1}, int64_t{5}, int64_t{40}, n}) { // one bucket for all, a few, many, (about) one per position
    std::uniform_int_distribution<int64_t> draw(0, buckets - 1);
    InputArrays arrays;
    std::vector<std::vector<int64_t>> values;
    for (const InputDecl &decl : ir.inputs) {
      auto a = std::make_shared<InputArray>();
      a->name = decl.name;
      a->bound = true;
      a->rows = n;
      for (int64_t x = 0; x < n; ++x)
        a->values.push_back(draw(rng));
      a->indexClasses();
      values.push_back(a->values);
      arrays.push_back(a);
    }
    plan::Plan plan = plan::bindPlan(plan::buildPlan(ir, {32, 16}), 0, arrays);
    std::vector<int> covered(static_cast<size_t>(n * n), 0);
    size_t tested = 0;
    for (const plan::Piece &unordered : plan.heads[0].pieces) {
      std::shared_ptr<const InputArray> classes = plan::pieceClasses(unordered);
      const plan::Piece piece = classes ? plan::permutePiece(unordered, classes) : unordered;
      tested += !piece.distinctTags.empty();
      plan::BlockSource src(plan, piece, n);
      plan::BlockShape shape, scratch;
      plan::BlockTiles b, direct;
      for (int64_t k = 0; k < src.numBlocks(); ++k) {
        src.build(k, shape);
        b.expand(shape);
        src.dropSameTags(b);
        // What the executor runs: the same block, by the direct path where
        // the piece has one (a class's segment) and by these three else.
        src.buildTiles(k, direct, scratch);
        ASSERT_EQ(direct.firstRow, b.firstRow);
        ASSERT_EQ(direct.rows, b.rows);
        ASSERT_EQ(direct.allRows, b.allRows);
        ASSERT_EQ(direct.keys, b.keys) << "block " << k << ", " << buckets << " buckets";
        ASSERT_EQ(direct.masks, b.masks) << "block " << k << ", " << buckets << " buckets";
        for (size_t key = 0; key < b.keys.size(); ++key)
          for (int32_t r = 0; r < b.rows; ++r)
            if (b.masks[key] >> r & 1) {
              const int64_t t = b.firstRow + r, u = b.keys[key];
              const int64_t i = classes ? classes->order[static_cast<size_t>(t)] : t;
              const int64_t j = classes ? classes->order[static_cast<size_t>(u)] : u;
              ++covered[static_cast<size_t>(i * n + j)];
            }
      }
    }
    EXPECT_EQ(tested, pc.tested) << buckets << " buckets";
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(covered[static_cast<size_t>(i * n + j)], pc.mask(values, i, j) ? 1 : 0)
            << "pair (" << i << ", " << j << "), " << buckets << " buckets";
  }
}

bool sameIn(const std::vector<int64_t> &b, int64_t i, int64_t j) {
  return b[static_cast<size_t>(i)] == b[static_cast<size_t>(j)];
}

INSTANTIATE_TEST_SUITE_P(
    Rounds, DataPlanCoverage,
    ::testing::Values(
        DataPlanCase{"lsh_self",
                     "pattern lsh { input b0 : int[n] input b1 : int[n] causal "
                     "attend ({ j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }) - { i } else { i } }",
                     150, 1,
                     [](const auto &b, int64_t i, int64_t j) {
                       auto other = [&](int64_t x) { return x < i && (sameIn(b[0], i, x) || sameIn(b[1], i, x)); };
                       bool alone = true;
                       for (int64_t x = 0; x < i && alone; ++x)
                         alone = !other(x);
                       return alone ? j == i : other(j);
                     }},
        DataPlanCase{"three_rounds",
                     "pattern r3 { input b0 : int[n] input b1 : int[n] input b2 : int[n] causal "
                     "attend { j : b0[j] == b0[i] } | { j : b1[j] == b1[i] } | { j : b2[j] == b2[i] } }",
                     130, 2,
                     [](const auto &b, int64_t i, int64_t j) {
                       return j <= i && (sameIn(b[0], i, j) || sameIn(b[1], i, j) || sameIn(b[2], i, j));
                     }},
        // The first round only within a window: the second round's pairs
        // outside it that share a b0 bucket stay, so no tag may drop them.
        DataPlanCase{"windowed_round",
                     "pattern w { input b0 : int[n] input b1 : int[n] "
                     "attend ({ j : b0[j] == b0[i] } & { j : abs(i - j) < 6 }) | { j : b1[j] == b1[i] } }",
                     110, 0,
                     [](const auto &b, int64_t i, int64_t j) {
                       return (sameIn(b[0], i, j) && std::abs(i - j) < 6) || sameIn(b[1], i, j);
                     }},
        // Documents with a window of the 5 positions before the query (no
        // band in the class order: the rows evaluated there one by one), and
        // looking ahead without the query (the diagonal trimmed off the
        // band's lower end: one interval per row, the direct path).
        DataPlanCase{"document_window",
                     "pattern dw { input doc : int[n] causal "
                     "attend { j : doc[j] == doc[i] } & { j : i - j <= 5 } - { i } }",
                     140, 0,
                     [](const auto &b, int64_t i, int64_t j) { return sameIn(b[0], i, j) && j < i && i - j <= 5; }},
        DataPlanCase{"document_ahead",
                     "pattern da { input doc : int[n] "
                     "attend { j : doc[j] == doc[i] } & { j : j >= i } - { i } }",
                     120, 0,
                     [](const auto &b, int64_t i, int64_t j) { return sameIn(b[0], i, j) && j > i; }}),
    [](const ::testing::TestParamInfo<DataPlanCase> &info) { return std::string(info.param.name); });

} // namespace
} // namespace attnc
