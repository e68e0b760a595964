//===- FusedBf16Test.cpp - The fused bf16 kernels against a double reference -===//
//
// runFusedHeadBf16 called directly on library patterns' plans (independent of
// how the runtime hands it slices), against softmax in double over the
// brute-force oracle's mask on the same bf16 values widened exactly: the
// only differences left are f32 sums and P rounded to bf16 for P V, so
// outputs must agree within ~1e-2 of the values' magnitude. Covers ragged n,
// odd d and odd tiles (the zero pads), rows without keys, per-head
// patterns, residue classes, waiting keys, the dense baseline, shared
// slices, extreme and tiny values and a NaN query, whose row must come out
// as the f32 kernel's does. Every CPU runs them: AVX512_BF16's dot products
// where the CPU has them, else the f32 kernels on bf16 rows widened as they
// load (P then stays f32); ctest runs them again with ATTNC_FUSED_ISA=avx2
// and portable.
//
//===----------------------------------------------------------------------===//
#include "FusedExecutor.h"

#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "attnc/plan/Plan.h"
#include "support/Oracle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace attnc::rt {
namespace {

struct PatternCase {
  const char *label;
  const char *file; ///< a library pattern, or null for `source`
  std::vector<Define> defines;
  const char *source = nullptr;
};

void PrintTo(const PatternCase &pc, std::ostream *os) { *os << pc.label; }

const PatternCase kPatterns[] = {
    {"FixedSmall", "fixed", {{"l", 16}, {"c", 4}}},
    {"FixedDefaults", "fixed", {}},
    {"Local", "local", {{"w", 5}}},
    {"LocalWide", "local", {{"w", 100}}},
    {"Strided", "strided", {{"l", 8}}},
    {"Longformer", "longformer", {{"w", 4}, {"g", 2}}},
    {"Bigbird", "bigbird", {{"b", 8}, {"g", 1}, {"r", 2}}},
    {"Causal", "causal", {}},
    {"FixedMultihead", "fixed_multihead", {{"l", 8}, {"c", 2}}},
    // Row 0 and every odd row have no key.
    {"Gaps", nullptr, {}, "pattern gaps { attend { j : j < i && i % 2 == 0 } }"},
};

/// A pattern checked, canonicalised and planned with `tiles`.
struct Planned {
  Frontend fe;
  ir::PatternIR ir;
  plan::Plan plan;
};

std::unique_ptr<Planned> planPattern(const PatternCase &pc, plan::PlanOptions tiles = {}) {
  auto p = std::make_unique<Planned>();
  const bool parsed = pc.source ? p->fe.parseString("inline.attn", pc.source)
                                : p->fe.parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + pc.file + ".attn");
  if (!parsed || !p->fe.analyze({pc.defines}))
    return nullptr;
  p->ir = ir::canonicalizePattern(p->fe.patterns().front());
  p->plan = plan::buildPlan(p->ir, plan::resolveOptions(p->ir, tiles));
  return p;
}

/// bf16 rounded to nearest even (NaN kept a quiet NaN), and back.
uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f))
    return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
float fromBf16(uint16_t x) {
  const uint32_t u = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// One slice's inputs as bf16 and their exact f32 widening.
struct Inputs {
  int64_t n, d;
  std::vector<uint16_t> q, k, v;
  std::vector<float> qf, kf, vf;
  void set(std::vector<uint16_t> &b, std::vector<float> &f, size_t i, float x) {
    b[i] = toBf16(x);
    f[i] = fromBf16(b[i]);
  }
};

/// Uniform in [-qkScale, qkScale] for q and k, [-vScale, vScale] for v.
Inputs randomInputs(int64_t n, int64_t d, uint32_t seed, float qkScale = 1.0f, float vScale = 1.0f) {
  Inputs in{n, d, {}, {}, {}, {}, {}, {}};
  const size_t count = static_cast<size_t>(n * d);
  for (auto *b : {&in.q, &in.k, &in.v})
    b->resize(count);
  for (auto *f : {&in.qf, &in.kf, &in.vf})
    f->resize(count);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) {
    in.set(in.q, in.qf, i, qkScale * unit(rng));
    in.set(in.k, in.kf, i, qkScale * unit(rng));
    in.set(in.v, in.vf, i, vScale * unit(rng));
  }
  return in;
}

