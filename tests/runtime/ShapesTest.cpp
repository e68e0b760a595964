//===- ShapesTest.cpp - GQA/MQA, fewer queries than keys, varlen batches ---===//
//
// The shapes of ABI 3 through the public C ABI against a double-precision
// reference written here from the definitions in attnc.h: query head h
// reads key/value head h / (Hq / Hkv); a sequence's nq queries sit at
// positions nk - nq .. nk - 1 of its nk keys (bottom-right alignment); a
// varlen batch is its sequences one by one; dK and dV sum over a group's
// query heads. Membership comes from the brute-force oracle (masks of Sema's
// terms), not from the plan or the closed forms the kernels use. Forward
// (O, lse) and backward (dQ, dK, dV) on ragged lengths, empty and
// one-key sequences, one query (a decoding step, the fused backend's
// row-by-row path) and a quarter of the keys (its tile path on padded rows),
// f32 and bf16, every backend the build has; then empty calls and each error.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

namespace attnc::test {
namespace {

struct PatternCase {
  const char *label;
  const char *file;   ///< a library pattern, or null
  const char *source; ///< inline source when `file` is null
  std::vector<std::string> defines;
  int64_t heads; ///< query heads of the calls (the declared count, if any)
};

void PrintTo(const PatternCase &pc, std::ostream *os) { *os << pc.label; }

const PatternCase kPatterns[] = {
    {"Fixed", "fixed", nullptr, {"l=16", "c=4"}, 8},
    {"Local", "local", nullptr, {"w=5"}, 8},
    {"Causal", "causal", nullptr, {}, 8},
    {"Full", "full", nullptr, {}, 4},
    {"Bigbird", "bigbird", nullptr, {"b=8", "g=1", "r=2"}, 4},
    {"StridedMultihead", "strided_multihead", nullptr, {"l=8"}, 2},
    {"EmptyRows", nullptr, "pattern gaps { attend { j : j < i && i % 3 == 0 } }", {}, 4},
};

KernelPtr compile(const PatternCase &pc, const char *backend) {
  std::string error;
  KernelPtr kernel = jitCompile(pc.file, pc.source, pc.defines, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << pc.label << ": " << error;
  return kernel;
}

/// Forward and gradients in double, straight from the definitions.
struct Reference {
  std::vector<double> o, lse, dq, dk, dv;
};

Reference reference(const PatternCase &pc, const Problem &p, const std::vector<float> &q, const std::vector<float> &k,
                    const std::vector<float> &v, const std::vector<float> &dO) {
  Reference out;
  out.o.assign(p.qSize(), 0.0);
  out.dq.assign(p.qSize(), 0.0);
  out.lse.assign(static_cast<size_t>(p.batch * p.hq * p.nqTotal), 0.0);
  out.dk.assign(p.kSize(), 0.0);
  out.dv.assign(p.kSize(), 0.0);
  std::map<int64_t, std::vector<std::vector<char>>> masks; // per nk
  const int64_t d = p.d, group = p.hq / p.hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (const Seq &s : p.seqs) {
    if (s.nq == 0)
      continue;
    if (!masks.count(s.nk))
      masks[s.nk] = masksFromOracle(pc.file ? patternPath(pc.file) : pc.source, !pc.file, pc.defines, p.hq, s.nk);
    for (int64_t h = 0; h < p.hq; ++h) {
      const std::vector<char> &mask = masks[s.nk][static_cast<size_t>(h)];
      const int64_t g = h / group;
      auto qRow = [&](int64_t r) { return ((s.b * p.hq + h) * p.nqTotal + s.q0 + r) * d; };
      auto kRow = [&](int64_t j) { return ((s.b * p.hkv + g) * p.nkTotal + s.k0 + j) * d; };
      for (int64_t r = 0; r < s.nq; ++r) {
        const int64_t pos = r + (p.firstQuery >= 0 ? p.firstQuery : s.nk - s.nq), qi = qRow(r);
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < s.nk; ++j)
          if (mask[static_cast<size_t>(pos * s.nk + j)])
            keys.push_back(j);
        const size_t lseAt = static_cast<size_t>((s.b * p.hq + h) * p.nqTotal + s.q0 + r);
        if (keys.empty()) {
          out.lse[lseAt] = -std::numeric_limits<double>::infinity();
          continue;
        }
        std::vector<double> sc;
        double best = -INFINITY;
        for (int64_t j : keys) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q[qi + c]) * double(k[kRow(j) + c]);
          sc.push_back(dot * scale);
          best = std::max(best, sc.back());
        }
        double sum = 0;
        for (double x : sc)
          sum += std::exp(x - best);
        const double lse = best + std::log(sum);
        out.lse[lseAt] = lse;
        std::vector<double> prob, dP;
        double delta = 0;
        for (size_t t = 0; t < keys.size(); ++t) {
          prob.push_back(std::exp(sc[t] - lse));
          double dp = 0;
          for (int64_t c = 0; c < d; ++c) {
            out.o[qi + c] += prob[t] * v[kRow(keys[t]) + c];
            dp += double(dO[qi + c]) * double(v[kRow(keys[t]) + c]);
          }
          dP.push_back(dp);
          delta += prob[t] * dp;
        }
        for (size_t t = 0; t < keys.size(); ++t) {
          const double ds = prob[t] * (dP[t] - delta);
          const int64_t kj = kRow(keys[t]);
          for (int64_t c = 0; c < d; ++c) {
            out.dq[qi + c] += scale * ds * k[kj + c];
            out.dk[kj + c] += scale * ds * q[qi + c];
            out.dv[kj + c] += prob[t] * dO[qi + c];
          }
        }
      }
    }
  }
  return out;
}

