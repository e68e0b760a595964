//===- CliTest.cpp - The front-end subcommands of the attnc binary --------===//
//
// check, analyze, show and emit, run as a user runs them: exit codes (0 ok,
// 1 error in the pattern, 2 usage error), clang-style diagnostics, the
// `analyze --json` contract (docs/cli.md) read with a real JSON parser, the
// pictures (SVG cells and PNG pixels compared with the brute-force oracle),
// the legends naming the pattern's own lets, and every --help.
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"

#include "attnc/analysis/Picture.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"

#include "attnc/attnc.h"

#include <gtest/gtest.h>

#include <zlib.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace attnc::test {
namespace {

const char *const kLibrary[] = {"axial", "bigbird",         "causal",          "dilated",
                                "fixed", "fixed_multihead", "fixed_subblocks", "full",
                                "local", "longformer",      "strided",         "strided_multihead",
                                "natten2d", "natten2d_tiled", "sta3d", "swin"};

/// Union over every head of a library pattern's brute-force masks.
std::vector<char> oracleUnion(const std::string &name, const std::vector<Define> &defines,
                              int64_t n) {
  Frontend fe;
  EXPECT_TRUE(fe.parseFile(libraryPattern(name)));
  EXPECT_TRUE(fe.analyze({defines}));
  std::vector<char> out(static_cast<size_t>(n * n), 0);
  if (fe.patterns().empty())
    return out;
  for (const TermRef &head : fe.patterns().front().heads) {
    std::vector<char> mask = oracle::denseMask(*head, n);
    for (size_t k = 0; k < out.size(); ++k)
      out[k] |= mask[k];
  }
  return out;
}

// ---- Exit codes and diagnostics -------------------------------------------------

TEST(CliCheck, AcceptsEveryLibraryPattern) {
  for (const char *name : kLibrary) {
    CommandResult r = attnc("check " + libraryPattern(name));
    EXPECT_EQ(r.exitCode, 0) << name << "\n" << r.err;
    EXPECT_NE(r.out.find("pattern '" + std::string(name) + "' ok"), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "") << name;
  }
}

TEST(CliCheck, MalformedPatternExitsOneWithALocatedError) {
  ScratchDir dir;
  std::string path = dir.file("bad.attn");
  writeFile(path, "pattern bad {\n  attend { j : j % 0 == 1 }\n}\n");
  CommandResult r = attnc("check " + path);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.out, "");
  // file:line:col: error: message, then the source line and a caret under column 20.
  std::istringstream lines(r.err);
  std::string first, source, caret;
  std::getline(lines, first);
  std::getline(lines, source);
  std::getline(lines, caret);
  EXPECT_EQ(first, path + ":2:20: error: modulus must be a positive integer, got 0");
  EXPECT_EQ(source, "  attend { j : j % 0 == 1 }");
  EXPECT_EQ(caret, std::string(19, ' ') + "^");
  EXPECT_NE(r.err.find("1 error generated."), std::string::npos);
}

TEST(CliCheck, SeveralErrorsAreAllReported) {
  ScratchDir dir;
  std::string path = dir.file("two.attn");
  writeFile(path, "pattern a { attend { j : j < w } }\npattern b { attend { j : j / 0 == 1 } }\n");
  CommandResult r = attnc("check " + path);
  EXPECT_EQ(r.exitCode, 1);
  std::regex located("^" + path + R"(:\d+:\d+: error: )");
  int errors = 0;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    errors += std::regex_search(line, located);
  EXPECT_EQ(errors, 2) << r.err;
}

TEST(CliCheck, WarningsAloneDoNotFail) {
  ScratchDir dir;
  std::string path = dir.file("warn.attn");
  writeFile(path, "pattern p {\n  causal\n  causal\n  attend { j : true }\n}\n");
  CommandResult r = attnc("check " + path);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.err.find(path + ":3:3: warning: duplicate 'causal'"), std::string::npos) << r.err;
}

TEST(CliCheck, MissingFileIsAUsageError) {
  CommandResult r = attnc("check /nonexistent/file.attn");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("/nonexistent/file.attn"), std::string::npos) << r.err;
}

TEST(CliCheck, UnknownFlagIsAUsageError) {
  CommandResult r = attnc("check " + libraryPattern("fixed") + " --no-such-flag");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << r.err;
}

TEST(CliCheck, MissingSubcommandIsAUsageError) { EXPECT_EQ(attnc("").exitCode, 2); }

TEST(CliCheck, MalformedDefineIsAUsageError) {
  CommandResult r = attnc("check " + libraryPattern("fixed") + " -D l");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("expected 'name=value'"), std::string::npos) << r.err;
  EXPECT_EQ(attnc("check " + libraryPattern("fixed") + " -D l=x").exitCode, 2);
}

TEST(CliCheck, UnknownDefineIsAnErrorInThePattern) {
  CommandResult r = attnc("check " + libraryPattern("fixed") + " -D w=3");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("attnc: error: unknown parameter 'w' in -D w=3; the file declares: l, c"),
            std::string::npos)
      << r.err;
}

TEST(CliCheck, DefineThatBreaksARequirementIsAnErrorInThePattern) {
  CommandResult r = attnc("check " + libraryPattern("fixed") + " -D c=200");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("error: requirement '1 <= c && c <= l' does not hold: c must lie in [1, l]"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("note: 'c' is 200 (set by -D c=200)"), std::string::npos) << r.err;
}

TEST(CliCheck, PatternOptionSelectsByNameAndRejectsAnUnknownOne) {
  ScratchDir dir;
  std::string path = dir.file("two.attn");
  writeFile(path, "pattern a { attend { j : true } }\npattern b { causal attend { j : true } }\n");
  EXPECT_EQ(attnc("analyze " + path + " --pattern b --n 4 --json").exitCode, 0);
  CommandResult r = attnc("analyze " + path + " --pattern c --n 4");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("no pattern named 'c'"), std::string::npos) << r.err;
}

