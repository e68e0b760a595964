//===- RectangularTest.cpp - analyze and show on fewer queries than keys --===//
//
// With NQ <= NK the queries are the last NQ of the NK key positions (query
// row r is position r + NK - NQ, the runtime's bottom-right alignment).
// analyzeRowsAndTiles, criterion 2 and `attnc analyze --queries` must count
// those rows only, and `attnc show --queries` must draw them: every number
// here is checked against counts written out below from the brute-force
// oracle's membership of each (i, j) (support/Oracle.h evaluates Sema's
// terms pair by pair, none of the IR's closed forms), for library patterns
// at ragged NK and NQ in {1, 7, NK / 2, NK}. NQ = NK must give the square's
// output unchanged, and NQ outside [1, NK] is an error (exit 1).
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"

#include "attnc/analysis/Analysis.h"
#include "attnc/analysis/Report.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <regex>
#include <sstream>

namespace attnc::test {
namespace {

struct Case {
  std::string pattern;
  std::vector<Define> defines;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.pattern; }

/// Small parameters, so that the structure shows at NK below 100.
const std::vector<Case> kCases = {
    {"fixed", {{"l", 16}, {"c", 4}}},
    {"strided", {{"l", 8}}},
    {"local", {{"w", 5}}},
    {"longformer", {{"w", 4}, {"g", 2}}},
    {"bigbird", {{"b", 8}, {"g", 1}, {"r", 2}}},
    {"fixed_multihead", {{"l", 8}, {"c", 2}}}, // two distinct head sets
};

std::string defineFlags(const Case &c) {
  std::string out;
  for (const Define &d : c.defines)
    out += " -D " + d.name + "=" + std::to_string(d.value);
  return out;
}

struct Loaded {
  std::unique_ptr<Frontend> frontend;
  const Pattern *pattern = nullptr;
  ir::PatternIR ir;
};

Loaded load(const Case &c) {
  Loaded l{std::make_unique<Frontend>(), nullptr, {}};
  const bool ok = l.frontend->parseFile(libraryPattern(c.pattern)) && l.frontend->analyze({c.defines});
  for (const dsl::Diagnostic &d : l.frontend->diags().diagnostics())
    ADD_FAILURE() << l.frontend->diags().format(d);
  if (ok && !l.frontend->patterns().empty()) {
    l.pattern = &l.frontend->patterns().front();
    l.ir = ir::canonicalizePattern(*l.pattern);
  }
  return l;
}

/// What the analysis must report for rows [nk - nq, nk) of a row-major
/// nk x nk membership mask, counted pair by pair.
struct Expected {
  int64_t nnz = 0, minRow = std::numeric_limits<int64_t>::max(), maxRow = 0, emptyRows = 0;
  std::optional<int64_t> emptyWitness;
  int64_t leaks = 0;
  std::optional<std::pair<int64_t, int64_t>> leakWitness;
  int64_t keysRead = 0;
  int64_t full = 0, partial = 0, empty = 0, executedPairs = 0;
};

Expected bruteForce(const std::vector<char> &mask, int64_t nk, int64_t nq, int64_t br, int64_t bc) {
  Expected e;
  const int64_t first = nk - nq;
  std::vector<char> read(static_cast<size_t>(nk), 0);
  for (int64_t i = first; i < nk; ++i) {
    int64_t row = 0;
    for (int64_t j = 0; j < nk; ++j) {
      if (!mask[i * nk + j])
        continue;
      ++row;
      read[j] = 1;
      if (j > i) {
        ++e.leaks;
        if (!e.leakWitness)
          e.leakWitness = std::make_pair(i, j);
      }
    }
    e.nnz += row;
    e.minRow = std::min(e.minRow, row);
    e.maxRow = std::max(e.maxRow, row);
    if (row == 0) {
      ++e.emptyRows;
      if (!e.emptyWitness)
        e.emptyWitness = i;
    }
  }
  e.keysRead = std::count(read.begin(), read.end(), 1);
  // Tiles of the nq x nk rectangle from its top-left corner (first, 0).
  for (int64_t r0 = first; r0 < nk; r0 += br)
    for (int64_t c0 = 0; c0 < nk; c0 += bc) {
      int64_t pairs = 0, area = 0;
      for (int64_t i = r0; i < std::min(nk, r0 + br); ++i)
        for (int64_t j = c0; j < std::min(nk, c0 + bc); ++j, ++area)
          pairs += mask[i * nk + j] != 0;
      if (pairs == 0) {
        ++e.empty;
      } else {
        e.executedPairs += area;
        ++(pairs == area ? e.full : e.partial);
      }
    }
  return e;
}

/// Criterion 2 from rows [first, n): breadth-first over the union of the
/// heads' masks, any row being a step. {p, nullopt} or {0, the first row
/// and smallest key j <= i it never reaches}.
std::pair<int64_t, std::optional<std::pair<int64_t, int64_t>>>
reachFrom(const std::vector<std::vector<char>> &masks, int64_t n, int64_t first) {
  auto edge = [&](int64_t a, int64_t b) {
    return std::any_of(masks.begin(), masks.end(), [&](const std::vector<char> &m) { return m[a * n + b] != 0; });
  };
  int64_t worst = 0;
  for (int64_t i = first; i < n; ++i) {
    std::vector<int64_t> steps(static_cast<size_t>(n), -1);
    std::vector<int64_t> reached;
    for (int64_t j = 0; j < n; ++j)
      if (edge(i, j)) {
        steps[j] = 1;
        reached.push_back(j);
      }
    for (size_t k = 0; k < reached.size(); ++k)
      for (int64_t j = 0; j < n; ++j)
        if (steps[j] < 0 && edge(reached[k], j)) {
          steps[j] = steps[reached[k]] + 1;
          reached.push_back(j);
        }
    for (int64_t j = 0; j <= i; ++j) {
      if (steps[j] < 0)
        return {0, std::make_pair(i, j)};
      worst = std::max(worst, steps[j]);
    }
  }
  return {worst, std::nullopt};
}

class Rectangular : public ::testing::TestWithParam<std::tuple<Case, int64_t>> {
protected:
  /// NQ in {1, 7, NK / 2, NK}.
  static std::vector<int64_t> queryCounts(int64_t nk) { return {1, 7, nk / 2, nk}; }
};

TEST_P(Rectangular, RowAndTileStatisticsEqualTheBruteForceCountOfTheLastRows) {
  auto [c, nk] = GetParam();
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    const std::vector<char> mask = oracle::denseMask(*head.term, nk);
    for (int64_t nq : queryCounts(nk))
      for (auto [br, bc] : {std::pair<int64_t, int64_t>{8, 8}, {16, 4}, {64, 64}})
        for (ir::RowMethod method : {ir::RowMethod::Segments, ir::RowMethod::RowByRow}) {
          SCOPED_TRACE("nq=" + std::to_string(nq) + " tiles " + std::to_string(br) + "x" +
                       std::to_string(bc) + (method == ir::RowMethod::Segments ? " segments" : " row by row"));
          const Expected e = bruteForce(mask, nk, nq, br, bc);
          auto [rows, tiles] = ir::analyzeRowsAndTiles(head.set, ir::QueryRows{nk, nq}, br, bc, method);
          EXPECT_EQ(rows.n, nk);
          EXPECT_EQ(rows.queries, nq);
          EXPECT_EQ(rows.nnz, e.nnz);
          EXPECT_EQ(rows.minRow, e.minRow);
          EXPECT_EQ(rows.maxRow, e.maxRow);
          EXPECT_DOUBLE_EQ(rows.mean, double(e.nnz) / double(nq));
          EXPECT_EQ(rows.emptyRows, e.emptyRows);
          EXPECT_EQ(rows.emptyWitness, e.emptyWitness);
          EXPECT_EQ(rows.leaks, e.leaks);
          EXPECT_EQ(rows.leakWitness, e.leakWitness);
          if (nq < nk) {
            EXPECT_EQ(rows.keysRead, e.keysRead);
          } else {
            EXPECT_FALSE(rows.keysRead) << "the square reports no keys read";
          }
          EXPECT_EQ(tiles.full, e.full);
          EXPECT_EQ(tiles.partial, e.partial);
          EXPECT_EQ(tiles.empty, e.empty);
          EXPECT_EQ(tiles.executedPairs, e.executedPairs);
          EXPECT_DOUBLE_EQ(tiles.waste, e.nnz ? double(e.executedPairs) / double(e.nnz) : 1.0);
          // analyzeRows alone counts the same rows.
          const ir::RowStats alone = ir::analyzeRows(head.set, ir::QueryRows{nk, nq}, method);
          EXPECT_EQ(alone.nnz, e.nnz);
          EXPECT_EQ(alone.keysRead, rows.keysRead);
        }
  }
}

TEST_P(Rectangular, AllRowsAreTheSquare) {
  auto [c, nk] = GetParam();
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    auto [square, squareTiles] = ir::analyzeRowsAndTiles(head.set, nk, 16, 8);
    auto [rows, tiles] = ir::analyzeRowsAndTiles(head.set, ir::QueryRows{nk, nk}, 16, 8);
    EXPECT_EQ(rows.nnz, square.nnz);
    EXPECT_EQ(rows.minRow, square.minRow);
    EXPECT_EQ(rows.maxRow, square.maxRow);
    EXPECT_DOUBLE_EQ(rows.mean, square.mean);
    EXPECT_EQ(rows.emptyWitness, square.emptyWitness);
    EXPECT_EQ(rows.leakWitness, square.leakWitness);
    EXPECT_EQ(tiles.full, squareTiles.full);
    EXPECT_EQ(tiles.partial, squareTiles.partial);
    EXPECT_EQ(tiles.executedPairs, squareTiles.executedPairs);
  }
}