attnc_tensor tensor(void *data, attnc_dtype dtype, int64_t b, int64_t h, int64_t n, int64_t d) {
  return {data, dtype, {b, h, n, d}, {h * n * d, n * d, d, 1}};
}

/// max |got - want| / (1 + |want|), with NaN counted as infinitely wrong.
double worst(const std::vector<float> &got, const std::vector<double> &want) {
  double e = 0;
  for (size_t x = 0; x < want.size(); ++x) {
    const double diff = std::abs(double(got[x]) - want[x]) / (1 + std::abs(want[x]));
    e = std::max(e, std::isnan(diff) ? INFINITY : diff);
  }
  return e;
}

/// Runs `p` forward (and backward where the backend has it) and compares
/// every output with the reference.
void check(const PatternCase &pc, const char *backend, const Problem &p, attnc_dtype dtype = ATTNC_DTYPE_F32) {
  SCOPED_TRACE(std::string(pc.label) + " on " + backend);
  KernelPtr kernel = compile(pc, backend);
  ASSERT_TRUE(kernel);
  std::vector<float> q = randomFloats(p.qSize(), 1, 1.5f), k = randomFloats(p.kSize(), 2, 1.5f),
                     v = randomFloats(p.kSize(), 3, 1.0f), dO = randomFloats(p.qSize(), 4, 1.0f);
  const bool bf16 = dtype == ATTNC_DTYPE_BF16;
  std::vector<uint16_t> qb, kb, vb, ob, dOb;
  if (bf16) {
    // The reference sees the inputs the kernel sees: rounded to bf16.
    for (auto [src, dst] : {std::pair{&q, &qb}, {&k, &kb}, {&v, &vb}, {&dO, &dOb}})
      for (float &x : *src) {
        dst->push_back(toBf16(x));
        x = fromBf16(dst->back());
      }
  }
  const Reference want = reference(pc, p, q, k, v, dO);
  auto in = [&](std::vector<float> &f, std::vector<uint16_t> &b, int64_t heads, int64_t n) {
    return tensor(bf16 ? static_cast<void *>(b.data()) : f.data(), dtype, p.batch, heads, n, p.d);
  };
  std::vector<float> o(p.qSize(), -7.0f), lse(static_cast<size_t>(p.batch * p.hq * p.nqTotal), -7.0f);
  attnc_tensor tq = in(q, qb, p.hq, p.nqTotal), tk = in(k, kb, p.hkv, p.nkTotal), tv = in(v, vb, p.hkv, p.nkTotal);
  attnc_tensor to = tensor(o.data(), ATTNC_DTYPE_F32, p.batch, p.hq, p.nqTotal, p.d);
  attnc_tensor tl = tensor(lse.data(), ATTNC_DTYPE_F32, p.batch, p.hq, p.nqTotal, 1);
  const attnc_varlen lengths{p.cuQ.data(), p.cuK.data(), static_cast<int64_t>(p.seqs.size())};
  const bool isVarlen = !p.cuQ.empty();
  const bool lseToo = std::string(backend) == "fused" || std::string(backend) == "dense";
  const bool at = p.firstQuery >= 0;
  attnc_status s = isVarlen ? attnc_run_varlen(kernel.get(), &tq, &tk, &tv, &to, lseToo ? &tl : nullptr, &lengths, nullptr)
                   : at     ? attnc_run_forward_at(kernel.get(), p.firstQuery, &tq, &tk, &tv, &to, lseToo ? &tl : nullptr,
                                                   nullptr)
                            : attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, lseToo ? &tl : nullptr, nullptr);
  ASSERT_EQ(s, ATTNC_OK) << attnc_last_error();
  const double tolerance = bf16 ? 2e-2 : 2e-5;
  EXPECT_LT(worst(o, want.o), tolerance);
  if (!lseToo)
    return;
  for (size_t x = 0; x < lse.size(); ++x)
    if (std::isinf(want.lse[x]))
      EXPECT_TRUE(std::isinf(lse[x]) && lse[x] < 0) << "row " << x << " has no keys but lse " << lse[x];
    else
      EXPECT_NEAR(lse[x], want.lse[x], tolerance * (1 + std::abs(want.lse[x]))) << "row " << x;
  // The backward pass from the kernel's own O (rounded to bf16 like the inputs).
  std::vector<float> dq(p.qSize(), -7.0f), dk(p.kSize(), -7.0f), dv(p.kSize(), -7.0f);
  if (bf16)
    for (float x : o)
      ob.push_back(toBf16(x));
  attnc_tensor tO = in(o, ob, p.hq, p.nqTotal), tdO = in(dO, dOb, p.hq, p.nqTotal);
  attnc_tensor tdq = tensor(dq.data(), ATTNC_DTYPE_F32, p.batch, p.hq, p.nqTotal, p.d);
  attnc_tensor tdk = tensor(dk.data(), ATTNC_DTYPE_F32, p.batch, p.hkv, p.nkTotal, p.d);
  attnc_tensor tdv = tensor(dv.data(), ATTNC_DTYPE_F32, p.batch, p.hkv, p.nkTotal, p.d);
  s = isVarlen ? attnc_run_backward_varlen(kernel.get(), &tq, &tk, &tv, &tO, &tdO, &tl, &tdq, &tdk, &tdv, &lengths,
                                           nullptr)
      : at     ? attnc_run_backward_at(kernel.get(), p.firstQuery, &tq, &tk, &tv, &tO, &tdO, &tl, &tdq, &tdk, &tdv,
                                       nullptr)
               : attnc_run_backward(kernel.get(), &tq, &tk, &tv, &tO, &tdO, &tl, &tdq, &tdk, &tdv, nullptr);
  ASSERT_EQ(s, ATTNC_OK) << attnc_last_error();
  const double gradTolerance = bf16 ? 5e-2 : 1e-4;
  EXPECT_LT(worst(dq, want.dq), gradTolerance) << "dQ";
  EXPECT_LT(worst(dk, want.dk), gradTolerance) << "dK";
  EXPECT_LT(worst(dv, want.dv), gradTolerance) << "dV";
}

