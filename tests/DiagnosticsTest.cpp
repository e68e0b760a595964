//===- DiagnosticsTest.cpp - Annotated negative inputs --------------------===//
//
// Runs every case of the files listed in kInvalidFiles (tests/dsl/invalid/)
// through the front end the way `attnc check` does (parse, then Sema when
// parsing succeeded) and requires exactly the annotated errors and warnings.
//
// A file is split into cases at lines `# -----`; a leading chunk made only of
// comments is the file's header. Each case is its own buffer, so line numbers
// count from the case's first line. Annotations are whole comment lines:
//
//   # expected-error@+1:20 {{message substring}}    line = this line + 1
//   # expected-warning@-2:3 {{...}}                 line = this line - 2
//   # expected-note@4:9 {{...}}                     line 4 of the case
//   # defines: l=64 c=3                             -D values for the case
//   # bug: what is wrong                            a known bug (see below)
//
// Errors and warnings must match one to one (severity, line, column, text);
// a note annotation must match some note, unannotated notes are ignored.
// A case marked `# bug:` is an expected failure: it is skipped with "BUG: ..."
// while it fails, and fails once it passes, so that the mark is removed.
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

namespace attnc {
namespace {

const char *const kInvalidFiles[] = {"division.attn", "fallback.attn", "heads.attn",  "inputs.attn",
                                     "lexer.attn",    "module.attn",   "names.attn",  "nesting.attn",
                                     "overflow.attn", "parser.attn",   "scores.attn", "slips.attn",
                                     "types.attn"};

std::string invalidDir() { return std::string(ATTNC_SOURCE_DIR) + "/tests/dsl/invalid/"; }

struct Expectation {
  dsl::Severity severity;
  unsigned line, column;
  std::string text;
};

struct Case {
  std::string file;
  unsigned index = 0;     ///< 1-based, within the file
  unsigned firstLine = 0; ///< Where the case starts in the file.
  std::string source;
  std::vector<Define> defines;
  std::vector<Expectation> expected;
  std::string bug;
  std::vector<std::string> malformed; ///< Annotation lines that did not parse.
};

void PrintTo(const Case &c, std::ostream *os) {
  *os << c.file << ":" << c.firstLine << " (case " << c.index << ")";
}

const char *severityName(dsl::Severity s) {
  return s == dsl::Severity::Error ? "error" : s == dsl::Severity::Warning ? "warning" : "note";
}

/// Parses one comment line of a case; returns false when it is not a
/// directive at all.
bool parseDirective(const std::string &line, unsigned lineNo, Case &c) {
  static const std::regex kExpected(
      R"(#\s*expected-(error|warning|note)@([+-]?)(\d+):(\d+)\s+\{\{(.*)\}\}\s*)");
  if (line.find("expected-") != std::string::npos) {
    std::smatch m;
    if (!std::regex_match(line, m, kExpected)) {
      c.malformed.push_back(line);
      return true;
    }
    dsl::Severity s = m[1] == "error"     ? dsl::Severity::Error
                      : m[1] == "warning" ? dsl::Severity::Warning
                                          : dsl::Severity::Note;
    int amount = std::stoi(m[3]);
    int target = m[2] == "+" ? int(lineNo) + amount : m[2] == "-" ? int(lineNo) - amount : amount;
    if (target < 1)
      c.malformed.push_back(line + "   (points before the case)");
    c.expected.push_back({s, unsigned(target), unsigned(std::stoul(m[4])), m[5]});
    return true;
  }
  if (line.rfind("# defines:", 0) == 0) {
    std::istringstream words(line.substr(10));
    std::string w;
    while (words >> w) {
      size_t eq = w.find('=');
      std::string value = eq == std::string::npos ? "" : w.substr(eq + 1);
      if (eq == 0 || value.empty() || value.find_first_not_of("-0123456789") != std::string::npos) {
        c.malformed.push_back(line);
        continue;
      }
      c.defines.push_back({w.substr(0, eq), std::stoll(value)});
    }
    return true;
  }
  if (line.rfind("# bug:", 0) == 0) {
    c.bug = line.substr(6);
    return true;
  }
  return false;
}

std::vector<Case> loadFile(const std::string &name) {
  std::ifstream in(invalidDir() + name);
  std::vector<Case> cases;
  if (!in) {
    Case missing;
    missing.file = name;
    missing.malformed.push_back("cannot open " + invalidDir() + name);
    cases.push_back(missing);
    return cases;
  }
  std::vector<std::string> chunk;
  unsigned fileLine = 0, chunkStart = 1;
  auto flush = [&] {
    Case c;
    c.file = name;
    c.firstLine = chunkStart;
    bool onlyComments = true;
    for (size_t k = 0; k < chunk.size(); ++k) {
      const std::string &line = chunk[k];
      c.source += line + "\n";
      size_t first = line.find_first_not_of(" \t");
      if (first != std::string::npos && line[first] == '#')
        parseDirective(line.substr(first), unsigned(k + 1), c);
      else if (first != std::string::npos)
        onlyComments = false;
    }
    // The header: comments only, no directive.
    bool header = cases.empty() && chunkStart == 1 && onlyComments && c.expected.empty() &&
                  c.malformed.empty();
    if (!header) {
      c.index = unsigned(cases.size() + 1);
      cases.push_back(std::move(c));
    }
    chunk.clear();
  };
  std::string line;
  while (std::getline(in, line)) {
    ++fileLine;
    if (line == "# -----") {
      flush();
      chunkStart = fileLine + 1;
      continue;
    }
    chunk.push_back(line);
  }
  flush();
  return cases;
}

std::vector<Case> allCases() {
  std::vector<Case> all;
  for (const char *file : kInvalidFiles)
    for (Case &c : loadFile(file))
      all.push_back(std::move(c));
  return all;
}

/// Everything that differs between the annotations and what the front end
/// reported; empty when the case passes.
std::vector<std::string> mismatches(const Case &c, std::string &reported) {
  std::vector<std::string> problems;
  Frontend fe;
  SemaOptions sema;
  sema.defines = c.defines;
  try {
    if (fe.parseString(c.file, c.source))
      fe.analyze(sema);
  } catch (const dsl::InternalError &e) {
    problems.push_back("the front end threw: " + e.message);
  }
  std::ostringstream all;
  fe.diags().print(all);
  reported = all.str();

  std::vector<bool> used(c.expected.size(), false);
  auto claim = [&](dsl::Severity s, const dsl::Diagnostic &d) {
    auto [line, col] = fe.sources().lineAndColumn(d.range.begin);
    for (size_t k = 0; k < c.expected.size(); ++k) {
      const Expectation &e = c.expected[k];
      if (!used[k] && e.severity == s && e.line == line && e.column == col &&
          d.message.find(e.text) != std::string::npos) {
        used[k] = true;
        return true;
      }
    }
    return false;
  };
  for (const dsl::Diagnostic &d : fe.diags().diagnostics()) {
    auto [line, col] = fe.sources().lineAndColumn(d.range.begin);
    if (!d.range.isValid()) {
      problems.push_back(std::string("unexpected ") + severityName(d.severity) +
                         " without a location: " + d.message);
    } else if (!claim(d.severity, d)) {
      problems.push_back(std::string("unexpected ") + severityName(d.severity) + " at " +
                         std::to_string(line) + ":" + std::to_string(col) + ": " + d.message);
    }
  }
  // Notes are matched after every error and warning has had its pick.
  for (const dsl::Diagnostic &d : fe.diags().diagnostics())
    for (const dsl::Diagnostic &note : d.notes)
      claim(dsl::Severity::Note, note);
  for (size_t k = 0; k < c.expected.size(); ++k)
    if (!used[k])
      problems.push_back(std::string("missing ") + severityName(c.expected[k].severity) + " at " +
                         std::to_string(c.expected[k].line) + ":" +
                         std::to_string(c.expected[k].column) + " {{" + c.expected[k].text + "}}");
  return problems;
}

class InvalidInput : public ::testing::TestWithParam<Case> {};

TEST_P(InvalidInput, ReportsExactlyTheAnnotatedDiagnostics) {
  const Case &c = GetParam();
  for (const std::string &m : c.malformed)
    ADD_FAILURE() << "malformed annotation: " << m;
  ASSERT_FALSE(c.expected.empty()) << "a negative case needs at least one expected-error/warning";
  std::string reported;
  std::vector<std::string> problems = mismatches(c, reported);
  std::string summary;
  for (const std::string &p : problems)
    summary += "  " + p + "\n";
  if (!c.bug.empty()) {
    if (!problems.empty())
      GTEST_SKIP() << "BUG:" << c.bug << "\n" << summary << "--- reported ---\n" << reported;
    FAIL() << "the case marked '# bug:" << c.bug << "' passes now: remove the mark";
  }
  EXPECT_TRUE(problems.empty()) << summary << "--- reported ---\n" << reported;
}

INSTANTIATE_TEST_SUITE_P(Files, InvalidInput, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           const std::string &f = info.param.file;
                           return f.substr(0, f.find('.')) + "_line" +
                                  std::to_string(info.param.firstLine);
                         });

TEST(InvalidInputFiles, EveryFileInTheFolderIsListed) {
  std::set<std::string> listed(std::begin(kInvalidFiles), std::end(kInvalidFiles));
  for (const auto &entry : std::filesystem::directory_iterator(invalidDir())) {
    if (entry.path().extension() == ".attn") {
      EXPECT_TRUE(listed.count(entry.path().filename().string()))
          << entry.path() << " is not in kInvalidFiles, so none of its cases run";
    }
  }
}

// ---- Errors without a source location --------------------------------------

TEST(DiagnosticsWithoutLocation, UnknownDefineNamesTheDeclaredParameters) {
  Frontend fe;
  ASSERT_TRUE(
      fe.parseString("p.attn", "pattern p { param l = 4 param c = 1 attend { j : j < l } }"));
  EXPECT_FALSE(fe.analyze({{{"w", 3}}}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  const dsl::Diagnostic &d = fe.diags().diagnostics()[0];
  EXPECT_FALSE(d.range.isValid());
  EXPECT_EQ(d.message, "unknown parameter 'w' in -D w=3; the file declares: l, c");
}

TEST(DiagnosticsWithoutLocation, UnknownDefineSaysWhenTheFileDeclaresNoParameters) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("p.attn", "pattern p { attend { j : true } }"));
  EXPECT_FALSE(fe.analyze({{{"l", -2}}}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  EXPECT_EQ(fe.diags().diagnostics()[0].message,
            "unknown parameter 'l' in -D l=-2; the file declares no parameters");
}

TEST(DiagnosticsWithoutLocation, UnknownDefineListsEachParameterOnce) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("p.attn", "pattern a { param l = 4 attend {} }\n"
                                       "pattern b { param l = 8 attend {} }\n"));
  EXPECT_FALSE(fe.analyze({{{"w", 1}}}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  EXPECT_EQ(fe.diags().diagnostics()[0].message,
            "unknown parameter 'w' in -D w=1; the file declares: l");
}

TEST(DiagnosticsWithoutLocation, DefineOfAParameterWithABadDefaultIsNotCalledUnknown) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("p.attn", "pattern p { param l = i attend { j : true } }"));
  EXPECT_FALSE(fe.analyze({{{"l", 3}}}));
  ASSERT_EQ(fe.diags().errorCount(), 1u) << "only the bad default is an error";
  EXPECT_NE(fe.diags().diagnostics()[0].message.find("'i' cannot be used in a parameter default"),
            std::string::npos);
}

TEST(DiagnosticsWithoutLocation, MissingPatternNameListsTheDefinedOnes) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("two.attn", "pattern a { attend {} } pattern b { attend {} }"));
  ASSERT_TRUE(fe.analyze({}));
  EXPECT_EQ(fe.select("c"), nullptr);
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  EXPECT_FALSE(fe.diags().diagnostics().back().range.isValid());
  EXPECT_EQ(fe.diags().diagnostics().back().message,
            "no pattern named 'c' in two.attn; it defines: a, b");
  ASSERT_NE(fe.select("b"), nullptr);
  EXPECT_EQ(fe.select("b")->name, "b");
  EXPECT_EQ(fe.select("")->name, "a");
}

