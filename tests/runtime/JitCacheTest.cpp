//===- JitCacheTest.cpp - The JIT's on-disk cache -------------------------===//
#include "TestSupport.h"
#include "Worker.h"

#include "attnc/attnc_jit.h"
#include "attnc/codegen/CodeGen.h"
#include "attnc/format/KernelFile.h"
#include "attnc/frontend/Driver.h"
#include "attnc/support/Hash.h"
#include "attnc/tuning/Tuning.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/stat.h>
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
  attnc_jit_options options{defs, 1, nullptr, cache.c_str(), 0, nullptr};
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
  for (const std::string &cache : {file, file + "/below"}) {
    ASSERT_EQ(compileFixed(cache), ATTNC_OK) << cache << ": " << attnc_last_error();
    const std::string warning = attnc_jit_last_warning();
    EXPECT_NE(warning.find("Not a directory; the kernel was compiled in memory only"), std::string::npos)
        << warning;
  }
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

std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// Compiles patterns/fixed.attn with `define` into `cache` and returns the
/// hash of Worker.h's fixed call ("" on failure).
std::string compileAndRun(const std::string &cache, const char *define = "l=16") {
  const char *defs[] = {define};
  attnc_jit_options options{defs, 1, nullptr, cache.c_str(), 0, nullptr};
  attnc_kernel *k = nullptr;
  if (attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k) != ATTNC_OK)
    return "";
  std::string hash = fixedRunHash(k, 1);
  attnc_kernel_free(k);
  return hash;
}

/// A cache holding one good entry of fixed (l=16): its path, bytes and
/// what it computes. Each test damages the entry, compiles again and
/// expects one rebuild with a warning that names `reason`, the entry
/// restored byte for byte and the same results.
class JitCacheEntry : public ::testing::Test {
protected:
  void SetUp() override {
    hash = compileAndRun(dir.path());
    ASSERT_FALSE(hash.empty()) << attnc_last_error();
    std::vector<std::string> files = cacheFiles(dir.path());
    ASSERT_EQ(files.size(), 1u);
    path = files[0];
    good = readBytes(path);
  }

  void expectRebuiltOver(const std::string &damaged, const std::string &reason) {
    writeBytes(path, damaged);
    const size_t files = cacheFiles(dir.path()).size();
    Stats before = stats();
    EXPECT_EQ(compileAndRun(dir.path()), hash) << attnc_last_error();
    Stats after = stats();
    EXPECT_EQ(after.rebuilt - before.rebuilt, 1);
    EXPECT_EQ(after.misses - before.misses, 1);
    const std::string warning = attnc_jit_last_warning();
    EXPECT_NE(warning.find("jit cache: evicted '" + path + "' and rebuilt it: "), std::string::npos) << warning;
    EXPECT_NE(warning.find(reason), std::string::npos) << warning;
    EXPECT_EQ(readBytes(path), good) << "the rebuilt entry is the one first published";
    EXPECT_EQ(cacheFiles(dir.path()).size(), files) << "no temporary file left";
    // Good again: the next compile is a hit, without a warning.
    EXPECT_EQ(compileAndRun(dir.path()), hash);
    EXPECT_EQ(stats().hits - after.hits, 1);
    EXPECT_STREQ(attnc_jit_last_warning(), "");
  }

  ScratchDir dir;
  std::string path, good, hash;
};

TEST_F(JitCacheEntry, TruncatedEntriesAreEvictedAndRebuilt) {
  for (size_t keep : {size_t{0}, size_t{7}, size_t{27}, good.size() / 2, good.size() - 8, good.size() - 1}) {
    SCOPED_TRACE("kept " + std::to_string(keep) + " of " + std::to_string(good.size()) + " bytes");
    expectRebuiltOver(good.substr(0, keep), keep < 8 ? "bad magic" : keep < 28 ? "truncated" : "checksum mismatch");
  }
}

TEST_F(JitCacheEntry, CorruptedEntriesAreEvictedAndRebuilt) {
  for (size_t at : {size_t{3}, size_t{9}, good.size() / 2, good.size() - 1}) {
    SCOPED_TRACE("byte " + std::to_string(at) + " flipped");
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    expectRebuiltOver(bad, at < 8 ? "bad magic" : "checksum mismatch");
  }
}

TEST_F(JitCacheEntry, AnotherKeysEntryIsEvictedAndRebuilt) {
  // A valid kernel file under the wrong name (copied, renamed, or a hash
  // collision of file names): another pattern's kernel must not be run.
  ASSERT_FALSE(compileAndRun(dir.path(), "l=32").empty());
  std::string other;
  for (const std::string &f : cacheFiles(dir.path()))
    if (f != path)
      other = readBytes(f);
  ASSERT_FALSE(other.empty());
  expectRebuiltOver(other, "it holds the kernel of key ");
}

TEST_F(JitCacheEntry, AKernelFileTheJitDidNotPublishIsEvictedAndRebuilt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(good, file, error)) << error;
  ASSERT_EQ(file.metadata.erase("jit_cache_key"), 1u);
  expectRebuiltOver(format::encodeKernelFile(file), "a kernel file the jit did not publish");
}