TEST_P(Rectangular, CriterionTwoFromTheLastRowsEqualsTheBruteForceSearch) {
  auto [c, nk] = GetParam();
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  std::vector<ir::SetRef> sets;
  std::vector<std::vector<char>> masks;
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    sets.push_back(head.set);
    masks.push_back(oracle::denseMask(*head.term, nk));
  }
  for (int64_t nq : queryCounts(nk)) {
    ir::ConnectivityOptions options;
    options.firstRow = nk - nq;
    const ir::Connectivity fast = ir::analyzeConnectivity(sets, nk, options);
    auto [p, witness] = reachFrom(masks, nk, nk - nq);
    EXPECT_EQ(fast.rowsChecked, nq) << "nq=" << nq;
    EXPECT_TRUE(fast.exact);
    if (witness) {
      EXPECT_FALSE(fast.p) << "nq=" << nq;
      EXPECT_EQ(fast.unreachableWitness, witness) << "nq=" << nq;
    } else {
      EXPECT_EQ(fast.p, p) << "nq=" << nq;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Library, Rectangular,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(37, 100)),
                         [](const ::testing::TestParamInfo<std::tuple<Case, int64_t>> &info) {
                           return std::get<0>(info.param).pattern + "_nk" +
                                  std::to_string(std::get<1>(info.param));
                         });

