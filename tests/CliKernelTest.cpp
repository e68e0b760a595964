//===- CliKernelTest.cpp - compile, run, bench and tune from the CLI ------===//
//
// The subcommands that build and execute kernels, end to end: corrupt and
// mismatched inputs are user errors (exit 1), a kernel file's parameters are
// fixed (-D is a usage error), run --grad writes checked gradients, run
// --random draws the arrays docs/cli.md describes from its seed, bench
// reports every backend (with --backward their training step, with --peak
// the machine's FMA peak), and a shape recorded by tune is what compile then
// uses.
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"
#include "Npy.h"

#include "attnc/attnc.h"
#include "attnc/frontend/Driver.h"
#include "attnc/tuning/Tuning.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>

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

/// A float32 .npy file of Normal(0, 1) values; its path.
std::string randomNpy(const ScratchDir &dir, const std::string &name, const std::vector<int64_t> &shape,
                      uint32_t seed) {
  tool::NpyArray a{shape, {}};
  size_t count = 1;
  for (int64_t s : shape)
    count *= static_cast<size_t>(s);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (size_t x = 0; x < count; ++x)
    a.data.push_back(normal(rng));
  std::string error;
  EXPECT_TRUE(tool::writeNpy(dir.file(name), a, error)) << error;
  return dir.file(name);
}

tool::NpyArray readArray(const std::string &path) {
  tool::NpyArray a;
  std::string error;
  EXPECT_TRUE(tool::readNpy(path, a, error)) << error;
  return a;
}

/// Q, K, V and dO of one shape in `dir`, and the `run` arguments that feed them.
std::string gradInputs(const ScratchDir &dir, const std::vector<int64_t> &shape) {
  return " --q " + randomNpy(dir, "q.npy", shape, 1) + " --k " + randomNpy(dir, "k.npy", shape, 2) + " --v " +
         randomNpy(dir, "v.npy", shape, 3) + " --grad " + randomNpy(dir, "do.npy", shape, 4);
}

TEST(CliRunGrad, WritesCheckedGradientsOfOsShapeBesideTheOutput) {
  ScratchDir dir;
  const std::vector<int64_t> shape{1, 2, 70, 8};
  std::filesystem::create_directory(dir.file("out"));
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=16 -D c=4" + gradInputs(dir, shape) + " -o " +
                              dir.file("out/o.npy") + " --check",
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  for (const char *g : {"dQ", "dK", "dV"}) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(std::string("max abs error of ") + g +
                                                         R"( vs double-precision reference: (\S+) \(tolerance)")))
        << r.out;
    EXPECT_LE(std::stod(m[1]), 1e-4) << g;
  }
  tool::NpyArray dO = readArray(dir.file("do.npy"));
  tool::NpyArray dq = readArray(dir.file("out/o.dq.npy")), dk = readArray(dir.file("out/o.dk.npy")),
                 dv = readArray(dir.file("out/o.dv.npy"));
  for (const tool::NpyArray *g : {&dq, &dk, &dv})
    ASSERT_EQ(g->shape, shape);
  // Each file holds its own gradient. Every row of fixed has keys, so its
  // softmax weights sum to 1: the dV rows sum to the dO rows' sum, and the
  // dK rows to 0 (each row of dS sums to 0).
  const int64_t n = shape[2], d = shape[3];
  for (int64_t h = 0; h < shape[1]; ++h)
    for (int64_t c = 0; c < d; ++c) {
      double sumDo = 0, sumDv = 0, sumDk = 0;
      for (int64_t i = 0; i < n; ++i) {
        size_t x = static_cast<size_t>((h * n + i) * d + c);
        sumDo += dO.data[x];
        sumDv += dv.data[x];
        sumDk += dk.data[x];
      }
      EXPECT_NEAR(sumDv, sumDo, 1e-3) << "head " << h << ", column " << c;
      EXPECT_NEAR(sumDk, 0.0, 1e-3) << "head " << h << ", column " << c;
    }
  double dqNorm = 0;
  for (float x : dq.data)
    dqNorm += std::fabs(x);
  EXPECT_GT(dqNorm, 0.0) << "dQ is all zeros";
}

TEST(CliRunGrad, DefaultNamesFollowTheOutputElseTheCurrentDirectory) {
  ScratchDir dir;
  const std::string inputs = gradInputs(dir, {40, 8});
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  std::filesystem::create_directory(dir.file("here"));
  CommandResult plain = runCommand("cd " + dir.file("here") + " && env " + cache + " " + ATTNC_BINARY + " run " +
                                   libraryPattern("fixed") + " -D l=8 -D c=2" + inputs);
  ASSERT_EQ(plain.exitCode, 0) << plain.err;
  std::set<std::string> written;
  for (const auto &entry : std::filesystem::directory_iterator(dir.file("here")))
    written.insert(entry.path().filename().string());
  EXPECT_EQ(written, (std::set<std::string>{"dk.npy", "dq.npy", "dv.npy"}));
  EXPECT_NE(plain.out.find("wrote dQ to dq.npy, dK to dk.npy, dV to dv.npy"), std::string::npos) << plain.out;
  // An -o without .npy gets the suffixes appended; --dq names dQ alone.
  CommandResult named = attnc("run " + libraryPattern("fixed") + " -D l=8 -D c=2" + inputs + " -o " +
                                  dir.file("attn") + " --dq " + dir.file("grad-q.npy"),
                              cache);
  ASSERT_EQ(named.exitCode, 0) << named.err;
  for (const char *file : {"attn", "grad-q.npy", "attn.dk.npy", "attn.dv.npy"})
    EXPECT_TRUE(std::filesystem::exists(dir.file(file))) << file;
  EXPECT_FALSE(std::filesystem::exists(dir.file("attn.dq.npy")));
}

TEST(CliRunGrad, GradientPathsNeedGrad) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(6, 4)", 24);
  CommandResult r = attnc("run " + libraryPattern("fixed") + " --q " + q + " --k " + q + " --v " + q + " --dk " +
                          dir.file("dk.npy"));
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("--dk requires --grad"), std::string::npos) << r.err;
}

TEST(CliRunGrad, TwoOutputsInOneFileAreAUsageError) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(6, 4)", 24);
  CommandResult r = attnc("run " + libraryPattern("fixed") + " --q " + q + " --k " + q + " --v " + q + " --grad " + q +
                          " -o " + dir.file("o.npy") + " --dv " + dir.file(".") + "/o.npy");
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("O and dV would both be written to '" + dir.file("o.npy") + "'"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.npy")));
}

TEST(CliRunGrad, GradientOfAnotherShapeIsAUserError) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(1, 2, 6, 4)", 48), dO = zerosNpy(dir, "do.npy", "(1, 2, 6, 5)", 60);
  CommandResult r = attnc("run " + libraryPattern("fixed") + " --q " + q + " --k " + q + " --v " + q + " --grad " +
                              dO + " -o " + dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("attnc: error: --grad " + dO + " has shape [1, 2, 6, 5] but O has [1, 2, 6, 4]"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.dq.npy")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.npy")));
}

