//===- CliTest.cpp - The attnc command line: exit codes, JSON, pictures ---===//
#include "attnc/compiler/Analysis.h"
#include "attnc/compiler/Canonicalize.h"
#include "attnc/compiler/Driver.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <sys/wait.h>
#include <variant>

namespace attnc {
namespace {

struct Result {
  int exitCode;
  std::string out, err;
};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `attnc ARGS` with optional environment assignments ("A=b C=d").
Result attnc(const std::string &args, const std::string &env = "") {
  std::string errPath = std::filesystem::temp_directory_path() /
                        ("attnc-cli-" + std::to_string(getpid()) + ".err");
  std::string cmd = env + " " + std::string(ATTNC_BINARY) + " " + args + " 2>" + errPath;
  FILE *pipe = popen(cmd.c_str(), "r");
  Result r{-1, "", ""};
  if (!pipe)
    return r;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0)
    r.out.append(buf, got);
  int status = pclose(pipe);
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = slurp(errPath);
  std::filesystem::remove(errPath);
  return r;
}

std::string pattern(const std::string &name) {
  return std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn";
}

// ---- A small JSON reader, enough to check the analyze schema -------------
struct Json;
using JsonObject = std::map<std::string, Json>;
using JsonArray = std::vector<Json>;
struct Json {
  std::variant<std::nullptr_t, bool, double, std::string, JsonArray, JsonObject> v;
  bool isInt() const {
    return std::holds_alternative<double>(v) && std::get<double>(v) == static_cast<int64_t>(std::get<double>(v));
  }
  const Json &operator[](const std::string &k) const { return std::get<JsonObject>(v).at(k); }
  const JsonObject &obj() const { return std::get<JsonObject>(v); }
  const JsonArray &arr() const { return std::get<JsonArray>(v); }
  double num() const { return std::get<double>(v); }
};

class JsonReader {
public:
  explicit JsonReader(const std::string &s) : s_(s) {}
  Json parse() {
    Json j = value();
    ws();
    if (p_ != s_.size())
      throw std::runtime_error("trailing characters at " + std::to_string(p_));
    return j;
  }

private:
  void ws() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_])))
      ++p_;
  }
  void expect(char c) {
    ws();
    if (p_ >= s_.size() || s_[p_] != c)
      throw std::runtime_error(std::string("expected '") + c + "' at " + std::to_string(p_));
    ++p_;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (p_ < s_.size() && s_[p_] != '"') {
      if (s_[p_] == '\\')
        ++p_;
      out += s_[p_++];
    }
    expect('"');
    return out;
  }
  Json value() {
    ws();
    if (p_ >= s_.size())
      throw std::runtime_error("unexpected end");
    char c = s_[p_];
    if (c == '{') {
      ++p_;
      JsonObject o;
      ws();
      if (s_[p_] == '}') {
        ++p_;
        return {o};
      }
      for (;;) {
        std::string k = str();
        expect(':');
        o[k] = value();
        ws();
        if (s_[p_] == ',') {
          ++p_;
          continue;
        }
        expect('}');
        return {o};
      }
    }
    if (c == '[') {
      ++p_;
      JsonArray a;
      ws();
      if (s_[p_] == ']') {
        ++p_;
        return {a};
      }
      for (;;) {
        a.push_back(value());
        ws();
        if (s_[p_] == ',') {
          ++p_;
          continue;
        }
        expect(']');
        return {a};
      }
    }
    if (c == '"')
      return {str()};
    if (s_.compare(p_, 4, "null") == 0) {
      p_ += 4;
      return {nullptr};
    }
    if (s_.compare(p_, 4, "true") == 0) {
      p_ += 4;
      return {true};
    }
    if (s_.compare(p_, 5, "false") == 0) {
      p_ += 5;
      return {false};
    }
    size_t used = 0;
    double d = std::stod(s_.substr(p_), &used);
    p_ += used;
    return {d};
  }
  const std::string &s_;
  size_t p_ = 0;
};

// ---- Exit codes ------------------------------------------------------------

TEST(Cli, CheckAcceptsEveryLibraryPattern) {
  for (const char *name : {"axial", "bigbird", "causal", "dilated", "fixed", "fixed_multihead",
                           "fixed_subblocks", "full", "local", "longformer", "strided",
                           "strided_multihead"}) {
    Result r = attnc("check " + pattern(name));
    EXPECT_EQ(r.exitCode, 0) << name << "\n" << r.err;
    EXPECT_NE(r.out.find("ok"), std::string::npos) << name;
  }
}