TEST(DiagnosticsWithoutLocation, UnreadableFileIsReported) {
  Frontend fe;
  EXPECT_FALSE(fe.parseFile("/nonexistent/p.attn"));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  EXPECT_EQ(fe.diags().diagnostics()[0].message, "cannot open '/nonexistent/p.attn'");
}

TEST(DiagnosticsWithoutLocation, ErrorWithoutLocationIsPrintedWithTheToolName) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("p.attn", "pattern p { attend {} }"));
  EXPECT_FALSE(fe.analyze({{{"w", 1}}}));
  std::ostringstream os;
  fe.diags().print(os);
  EXPECT_EQ(os.str(), "attnc: error: unknown parameter 'w' in -D w=1; the file declares no "
                      "parameters\n1 error generated.\n");
}

// ---- -D syntax ---------------------------------------------------------------

TEST(DefineSyntax, NameEqualsIntegerIsAccepted) {
  Define d;
  std::string error;
  ASSERT_TRUE(parseDefine("l=128", d, error)) << error;
  EXPECT_EQ(d.name, "l");
  EXPECT_EQ(d.value, 128);
  ASSERT_TRUE(parseDefine("seed_2=-7", d, error)) << error;
  EXPECT_EQ(d.name, "seed_2");
  EXPECT_EQ(d.value, -7);
}

