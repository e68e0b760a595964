//===- ClosedFormTest.cpp - Canonical IR and analyses against the oracle --===//
//
// For every library pattern under several parameter sets, and for hand-written
// patterns that exercise each canonical generator and the predicate fallback,
// at lengths that are and are not multiples of the pattern's blocks (and below
// them): the RowEvaluator's rows, analyzeRows, analyzeTiles and
// analyzeConnectivity must equal the brute-force oracle, which evaluates
// Sema's terms pair by pair. Every head of a pattern is checked against its
// own Sema term, so grouping heads by equal sets is checked too.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Analysis.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"
#include "attnc/plan/RowEvaluator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

namespace attnc {
namespace {

using ir::Gen;

struct Source {
  std::string label;
  std::string file; ///< library pattern name, or empty for `text`
  std::string text;
  std::vector<Define> defines;
  std::vector<Gen> expectGens; ///< hand-written: generators the IR must contain
};

void PrintTo(const Source &s, std::ostream *os) { *os << s.label; }

const char *const kLibrary[] = {"axial", "bigbird",         "causal",          "dilated",
                                "fixed", "fixed_multihead", "fixed_subblocks", "full",
                                "local", "longformer",      "strided",         "strided_multihead",
                                "natten2d", "natten2d_tiled", "sta3d", "swin"};

/// Every library pattern with its defaults, then with small parameters so
/// that the structure shows at small n, then at the edges of its `require`s.
std::vector<Source> librarySources() {
  std::vector<Source> out;
  for (const char *name : kLibrary)
    out.push_back({std::string(name) + "_default", name, "", {}, {}});
  const std::vector<Source> small = {
      {"axial_W8", "axial", "", {{"W", 8}}, {}},
      {"axial_W1", "axial", "", {{"W", 1}}, {}},
      {"bigbird_b8_g1_r2", "bigbird", "", {{"b", 8}, {"g", 1}, {"r", 2}}, {}},
      {"bigbird_b3_g0_r50", "bigbird", "", {{"b", 3}, {"g", 0}, {"r", 50}}, {}},
      {"dilated_w3_d2", "dilated", "", {{"w", 3}, {"d", 2}}, {}},
      {"dilated_w0_d1", "dilated", "", {{"w", 0}, {"d", 1}}, {}},
      {"fixed_l16_c4", "fixed", "", {{"l", 16}, {"c", 4}}, {}},
      {"fixed_l7_c1", "fixed", "", {{"l", 7}, {"c", 1}}, {}},
      {"fixed_l4_c4", "fixed", "", {{"l", 4}, {"c", 4}}, {}},
      {"fixed_multihead_l8_c2", "fixed_multihead", "", {{"l", 8}, {"c", 2}}, {}},
      {"fixed_subblocks_l16_c2_H4", "fixed_subblocks", "", {{"l", 16}, {"c", 2}, {"H", 4}}, {}},
      {"fixed_subblocks_l8_c1_H8", "fixed_subblocks", "", {{"l", 8}, {"c", 1}, {"H", 8}}, {}},
      {"local_w5", "local", "", {{"w", 5}}, {}},
      {"local_w1", "local", "", {{"w", 1}}, {}},
      {"longformer_w4_g2", "longformer", "", {{"w", 4}, {"g", 2}}, {}},
      {"longformer_w0_g0", "longformer", "", {{"w", 0}, {"g", 0}}, {}},
      {"strided_l8", "strided", "", {{"l", 8}}, {}},
      {"strided_l1", "strided", "", {{"l", 1}}, {}},
      {"strided_multihead_l5", "strided_multihead", "", {{"l", 5}}, {}},
      // Canvases of a few rows, so that n reaches past them: clamped centres
      // at every edge, a canvas that is not square, windows cut by the shift.
      {"natten2d_8x8_K3", "natten2d", "", {{"H", 8}, {"W", 8}, {"K", 3}}, {}},
      {"natten2d_5x7_K3", "natten2d", "", {{"H", 5}, {"W", 7}, {"K", 3}}, {}},
      {"natten2d_9x11_K5", "natten2d", "", {{"H", 9}, {"W", 11}, {"K", 5}}, {}},
      {"natten2d_tiled_8x12_K3_2x4", "natten2d_tiled", "", {{"H", 8}, {"W", 12}, {"K", 3}, {"TH", 2}, {"TW", 4}}, {}},
      {"natten2d_tiled_6x6_K5_3x3", "natten2d_tiled", "", {{"H", 6}, {"W", 6}, {"K", 5}, {"TH", 3}, {"TW", 3}}, {}},
      {"sta3d_4x4x4", "sta3d", "",
       {{"T", 4}, {"H", 4}, {"W", 4}, {"KT", 2}, {"KH", 2}, {"KW", 2}, {"TT", 1}, {"TH", 1}, {"TW", 1}}, {}},
      {"sta3d_4x4x6_tiles", "sta3d", "",
       {{"T", 4}, {"H", 4}, {"W", 6}, {"KT", 2}, {"KH", 4}, {"KW", 4}, {"TT", 2}, {"TH", 1}, {"TW", 2}}, {}},
      {"swin_6x6_M3_S1", "swin", "", {{"H", 6}, {"W", 6}, {"M", 3}, {"S", 1}}, {}},
      {"swin_7x9_M3_S2", "swin", "", {{"H", 7}, {"W", 9}, {"M", 3}, {"S", 2}}, {}},
      {"swin_6x8_M4_S0", "swin", "", {{"H", 6}, {"W", 8}, {"M", 4}, {"S", 0}}, {}},
  };
  out.insert(out.end(), small.begin(), small.end());
  return out;
}

Source inlineSource(const char *label, const char *text, std::vector<Gen> gens) {
  return {label, "", text, {}, std::move(gens)};
}

/// One or more patterns per generator of PatternIR.h, the combinators, and
/// forms that must fall back to a per-key predicate.
std::vector<Source> handWrittenSources() {
  using G = Gen;
  return {
      // Predicate fallback.
      inlineSource("predicate_product", "pattern p { attend { j : (i * j) % 7 == 1 } }",
                   {G::Predicate}),
      inlineSource("predicate_key_mod_key", "pattern p { attend { j : j % 4 == j / 4 } }",
                   {G::Predicate}),
      inlineSource("predicate_shifted_in",
                   "pattern p { let M = { j : j % 3 == 0 } attend { j : j + 1 in M } }",
                   {G::Predicate}),
      // Predicates are evaluated over lanes of keys (PredicateLanes): negative floor divisions and
      // moduli, a three-way min, abs, products, divisors that vary with the key and with the row.
      inlineSource("predicate_lanes_arithmetic",
                   "pattern p { attend { j : max(i - 7, min(j - i, 3, i / 2)) * (j - 5) / 3 % 4 == "
                   "abs(j - 9) * (i + 1) % 4 } }",
                   {G::Predicate}),
      inlineSource("predicate_key_divisor", "pattern p { attend { j : i % (j + 1) == 0 || j * j > 3 * i } }",
                   {G::Predicate}),
      inlineSource("predicate_past_double_precision", // (quotients of values past 2^53: integer division)
                   "pattern p { attend { j : (j * 1000000000000007 - i * 3) / 7 % 4 == 1 } }", {G::Predicate}),
      inlineSource("predicate_divisor_ends_at_n", // (lanes past n divide by 0 or less: not read)
                   "pattern p { attend { j : (i + 1) % (n - j) == 0 } }", {G::Predicate}),
      inlineSource("predicate_row_divisor", "pattern p { attend { j : (j * j + i) % (i + 1) == 1 && !(j == 2) } }",
                   {G::Predicate}),
      // Linear in j: bands and key ranges.
      inlineSource("band_chained", "pattern p { attend { j : i - 2 <= j < i + 2 } }", {G::Band}),
      inlineSource("band_range", "pattern p { attend { i - 2 .. i + 1 } }", {G::Band}),
      inlineSource("band_not_self", "pattern p { attend { j : j != i } }", {G::Difference}),
      inlineSource("band_abs_le", "pattern p { attend { j : abs(i - j) <= 2 } }", {G::Band}),
      inlineSource("band_abs_ge", "pattern p { attend { j : abs(i - j) >= 3 } }",
                   {G::Union, G::Band}),
      inlineSource("band_abs_eq", "pattern p { attend { j : abs(j - i) == 2 } }", {G::Band}),
      inlineSource("key_range_scaled_le", "pattern p { attend { j : 2 * j <= i } }", {G::KeyRange}),
      inlineSource("key_range_scaled_gt", "pattern p { attend { j : 3 * j > i + 1 } }",
                   {G::KeyRange}),
      inlineSource("key_range_scaled_eq", "pattern p { attend { j : 3 * j == i } }",
                   {G::KeyRange, G::RowIf}),
      inlineSource("key_range_scaled_ne", "pattern p { attend { j : 2 * j != i + 1 } }",
                   {G::Difference}),
      inlineSource("key_range_negative_slope", "pattern p { attend { j : i - 2 * j >= 1 } }",
                   {G::KeyRange}),
      inlineSource("key_range_abs_scaled", "pattern p { attend { j : abs(2 * j - i) < 3 } }",
                   {G::KeyRange}),
      inlineSource("key_range_bounds", "pattern p { attend { max(0, i - 3) .. min(i, n - 2) } }",
                   {G::KeyRange}),
      inlineSource("key_range_empty", "pattern p { attend { 5 .. 2 } | { n - 1 .. n + 4 } }",
                   {G::KeyRange}),
      inlineSource("key_range_negation", "pattern p { attend { j : !(j < 3) } }",
                   {G::Difference, G::KeyRange}),
      inlineSource("key_range_merged",
                   "pattern p { attend { j : j >= i / 2 && j <= n - 1 - i / 3 } }", {G::KeyRange}),
      // j / l: block-diagonal and block ranges, constant and variable divisors.
      inlineSource("block_diag", "pattern p { attend { j : j / 5 == i / 5 } }", {G::BlockDiag}),
      inlineSource("block_below", "pattern p { attend { j : j / 4 >= i / 4 - 1 } }", {G::KeyRange}),
      inlineSource("block_strict", "pattern p { attend { j : (j + 1) / 3 < i / 3 } }",
                   {G::KeyRange}),
      inlineSource("block_above", "pattern p { attend { j : j / 6 > i / 6 } }", {G::KeyRange}),
      inlineSource("block_ne", "pattern p { attend { j : j / 3 != i / 3 } }", {G::Difference}),
      inlineSource("block_variable_divisor", "pattern p { attend { j : j / (i + 1) == 0 } }",
                   {G::KeyRange}),
      inlineSource("block_divisor_uses_n", "pattern p { attend { j : j / (n / 8 + 1) <= 1 } }",
                   {G::KeyRange}),
      // j % m: stripes.
      inlineSource("stripe_shifted", "pattern p { attend { j : (j + 3) % 5 >= 2 } }", {G::Stripe}),
      inlineSource("stripe_reversed", "pattern p { attend { j : (3 - j) % 5 <= 1 } }", {G::Stripe}),
      inlineSource("stripe_ne", "pattern p { attend { j : j % 4 != 1 } }",
                   {G::Difference, G::Stripe}),
      inlineSource("stripe_lt", "pattern p { attend { j : j % 6 < 2 } }", {G::Stripe}),
      inlineSource("stripe_intersected",
                   "pattern p { attend { j : j % 8 >= 2 && j % 8 <= 5 && j >= i - 20 } }",
                   {G::Stripe}),
      // (i - j) % m: residue classes.
      inlineSource("residue_shift", "pattern p { attend { j : (i - j) % 3 == 2 } }", {G::Residue}),
      inlineSource("residue_sym", "pattern p { attend { j : (j - i + 2) % 4 == 1 } }",
                   {G::Residue}),
      inlineSource("residue_mod_eq", "pattern p { attend { j : j % 6 == i % 6 } }", {G::Residue}),
      inlineSource("residue_mod_eq_shifted", "pattern p { attend { j : j % 6 == (i + 1) % 6 } }",
                   {G::Residue}),
      inlineSource("residue_per_head",
                   "pattern p { heads 3 attend { j : (i - j) % (h + 2) == 0 && j <= i } }",
                   {G::Residue}),
      // j-free conditions: row-ifs.
      inlineSource("row_if", "pattern p { attend { j : i % 3 == 0 } }", {G::RowIf}),
      inlineSource("row_if_uses_n", "pattern p { attend { j : j >= n - 3 || i >= n / 2 } }",
                   {G::RowIf}),
      inlineSource("row_if_empty_rows", "pattern p { attend { j : j < i && i % 3 == 0 } }",
                   {G::RowIf}),
      // Explicit keys and `x in S`.
      inlineSource("list", "pattern p { attend { 0, 3, i, i + 2 } }", {G::List}),
      inlineSource("list_clipped", "pattern p { attend { -1, n, i - 1, 2 * i } }", {G::List}),
      inlineSource("in_list", "pattern p { let G = {1, 4} attend { j : j in G || i in G } }",
                   {G::List, G::RowIf}),
      inlineSource("in_range_minus_self",
                   "pattern p { attend { j : j in { i - 1 .. i + 1 } && !(j in { i }) } }",
                   {G::Difference}),
      inlineSource("in_builder_for_the_query",
                   "pattern p { attend { j : i in { j : j % 3 == 1 } } }", {G::RowIf}),
      // Random blocks.
      inlineSource("random", "pattern p { attend random_blocks(4, 2, 7) }", {G::Random}),
      inlineSource("random_count_above_blocks", "pattern p { attend random_blocks(3, 100, 1) }",
                   {G::Random}),
      inlineSource("random_per_head",
                   "pattern p { heads 2 attend random_blocks(5, h + 1, 11) & { j : j <= i } }",
                   {G::Random}),
      // Combinators, All and None.
      inlineSource("difference_causal",
                   "pattern p { causal attend { j : true } - { j : j % 3 == 0 } }",
                   {G::Difference}),
      inlineSource(
          "difference_of_unions",
          "pattern p { attend ({ 0 .. n - 1 } - ({ j : j < i } | { i })) | { j : j % 7 == 0 } }",
          {G::Difference, G::Union}),
      inlineSource("nested_boolean",
                   "pattern p { attend { j : (j < 3 || j > i) && !(j % 2 == 0) } }",
                   {G::Intersect}),
      inlineSource("coord_column_window", "pattern p { attend { j : abs(j % 8 - i % 8) <= 1 } }",
                   {G::CoordRange}),
      inlineSource("coord_row_and_column",
                   "pattern p { attend { j : abs(i / 6 - j / 6) <= 1 && abs(i % 6 - j % 6) <= 2 } }",
                   {G::KeyRange, G::CoordRange}),
      inlineSource("coord_clamped_centre",
                   "pattern p { attend { j : abs(max(1, min(i % 7, 5)) - j % 7) <= 1 && "
                   "abs(max(1, min(i / 7, 3)) - j / 7) <= 1 } }",
                   {G::KeyRange, G::CoordRange}),
      inlineSource("coord_middle_axis", "pattern p { attend { j : j / 4 % 3 == i / 4 % 3 } }",
                   {G::CoordRange}),
      inlineSource("coord_nested_divisions", "pattern p { attend { j : j / 2 / 3 % 2 <= i % 2 } }",
                   {G::CoordRange}),
      inlineSource("coord_constant_is_stripe", "pattern p { attend { j : j / 4 % 3 == 1 } }",
                   {G::Stripe}),
      inlineSource("coord_window_of_blocks",
                   "pattern p { attend { j : (j % 10 + 2) / 4 == (i % 10 + 2) / 4 } }", {G::CoordRange}),
      inlineSource("coord_negated", "pattern p { attend { j : -(j % 7) > -(i % 7) - 2 } }",
                   {G::CoordRange}),
      inlineSource("coord_ne", "pattern p { attend { j : j % 5 != i % 5 + 1 } }",
                   {G::Difference, G::CoordRange}),
      inlineSource("coord_row_below", "pattern p { attend { j : 2 - j / 5 < i / 5 } }", {G::KeyRange}),
      inlineSource("coord_two_occurrences", "pattern p { attend { j : j % 4 + j / 4 <= i % 5 } }",
                   {G::Predicate}),
      // Mixed radix: a tile's column times the tile width plus the column in the tile (tiled NATTEN on
      // a 8 x 6 canvas in tiles of 4 x 2, kernel 3), and each comparison of such a sum.
      inlineSource("coord_mixed_radix_tiled_natten",
                   "pattern p { let kx = j / 8 % 2 * 4 + j % 8 % 4  let ky = j / 16 * 2 + j % 8 / 4 "
                   "let qx = i / 8 % 2 * 4 + i % 8 % 4  let qy = i / 16 * 2 + i % 8 / 4 "
                   "attend { j : abs(kx - max(1, min(qx, 6))) <= 1 && abs(ky - max(1, min(qy, 4))) <= 1 } }",
                   {G::CoordRange}),
      inlineSource("coord_mixed_radix_eq", "pattern p { attend { j : j / 4 % 3 * 4 + j % 4 == i % 12 } }",
                   {G::CoordRange}),
      inlineSource("coord_mixed_radix_ne", "pattern p { attend { j : 4 * (j / 4 % 3) + j % 4 != i % 12 } }",
                   {G::CoordRange}),
      inlineSource("coord_mixed_radix_lt", "pattern p { attend { j : j % 5 + j / 5 % 4 * 5 < i % 23 } }",
                   {G::CoordRange}),
      inlineSource("coord_mixed_radix_ge_negative", "pattern p { attend { j : j / 3 % 2 * 3 + j % 3 >= i - 30 } }",
                   {G::CoordRange}),
      inlineSource("coord_mixed_radix_too_wide", // (j % 6 reaches past 4: not a mixed radix)
                   "pattern p { attend { j : j / 6 % 2 * 4 + j % 6 <= i % 9 } }", {G::Predicate}),
      inlineSource("all", "pattern p { attend { j : true } }", {G::All}),
      inlineSource("none", "pattern p { attend {} }", {G::None}),
      inlineSource(
          "heads_differ",
          "pattern p { heads 2 head 0 attends { j : j <= i } head 1 attends { j : j >= i } }",
          {G::Band}),
  };
}

struct Loaded {
  std::unique_ptr<Frontend> frontend;
  const Pattern *pattern = nullptr;
  ir::PatternIR ir;
};

Loaded load(const Source &s) {
  Loaded l{std::make_unique<Frontend>(), nullptr, {}};
  bool parsed =
      s.file.empty()
          ? l.frontend->parseString(s.label + ".attn", s.text)
          : l.frontend->parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + s.file + ".attn");
  bool checked = parsed && l.frontend->analyze({s.defines});
  for (const dsl::Diagnostic &d : l.frontend->diags().diagnostics())
    ADD_FAILURE() << l.frontend->diags().format(d);
  if (checked && !l.frontend->patterns().empty()) {
    l.pattern = &l.frontend->patterns().front();
    l.ir = ir::canonicalizePattern(*l.pattern);
  }
  return l;
}

/// The IR group that serves head `k`.
const ir::PatternIR::Head *groupOf(const ir::PatternIR &ir, int64_t k) {
  for (const ir::PatternIR::Head &h : ir.heads)
    if (std::find(h.heads.begin(), h.heads.end(), k) != h.heads.end())
      return &h;
  return nullptr;
}

bool hasGen(const ir::SetNode &s, Gen g) {
  if (s.kind == g)
    return true;
  return std::any_of(s.children.begin(), s.children.end(),
                     [&](const ir::SetRef &c) { return hasGen(*c, g); });
}

class ClosedForm : public ::testing::TestWithParam<std::tuple<Source, int64_t>> {};

TEST_P(ClosedForm, RowsOfEveryHeadEqualTheOracle) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_NE(l.pattern, nullptr);
  for (int64_t k = 0; k < l.pattern->numHeads(); ++k) {
    const ir::PatternIR::Head *group = groupOf(l.ir, k);
    ASSERT_NE(group, nullptr) << "head " << k << " is in no IR group";
    std::vector<char> mask = oracle::denseMask(*l.pattern->heads[k], n);
    ir::RowEvaluator eval(group->set, n);
    for (int64_t i = 0; i < n; ++i) {
      IntervalSet row = eval.row(i);
      for (size_t x = 0; x < row.size(); ++x) {
        ASSERT_LT(row[x].lo, row[x].hi) << "row " << i << " has an empty interval";
        ASSERT_GE(row[x].lo, 0);
        ASSERT_LE(row[x].hi, n);
        if (x > 0) {
          ASSERT_LT(row[x - 1].hi, row[x].lo) << "row " << i << " is not normalised";
        }
      }
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(containsKey(row, j), mask[i * n + j] != 0)
            << "head " << k << " pair (" << i << ", " << j << ")\n"
            << ir::printSet(*group->set);
    }
  }
}