// ---- attnc analyze --queries --------------------------------------------------------

/// `analyze --json` of the last nq rows against the brute-force count.
class RectangularCli : public ::testing::TestWithParam<Case> {};

TEST_P(RectangularCli, AnalyzeJsonCountsTheLastRowsOnly) {
  const Case &c = GetParam();
  const int64_t nk = 77, block = 16;
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  for (int64_t nq : {int64_t{1}, int64_t{7}, nk / 2}) {
    CommandResult r = attnc("analyze " + libraryPattern(c.pattern) + " --n " + std::to_string(nk) + " --queries " +
                            std::to_string(nq) + " --block " + std::to_string(block) + " --json" + defineFlags(c));
    ASSERT_EQ(r.exitCode, 0) << r.err;
    Json doc = parseJson(r.out);
    EXPECT_EQ(doc["n"].integer, nk);
    EXPECT_EQ(doc["queries"].integer, nq);
    EXPECT_EQ(doc["first_row"].integer, nk - nq);
    ASSERT_EQ(doc["heads"].array.size(), l.ir.heads.size());
    for (size_t k = 0; k < l.ir.heads.size(); ++k) {
      const Expected e = bruteForce(oracle::denseMask(*l.ir.heads[k].term, nk), nk, nq, block, block);
      const Json &h = doc["heads"].array[k];
      SCOPED_TRACE("nq=" + std::to_string(nq) + " head " + std::to_string(k));
      EXPECT_EQ(h["nnz"].integer, e.nnz);
      EXPECT_EQ(h["row_nnz"]["min"].integer, e.minRow);
      EXPECT_EQ(h["row_nnz"]["max"].integer, e.maxRow);
      EXPECT_NEAR(h["row_nnz"]["mean"].number, double(e.nnz) / double(nq), 1e-6);
      EXPECT_EQ(h["keys_read"].integer, e.keysRead);
      EXPECT_EQ(h["empty_rows"].integer, e.emptyRows);
      EXPECT_EQ(h["causal_leaks"].integer, e.leaks);
      EXPECT_EQ(h["blocks"]["size"].integer, block);
      EXPECT_EQ(h["blocks"]["full"].integer, e.full);
      EXPECT_EQ(h["blocks"]["partial"].integer, e.partial);
      EXPECT_EQ(h["blocks"]["empty"].integer, e.empty);
      EXPECT_EQ(h["blocks"]["executed_pairs"].integer, e.executedPairs);
    }
    EXPECT_EQ(doc["connectivity"]["rows_checked"].integer, nq);
  }
}