class Shapes : public ::testing::TestWithParam<std::tuple<PatternCase, const char *>> {
protected:
  const PatternCase &pattern() const { return std::get<0>(GetParam()); }
  const char *backend() const { return std::get<1>(GetParam()); }
};

TEST_P(Shapes, GroupedQueryHeadsMatchReference) {
  for (int64_t hkv : {pattern().heads, pattern().heads / 2, int64_t{1}})
    if (hkv >= 1 && pattern().heads % hkv == 0) {
      SCOPED_TRACE("hkv = " + std::to_string(hkv));
      check(pattern(), backend(), dense(2, pattern().heads, hkv, 61, 61, 16));
    }
}

TEST_P(Shapes, OneQueryAttendsAsTheLastPosition) {
  check(pattern(), backend(), dense(2, pattern().heads, 1, 1, 97, 16));
}

TEST_P(Shapes, SevenQueriesAreTheLastSevenPositions) {
  check(pattern(), backend(), dense(1, pattern().heads, pattern().heads / 2 > 0 ? pattern().heads / 2 : 1, 7, 97, 8));
}

TEST_P(Shapes, AQuarterOfTheKeysAndMoreAreBottomRightAligned) {
  // 1 * 64 <= 97 runs the fused backend row by row; more on padded tiles.
  for (int64_t nq : {1, 2, 24, 25, 60})
    check(pattern(), backend(), dense(1, pattern().heads, 1, nq, 97, 16));
}

