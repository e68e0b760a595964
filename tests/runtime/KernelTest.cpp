//===- KernelTest.cpp - Compiled kernels against an independent reference -===//
//
// Every library pattern is compiled through the JIT (fused, sparsifier and
// dense backends) and run through the runtime on varied shapes: ragged n, n
// below every pattern constant, batch x heads > 1 with per-head patterns,
// head dimensions the kernels specialise and odd ones, large magnitudes.
// The reference takes its pairs from the brute-force oracle over Sema's
// terms, not from the IR or CSR the kernels use.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc_jit.h"
#include "attnc/frontend/Driver.h"
#include "attnc/compiler/Compile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>

namespace attnc::test {
namespace {

struct PatternCase {
  const char *label;
  const char *file;
  std::vector<std::string> defines;
};

struct Shape {
  int64_t batch, n, d;
};

const PatternCase kPatterns[] = {
    {"FixedSmall", "fixed", {"l=16", "c=4"}},
    {"FixedDefaults", "fixed", {}},
    {"StridedSmall", "strided", {"l=8"}},
    {"StridedDefaults", "strided", {}},
    {"FixedMultihead", "fixed_multihead", {"l=8", "c=2"}},
    {"StridedMultihead", "strided_multihead", {"l=8"}},
    {"FixedSubblocks", "fixed_subblocks", {"l=16", "c=2", "H=4"}},
    {"Causal", "causal", {}},
    {"Full", "full", {}},
    {"Local", "local", {"w=5"}},
    {"LocalSingleKey", "local", {"w=1"}},
    {"Dilated", "dilated", {"w=3", "d=2"}},
    {"Longformer", "longformer", {"w=4", "g=2"}},
    {"Bigbird", "bigbird", {"b=8", "g=1", "r=2"}},
    {"Axial", "axial", {"W=8"}},
};

void PrintTo(const PatternCase &pc, std::ostream *os) { *os << pc.label; }
void PrintTo(const Shape &s, std::ostream *os) {
  *os << "[" << s.batch << ", H, " << s.n << ", " << s.d << "]";
}

// Ragged n (not a multiple of the 32-row blocks) with every head dimension
// the tile kernels specialise (16, 32, 64, 128; 80 and 96 are slices of 64
// and 16 or 32 columns) and odd ones (4, 8, 33).
const Shape kShapes[] = {{1, 1, 4},   {2, 37, 16}, {1, 100, 33}, {2, 130, 8}, {1, 77, 32},
                         {1, 70, 64}, {1, 45, 128}, {1, 53, 80}, {1, 40, 96}};

/// One cache directory for the whole suite: each pattern compiles once.
KernelPtr compile(const PatternCase &pc, const char *backend = "fused") {
  std::string error;
  KernelPtr kernel = jitCompile(pc.file, nullptr, pc.defines, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << error;
  return kernel;
}

/// Runs the kernel and the reference on the same inputs; returns max |diff|.
double runAndCompare(const PatternCase &pc, attnc_kernel *kernel, Shape shape, float qkScale,
                     uint32_t seed) {
  int64_t heads = attnc_kernel_num_heads(kernel);
  if (heads == 0)
    heads = 3; // an undeclared head count accepts any; use several
  size_t count = static_cast<size_t>(shape.batch * heads * shape.n * shape.d);
  std::vector<float> q = randomFloats(count, seed, qkScale), k = randomFloats(count, seed + 1, qkScale),
                     v = randomFloats(count, seed + 2, 1.0f), o(count, -7.0f);
  attnc_tensor tq = view(q, shape.batch, heads, shape.n, shape.d),
               tk = view(k, shape.batch, heads, shape.n, shape.d),
               tv = view(v, shape.batch, heads, shape.n, shape.d),
               to = view(o, shape.batch, heads, shape.n, shape.d);
  attnc_status s = attnc_run(kernel, &tq, &tk, &tv, &to, nullptr);
  EXPECT_EQ(s, ATTNC_OK) << attnc_last_error();
  std::vector<float> ref = referenceFromOracle(patternPath(pc.file), pc.defines, q, k, v,
                                               shape.batch, heads, shape.n, shape.d);
  double worst = 0;
  for (size_t x = 0; x < count; ++x) {
    if (!std::isfinite(o[x]))
      return INFINITY;
    worst = std::max(worst, std::fabs(double(o[x]) - double(ref[x])));
  }
  return worst;
}

class CpuKernel
    : public ::testing::TestWithParam<std::tuple<PatternCase, Shape, const char *>> {};

TEST_P(CpuKernel, MatchesReference) {
  auto [pc, shape, backend] = GetParam();
  KernelPtr kernel = compile(pc, backend);
  ASSERT_TRUE(kernel);
  EXPECT_STREQ(attnc_kernel_metadata(kernel.get(), "backend"), backend);
  EXPECT_LE(runAndCompare(pc, kernel.get(), shape, 1.0f, 11), 1e-4);
}

TEST_P(CpuKernel, StaysAccurateWithLargeMagnitudes) {
  auto [pc, shape, backend] = GetParam();
  KernelPtr kernel = compile(pc, backend);
  ASSERT_TRUE(kernel);
  // Scores up to ~100 * sqrt(d): a naive softmax would overflow exp().
  EXPECT_LE(runAndCompare(pc, kernel.get(), shape, 10.0f, 23), 2e-3);
}

INSTANTIATE_TEST_SUITE_P(
    LibraryPatterns, CpuKernel,
    ::testing::Combine(::testing::ValuesIn(kPatterns), ::testing::ValuesIn(kShapes),
                       ::testing::ValuesIn(builtBackends({"fused", "halide", "sparsifier", "dense"}))),
    [](const ::testing::TestParamInfo<CpuKernel::ParamType> &info) {
      const Shape &s = std::get<1>(info.param);
      return std::string(std::get<2>(info.param)) + "_" + std::get<0>(info.param).label + "_B" +
             std::to_string(s.batch) + "_N" + std::to_string(s.n) + "_D" + std::to_string(s.d);
    });

class CpuKernelRows : public ::testing::TestWithParam<const char *> {};

INSTANTIATE_TEST_SUITE_P(Backends, CpuKernelRows, ::testing::ValuesIn(builtBackends({"fused", "halide", "sparsifier"})),
                         [](const ::testing::TestParamInfo<const char *> &info) {
                           return std::string(info.param);
                         });

/// The fused kernel with other tile shapes than the default: 16-row blocks
/// (one vector of row lanes), blocks of 7 rows, keys per tile from 5 to 128,
/// 64-row blocks (four vectors, or one for a piece of the first 16 rows).
struct TileCase {
  int64_t rows, cols;
};

class FusedTileShapes
    : public ::testing::TestWithParam<std::tuple<PatternCase, TileCase, Shape>> {};

TEST_P(FusedTileShapes, MatchesReference) {
  auto [pc, tiles, shape] = GetParam();
  const std::string bytes = fusedKernelBytes(pc.file, pc.defines, tiles.rows, tiles.cols);
  ScratchDir dir;
  std::string path = dir.path() + "/k.attnk";
  std::ofstream(path, std::ios::binary) << bytes;
  attnc_kernel *raw = nullptr;
  ASSERT_EQ(attnc_kernel_load(path.c_str(), &raw), ATTNC_OK) << attnc_last_error();
  KernelPtr kernel(raw, attnc_kernel_free);
  EXPECT_EQ(std::string(attnc_kernel_metadata(raw, "tile_rows")), std::to_string(tiles.rows));
  EXPECT_LE(runAndCompare(pc, raw, shape, 1.0f, 5), 1e-4);
  EXPECT_LE(runAndCompare(pc, raw, shape, 10.0f, 6), 2e-3);
}

const PatternCase kTilePatterns[] = {
    {"StridedSmall", "strided", {"l=8"}},
    {"FixedSmall", "fixed", {"l=16", "c=4"}},
    {"Local", "local", {"w=5"}},
    {"Bigbird", "bigbird", {"b=8", "g=1", "r=2"}},
    // Global rows 0 .. g - 1 attend every key: with g <= 16 their piece runs
    // on the first 16 row lanes of a block alone (16 exactly, and one more).
    {"LongformerG16", "longformer", {"w=3", "g=16"}},
    {"LongformerG17", "longformer", {"w=3", "g=17"}},
};

INSTANTIATE_TEST_SUITE_P(
    Library, FusedTileShapes,
    ::testing::Combine(::testing::ValuesIn(kTilePatterns),
                       ::testing::Values(TileCase{16, 32}, TileCase{16, 16}, TileCase{7, 5},
                                         TileCase{32, 128}, TileCase{64, 32}, TileCase{48, 24}),
                       ::testing::Values(Shape{1, 130, 64}, Shape{2, 45, 33}, Shape{1, 41, 256})),
    [](const ::testing::TestParamInfo<FusedTileShapes::ParamType> &info) {
      const TileCase &t = std::get<1>(info.param);
      const Shape &s = std::get<2>(info.param);
      return std::string(std::get<0>(info.param).label) + "_" + std::to_string(t.rows) + "x" +
             std::to_string(t.cols) + "_N" + std::to_string(s.n) + "_D" + std::to_string(s.d);
    });

// At d = 64, Q K^T reads a group of consecutive keys (a full group of
// 24 / 12 / 6 keys for 16- / 32- / 64-row blocks, or 2/3 of one) from one
// row pointer. Fixed's stripes make runs of c consecutive keys: c around 2/3
// of a group and around a full one, with a ragged n and partial blocks.
const PatternCase kRunPatterns[] = {
    {"FixedRunsC3", "fixed", {"l=32", "c=3"}},   {"FixedRunsC4", "fixed", {"l=32", "c=4"}},
    {"FixedRunsC7", "fixed", {"l=32", "c=7"}},   {"FixedRunsC8", "fixed", {"l=32", "c=8"}},
    {"FixedRunsC9", "fixed", {"l=32", "c=9"}},   {"FixedRunsC12", "fixed", {"l=32", "c=12"}},
    {"FixedRunsC13", "fixed", {"l=32", "c=13"}}, {"FixedRunsC17", "fixed", {"l=32", "c=17"}},
};

INSTANTIATE_TEST_SUITE_P(
    KeyRuns, FusedTileShapes,
    ::testing::Combine(::testing::ValuesIn(kRunPatterns),
                       ::testing::Values(TileCase{16, 32}, TileCase{32, 64}, TileCase{64, 32}),
                       ::testing::Values(Shape{1, 300, 64}, Shape{2, 257, 64})),
    [](const ::testing::TestParamInfo<FusedTileShapes::ParamType> &info) {
      const TileCase &t = std::get<1>(info.param);
      const Shape &s = std::get<2>(info.param);
      return std::string(std::get<0>(info.param).label) + "_" + std::to_string(t.rows) + "x" +
             std::to_string(t.cols) + "_N" + std::to_string(s.n);
    });

/// Compiles source text (not a library file) with the JIT.
KernelPtr compileSource(const char *source, const char *backend) {
  std::string error;
  KernelPtr kernel = jitCompile(nullptr, source, {}, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << error;
  return kernel;
}

TEST_P(CpuKernelRows, EmptyRowsProduceZeros) {
  // Row 0 has no key (j < 0 is empty); rows with odd i have none either.
  const char *source = "pattern gaps { attend { j : j < i && i % 2 == 0 } }";
  KernelPtr kernel = compileSource(source, GetParam());
  ASSERT_TRUE(kernel);
  int64_t n = 9, d = 5;
  std::vector<float> q = randomFloats(n * d, 1, 1), k = randomFloats(n * d, 2, 1),
                     v = randomFloats(n * d, 3, 1), o(n * d, 42.0f);
  attnc_tensor tq = view(q, 1, 1, n, d), tk = view(k, 1, 1, n, d), tv = view(v, 1, 1, n, d),
               to = view(o, 1, 1, n, d);
  ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr), ATTNC_OK) << attnc_last_error();
  std::vector<float> ref = referenceFromSource(source, {}, q, k, v, 1, 1, n, d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) {
      if (i == 0 || i % 2 == 1) {
        EXPECT_EQ(o[i * d + c], 0.0f) << "row " << i;
      }
      EXPECT_NEAR(o[i * d + c], ref[i * d + c], 1e-5) << "row " << i;
    }
}

TEST_P(CpuKernelRows, SingleKeyRowsCopyTheValue) {
  // Every row attends exactly one key: itself. Softmax of one score is 1.
  KernelPtr kernel = compileSource("pattern self { attend { j : j == i } }", GetParam());
  ASSERT_TRUE(kernel);
  int64_t n = 17, d = 3;
  std::vector<float> q = randomFloats(n * d, 4, 50), k = randomFloats(n * d, 5, 50),
                     v = randomFloats(n * d, 6, 1), o(n * d, 0.0f);
  attnc_tensor tq = view(q, 1, 1, n, d), tk = view(k, 1, 1, n, d), tv = view(v, 1, 1, n, d),
               to = view(o, 1, 1, n, d);
  ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr), ATTNC_OK) << attnc_last_error();
  for (int64_t x = 0; x < n * d; ++x)
    EXPECT_FLOAT_EQ(o[x], v[x]);
}