TEST_P(ClosedForm, RowWindowsEqualTheOracleInsideTheWindow) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_NE(l.pattern, nullptr);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    std::vector<char> mask = oracle::denseMask(*head.term, n);
    ir::RowEvaluator eval(head.set, n);
    for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 9))
      for (auto [lo, hi] :
           {std::pair<int64_t, int64_t>{-5, n / 3}, {n / 4, n - n / 5}, {n / 2, n + 9}}) {
        IntervalSet row = eval.row(i, lo, hi);
        for (int64_t j = 0; j < n; ++j)
          ASSERT_EQ(containsKey(row, j), lo <= j && j < hi && mask[i * n + j])
              << "row " << i << " window [" << lo << ", " << hi << ") key " << j;
      }
  }
}

TEST_P(ClosedForm, RowStatisticsEqualTheOracle) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_NE(l.pattern, nullptr);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    ir::RowStats fast = ir::analyzeRows(head.set, n);
    ir::RowStats slow = oracle::rowStats(oracle::denseMask(*head.term, n), n);
    EXPECT_EQ(fast.n, n);
    EXPECT_EQ(fast.nnz, slow.nnz);
    EXPECT_EQ(fast.minRow, slow.minRow);
    EXPECT_EQ(fast.maxRow, slow.maxRow);
    EXPECT_DOUBLE_EQ(fast.mean, slow.mean);
    EXPECT_EQ(fast.emptyRows, slow.emptyRows);
    EXPECT_EQ(fast.emptyWitness, slow.emptyWitness);
    EXPECT_EQ(fast.leaks, slow.leaks);
    EXPECT_EQ(fast.leakWitness, slow.leakWitness);
  }
}