TEST(DefineSyntax, MalformedDefinesAreRejectedWithTheReason) {
  struct Bad {
    const char *text, *error;
  } cases[] = {
      {"l", "expected 'name=value' in -D 'l'"},
      {"=3", "expected 'name=value' in -D '=3'"},
      {"l-1=3", "invalid parameter name 'l-1' in -D 'l-1=3'"},
      {"l=", "value of -D l must be an integer, got ''"},
      {"l=3x", "value of -D l must be an integer, got '3x'"},
      {"l=0x10", "value of -D l must be an integer, got '0x10'"},
      {"l=99999999999999999999", "value of -D l must be an integer, got '99999999999999999999'"},
  };
  for (const Bad &b : cases) {
    Define d;
    std::string error;
    EXPECT_FALSE(parseDefine(b.text, d, error)) << b.text;
    EXPECT_EQ(error, b.error) << b.text;
  }
}

TEST(DefineSyntax, CommaListSplitsIntoDefines) {
  std::vector<Define> out;
  std::string error;
  ASSERT_TRUE(parseDefineList("l=128,c=8", out, error)) << error;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].name, "c");
  EXPECT_EQ(out[1].value, 8);
  out.clear();
  EXPECT_TRUE(parseDefineList("", out, error));
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(parseDefineList("l=1,,c=2", out, error));
}

// ---- Printing ------------------------------------------------------------------

TEST(DiagnosticFormat, PrintsLocationSourceLineCaretAndNotes) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString(
      "f.attn", "pattern p {\n  param l = 64\n  attend { j : j % (l - 64) == 1 }\n}\n"));
  EXPECT_FALSE(fe.analyze({}));
  std::ostringstream os;
  fe.diags().print(os);
  EXPECT_EQ(os.str(),
            "f.attn:3:21: error: modulus must be a positive integer, got 'l - 64' which is 0\n"
            "  attend { j : j % (l - 64) == 1 }\n"
            "                    ^~~~~~\n"
            "f.attn:2:9: note: 'l' is 64 here\n"
            "  param l = 64\n"
            "        ^\n"
            "1 error generated.\n");
}

TEST(DiagnosticFormat, CaretKeepsTabsSoThatItLinesUpWithTheSource) {
  Frontend fe;
  ASSERT_FALSE(fe.parseString("t.attn", "pattern p {\n\tattend { j :\t$ }\n}\n"));
  std::string text = fe.diags().format(fe.diags().diagnostics()[0]);
  EXPECT_EQ(text, "t.attn:2:15: error: unexpected character '$'\n"
                  "\tattend { j :\t$ }\n"
                  "\t            \t^\n");
}

TEST(DiagnosticFormat, FixItIsPrintedUnderTheNotesCaret) {
  Frontend fe;
  ASSERT_FALSE(fe.parseString("f.attn", "pattern p {\n\tlet A = { j : j < i }\n\tattend A or {}\n}\n"));
  ASSERT_EQ(fe.diags().diagnostics().size(), 1u);
  EXPECT_EQ(fe.diags().format(fe.diags().diagnostics()[0]), "f.attn:3:11: error: unknown operator 'or'\n"
                                                            "\tattend A or {}\n"
                                                            "\t         ^~\n"
                                                            "f.attn:3:11: note: use '|' for the keys in either set\n"
                                                            "\tattend A or {}\n"
                                                            "\t         ^~\n"
                                                            "\t         |\n");
}