TEST_P(CpuKernelRows, OverflowingScoresMakeOnlyTheirRowsNaN) {
  // Documented: a score beyond float32's range makes its row NaN; the other
  // rows are unaffected and correct.
  KernelPtr kernel = compileSource("pattern self_and_first { attend { j : j == i || j == 0 } }", GetParam());
  ASSERT_TRUE(kernel);
  int64_t n = 20, d = 4;
  std::vector<float> q = randomFloats(n * d, 10, 1), k = randomFloats(n * d, 11, 1),
                     v = randomFloats(n * d, 12, 1), o(n * d, 0.0f);
  for (int64_t c = 0; c < d; ++c) {
    q[7 * d + c] = 3e20f;  // row 7's scores overflow
    k[7 * d + c] = 3e20f;
  }
  attnc_tensor tq = view(q, 1, 1, n, d), tk = view(k, 1, 1, n, d), tv = view(v, 1, 1, n, d),
               to = view(o, 1, 1, n, d);
  ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr), ATTNC_OK);
  std::vector<float> ref = referenceFromSource("pattern self_and_first { attend { j : j == i || j == 0 } }",
                                               {}, q, k, v, 1, 1, n, d);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) {
      if (i == 7)
        EXPECT_TRUE(std::isnan(o[i * d + c])) << "row 7 should be NaN";
      else
        EXPECT_NEAR(o[i * d + c], ref[i * d + c], 1e-5) << "row " << i;
    }
}