#if ATTNC_HAVE_MLIR
TEST(CliRunGrad, BackendWithoutABackwardFailsWithTheRuntimesMessage) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=8 -D c=2 --backend sparsifier" +
                              gradInputs(dir, {40, 8}) + " -o " + dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 1) << r.out;
  EXPECT_NE(r.err.find("attnc: error: the sparsifier backend"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.dq.npy")));
}
#endif

// ---- run --random ------------------------------------------------------------

/// The arrays docs/cli.md says `--random` and `--grad random` draw: stream
/// `stream` (Q 0, K 1, V 2, dO 3) is splitmix64 from state 4 * seed + stream,
/// each element k / 2^23 - 1 for the top 24 bits k of one output.
tool::NpyArray documentedRandom(const std::vector<int64_t> &shape, uint64_t seed, uint64_t stream) {
  size_t count = 1;
  for (int64_t s : shape)
    count *= static_cast<size_t>(s);
  tool::NpyArray a{shape, {}};
  uint64_t state = seed * 4 + stream;
  for (size_t x = 0; x < count; ++x) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    a.data.push_back(float(double(z >> 40) / double(1 << 23) - 1.0));
  }
  return a;
}

std::string writeArray(const ScratchDir &dir, const std::string &name, const tool::NpyArray &a) {
  std::string error;
  EXPECT_TRUE(tool::writeNpy(dir.file(name), a, error)) << error;
  return dir.file(name);
}

TEST(CliRunRandom, CheckedRunOnRandomInputsWritesOOfThatShape) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=16 -D c=4 --random 2,3,70,16 --check -o " +
                              dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("ran pattern 'fixed' on random [2, 3, 70, 16] (seed 0)"), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(max abs error vs double-precision reference: (\S+)\n)")))
      << r.out;
  EXPECT_LE(std::stod(m[1]), 1e-5);
  EXPECT_EQ(readArray(dir.file("o.npy")).shape, (std::vector<int64_t>{2, 3, 70, 16}));
}

TEST(CliRunRandom, InputsAreTheDocumentedUniformStreams) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  const std::vector<int64_t> shape{1, 2, 50, 8};
  tool::NpyArray q = documentedRandom(shape, 9, 0), k = documentedRandom(shape, 9, 1),
                 v = documentedRandom(shape, 9, 2), dO = documentedRandom(shape, 9, 3);
  double sum = 0;
  for (const tool::NpyArray *a : {&q, &k, &v, &dO})
    for (float x : a->data) {
      ASSERT_GE(x, -1.0f);
      ASSERT_LT(x, 1.0f);
      sum += x;
    }
  EXPECT_NEAR(sum / (4.0 * 800), 0.0, 0.05) << "not centred on 0";
  const std::string pattern = "run " + libraryPattern("strided") + " -D l=8";
  CommandResult drawn = attnc(pattern + " --random 1,2,50,8 --seed 9 --grad random -o " + dir.file("r.npy"), cache);
  ASSERT_EQ(drawn.exitCode, 0) << drawn.err;
  CommandResult read = attnc(pattern + " --q " + writeArray(dir, "q.npy", q) + " --k " + writeArray(dir, "k.npy", k) +
                                 " --v " + writeArray(dir, "v.npy", v) + " --grad " + writeArray(dir, "do.npy", dO) +
                                 " -o " + dir.file("f.npy"),
                             cache);
  ASSERT_EQ(read.exitCode, 0) << read.err;
  for (const char *suffix : {"npy", "dq.npy", "dk.npy", "dv.npy"})
    EXPECT_EQ(readFile(dir.file(std::string("r.") + suffix)), readFile(dir.file(std::string("f.") + suffix)))
        << suffix << ": --random did not draw the documented arrays";
}

TEST(CliRunRandom, SameSeedGivesTheSameOutputAndAnotherSeedAnother) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  auto run = [&](const std::string &seedFlag, const std::string &out) {
    CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=8 -D c=2 --random 1,2,40,8" + seedFlag +
                                " --grad random -o " + dir.file(out),
                            cache);
    EXPECT_EQ(r.exitCode, 0) << r.err;
  };
  run(" --seed 5", "a.npy");
  run(" --seed 5", "b.npy");
  run(" --seed 6", "c.npy");
  run("", "zero.npy");
  run(" --seed 0", "z.npy");
  for (const char *suffix : {"npy", "dq.npy", "dk.npy", "dv.npy"}) {
    const std::string s = suffix;
    EXPECT_EQ(readFile(dir.file("a." + s)), readFile(dir.file("b." + s))) << s;
    EXPECT_NE(readFile(dir.file("a." + s)), readFile(dir.file("c." + s))) << s;
    EXPECT_EQ(readFile(dir.file("zero." + s)), readFile(dir.file("z." + s))) << s << ": the default seed is 0";
  }
}

TEST(CliRunRandom, MalformedShapeIsAUsageErrorThatSaysWhy) {
  struct Bad {
    const char *spec, *message;
  } cases[] = {
      {"1,2,3", "--random: expected four numbers B,H,n,d (batch, heads, length, head dimension), e.g. "
                "1,8,1024,64; got 3 in '1,2,3'"},
      {"1,2,3,4,5", "got 5 in '1,2,3,4,5'"},
      {"0,1,8,8", "--random: the batch B must be at least 1, got 0 in '0,1,8,8'"},
      {"1,1,8,-2", "--random: the head dimension d must be at least 1, got -2 in '1,1,8,-2'"},
      {"1,x,8,8", "--random: the heads H must be a positive integer, got 'x' in '1,x,8,8'"},
      {"1,1,1e3,8", "--random: the length n must be a positive integer, got '1e3' in '1,1,1e3,8'"},
  };
  for (const Bad &b : cases) {
    CommandResult r = attnc("run " + libraryPattern("fixed") + " --random " + b.spec);
    EXPECT_EQ(r.exitCode, 2) << b.spec;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.spec << "\n" << r.err;
  }
}

TEST(CliRunRandom, InputFilesAndRandomInputsExcludeEachOther) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(6, 4)", 24);
  CommandResult r = attnc("run " + libraryPattern("fixed") + " --random 1,1,6,4 --q " + q);
  EXPECT_EQ(r.exitCode, 2) << r.out;
  EXPECT_NE(r.err.find("--q excludes --random"), std::string::npos) << r.err;
}