TEST(DiagnosticFormat, UnderlineStopsAtTheEndOfTheFirstLine) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("m.attn", "pattern p {\n  require 1 >\n    2\n  attend {}\n}\n"));
  EXPECT_FALSE(fe.analyze({}));
  std::string text = fe.diags().format(fe.diags().diagnostics()[0]);
  const std::string tail = "\n  require 1 >\n          ^~~\n";
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail) << text;
}

TEST(DiagnosticFormat, SummaryCountsWarningsAndErrors) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("s.attn", "pattern p { causal causal let u = {} let v = {} "
                                       "attend { j : j / 0 == 1 } }"));
  EXPECT_FALSE(fe.analyze({}));
  EXPECT_EQ(fe.diags().warningCount(), 3u);
  EXPECT_EQ(fe.diags().errorCount(), 1u);
  std::ostringstream os;
  fe.diags().print(os);
  const std::string out = os.str();
  EXPECT_EQ(out.substr(out.rfind('\n', out.size() - 2) + 1), "3 warnings and 1 error generated.\n");
}

TEST(DiagnosticFormat, DefineOverrideIsNamedInTheNote) {
  Frontend fe;
  ASSERT_TRUE(
      fe.parseString("f.attn", "pattern p {\n  param c = 2\n  require c <= 4\n  attend {}\n}\n"));
  EXPECT_FALSE(fe.analyze({{{"c", 9}}}));
  ASSERT_EQ(fe.diags().diagnostics().size(), 1u);
  const dsl::Diagnostic &d = fe.diags().diagnostics()[0];
  EXPECT_EQ(d.message, "requirement 'c <= 4' does not hold");
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0].message, "'c' is 9 (set by -D c=9)");
}

// ---- Fix-its ---------------------------------------------------------------------

/// A slip (one statement of a pattern that defines sets A, B, G and the
/// parameter l) and the statement its fix-its make of it.
struct Slip {
  const char *written, *repaired;
};

void PrintTo(const Slip &s, std::ostream *os) { *os << s.written; }

std::string slipPattern(const std::string &statement) {
  return "pattern p {\n  param l = 8\n  let A = { j : j < i }\n  let B = { j : j % l == 0 }\n  let G = { 0, 1 }\n" +
         statement + "\n}\n";
}

class SlipFixIt : public ::testing::TestWithParam<Slip> {};

TEST_P(SlipFixIt, ReplacesTheSlipWithValidSyntax) {
  Frontend fe;
  const std::string source = slipPattern(GetParam().written);
  EXPECT_FALSE(fe.parseString("s.attn", source));
  // Every fix-it of every note, applied from the end of the text back.
  std::vector<const dsl::Diagnostic *> fixIts;
  for (const dsl::Diagnostic &d : fe.diags().diagnostics())
    for (const dsl::Diagnostic &note : d.notes)
      if (!note.fixIt.empty())
        fixIts.push_back(&note);
  ASSERT_FALSE(fixIts.empty()) << "no fix-it";
  std::sort(fixIts.begin(), fixIts.end(),
            [](auto *a, auto *b) { return a->range.begin.offset > b->range.begin.offset; });
  std::string repaired = source;
  for (const dsl::Diagnostic *f : fixIts)
    repaired.replace(f->range.begin.offset, f->range.end.offset - f->range.begin.offset, f->fixIt);
  EXPECT_EQ(repaired, slipPattern(GetParam().repaired));
  Frontend again;
  bool ok = again.parseString("s.attn", repaired) && again.analyze({});
  std::ostringstream os;
  again.diags().print(os);
  EXPECT_TRUE(ok) << os.str();
}

INSTANTIATE_TEST_SUITE_P(
    Slips, SlipFixIt,
    ::testing::Values(Slip{"  attend A or B", "  attend A | B"}, Slip{"  attend A and B", "  attend A & B"},
                      Slip{"  attend A and not B", "  attend A - B"},
                      Slip{"  attend { j : j < i and j > 2 }", "  attend { j : j < i && j > 2 }"},
                      Slip{"  attend { j : j in G or i in G }", "  attend { j : j in G || i in G }"},
                      Slip{"  attend { j : j in G or B }", "  attend { j : j in G | B }"},
                      Slip{"  attend { j : not j < i }", "  attend { j : !(j < i) }"},
                      Slip{"  attend { j : not (j < i) }", "  attend { j : !(j < i) }"},
                      Slip{"  attend { j : j not in G }", "  attend { j : !(j in G) }"},
                      Slip{"  attend not A", "  attend { j : true } - A"},
                      Slip{"  attend B | not A", "  attend B | { j : true } - A"},
                      Slip{"  attend not A | B", "  attend { j : true } - (A | B)"},
                      Slip{"  attend { j : j < i | j > 2 }", "  attend { j : j < i || j > 2 }"},
                      Slip{"  attend { j : 0 <= j & j < i }", "  attend { j : 0 <= j && j < i }"},
                      Slip{"  attend { j : j in G | i in G }", "  attend { j : j in G || i in G }"},
                      Slip{"  attend { j : j = i }", "  attend { j : j == i }"},
                      Slip{"  require l = 8\n  attend A", "  require l == 8\n  attend A"},
                      Slip{"  attend { j : (i - j) mod l == 0 }", "  attend { j : (i - j) % l == 0 }"},
                      Slip{"  attend { j : j div l == i / l }", "  attend { j : j / l == i / l }"},
                      Slip{"  attend { j : j // l == i / l }", "  attend { j : j / l == i / l }"},
                      Slip{"  // the causal band\n  attend A", "  # the causal band\n  attend A"},
                      Slip{"  attend A // the causal band", "  attend A # the causal band"},
                      Slip{"  attend { j : j ** 2 <= i }", "  attend { j : j * j <= i }"},
                      Slip{"  attend { j : (i - j) ^ 2 <= 64 }", "  attend { j : (i - j) * (i - j) <= 64 }"},
                      Slip{"  attend { j : j in [i - 3, i] }", "  attend { j : j in { i - 3 .. i } }"},
                      Slip{"  attend [0, 4)", "  attend { 0 .. 3 }"},
                      Slip{"  attend [i - 4, i)", "  attend { i - 4 .. i - 1 }"},
                      Slip{"  attend [0, 1, i]", "  attend { 0, 1, i }"},
                      Slip{"  attend { i - 3 ... i }", "  attend { i - 3 .. i }"},
                      Slip{"  attend { j : j ≤ i && j ∈ G }", "  attend { j : j <= i && j in G }"}));