/// Softmax attention in double over the oracle's mask of head `h`.
struct Reference {
  std::vector<double> o, lse;
  std::vector<char> empty;
};

Reference reference(const Planned &p, size_t h, const Inputs &in, double scale) {
  const int64_t n = in.n, d = in.d;
  const std::vector<char> mask = oracle::denseMask(*p.ir.heads[h].term, n);
  Reference r;
  r.o.assign(static_cast<size_t>(n * d), 0.0);
  r.lse.assign(static_cast<size_t>(n), -std::numeric_limits<double>::infinity());
  r.empty.assign(static_cast<size_t>(n), 1);
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      if (!mask[static_cast<size_t>(i * n + j)])
        continue;
      double dot = 0;
      for (int64_t x = 0; x < d; ++x)
        dot += double(in.qf[static_cast<size_t>(i * d + x)]) * in.kf[static_cast<size_t>(j * d + x)];
      s[static_cast<size_t>(j)] = scale * dot;
      m = std::max(m, s[static_cast<size_t>(j)]);
      r.empty[static_cast<size_t>(i)] = 0;
    }
    if (r.empty[static_cast<size_t>(i)])
      continue;
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (!mask[static_cast<size_t>(i * n + j)])
        continue;
      const double w = std::exp(s[static_cast<size_t>(j)] - m);
      sum += w;
      for (int64_t x = 0; x < d; ++x)
        r.o[static_cast<size_t>(i * d + x)] += w * in.vf[static_cast<size_t>(j * d + x)];
    }
    for (int64_t x = 0; x < d; ++x)
      r.o[static_cast<size_t>(i * d + x)] /= sum;
    r.lse[static_cast<size_t>(i)] = m + std::log(sum);
  }
  return r;
}

/// A kernel's output and log-sum-exp (as FusedBackend derives it).
struct Output {
  std::vector<float> o, lse;
};

struct RunOptions {
  bool dense = false;
  bool cache = true;
  int threads = 1;
};

Output runBf16(const Planned &p, size_t h, const Inputs &in, float scale, RunOptions opts = {}) {
  std::vector<plan::HeadShapes> shapes;
  if (opts.cache)
    plan::buildShapes(p.plan, in.n, opts.dense, size_t{1} << 30, shapes, 1);
  FusedScratch scratch;
  Output out{std::vector<float>(static_cast<size_t>(in.n * in.d), -7.0f), {}};
  runFusedHeadBf16(p.plan, h, opts.dense, shapes.empty() ? nullptr : &shapes[h], in.n, in.d, in.q.data(),
                   in.k.data(), in.v.data(), out.o.data(), scale, scratch, opts.threads);
  for (int64_t i = 0; i < in.n; ++i) {
    const float sum = scratch.rowSum[static_cast<size_t>(i)];
    out.lse.push_back(sum > 0 ? scratch.rowMax[static_cast<size_t>(i)] + std::log(sum)
                              : -std::numeric_limits<float>::infinity());
  }
  return out;
}

Output runF32(const Planned &p, size_t h, const Inputs &in, float scale) {
  FusedScratch scratch;
  Output out{std::vector<float>(static_cast<size_t>(in.n * in.d), -7.0f), {}};
  runFusedHead(p.plan, h, false, nullptr, in.n, in.d, in.qf.data(), in.kf.data(), in.vf.data(), out.o.data(),
               scale, scratch, 1);
  return out;
}

/// bf16's tolerance: P rounded to 8 bits moves each weight by up to 2^-9
/// of itself, so O moves by less than ~4e-3 of the values' magnitude; the
/// log-sum-exp by less than ~4e-3 (its sum adds the rounded weights).
constexpr double kTolerance = 1e-2;