TEST(CliCheck, NoPatternEndsInAnInternalError) {
  ScratchDir dir;
  writeFile(dir.file("in.attn"),
            "pattern p { param c = 2 require c in {1, 2} attend { j : true } }\n");
  writeFile(dir.file("h.attn"),
            "pattern p { attend { j : true } head 3 attends { j : j % (1 - h) == 0 } }\n");
  CommandResult valid = attnc("check " + dir.file("in.attn"));
  EXPECT_EQ(valid.exitCode, 0) << valid.err;
  CommandResult invalid = attnc("check " + dir.file("h.attn"));
  EXPECT_EQ(invalid.exitCode, 1) << invalid.err;
  EXPECT_NE(invalid.err.find("error: modulus '1 - h' can be zero or negative"), std::string::npos)
      << invalid.err;
}

TEST(CliAnalyze, OutOfRangeLengthIsAUsageError) {
  EXPECT_EQ(attnc("analyze " + libraryPattern("fixed")).exitCode, 2); // --n is required
  EXPECT_EQ(attnc("analyze " + libraryPattern("fixed") + " --n 0").exitCode, 2);
  EXPECT_EQ(attnc("analyze " + libraryPattern("fixed") + " --n 99999999").exitCode, 2);
  EXPECT_EQ(attnc("analyze " + libraryPattern("fixed") + " --n 64 --block 0").exitCode, 2);
}

TEST(CliAnalyze, CriterionTwoStopsAtItsTimeBudgetAndSaysSo) {
  const std::string base = "analyze " + libraryPattern("strided") + " --n 65536";
  CommandResult text = attnc(base + " --connectivity-seconds 0.000001");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("s limit; --connectivity-seconds 0 checks every chosen row"), std::string::npos)
      << text.out;
  CommandResult stopped = attnc(base + " --connectivity-seconds 0.000001 --json");
  ASSERT_EQ(stopped.exitCode, 0) << stopped.err;
  Json doc = parseJson(stopped.out);
  EXPECT_TRUE(doc["connectivity"]["stopped_early"].boolean);
  EXPECT_LT(doc["connectivity"]["rows_checked"].integer, 512);
  EXPECT_GE(doc["connectivity"]["rows_checked"].integer, 1);
  CommandResult whole = attnc(base + " --connectivity-seconds 0 --json");
  ASSERT_EQ(whole.exitCode, 0) << whole.err;
  Json all = parseJson(whole.out);
  EXPECT_FALSE(all["connectivity"]["stopped_early"].boolean);
  EXPECT_EQ(all["connectivity"]["rows_checked"].integer, 512);
  EXPECT_EQ(all["connectivity"]["p"].integer, 2);
  EXPECT_EQ(attnc(base + " --connectivity-seconds -1").exitCode, 2);
}

TEST(CliAnalyze, BinaryGarbageIsADiagnosticNotACrash) {
  ScratchDir dir;
  std::string path = dir.file("garbage.attn");
  writeFile(path, std::string("\x7f"
                              "ELF\x01\x02\x00\xff\xfe{{{{",
                              13));
  CommandResult r = attnc("analyze " + path + " --n 8");
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find(": error: "), std::string::npos);
}

// ---- --help ------------------------------------------------------------------------

class CliHelp : public ::testing::TestWithParam<std::string> {};

TEST_P(CliHelp, ExitsZeroAndEndsWithExamplesOnTheLibrary) {
  CommandResult r = attnc(GetParam() + " --help");
  EXPECT_EQ(r.exitCode, 0) << r.err;
  size_t at = r.out.find("\nExamples:\n");
  ASSERT_NE(at, std::string::npos) << r.out;
  std::istringstream lines(r.out.substr(at + 11));
  int examples = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  attnc ", 0) != 0)
      break;
    ++examples;
    std::smatch m;
    for (std::string rest = line; std::regex_search(rest, m, std::regex(R"(patterns/(\w+)\.attn)"));
         rest = m.suffix())
      EXPECT_TRUE(std::filesystem::exists(libraryPattern(m[1]))) << line;
  }
  EXPECT_GE(examples, 1) << r.out;
  if (!GetParam().empty()) {
    EXPECT_NE(r.out.find("  attnc " + GetParam() + " "), std::string::npos) << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Subcommands, CliHelp,
                         ::testing::Values("", "check", "show", "analyze", "emit", "compile", "run",
                                           "bench", "tune"),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param.empty() ? std::string("main") : info.param;
                         });

// ---- analyze --json -------------------------------------------------------------------

bool isInt(const Json &j) { return j.kind == Json::Int; }
bool isNumber(const Json &j) { return j.kind == Json::Int || j.kind == Json::Float; }