TEST(CliRunRandom, InputsMissingOrSeedWithoutRandomAreUsageErrors) {
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(6, 4)", 24);
  const std::string run = "run " + libraryPattern("fixed");
  CommandResult none = attnc(run);
  EXPECT_EQ(none.exitCode, 2);
  EXPECT_NE(none.err.find("attnc: error: no inputs: give --q Q.npy --k K.npy --v V.npy, or --random B,H,n,d"),
            std::string::npos)
      << none.err;
  CommandResult partial = attnc(run + " --q " + q + " --v " + q);
  EXPECT_EQ(partial.exitCode, 2);
  EXPECT_NE(partial.err.find("--q, --k and --v come together; missing --k"), std::string::npos) << partial.err;
  CommandResult seed = attnc(run + " --q " + q + " --k " + q + " --v " + q + " --seed 3");
  EXPECT_EQ(seed.exitCode, 2);
  EXPECT_NE(seed.err.find("--seed seeds --random and --grad random"), std::string::npos) << seed.err;
}

TEST(CliRunRandom, SeedMustBeAnUnsigned64BitInteger) {
  for (const char *seed : {"-1", "abc", "18446744073709551616"}) {
    CommandResult r = attnc("run " + libraryPattern("fixed") + " --random 1,1,8,8 --seed " + seed);
    EXPECT_EQ(r.exitCode, 2) << seed;
    EXPECT_NE(r.err.find(std::string("--seed: expected an integer in [0, 2^64), got '") + seed + "'"),
              std::string::npos)
        << r.err;
  }
}

TEST(CliRunRandom, GradRandomWithInputFilesDrawsDOOfTheirShape) {
  ScratchDir dir;
  const std::vector<int64_t> shape{1, 2, 40, 8};
  std::string q = randomNpy(dir, "q.npy", shape, 1), k = randomNpy(dir, "k.npy", shape, 2),
              v = randomNpy(dir, "v.npy", shape, 3);
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=8 -D c=2 --q " + q + " --k " + k + " --v " + v +
                              " --grad random --seed 2 --check -o " + dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("ran pattern 'fixed' on [1, 2, 40, 8] in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("backward on a random dO (seed 2) in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max abs error of dV"), std::string::npos) << r.out;
  EXPECT_EQ(readArray(dir.file("o.dq.npy")).shape, shape);
}

// ---- run: grouped-query heads, fewer queries than keys, varlen -------------------

/// The largest error `run --check` printed for `array` ("" for O, else "dQ",
/// "dK", "dV"); fails the test when the line is missing.
double checkedError(const std::string &out, const std::string &array = "") {
  std::smatch m;
  const std::string what = array.empty() ? "" : "of " + array + " ";
  if (!std::regex_search(out, m, std::regex("max abs error " + what + R"(vs double-precision reference: (\S+))"))) {
    ADD_FAILURE() << "no error line for '" << array << "' in\n" << out;
    return INFINITY;
  }
  return std::stod(m[1]);
}

TEST(CliRunShapes, GroupedQueryHeadsMatchTheReference) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=16 -D c=4 --random 2,4,70,16 --kv-heads 2 "
                              "--grad random --check -o " + dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("ran pattern 'fixed' on random Q [2, 4, 70, 16], K and V [2, 2, 70, 16] (seed 0)"),
            std::string::npos)
      << r.out;
  EXPECT_LE(checkedError(r.out), 1e-5);
  for (const char *g : {"dQ", "dK", "dV"})
    EXPECT_LE(checkedError(r.out, g), 1e-4) << g;
  EXPECT_EQ(readArray(dir.file("o.dk.npy")).shape, (std::vector<int64_t>{2, 2, 70, 16}));
}

TEST(CliRunShapes, DecodeStepIsTheLastKeyPosition) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=16 -D c=4 --random 1,4,1,16 --keys 300 "
                              "--grad random --check -o " + dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("on random Q [1, 4, 1, 16], K and V [1, 4, 300, 16] (seed 0)"), std::string::npos) << r.out;
  EXPECT_LE(checkedError(r.out), 1e-5);
  for (const char *g : {"dQ", "dK", "dV"})
    EXPECT_LE(checkedError(r.out, g), 1e-4) << g;
  EXPECT_EQ(readArray(dir.file("o.npy")).shape, (std::vector<int64_t>{1, 4, 1, 16}));
  EXPECT_EQ(readArray(dir.file("o.dv.npy")).shape, (std::vector<int64_t>{1, 4, 300, 16}));
}

TEST(CliRunShapes, VarlenRunChecksForwardAndGradients) {
  ScratchDir dir;
  const std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  // An empty sequence, and one with fewer queries than keys.
  for (const std::string lists : {" --cu-seqlens 0,10,10,110,300", " --cu-seqlens 0,10,10,110,300 "
                                                                     "--cu-seqlens-k 0,40,45,145,400"}) {
    const bool keys = lists.find("-k") != std::string::npos;
    CommandResult r = attnc("run " + libraryPattern("local") + " -D w=7 --random 1,4,300,16 --kv-heads 2" + lists +
                                " --grad random --check -o " + dir.file("o.npy"),
                            env);
    ASSERT_EQ(r.exitCode, 0) << lists << "\n" << r.err;
    EXPECT_NE(r.out.find(std::string("K and V [1, 2, ") + (keys ? "400" : "300") + ", 16] as 4 sequences (seed 0)"),
              std::string::npos)
        << r.out;
    EXPECT_LE(checkedError(r.out), 1e-5) << lists;
    for (const char *g : {"dQ", "dK", "dV"})
      EXPECT_LE(checkedError(r.out, g), 1e-4) << lists << g;
  }
}