/// Compares every row with the reference; rows `skip` (>= 0) are left out.
/// Returns the largest error over the values' magnitude.
double expectMatches(const Output &out, const Reference &ref, const Inputs &in, int64_t skip = -1) {
  double vMax = 0;
  for (float x : in.vf)
    vMax = std::max(vMax, double(std::fabs(x)));
  vMax = std::max(vMax, std::numeric_limits<double>::min());
  double worst = 0;
  int reported = 0;
  for (int64_t i = 0; i < in.n; ++i) {
    if (i == skip)
      continue;
    const size_t row = static_cast<size_t>(i);
    if (ref.empty[row]) {
      for (int64_t x = 0; x < in.d; ++x)
        EXPECT_EQ(out.o[row * in.d + x], 0.0f) << "row " << i << " has no key: zeros";
      EXPECT_EQ(out.lse[row], -std::numeric_limits<float>::infinity()) << "row " << i;
      continue;
    }
    const double lseError = std::fabs(out.lse[row] - ref.lse[row]);
    worst = std::max(worst, lseError / std::max(1.0, std::fabs(ref.lse[row])));
    if (!(lseError <= kTolerance * std::max(1.0, std::fabs(ref.lse[row]))) && reported++ < 5)
      ADD_FAILURE() << "lse of row " << i << ": " << out.lse[row] << " vs " << ref.lse[row];
    for (int64_t x = 0; x < in.d; ++x) {
      const size_t at = static_cast<size_t>(i * in.d + x);
      const double error = std::fabs(out.o[at] - ref.o[at]) / vMax;
      worst = std::max(worst, std::isnan(error) ? 1e30 : error);
      if (!(error <= kTolerance) && reported++ < 5)
        ADD_FAILURE() << "o[" << i << ", " << x << "] = " << out.o[at] << ", reference " << ref.o[at];
    }
  }
  return worst;
}

struct Shape {
  int64_t n, d;
  plan::PlanOptions tiles = {};
};
void PrintTo(const Shape &s, std::ostream *os) {
  *os << "n=" << s.n << " d=" << s.d << " tiles=" << s.tiles.tileRows << "x" << s.tiles.tileCols;
}

std::vector<Shape> shapes() {
  std::vector<Shape> all;
  for (int64_t n : {1, 7, 64, 100, 1000})
    for (int64_t d : {1, 3, 16, 63, 64, 128})
      all.push_back({n, d});
  // Odd tiles: P^T's and V's last pair padded in every tile.
  for (plan::PlanOptions tiles : {plan::PlanOptions{16, 7}, plan::PlanOptions{64, 33}, plan::PlanOptions{32, 5}})
    for (Shape s : {Shape{100, 3}, Shape{300, 64}, Shape{64, 128}, Shape{130, 63}}) {
      s.tiles = tiles;
      all.push_back(s);
    }
  return all;
}

class FusedBf16 : public ::testing::TestWithParam<std::tuple<PatternCase, Shape>> {};

TEST_P(FusedBf16, MatchesDoubleReferenceOnBf16Inputs) {
  const auto &[pc, shape] = GetParam();
  std::unique_ptr<Planned> p = planPattern(pc, shape.tiles);
  ASSERT_TRUE(p);
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.d));
  double worst = 0;
  for (size_t h = 0; h < p->ir.heads.size(); ++h) {
    const Inputs in = randomInputs(shape.n, shape.d, static_cast<uint32_t>(17 + h + shape.n * 131 + shape.d), 2.0f);
    worst = std::max(worst, expectMatches(runBf16(*p, h, in, scale), reference(*p, h, in, scale), in));
  }
  RecordProperty("max_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Library, FusedBf16,
                         ::testing::Combine(::testing::ValuesIn(kPatterns), ::testing::ValuesIn(shapes())));

TEST(FusedBf16Values, ExtremeScoresMatchReference) {
  // Scores up to ~1e4 in magnitude: softmax close to one-hot, exp's inputs
  // far below -104 (clamped to 0) for most pairs.
  for (int64_t d : {3, 64}) {
    std::unique_ptr<Planned> p = planPattern(kPatterns[3]);
    ASSERT_TRUE(p);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const float a = std::sqrt(1e4f / (scale * static_cast<float>(d)));
    const Inputs in = randomInputs(300, d, 5, a, 100.0f);
    const double worst = expectMatches(runBf16(*p, 0, in, scale), reference(*p, 0, in, scale), in);
    RecordProperty("max_error_d" + std::to_string(d), std::to_string(worst));
  }
}

TEST(FusedBf16Values, ScoreDifferencesPastF32RangeGiveZeroWeights) {
  // Scores of +-2.5e38 are finite, but a negative one minus the row's
  // maximum is -5e38, -inf in f32: its weight must still come out 0, not
  // NaN (the unclamped exponential's reduction makes f NaN there, and
  // vscalefps by -inf gives 0 all the same).
  std::unique_ptr<Planned> p = planPattern(kPatterns[2]);
  ASSERT_TRUE(p);
  Inputs in = randomInputs(64, 1, 4);
  for (int64_t i = 0; i < 64; ++i) {
    in.set(in.q, in.qf, i, 1.0e19f);
    in.set(in.k, in.kf, i, i % 3 == 0 ? 2.5e19f : -2.5e19f);
  }
  const double worst = expectMatches(runBf16(*p, 0, in, 1.0f), reference(*p, 0, in, 1.0f), in);
  RecordProperty("max_error", std::to_string(worst));
}

