//===- ScoreMathTest.cpp - The score code's functions and their bounds ----===//
//
// The vector code a score compiles to (runtime/lib/ScoreProgram.h) run on
// sweeps of inputs, against the C library in double: tanh within 3e-7
// absolute (soft-capping's cap * tanh(s / cap) within cap times that), exp
// and log within 4e-7 relative, their special values (log 0 = -inf, NaN in
// NaN out, exp saturating at e^88), and integer floor division and modulo
// exact on random integers below 2^22. ctest runs it with each instruction
// set forced (ATTNC_FUSED_ISA), which picks the runner.
//
//===----------------------------------------------------------------------===//
#include "FusedExecutor.h"
#include "ScoreProgram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace attnc::rt {
namespace {

ScoreRef s() { return ScoreExpr::make(ScoreOp::S, {}, false); }
ScoreRef num(double v) { return ScoreExpr::constant(v, false); }

/// The code of `e` (over s, i, j) applied to every value of `xs` as s (and
/// `is` as i, js as j where given); the values.
std::vector<float> run(const ScoreExpr &e, const std::vector<float> &xs, const std::vector<float> &is = {},
                       const std::vector<float> &js = {}) {
  const ir::PatternIR ir;
  const ScoreCode code = compileScore(e, ir, 0, 1, {}, false);
  std::vector<float> slots, out(xs.size());
  prepareScoreSlots(code, slots);
  constexpr int M = ScoreCode::kMaxLanes;
  for (size_t x0 = 0; x0 < xs.size(); x0 += M) {
    const int lanes = static_cast<int>(std::min<size_t>(M, xs.size() - x0));
    for (int l = 0; l < lanes; ++l) {
      slots[static_cast<size_t>(ScoreCode::kS * M + l)] = xs[x0 + l];
      if (!is.empty())
        slots[static_cast<size_t>(ScoreCode::kI * M + l)] = is[x0 + l];
      if (!js.empty())
        slots[static_cast<size_t>(ScoreCode::kJ * M + l)] = js[x0 + l];
    }
    // (Rel's positions: each lane its own row, of one key j = 0, as i - j
    // then reads i; the tests of i - j give j = 0.)
    ScoreLanes lanesOf{slots.data(), lanes};
    std::vector<float> rows(M, 0.0f);
    const float key = 0.0f;
    for (int l = 0; l < lanes && !is.empty(); ++l)
      rows[static_cast<size_t>(l)] = is[x0 + l];
    lanesOf.rowPos = rows.data();
    lanesOf.keyPos = &key;
    lanesOf.width = M;
    scoreRunner()(code, lanesOf);
    std::copy_n(lanesOf.slot(code.value), lanes, out.begin() + static_cast<std::ptrdiff_t>(x0));
  }
  return out;
}

std::vector<float> sweep(float lo, float hi, float step) {
  std::vector<float> xs;
  for (float x = lo; x <= hi; x += step)
    xs.push_back(x);
  return xs;
}

TEST(ScoreMath, TanhIsWithinItsAbsoluteBoundEverywhere) {
  std::vector<float> xs = sweep(-20.0f, 20.0f, 1.0f / 1024);
  for (float tiny : {1e-30f, 1e-7f, 1e-4f, 0.01f, 0.1249f, 0.1251f})
    for (float sign : {1.0f, -1.0f})
      xs.push_back(sign * tiny);
  const std::vector<float> got = run(*ScoreExpr::make(ScoreOp::Tanh, {s()}, false), xs);
  double worst = 0;
  for (size_t x = 0; x < xs.size(); ++x)
    worst = std::max(worst, std::abs(double(got[x]) - std::tanh(double(xs[x]))));
  EXPECT_LT(worst, 3e-7) << fusedIsa();
  // Whole vectors of 16 lanes up to |x| = 1/2, where AVX-512 takes the
  // series, and just past it, where it does not.
  std::vector<float> edge;
  for (float end : {0.5f, -0.5f, 0.5001f, 0.25f})
    for (int l = 0; l < 16; ++l)
      edge.push_back(end * (1.0f - l / 256.0f));
  const std::vector<float> atEdge = run(*ScoreExpr::make(ScoreOp::Tanh, {s()}, false), edge);
  for (size_t x = 0; x < edge.size(); ++x)
    EXPECT_LT(std::abs(double(atEdge[x]) - std::tanh(double(edge[x]))), 3e-7) << edge[x] << " " << fusedIsa();
  // The soft cap's one instruction: 20 tanh(s / 20), within 20 x 3e-7.
  const ScoreRef cap = ScoreExpr::make(
      ScoreOp::Mul, {num(20), ScoreExpr::make(ScoreOp::Tanh, {ScoreExpr::make(ScoreOp::Div, {s(), num(20)}, false)}, false)},
      false);
  const std::vector<float> wide = sweep(-400.0f, 400.0f, 1.0f / 64);
  const std::vector<float> capped = run(*cap, wide);
  worst = 0;
  for (size_t x = 0; x < wide.size(); ++x)
    worst = std::max(worst, std::abs(double(capped[x]) - 20 * std::tanh(double(wide[x]) / 20)));
  EXPECT_LT(worst, 20 * 3e-7 + 4e-6) << fusedIsa(); // (plus the rounding of s / 20 itself)
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = run(*ScoreExpr::make(ScoreOp::Tanh, {s()}, false),
                                         {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f});
  EXPECT_EQ(special[0], 1.0f);
  EXPECT_EQ(special[1], -1.0f);
  EXPECT_TRUE(std::isnan(special[2]));
  EXPECT_EQ(special[3], 0.0f);
}

TEST(ScoreMath, ExpAndLogAreWithinTheirRelativeBounds) {
  const std::vector<float> xs = sweep(-87.0f, 88.0f, 1.0f / 128);
  const std::vector<float> e = run(*ScoreExpr::make(ScoreOp::Exp, {s()}, false), xs);
  double worst = 0;
  for (size_t x = 0; x < xs.size(); ++x) {
    const double want = std::exp(double(xs[x]));
    worst = std::max(worst, std::abs(double(e[x]) - want) / want);
  }
  EXPECT_LT(worst, 4e-7) << fusedIsa();
  std::vector<float> ys;
  for (float y = 1e-37f; y < 1e37f; y *= 1.0137f)
    ys.push_back(y);
  for (float y : {1e-44f, 3e-40f, 1.0f, 2.0f, 0.5f, 1.4142135f, 0.70710677f})
    ys.push_back(y);
  const std::vector<float> l = run(*ScoreExpr::make(ScoreOp::Log, {s()}, false), ys);
  worst = 0;
  for (size_t x = 0; x < ys.size(); ++x) {
    const double want = std::log(double(ys[x]));
    worst = std::max(worst, std::abs(double(l[x]) - want) / std::max(1.0, std::abs(want)));
  }
  EXPECT_LT(worst, 4e-7) << fusedIsa();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logs = run(*ScoreExpr::make(ScoreOp::Log, {s()}, false), {0.0f, -1.0f, inf, nan});
  EXPECT_EQ(logs[0], -inf);
  EXPECT_TRUE(std::isnan(logs[1]));
  EXPECT_EQ(logs[2], inf);
  EXPECT_TRUE(std::isnan(logs[3]));
  const std::vector<float> exps = run(*ScoreExpr::make(ScoreOp::Exp, {s()}, false), {-200.0f, 200.0f, nan});
  EXPECT_LT(exps[0], 1e-37f);
  EXPECT_TRUE(std::isfinite(exps[1]) && exps[1] > 1e38f); // (saturates at e^88)
  EXPECT_TRUE(std::isnan(exps[2]));
}

TEST(ScoreMath, IntegerDivisionAndModuloAreExactBelow2To22) {
  // (i - j) / d and (i - j) % d with j = 0, i random in [-2^22, 2^22], d in [1, 5000].
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> value(-(1 << 22), 1 << 22), divisor(1, 5000);
  std::vector<float> is(4096), ds(4096);
  for (size_t x = 0; x < is.size(); ++x) {
    is[x] = static_cast<float>(value(rng));
    ds[x] = static_cast<float>(divisor(rng));
  }
  const ScoreRef i = ScoreExpr::make(ScoreOp::I, {}, true);
  // The divisor rides in s, floored to an integer (floor(s)).
  const ScoreRef d = ScoreExpr::make(ScoreOp::Floor, {s()}, true);
  const std::vector<float> q = run(*ScoreExpr::make(ScoreOp::IDiv, {i, d}, true), ds, is);
  const std::vector<float> r = run(*ScoreExpr::make(ScoreOp::Mod, {i, d}, true), ds, is);
  for (size_t x = 0; x < is.size(); ++x) {
    const int64_t a = static_cast<int64_t>(is[x]), m = static_cast<int64_t>(ds[x]);
    const int64_t wantQ = a >= 0 ? a / m : -((-a + m - 1) / m);
    ASSERT_EQ(static_cast<int64_t>(q[x]), wantQ) << a << " / " << m << " (" << fusedIsa() << ")";
    ASSERT_EQ(static_cast<int64_t>(r[x]), a - m * wantQ) << a << " % " << m;
  }
}

} // namespace
} // namespace attnc::rt
