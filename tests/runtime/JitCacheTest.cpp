//===- JitCacheTest.cpp - The JIT's on-disk cache -------------------------===//
#include "TestSupport.h"

#include "attnc/attnc_jit.h"
#include "attnc/codegen/CodeGen.h"
#include "attnc/frontend/Driver.h"
#include "attnc/tuning/Tuning.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

namespace attnc::test {
namespace {

struct Stats {
  int64_t hits, misses, rebuilt;
};

Stats stats() {
  Stats s{};
  attnc_jit_cache_stats(&s.hits, &s.misses, &s.rebuilt);
  return s;
}

attnc_status compileFixed(const std::string &cache, const char *define = "l=16") {
  const char *defs[] = {define};
  attnc_jit_options options{defs, 1, nullptr, cache.c_str(), 0};
  attnc_kernel *k = nullptr;
  attnc_status s = attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k);
  attnc_kernel_free(k);
  return s;
}

std::vector<std::string> cacheFiles(const std::string &dir) {
  std::vector<std::string> out;
  for (const auto &e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().string());
  return out;
}

TEST(JitCache, SecondCompileIsAHit) {
  ScratchDir dir;
  Stats before = stats();
  ASSERT_EQ(compileFixed(dir.path()), ATTNC_OK) << attnc_last_error();
  ASSERT_EQ(compileFixed(dir.path()), ATTNC_OK) << attnc_last_error();
  Stats after = stats();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 1);
  EXPECT_EQ(cacheFiles(dir.path()).size(), 1u);
}

TEST(JitCache, AFusedKernelIsKeyedByItsIrNotItsSourceText) {
  // Comments and spelling do not change the canonical IR, so the second
  // source is the same fused kernel: a hit, one entry.
  ScratchDir dir;
  attnc_jit_options options{nullptr, 0, nullptr, dir.path().c_str(), 0, "fused"};
  const char *a = "pattern w { attend { j : i - 4 <= j && j <= i } }";
  const char *b = "# the same window\npattern w {\n  attend { j : j >= i - 4 && j <= i }  # keys\n}\n";
  Stats before = stats();
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_jit_compile_string(a, "a.attn", &options, &k), ATTNC_OK) << attnc_last_error();
  attnc_kernel_free(k);
  ASSERT_EQ(attnc_jit_compile_string(b, "b.attn", &options, &k), ATTNC_OK) << attnc_last_error();
  // The entry is the kernel as first compiled: its metadata names that source.
  EXPECT_STREQ(attnc_kernel_metadata(k, "source"), a);
  attnc_kernel_free(k);
  Stats after = stats();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 1);
  EXPECT_EQ(cacheFiles(dir.path()).size(), 1u);
}

TEST(JitCache, ACacheDirectoryThatIsAFileCompilesInMemory) {
  ScratchDir dir;
  const std::string file = dir.path() + "/not-a-directory";
  { std::ofstream(file) << "x"; }
  ASSERT_EQ(compileFixed(file), ATTNC_OK) << attnc_last_error();
  ASSERT_EQ(compileFixed(dir.path() + "/not-a-directory/below"), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(cacheFiles(dir.path()).size(), 1u); // the file, nothing else
}

TEST(JitCache, OtherParametersAreAMiss) {
  ScratchDir dir;
  Stats before = stats();
  ASSERT_EQ(compileFixed(dir.path(), "l=16"), ATTNC_OK);
  ASSERT_EQ(compileFixed(dir.path(), "l=32"), ATTNC_OK);
  EXPECT_EQ(stats().misses - before.misses, 2);
  EXPECT_EQ(cacheFiles(dir.path()).size(), 2u);
}

class JitCacheBackends : public ::testing::TestWithParam<const char *> {};

INSTANTIATE_TEST_SUITE_P(Backends, JitCacheBackends, ::testing::ValuesIn(builtBackends({"fused", "halide", "sparsifier"})),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

TEST_P(JitCacheBackends, ChangingTheSequenceLengthDoesNotRecompile) {
  ScratchDir dir;
  const char *defs[] = {"l=16"};
  attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 0, GetParam()};
  Stats before = stats();
  for (int64_t n : {10, 100, 33}) {
    attnc_kernel *k = nullptr;
    ASSERT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK);
    std::vector<float> buf = randomFloats(n * 4, 1, 1), out(n * 4);
    attnc_tensor t = view(buf, 1, 1, n, 4), o = view(out, 1, 1, n, 4);
    EXPECT_EQ(attnc_run(k, &t, &t, &t, &o, nullptr), ATTNC_OK) << attnc_last_error();
    attnc_kernel_free(k);
  }
  Stats after = stats();
  EXPECT_EQ(after.misses - before.misses, 1);
  EXPECT_EQ(after.hits - before.hits, 2);
}