TEST_P(ClosedForm, TileCountsEqualTheOracle) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_NE(l.pattern, nullptr);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    std::vector<char> mask = oracle::denseMask(*head.term, n);
    for (auto [br, bc] :
         {std::pair<int64_t, int64_t>{1, 1}, {7, 7}, {16, 16}, {64, 64}, {16, 4}, {3, 8}}) {
      ir::TileStats fast = ir::analyzeTiles(head.set, n, br, bc);
      ir::TileStats slow = oracle::tileStats(mask, n, br, bc);
      EXPECT_EQ(fast.blockRows, br);
      EXPECT_EQ(fast.blockCols, bc);
      EXPECT_EQ(fast.full, slow.full) << br << "x" << bc;
      EXPECT_EQ(fast.partial, slow.partial) << br << "x" << bc;
      EXPECT_EQ(fast.empty, slow.empty) << br << "x" << bc;
      EXPECT_EQ(fast.executedPairs, slow.executedPairs) << br << "x" << bc;
      EXPECT_DOUBLE_EQ(fast.waste, slow.waste) << br << "x" << bc;
    }
  }
}

/// The oracle's criterion 2 is a breadth-first search per row, O(n^3): it
/// runs for n <= 64 only.
class Connectivity : public ClosedForm {};

std::pair<std::vector<ir::SetRef>, std::vector<std::vector<char>>> allHeads(const Loaded &l,
                                                                            int64_t n) {
  std::vector<ir::SetRef> sets;
  std::vector<std::vector<char>> masks;
  for (int64_t k = 0; k < l.pattern->numHeads(); ++k) {
    sets.push_back(groupOf(l.ir, k)->set);
    masks.push_back(oracle::denseMask(*l.pattern->heads[k], n));
  }
  return {sets, masks};
}