TEST(CliRunShapes, FilesWithFewerHeadsAndMoreKeysRunChecked) {
  ScratchDir dir;
  const std::vector<int64_t> qShape{1, 4, 20, 8}, kvShape{1, 2, 50, 8};
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=8 -D c=2 --q " +
                              randomNpy(dir, "q.npy", qShape, 1) + " --k " + randomNpy(dir, "k.npy", kvShape, 2) +
                              " --v " + randomNpy(dir, "v.npy", kvShape, 3) + " --grad " +
                              randomNpy(dir, "do.npy", qShape, 4) + " --check -o " + dir.file("o.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("on Q [1, 4, 20, 8], K and V [1, 2, 50, 8] in"), std::string::npos) << r.out;
  EXPECT_LE(checkedError(r.out), 1e-5);
  for (const char *g : {"dQ", "dK", "dV"})
    EXPECT_LE(checkedError(r.out, g), 1e-4) << g;
  EXPECT_EQ(readArray(dir.file("o.dq.npy")).shape, qShape);
  EXPECT_EQ(readArray(dir.file("o.dk.npy")).shape, kvShape);
}

TEST(CliRunShapes, FlagsThatDisagreeAreUsageErrorsThatSayWhy) {
  struct Bad {
    const char *args, *message;
  } cases[] = {
      {"--random 1,8,10,16 --kv-heads 3", "--kv-heads 3 does not divide the 8 query heads of --random"},
      {"--random 1,8,10,16 --keys 5", "--keys 5 is fewer than the 10 queries of --random"},
      {"--random 1,8,10,16 --cu-seqlens 0,5,12", "--random has n = 10 but --cu-seqlens ends at 12"},
      {"--random 2,8,12,16 --cu-seqlens 0,5,12", "--cu-seqlens packs sequences along n of one batch element, but "
                                                 "--random has batch 2"},
      {"--random 1,8,12,16 --cu-seqlens 1,5,12", "--cu-seqlens: the first offset must be 0, got 1 in '1,5,12'"},
      {"--random 1,8,12,16 --cu-seqlens 0,7,5,12", "--cu-seqlens: offsets must not decrease, but 5 follows 7"},
      {"--random 1,8,12,16 --cu-seqlens 0,5,x", "--cu-seqlens: the offsets must be integers separated by commas, "
                                                "got 'x' in '0,5,x'"},
      {"--random 1,8,12,16 --cu-seqlens 0,5,3000000000", "--cu-seqlens: the offsets must be in [0, 2147483647]"},
      {"--random 1,8,12,16 --cu-seqlens 0,5,12 --cu-seqlens-k 0,12", "--cu-seqlens has 3 offsets but "
                                                                     "--cu-seqlens-k 2"},
      {"--random 1,8,12,16 --cu-seqlens 0,5,12 --cu-seqlens-k 0,4,12", "sequence 0 has 5 queries (--cu-seqlens) "
                                                                       "but 4 keys (--cu-seqlens-k)"},
      {"--random 1,8,12,16 --cu-seqlens 0,5,12 --keys 20", "--keys is 20 but --cu-seqlens-k ends at 12"},
      {"--random 1,8,12,16 --cu-seqlens-k 0,5,12", "--cu-seqlens-k requires --cu-seqlens"},
      {"--random 1,8,12,16 --keys 0", "--keys"},
      {"--random 1,8,12,16 --max-memory 8X", "--max-memory: expected a byte count such as 8G, 512M or 1000000"},
  };
  for (const Bad &b : cases) {
    CommandResult r = attnc("run " + libraryPattern("fixed") + " " + b.args);
    EXPECT_EQ(r.exitCode, 2) << b.args << "\n" << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.args << "\n" << r.err;
  }
  ScratchDir dir;
  std::string q = zerosNpy(dir, "q.npy", "(1, 2, 6, 4)", 48);
  CommandResult kvHeads = attnc("run " + libraryPattern("fixed") + " --q " + q + " --k " + q + " --v " + q +
                                " --kv-heads 1");
  EXPECT_EQ(kvHeads.exitCode, 2);
  EXPECT_NE(kvHeads.err.find("--kv-heads requires --random"), std::string::npos) << kvHeads.err;
}

TEST(CliRunShapes, FilesThatDoNotFitAreUserErrorsThatSayWhy) {
  ScratchDir dir;
  const std::string q = zerosNpy(dir, "q.npy", "(1, 4, 6, 4)", 96);
  struct Bad {
    std::string kv, extra, message;
  } cases[] = {
      {zerosNpy(dir, "h3.npy", "(1, 3, 6, 4)", 72), "", "K and V's 3 heads do not divide Q's 4"},
      {zerosNpy(dir, "short.npy", "(1, 4, 5, 4)", 80), "", "K and V have 5 rows but Q has 6"},
      {zerosNpy(dir, "b2.npy", "(2, 4, 6, 4)", 192), "", "differ in the batch"},
      {zerosNpy(dir, "d5.npy", "(1, 4, 6, 5)", 120), "", "differ in the head dimension d"},
      {zerosNpy(dir, "two.npy", "(6, 4)", 24), "", "must have the same number of dimensions"},
      {q, " --cu-seqlens 0,2,7", "--cu-seqlens ends at 7 but Q has 6 rows"},
      {q, " --cu-seqlens 0,2,6 --cu-seqlens-k 0,3,9", "--cu-seqlens-k (by default --cu-seqlens) ends at 9 but K and "
                                                     "V have 6 rows"},
  };
  for (const Bad &b : cases) {
    CommandResult r = attnc("run " + libraryPattern("fixed") + " --q " + q + " --k " + b.kv + " --v " + b.kv + b.extra,
                            "ATTNC_CACHE_DIR=" + dir.path());
    EXPECT_EQ(r.exitCode, 1) << b.message << "\n" << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << r.err;
  }
  const std::string batch2 = zerosNpy(dir, "q2.npy", "(2, 4, 6, 4)", 192);
  CommandResult varlen = attnc("run " + libraryPattern("fixed") + " --q " + batch2 + " --k " + batch2 + " --v " +
                               batch2 + " --cu-seqlens 0,6");
  EXPECT_EQ(varlen.exitCode, 1);
  EXPECT_NE(varlen.err.find("--cu-seqlens packs sequences along n of one batch element, but Q has batch 2"),
            std::string::npos)
      << varlen.err;
}

// ---- run and bench: the memory estimate -----------------------------------------

TEST(CliMemory, RunPastMaxMemoryIsRefusedNamingBothSizes) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("fixed") + " --random 1,1,1000000000,64 --max-memory 1G",
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 1) << r.out;
  EXPECT_NE(r.err.find("attnc: error: this run would allocate 953.67 GiB (1024000000000 bytes: Q, K, V 715.26 GiB; "
                       "O 238.42 GiB), more than --max-memory 1.00 GiB (1073741824 bytes)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(CliMemory, RunPastTheAvailableMemoryIsRefused) {
  ScratchDir dir;
  // 4 PiB per tensor: more than any machine this runs on.
  CommandResult r = attnc("run " + libraryPattern("fixed") + " --random 1024,1024,1048576,1024",
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 1) << r.out;
  EXPECT_NE(r.err.find("of memory available (MemAvailable in /proc/meminfo); give a smaller shape, or "
                       "--max-memory BYTES"),
            std::string::npos)
      << r.err;
}

TEST(CliMemory, MaxMemoryCountsTheReferenceAndTakesSuffixes) {
  ScratchDir dir;
  const std::string run = "run " + libraryPattern("fixed") + " --random 1,1,100,64 --check --max-memory ";
  CommandResult tight = attnc(run + "101K", "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(tight.exitCode, 1) << tight.out;
  EXPECT_NE(tight.err.find("the reference (--check)"), std::string::npos) << tight.err;
  for (const char *limit : {"1M", "1mib", "0.5G", "2000000"}) {
    CommandResult ok = attnc(run + limit, "ATTNC_CACHE_DIR=" + dir.path());
    EXPECT_EQ(ok.exitCode, 0) << limit << "\n" << ok.err;
  }
}

TEST(CliMemory, ShapesThatOverflowASizeAreRefused) {
  ScratchDir dir;
  CommandResult run = attnc("run " + libraryPattern("fixed") + " --random 1000000,1000000,1000000,1000000",
                            "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(run.exitCode, 1) << run.out;
  EXPECT_NE(run.err.find("attnc: error: arrays of shape [1000000, 1000000, 1000000, 1000000] (Q, K, V) take more "
                         "bytes than a 64-bit size can count"),
            std::string::npos)
      << run.err;
  CommandResult bench = attnc("bench " + libraryPattern("fixed") + " --n 1000 --batch 1000000000000 --heads "
                              "1000000000 --backend fused",
                              "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(bench.exitCode, 1) << bench.out;
  EXPECT_NE(bench.err.find("take more bytes than a 64-bit size can count"), std::string::npos) << bench.err;
}

TEST(CliMemory, BenchPastMaxMemoryIsRefused) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("fixed") + " --n 65536 --d 64 --heads 8 --backward --max-memory "
                          "64M --backend fused",
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 1) << r.out;
  EXPECT_NE(r.err.find("this run would allocate 1.00 GiB"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("more than --max-memory 64.00 MiB"), std::string::npos) << r.err;
}

// ---- bench: grouped-query heads, fewer queries than keys, varlen -----------------

/// Keys of row i of `strided -D l=8` (the pairs CliBench counts by hand).
bool stridedPair(int64_t i, int64_t j) { return j <= i && (j >= i - 8 || (i - j) % 8 == 0); }

const char *const kBenchShapes = " -D l=8 --d 16 --heads 4 --repeat 1 --backend fused,dense --json";

TEST(CliBenchShapes, KvHeadsAddItsKeyAndRows) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("strided") + " --n 200 --kv-heads 2" + kBenchShapes,
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  EXPECT_EQ(doc["kv_heads"].integer, 2);
  EXPECT_FALSE(doc.has("queries"));
  ASSERT_EQ(doc["results"].array.size(), 2u);
  for (const Json &row : doc["results"].array)
    EXPECT_EQ(row.keys(),
              (std::vector<std::string>{"backend", "ms", "gflops", "executed_over_useful", "first_run_ms"}));
}

TEST(CliBenchShapes, QueriesCountTheLastRowsAndTheKeyRowsTheyRead) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("strided") + " --n 200 --queries 3 --kv-heads 1" +
                              kBenchShapes,
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  int64_t nnz = 0;
  std::set<int64_t> keys;
  for (int64_t i = 197; i < 200; ++i)
    for (int64_t j = 0; j < 200; ++j)
      if (stridedPair(i, j)) {
        ++nnz;
        keys.insert(j);
      }
  EXPECT_EQ(doc["n"].integer, 200);
  EXPECT_EQ(doc["queries"].integer, 3);
  EXPECT_EQ(doc["nnz_per_head"].integer, nnz);
  EXPECT_EQ(doc["distinct_keys"].integer, int64_t(keys.size()));
  EXPECT_EQ(doc["kv_bytes"].integer, int64_t(keys.size()) * 16 * 4 * 2);
  EXPECT_GT(doc["memcpy_ms"].number, 0);
  ASSERT_EQ(doc["results"].array.size(), 2u);
  for (const Json &row : doc["results"].array) {
    EXPECT_EQ(row.keys(), (std::vector<std::string>{"backend", "ms", "gflops", "first_run_ms", "over_memcpy"}))
        << row["backend"].string;
    EXPECT_NEAR(row["over_memcpy"].number, row["ms"].number / doc["memcpy_ms"].number,
                1e-3 * row["over_memcpy"].number);
  }
  // A decoding step in text: its own column and the bytes line.
  CommandResult text = attnc("bench " + libraryPattern("strided") +
                                 " -D l=8 --n 200 --queries 1 --d 16 --repeat 1 --backend fused",
                             "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("n=200 queries=1 d=16"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("key/value rows the queries name: "), std::string::npos) << text.out;
  EXPECT_TRUE(std::regex_search(text.out, std::regex(R"(\n  fused +[0-9.]+ +[0-9.]+ +- +[0-9.]+ +[0-9.]+ +[0-9.]+\n)")))
      << text.out;
}

TEST(CliBenchShapes, VarlenCountsEachSequenceAtItsLength) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("strided") + " --varlen 50,0,130,20" + kBenchShapes + " --backward",
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  int64_t nnz = 0;
  for (int64_t length : {50, 0, 130, 20})
    for (int64_t i = 0; i < length; ++i)
      for (int64_t j = 0; j < length; ++j)
        nnz += stridedPair(i, j);
  EXPECT_EQ(doc["n"].integer, 200);
  EXPECT_EQ(doc["nnz_per_head"].integer, nnz);
  ASSERT_EQ(doc["varlen"].array.size(), 4u);
  EXPECT_EQ(doc["varlen"].array[2].integer, 130);
  ASSERT_EQ(doc["results"].array.size(), 2u);
  for (const Json &row : doc["results"].array) {
    ASSERT_TRUE(row.has("ms")) << row["backend"].string << ": " << row["error"].string;
    EXPECT_GE(row["executed_over_useful"].number, 1.0);
    EXPECT_TRUE(row.has("bwd_ms")) << row["backend"].string;
  }
  // --n may repeat the sum.
  EXPECT_EQ(attnc("bench " + libraryPattern("strided") + " --n 200 --varlen 50,0,130,20" + kBenchShapes,
                  "ATTNC_CACHE_DIR=" + dir.path())
                .exitCode,
            0);
}

TEST(CliBenchShapes, FlagsThatDisagreeAreUsageErrorsThatSayWhy) {
  struct Bad {
    const char *args, *message;
  } cases[] = {
      {"--n 200 --kv-heads 3", "--kv-heads 3 does not divide the 4 query heads"},
      {"--n 200 --queries 201", "--queries 201 is more than the 200 keys of --n"},
      {"--n 100 --varlen 50,60", "--n 100 is not the sum of the --varlen lengths, 110; leave --n out"},
      {"--varlen 50,60 --batch 2", "--varlen packs its sequences into one batch element; --batch 2 does not apply"},
      {"--varlen 50,60 --queries 2", "--queries excludes --varlen"},
      {"--varlen 50,-1", "--varlen: the lengths must be in [0, 2147483647], got -1 in '50,-1'"},
      {"--varlen 0,0", "--varlen: the lengths must add up to at least 1"},
      {"--varlen 2000000000,2000000000", "the lengths add up to 4000000000"},
  };
  for (const Bad &b : cases) {
    CommandResult r = attnc("bench " + libraryPattern("strided") + " -D l=8 --d 16 --heads 4 --repeat 1 " + b.args);
    EXPECT_EQ(r.exitCode, 2) << b.args << "\n" << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.args << "\n" << r.err;
  }
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

const char *const kBenchSmall = " -D l=16 -D c=4 --n 200 --d 16 --heads 2 --repeat 1 --backend fused,dense";

TEST(CliBench, WithoutBackwardOrPeakTheJsonFieldsAreTheContractOnly) {
  ScratchDir dir;
  CommandResult r =
      attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --json", "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  EXPECT_EQ(doc.keys(), (std::vector<std::string>{"pattern", "dtype", "n", "d", "batch", "heads", "nnz_per_head",
                                                  "plan_build_ms", "block_generation_ms", "block_bytes",
                                                  "results"}));
  ASSERT_EQ(doc["results"].array.size(), 2u);
  for (const Json &row : doc["results"].array)
    EXPECT_EQ(row.keys(),
              (std::vector<std::string>{"backend", "ms", "gflops", "executed_over_useful", "first_run_ms"}));
}

TEST(CliBench, BackwardReportsTimeRateAndRatioPerBackend) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --backward --json",
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  const double backwardFlops = 10.0 * double(doc["nnz_per_head"].integer) * 16 * 2;
  ASSERT_EQ(doc["results"].array.size(), 2u);
  for (const Json &row : doc["results"].array) {
    const std::string &b = row["backend"].string;
    ASSERT_TRUE(row.has("bwd_ms")) << b << ": " << (row.has("bwd_error") ? row["bwd_error"].string : "");
    EXPECT_GT(row["ms"].number, 0) << b;
    EXPECT_GT(row["fwd_lse_ms"].number, 0) << b;
    EXPECT_GT(row["bwd_ms"].number, 0) << b;
    EXPECT_NEAR(row["bwd_gflops"].number * row["bwd_ms"].number * 1e6, backwardFlops, 1e-3 * backwardFlops) << b;
    EXPECT_NEAR(row["bwd_over_fwd"].number, row["bwd_ms"].number / row["ms"].number,
                1e-3 * row["bwd_over_fwd"].number)
        << b;
  }
  CommandResult text = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --backward",
                             "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_TRUE(std::regex_search(text.out, std::regex(R"(backend +fwd\+lse ms +bwd ms +bwd GFLOP/s +bwd/fwd\n)")))
      << text.out;
  for (const char *b : {"fused", "dense"})
    EXPECT_TRUE(std::regex_search(
        text.out, std::regex(std::string("\n  ") + b + R"( +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+\n)")))
        << b << "\n" << text.out;
}

TEST(CliBench, PeakAloneNeedsNoPatternFile) {
  CommandResult r = attnc("bench --peak --threads 1");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.out, m, std::regex(R"(^peak: ([0-9.]+) GFLOP/s \((\S+) FMA loops, \d+ lanes, 1 thread\))")))
      << r.out;
  EXPECT_GT(std::stod(m[1]), 0);
  Json doc = parseJson(attnc("bench --peak --threads 1 --json").out);
  EXPECT_GT(doc["peak_gflops"].number, 0);
  EXPECT_EQ(doc["peak_isa"].string, m[2].str());
  // Anything else still needs the pattern file and --n.
  CommandResult noFile = attnc("bench --n 64");
  EXPECT_EQ(noFile.exitCode, 2);
  EXPECT_NE(noFile.err.find("file is required"), std::string::npos) << noFile.err;
  CommandResult noN = attnc("bench " + libraryPattern("fixed") + " --peak");
  EXPECT_EQ(noN.exitCode, 2);
  EXPECT_NE(noN.err.find("--n is required"), std::string::npos) << noN.err;
}