TEST_F(JitCacheEntry, EntriesOfAnotherAbiOrFormatAreEvictedAndRebuilt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(good, file, error)) << error;
  file.abiVersion = ATTNC_ABI_VERSION + 1;
  expectRebuiltOver(format::encodeKernelFile(file), "ABI version");
  // A newer format (the version field, with the checksum made to match).
  std::string future = good;
  future[8] = static_cast<char>(format::kKernelFormatVersion + 1);
  const uint64_t sum = support::fnv1a(future.data(), future.size() - 8);
  for (int k = 0; k < 8; ++k)
    future[future.size() - 8 + k] = static_cast<char>((sum >> (8 * k)) & 0xff);
  expectRebuiltOver(future, "is not supported");
}

TEST_F(JitCacheEntry, AnEntryThatIsADirectoryIsCompiledInMemory) {
  // Neither readable nor replaceable: a warning, the kernel from memory.
  ASSERT_TRUE(std::filesystem::remove(path));
  ASSERT_TRUE(std::filesystem::create_directory(path));
  Stats before = stats();
  EXPECT_EQ(compileAndRun(dir.path()), hash) << attnc_last_error();
  EXPECT_EQ(stats().misses - before.misses, 1);
  const std::string warning = attnc_jit_last_warning();
  EXPECT_NE(warning.find("compiled in memory only"), std::string::npos) << warning;
}

TEST(JitCache, AMissingCacheDirectoryIsCreated) {
  ScratchDir dir;
  const std::string cache = dir.path() + "/a/b/c";
  ASSERT_FALSE(compileAndRun(cache).empty()) << attnc_last_error();
  EXPECT_STREQ(attnc_jit_last_warning(), "");
  EXPECT_EQ(cacheFiles(cache).size(), 1u);
  Stats before = stats();
  ASSERT_FALSE(compileAndRun(cache).empty());
  EXPECT_EQ(stats().hits - before.hits, 1);
}

/// The workers' lines starting with `word`, the word removed.
std::vector<std::string> linesOf(const std::string &output, const std::string &word) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.compare(0, word.size() + 1, word + " ") == 0)
      out.push_back(line.substr(word.size() + 1));
  return out;
}

/// What a worker's "compile" mode printed: its round hashes and counters.
struct WorkerReport {
  int exitCode = -1;
  std::vector<std::string> hashes;
  int64_t hits = -1, misses = -1, rebuilt = -1, torn = -1;
  std::vector<std::string> warnings;
  std::string output;
};

WorkerReport report(Worker &worker) {
  WorkerReport r;
  r.exitCode = worker.wait();
  r.output = worker.output();
  for (const std::string &line : linesOf(r.output, "round"))
    r.hashes.push_back(line.substr(line.find(' ') + 1));
  std::vector<std::string> stats = linesOf(r.output, "stats");
  if (stats.size() == 1)
    std::istringstream(stats[0]) >> r.hits >> r.misses >> r.rebuilt >> r.torn;
  r.warnings = linesOf(r.output, "warning");
  return r;
}

TEST(JitCache, ACacheDirectoryFromTheEnvironmentThatIsAFileCompilesInMemory) {
  // $ATTNC_CACHE_DIR also holds the halide backend's compiled schedules: a
  // fresh process, so that nothing is found in memory either.
  ScratchDir dir;
  const std::string file = dir.file("not-a-directory");
  writeBytes(file, "x");
  for (const char *backend : builtBackends({"fused", "halide", "sparsifier"})) {
    Worker worker({"compile", "-", backend, "2", "0", "0"}, {"ATTNC_CACHE_DIR=" + file},
                  dir.file(std::string(backend) + ".out"));
    WorkerReport r = report(worker);
    EXPECT_EQ(r.exitCode, 0) << backend << ":\n" << r.output;
    EXPECT_EQ(r.misses, 2) << backend;
    EXPECT_EQ(r.hashes.size(), 2u) << backend;
    ASSERT_EQ(r.warnings.size(), 2u) << backend << ":\n" << r.output;
    EXPECT_NE(r.warnings[0].find("Not a directory; the kernel was compiled in memory only"), std::string::npos)
        << r.warnings[0];
  }
  EXPECT_EQ(readBytes(file), "x");
}

