//===- DiagnosticsTest.cpp - Annotated negative inputs --------------------===//
//
// Runs every case of tests/frontend/invalid/*.attn through the front end
// (parse, then Sema when parsing succeeded) and checks that the diagnostics
// are exactly the annotated ones: severity, line, column and message text.
// Notes are not checked here. Cases are separated by '# -----' lines; a
// '# defines: a=1 b=2' line passes -D values.
//
//===----------------------------------------------------------------------===//
#include "attnc/compiler/Driver.h"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

namespace attnc {
namespace {

struct Expected {
  std::string severity;
  unsigned line, column;
  std::string text;
};

struct Case {
  std::string file;
  unsigned index = 0;
  std::string source;
  std::vector<std::string> defines;
  std::vector<Expected> expected;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.file << " case " << c.index; }

std::vector<Case> loadCases(const std::string &name) {
  std::ifstream in(std::string(ATTNC_SOURCE_DIR) + "/tests/frontend/invalid/" + name);
  EXPECT_TRUE(in) << name;
  std::vector<Case> cases;
  std::string line;
  static const std::regex kAnnotation(
      R"(# expected-(error|warning)@([+-]\d+):(\d+) \{\{(.*)\}\})");
  Case current;
  unsigned lineNo = 0;
  bool inCase = false;
  auto flush = [&] {
    if (inCase)
      cases.push_back(current);
    current = Case{};
    current.file = name;
    current.index = static_cast<unsigned>(cases.size());
    lineNo = 0;
    inCase = true;
  };
  while (std::getline(in, line)) {
    if (line == "# -----") {
      flush();
      continue;
    }
    if (!inCase)
      continue; // the file's header comment
    ++lineNo;
    current.source += line + "\n";
    std::smatch m;
    if (std::regex_match(line, m, kAnnotation)) {
      int offset = std::stoi(m[2]);
      current.expected.push_back({m[1], static_cast<unsigned>(static_cast<int>(lineNo) + offset),
                                  static_cast<unsigned>(std::stoul(m[3])), m[4]});
    } else if (line.rfind("# defines:", 0) == 0) {
      std::istringstream words(line.substr(10));
      std::string w;
      while (words >> w)
        current.defines.push_back(w);
    }
  }
  flush();
  return cases;
}

std::vector<Case> allCases() {
  std::vector<Case> all;
  for (const char *file : {"division.attn", "heads.attn", "lexer.attn", "names.attn",
                           "parser.attn", "types.attn"})
    for (Case &c : loadCases(file))
      all.push_back(std::move(c));
  return all;
}

class Diagnostics : public ::testing::TestWithParam<Case> {};

TEST_P(Diagnostics, MatchAnnotations) {
  const Case &c = GetParam();
  ASSERT_FALSE(c.expected.empty()) << "case without annotations";
  Frontend fe;
  SemaOptions sema;
  for (const std::string &d : c.defines) {
    Define def;
    std::string error;
    ASSERT_TRUE(parseDefine(d, def, error)) << error;
    sema.defines.push_back(def);
  }
  if (fe.parseString(c.file, c.source))
    fe.analyze(sema);
  std::vector<bool> matched(c.expected.size(), false);
  std::string all;
  for (const dsl::Diagnostic &d : fe.diags().diagnostics())
    all += fe.diags().format(d);
  for (const dsl::Diagnostic &d : fe.diags().diagnostics()) {
    std::string severity = d.severity == dsl::Severity::Error ? "error" : "warning";
    auto [line, col] = fe.sources().lineAndColumn(d.range.begin);
    bool found = false;
    for (size_t k = 0; k < c.expected.size() && !found; ++k) {
      const Expected &e = c.expected[k];
      if (!matched[k] && e.severity == severity && e.line == line && e.column == col &&
          d.message.find(e.text) != std::string::npos)
        matched[k] = found = true;
    }
    EXPECT_TRUE(found) << "unexpected " << severity << " at " << line << ":" << col << ": "
                       << d.message << "\n--- all diagnostics ---\n" << all;
  }
  for (size_t k = 0; k < c.expected.size(); ++k)
    EXPECT_TRUE(matched[k]) << "missing " << c.expected[k].severity << " at "
                            << c.expected[k].line << ":" << c.expected[k].column << " {{"
                            << c.expected[k].text << "}}\n--- all diagnostics ---\n" << all;
}

INSTANTIATE_TEST_SUITE_P(InvalidInputs, Diagnostics, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<Case> &info) {
                           std::string name = info.param.file.substr(0, info.param.file.find('.'));
                           return name + "_" + std::to_string(info.param.index);
                         });

// Errors that have no source location.

TEST(DiagnosticsWithoutLocation, UnknownDefineNamesTheKnownParameters) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("p.attn", "pattern p { param l = 4 attend { j : j < l } }"));
  EXPECT_FALSE(fe.analyze({{{"w", 3}}}));
  ASSERT_EQ(fe.diags().errorCount(), 1u);
  EXPECT_EQ(fe.diags().diagnostics()[0].message,
            "unknown parameter 'w' in -D w=3; the file declares: l");
}

TEST(DiagnosticsWithoutLocation, MissingPatternNameListsTheDefinedOnes) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("two.attn", "pattern a { attend {} } pattern b { attend {} }"));
  ASSERT_TRUE(fe.analyze({}));
  EXPECT_EQ(fe.select("c"), nullptr);
  EXPECT_NE(fe.diags().diagnostics().back().message.find("it defines: a, b"), std::string::npos);
  EXPECT_EQ(fe.select("b")->name, "b");
}

TEST(DiagnosticsWithoutLocation, UnreadableFileIsReported) {
  Frontend fe;
  EXPECT_FALSE(fe.parseFile("/nonexistent/p.attn"));
  EXPECT_NE(fe.diags().diagnostics()[0].message.find("cannot open '/nonexistent/p.attn'"),
            std::string::npos);
}

TEST(DiagnosticsWithoutLocation, FileWithNoPatternIsAnError) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("empty.attn", "# nothing here\n"));
  EXPECT_FALSE(fe.analyze({}));
  EXPECT_NE(fe.diags().diagnostics()[0].message.find("no pattern defined"), std::string::npos);
}

TEST(DiagnosticsFormat, PrintsLocationSourceLineCaretAndNotes) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("f.attn", "pattern p {\n  param l = 64\n  attend { j : j % (l - 64) == 1 }\n}\n"));
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

TEST(DiagnosticsFormat, DefineOverrideIsNamedInTheNote) {
  Frontend fe;
  ASSERT_TRUE(fe.parseString("f.attn", "pattern p {\n  param c = 2\n  require c <= 4\n  attend {}\n}\n"));
  EXPECT_FALSE(fe.analyze({{{"c", 9}}}));
  ASSERT_EQ(fe.diags().diagnostics().size(), 1u);
  const dsl::Diagnostic &d = fe.diags().diagnostics()[0];
  EXPECT_EQ(d.message, "requirement 'c <= 4' does not hold");
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_EQ(d.notes[0].message, "'c' is 9 (set by -D c=9)");
}

} // namespace
} // namespace attnc