TEST(CliBench, PeakGivesEachRateAsAShareOfIt) {
  ScratchDir dir;
  CommandResult r = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --threads 1 --backward --peak --json",
                          "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json doc = parseJson(r.out);
  const double peak = doc["peak_gflops"].number;
  ASSERT_GT(peak, 0);
  EXPECT_EQ(doc["peak_threads"].integer, 1);
  for (const Json &row : doc["results"].array) {
    EXPECT_NEAR(row["fwd_share"].number, row["gflops"].number / peak, 1e-4) << row["backend"].string;
    EXPECT_NEAR(row["bwd_share"].number, row["bwd_gflops"].number / peak, 1e-4) << row["backend"].string;
  }
  CommandResult text = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --threads 1 --peak",
                             "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_TRUE(std::regex_search(text.out, std::regex(R"(\n  peak: [0-9.]+ GFLOP/s)"))) << text.out;
  EXPECT_TRUE(std::regex_search(text.out, std::regex(R"(first run ms +% peak\n)"))) << text.out;
}

/// --peak measures the FMA loops of the instruction set the CPU kernels run,
/// forced with ATTNC_FUSED_ISA to each one this CPU has, and names it in the
/// table and in --json; one the CPU lacks (or no such name) is an error.
TEST(CliBench, PeakIsThatOfTheInstructionSetThatRan) {
  struct Isa {
    const char *name, *loops;
    int lanes;
  };
  std::vector<Isa> isas = {{"portable", "generic", 4}};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    isas.push_back({"avx2", "avx2+fma", 8});
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2"))
    isas.push_back({"avx512", "avx512f", 16});
#endif
  ScratchDir dir;
  for (const Isa &isa : isas) {
    const std::string env = "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_FUSED_ISA=" + isa.name;
    CommandResult r = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --threads 1 --peak --backend fused --json",
                            env);
    ASSERT_EQ(r.exitCode, 0) << isa.name << ": " << r.err;
    Json doc = parseJson(r.out);
    EXPECT_EQ(doc["cpu_isa"].string, isa.name);
    EXPECT_EQ(doc["peak_isa"].string, isa.loops) << isa.name;
    CommandResult text = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --threads 1 --peak --backend fused", env);
    ASSERT_EQ(text.exitCode, 0) << text.err;
    EXPECT_NE(text.out.find(std::string("CPU kernels: ") + isa.name + "\n"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("(" + std::string(isa.loops) + " FMA loops, " + std::to_string(isa.lanes) + " lanes"),
              std::string::npos)
        << text.out;
  }
  CommandResult bad = attnc("bench " + libraryPattern("fixed") + kBenchSmall + " --backend fused",
                            "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_FUSED_ISA=avx9");
  EXPECT_EQ(bad.exitCode, 1);
  EXPECT_NE(bad.err.find("ATTNC_FUSED_ISA='avx9': expected avx512, avx2 or portable"), std::string::npos) << bad.err;
}