/// Checks the contract fields' presence and types, and that every other field
/// is a documented extension.
void expectContract(const Json &doc) {
  ASSERT_EQ(doc.kind, Json::Object);
  const std::set<std::string> top = {"pattern", "n",            "params",  "heads",           "num_heads",
                                     "causal",  "connectivity", "seconds", "context_parallel"};
  for (const std::string &k : doc.keys())
    EXPECT_TRUE(top.count(k)) << "undocumented field '" << k << "'";
  ASSERT_TRUE(doc.has("pattern") && doc.has("n") && doc.has("params") && doc.has("heads"));
  EXPECT_EQ(doc["pattern"].kind, Json::String);
  EXPECT_TRUE(isInt(doc["n"]));
  ASSERT_EQ(doc["params"].kind, Json::Object);
  for (const auto &[name, value] : doc["params"].object)
    EXPECT_TRUE(isInt(value)) << "params." << name;
  ASSERT_EQ(doc["heads"].kind, Json::Array);
  ASSERT_FALSE(doc["heads"].array.empty());
  const std::set<std::string> head = {"head",
                                      "nnz",
                                      "row_nnz",
                                      "empty_rows",
                                      "blocks",
                                      "heads",
                                      "empty_row_witness",
                                      "causal_leaks",
                                      "causal_leak_witness"};
  const std::set<std::string> blocks = {"size", "full",           "partial", "empty",
                                        "cols", "executed_pairs", "waste"};
  for (const Json &h : doc["heads"].array) {
    ASSERT_EQ(h.kind, Json::Object);
    for (const std::string &k : h.keys())
      EXPECT_TRUE(head.count(k)) << "undocumented field 'heads[]." << k << "'";
    for (const char *k : {"head", "nnz", "empty_rows"}) {
      ASSERT_TRUE(h.has(k)) << k;
      EXPECT_TRUE(isInt(h[k])) << k;
    }
    ASSERT_TRUE(h.has("row_nnz"));
    std::vector<std::string> rowKeys = h["row_nnz"].keys();
    std::sort(rowKeys.begin(), rowKeys.end());
    EXPECT_EQ(rowKeys, (std::vector<std::string>{"max", "mean", "min"}));
    EXPECT_TRUE(isInt(h["row_nnz"]["min"]));
    EXPECT_TRUE(isInt(h["row_nnz"]["max"]));
    EXPECT_TRUE(isNumber(h["row_nnz"]["mean"]));
    ASSERT_TRUE(h.has("blocks"));
    for (const std::string &k : h["blocks"].keys())
      EXPECT_TRUE(blocks.count(k)) << "undocumented field 'heads[].blocks." << k << "'";
    for (const char *k : {"size", "full", "partial", "empty"}) {
      ASSERT_TRUE(h["blocks"].has(k)) << k;
      EXPECT_TRUE(isInt(h["blocks"][k])) << k;
    }
  }
}

TEST(CliAnalyze, JsonIsOneObjectOnOneLineWithTheContractFields) {
  CommandResult r =
      attnc("analyze " + libraryPattern("fixed_multihead") + " --n 300 --block 64 --json -D l=32");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
  EXPECT_EQ(r.out.back(), '\n');
  Json doc = parseJson(r.out);
  expectContract(doc);
  EXPECT_EQ(doc["pattern"].string, "fixed_multihead");
  EXPECT_EQ(doc["n"].integer, 300);
  EXPECT_EQ(doc["params"].keys(), (std::vector<std::string>{"l", "c"}));
  EXPECT_EQ(doc["params"]["l"].integer, 32);
  EXPECT_EQ(doc["params"]["c"].integer, 8);
}

/// --ranks adds "context_parallel": the ranks' positions cover [0, n) once,
/// their pairs add up to the pattern's, and the bytes are the rows times a
/// position's K and V over the key/value heads; ring attention's beside them.
TEST(CliAnalyze, RanksShareThePositionsAndCountTheRowsEachReceives) {
  CommandResult r = attnc("analyze " + libraryPattern("local") +
                          " --n 1000 -D w=50 --ranks 4 --d 64 --kv-heads 2 --dtype f32 --no-connectivity --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  expectContract(doc);
  const Json &cp = doc["context_parallel"];
  EXPECT_EQ(cp["ranks"].integer, 4);
  ASSERT_EQ(cp["ranges"].array.size(), 4u);
  int64_t next = 0;
  double pairs = 0;
  for (size_t q = 0; q < 4; ++q) {
    ASSERT_EQ(cp["ranges"].array[q].array.size(), 1u); // a band: one run per rank
    EXPECT_EQ(cp["ranges"].array[q].array[0].array[0].integer, next);
    next = cp["ranges"].array[q].array[0].array[1].integer;
    pairs += cp["pairs"].array[q].number;
    // A band of 50 keys: every rank but the first reads the 49 rows before its first.
    EXPECT_EQ(cp["recv_rows"].array[q].integer, q == 0 ? 0 : 49);
    EXPECT_EQ(cp["forward_bytes"].array[q].integer, cp["recv_rows"].array[q].integer * 2 * 64 * 2 * 4);
  }
  EXPECT_EQ(next, 1000);
  EXPECT_DOUBLE_EQ(pairs, double(doc["heads"].array[0]["nnz"].integer));
  EXPECT_LE(cp["pairs_max_over_mean"].number, 1.01);
  EXPECT_EQ(cp["row_bytes"].integer, 2 * 64 * 2 * 4);
  EXPECT_EQ(cp["ring_recv_rows"].integer, 750);
  EXPECT_EQ(cp["ring_forward_bytes"].integer, 750 * 2 * 64 * 2 * 4);
  CommandResult text = attnc("analyze " + libraryPattern("local") + " --n 1000 -D w=50 --ranks 4 --no-connectivity");
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("context parallel over 4 ranks"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("ring attention: every rank receives 750 rows"), std::string::npos) << text.out;
  // Without --ranks there is no such field; --ranks 0 is a usage error.
  CommandResult plain = attnc("analyze " + libraryPattern("local") + " --n 1000 --no-connectivity --json");
  EXPECT_FALSE(parseJson(plain.out).has("context_parallel"));
  EXPECT_EQ(attnc("analyze " + libraryPattern("local") + " --n 1000 --ranks 0").exitCode, 2);
}

TEST(CliAnalyze, JsonHeadsAreTheDistinctSetsWithHandCountedValues) {
  CommandResult r =
      attnc("analyze " + libraryPattern("fixed_multihead") + " --n 300 --block 64 --json -D l=32");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  const int64_t n = 300, l = 32, c = 8, b = 64;
  // Head 0: own block up to i; head 1: the last c columns of every block, j <= i.
  auto in = [&](int head, int64_t i, int64_t j) {
    return j <= i && (head == 0 ? j / l == i / l : j % l >= l - c);
  };
  ASSERT_EQ(doc["heads"].array.size(), 2u);
  for (int head = 0; head < 2; ++head) {
    int64_t nnz = 0, minRow = INT64_MAX, maxRow = 0, emptyRows = 0, full = 0, partial = 0,
            empty = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t row = 0;
      for (int64_t j = 0; j < n; ++j)
        row += in(head, i, j);
      nnz += row;
      minRow = std::min(minRow, row);
      maxRow = std::max(maxRow, row);
      emptyRows += row == 0;
    }
    for (int64_t r0 = 0; r0 < n; r0 += b)
      for (int64_t c0 = 0; c0 < n; c0 += b) {
        int64_t pairs = 0, area = 0;
        for (int64_t i = r0; i < std::min(n, r0 + b); ++i)
          for (int64_t j = c0; j < std::min(n, c0 + b); ++j, ++area)
            pairs += in(head, i, j);
        ++(pairs == 0 ? empty : pairs == area ? full : partial);
      }
    const Json &h = doc["heads"].array[head];
    EXPECT_EQ(h["head"].integer, head);
    EXPECT_EQ(h["nnz"].integer, nnz);
    EXPECT_EQ(h["row_nnz"]["min"].integer, minRow);
    EXPECT_EQ(h["row_nnz"]["max"].integer, maxRow);
    EXPECT_NEAR(h["row_nnz"]["mean"].number, double(nnz) / double(n), 1e-6);
    EXPECT_EQ(h["empty_rows"].integer, emptyRows);
    EXPECT_EQ(h["blocks"]["size"].integer, b);
    EXPECT_EQ(h["blocks"]["full"].integer, full);
    EXPECT_EQ(h["blocks"]["partial"].integer, partial);
    EXPECT_EQ(h["blocks"]["empty"].integer, empty);
  }
}