TEST(Cli, MalformedPatternExitsOneWithALocatedDiagnostic) {
  std::string path = std::filesystem::temp_directory_path() / "attnc-cli-bad.attn";
  std::ofstream(path) << "pattern bad {\n  attend { j : j % 0 == 1 }\n}\n";
  Result r = attnc("check " + path);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find(path + ":2:20: error: modulus must be a positive integer"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("^"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(Cli, BinaryGarbageIsADiagnosticNotACrash) {
  std::string path = std::filesystem::temp_directory_path() / "attnc-cli-garbage.attn";
  std::ofstream(path, std::ios::binary) << std::string("\x7f" "ELF\x01\x02\x00\xff\xfe{{{{", 13);
  Result r = attnc("analyze " + path + " --n 8");
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find("error:"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(attnc("check /nonexistent/file.attn").exitCode, 2);
  EXPECT_EQ(attnc("analyze " + pattern("fixed") + " --no-such-flag").exitCode, 2);
  EXPECT_EQ(attnc("analyze " + pattern("fixed")).exitCode, 2); // --n is required
  EXPECT_EQ(attnc("").exitCode, 2);                             // a subcommand is required
  EXPECT_EQ(attnc("check " + pattern("fixed") + " -D l").exitCode, 2);
  EXPECT_EQ(attnc("analyze " + pattern("fixed") + " --n 0").exitCode, 2);
  EXPECT_EQ(attnc("analyze " + pattern("fixed") + " --n 99999999").exitCode, 2);
  EXPECT_EQ(attnc("emit " + pattern("fixed") + " --stage bogus").exitCode, 2);
}

TEST(Cli, UnknownDefineIsAPatternError) {
  Result r = attnc("check " + pattern("fixed") + " -D w=3");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("unknown parameter 'w'"), std::string::npos) << r.err;
}

TEST(Cli, EveryHelpEndsWithExamples) {
  for (const char *sub : {"", "check", "show", "analyze", "emit", "compile", "run", "bench", "tune"}) {
    Result r = attnc(std::string(sub) + " --help");
    EXPECT_EQ(r.exitCode, 0) << sub;
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << sub << "\n" << r.out;
  }
}

// ---- analyze --json --------------------------------------------------------

TEST(Cli, AnalyzeJsonFollowsTheContract) {
  Result r = attnc("analyze " + pattern("fixed_multihead") + " --n 300 --block 64 --json -D l=32");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json j = JsonReader(r.out).parse();
  EXPECT_EQ(std::get<std::string>(j["pattern"].v), "fixed_multihead");
  EXPECT_EQ(j["n"].num(), 300);
  EXPECT_EQ(j["params"]["l"].num(), 32);
  EXPECT_EQ(j["params"]["c"].num(), 8);
  ASSERT_EQ(j["heads"].arr().size(), 2u); // two distinct head sets
  for (size_t k = 0; k < 2; ++k) {
    const Json &h = j["heads"].arr()[k];
    EXPECT_EQ(h["head"].num(), double(k));
    for (const char *field : {"nnz", "empty_rows"})
      EXPECT_TRUE(h[field].isInt()) << field;
    for (const char *field : {"min", "max"})
      EXPECT_TRUE(h["row_nnz"][field].isInt()) << field;
    EXPECT_NEAR(h["row_nnz"]["mean"].num(), h["nnz"].num() / 300.0, 1e-5);
    EXPECT_EQ(h["blocks"]["size"].num(), 64);
    // 300 / 64 rounds up to 5 tile rows and columns.
    EXPECT_EQ(h["blocks"]["full"].num() + h["blocks"]["partial"].num() + h["blocks"]["empty"].num(), 25);
  }
}

TEST(Cli, AnalyzeJsonMergedPatternHasOneHeadEntry) {
  Result r = attnc("analyze " + pattern("strided") + " --n 100 --json -D l=10");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json j = JsonReader(r.out).parse();
  ASSERT_EQ(j["heads"].arr().size(), 1u);
  // By hand: row i has min(i, 10) + 1 band keys plus the keys i - 10k < i - 10.
  int64_t nnz = 0;
  for (int64_t i = 0; i < 100; ++i)
    for (int64_t jj = 0; jj <= i; ++jj)
      nnz += (jj >= i - 10) || (i - jj) % 10 == 0;
  EXPECT_EQ(j["heads"].arr()[0]["nnz"].num(), nnz);
}

// ---- show ------------------------------------------------------------------

TEST(Cli, AsciiPictureHasOneGlyphPerPair) {
  Result json = attnc("analyze " + pattern("fixed") + " --n 40 -D l=8 -D c=2 --json");
  Result pic = attnc("show " + pattern("fixed") + " --n 40 -D l=8 -D c=2");
  ASSERT_EQ(pic.exitCode, 0) << pic.err;
  int64_t glyphs = 0, rows = 0;
  std::istringstream lines(pic.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() != 40 || line.find_first_not_of(".#o") != std::string::npos)
      continue; // title and legend
    ++rows;
    glyphs += static_cast<int64_t>(std::count_if(line.begin(), line.end(), [](char c) { return c != '.'; }));
  }
  EXPECT_EQ(rows, 40);
  EXPECT_EQ(glyphs, JsonReader(json.out).parse()["heads"].arr()[0]["nnz"].num());
}

TEST(Cli, SvgAndPngPicturesAreWritten) {
  std::string dir = std::filesystem::temp_directory_path();
  std::string svg = dir + "/attnc-cli.svg", png = dir + "/attnc-cli.png";
  ASSERT_EQ(attnc("show " + pattern("strided") + " --n 64 -D l=8 -o " + svg).exitCode, 0);
  ASSERT_EQ(attnc("show " + pattern("strided_multihead") + " --n 100 -D l=8 -o " + png).exitCode, 0);
  std::string s = slurp(svg), p = slurp(png);
  EXPECT_EQ(s.rfind("<svg", 0), 0u);
  EXPECT_NE(s.find("residue (i - j) % 8 == 0"), std::string::npos); // the legend names the sets
  ASSERT_GT(p.size(), 24u);
  EXPECT_EQ(p.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(p[at])) << 24) | (uint32_t(uint8_t(p[at + 1])) << 16) |
           (uint32_t(uint8_t(p[at + 2])) << 8) | uint32_t(uint8_t(p[at + 3]));
  };
  EXPECT_EQ(p.substr(12, 4), "IHDR");
  EXPECT_EQ(be32(16), be32(20));            // square
  EXPECT_EQ(be32(16) % 100, 0u);            // a whole number of pixels per cell
  std::filesystem::remove(svg);
  std::filesystem::remove(png);
}