/// --target cuda: where no driver opens (forced here with ATTNC_CUDA_DRIVER,
/// as on a machine without a GPU) attnc says why and exits 1; options that
/// mean nothing on the GPU are refused with exit 2, f16 on the CPU too.
TEST(CliBench, TargetCudaWithoutADriverSaysWhy) {
  ScratchDir dir;
  const std::string env = "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_CUDA_DRIVER=/nonexistent/libcuda.so.1";
  const std::string small = " -D l=16 -D c=4 --n 200 --d 16 --heads 2 --repeat 1";
  for (const char *extra : {"", " --backward --json", " --dtype f16"}) {
    CommandResult r = attnc("bench " + libraryPattern("fixed") + small + " --target cuda" + extra, env);
    EXPECT_EQ(r.exitCode, 1) << extra << ": " << r.out << r.err;
    EXPECT_NE(r.err.find("attnc: error: --target cuda: no CUDA driver: /nonexistent/libcuda.so.1 cannot be opened"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");
  }
  const std::pair<const char *, const char *> refused[] = {
      {" --target cuda --peak", "--peak measures the CPU's FMA peak"},
      {" --target cuda --backend dense", "--backend must be fused"},
      {" --target cuda --threads 2", "--threads sets CPU worker threads"},
      {" --dtype f16", "--dtype f16 runs on the GPU only (--target cuda)"},
  };
  for (const auto &[extra, message] : refused) {
    CommandResult r = attnc("bench " + libraryPattern("fixed") + small + extra, env);
    EXPECT_EQ(r.exitCode, 2) << extra;
    EXPECT_NE(r.err.find(message), std::string::npos) << extra << ": " << r.err;
  }
  CommandResult varlen = attnc("bench " + libraryPattern("local") + " --varlen 100,50 --d 16 --target cuda", env);
  EXPECT_EQ(varlen.exitCode, 2);
  EXPECT_NE(varlen.err.find("variable-length batches do not run on the GPU yet"), std::string::npos) << varlen.err;
  CommandResult help = attnc("bench --help", env);
  EXPECT_NE(help.out.find("--target"), std::string::npos);
  EXPECT_NE(help.out.find("--device"), std::string::npos);
}

#ifdef ATTNC_FAKE_CUDA_PATH
/// --target cuda on the tests' fake driver (tests/runtime/FakeCudaDriver.h: a
/// GPU of compute capability 9.0 whose launches run nothing): the tool's GPU
/// path end to end -- the device named, the forward and backward timed, the
/// JSON well-formed (a time of 0 has no rate: null, "-" as text).
TEST(CliBench, TargetCudaOnTheFakeDriver) {
  ScratchDir dir;
  const std::string env = "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_CUDA_DRIVER=" ATTNC_FAKE_CUDA_PATH
                          " ATTNC_FAKE_CUDA_NO_DATA=1";
  const std::string small = " -D l=16 -D c=4 --n 200 --d 64 --heads 2 --repeat 2 --target cuda --backward";
  CommandResult json = attnc("bench " + libraryPattern("fixed") + small + " --json", env);
  ASSERT_EQ(json.exitCode, 0) << json.err;
  for (const char *field : {"\"name\": \"attnc fake GPU 9.0\"", "\"compute_capability\": \"9.0\"", "\"tflops\": null",
                            "\"call_ms\": ", "\"bwd_ms\": ", "\"bwd_tflops\": null", "\"nnz_per_head\": "})
    EXPECT_NE(json.out.find(field), std::string::npos) << field << " in " << json.out;
  EXPECT_EQ(json.out.find("inf"), std::string::npos) << json.out;
  EXPECT_EQ(json.out.find("nan"), std::string::npos) << json.out;
  CommandResult text = attnc("bench " + libraryPattern("fixed") + small, env);
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("on attnc fake GPU 9.0 (sm_90, device 0), CUDA events around 10 queued calls"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("call ms"), std::string::npos) << text.out;
  // A driver without memory pools: the buffers come from its default one.
  CommandResult noPools = attnc("bench " + libraryPattern("fixed") + small, env + " ATTNC_FAKE_CUDA_NO_POOLS=1");
  EXPECT_EQ(noPools.exitCode, 0) << noPools.err;
  // What ATTNC_CUDA_POOL_KEEP_MB must be, said before anything runs.
  for (const char *bad : {"lots", "-1", "12MB"}) {
    CommandResult r = attnc("bench " + libraryPattern("fixed") + small, env + " ATTNC_CUDA_POOL_KEEP_MB=" + bad);
    EXPECT_EQ(r.exitCode, 1) << bad;
    EXPECT_NE(r.err.find("ATTNC_CUDA_POOL_KEEP_MB must be a number of MB"), std::string::npos) << r.err;
  }
}
#endif

/// run --target cuda: no driver, exit 1 with why and no file written; what
/// the GPU does not take is a usage error.
TEST(CliRun, TargetCudaWithoutADriverSaysWhy) {
  ScratchDir dir;
  const std::string env = "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_CUDA_DRIVER=/nonexistent/libcuda.so.1";
  const std::string out = dir.path() + "/o.npy";
  CommandResult r = attnc("run " + libraryPattern("fixed") + " -D l=16 -D c=4 --random 1,2,100,16 --target cuda -o " +
                              out + " --grad random --check",
                          env);
  EXPECT_EQ(r.exitCode, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("attnc: error: --target cuda: no CUDA driver: /nonexistent/libcuda.so.1 cannot be opened"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  const std::pair<const char *, const char *> refused[] = {
      {" --random 1,2,100,16 --threads 2", "--threads sets CPU worker threads"},
      {" --random 1,1,100,16 --cu-seqlens 0,50,100", "variable-length batches do not run on the GPU yet"},
      {" --random 1,2,100,16 --backend dense", "--backend must be fused"},
  };
  for (const auto &[extra, message] : refused) {
    CommandResult bad = attnc("run " + libraryPattern("fixed") + extra + " --target cuda", env);
    EXPECT_EQ(bad.exitCode, 2) << extra;
    EXPECT_NE(bad.err.find(message), std::string::npos) << extra << ": " << bad.err;
  }
}

#if ATTNC_HAVE_MLIR || ATTNC_HAVE_HALIDE
TEST(CliBench, BackendWithoutABackwardSaysNotAvailable) {
  ScratchDir dir;
  const std::string backend = ATTNC_HAVE_MLIR ? "sparsifier" : "halide";
  const std::string args = "bench " + libraryPattern("strided") + " -D l=8 --n 130 --d 16 --heads 2 --repeat 1 " +
                           "--backward --backend fused," + backend;
  CommandResult text = attnc(args, "ATTNC_CACHE_DIR=" + dir.path());
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("  " + backend + std::string(12 - backend.size(), ' ') + " n/a (forward only)\n"),
            std::string::npos)
      << text.out;
  Json doc = parseJson(attnc(args + " --json", "ATTNC_CACHE_DIR=" + dir.path()).out);
  ASSERT_EQ(doc["results"].array.size(), 2u);
  EXPECT_TRUE(doc["results"].array[0].has("bwd_ms"));
  const Json &row = doc["results"].array[1];
  EXPECT_GT(row["ms"].number, 0);
  EXPECT_FALSE(row.has("bwd_ms"));
  EXPECT_TRUE(row["bwd_unsupported"].boolean);
  EXPECT_NE(row["bwd_error"].string.find("the " + backend + " backend"), std::string::npos) << row["bwd_error"].string;
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
  CommandResult bad = attnc("bench " + libraryPattern("strided") + " --n 64 --dtype f64", env);
  EXPECT_EQ(bad.exitCode, 2) << bad.out;
  EXPECT_NE(bad.err.find("f64 not in {f32,bf16,f16}"), std::string::npos) << bad.err;
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
// Halide's code is for the CPU attnc compiles on, or the one --cpu-target
// names: the file records it, and code for a CPU this one covers runs here.
TEST(CliCompile, HalideCodeForANamedCpuIsRecordedAndRuns) {
  ScratchDir dir;
  std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  std::string q = zerosNpy(dir, "q.npy", "(1, 2, 70, 32)", 2 * 70 * 32);
  for (const char *cpu : {"x86-64-avx2", "x86-64-sse41"}) {
    const std::string kernel = dir.file(std::string(cpu) + ".attnk");
    CommandResult c = attnc("compile " + libraryPattern("strided") + " -D l=8 --backend halide --cpu-target " + cpu +
                                " -o " + kernel,
                            env);
    ASSERT_EQ(c.exitCode, 0) << c.err;
    attnc_kernel *k = nullptr;
    ASSERT_EQ(attnc_kernel_load(kernel.c_str(), &k), ATTNC_OK) << attnc_last_error();
    const std::string target = attnc_kernel_metadata(k, "halide_target");
    attnc_kernel_free(k);
    EXPECT_EQ(target.find("avx512"), std::string::npos) << cpu << ": " << target;
    EXPECT_EQ(target.find("avx2") != std::string::npos, std::string(cpu) == "x86-64-avx2") << target;
    CommandResult r = attnc("run " + kernel + " --q " + q + " --k " + q + " --v " + q + " -o " + dir.file("o.npy") +
                                " --check",
                            env);
    EXPECT_EQ(r.exitCode, 0) << cpu << ": " << r.err;
  }
  CommandResult fused = attnc("compile " + libraryPattern("strided") + " --cpu-target x86-64-avx2 -o " +
                                  dir.file("f.attnk"),
                              env);
  EXPECT_EQ(fused.exitCode, 2);
  EXPECT_NE(fused.err.find("--backend halide"), std::string::npos) << fused.err;
  EXPECT_EQ(attnc("compile " + libraryPattern("strided") + " --backend halide --cpu-target avx9000 -o " +
                      dir.file("g.attnk"),
                  env)
                .exitCode,
            2);
}

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

/// A GPU's tuned forward variant (what `attnc tune --target cuda` records,
/// written here: no GPU) reaches compiled kernels as metadata cuda_tuned,
/// for the same pattern instance only; tune --target cuda's usage errors.
TEST(CliTune, GpuVariantIsRecordedIntoTheKernel) {
  ScratchDir dir;
  const std::string env = "ATTNC_CACHE_DIR=" + dir.path();
  const std::string path = libraryPattern("fixed");
  std::ifstream in(path);
  const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Frontend fe;
  SemaOptions sema;
  for (const char *text : {"l=16", "c=4"}) {
    Define d;
    std::string error;
    ASSERT_TRUE(parseDefine(text, d, error)) << error;
    sema.defines.push_back(d);
  }
  ASSERT_TRUE(fe.parseString(path, source) && fe.analyze(sema));
  const Pattern *pattern = fe.select("");
  ASSERT_NE(pattern, nullptr);
  for (const auto &[gpu, d, variant] : {std::tuple{"NVIDIA_H200@9.0", 64, 2}, {"NVIDIA_H200@9.0", 32, 1},
                                        {"NVIDIA_A100-SXM4-80GB@8.0", 64, 3}}) {
    tuning::Entry e;
    e.key = tuning::tuningKey(source, *pattern, "cuda");
    e.d = d;
    e.options.tileRows = e.options.tileCols = 64;
    e.gflops = 1000;
    e.backend = "cuda";
    e.gpu = gpu;
    e.dtype = "bf16";
    e.variant = variant;
    std::string error;
    ASSERT_TRUE(tuning::record(dir.file("tuning.db"), e, error)) << error;
  }
  CommandResult compile = attnc("compile " + path + " -D l=16 -D c=4 -o " + dir.file("k.attnk"), env);
  ASSERT_EQ(compile.exitCode, 0) << compile.err;
  EXPECT_NE(compile.err.find("GPU variants "), std::string::npos) << compile.err;
  attnc_kernel *kernel = nullptr;
  ASSERT_EQ(attnc_kernel_load(dir.file("k.attnk").c_str(), &kernel), ATTNC_OK) << attnc_last_error();
  const char *tuned = attnc_kernel_metadata(kernel, "cuda_tuned");
  ASSERT_NE(tuned, nullptr);
  EXPECT_EQ(std::string(tuned),
            "NVIDIA_H200@9.0:bf16:32=1;NVIDIA_A100-SXM4-80GB@8.0:bf16:64=3;NVIDIA_H200@9.0:bf16:64=2"); // by d, GPU
  attnc_kernel_free(kernel);
  // Another instance of the pattern has no tuned variants.
  CommandResult other = attnc("compile " + path + " -D l=32 -o " + dir.file("k2.attnk"), env);
  ASSERT_EQ(other.exitCode, 0) << other.err;
  ASSERT_EQ(attnc_kernel_load(dir.file("k2.attnk").c_str(), &kernel), ATTNC_OK);
  EXPECT_EQ(attnc_kernel_metadata(kernel, "cuda_tuned"), nullptr);
  attnc_kernel_free(kernel);
  // tune --target cuda: no driver, exit 1; what it cannot tune, exit 2.
  const std::string noDriver = env + " ATTNC_CUDA_DRIVER=/nonexistent/libcuda.so.1";
  CommandResult tune = attnc("tune " + path + " -D l=16 -D c=4 --n 300 --d 64 --target cuda --repeat 1", noDriver);
  EXPECT_EQ(tune.exitCode, 1) << tune.out << tune.err;
  EXPECT_NE(tune.err.find("--target cuda: no CUDA driver"), std::string::npos) << tune.err;
  for (const auto &[extra, message] :
       {std::pair{" --d 200", "variants to choose from for bf16 at d <= 128 only"},
        {" --backend halide", "--backend must be fused"}, {" --threads 2", "--threads sets CPU worker threads"}}) {
    CommandResult bad = attnc("tune " + path + " --n 300 --target cuda" + extra, noDriver);
    EXPECT_EQ(bad.exitCode, 2) << extra;
    EXPECT_NE(bad.err.find(message), std::string::npos) << extra << ": " << bad.err;
  }
}

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