TEST_P(Shapes, QueriesAfterManyPaddedBlocksMatchTheReference) {
  // The padded rows before the queries fill several row blocks (and residue
  // class blocks) that the fused backend skips; the queries' first block
  // straddles the padding. Forward and backward against the reference.
  for (int64_t nq : {200, 333, 699})
    check(pattern(), backend(), dense(1, pattern().heads, 1, nq, 700, 16));
}

TEST_P(Shapes, QueriesAtAnyOffsetMatchTheReference) {
  // attnc_run_forward_at / _backward_at: the queries at [first, first + nq)
  // of the nk positions, the pattern evaluated there (keys after them too),
  // on padded rows before and after them (skipped blocks) or row by row
  // where they end at nk; GQA too.
  const int64_t hkv = pattern().heads % 2 == 0 ? pattern().heads / 2 : pattern().heads;
  for (auto [nq, nk, first] : std::vector<std::array<int64_t, 3>>{
           {1, 97, 0}, {7, 97, 40}, {30, 700, 0}, {200, 700, 250}, {333, 700, 100}, {5, 700, 695}, {700, 700, 0}}) {
    SCOPED_TRACE("nq " + std::to_string(nq) + " of nk " + std::to_string(nk) + " from " + std::to_string(first));
    Problem p = dense(1, pattern().heads, hkv, nq, nk, 16);
    p.firstQuery = first;
    check(pattern(), backend(), p);
  }
}

TEST_P(Shapes, VarlenSequencesAttendWithinThemselves) {
  check(pattern(), backend(), varlen(pattern().heads, 1, {{0, 0}, {1, 1}, {37, 37}, {64, 64}, {5, 5}, {0, 0}, {70, 70}}, 16));
}

TEST_P(Shapes, VarlenWithFewerQueriesThanKeysAndGroups) {
  const int64_t hkv = pattern().heads % 2 == 0 ? pattern().heads / 2 : pattern().heads;
  check(pattern(), backend(), varlen(pattern().heads, hkv, {{3, 40}, {0, 9}, {1, 1}, {33, 33}, {1, 50}, {20, 90}}, 8));
}

TEST_P(Shapes, Bf16InputsWithGroupsAndFewerQueries) {
  check(pattern(), backend(), dense(1, pattern().heads, 1, 9, 80, 32), ATTNC_DTYPE_BF16);
}

std::vector<const char *> shapeBackends() { return builtBackends({"fused", "dense", "halide", "sparsifier"}); }

INSTANTIATE_TEST_SUITE_P(Library, Shapes,
                         ::testing::Combine(::testing::ValuesIn(kPatterns), ::testing::ValuesIn(shapeBackends())),
                         [](const auto &info) {
                           return std::string(std::get<0>(info.param).label) + "_" + std::get<1>(info.param);
                         });

// Empty calls and errors, on the fused backend.

class ShapeErrors : public ::testing::Test {
protected:
  void SetUp() override {
    kernel = compile({"Causal", "causal", nullptr, {}, 4}, "fused");
    ASSERT_TRUE(kernel);
  }
  attnc_status run(attnc_tensor q, attnc_tensor k, attnc_tensor v, attnc_tensor o) {
    return attnc_run(kernel.get(), &q, &k, &v, &o, nullptr);
  }
  std::string error() const { return attnc_last_error(); }
  KernelPtr kernel{nullptr, attnc_kernel_free};
  std::vector<float> a = std::vector<float>(4096, 1.0f), b = std::vector<float>(4096, 1.0f),
                     c = std::vector<float>(4096, 1.0f), out = std::vector<float>(4096, 5.0f);
  attnc_tensor t(std::vector<float> &x, int64_t batch, int64_t h, int64_t n, int64_t d) {
    return tensor(x.data(), ATTNC_DTYPE_F32, batch, h, n, d);
  }
};

TEST_F(ShapeErrors, EmptyCallsSucceedAndWriteNothing) {
  EXPECT_EQ(run(t(a, 0, 2, 8, 4), t(b, 0, 2, 8, 4), t(c, 0, 2, 8, 4), t(out, 0, 2, 8, 4)), ATTNC_OK) << error();
  EXPECT_EQ(run(t(a, 1, 2, 0, 4), t(b, 1, 2, 8, 4), t(c, 1, 2, 8, 4), t(out, 1, 2, 0, 4)), ATTNC_OK) << error();
  EXPECT_EQ(run(t(a, 1, 0, 8, 4), t(b, 1, 0, 8, 4), t(c, 1, 0, 8, 4), t(out, 1, 0, 8, 4)), ATTNC_OK) << error();
  attnc_tensor nothing{nullptr, ATTNC_DTYPE_F32, {1, 2, 0, 4}, {0, 0, 0, 0}};
  attnc_tensor keys = t(b, 1, 2, 8, 4);
  EXPECT_EQ(run(nothing, keys, keys, nothing), ATTNC_OK) << "empty tensors may have null data: " << error();
  for (float x : out)
    ASSERT_EQ(x, 5.0f);
}