TEST(Cli, ShowRejectsAnOutOfRangeHead) {
  Result r = attnc("show " + pattern("fixed_multihead") + " --n 16 --head 2");
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("head 2 is out of range"), std::string::npos) << r.err;
}

// ---- emit, compile, run ----------------------------------------------------

TEST(Cli, EmitPrintsEachFrontEndStage) {
  Result ast = attnc("emit " + pattern("fixed") + " --stage ast");
  EXPECT_EQ(ast.exitCode, 0);
  EXPECT_NE(ast.out.find("(pattern fixed"), std::string::npos);
  Result ir = attnc("emit " + pattern("fixed") + " --stage ir");
  EXPECT_EQ(ir.exitCode, 0);
  EXPECT_NE(ir.out.find("block-diag"), std::string::npos);
  Result mlir = attnc("emit " + pattern("fixed") + " --stage mlir");
  EXPECT_EQ(mlir.exitCode, 0);
  EXPECT_NE(mlir.out.find("#sparse_tensor.encoding"), std::string::npos);
  EXPECT_NE(mlir.out.find("fixed.attn\":"), std::string::npos); // pattern locations
}

TEST(Cli, RunRejectsACorruptKernelFile) {
  std::string dir = std::filesystem::temp_directory_path();
  std::string kernel = dir + "/attnc-cli-bad.attnk", npy = dir + "/attnc-cli-q.npy";
  std::ofstream(kernel) << "not a kernel";
  std::ofstream(npy) << "not an npy";
  Result r = attnc("run " + kernel + " --q " + npy + " --k " + npy + " --v " + npy);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("not a .npy file"), std::string::npos) << r.err;
  std::filesystem::remove(kernel);
  std::filesystem::remove(npy);
}