TEST(CliAnalyze, JsonOfAMergedPatternHasOneHeadEntry) {
  CommandResult r = attnc("analyze " + libraryPattern("strided") + " --n 100 --json -D l=10");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  expectContract(doc);
  ASSERT_EQ(doc["heads"].array.size(), 1u);
  int64_t nnz = 0;
  for (int64_t i = 0; i < 100; ++i)
    for (int64_t j = 0; j <= i; ++j)
      nnz += j >= i - 10 || (i - j) % 10 == 0;
  EXPECT_EQ(doc["heads"].array[0]["nnz"].integer, nnz);
  EXPECT_EQ(doc["heads"].array[0]["blocks"]["size"].integer, 64); // the default block
}

TEST(CliAnalyze, JsonReportsAnEmptyRowAndItsWitness) {
  ScratchDir dir;
  std::string path = dir.file("gaps.attn");
  writeFile(path, "pattern gaps { attend { j : j < i && i % 3 != 0 } }\n");
  CommandResult r = attnc("analyze " + path + " --n 10 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  expectContract(doc);
  const Json &h = doc["heads"].array[0];
  EXPECT_EQ(h["empty_rows"].integer, 4); // rows 0, 3, 6, 9
  EXPECT_EQ(h["row_nnz"]["min"].integer, 0);
  EXPECT_EQ(h["row_nnz"]["max"].integer, 8);
  EXPECT_EQ(doc["params"].object.size(), 0u);
}

// ---- show --------------------------------------------------------------------------------

TEST(CliShow, AsciiHasOneGlyphPerAttendedPair) {
  const std::string defines = " -D l=8 -D c=2";
  const int64_t n = 40;
  CommandResult json = attnc("analyze " + libraryPattern("fixed") + " --n 40 --json" + defines);
  CommandResult pic = attnc("show " + libraryPattern("fixed") + " --n 40" + defines);
  ASSERT_EQ(json.exitCode, 0) << json.err;
  ASSERT_EQ(pic.exitCode, 0) << pic.err;
  std::vector<std::string> lines;
  std::istringstream in(pic.out);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  ASSERT_GE(lines.size(), size_t(n));
  // The last n lines are the grid: one character per pair, '.' for none.
  std::vector<char> mask = oracleUnion("fixed", {{"l", 8}, {"c", 2}}, n);
  int64_t glyphs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string &row = lines[lines.size() - n + i];
    ASSERT_EQ(int64_t(row.size()), n) << "row " << i << ": " << row;
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(row[j] != '.', mask[i * n + j] != 0) << "pair (" << i << ", " << j << ")";
      glyphs += row[j] != '.';
    }
  }
  EXPECT_EQ(glyphs, parseJson(json.out)["heads"].array[0]["nnz"].integer);
}

