//===- GoldenTest.cpp - Golden output of the pipeline stages --------------===//
//
// Each tests/golden/*.attn file is a self-contained input with a
//   # RUN: attnc ARGS          (%s is the file itself)
// line and FileCheck `# CHECK:` lines for the lines of output that matter.
// The runner runs attnc, requires exit 0 and pipes stdout to FileCheck.
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

namespace attnc::test {
namespace {

const std::vector<std::string> kGoldenFiles = {
    "fixed_ir.attn",           "fixed_mlir.attn", "fixed_multihead_ir.attn", "fixed_plan.attn",
    "fixed_subblocks_ir.attn", "strided_ir.attn", "strided_plan.attn"};

std::string goldenDir() { return std::string(ATTNC_SOURCE_DIR) + "/tests/golden/"; }

/// The arguments of the file's `# RUN: attnc ...` line, %s substituted.
std::string runArguments(const std::string &path) {
  std::istringstream lines(readFile(path));
  const std::string prefix = "# RUN: attnc ";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0)
      continue;
    std::string args = line.substr(prefix.size());
    for (size_t at; (at = args.find("%s")) != std::string::npos;)
      args.replace(at, 2, path);
    return args;
  }
  return "";
}

CommandResult fileCheck(const std::string &checkFile, const std::string &input) {
  return runCommand(std::string(FILECHECK_BINARY) + " --input-file=" + input + " " + checkFile);
}

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, OutputMatchesTheCheckLines) {
  std::string path = goldenDir() + GetParam();
  std::string args = runArguments(path);
  ASSERT_FALSE(args.empty()) << path << " has no '# RUN: attnc ...' line";
  CommandResult r = attnc(args);
  ASSERT_EQ(r.exitCode, 0) << "attnc " << args << "\n" << r.err;
  ScratchDir dir;
  writeFile(dir.file("output"), r.out);
  CommandResult check = fileCheck(path, dir.file("output"));
  EXPECT_EQ(check.exitCode, 0) << check.err << "\n--- output of attnc " << args << " ---\n"
                               << r.out;
}

/// The golden files of the stages this build has (mlir needs ATTNC_WITH_MLIR).
std::vector<std::string> builtGoldenFiles() {
  std::vector<std::string> out;
  for (const std::string &f : kGoldenFiles)
    if (ATTNC_HAVE_MLIR || f.find("_mlir") == std::string::npos)
      out.push_back(f);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Files, Golden, ::testing::ValuesIn(builtGoldenFiles()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           return info.param.substr(0, info.param.find('.'));
                         });

TEST(GoldenFiles, EveryFileInTheFolderIsListed) {
  std::set<std::string> listed(kGoldenFiles.begin(), kGoldenFiles.end());
  for (const auto &entry : std::filesystem::directory_iterator(goldenDir())) {
    if (entry.path().extension() == ".attn") {
      EXPECT_TRUE(listed.count(entry.path().filename().string()))
          << entry.path() << " is not in kGoldenFiles, so it never runs";
    }
  }
}

TEST(GoldenRunner, FileCheckRejectsOutputThatDoesNotMatch) {
  ScratchDir dir;
  writeFile(dir.file("check.attn"), "# CHECK: block-diag\n# CHECK-NEXT: stripe\n");
  writeFile(dir.file("good"), "  block-diag j / 4 == i / 4\n  stripe j % 4 in [3, 3]\n");
  writeFile(dir.file("bad"), "  block-diag j / 4 == i / 4\n  band j - i in [-inf, 0]\n  stripe\n");
  EXPECT_EQ(fileCheck(dir.file("check.attn"), dir.file("good")).exitCode, 0);
  EXPECT_NE(fileCheck(dir.file("check.attn"), dir.file("bad")).exitCode, 0);
}

} // namespace
} // namespace attnc::test