/// Everything but the timing: the JSON's "seconds", the text's last line.
std::string withoutTiming(const std::string &out) {
  std::string s = std::regex_replace(out, std::regex(R"("seconds": [0-9.]+)"), "\"seconds\": T");
  return std::regex_replace(s, std::regex(R"(analysis time [0-9.]+ ms)"), "analysis time T ms");
}

TEST_P(RectangularCli, AllQueriesIsTheSquaresOutput) {
  const Case &c = GetParam();
  const std::string base = "analyze " + libraryPattern(c.pattern) + " --n 91" + defineFlags(c);
  for (const char *json : {"", " --json"}) {
    CommandResult square = attnc(base + json);
    CommandResult all = attnc(base + " --queries 91" + json);
    ASSERT_EQ(square.exitCode, 0) << square.err;
    ASSERT_EQ(all.exitCode, 0) << all.err;
    EXPECT_EQ(withoutTiming(all.out), withoutTiming(square.out));
  }
  EXPECT_EQ(attnc(base + " --json").out.find("\"queries\""), std::string::npos)
      << "the square's JSON keeps its keys";
}

INSTANTIATE_TEST_SUITE_P(Library, RectangularCli, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case> &info) { return info.param.pattern; });

TEST(RectangularAnalyze, TextSaysWhichRowsItCounts) {
  CommandResult r = attnc("analyze " + libraryPattern("fixed") + " --n 4096 --queries 7");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("queries 7: rows i = 4089 .. 4095, the last 7 of the 4096 key positions"), std::string::npos)
      << r.out;
  // Rows 4089 .. 4095 of fixed (l = 128, c = 8): i - 3967 keys of the own
  // block and 8 summary keys in each of the 31 blocks before it.
  EXPECT_NE(r.out.find("  nnz           " + std::to_string((122 + 128) * 7 / 2 + 7 * 31 * 8) + "  "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  keys per row  min 370, max 376, mean 373.00"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  keys read     376"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("for the 7 query rows):  p = 2  (every query row checked)"), std::string::npos) << r.out;
}

TEST(RectangularAnalyze, MoreQueriesThanKeysIsAnError) {
  const std::string base = "analyze " + libraryPattern("fixed") + " --n 64";
  CommandResult more = attnc(base + " --queries 65");
  EXPECT_EQ(more.exitCode, 1);
  EXPECT_NE(more.err.find("error: --queries 65 is more than --n 64"), std::string::npos) << more.err;
  EXPECT_EQ(more.out, "");
  for (const char *bad : {"0", "-3"}) {
    CommandResult none = attnc(base + " --queries " + bad);
    EXPECT_EQ(none.exitCode, 1) << bad;
    EXPECT_NE(none.err.find("--queries " + std::string(bad) + " leaves no query row"), std::string::npos)
        << none.err;
  }
}