TEST(JitCache, CorruptEntryIsRebuilt) {
  ScratchDir dir;
  ASSERT_EQ(compileFixed(dir.path()), ATTNC_OK);
  std::vector<std::string> files = cacheFiles(dir.path());
  ASSERT_EQ(files.size(), 1u);
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "garbage";
  Stats before = stats();
  ASSERT_EQ(compileFixed(dir.path()), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(stats().rebuilt - before.rebuilt, 1);
  // The rebuilt entry is good again: the next compile is a hit.
  Stats mid = stats();
  ASSERT_EQ(compileFixed(dir.path()), ATTNC_OK);
  EXPECT_EQ(stats().hits - mid.hits, 1);
}

TEST(JitCache, ConcurrentProcessesCompilingTheSamePatternBothSucceed) {
  ScratchDir dir;
  std::vector<pid_t> children;
  for (int c = 0; c < 3; ++c) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0)
      _exit(compileFixed(dir.path(), "l=24") == ATTNC_OK ? 0 : 1);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  // One published entry, no temporary files left behind.
  std::vector<std::string> files = cacheFiles(dir.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find(".attnk"), std::string::npos);
  EXPECT_EQ(files[0].find(".tmp."), std::string::npos);
}

TEST(JitCache, NoCacheLeavesTheDirectoryEmpty) {
  ScratchDir dir;
  const char *defs[] = {"l=16"};
  attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 1};
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK);
  attnc_kernel_free(k);
  EXPECT_TRUE(cacheFiles(dir.path()).empty());
}

TEST(Jit, PatternErrorsComeBackAsDiagnostics) {
  ScratchDir dir;
  attnc_jit_options options{nullptr, 0, nullptr, dir.path().c_str(), 0};
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_jit_compile_string("pattern p { attend { j : j / 0 == 1 } }", "bad.attn",
                                     &options, &k),
            ATTNC_ERROR_COMPILE);
  EXPECT_EQ(k, nullptr);
  std::string message = attnc_last_error();
  EXPECT_NE(message.find("bad.attn:1:30: error: divisor must be a positive integer"), std::string::npos)
      << message;
}

TEST(Jit, BadDefineIsAnInvalidArgument) {
  ScratchDir dir;
  const char *defs[] = {"l"};
  attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 0};
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k),
            ATTNC_ERROR_INVALID_ARGUMENT);
}

TEST(Jit, NullSourceAndUnknownBackendAreInvalidArguments) {
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_jit_compile_string(nullptr, "x", nullptr, &k), ATTNC_ERROR_INVALID_ARGUMENT);
  ScratchDir dir;
  attnc_jit_options options{nullptr, 0, nullptr, dir.path().c_str(), 0, "cuda-tensorcores"};
  EXPECT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("unknown backend 'cuda-tensorcores'"), std::string::npos);
  EXPECT_EQ(k, nullptr);
}

TEST(Jit, UnknownPatternNameIsACompileError) {
  ScratchDir dir;
  attnc_jit_options options{nullptr, 0, "nope", dir.path().c_str(), 0, nullptr};
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_ERROR_COMPILE);
  EXPECT_NE(std::string(attnc_last_error()).find("no pattern named 'nope'"), std::string::npos);
}

TEST(Jit, MissingFileIsAnIoError) {
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_jit_compile_file("/nonexistent/p.attn", nullptr, &k), ATTNC_ERROR_IO);
}

} // namespace
} // namespace attnc::test