TEST_P(CpuKernelRows, StridedInputsGiveTheSameResultAsContiguous) {
  KernelPtr kernel = compileSource("pattern win { causal attend { j : i - j < 4 } }", GetParam());
  ASSERT_TRUE(kernel);
  int64_t b = 2, h = 2, n = 23, d = 6;
  size_t count = static_cast<size_t>(b * h * n * d);
  std::vector<float> q = randomFloats(count, 7, 1), k = randomFloats(count, 8, 1),
                     v = randomFloats(count, 9, 1), o(count, 0.0f);
  attnc_tensor tq = view(q, b, h, n, d), tk = view(k, b, h, n, d), tv = view(v, b, h, n, d),
               to = view(o, b, h, n, d);
  ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr), ATTNC_OK);
  // Same values laid out as [b, n, h, d] (heads interleaved), viewed with
  // strides as [b, h, n, d].
  auto interleave = [&](const std::vector<float> &src) {
    std::vector<float> dst(count);
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < d; ++c)
            dst[((bb * n + i) * h + hh) * d + c] = src[((bb * h + hh) * n + i) * d + c];
    return dst;
  };
  std::vector<float> q2 = interleave(q), k2 = interleave(k), v2 = interleave(v), o2(count, 0.0f);
  auto stridedView = [&](std::vector<float> &data) {
    attnc_tensor t = view(data, b, h, n, d);
    t.strides[0] = n * h * d;
    t.strides[1] = d;
    t.strides[2] = h * d;
    t.strides[3] = 1;
    return t;
  };
  attnc_tensor sq = stridedView(q2), sk = stridedView(k2), sv = stridedView(v2), so = stridedView(o2);
  ASSERT_EQ(attnc_run(kernel.get(), &sq, &sk, &sv, &so, nullptr), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(interleave(o), o2);
}