TEST_P(Connectivity, EqualsTheOracleOverAllHeads) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_NE(l.pattern, nullptr);
  auto [sets, masks] = allHeads(l, n);
  ir::ConnectivityOptions options;
  options.exactUpTo = 1 << 20;
  ir::Connectivity fast = ir::analyzeConnectivity(sets, n, options);
  ir::Connectivity slow = oracle::connectivity(masks, n);
  EXPECT_TRUE(fast.exact);
  EXPECT_EQ(fast.rowsChecked, n);
  EXPECT_EQ(fast.p, slow.p);
  EXPECT_EQ(fast.unreachableWitness, slow.unreachableWitness);
}

TEST_P(Connectivity, EqualsTheOracleUnderAStepLimit) {
  auto [source, n] = GetParam();
  Loaded l = load(source);
  ASSERT_NE(l.pattern, nullptr);
  auto [sets, masks] = allHeads(l, n);
  for (int64_t steps : {1, 2}) {
    ir::ConnectivityOptions options;
    options.maxSteps = steps;
    ir::Connectivity fast = ir::analyzeConnectivity(sets, n, options);
    ir::Connectivity slow = oracle::connectivity(masks, n, steps);
    EXPECT_EQ(fast.p, slow.p) << "max steps " << steps;
    EXPECT_EQ(fast.unreachableWitness, slow.unreachableWitness) << "max steps " << steps;
  }
}