// ---- Valid inputs a conservative checker might reject ---------------------------

TEST(AcceptedInput, OperatorWordsStayUsableAsNames) {
  // The hints for 'and', 'or', 'not', 'mod' and 'div' fire only where the
  // input is an error anyway; as names they mean what they always meant.
  Frontend fe;
  ASSERT_TRUE(fe.parseString("w.attn", "pattern p {\n  param mod = 4\n  param div = 2\n"
                                       "  let and = { j : j < i }\n  let or = { j : j % mod == 0 }\n"
                                       "  let not = 3\n  require not in { 1, 3 } && div < mod\n"
                                       "  attend and | or - { j : j < not - 1 + div }\n}\n"));
  bool ok = fe.analyze({});
  std::ostringstream os;
  fe.diags().print(os);
  EXPECT_TRUE(ok) << os.str();
}

TEST(AcceptedInput, RequirementWithInHoldsForAMember) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("r.attn", "pattern p { param c = 2 require c in {1, 2, 4} "
                                       "attend { j : j < c } }"));
  bool ok = false;
  EXPECT_NO_THROW(ok = fe.analyze({}));
  EXPECT_TRUE(ok);
  EXPECT_EQ(fe.diags().diagnostics().size(), 0u);
}

TEST(AcceptedInput, DivisorThatIsPositiveForEveryQueryIsAccepted) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("d.attn", "pattern p { attend { j : j % (n - i) == 0 } }"));
  EXPECT_TRUE(fe.analyze({}));
  EXPECT_EQ(fe.diags().diagnostics().size(), 0u);
}

// ---- Inputs too deep for a recursive walk -----------------------------------

TEST(NestingLimit, FiveThousandParenthesesFailTheWayCheckFailsWithOneError) {
  const std::string text = "pattern p {\n  attend " + std::string(5000, '(') + "{ j : j <= i }" +
                           std::string(5000, ')') + "\n}\n";
  Frontend fe;
  EXPECT_FALSE(fe.parseString("deep.attn", text));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  std::string printed = fe.diags().format(fe.diags().diagnostics()[0]);
  EXPECT_EQ(printed.substr(0, printed.find('\n')),
            "deep.attn:2:266: error: expressions nest 257 levels deep; the limit is 256");
  EXPECT_NE(printed.find("^"), std::string::npos) << printed;
}