/// Runs one [1, 1, n, d] slice of random inputs through `kernel` with
/// `options` and compares every element with the oracle-built reference.
void expectSliceMatchesOracle(const PatternCase &pc, attnc_kernel *kernel, int64_t n, int64_t d,
                              uint32_t seed, const attnc_run_options *options) {
  std::vector<float> q = randomFloats(n * d, seed, 1), k = randomFloats(n * d, seed + 1, 1),
                     v = randomFloats(n * d, seed + 2, 1), o(n * d, -7.0f);
  attnc_tensor tq = view(q, 1, 1, n, d), tk = view(k, 1, 1, n, d), tv = view(v, 1, 1, n, d),
               to = view(o, 1, 1, n, d);
  ASSERT_EQ(attnc_run(kernel, &tq, &tk, &tv, &to, options), ATTNC_OK) << attnc_last_error();
  std::vector<float> ref = referenceFromOracle(patternPath(pc.file), pc.defines, q, k, v, 1, 1, n, d);
  for (int64_t x = 0; x < n * d; ++x)
    ASSERT_NEAR(o[x], ref[x], 1e-4) << pc.label << " element " << x;
}

TEST_P(CpuKernelRows, OneSliceSharedByFourThreadsMatchesTheReference) {
  // batch x heads = 1 with 4 threads: the fused backend splits the slice's
  // row blocks and residue classes among the threads (strided has both
  // passes, fixed two row-tiles pieces); ragged n, odd d.
  for (const PatternCase &pc : {PatternCase{"StridedSmall", "strided", {"l=8"}},
                                PatternCase{"FixedSmall", "fixed", {"l=16", "c=4"}}}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    attnc_run_options options{0.0f, 4};
    expectSliceMatchesOracle(pc, kernel.get(), 333, 33, 31, &options);
  }
}

