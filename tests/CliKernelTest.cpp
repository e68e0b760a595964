//===- CliKernelTest.cpp - compile, run, bench and tune from the CLI ------===//
//
// The subcommands that build and execute kernels, end to end: corrupt and
// mismatched inputs are user errors (exit 1), a kernel file's parameters are
// fixed (-D is a usage error), bench reports every backend, and a shape
// recorded by tune is what compile then uses.
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace attnc::test {
namespace {

/// A float32 .npy file of zeros with the given shape text, e.g. "(6, 4)".
std::string zerosNpy(const ScratchDir &dir, const std::string &name, const std::string &shape,
                     size_t floats) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 0xff) +
                      char(header.size() >> 8) + header + std::string(floats * 4, '\0');
  writeFile(dir.file(name), bytes);
  return dir.file(name);
}

TEST(CliRun, CorruptInputsAreUserErrors) {
  ScratchDir dir;
  writeFile(dir.file("bad.attnk"), "not a kernel");
  writeFile(dir.file("q.npy"), "not an npy");
  std::string q = dir.file("q.npy");
  CommandResult r = attnc("run " + dir.file("bad.attnk") + " --q " + q + " --k " + q + " --v " + q);
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("not a .npy file"), std::string::npos) << r.err;
}

TEST(CliRun, InputsMustFitThePattern) {
  ScratchDir dir;
  std::string q2 = zerosNpy(dir, "q2.npy", "(6, 4)", 24),
              q3 = zerosNpy(dir, "q3.npy", "(2, 6, 4)", 48);
  std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  auto run = [&](const std::string &pattern, const std::string &q, const std::string &k,
                 const std::string &v) {
    return attnc("run " + libraryPattern(pattern) + " --q " + q + " --k " + k + " --v " + v, cache);
  };
  CommandResult heads = run("fixed_multihead", q2, q2, q2); // [n, d] cannot feed 2 heads
  EXPECT_EQ(heads.exitCode, 1);
  EXPECT_NE(heads.err.find("pattern has 2 heads"), std::string::npos) << heads.err;
  CommandResult dims = run("fixed", q3, q3, q3);
  EXPECT_EQ(dims.exitCode, 1);
  EXPECT_NE(dims.err.find("[n, d] or [batch, heads, n, d]"), std::string::npos) << dims.err;
  CommandResult mixed = run("fixed", q2, q2, q3);
  EXPECT_EQ(mixed.exitCode, 1);
  EXPECT_NE(mixed.err.find("same shape"), std::string::npos) << mixed.err;
}

TEST(CliRun, CheckedRunWritesTheOutput) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(6, 4)", 24);
  CommandResult ok = attnc("run " + libraryPattern("fixed") + " --q " + q + " --k " + q + " --v " +
                               q + " -o " + dir.file("o.npy") + " --check",
                           "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(ok.exitCode, 0) << ok.err;
  EXPECT_NE(ok.out.find("max abs error"), std::string::npos) << ok.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("o.npy")));
}

TEST(CliRun, KernelFileRejectsDefines) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(6, 4)", 24);
  ASSERT_EQ(attnc("compile " + libraryPattern("fixed") + " -o " + dir.file("k.attnk"),
                  "ATTNC_CACHE_DIR=" + dir.path())
                .exitCode,
            0);
  CommandResult r =
      attnc("run " + dir.file("k.attnk") + " -D l=4 --q " + q + " --k " + q + " --v " + q);
  EXPECT_EQ(r.exitCode, 2) << r.err;
}

#if ATTNC_HAVE_MLIR && ATTNC_HAVE_HALIDE
TEST(CliBench, ReportsEveryBackendSideBySide) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("strided") +
                              " -D l=8 --n 200 --d 16 --heads 2 --repeat 1 --json",
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  EXPECT_EQ(doc["n"].integer, 200);
  ASSERT_EQ(doc["results"].array.size(), 4u);
  std::vector<std::string> names;
  for (const Json &row : doc["results"].array) {
    names.push_back(row["backend"].string);
    EXPECT_GT(row["ms"].number, 0);
    EXPECT_GT(row["gflops"].number, 0);
    EXPECT_GE(row["executed_over_useful"].number, 1.0);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"fused", "halide", "sparsifier", "dense"}));
  int64_t nnz = 0; // the strided pairs, counted by hand
  for (int64_t i = 0; i < 200; ++i)
    for (int64_t j = 0; j <= i; ++j)
      nnz += j >= i - 8 || (i - j) % 8 == 0;
  EXPECT_EQ(doc["nnz_per_head"].integer, nnz);
  // The dense baseline computes all n^2 pairs.
  EXPECT_NEAR(doc["results"].array[3]["executed_over_useful"].number, 200.0 * 200.0 / double(nnz),
              1e-3);
}
#endif