TEST(RectangularAnalyze, ADecodingStepOnTheLongestCacheCountsItsOneRow) {
  CommandResult r = attnc("analyze " + libraryPattern("strided") + " --n 16777216 --queries 1 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  const int64_t n = int64_t{1} << 24, l = 128;
  // Row n - 1: the band [n - 1 - l, n - 1] and every l-th key below it.
  const int64_t band = l + 1, below = (n - 1 - l) / l;
  EXPECT_EQ(doc["heads"].array[0]["nnz"].integer, band + below);
  EXPECT_EQ(doc["heads"].array[0]["keys_read"].integer, band + below);
  EXPECT_EQ(doc["connectivity"]["rows_checked"].integer, 1);
}

// ---- attnc show --queries -----------------------------------------------------------

std::vector<std::string> linesOf(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

/// The union of every head's brute-force mask.
std::vector<char> unionMask(const Loaded &l, int64_t n) {
  std::vector<char> out(static_cast<size_t>(n * n), 0);
  for (const ir::PatternIR::Head &head : l.ir.heads) {
    std::vector<char> mask = oracle::denseMask(*head.term, n);
    for (size_t k = 0; k < out.size(); ++k)
      out[k] |= mask[k];
  }
  return out;
}

TEST_P(RectangularCli, SvgHasOneRowOfCellsPerQuery) {
  const Case &c = GetParam();
  const int64_t nk = 61;
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  const std::vector<char> mask = unionMask(l, nk);
  ScratchDir dir;
  for (int64_t nq : {int64_t{1}, int64_t{7}, nk / 2}) {
    const std::string svg = dir.file("p.svg");
    CommandResult r = attnc("show " + libraryPattern(c.pattern) + " --n " + std::to_string(nk) + " --queries " +
                            std::to_string(nq) + defineFlags(c) + " -o " + svg);
    ASSERT_EQ(r.exitCode, 0) << r.err;
    EXPECT_NE(r.err.find("(" + std::to_string(nq) + "x" + std::to_string(nk) + " cells)"), std::string::npos)
        << r.err;
    const std::string text = readFile(svg);
    EXPECT_NE(text.find("queries=" + std::to_string(nq)), std::string::npos) << "the title";
    EXPECT_NE(text.find(nq == 1 ? "the row is the query i = " + std::to_string(nk - 1) + ", the last of"
                                : "rows are the queries i = " + std::to_string(nk - nq) + " .. " +
                                      std::to_string(nk - 1) + ", the last " + std::to_string(nq) + " of"),
              std::string::npos);
    size_t g0 = text.find("<g "), g1 = text.find("</g>");
    ASSERT_TRUE(g0 != std::string::npos && g1 != std::string::npos && g0 < g1);
    const std::string group = text.substr(g0, g1 - g0);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(group, m, std::regex(R"re(<rect width="(\d+)" height="(\d+)")re")));
    const int64_t width = std::stoll(m[1]), height = std::stoll(m[2]);
    ASSERT_EQ(width % nk, 0);
    ASSERT_EQ(height % nq, 0);
    // Square cells, rows stretched only to keep the raster 24 units tall.
    const int64_t cell = width / nk, rowCell = height / nq;
    EXPECT_EQ(rowCell, std::max(cell, (24 + nq - 1) / nq)) << "nq rows";
    // Cell row r is query position nk - nq + r.
    std::vector<char> drawn(static_cast<size_t>(nq * nk), 0);
    std::regex rect(R"re(<rect x="(\d+)" y="(\d+)" width="(\d+)" height="(\d+)")re");
    for (auto it = std::sregex_iterator(group.begin(), group.end(), rect); it != std::sregex_iterator(); ++it) {
      const int64_t x = std::stoll((*it)[1]), y = std::stoll((*it)[2]), w = std::stoll((*it)[3]);
      ASSERT_TRUE(y % rowCell == 0 && y / rowCell < nq && std::stoll((*it)[4]) == rowCell) << it->str();
      for (int64_t col = x / cell; col < (x + w) / cell; ++col)
        drawn[(y / rowCell) * nk + col] = 1;
    }
    for (int64_t r0 = 0; r0 < nq; ++r0)
      for (int64_t j = 0; j < nk; ++j)
        EXPECT_EQ(drawn[r0 * nk + j] != 0, mask[(nk - nq + r0) * nk + j] != 0)
            << "nq=" << nq << " pair (" << nk - nq + r0 << ", " << j << ")";
  }
}

TEST(RectangularShow, AsciiRowsAreTheLastQueries) {
  Case c = kCases[0];
  const int64_t nk = 50, nq = 7;
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  const std::vector<char> mask = unionMask(l, nk);
  CommandResult r = attnc("show " + libraryPattern(c.pattern) + " --n 50 --queries 7" + defineFlags(c));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::vector<std::string> lines = linesOf(r.out);
  ASSERT_GT(lines.size(), size_t(nq));
  EXPECT_EQ(lines[0], "fixed (n=50, queries=7, l=16, c=4, causal)");
  EXPECT_EQ(lines[1], "(rows are the queries i = 43 .. 49, the last 7 of the 50 key positions)");
  EXPECT_EQ(lines[lines.size() - nq - 1], "  .  not attended") << "exactly nq raster lines";
  for (int64_t r0 = 0; r0 < nq; ++r0) {
    const std::string &row = lines[lines.size() - nq + r0];
    ASSERT_EQ(int64_t(row.size()), nk) << row;
    for (int64_t j = 0; j < nk; ++j)
      EXPECT_EQ(row[j] != '.', mask[(nk - nq + r0) * nk + j] != 0) << "pair (" << nk - nq + r0 << ", " << j << ")";
  }
}

TEST(RectangularShow, DownsampledRowsShrinkByTheKeysFactor) {
  Case c = {"strided", {{"l", 16}}};
  const int64_t nk = 600, nq = 100, side = 64;
  Loaded l = load(c);
  ASSERT_NE(l.pattern, nullptr);
  const std::vector<char> mask = unionMask(l, nk);
  CommandResult r = attnc("show " + libraryPattern(c.pattern) + " --n 600 --queries 100 --max-side 64" + defineFlags(c));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::vector<std::string> lines = linesOf(r.out);
  const int64_t rows = (nq * side + nk - 1) / nk; // 11
  ASSERT_EQ(lines[lines.size() - rows - 1], "  .  not attended") << r.out;
  // A cell is attended when any pair it covers is: query q in cell row
  // q * rows / nq, key j in column j * side / nk.
  std::vector<char> want(static_cast<size_t>(rows * side), 0);
  for (int64_t q = 0; q < nq; ++q)
    for (int64_t j = 0; j < nk; ++j)
      if (mask[(nk - nq + q) * nk + j])
        want[(q * rows / nq) * side + j * side / nk] = 1;
  for (int64_t pr = 0; pr < rows; ++pr) {
    const std::string &row = lines[lines.size() - rows + pr];
    ASSERT_EQ(int64_t(row.size()), side) << row;
    for (int64_t col = 0; col < side; ++col)
      EXPECT_EQ(row[col] != '.', want[pr * side + col] != 0) << "cell (" << pr << ", " << col << ")";
  }
}

TEST(RectangularShow, PngIsTitledWithTheQueriesAndShorterThanTheSquare) {
  ScratchDir dir;
  const std::string base = "show " + libraryPattern("local") + " --n 40 -D w=5 -o ";
  ASSERT_EQ(attnc(base + dir.file("square.png")).exitCode, 0);
  CommandResult r = attnc(base + dir.file("rect.png") + " --queries 7");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::string square = readFile(dir.file("square.png")), rect = readFile(dir.file("rect.png"));
  ASSERT_GT(rect.size(), 24u);
  EXPECT_EQ(rect.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_NE(rect.find(std::string("Title\0local (n=40, queries=7, w=5, causal)", 42)), std::string::npos);
  auto heightOf = [](const std::string &png) {
    return uint32_t(uint8_t(png[20])) << 24 | uint32_t(uint8_t(png[21])) << 16 | uint32_t(uint8_t(png[22])) << 8 |
           uint32_t(uint8_t(png[23]));
  };
  // 33 fewer rows of 19-pixel cells, give or take the caption's line.
  EXPECT_LE(heightOf(rect) + 33 * 19, heightOf(square) + 40);
  EXPECT_GE(heightOf(rect) + 33 * 19, heightOf(square));
}

TEST(RectangularShow, MoreQueriesThanKeysIsAnError) {
  CommandResult r = attnc("show " + libraryPattern("fixed") + " --n 32 --queries 33");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("error: --queries 33 is more than --n 32"), std::string::npos) << r.err;
  EXPECT_EQ(attnc("show " + libraryPattern("fixed") + " --n 32 --queries 0").exitCode, 1);
  CommandResult all = attnc("show " + libraryPattern("fixed") + " --n 32 --queries 32");
  CommandResult square = attnc("show " + libraryPattern("fixed") + " --n 32");
  ASSERT_EQ(all.exitCode, 0) << all.err;
  EXPECT_EQ(all.out, square.out);
}

} // namespace
} // namespace attnc::test