TEST_P(CpuKernelRows, LongRaggedSequencesMatchTheReference) {
  // Enough row blocks (40 of 64 rows) and residue classes (64) that the
  // per-n structures are built on several cores (halide) and n = 2500 is
  // not a multiple of any block.
  for (const PatternCase &pc : {PatternCase{"Fixed", "fixed", {"l=16", "c=4"}},
                                PatternCase{"Strided", "strided", {"l=64"}}}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    expectSliceMatchesOracle(pc, kernel.get(), 2500, 16, 41, nullptr);
  }
}

/// Global rows (a block with at least half of all keys in a piece) run their
/// keys past their own rows later, 16 blocks at a time, when one thread runs
/// the slice: with stretches before the last block (n = 2500: 79 blocks of
/// 32, 40 of 64), and with keys that all ran before it (the rows' last call
/// then only normalises them).
TEST(FusedWaitingKeys, GlobalRowsMatchTheReference) {
  attnc_run_options one{0.0f, 1};
  for (const PatternCase &pc : {PatternCase{"Longformer", "longformer", {"w=40", "g=3"}},
                                PatternCase{"Bigbird", "bigbird", {}}}) {
    KernelPtr kernel = compile(pc);
    ASSERT_TRUE(kernel);
    expectSliceMatchesOracle(pc, kernel.get(), 2500, 64, 51, &one);
    expectSliceMatchesOracle(pc, kernel.get(), 2500, 33, 52, &one);
  }
  const char *source = "pattern early { attend { j : j == i } | { j : i < 3 && j < n / 2 + 40 } }";
  KernelPtr kernel = compileSource(source, "fused");
  ASSERT_TRUE(kernel);
  for (int64_t n : {2048, 1100}) {
    const int64_t d = 16;
    std::vector<float> q = randomFloats(n * d, 61, 1), k = randomFloats(n * d, 62, 1),
                       v = randomFloats(n * d, 63, 1), o(n * d, -7.0f);
    attnc_tensor tq = view(q, 1, 1, n, d), tk = view(k, 1, 1, n, d), tv = view(v, 1, 1, n, d),
                 to = view(o, 1, 1, n, d);
    ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, &one), ATTNC_OK) << attnc_last_error();
    std::vector<float> ref = referenceFromSource(source, {}, q, k, v, 1, 1, n, d);
    for (int64_t x = 0; x < n * d; ++x)
      ASSERT_NEAR(o[x], ref[x], 1e-4) << "n = " << n << ", element " << x;
  }
}

/// A bf16 [b, h, n, d] view; `headsInner` lays it out as [b, n, h, d].
attnc_tensor bf16View(std::vector<uint16_t> &data, int64_t b, int64_t h, int64_t n, int64_t d,
                      bool headsInner = false) {
  attnc_tensor t{data.data(), ATTNC_DTYPE_BF16, {b, h, n, d}, {h * n * d, n * d, d, 1}};
  if (headsInner) {
    t.strides[1] = d;
    t.strides[2] = h * d;
  }
  return t;
}