TEST(CliShow, SvgIsAPictureWhoseCellsAreThePattern) {
  ScratchDir dir;
  const int64_t n = 40;
  std::string svg = dir.file("fixed.svg");
  CommandResult r = attnc("show " + libraryPattern("fixed") + " --n 40 -D l=8 -D c=2 -o " + svg);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::string text = readFile(svg);
  ASSERT_EQ(text.rfind("<svg", 0), 0u) << text.substr(0, 80);
  EXPECT_NE(text.find("xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(text.substr(text.size() - 7), "</svg>\n");
  // The drawing is the <g> group: a background square of n x n cells, then
  // one rectangle per run of attended cells in a row.
  size_t g0 = text.find("<g "), g1 = text.find("</g>");
  ASSERT_TRUE(g0 != std::string::npos && g1 != std::string::npos && g0 < g1);
  std::string group = text.substr(g0, g1 - g0);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(group, m, std::regex(R"re(<rect width="(\d+)" height="(\d+)")re")));
  int64_t side = std::stoll(m[1]);
  ASSERT_EQ(side, std::stoll(m[2]));
  ASSERT_EQ(side % n, 0) << "a cell is a whole number of units";
  int64_t cell = side / n;
  std::vector<char> drawn(static_cast<size_t>(n * n), 0);
  std::regex rect(R"re(<rect x="(\d+)" y="(\d+)" width="(\d+)" height="(\d+)")re");
  for (auto it = std::sregex_iterator(group.begin(), group.end(), rect);
       it != std::sregex_iterator(); ++it) {
    int64_t x = std::stoll((*it)[1]), y = std::stoll((*it)[2]), w = std::stoll((*it)[3]),
            h = std::stoll((*it)[4]);
    ASSERT_TRUE(x % cell == 0 && y % cell == 0 && w % cell == 0 && h == cell) << it->str();
    for (int64_t col = x / cell; col < (x + w) / cell; ++col)
      drawn[(y / cell) * n + col] += 1;
  }
  EXPECT_EQ(drawn, oracleUnion("fixed", {{"l", 8}, {"c", 2}}, n));
}

/// The names of a library pattern's lets, from its AST.
std::vector<std::string> letNames(const std::string &pattern) {
  Frontend fe;
  EXPECT_TRUE(fe.parseFile(libraryPattern(pattern)));
  std::vector<std::string> names;
  for (const dsl::PatternDecl &decl : fe.module().patterns)
    for (const dsl::Stmt &s : decl.body)
      if (s.kind == dsl::StmtKind::Let)
        names.push_back(s.name);
  return names;
}

class CliShowLegend : public ::testing::TestWithParam<const char *> {};

TEST_P(CliShowLegend, AsciiAndSvgNameEveryLet) {
  ScratchDir dir;
  const std::string pattern = GetParam();
  CommandResult ascii = attnc("show " + libraryPattern(pattern) + " --n 32");
  ASSERT_EQ(ascii.exitCode, 0) << ascii.err;
  CommandResult svg = attnc("show " + libraryPattern(pattern) + " --n 32 -o " + dir.file("p.svg"));
  ASSERT_EQ(svg.exitCode, 0) << svg.err;
  std::string svgText = readFile(dir.file("p.svg"));
  std::vector<std::string> names = letNames(pattern);
  ASSERT_FALSE(names.empty());
  for (const std::string &name : names) {
    // A legend line is "  GLYPH  NAME  { ... }" in ASCII, ">NAME  { ..." in SVG.
    EXPECT_NE(ascii.out.find("  " + name + "  "), std::string::npos) << name << "\n" << ascii.out;
    EXPECT_NE(svgText.find(">" + name + "  "), std::string::npos) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Library, CliShowLegend,
                         ::testing::Values("fixed", "longformer", "bigbird", "strided"));

TEST(CliShow, EachHeadIsLabelledWithTheSetItAttends) {
  CommandResult r = attnc("show " + libraryPattern("fixed_multihead") + " --n 32");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("  #  head 0: { j : j / l == i / l }\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  o  head 1: { j : j % l >= l - c }\n"), std::string::npos) << r.out;
}

TEST(CliShow, InlineSetIsLabelledWithItsSourceText) {
  ScratchDir dir;
  std::string path = dir.file("mine.attn");
  writeFile(path, "pattern mine {\n  let near = { j : abs(i - j) <= 2 }\n"
                  "  attend near | { j : j % 8 == 0 }\n}\n");
  CommandResult r = attnc("show " + path + " --n 16");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("  #  near  { j : abs(i - j) <= 2 }\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  o  { j : j % 8 == 0 }\n"), std::string::npos) << r.out;
}

struct Png {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb; ///< width * height * 3
  std::map<std::string, std::string> text; ///< tEXt chunks, keyword to text

  std::array<uint8_t, 3> at(int64_t x, int64_t y) const {
    const uint8_t *p = &rgb[(size_t(y) * width + size_t(x)) * 3];
    return {p[0], p[1], p[2]};
  }
};