TEST(NestingLimit, LetChainDeeperThanTheLimitIsRefusedWhereItPassesIt) {
  // Each let is one level on top of the last: a<k> is k + 1 levels deep.
  std::string text = "pattern p {\n  let a0 = i\n";
  for (int k = 1; k < 2000; ++k)
    text += "  let a" + std::to_string(k) + " = a" + std::to_string(k - 1) + " + 1\n";
  text += "  attend { j : j < a1999 }\n}\n";
  Frontend fe;
  ASSERT_TRUE(fe.parseString("lets.attn", text));
  EXPECT_FALSE(fe.analyze({}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  const dsl::Diagnostic &d = fe.diags().diagnostics()[0];
  EXPECT_EQ(d.message, "expression nests 257 levels deep with its lets expanded; the limit is 256");
  EXPECT_EQ(fe.sources().lineAndColumn(d.range.begin).first, 258u); // a256
}

TEST(NestingLimit, DoublingLetsAreRefusedBeforeTheyExpandExponentially) {
  std::string text = "pattern p {\n  heads 4\n  let a0 = { j : j <= i + h }\n";
  for (int k = 1; k < 64; ++k)
    text += "  let a" + std::to_string(k) + " = a" + std::to_string(k - 1) + " | a" +
            std::to_string(k - 1) + "\n";
  text += "  attend a63\n}\n";
  Frontend fe;
  ASSERT_TRUE(fe.parseString("lets.attn", text));
  EXPECT_FALSE(fe.analyze({}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  EXPECT_NE(fe.diags().diagnostics()[0].message.find("nodes with its lets expanded; the limit is 65536"),
            std::string::npos);
}

TEST(AcceptedInput, ComparisonWhoseClosedFormOverflowsKeepsItsPredicate) {
  // j's coefficient, 2^62 * 4, and the bound's constant do not fit in int64:
  // the canonical form gives up and the comparison stays a predicate.
  Frontend fe;
  ASSERT_TRUE(fe.parseString("o.attn", "pattern p { attend { j : j * 4611686018427387904 * 4 <= "
                                       "i - 9223372036854775807 - 9223372036854775807 } }"));
  ASSERT_TRUE(fe.analyze({}));
  ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  ASSERT_EQ(ir.heads.size(), 1u);
  EXPECT_EQ(ir.heads[0].set->kind, ir::Gen::Predicate);
}

TEST(AcceptedInput, LibraryPatternsCheckWithoutDiagnostics) {
  for (const char *name :
       {"axial", "bigbird", "causal", "dilated", "fixed", "fixed_multihead", "fixed_subblocks",
        "full", "local", "longformer", "strided", "strided_multihead", "alibi_local", "capped_fixed",
        "sink_window", "t5_bias", "natten2d", "natten2d_tiled", "sta3d", "swin"}) {
    Frontend fe;
    EXPECT_TRUE(fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn"));
    EXPECT_TRUE(fe.analyze({}));
    EXPECT_EQ(fe.diags().diagnostics().size(), 0u) << name;
  }
}

// ---- Inputs and the fallback, checked by Sema directly ---------------------

/// The one pattern of `text`, checked with no diagnostic at all.
Pattern checkedPattern(const std::string &text) {
  Frontend fe;
  bool ok = fe.parseString("in.attn", text) && fe.analyze({});
  std::ostringstream os;
  fe.diags().print(os);
  EXPECT_TRUE(ok) << os.str();
  EXPECT_EQ(fe.diags().diagnostics().size(), 0u) << os.str();
  if (fe.patterns().size() != 1) {
    ADD_FAILURE() << "expected one pattern";
    return {};
  }
  return fe.patterns().front();
}

/// Every input read of a term, as (op, input index, name), in tree order.
void collectReads(const Term &t, std::vector<std::tuple<Op, int64_t, std::string>> &out) {
  if (t.op() == Op::Input || t.op() == Op::InputRow)
    out.emplace_back(t.op(), t.value(), t.data()->name);
  for (const TermRef &a : t.args())
    collectReads(*a, out);
}

bool isCausalSet(const Term &t) {
  return t.op() == Op::Builder && t.arg(0)->op() == Op::Le && t.arg(0)->arg(0)->op() == Op::VarJ &&
         t.arg(0)->arg(1)->op() == Op::VarI;
}

/// `set & { j : j <= i }`.
bool isCausalIntersection(const Term &t) {
  return t.op() == Op::Intersect && isCausalSet(*t.arg(1));
}

const char *const kLshUnion = "pattern lsh_union {\n"
                              "  input b0 : int[n]\n"
                              "  input b1 : int[n]\n"
                              "  causal\n"
                              "  attend { j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }\n"
                              "}\n";
const char *const kSelect = "pattern select {\n"
                            "  param B = 64\n"
                            "  param k = 4\n"
                            "  input sel : int[(n + B - 1) / B, k]\n"
                            "  causal\n"
                            "  attend { j : j / B in sel[i / B] } | { j : i - j < B }\n"
                            "}\n";
const char *const kLshSelf = "pattern lsh_self {\n"
                             "  input b0 : int[n]\n"
                             "  input b1 : int[n]\n"
                             "  causal\n"
                             "  attend ({ j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }) - { i }"
                             " else { i }\n"
                             "}\n";

class ContractPattern : public ::testing::TestWithParam<const char *> {};

TEST_P(ContractPattern, ChecksWithoutDiagnostics) { checkedPattern(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Inputs, ContractPattern,
    ::testing::Values(kLshUnion, kSelect, kLshSelf,
                      "pattern top {\n  param k = 4\n  input top : int[n, k]\n  causal\n"
                      "  attend { j : j in top[i] } | { j : i - j < 64 }\n}\n",
                      "pattern doc {\n  input doc : int[n]\n"
                      "  attend { j : doc[j] == doc[i] }\n}\n"));

TEST(SemaInputs, DeclarationsAreRecordedInOrderWithTheirDimensions) {
  Pattern lsh = checkedPattern(kLshUnion);
  ASSERT_EQ(lsh.inputs.size(), 2u);
  EXPECT_EQ(lsh.inputs[0].name, "b0");
  EXPECT_EQ(lsh.inputs[1].name, "b1");
  EXPECT_EQ(lsh.inputs[1].rank(), 1u);
  EXPECT_EQ(printTerm(*lsh.inputs[0].dims[0]), "n");
  Pattern select = checkedPattern(kSelect);
  ASSERT_EQ(select.inputs.size(), 1u);
  EXPECT_EQ(select.inputs[0].name, "sel");
  ASSERT_EQ(select.inputs[0].rank(), 2u);
  EXPECT_EQ(printTerm(*select.inputs[0].dims[0]), "(n + 64 - 1) / 64");
  EXPECT_EQ(printTerm(*select.inputs[0].dims[1]), "4");
  EXPECT_EQ(inputDim(select.inputs[0], 0, 130), 3);
}

TEST(SemaInputs, LshHeadReadsBothInputsByTheirIndex) {
  Pattern lsh = checkedPattern(kLshUnion);
  ASSERT_EQ(lsh.heads.size(), 1u);
  std::vector<std::tuple<Op, int64_t, std::string>> reads;
  collectReads(*lsh.heads[0], reads);
  using R = std::tuple<Op, int64_t, std::string>;
  EXPECT_EQ(reads, (std::vector<R>{{Op::Input, 0, "b0"}, {Op::Input, 0, "b0"},
                                   {Op::Input, 1, "b1"}, {Op::Input, 1, "b1"}}));
  EXPECT_TRUE(lsh.heads[0]->uses(kUsesData));
  EXPECT_TRUE(isCausalIntersection(*lsh.heads[0]));
  EXPECT_EQ(printTerm(*lsh.heads[0]->arg(0)), "{ j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }");
}

TEST(SemaInputs, OneIndexOnA2DInputIsItsRowAsASet) {
  Pattern select = checkedPattern(kSelect);
  std::vector<std::tuple<Op, int64_t, std::string>> reads;
  collectReads(*select.heads[0], reads);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(std::get<0>(reads[0]), Op::InputRow);
  EXPECT_EQ(std::get<1>(reads[0]), 0);
  const Term &membership = *select.heads[0]->arg(0)->arg(0)->arg(0); // union, builder, in
  ASSERT_EQ(membership.op(), Op::In);
  EXPECT_EQ(membership.arg(1)->type(), Type::Set);
  EXPECT_EQ(printTerm(membership), "j / 64 in sel[i / 64]");
}

TEST(SemaInputs, TwoIndicesOnA2DInputAreAnEntry) {
  Pattern p =
      checkedPattern("pattern p {\n  input t : int[n, 2]\n  attend { j : t[i, 1] == j }\n}\n");
  const Term &eq = *p.heads[0]->arg(0);
  ASSERT_EQ(eq.op(), Op::Eq);
  EXPECT_EQ(eq.arg(0)->op(), Op::Input);
  EXPECT_EQ(eq.arg(0)->type(), Type::Int);
  EXPECT_EQ(eq.arg(0)->args().size(), 2u);
}

TEST(SemaInputs, HeadIndexIsSubstitutedInsideReads) {
  Pattern p = checkedPattern("pattern p {\n  heads 2\n  input b : int[n, 2]\n"
                             "  attend { j : b[j, h] == b[i, h] }\n}\n");
  ASSERT_EQ(p.heads.size(), 2u);
  EXPECT_EQ(printTerm(*p.heads[1]), "{ j : b[j, 1] == b[i, 1] }");
}

TEST(SemaFallback, CausalIsInsideEachOperandOfATopLevelElse) {
  Pattern p = checkedPattern(kLshSelf);
  const Term &head = *p.heads[0];
  ASSERT_EQ(head.op(), Op::Fallback) << "no causal intersection around the 'else'";
  ASSERT_TRUE(isCausalIntersection(*head.arg(0)));
  ASSERT_TRUE(isCausalIntersection(*head.arg(1)));
  EXPECT_EQ(head.arg(0)->arg(0)->op(), Op::Difference);
  EXPECT_EQ(head.arg(1)->arg(0)->op(), Op::List);
}

TEST(SemaFallback, ElseGroupsToTheRightAndEachOperandGetsCausal) {
  Pattern p = checkedPattern("pattern p {\n  causal\n  attend { 0 } else { 1 } else { i }\n}\n");
  const Term &head = *p.heads[0];
  ASSERT_EQ(head.op(), Op::Fallback);
  EXPECT_TRUE(isCausalIntersection(*head.arg(0)));
  ASSERT_EQ(head.arg(1)->op(), Op::Fallback);
  EXPECT_TRUE(isCausalIntersection(*head.arg(1)->arg(0)));
  EXPECT_TRUE(isCausalIntersection(*head.arg(1)->arg(1)));
}

TEST(SemaFallback, ElseInsideAUnionGetsCausalInsideToo) {
  Pattern p = checkedPattern("pattern p {\n  causal\n  let F = { 5 } else { i }\n"
                             "  attend F | { j : j < 4 }\n}\n");
  const Term &head = *p.heads[0];
  ASSERT_TRUE(isCausalIntersection(head));
  const Term &u = *head.arg(0);
  ASSERT_EQ(u.op(), Op::Union);
  const Term &f = *u.arg(0);
  ASSERT_EQ(f.op(), Op::Fallback);
  EXPECT_TRUE(isCausalIntersection(*f.arg(0)));
  EXPECT_TRUE(isCausalIntersection(*f.arg(1)));
  EXPECT_EQ(u.arg(1)->op(), Op::Builder) << "the operand without an 'else' is left alone";
}

TEST(SemaFallback, WithoutCausalTheOperandsAreLeftAlone) {
  Pattern p = checkedPattern("pattern p {\n  attend { j : j < i } else { i }\n}\n");
  const Term &head = *p.heads[0];
  ASSERT_EQ(head.op(), Op::Fallback);
  EXPECT_EQ(head.arg(0)->op(), Op::Builder);
  EXPECT_EQ(head.arg(1)->op(), Op::List);
}

TEST(SemaFallback, EachHeadStatementMayFallBack) {
  Pattern p = checkedPattern("pattern p {\n  causal\n  heads 2\n  attend { j : j < i }\n"
                             "  head 1 attends { j : j < i - 8 } else { i }\n}\n");
  ASSERT_EQ(p.heads.size(), 2u);
  EXPECT_TRUE(isCausalIntersection(*p.heads[0]));
  ASSERT_EQ(p.heads[1]->op(), Op::Fallback);
  EXPECT_TRUE(isCausalIntersection(*p.heads[1]->arg(0)));
}

/// `levels` lets, each `(previous else {}) | {}`: two levels per let, and
/// three once causal is inside each 'else'.
std::string nestedFallbacks(int levels) {
  std::string text = "pattern p {\n  causal\n  let s0 = { j : j < i }\n";
  for (int k = 1; k <= levels; ++k)
    text += "  let s" + std::to_string(k) + " = (s" + std::to_string(k - 1) + " else {}) | {}\n";
  return text + "  attend s" + std::to_string(levels) + "\n}\n";
}

TEST(SemaFallback, CausalInsideNestedElsesStaysWithinTheNestingLimit) {
  checkedPattern(nestedFallbacks(80)); // 163 levels, 244 with causal
  Frontend fe;
  ASSERT_TRUE(fe.parseString("deep.attn", nestedFallbacks(100))); // 203 levels, 304 with causal
  EXPECT_FALSE(fe.analyze({}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  const dsl::Diagnostic &d = fe.diags().diagnostics()[0];
  EXPECT_EQ(d.message,
            "set nests 304 levels deep with 'causal' inside each 'else'; the limit is 257");
  EXPECT_EQ(fe.sources().lineAndColumn(d.range.begin), std::make_pair(104u, 10u));
}

// ---- Score modifiers, checked by Sema directly ----------------------------------

TEST(SemaScore, AlibiIsTypedAndReadsItsFloatInput) {
  Pattern p = checkedPattern("pattern alibi_local { param w = 96  input slope : float[heads]  causal\n"
                             "  attend { j : i - j < w }  score s + slope[h] * (j - i) }");
  ASSERT_EQ(p.inputs.size(), 1u);
  EXPECT_TRUE(p.inputs[0].isFloat);
  ASSERT_EQ(p.inputs[0].dims.size(), 1u);
  EXPECT_EQ(p.inputs[0].dims[0]->op(), Op::VarH); // the head count
  EXPECT_EQ(inputDim(p.inputs[0], 0, 1000, 12), 12);
  ASSERT_TRUE(p.score);
  EXPECT_FALSE(p.sink);
  const ScoreExpr &e = *p.score;
  ASSERT_EQ(e.op, ScoreOp::Add);
  EXPECT_FALSE(e.isInt);
  EXPECT_EQ(e.args[0]->op, ScoreOp::S);
  const ScoreExpr &mul = *e.args[1];
  ASSERT_EQ(mul.op, ScoreOp::Mul);
  EXPECT_FALSE(mul.isInt);
  ASSERT_EQ(mul.args[0]->op, ScoreOp::Input);
  EXPECT_EQ(mul.args[0]->input, 0);
  ASSERT_EQ(mul.args[0]->args.size(), 1u);
  EXPECT_EQ(mul.args[0]->args[0]->op, ScoreOp::H);
  EXPECT_EQ(mul.args[1]->op, ScoreOp::Sub);
  EXPECT_TRUE(mul.args[1]->isInt);
  // The score is not part of the set: the same IR as the pattern without it.
  Pattern plain = checkedPattern("pattern alibi_local { param w = 96  causal attend { j : i - j < w } }");
  ir::PatternIR a = ir::canonicalizePattern(p), b = ir::canonicalizePattern(plain);
  EXPECT_EQ(ir::printSet(*a.heads[0].set), ir::printSet(*b.heads[0].set));
  EXPECT_FALSE(a.readsData());
  EXPECT_TRUE(a.hasFloatInputs());
}

TEST(SemaScore, TypesPromoteAndConstantsFold) {
  Pattern p = checkedPattern("pattern p { param l = 8 param cap = 20 attend { j : j <= i }\n"
                             "  score cap * tanh(s / cap) + (i - j) / l + (i - j) / 2.0 + 2 * 3 + exp(0) }");
  ASSERT_TRUE(p.score);
  EXPECT_EQ(scoreText(*p.score),
            "(add (add (add (add (mul (const 20) (tanh (div s (const 20)))) (idiv (sub i j) 8)) "
            "(div (sub i j) (const 2))) (const 6)) (const 1))");
  Pattern q = checkedPattern("pattern p { input rel : float[heads, 32] attend { j : j <= i }\n"
                             "  score s + rel[h, min(floor(log(abs(j - i) + 1) * 4), 31)] }");
  ASSERT_TRUE(q.score);
  const ScoreExpr &index = *q.score->args[1]->args[1];
  EXPECT_EQ(index.op, ScoreOp::Min);
  EXPECT_TRUE(index.isInt);
  EXPECT_EQ(index.args[0]->op, ScoreOp::Floor);
  EXPECT_TRUE(index.args[0]->isInt);
  EXPECT_FALSE(index.args[0]->args[0]->isInt);
}

TEST(SemaScore, SinkWithLetsAndWhere) {
  Pattern p = checkedPattern("pattern p { input z : float[heads] let g = i < 4 let w = 2 * i attend { j : j <= i }\n"
                             "  sink where(g && !(i == 2), z[h], -w * 0.5) }");
  ASSERT_TRUE(p.sink);
  EXPECT_FALSE(p.score);
  EXPECT_EQ(p.sink->op, ScoreOp::Where);
  EXPECT_FALSE(mentions(*p.sink, ScoreOp::J));
  EXPECT_TRUE(mentions(*p.sink, ScoreOp::Input));
  const float z[] = {7, 8};
  std::vector<FloatInput> in{{z, {2}}};
  EXPECT_EQ(evalScore(*p.sink, {.i = 1, .h = 1, .inputs = &in}, {"z"}), 8);
  EXPECT_EQ(evalScore(*p.sink, {.i = 2, .h = 1, .inputs = &in}, {"z"}), -2);
  EXPECT_EQ(evalScore(*p.sink, {.i = 6, .h = 0, .inputs = &in}, {"z"}), -6);
}

TEST(SemaScore, ScoresPassThroughCanonicalisationUntouched) {
  Pattern p = checkedPattern("pattern p { input z : float[heads] causal attend { j : true } sink z[h] score -s }");
  ir::PatternIR ir = ir::canonicalizePattern(p);
  EXPECT_EQ(ir.score, p.score);
  EXPECT_EQ(ir.sink, p.sink);
  EXPECT_NE(ir::printPatternIR(ir).find("\nscore -s\nsink z[h]\n"), std::string::npos) << ir::printPatternIR(ir);
  EXPECT_NE(ir::printPatternIR(ir).find("input z : float[heads]"), std::string::npos) << ir::printPatternIR(ir);
}

} // namespace
} // namespace attnc