namespace attnc::test {
namespace {

/// Runs one [1, 1, n, d] slice through `kernel` and compares it with the
/// oracle-built reference of the library pattern `file`.
void expectMatchesOracle(attnc_kernel *kernel, const char *file, const std::vector<std::string> &defines,
                         int64_t n, int64_t d, uint32_t seed) {
  std::vector<float> q = randomFloats(n * d, seed, 1), k = randomFloats(n * d, seed + 1, 1),
                     v = randomFloats(n * d, seed + 2, 1), o(n * d);
  attnc_tensor tq = view(q, 1, 1, n, d), tk = view(k, 1, 1, n, d), tv = view(v, 1, 1, n, d),
               to = view(o, 1, 1, n, d);
  ASSERT_EQ(attnc_run(kernel, &tq, &tk, &tv, &to, nullptr), ATTNC_OK) << attnc_last_error();
  std::vector<float> ref = referenceFromOracle(patternPath(file), defines, q, k, v, 1, 1, n, d);
  for (size_t x = 0; x < o.size(); ++x)
    ASSERT_NEAR(o[x], ref[x], 1e-4) << "element " << x;
}

TEST(Tuning, RecordedShapeIsFoundAndReplaced) {
  ScratchDir dir;
  std::string db = dir.path() + "/tuning.db";
  tuning::Entry e;
  e.key = "fixed-0123";
  e.d = 64;
  e.options.tileRows = 32;
  e.options.tileCols = 64;
  e.gflops = 123.5;
  std::string error;
  ASSERT_TRUE(tuning::record(db, e, error)) << error;
  e.options.tileCols = 128; // same key and d: replaces
  ASSERT_TRUE(tuning::record(db, e, error)) << error;
  auto found = tuning::lookup(db, "fixed-0123");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->options.tileCols, 128);
  EXPECT_DOUBLE_EQ(found->gflops, 123.5);
  EXPECT_FALSE(tuning::lookup(db, "other"));
  std::ifstream in(db);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(std::count(all.begin(), all.end(), '\n'), 1);
}

TEST(Tuning, MalformedLinesAreIgnored) {
  ScratchDir dir;
  std::string db = dir.path() + "/tuning.db";
  std::ofstream(db) << "garbage\nk d=64 tile_rows=99 tile_cols=16 gflops=1\nk d=64 tile_rows=16 tile_cols=16 gflops=2\n";
  auto found = tuning::lookup(db, "k");
  ASSERT_TRUE(found);
  EXPECT_EQ(found->options.tileRows, 16); // the out-of-range line was skipped
}

TEST(Tuning, JitUsesTheTunedTileShape) {
  ScratchDir dir;
  Frontend fe;
  ASSERT_TRUE(fe.parseFile(patternPath("fixed")) && fe.analyze({}));
  tuning::Entry e;
  e.key = tuning::tuningKey(fe.sourceText(), fe.patterns().front(),
                            codegen::hostTarget() + codegen::hostFeatureString());
  e.d = 64;
  e.options.tileRows = 32;
  e.options.tileCols = 48;
  std::string error;
  ASSERT_TRUE(tuning::record(dir.path() + "/tuning.db", e, error)) << error;
  attnc_jit_options options{nullptr, 0, nullptr, dir.path().c_str(), 0, nullptr};
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK);
  // The default tiles stay the kernel's; d = 64 runs on its tuned shape.
  EXPECT_STREQ(attnc_kernel_metadata(k, "tile_cols"), "64");
  EXPECT_STREQ(attnc_kernel_metadata(k, "tuned_tiles"), "64:32x48");
  attnc_kernel_free(k);
  // A second head dimension tuned: both shapes recorded, a new kernel (the
  // cache key changed), each d and an untuned one computing the right thing.
  e.d = 8;
  e.options = {16, 24};
  ASSERT_TRUE(tuning::record(dir.path() + "/tuning.db", e, error)) << error;
  ASSERT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK);
  EXPECT_STREQ(attnc_kernel_metadata(k, "tuned_tiles"), "8:16x24,64:32x48");
  expectMatchesOracle(k, "fixed", {}, 300, 8, 1);
  expectMatchesOracle(k, "fixed", {}, 300, 64, 2);
  expectMatchesOracle(k, "fixed", {}, 301, 16, 3);
  attnc_kernel_free(k);
}