std::string paramName(const ::testing::TestParamInfo<ClosedForm::ParamType> &info) {
  return std::get<0>(info.param).label + "_n" + std::to_string(std::get<1>(info.param));
}

// n = 1 and 2 are below every block; 37, 100 and 130 are ragged for every
// power-of-two block; 64 is a multiple of most.
INSTANTIATE_TEST_SUITE_P(Library, ClosedForm,
                         ::testing::Combine(::testing::ValuesIn(librarySources()),
                                            ::testing::Values(1, 2, 5, 37, 64, 100, 130)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(HandWritten, ClosedForm,
                         ::testing::Combine(::testing::ValuesIn(handWrittenSources()),
                                            ::testing::Values(1, 2, 5, 37, 64, 100, 130)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Library, Connectivity,
                         ::testing::Combine(::testing::ValuesIn(librarySources()),
                                            ::testing::Values(1, 2, 5, 37, 64)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(HandWritten, Connectivity,
                         ::testing::Combine(::testing::ValuesIn(handWrittenSources()),
                                            ::testing::Values(1, 5, 37, 64)),
                         paramName);

// ---- Which generators the canonical form uses ----------------------------------

class HandWrittenGenerators : public ::testing::TestWithParam<Source> {};

TEST_P(HandWrittenGenerators, CanonicalFormUsesTheIntendedGenerators) {
  Loaded l = load(GetParam());
  ASSERT_NE(l.pattern, nullptr);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    for (Gen g : GetParam().expectGens)
      EXPECT_TRUE(hasGen(*head.set, g)) << "no " << ir::genName(g) << " in\n"
                                        << ir::printSet(*head.set);
    bool wantsPredicate = std::find(GetParam().expectGens.begin(), GetParam().expectGens.end(),
                                    Gen::Predicate) != GetParam().expectGens.end();
    EXPECT_EQ(ir::hasPredicate(*head.set), wantsPredicate) << ir::printSet(*head.set);
  }
}

INSTANTIATE_TEST_SUITE_P(HandWritten, HandWrittenGenerators,
                         ::testing::ValuesIn(handWrittenSources()),
                         [](const ::testing::TestParamInfo<Source> &info) {
                           return info.param.label;
                         });

TEST(LibraryGenerators, NoLibraryPatternFallsBackToAPredicate) {
  for (const Source &s : librarySources()) {
    Loaded l = load(s);
    ASSERT_NE(l.pattern, nullptr) << s.label;
    for (const ir::PatternIR::Head &head : l.ir.heads)
      EXPECT_FALSE(ir::hasPredicate(*head.set)) << s.label << "\n" << ir::printSet(*head.set);
  }
}

TEST(LibraryGenerators, FixedIsBlockDiagonalOrStripeWithinTheCausalBand) {
  Loaded l = load({"fixed", "fixed", "", {}, {}});
  ASSERT_EQ(l.ir.heads.size(), 1u);
  const ir::SetNode &s = *l.ir.heads[0].set;
  ASSERT_EQ(s.kind, Gen::Intersect);
  ASSERT_EQ(s.children.size(), 2u);
  const ir::SetNode &u = *s.children[0];
  ASSERT_EQ(u.kind, Gen::Union);
  ASSERT_EQ(u.children.size(), 2u);
  EXPECT_EQ(u.children[0]->kind, Gen::BlockDiag);
  EXPECT_EQ(u.children[0]->modulus, 128);
  EXPECT_EQ(u.children[1]->kind, Gen::Stripe);
  EXPECT_EQ(u.children[1]->modulus, 128);
  EXPECT_EQ(u.children[1]->lo, 120);
  EXPECT_EQ(u.children[1]->hi, 127);
  EXPECT_EQ(s.children[1]->kind, Gen::Band);
  EXPECT_EQ(s.children[1]->lo, ir::kUnbounded);
  EXPECT_EQ(s.children[1]->hi, 0);
}

TEST(LibraryGenerators, StridedIsBandOrResidueWithinTheCausalBand) {
  Loaded l = load({"strided", "strided", "", {{"l", 16}}, {}});
  ASSERT_EQ(l.ir.heads.size(), 1u);
  const ir::SetNode &s = *l.ir.heads[0].set;
  ASSERT_EQ(s.kind, Gen::Intersect);
  const ir::SetNode &u = *s.children[0];
  ASSERT_EQ(u.kind, Gen::Union);
  ASSERT_EQ(u.children.size(), 2u);
  EXPECT_EQ(u.children[0]->kind, Gen::Band);
  EXPECT_EQ(u.children[0]->lo, -16);
  EXPECT_EQ(u.children[0]->hi, 0);
  EXPECT_EQ(u.children[1]->kind, Gen::Residue);
  EXPECT_EQ(u.children[1]->modulus, 16);
  EXPECT_EQ(u.children[1]->residue, 0);
}

TEST(LibraryGenerators, HeadsWithEqualSetsShareOneGroup) {
  Loaded same = load(inlineSource("same", "pattern p { heads 3 attend { j : j <= i } }", {}));
  ASSERT_EQ(same.ir.heads.size(), 1u);
  EXPECT_EQ(same.ir.heads[0].heads, (std::vector<int64_t>{0, 1, 2}));
  Loaded subblocks = load({"fixed_subblocks", "fixed_subblocks", "", {}, {}});
  EXPECT_EQ(subblocks.ir.heads.size(), 4u);
  Loaded axial = load({"axial", "axial", "", {}, {}});
  EXPECT_EQ(axial.ir.heads.size(), 2u);
}

// ---- Known bugs ----------------------------------------------------------------

TEST(ClosedFormBugs, ModuloEqualToAValueOutsideItsRangeIsEmpty) {
  for (const char *text :
       {"pattern p { attend { j : j % 5 == 7 } }", "pattern p { attend { j : (j + 1) % 4 == -1 } }",
        "pattern p { attend { j : j % 1 == 1 } }", "pattern p { attend { j : j % 7 != -2 } }"}) {
    Loaded l = load(inlineSource("bug", text, {}));
    ASSERT_NE(l.pattern, nullptr);
    const int64_t n = 20;
    std::vector<char> mask = oracle::denseMask(*l.pattern->heads[0], n);
    ir::RowEvaluator eval(l.ir.heads[0].set, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        ASSERT_EQ(containsKey(eval.row(i), j), mask[i * n + j] != 0)
            << text << " pair (" << i << ", " << j << ")\n"
            << ir::printSet(*l.ir.heads[0].set);
  }
}

// ---- Connectivity on a sample of rows ---------------------------------------------

/// Breadth-first search from one row over the union of the masks: whether
/// every j <= i is reached within `maxSteps` steps.
bool reachesPrefix(const std::vector<std::vector<char>> &masks, int64_t n, int64_t i,
                   int64_t maxSteps) {
  std::vector<int64_t> dist(n, -1);
  std::vector<bool> expanded(n, false);
  // Step 1 reaches the keys of row i; step k + 1 the keys of rows reached at k.
  std::vector<int64_t> frontier{i};
  for (int64_t step = 1; step <= maxSteps && !frontier.empty(); ++step) {
    std::vector<int64_t> next;
    for (int64_t r : frontier) {
      if (expanded[r])
        continue;
      expanded[r] = true;
      for (int64_t j = 0; j < n; ++j)
        for (const std::vector<char> &m : masks)
          if (m[r * n + j] && dist[j] < 0) {
            dist[j] = step;
            next.push_back(j);
          }
    }
    frontier = std::move(next);
  }
  for (int64_t j = 0; j <= i; ++j)
    if (dist[j] < 0)
      return false;
  return true;
}

TEST(SampledConnectivity, SampleNeverClaimsMoreThanTheFullSearch) {
  const std::vector<Source> sources = {
      {"strided", "strided", "", {{"l", 8}}, {}},
      {"fixed", "fixed", "", {{"l", 8}, {"c", 2}}, {}},
      {"local", "local", "", {{"w", 8}}, {}},
      {"fixed_multihead", "fixed_multihead", "", {{"l", 8}, {"c", 2}}, {}},
      {"dilated", "dilated", "", {{"w", 3}, {"d", 2}}, {}}, // never connected
  };
  for (const Source &source : sources) {
    Loaded l = load(source);
    ASSERT_NE(l.pattern, nullptr) << source.label;
    const std::string &name = source.label;
    const int64_t n = 64;
    auto [sets, masks] = allHeads(l, n);
    ir::ConnectivityOptions options;
    options.exactUpTo = 16;
    options.sampleRows = 24;
    ir::Connectivity sampled = ir::analyzeConnectivity(sets, n, options);
    ir::Connectivity full = oracle::connectivity(masks, n);
    EXPECT_FALSE(sampled.exact) << name;
    EXPECT_GT(sampled.rowsChecked, 0) << name;
    EXPECT_LE(sampled.rowsChecked, options.sampleRows) << name;
    if (full.p) {
      ASSERT_TRUE(sampled.p.has_value()) << name;
      EXPECT_LE(*sampled.p, *full.p) << name;
    }
    if (sampled.unreachableWitness) {
      auto [i, j] = *sampled.unreachableWitness;
      EXPECT_FALSE(reachesPrefix(masks, n, i, options.maxSteps)) << name << " row " << i;
      EXPECT_LE(j, i);
    }
  }
}

TEST(SampledConnectivity, SeedsReachEveryEarlierKeyInTwoStepsAtLongLengths) {
  // The Sparse Transformer's criterion 2 with p = 2 (Child et al., 2019, 4.3):
  // a summary column (fixed) or a key i - k*l (strided) reaches all of its block
  // or band in one more step. Long sequences are checked on a sample of rows.
  for (const char *name : {"fixed", "strided"}) {
    Loaded l = load({name, name, "", {}, {}});
    ASSERT_NE(l.pattern, nullptr);
    ir::Connectivity c = ir::analyzeConnectivity({l.ir.heads[0].set}, 8192);
    EXPECT_FALSE(c.exact) << name;
    EXPECT_EQ(c.rowsChecked, 512) << name; // docs/cli.md: 128 first, 128 last, 256 between
    ASSERT_TRUE(c.p.has_value()) << name;
    EXPECT_EQ(*c.p, 2) << name;
  }
}

TEST(TimeBudget, StoppedSearchSaysSoAndReportsTheWorstRowItChecked) {
  // Row i attends {i - 1, i}: row i needs i steps, so the worst row checked
  // tells how far the search got. A budget of 1 ns stops after the first row.
  Loaded l = load(inlineSource("chain", "pattern p { attend { j : i - 1 <= j && j <= i } }", {}));
  ASSERT_NE(l.pattern, nullptr);
  ir::ConnectivityOptions options;
  options.timeBudgetSeconds = 1e-9;
  ir::Connectivity stopped = ir::analyzeConnectivity({l.ir.heads[0].set}, 40, options);
  EXPECT_TRUE(stopped.stoppedEarly);
  EXPECT_FALSE(stopped.exact);
  EXPECT_EQ(stopped.rowsChecked, 1);
  ASSERT_TRUE(stopped.p.has_value());
  EXPECT_EQ(*stopped.p, 1) << "the spread order checks row 0 first (p counts at least one step)";
  // A budget the search fits in changes nothing.
  options.timeBudgetSeconds = 1e6;
  ir::Connectivity whole = ir::analyzeConnectivity({l.ir.heads[0].set}, 40, options);
  EXPECT_FALSE(whole.stoppedEarly);
  EXPECT_TRUE(whole.exact);
  EXPECT_EQ(whole.rowsChecked, 40);
  ASSERT_TRUE(whole.p.has_value());
  EXPECT_EQ(*whole.p, 39);
}

TEST(TimeBudget, SpreadOrderReachesTheLastRowSecond) {
  // With a budget the rows are checked first, last, then halving: a search
  // stopped after two rows has seen the chain's worst row, n - 1.
  Loaded l = load(inlineSource("chain", "pattern p { attend { j : i - 1 <= j && j <= i } }", {}));
  ASSERT_NE(l.pattern, nullptr);
  ir::ConnectivityOptions options;
  options.timeBudgetSeconds = 1e6;
  options.maxSteps = 10;
  ir::Connectivity c = ir::analyzeConnectivity({l.ir.heads[0].set}, 40, options);
  EXPECT_FALSE(c.p.has_value());
  EXPECT_TRUE(c.gaveUp);
  // Ascending order would stop at row 10; the spread order meets row 39 second.
  ASSERT_TRUE(c.unreachableWitness.has_value());
  EXPECT_EQ(c.unreachableWitness->first, 39);
}

TEST(StepLimit, ChainNeedsOneStepPerKeyBack) {
  // Row i attends {i - 1, i}: key 0 is i steps away, so p = n - 1.
  Loaded l = load(inlineSource("chain", "pattern p { attend { j : i - 1 <= j && j <= i } }", {}));
  ASSERT_NE(l.pattern, nullptr);
  ir::Connectivity c = ir::analyzeConnectivity({l.ir.heads[0].set}, 64);
  ASSERT_TRUE(c.p.has_value());
  EXPECT_EQ(*c.p, 63);
  EXPECT_FALSE(c.gaveUp);
}

TEST(StepLimit, SearchThatRunsOutOfStepsSaysSo) {
  Loaded l = load(inlineSource("chain", "pattern p { attend { j : i - 1 <= j && j <= i } }", {}));
  ASSERT_NE(l.pattern, nullptr);
  ir::ConnectivityOptions options;
  options.maxSteps = 5;
  ir::Connectivity c = ir::analyzeConnectivity({l.ir.heads[0].set}, 20, options);
  EXPECT_FALSE(c.p.has_value());
  // Row 6 is the first that needs 6 steps (to key 0).
  EXPECT_EQ(c.unreachableWitness, std::make_pair(int64_t{6}, int64_t{0}));
  EXPECT_TRUE(c.gaveUp);
}

TEST(StepLimit, KeyThatIsNeverReachedIsNotAStepLimit) {
  Loaded l = load(inlineSource("self", "pattern p { attend { j : j == i } }", {}));
  ASSERT_NE(l.pattern, nullptr);
  ir::Connectivity c = ir::analyzeConnectivity({l.ir.heads[0].set}, 20);
  EXPECT_FALSE(c.p.has_value());
  EXPECT_EQ(c.unreachableWitness, std::make_pair(int64_t{1}, int64_t{0}));
  EXPECT_FALSE(c.gaveUp);
}

TEST(SampledConnectivity, SampleLargerThanTheSequenceChecksOnlyRealRows) {
  Loaded l = load({"causal", "causal", "", {}, {}});
  ASSERT_NE(l.pattern, nullptr);
  auto [sets, masks] = allHeads(l, 64);
  ir::ConnectivityOptions options;
  options.exactUpTo = 16; // defaults otherwise: 512 sample rows
  ir::Connectivity c = ir::analyzeConnectivity(sets, 64, options);
  EXPECT_LE(c.rowsChecked, 64);
  ASSERT_TRUE(c.p.has_value());
  EXPECT_EQ(*c.p, 1); // full causal attention reaches every j <= i in one step
}

/// Tiled NATTEN's rows read back groups of its children that the thread
/// keeps per distinct bound value and window (RowEvaluator::memoised): rows
/// in any order, in windows that grow, shrink and reach past [0, n), from
/// evaluators taking turns — the same set at three lengths (their groups
/// share the set's nodes, not their keys) and sets in tiles of 2 x 4 and
/// 4 x 4 on one canvas (equal bound values, other keys) — equal the oracle.
TEST(MemoisedRows, EqualTheOracleInAnyOrderAndWindow) {
  struct Evaluated {
    std::unique_ptr<Loaded> pattern;
    int64_t n;
    std::vector<char> mask;
    std::unique_ptr<ir::RowEvaluator> eval;
  };
  std::vector<Evaluated> evals;
  for (const Source &source :
       {Source{"natten2d_tiled_8x12_K3_2x4", "natten2d_tiled", "", {{"H", 8}, {"W", 12}, {"K", 3}, {"TH", 2}, {"TW", 4}}, {}},
        Source{"natten2d_tiled_8x12_K3_4x4", "natten2d_tiled", "", {{"H", 8}, {"W", 12}, {"K", 3}, {"TH", 4}, {"TW", 4}}, {}},
        Source{"natten2d_tiled_6x6_K5_3x3", "natten2d_tiled", "", {{"H", 6}, {"W", 6}, {"K", 5}, {"TH", 3}, {"TW", 3}}, {}},
        Source{"natten2d_tiled_16x16_K7_8x8", "natten2d_tiled", "", {{"H", 16}, {"W", 16}, {"K", 7}}, {}}}) {
    auto l = std::make_unique<Loaded>(load(source));
    ASSERT_NE(l->pattern, nullptr) << source.label;
    const int64_t canvas = source.defines[0].value * source.defines[1].value;
    for (int64_t n : {canvas, canvas + 13, canvas / 2 + 1}) {
      auto eval = std::make_unique<ir::RowEvaluator>(l->ir.heads[0].set, n);
      // (the test means nothing if the rows are not read back)
      ASSERT_EQ(eval->memoisedGroups(), 2u) << source.label << "\n" << ir::printSet(*l->ir.heads[0].set);
      evals.push_back({nullptr, n, oracle::denseMask(*l->pattern->heads[0], n), std::move(eval)});
    }
    evals.back().pattern = std::move(l); // (kept alive with its evaluators)
  }
  std::mt19937_64 rng(17);
  IntervalSet row;
  for (int step = 0; step < 6000; ++step) {
    const Evaluated &e = evals[rng() % evals.size()];
    const int64_t n = e.n, i = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    int64_t lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 8)) - 4;
    int64_t hi = lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 8));
    if (rng() % 4 == 0) { // (the whole row, as a block's check asks it)
      lo = 0;
      hi = n;
    }
    e.eval->rowIn(i, lo, hi, row);
    for (size_t x = 1; x < row.size(); ++x)
      ASSERT_LT(row[x - 1].hi, row[x].lo) << "row " << i << " is not normalised";
    ASSERT_TRUE(row.empty() || (row.front().lo >= lo && row.back().hi <= hi))
        << "n " << n << " row " << i << " has keys outside its window";
    for (int64_t j = std::max<int64_t>(lo, 0); j < std::min(hi, n); ++j)
      ASSERT_EQ(containsKey(row, j), e.mask[static_cast<size_t>(i * n + j)] != 0)
          << ir::printSet(*e.eval->set()) << "n " << n << " row " << i << " window [" << lo << ", " << hi
          << ") key " << j;
  }
}

} // namespace
} // namespace attnc