TEST(Cli, RunChecksItsInputsAgainstThePattern) {
  std::string dir = std::filesystem::temp_directory_path() / ("attnc-cli-run-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto npy = [&](const std::string &name, const std::string &shape, size_t floats) {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(h.size() & 0xff) + char(h.size() >> 8) + h;
    bytes += std::string(floats * 4, '\0');
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
    return dir + "/" + name;
  };
  std::string q2 = npy("q2.npy", "(6, 4)", 24), q3 = npy("q3.npy", "(2, 6, 4)", 48);
  std::string cache = "ATTNC_CACHE_DIR=" + dir;
  // [n, d] inputs cannot feed a pattern that declares two heads.
  Result heads = attnc("run " + pattern("fixed_multihead") + " --q " + q2 + " --k " + q2 + " --v " + q2, cache);
  EXPECT_EQ(heads.exitCode, 1);
  EXPECT_NE(heads.err.find("pattern has 2 heads"), std::string::npos) << heads.err;
  Result dims = attnc("run " + pattern("fixed") + " --q " + q3 + " --k " + q3 + " --v " + q3, cache);
  EXPECT_EQ(dims.exitCode, 1);
  EXPECT_NE(dims.err.find("[n, d] or [batch, heads, n, d]"), std::string::npos) << dims.err;
  Result mixed = attnc("run " + pattern("fixed") + " --q " + q2 + " --k " + q2 + " --v " + q3, cache);
  EXPECT_EQ(mixed.exitCode, 1);
  EXPECT_NE(mixed.err.find("same shape"), std::string::npos) << mixed.err;
  Result ok = attnc("run " + pattern("fixed") + " --q " + q2 + " --k " + q2 + " --v " + q2 + " -o " + dir +
                        "/o.npy --check", cache);
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_NE(ok.out.find("max abs error"), std::string::npos);
  EXPECT_TRUE(std::filesystem::exists(dir + "/o.npy"));
  // A kernel file has its parameters built in.
  ASSERT_EQ(attnc("compile " + pattern("fixed") + " -o " + dir + "/k.attnk").exitCode, 0);
  Result defines = attnc("run " + dir + "/k.attnk -D l=4 --q " + q2 + " --k " + q2 + " --v " + q2);
  EXPECT_EQ(defines.exitCode, 2);
  std::filesystem::remove_all(dir);
}

// ---- bench, tune ------------------------------------------------------------

TEST(Cli, BenchReportsEveryBackendSideBySide) {
  std::string cache = std::filesystem::temp_directory_path() / ("attnc-cli-bench-" + std::to_string(getpid()));
  Result r = attnc("bench " + pattern("strided") + " -D l=8 --n 200 --d 16 --heads 2 --repeat 1 --json",
                   "ATTNC_CACHE_DIR=" + cache);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json j = JsonReader(r.out).parse();
  EXPECT_EQ(j["n"].num(), 200);
  ASSERT_EQ(j["results"].arr().size(), 3u);
  std::vector<std::string> names;
  for (const Json &row : j["results"].arr()) {
    names.push_back(std::get<std::string>(row["backend"].v));
    EXPECT_GT(row["ms"].num(), 0);
    EXPECT_GT(row["gflops"].num(), 0);
    EXPECT_GE(row["executed_over_useful"].num(), 1.0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"fused", "sparsifier", "dense"}));
  // Written out by hand: the strided pairs; the dense baseline computes all n^2.
  int64_t nnz = 0;
  for (int64_t i = 0; i < 200; ++i)
    for (int64_t jj = 0; jj <= i; ++jj)
      nnz += (jj >= i - 8) || (i - jj) % 8 == 0;
  EXPECT_EQ(j["nnz_per_head"].num(), nnz);
  EXPECT_NEAR(j["results"].arr()[2]["executed_over_useful"].num(), 200.0 * 200.0 / double(nnz), 1e-3);
  std::filesystem::remove_all(cache);
}

TEST(Cli, TuneRecordsAShapeThatCompileThenUses) {
  std::string cache = std::filesystem::temp_directory_path() / ("attnc-cli-tune-" + std::to_string(getpid()));
  std::string env = "ATTNC_CACHE_DIR=" + cache;
  Result tune = attnc("tune " + pattern("fixed") + " -D l=16 -D c=4 --n 300 --d 16 --heads 2 --measure 2 --repeat 1", env);
  ASSERT_EQ(tune.exitCode, 0) << tune.err;
  EXPECT_NE(tune.out.find("best tiles"), std::string::npos) << tune.out;
  EXPECT_NE(tune.err.find("[1/"), std::string::npos) << tune.err; // progress lines
  EXPECT_TRUE(std::filesystem::exists(cache + "/tuning.db"));
  Result compile = attnc("compile " + pattern("fixed") + " -D l=16 -D c=4 -o " + cache + "/k.attnk", env);
  ASSERT_EQ(compile.exitCode, 0) << compile.err;
  EXPECT_NE(compile.err.find("using tuned tiles"), std::string::npos) << compile.err;
  // Other parameters are another pattern instance: no tuned shape for them.
  Result other = attnc("compile " + pattern("fixed") + " -D l=32 -o " + cache + "/k2.attnk", env);
  EXPECT_EQ(other.err.find("using tuned tiles"), std::string::npos) << other.err;
  std::filesystem::remove_all(cache);
}

} // namespace
} // namespace attnc