uint32_t be32(const std::string &s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

/// Decodes an 8-bit RGB, non-interlaced PNG (every filter type).
Png decodePng(const std::string &file) {
  Png png;
  std::string idat;
  size_t at = 8;
  while (at + 12 <= file.size()) {
    uint32_t len = be32(file, at);
    std::string type = file.substr(at + 4, 4);
    std::string data = file.substr(at + 8, len);
    EXPECT_EQ(
        crc32(crc32(0, nullptr, 0), reinterpret_cast<const Bytef *>(file.data() + at + 4), len + 4),
        be32(file, at + 8 + len))
        << type << " chunk CRC";
    if (type == "IHDR") {
      png.width = be32(data, 0);
      png.height = be32(data, 4);
      EXPECT_EQ(uint8_t(data[8]), 8) << "bit depth";
      EXPECT_EQ(uint8_t(data[9]), 2) << "colour type RGB";
      EXPECT_EQ(uint8_t(data[12]), 0) << "no interlace";
    } else if (type == "tEXt") {
      size_t nul = data.find('\0');
      EXPECT_NE(nul, std::string::npos) << "tEXt without a keyword";
      if (nul != std::string::npos)
        png.text[data.substr(0, nul)] = data.substr(nul + 1);
    } else if (type == "IDAT") {
      idat += data;
    } else if (type == "IEND") {
      break;
    }
    at += 12 + len;
  }
  size_t stride = size_t(png.width) * 3;
  std::vector<uint8_t> raw(png.height * (stride + 1));
  uLongf rawSize = raw.size();
  EXPECT_EQ(
      uncompress(raw.data(), &rawSize, reinterpret_cast<const Bytef *>(idat.data()), idat.size()),
      Z_OK);
  EXPECT_EQ(rawSize, raw.size());
  png.rgb.assign(png.height * stride, 0);
  for (size_t y = 0; y < png.height; ++y) {
    uint8_t filter = raw[y * (stride + 1)];
    const uint8_t *src = &raw[y * (stride + 1) + 1];
    uint8_t *dst = &png.rgb[y * stride];
    const uint8_t *up = y ? &png.rgb[(y - 1) * stride] : nullptr;
    for (size_t x = 0; x < stride; ++x) {
      int a = x >= 3 ? dst[x - 3] : 0, b = up ? up[x] : 0, c = (up && x >= 3) ? up[x - 3] : 0;
      int predicted = 0;
      switch (filter) {
      case 0: predicted = 0; break;
      case 1: predicted = a; break;
      case 2: predicted = b; break;
      case 3: predicted = (a + b) / 2; break;
      case 4: {
        int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
        predicted = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
        break;
      }
      default: ADD_FAILURE() << "filter " << int(filter);
      }
      dst[x] = uint8_t(src[x] + predicted);
    }
  }
  return png;
}

/// Where the raster lies in a picture: the inside of its frame.
struct Plot {
  int64_t x = 0, y = 0, side = 0;
};

/// The frame's top edge is the first row with a long run of one colour
/// other than white (text and swatches have none that long); the ticks at 0
/// extend it to the left and upwards, so its size is read down its right
/// edge.
Plot findPlot(const Png &png, int64_t minSide) {
  const std::array<uint8_t, 3> white{255, 255, 255};
  for (int64_t y = 0; y < int64_t(png.height); ++y) {
    for (int64_t x = 0; x < int64_t(png.width);) {
      int64_t e = x;
      while (e < int64_t(png.width) && png.at(e, y) == png.at(x, y))
        ++e;
      if (png.at(x, y) != white && e - x >= std::max<int64_t>(minSide, 64) + 2) {
        int64_t bottom = y;
        while (bottom + 1 < int64_t(png.height) && png.at(e - 1, bottom + 1) == png.at(x, y))
          ++bottom;
        int64_t side = bottom - y - 1;
        return {e - 1 - side, y + 1, side};
      }
      x = e;
    }
  }
  ADD_FAILURE() << "no frame of side " << minSide << " or more";
  return {};
}

std::string pngOf(const std::string &args, const ScratchDir &dir) {
  std::string path = dir.file("picture.png");
  CommandResult r = attnc("show " + args + " -o " + path);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  return readFile(path);
}

TEST(CliShow, PngHasTheSignatureAndItsFramedRasterIsThePattern) {
  ScratchDir dir;
  const int64_t n = 100;
  std::string file = pngOf(libraryPattern("strided_multihead") + " --n 100 -D l=8", dir);
  ASSERT_GT(file.size(), 33u);
  EXPECT_EQ(file.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  EXPECT_EQ(be32(file, 8), 13u);
  EXPECT_EQ(file.substr(12, 4), "IHDR");
  Png png = decodePng(file);
  ASSERT_EQ(png.width, be32(file, 16));
  ASSERT_EQ(png.rgb.size(), size_t(png.width) * png.height * 3);
  Plot plot = findPlot(png, n);
  ASSERT_GE(plot.side, n);
  ASSERT_EQ(plot.side % n, 0) << "a pair is a whole square of pixels";
  ASSERT_LE(plot.x + plot.side, int64_t(png.width));
  ASSERT_LE(plot.y + plot.side, int64_t(png.height));
  EXPECT_EQ(png.at(plot.x - 1, plot.y + plot.side), png.at(plot.x - 1, plot.y - 1))
      << "the frame closes below the raster";
  int64_t scale = plot.side / n;
  auto pixel = [&](int64_t i, int64_t j) {
    return png.at(plot.x + j * scale + scale / 2, plot.y + i * scale + scale / 2);
  };
  // Both heads are causal: the top-right pair is not attended, and gives the background.
  auto background = pixel(0, n - 1);
  std::vector<char> mask = oracleUnion("strided_multihead", {{"l", 8}}, n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      ASSERT_EQ(pixel(i, j) != background, mask[i * n + j] != 0)
          << "pair (" << i << ", " << j << ")";
}

/// The last `rows` lines of a picture, each `cols` characters: its grid.
std::vector<std::string> gridOf(const std::string &out, int64_t rows, int64_t cols) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  if (int64_t(lines.size()) < rows)
    return {};
  std::vector<std::string> grid(lines.end() - rows, lines.end());
  for (const std::string &row : grid)
    if (int64_t(row.size()) != cols)
      return {};
  return grid;
}

TEST(CliShow, CanvasDrawsOneQuerysKeysOnTheImage) {
  // NATTEN on a 9 x 13 canvas (5 more tokens after it), kernel 5: the window
  // is clamped into the canvas at its edges; the query's own cell is 'o'.
  const int64_t H = 9, W = 13, r = 2;
  const std::string natten = libraryPattern("natten2d") + " -D H=9 -D W=13 -D K=5 --n 122 --canvas 9,13";
  for (int64_t query : {0, 14, 58, 116}) {
    CommandResult pic = attnc("show " + natten + " --query " + std::to_string(query));
    ASSERT_EQ(pic.exitCode, 0) << pic.err;
    const int64_t qy = query / W, qx = query % W;
    EXPECT_NE(pic.out.find("the keys of the query i = " + std::to_string(query) + " (row " + std::to_string(qy) +
                           ", column " + std::to_string(qx) + ") on the canvas of 9 x 13 tokens in raster order; 0 "
                           "of the keys past it (positions 117 .. 121) not drawn"),
              std::string::npos)
        << pic.out;
    EXPECT_NE(pic.out.find("  o  the query i = " + std::to_string(query)), std::string::npos) << pic.out;
    std::vector<std::string> grid = gridOf(pic.out, H, W);
    ASSERT_EQ(int64_t(grid.size()), H) << pic.out;
    const int64_t cy = std::clamp(qy, r, H - 1 - r), cx = std::clamp(qx, r, W - 1 - r);
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const char want = y == qy && x == qx ? 'o' : std::abs(cy - y) <= r && std::abs(cx - x) <= r ? '#' : '.';
        EXPECT_EQ(grid[y][x], want) << "query " << query << ", cell (" << y << ", " << x << ")";
      }
  }
  // Without --query, the centre token; as a PNG too.
  CommandResult centre = attnc("show " + natten);
  ASSERT_EQ(centre.exitCode, 0) << centre.err;
  EXPECT_NE(centre.out.find("the query i = 58 (row 4, column 6)"), std::string::npos) << centre.out;
  ScratchDir dir;
  std::string file = pngOf(natten, dir);
  ASSERT_GT(file.size(), 33u);
  EXPECT_EQ(file.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  Png png = decodePng(file);
  EXPECT_EQ(png.rgb.size(), size_t(png.width) * png.height * 3);
}

TEST(CliShow, CanvasTakesTilesAndFrames) {
  // Two frames of 4 x 4 tokens in tiles of 1 x 2 x 2 (each tile's four
  // tokens consecutive); the set is the query's own tile.
  ScratchDir dir;
  const std::string file = dir.file("tile.attn");
  writeFile(file, "pattern tile { attend { j : j / 4 == i / 4 } }\n");
  CommandResult pic = attnc("show " + file + " --n 32 --canvas 2,4,4 --tile 1,2,2 --query 22");
  ASSERT_EQ(pic.exitCode, 0) << pic.err;
  // Position 22: tile 5 (frame 1, tile row 0, tile column 1), its third token: row 1, column 2.
  EXPECT_NE(pic.out.find("the keys of the query i = 22 (frame 1, row 1, column 2) on the canvas of 2 x 4 x 4 "
                         "tokens laid out in tiles of 1 x 2 x 2"),
            std::string::npos)
      << pic.out;
  std::vector<std::string> grid = gridOf(pic.out, 8, 4);
  std::vector<std::string> want = {"....", "....", "....", "....", "..##", "..o#", "....", "...."};
  EXPECT_EQ(grid, want) << pic.out;
}

TEST(CliShow, CanvasMistakesAreRefused) {
  const std::string natten = libraryPattern("natten2d") + " -D H=8 -D W=8 -D K=3 --n 64";
  auto refused = [&](const std::string &args, const std::string &what) {
    CommandResult r = attnc("show " + natten + " " + args);
    EXPECT_NE(r.exitCode, 0) << args;
    EXPECT_NE(r.err.find(what), std::string::npos) << args << ": " << r.err;
  };
  refused("--canvas 64", "--canvas: a canvas is H,W or T,H,W (frames, rows, columns), got 1 numbers");
  refused("--canvas 9,8", "--canvas: the canvas 1x9x8 holds 72 tokens, more than n = 64");
  refused("--canvas 8,8 --query 64", "--query 64 is not a position of the sequence [0, 64)");
  refused("--canvas 8,8 --queries 2", "a --canvas picture draws one query's keys");
  refused("--canvas 8,8 --tile 3,2", "--canvas --tile: each side of a tile must be at least 1 and divide the canvas's");
  refused("--canvas 8,8 --tile 1,2,2", "a tile has as many sides as the canvas: 2 numbers");
  refused("--canvas 0,8", "every side of the canvas must be at least 1");
}

TEST(CliShow, SmallPngCellsAreAtLeastTwoPixels) {
  ScratchDir dir;
  for (int64_t n : {8, 300, 512}) {
    Png png = decodePng(pngOf(libraryPattern("causal") + " --n " + std::to_string(n), dir));
    Plot plot = findPlot(png, n);
    EXPECT_EQ(plot.side % n, 0) << "n=" << n;
    EXPECT_GE(plot.side / n, 2) << "n=" << n;
  }
}

bool isDark(const std::array<uint8_t, 3> &p) { return p[0] < 80 && p[1] < 80 && p[2] < 80; }

TEST(CliShow, PngTitleIsDarkTextAboveTheRaster) {
  ScratchDir dir;
  std::string file = pngOf(libraryPattern("fixed") + " --n 40 -D l=8 -D c=2", dir);
  Png png = decodePng(file);
  EXPECT_EQ(png.text["Title"], "fixed (n=40, l=8, c=2, causal)");
  Plot plot = findPlot(png, 40);
  // The title is the topmost ink: its first rows hold dark pixels across
  // more than the width of the key axis label, which is grey besides.
  int64_t firstInk = -1, dark = 0, left = png.width, right = 0;
  for (int64_t y = 0; y < plot.y && firstInk < 0; ++y)
    for (int64_t x = 0; x < int64_t(png.width); ++x)
      if (png.at(x, y) != std::array<uint8_t, 3>{255, 255, 255})
        firstInk = y;
  ASSERT_GE(firstInk, 0);
  for (int64_t y = firstInk; y < firstInk + 14; ++y)
    for (int64_t x = 0; x < int64_t(png.width); ++x)
      if (isDark(png.at(x, y))) {
        ++dark;
        left = std::min(left, x);
        right = std::max(right, x);
      }
  EXPECT_GT(dark, 200);
  EXPECT_GT(right - left, 300) << "a title of 30 characters";
}

TEST(CliShow, PngLegendHasASwatchAndALabelPerLayer) {
  ScratchDir dir;
  Png png = decodePng(pngOf(libraryPattern("bigbird") + " --n 64 -D b=8", dir));
  Plot plot = findPlot(png, 64);
  const int64_t below = plot.y + plot.side + 1;
  for (size_t layer = 1; layer <= 4; ++layer) {
    ir::Rgb c = ir::layerColor(layer);
    std::array<uint8_t, 3> want{c.r, c.g, c.b};
    int64_t count = 0, top = -1, right = 0;
    for (int64_t y = below; y < int64_t(png.height); ++y)
      for (int64_t x = 0; x < int64_t(png.width); ++x)
        if (png.at(x, y) == want) {
          ++count;
          top = top < 0 ? y : top;
          right = std::max(right, x);
        }
    EXPECT_GE(count, 100) << "layer " << layer << ": a swatch below the raster";
    if (top < 0)
      continue;
    // Its label: dark text right of the swatch, on the same line.
    int64_t ink = 0;
    for (int64_t y = top; y < top + 16; ++y)
      for (int64_t x = right + 1; x < int64_t(png.width); ++x)
        ink += isDark(png.at(x, y));
    EXPECT_GT(ink, 100) << "layer " << layer << ": a label beside its swatch";
  }
}

TEST(CliShow, FormatFollowsTheOutputExtensionAndNeedsAFile) {
  ScratchDir dir;
  EXPECT_EQ(attnc("show " + libraryPattern("causal") + " --n 8 --format svg").exitCode, 2);
  ASSERT_EQ(attnc("show " + libraryPattern("causal") + " --n 8 -o " + dir.file("c.svg")).exitCode,
            0);
  EXPECT_EQ(readFile(dir.file("c.svg")).rfind("<svg", 0), 0u);
  ASSERT_EQ(
      attnc("show " + libraryPattern("causal") + " --n 8 --format png -o " + dir.file("c.img"))
          .exitCode,
      0);
  EXPECT_EQ(readFile(dir.file("c.img")).substr(1, 3), "PNG");
}

TEST(CliShow, OutOfRangeHeadIsAnError) {
  CommandResult r = attnc("show " + libraryPattern("fixed_multihead") + " --n 16 --head 2");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("head 2 is out of range; pattern 'fixed_multihead' has 2 heads (0 to 1)"),
            std::string::npos)
      << r.err;
}

// ---- emit ----------------------------------------------------------------------------

TEST(CliEmit, AstAndIrOfEveryLibraryPatternExitZero) {
  for (const char *name : kLibrary)
    for (const char *stage : {"ast", "ir"}) {
      CommandResult r = attnc("emit " + libraryPattern(name) + " --stage " + stage);
      EXPECT_EQ(r.exitCode, 0) << name << " " << stage << "\n" << r.err;
      std::string head = stage == std::string("ast") ? "(pattern " : "pattern ";
      EXPECT_EQ(r.out.rfind(head + name, 0), 0u) << name << " " << stage << "\n" << r.out;
    }
}

#if ATTNC_HAVE_HALIDE
TEST(CliEmit, HalideStageIsTheScheduledLoopNest) {
  CommandResult r = attnc("emit " + libraryPattern("fixed") + " --stage halide --d 64");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out.rfind("// Halide schedule r64-k24-s4x6-o6, entry point attnc_halide_d64", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("produce masked"), std::string::npos);
  EXPECT_NE(r.out.find("parallel"), std::string::npos);
  CommandResult generic = attnc("emit " + libraryPattern("fixed") +
                                " --stage halide --d 33 --schedule r32-k16-s2x8-o4");
  ASSERT_EQ(generic.exitCode, 0) << generic.err;
  EXPECT_EQ(generic.out.rfind("// Halide schedule r32-k16-s2x8-o4, entry point attnc_halide_any", 0), 0u)
      << generic.out;
  CommandResult bad = attnc("emit " + libraryPattern("fixed") + " --stage halide --schedule r48-k16-s2x8-o4");
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("not a valid schedule"), std::string::npos) << bad.err;
}
#endif