TEST(Tuning, EveryHeadDimensionKeepsItsLastWinner) {
  ScratchDir dir;
  std::string db = dir.path() + "/tuning.db", error;
  tuning::Entry e;
  e.key = "local-5";
  for (auto [d, rows] : {std::pair{128, 64}, {64, 32}, {128, 16}}) {
    e.d = d;
    e.options = {rows, 64};
    ASSERT_TRUE(tuning::record(db, e, error)) << error;
  }
  std::vector<tuning::Entry> all = tuning::lookupAll(db, "local-5");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].d, 64);
  EXPECT_EQ(all[0].options.tileRows, 32);
  EXPECT_EQ(all[1].d, 128);
  EXPECT_EQ(all[1].options.tileRows, 16);
  EXPECT_TRUE(tuning::lookupAll(db, "local-5", "halide").empty());
  tuning::TunedTiles tiles;
  ASSERT_TRUE(tuning::parseTunedTiles("64:32x128,128:64x64", tiles));
  EXPECT_EQ(tuning::formatTunedTiles(tiles), "64:32x128,128:64x64");
  EXPECT_TRUE(tuning::parseTunedTiles("", tiles) && tiles.empty());
}

TEST(Tuning, EachBackendKeepsItsOwnWinner) {
  ScratchDir dir;
  std::string db = dir.path() + "/tuning.db", error;
  tuning::Entry fused;
  fused.key = "strided-77";
  fused.d = 64;
  fused.options = {16, 24};
  fused.gflops = 180;
  tuning::Entry halide = fused;
  halide.backend = "halide";
  halide.schedule = "r32-k16-s2x8-o4";
  halide.options = {32, 16};
  ASSERT_TRUE(tuning::record(db, fused, error)) << error;
  ASSERT_TRUE(tuning::record(db, halide, error)) << error;
  auto f = tuning::lookup(db, "strided-77"), h = tuning::lookup(db, "strided-77", "halide");
  ASSERT_TRUE(f && h);
  EXPECT_EQ(f->options.tileRows, 16);
  EXPECT_EQ(f->backend, "fused");
  EXPECT_EQ(h->schedule, "r32-k16-s2x8-o4");
  EXPECT_EQ(h->options.tileRows, 32);
  // A halide line without a schedule is malformed.
  std::ofstream(db, std::ios::app) << "strided-77 d=64 tile_rows=64 tile_cols=24 gflops=1 backend=halide\n";
  EXPECT_EQ(tuning::lookup(db, "strided-77", "halide")->schedule, "r32-k16-s2x8-o4");
}

#if ATTNC_HAVE_HALIDE
TEST(Tuning, JitUsesTheTunedHalideSchedule) {
  ScratchDir dir;
  Frontend fe;
  ASSERT_TRUE(fe.parseFile(patternPath("strided")) && fe.analyze(SemaOptions{{Define{"l", 8}}}));
  tuning::Entry e;
  e.key = tuning::tuningKey(fe.sourceText(), fe.patterns().front(),
                            codegen::hostTarget() + codegen::hostFeatureString());
  e.d = 16;
  e.options = {32, 16};
  e.backend = "halide";
  e.schedule = "r32-k16-s2x8-o4";
  std::string error;
  ASSERT_TRUE(tuning::record(dir.path() + "/tuning.db", e, error)) << error;
  const char *defines[] = {"l=8"};
  attnc_jit_options options{defines, 1, nullptr, dir.path().c_str(), 0, "halide"};
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_jit_compile_file(patternPath("strided").c_str(), &options, &k), ATTNC_OK)
      << attnc_last_error();
  EXPECT_STREQ(attnc_kernel_metadata(k, "halide_schedule"), "r32-k16-s2x8-o4");
  EXPECT_STREQ(attnc_kernel_metadata(k, "tile_rows"), "32");
  expectMatchesOracle(k, "strided", {"l=8"}, 301, 16, 4);
  attnc_kernel_free(k);
}
#endif

} // namespace
} // namespace attnc::test