TEST(FusedBf16Values, TinyValuesMatchReference) {
  // Products of q and k below f32's normal range (flushed by vdpbf16ps;
  // the scores are ~0 either way); O in the 1e-30s.
  std::unique_ptr<Planned> p = planPattern(kPatterns[0]);
  ASSERT_TRUE(p);
  const Inputs in = randomInputs(200, 64, 9, 1e-25f, 1e-30f);
  const double worst = expectMatches(runBf16(*p, 0, in, 0.125f), reference(*p, 0, in, 0.125f), in);
  RecordProperty("max_error", std::to_string(worst));
}

TEST(FusedBf16Values, NaNQueryRowComesOutAsInF32Kernel) {
  // A NaN in a query makes every score of its row NaN; the row must come
  // out as the f32 kernel gives it (NaN, as PyTorch does), and every other
  // row (their queries are their own) as the reference has it.
  for (const PatternCase &pc : {kPatterns[2], kPatterns[0], kPatterns[4]}) {
    std::unique_ptr<Planned> p = planPattern(pc);
    ASSERT_TRUE(p);
    Inputs in = randomInputs(100, 64, 3);
    constexpr int64_t kRow = 37;
    in.set(in.q, in.qf, kRow * 64 + 5, std::numeric_limits<float>::quiet_NaN());
    const Output bf = runBf16(*p, 0, in, 0.125f), f32 = runF32(*p, 0, in, 0.125f);
    for (int64_t x = 0; x < 64; ++x) {
      const float a = bf.o[kRow * 64 + x], b = f32.o[kRow * 64 + x];
      EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << pc.label << " o[" << kRow << ", " << x << "]: bf16 "
                                                              << a << ", f32 " << b;
      EXPECT_TRUE(std::isnan(a)) << pc.label << " o[" << kRow << ", " << x << "] = " << a;
    }
    expectMatches(bf, reference(*p, 0, in, 0.125f), in, kRow);
  }
}

TEST(FusedBf16Runs, DenseBaselineMatchesReference) {
  for (const PatternCase &pc : {kPatterns[2], kPatterns[9]}) {
    std::unique_ptr<Planned> p = planPattern(pc);
    ASSERT_TRUE(p);
    const Inputs in = randomInputs(130, 64, 11);
    expectMatches(runBf16(*p, 0, in, 0.125f, {true}), reference(*p, 0, in, 0.125f), in);
  }
}

TEST(FusedBf16Runs, UncachedBlocksMatchReference) {
  for (const PatternCase &pc : {kPatterns[0], kPatterns[4], kPatterns[5]}) {
    std::unique_ptr<Planned> p = planPattern(pc);
    ASSERT_TRUE(p);
    const Inputs in = randomInputs(500, 64, 13);
    expectMatches(runBf16(*p, 0, in, 0.125f, {false, false}), reference(*p, 0, in, 0.125f), in);
  }
}

TEST(FusedBf16Runs, SharedSliceMatchesReference) {
  for (const PatternCase &pc : {kPatterns[0], kPatterns[4], kPatterns[5]}) {
    std::unique_ptr<Planned> p = planPattern(pc);
    ASSERT_TRUE(p);
    const Inputs in = randomInputs(700, 32, 19);
    expectMatches(runBf16(*p, 0, in, 0.25f, {false, true, 3}), reference(*p, 0, in, 0.25f), in);
  }
}

TEST(FusedBf16Dispatch, DotProductsExactlyWithAvx512Bf16AndNotForcedToAnotherIsa) {
  const char *isa = std::getenv("ATTNC_FUSED_ISA");
  const bool other = isa && (std::string(isa) == "portable" || std::string(isa) == "avx2");
  bool expected = false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  expected = !other && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bf16");
#endif
  EXPECT_EQ(fusedBf16DotProducts(), expected);
  EXPECT_TRUE(fusedBf16Available(64)); // (widened where there are no dot products)
  EXPECT_FALSE(fusedBf16Available(0));
}

} // namespace
} // namespace attnc::rt