TEST_P(CpuKernelRows, Bf16TensorsMatchTheReferenceOnTheirValues) {
  // bf16 Q, K, V (read directly by the fused tile kernels when contiguous,
  // else widened per slice) against the reference on the same rounded
  // values; f32 output to the usual tolerance, bf16 output exactly the f32
  // output rounded to nearest even; a strided bf16 layout gives the same
  // result. Ragged n, a vector-sized and an odd d, every backend.
  for (const auto &[pc, d] : {std::pair{PatternCase{"StridedSmall", "strided", {"l=8"}}, int64_t{64}},
                              std::pair{PatternCase{"Bigbird", "bigbird", {"b=8", "g=1", "r=2"}}, int64_t{33}}}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    const int64_t b = 1, h = 3, n = 150;
    const size_t count = static_cast<size_t>(b * h * n * d);
    std::vector<float> qf = randomFloats(count, 51, 1), kf = randomFloats(count, 52, 1),
                       vf = randomFloats(count, 53, 1);
    std::vector<uint16_t> q(count), k(count), v(count);
    for (size_t x = 0; x < count; ++x) {
      q[x] = toBf16(qf[x]);
      k[x] = toBf16(kf[x]);
      v[x] = toBf16(vf[x]);
      qf[x] = fromBf16(q[x]);
      kf[x] = fromBf16(k[x]);
      vf[x] = fromBf16(v[x]);
    }
    std::vector<float> ref = referenceFromOracle(patternPath(pc.file), pc.defines, qf, kf, vf, b, h, n, d);
    attnc_tensor tq = bf16View(q, b, h, n, d), tk = bf16View(k, b, h, n, d), tv = bf16View(v, b, h, n, d);
    std::vector<float> o(count, -7.0f);
    attnc_tensor to = view(o, b, h, n, d);
    ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr), ATTNC_OK) << attnc_last_error();
    // The fused kernels' native bf16 path rounds P to bf16 for P V (2^-9
    // relative per weight); the others compute on the widened values in f32.
    const double tolerance = std::string(GetParam()) == "fused" ? 4e-3 : 1e-4;
    for (size_t x = 0; x < count; ++x)
      ASSERT_NEAR(o[x], ref[x], tolerance) << pc.label << " element " << x;

    std::vector<uint16_t> ob(count, 0xffff);
    attnc_tensor tob = bf16View(ob, b, h, n, d);
    ASSERT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &tob, nullptr), ATTNC_OK) << attnc_last_error();
    for (size_t x = 0; x < count; ++x)
      ASSERT_EQ(ob[x], toBf16(o[x])) << pc.label << " element " << x << ": " << fromBf16(ob[x])
                                     << " vs " << o[x];

    // The same values laid out as [b, n, h, d], viewed with strides.
    std::vector<uint16_t> q2(count), k2(count), v2(count);
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < d; ++c) {
          const size_t from = static_cast<size_t>((hh * n + i) * d + c), to2 = static_cast<size_t>((i * h + hh) * d + c);
          q2[to2] = q[from];
          k2[to2] = k[from];
          v2[to2] = v[from];
        }
    attnc_tensor sq = bf16View(q2, b, h, n, d, true), sk = bf16View(k2, b, h, n, d, true),
                 sv = bf16View(v2, b, h, n, d, true);
    std::vector<float> o2(count, -7.0f);
    attnc_tensor to2 = view(o2, b, h, n, d);
    ASSERT_EQ(attnc_run(kernel.get(), &sq, &sk, &sv, &to2, nullptr), ATTNC_OK) << attnc_last_error();
    EXPECT_EQ(o2, o) << pc.label;
    // A strided bf16 output holds the same values, in its own layout.
    std::vector<uint16_t> ob2(count, 0xffff);
    attnc_tensor tob2 = bf16View(ob2, b, h, n, d, true);
    ASSERT_EQ(attnc_run(kernel.get(), &sq, &sk, &sv, &tob2, nullptr), ATTNC_OK) << attnc_last_error();
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < d; ++c)
          ASSERT_EQ(ob2[static_cast<size_t>((i * h + hh) * d + c)], ob[static_cast<size_t>((hh * n + i) * d + c)])
              << pc.label << " head " << hh << " row " << i;
  }
}

TEST_P(CpuKernelRows, OneKernelServesEverySequenceLength) {
  KernelPtr kernel = compile(kPatterns[0], GetParam());
  ASSERT_TRUE(kernel);
  for (int64_t n : {5, 64, 17, 200, 5})
    EXPECT_LE(runAndCompare(kPatterns[0], kernel.get(), {1, n, 8}, 1.0f, static_cast<uint32_t>(n)), 1e-4)
        << "n = " << n;
}

} // namespace
} // namespace attnc::test