// The cuda target's plan and code: the tables' launches at n (strided's
// residue classes, 128 of 32 rows, run first and leave the row state), then
// the kernels.
TEST(CliEmit, CudaStageShowsTheGpuTablesAndKernels) {
  CommandResult r = attnc("emit " + libraryPattern("strided") + " --stage cuda --n 4096");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_EQ(r.out.rfind("// attnc cuda target: pattern 'strided'", 0), 0u) << r.out.substr(0, 200);
  EXPECT_NE(r.out.find("forward launch: 128 items (a residue re-layout: writes the row state)"), std::string::npos)
      << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("forward launch: 64 items, starting from the row state"), std::string::npos);
  EXPECT_NE(r.out.find("__global__"), std::string::npos);
  EXPECT_NE(r.out.find("mma.sync.aligned.m16n8k16"), std::string::npos);
  CommandResult noN = attnc("emit " + libraryPattern("fixed") + " --stage cuda");
  ASSERT_EQ(noN.exitCode, 0) << noN.err;
  EXPECT_EQ(noN.out.find("forward launch"), std::string::npos); // tables only with --n
}

TEST(CliCompile, CudaTargetRecordsItAndTakesTheFusedPlanOnly) {
  ScratchDir dir;
  CommandResult r = attnc("compile " + libraryPattern("local") + " --target cuda -o " + dir.file("l.attnk"));
  ASSERT_EQ(r.exitCode, 0) << r.err;
  attnc_kernel *kernel = nullptr;
  ASSERT_EQ(attnc_kernel_load(dir.file("l.attnk").c_str(), &kernel), ATTNC_OK) << attnc_last_error();
  EXPECT_STREQ(attnc_kernel_metadata(kernel, "target"), "cuda");
  EXPECT_STREQ(attnc_kernel_metadata(kernel, "backend"), "fused");
  attnc_kernel_free(kernel);
  CommandResult dense =
      attnc("compile " + libraryPattern("local") + " --target cuda --backend dense -o " + dir.file("d.attnk"));
  EXPECT_EQ(dense.exitCode, 2);
  EXPECT_NE(dense.err.find("has no GPU code"), std::string::npos) << dense.err;
  EXPECT_EQ(attnc("compile " + libraryPattern("local") + " --target tpu -o " + dir.file("t.attnk")).exitCode, 2);
}