#if ATTNC_HAVE_MLIR
TEST(CliBench, RunsBf16TensorsAndRejectsOtherTypes) {
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  CommandResult r = attnc("bench " + libraryPattern("strided") +
                              " -D l=8 --n 130 --d 16 --heads 2 --repeat 1 --backend fused,sparsifier "
                              "--dtype bf16 --json",
                          env);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  EXPECT_EQ(doc["dtype"].string, "bf16");
  ASSERT_EQ(doc["results"].array.size(), 2u);
  for (const Json &row : doc["results"].array)
    EXPECT_GT(row["ms"].number, 0) << row["backend"].string << ": the run failed";
  CommandResult bad = attnc("bench " + libraryPattern("strided") + " --n 64 --dtype f16", env);
  EXPECT_EQ(bad.exitCode, 2) << bad.out;
  EXPECT_NE(bad.err.find("f16 not in {f32,bf16}"), std::string::npos) << bad.err;
}
#endif

#if ATTNC_HAVE_HALIDE
TEST(CliRun, HalideKernelFileRunsAndChecks) {
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  ASSERT_EQ(attnc("compile " + libraryPattern("strided") + " -D l=8 --backend halide -o " + dir.file("k.attnk"),
                  env)
                .exitCode,
            0);
  std::string q = zerosNpy(dir, "q.npy", "(1, 2, 70, 32)", 2 * 70 * 32);
  CommandResult r = attnc("run " + dir.file("k.attnk") + " --q " + q + " --k " + q + " --v " + q +
                              " -o " + dir.file("o.npy") + " --check",
                          env);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("max abs error"), std::string::npos) << r.out;
}
#endif