TEST_F(ShapeErrors, KeysWithoutQueriesGetZeroGradients) {
  std::vector<float> lse(64, 0.0f), dq(16, 3.0f), dk(4096, 3.0f), dv(4096, 3.0f);
  attnc_tensor q = t(a, 1, 2, 0, 4), k = t(b, 1, 2, 8, 4), tl = tensor(lse.data(), ATTNC_DTYPE_F32, 1, 2, 0, 1);
  attnc_tensor tdq = t(dq, 1, 2, 0, 4), tdk = t(dk, 1, 2, 8, 4), tdv = t(dv, 1, 2, 8, 4);
  ASSERT_EQ(attnc_run_backward(kernel.get(), &q, &k, &k, &q, &q, &tl, &tdq, &tdk, &tdv, nullptr), ATTNC_OK) << error();
  for (size_t x = 0; x < 64; ++x)
    ASSERT_EQ(dk[x], 0.0f) << x;
  ASSERT_EQ(dv[0], 0.0f);
  ASSERT_EQ(dk[64], 3.0f) << "past the tensor: untouched";
}

TEST_F(ShapeErrors, ZeroHeadDimensionIsAShapeError) {
  EXPECT_EQ(run(t(a, 1, 2, 8, 0), t(b, 1, 2, 8, 0), t(c, 1, 2, 8, 0), t(out, 1, 2, 8, 0)), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("head dimension d"), std::string::npos) << error();
}

TEST_F(ShapeErrors, QueryHeadsMustBeAMultipleOfKeyHeads) {
  EXPECT_EQ(run(t(a, 1, 6, 8, 4), t(b, 1, 4, 8, 4), t(c, 1, 4, 8, 4), t(out, 1, 6, 8, 4)), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("'q' has 6 heads and 'k' 4"), std::string::npos) << error();
}

TEST_F(ShapeErrors, MoreQueriesThanKeysIsAShapeError) {
  EXPECT_EQ(run(t(a, 1, 2, 9, 4), t(b, 1, 2, 8, 4), t(c, 1, 2, 8, 4), t(out, 1, 2, 9, 4)), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("nq <= nk"), std::string::npos) << error();
  EXPECT_EQ(run(t(a, 1, 2, 3, 4), t(b, 1, 2, 0, 4), t(c, 1, 2, 0, 4), t(out, 1, 2, 3, 4)), ATTNC_ERROR_SHAPE);
}

TEST_F(ShapeErrors, QueriesAtAnOffsetMustSitInsideTheKeys) {
  std::vector<float> lse(64, 0.0f);
  attnc_tensor q = t(a, 1, 2, 3, 4), k = t(b, 1, 2, 8, 4), o = t(out, 1, 2, 3, 4);
  attnc_tensor tl = tensor(lse.data(), ATTNC_DTYPE_F32, 1, 2, 3, 1);
  EXPECT_EQ(attnc_run_forward_at(kernel.get(), 5, &q, &k, &k, &o, &tl, nullptr), ATTNC_OK) << error();
  EXPECT_EQ(attnc_run_forward_at(kernel.get(), 6, &q, &k, &k, &o, &tl, nullptr), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("first_query is 6: the 3 queries must sit inside the 8 key positions, so it must lie in [0, 5]"),
            std::string::npos)
      << error();
  EXPECT_EQ(attnc_run_forward_at(kernel.get(), -1, &q, &k, &k, &o, &tl, nullptr), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("must not be negative"), std::string::npos) << error();
  std::vector<float> dq(4096), dk(4096), dv(4096);
  attnc_tensor tdq = t(dq, 1, 2, 3, 4), tdk = t(dk, 1, 2, 8, 4), tdv = t(dv, 1, 2, 8, 4);
  EXPECT_EQ(attnc_run_backward_at(kernel.get(), 9, &q, &k, &k, &o, &o, &tl, &tdq, &tdk, &tdv, nullptr),
            ATTNC_ERROR_SHAPE);
  EXPECT_EQ(attnc_run_backward_at(nullptr, 0, &q, &k, &k, &o, &o, &tl, &tdq, &tdk, &tdv, nullptr),
            ATTNC_ERROR_INVALID_ARGUMENT);
}