TEST(JitCache, AReadOnlyCacheDirectoryServesItsEntriesAndCompilesTheRestInMemory) {
  // A worker without write permission (as root, which may write anywhere,
  // it runs as nobody): the entry published beforehand is a hit, another
  // kernel is compiled in memory and nothing is written.
  ScratchDir dir;
  const std::string cache = dir.file("cache");
  ASSERT_FALSE(compileAndRun(cache).empty()) << attnc_last_error();
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  ASSERT_EQ(chmod(cache.c_str(), 0555), 0);
  const std::vector<std::string> before = cacheFiles(cache);
  const int user = geteuid() == 0 ? 65534 : -1;
  Worker hit({"compile", cache, "fused", "1", "0", "0"}, {}, dir.file("hit.out"), user);
  WorkerReport r = report(hit);
  if (r.exitCode == 77)
    GTEST_SKIP() << "cannot drop root's privileges here";
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(r.hits, 1) << r.output;
  EXPECT_TRUE(r.warnings.empty()) << r.output;
  // Without the entry: misses that cannot be published.
  ASSERT_EQ(chmod(cache.c_str(), 0755), 0);
  std::filesystem::remove(before[0]);
  ASSERT_EQ(chmod(cache.c_str(), 0555), 0);
  Worker miss({"compile", cache, "fused", "2", "0", "0"}, {}, dir.file("miss.out"), user);
  r = report(miss);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(r.misses, 2) << r.output;
  ASSERT_EQ(r.warnings.size(), 2u) << r.output;
  EXPECT_NE(r.warnings[0].find("the kernel was compiled in memory only"), std::string::npos) << r.warnings[0];
  EXPECT_TRUE(cacheFiles(cache).empty());
  chmod(cache.c_str(), 0755);
}

/// Runs `processes` workers at once on one empty cache directory (and
/// $ATTNC_CACHE_DIR, which holds the halide backend's schedules) for
/// `rounds` rounds each, every third round removing the entries so that
/// publishing and reading overlap all along. Every round of every worker
/// must succeed with the output of a compilation without the cache, no
/// entry may be rebuilt or seen torn. With `prime`, one worker runs alone
/// first (and is not timed). Returns the wall time in seconds.
double expectProcessesShareOneCache(const char *backend, int processes, int rounds, bool prime = false) {
  ScratchDir dir;
  const std::string cache = dir.file("cache");
  std::string expected;
  {
    const char *defs[] = {"l=16"};
    attnc_jit_options options{defs, 1, nullptr, nullptr, 1, backend};
    attnc_kernel *k = nullptr;
    EXPECT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK) << attnc_last_error();
    expected = fixedRunHash(k, 1);
    attnc_kernel_free(k);
  }
  EXPECT_FALSE(expected.empty());
  if (prime) {
    Worker first({"compile", cache, backend, "1", "0", "0"}, {"ATTNC_CACHE_DIR=" + cache}, dir.file("prime.out"));
    EXPECT_EQ(first.wait(), 0) << first.output();
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<Worker> workers;
  for (int w = 0; w < processes; ++w)
    workers.emplace_back(std::vector<std::string>{"compile", cache, backend, std::to_string(rounds), "3",
                                                  std::to_string(w)},
                         std::vector<std::string>{"ATTNC_CACHE_DIR=" + cache},
                         dir.file("worker" + std::to_string(w) + ".out"));
  int64_t hits = 0, misses = 0;
  for (int w = 0; w < processes; ++w) {
    EXPECT_TRUE(workers[w].started());
    WorkerReport r = report(workers[w]);
    EXPECT_EQ(r.exitCode, 0) << "worker " << w << ":\n" << r.output;
    EXPECT_EQ(r.hashes, std::vector<std::string>(rounds, expected)) << "worker " << w << ":\n" << r.output;
    EXPECT_EQ(r.rebuilt, 0) << "worker " << w;
    EXPECT_EQ(r.torn, 0) << "worker " << w;
    EXPECT_TRUE(r.warnings.empty()) << "worker " << w << ":\n" << r.output;
    hits += r.hits;
    misses += r.misses;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(hits + misses, int64_t{processes} * rounds);
  // One published entry (and, for halide, its schedule's code), nothing
  // half-written left behind.
  std::vector<std::string> files = cacheFiles(cache);
  EXPECT_LE(files.size(), 3u);
  for (const std::string &f : files)
    EXPECT_EQ(f.find(".tmp."), std::string::npos) << f;
  std::printf("[ figures  ] %s: %d processes x %d rounds: %lld hits, %lld misses, 0 torn, %.1f s\n", backend,
              processes, rounds, static_cast<long long>(hits), static_cast<long long>(misses), seconds);
  return seconds;
}

TEST(JitCache, EightProcessesCompilingOnePatternAgreeAndNeverSeeATornEntry) {
  expectProcessesShareOneCache("fused", 8, 20);
}

#if ATTNC_HAVE_HALIDE
TEST(JitCache, EightProcessesCompilingOneHalideKernelAgree) {
  // The schedule's code compiled once beforehand: eight processes each
  // compiling it at once take 40 s on two cores. What is shared is then the
  // kernel entries, 300 times larger than the fused backend's.
  expectProcessesShareOneCache("halide", 8, 4, /*prime=*/true);
}
#endif

TEST(JitCache, NoCacheLeavesTheDirectoryEmpty) {
  ScratchDir dir;
  const char *defs[] = {"l=16"};
  attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 1, nullptr};
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &k), ATTNC_OK);
  attnc_kernel_free(k);
  EXPECT_TRUE(cacheFiles(dir.path()).empty());
}

TEST(Jit, PatternErrorsComeBackAsDiagnostics) {
  ScratchDir dir;
  attnc_jit_options options{nullptr, 0, nullptr, dir.path().c_str(), 0, nullptr};
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
  attnc_jit_options options{defs, 1, nullptr, dir.path().c_str(), 0, nullptr};
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