TEST(CliEmit, UnknownStageIsAUsageError) {
  EXPECT_EQ(attnc("emit " + libraryPattern("fixed") + " --stage bogus").exitCode, 2);
  EXPECT_EQ(attnc("emit " + libraryPattern("fixed")).exitCode, 2); // --stage is required
}

TEST(CliEmit, OutputOptionWritesTheSameTextToAFile) {
  ScratchDir dir;
  CommandResult toStdout = attnc("emit " + libraryPattern("strided") + " --stage ir");
  CommandResult toFile =
      attnc("emit " + libraryPattern("strided") + " --stage ir -o " + dir.file("s.ir"));
  ASSERT_EQ(toFile.exitCode, 0) << toFile.err;
  EXPECT_EQ(toFile.out, "");
  EXPECT_EQ(readFile(dir.file("s.ir")), toStdout.out);
}

TEST(CliEmit, ErrorsInThePatternExitOneBeforeAnyStage) {
  ScratchDir dir;
  writeFile(dir.file("bad.attn"), "pattern p { attend j < i }\n");
  CommandResult r = attnc("emit " + dir.file("bad.attn") + " --stage ir");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("bad.attn:1:20: error: expected a set, got a condition 'j < i'"),
            std::string::npos)
      << r.err;
}

} // namespace
} // namespace attnc::test