TEST_F(ShapeErrors, KeysAndValuesMustAgree) {
  EXPECT_EQ(run(t(a, 1, 2, 8, 4), t(b, 1, 2, 8, 4), t(c, 1, 2, 7, 4), t(out, 1, 2, 8, 4)), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("tensor 'v' has shape [1, 2, 7, 4] but 'k' has [1, 2, 8, 4]"), std::string::npos) << error();
  EXPECT_EQ(run(t(a, 1, 2, 8, 4), t(b, 2, 2, 8, 4), t(c, 2, 2, 8, 4), t(out, 1, 2, 8, 4)), ATTNC_ERROR_SHAPE);
  EXPECT_EQ(run(t(a, 1, 2, 8, 4), t(b, 1, 2, 8, 3), t(c, 1, 2, 8, 3), t(out, 1, 2, 8, 4)), ATTNC_ERROR_SHAPE);
}

TEST_F(ShapeErrors, SizesThatOverflowAreShapeErrors) {
  const int64_t huge = int64_t{1} << 40;
  attnc_tensor q{a.data(), ATTNC_DTYPE_F32, {huge, huge, 8, 4}, {huge * 32, 32, 4, 1}};
  EXPECT_EQ(run(q, q, q, q), ATTNC_ERROR_SHAPE);
  attnc_tensor wide{a.data(), ATTNC_DTYPE_F32, {1, 1, 8, 4}, {1, 1, INT64_MAX / 2, 1}};
  EXPECT_EQ(run(wide, wide, wide, t(out, 1, 1, 8, 4)), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("reaches past the end of the address space"), std::string::npos) << error();
  attnc_tensor negative = t(a, 1, 2, -8, 4);
  EXPECT_EQ(run(negative, negative, negative, negative), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("must not be negative"), std::string::npos) << error();
}

TEST_F(ShapeErrors, VarlenOffsetsAreChecked) {
  attnc_tensor q = t(a, 1, 2, 10, 4), k = t(b, 1, 2, 12, 4), o = t(out, 1, 2, 10, 4);
  auto runVarlen = [&](std::vector<int32_t> cq, std::vector<int32_t> ck, int64_t count, attnc_tensor qq,
                       attnc_tensor kk) {
    const attnc_varlen lengths{cq.data(), ck.empty() ? nullptr : ck.data(), count};
    attnc_tensor oo = qq;
    oo.data = out.data();
    return attnc_run_varlen(kernel.get(), &qq, &kk, &kk, &oo, nullptr, &lengths, nullptr);
  };
  EXPECT_EQ(runVarlen({0, 4, 10}, {0, 6, 12}, 2, q, k), ATTNC_OK) << error();
  EXPECT_EQ(runVarlen({1, 4, 10}, {0, 6, 12}, 2, q, k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("cu_seqlens_q[0] is 1"), std::string::npos) << error();
  EXPECT_EQ(runVarlen({0, 6, 4, 10}, {0, 6, 6, 12}, 3, q, k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("cu_seqlens_q decreases at 2: 6 then 4"), std::string::npos) << error();
  EXPECT_EQ(runVarlen({0, 4, 9}, {0, 6, 12}, 2, q, k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("cu_seqlens_q ends at 9 but 'q' has 10 rows"), std::string::npos) << error();
  EXPECT_EQ(runVarlen({0, 8, 10}, {0, 6, 12}, 2, q, k), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("sequence 0 has 8 queries but 6 keys"), std::string::npos) << error();
  EXPECT_EQ(runVarlen({0, 4, 10}, {}, 2, q, k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(error().find("pass cu_seqlens_k"), std::string::npos) << error();
  EXPECT_EQ(runVarlen({0, 4, 10}, {0, 6, 12}, -1, q, k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(runVarlen({0, 2, 5}, {0, 3, 6}, 2, t(a, 2, 2, 5, 4), t(b, 2, 2, 6, 4)), ATTNC_ERROR_SHAPE);
  EXPECT_NE(error().find("batch (dimension 0) must be 1"), std::string::npos) << error();
  EXPECT_EQ(attnc_run_varlen(kernel.get(), &q, &k, &k, &o, nullptr, nullptr, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
}

} // namespace
} // namespace attnc::test