#if ATTNC_HAVE_HALIDE
TEST(CliCompile, HalideWithoutItsCodeGeneratorFailsClearly) {
  // The Halide code generator is a module opened on first use; when it
  // cannot be opened, a halide compile says so (and the other backends do
  // not need it).
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_HALIDEGEN=" + dir.file("missing.so");
  CommandResult r = attnc("compile " + libraryPattern("strided") + " -D l=8 --backend halide -o " +
                              dir.file("k.attnk"),
                          env);
  EXPECT_NE(r.exitCode, 0);
  EXPECT_NE(r.err.find("cannot load the Halide code generator"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing.so"), std::string::npos) << r.err;
  // A library that is not the generator: opened, but without its entry points.
  CommandResult other = attnc("compile " + libraryPattern("strided") + " -D l=8 --backend halide -o " +
                                  dir.file("k.attnk"),
                              "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_HALIDEGEN=libm.so.6");
  EXPECT_NE(other.exitCode, 0);
  EXPECT_NE(other.err.find("lacks its entry points"), std::string::npos) << other.err;
  CommandResult fused =
      attnc("compile " + libraryPattern("strided") + " -D l=8 -o " + dir.file("f.attnk"), env);
  EXPECT_EQ(fused.exitCode, 0) << fused.err;
}
#endif

#if ATTNC_HAVE_HALIDE
TEST(CliTune, HalideScheduleIsRecordedAndUsedByCompile) {
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  CommandResult tune = attnc("tune " + libraryPattern("strided") +
                                 " -D l=8 --n 300 --d 32 --heads 2 --backend halide --measure 1 --repeat 1",
                             env);
  ASSERT_EQ(tune.exitCode, 0) << tune.err;
  EXPECT_NE(tune.out.find("best schedule r"), std::string::npos) << tune.out;
  std::ifstream db(dir.file("tuning.db"));
  std::string line;
  ASSERT_TRUE(std::getline(db, line));
  EXPECT_NE(line.find("backend=halide schedule=r"), std::string::npos) << line;
  CommandResult compile = attnc("compile " + libraryPattern("strided") + " -D l=8 --backend halide -o " +
                                    dir.file("k.attnk"),
                                env);
  ASSERT_EQ(compile.exitCode, 0) << compile.err;
  EXPECT_NE(compile.err.find("using tuned Halide schedule r"), std::string::npos) << compile.err;
  // The fused backend has no winner recorded for this pattern.
  CommandResult fused =
      attnc("compile " + libraryPattern("strided") + " -D l=8 -o " + dir.file("f.attnk"), env);
  ASSERT_EQ(fused.exitCode, 0) << fused.err;
  EXPECT_EQ(fused.err.find("using tuned"), std::string::npos) << fused.err;
}
#endif

TEST(CliTune, RecordedShapeIsUsedByCompileForTheSameInstanceOnly) {
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  CommandResult tune = attnc("tune " + libraryPattern("fixed") +
                                 " -D l=16 -D c=4 --n 300 --d 16 --heads 2 --measure 2 --repeat 1",
                             env);
  ASSERT_EQ(tune.exitCode, 0) << tune.err;
  EXPECT_NE(tune.out.find("best tiles"), std::string::npos) << tune.out;
  EXPECT_TRUE(std::filesystem::exists(dir.file("tuning.db")));
  CommandResult compile = attnc(
      "compile " + libraryPattern("fixed") + " -D l=16 -D c=4 -o " + dir.file("k.attnk"), env);
  ASSERT_EQ(compile.exitCode, 0) << compile.err;
  EXPECT_NE(compile.err.find("using tuned tiles"), std::string::npos) << compile.err;
  // Other parameters are another pattern instance: no tuned shape for them.
  CommandResult other =
      attnc("compile " + libraryPattern("fixed") + " -D l=32 -o " + dir.file("k2.attnk"), env);
  EXPECT_EQ(other.exitCode, 0) << other.err;
  EXPECT_EQ(other.err.find("using tuned tiles"), std::string::npos) << other.err;
}

} // namespace
} // namespace attnc::test

namespace attnc::test {
namespace {

#if !ATTNC_HAVE_MLIR || !ATTNC_HAVE_HALIDE
// A build without MLIR or Halide says which backend is missing and what it
// needs, with exit code 1, where a full build would use it.
TEST(CliBackendsNotBuilt, AreReportedWithTheOptionThatBuildsThem) {
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  for (const char *backend : {"sparsifier", "halide"}) {
    if (std::string(backend) == "sparsifier" ? ATTNC_HAVE_MLIR : ATTNC_HAVE_HALIDE)
      continue;
    CommandResult c = attnc("compile " + libraryPattern("fixed") + " --backend " + backend + " -o " +
                                dir.file("k.attnk"),
                            env);
    EXPECT_EQ(c.exitCode, 1) << c.err;
    EXPECT_NE(c.err.find(std::string("the ") + backend + " backend is not built into this attnc"),
              std::string::npos)
        << c.err;
    EXPECT_NE(c.err.find("-DATTNC_WITH_"), std::string::npos) << c.err;
    CommandResult b = attnc("bench " + libraryPattern("fixed") + " --n 64 --d 16 --heads 1 --repeat 1 --backend " +
                                backend,
                            env);
    EXPECT_NE(b.out.find("not built into this attnc"), std::string::npos) << b.out << b.err;
  }
#if !ATTNC_HAVE_MLIR
  CommandResult e = attnc("emit " + libraryPattern("fixed") + " --stage mlir", env);
  EXPECT_EQ(e.exitCode, 1) << e.err;
  EXPECT_NE(e.err.find("--stage mlir: the sparsifier backend is not built"), std::string::npos) << e.err;
#endif
  // By default bench compares the backends this build has, and succeeds.
  CommandResult d = attnc("bench " + libraryPattern("fixed") + " --n 64 --d 16 --heads 1 --repeat 1", env);
  EXPECT_EQ(d.exitCode, 0) << d.err;
  EXPECT_EQ(d.out.find("not built"), std::string::npos) << d.out;
}
#endif

} // namespace
} // namespace attnc::test
