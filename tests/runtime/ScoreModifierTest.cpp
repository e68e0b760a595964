//===- ScoreModifierTest.cpp - score and sink, end to end -----------------===//
//
// Kernels of patterns with `score` and `sink` (ALiBi, soft-capping, sinks,
// relative-bias tables), JIT-compiled and called through attnc_forward /
// attnc_backward, against attention in double written here: the mask, the
// score and the sink are C++ lambdas (not attnc's evaluators), dQ, dK and dV
// come from the chain rule with the score's derivative taken numerically,
// and the float inputs' gradients from central differences of the
// reference's loss sum(O * dO). Ragged lengths, rows with one key, extreme
// logits, GQA and batches, bf16, decoding rows, residue classes and data
// patterns; and the errors of bad float inputs. ctest runs it again with
// each instruction set forced (tests/runtime/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace attnc::test {
namespace {

/// The pattern as the reference sees it: whether query i attends key j, the
/// modified score, the sink logit (none: -inf), all given the float inputs'
/// values (flat, in declaration order).
struct Model {
  std::function<bool(int64_t i, int64_t j)> mask;
  std::function<double(double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p)> score;
  std::function<double(int64_t i, int64_t h, const std::vector<double> &p)> sink;
  /// Where set, the mask of head h (per-head patterns), instead of `mask`.
  std::function<bool(int64_t i, int64_t j, int64_t h)> headMask = nullptr;
};

using Reference = AttentionInDouble;

/// Attention in double over one problem (TestSupport's attentionInDouble)
/// with the model's modifiers at the float inputs' values `params`.
Reference reference(const Model &m, const std::vector<double> &params, const std::vector<float> &q,
                    const std::vector<float> &k, const std::vector<float> &v, const std::vector<float> &dO,
                    int64_t batch, int64_t hq, int64_t hkv, int64_t nq, int64_t n, int64_t d, bool grads) {
  ScoredAttention a;
  a.mask = [&](int64_t slice, int64_t i, int64_t j) { return m.headMask ? m.headMask(i, j, slice % hq) : m.mask(i, j); };
  if (m.score)
    a.score = [&](double s, int64_t i, int64_t j, int64_t h) { return m.score(s, i, j, h, params); };
  if (m.sink)
    a.sink = [&](int64_t i, int64_t h) { return m.sink(i, h, params); };
  return attentionInDouble(a, q, k, v, dO, batch, hq, hkv, nq, n, d, grads);
}

double maxError(const std::vector<float> &got, const std::vector<double> &want) {
  double e = 0;
  for (size_t x = 0; x < got.size(); ++x)
    e = std::max(e, std::abs(double(got[x]) - want[x]));
  return e;
}

KernelPtr compileSource(const std::string &source, const char *backend = "fused") {
  std::string error;
  KernelPtr kernel = jitCompile(nullptr, source.c_str(), {}, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << error;
  return kernel;
}

/// A contiguous f32 tensor of `dims` (then 1s) over `values`.
attnc_tensor floatTensor(std::vector<float> &values, std::vector<int64_t> dims) {
  attnc_tensor t{};
  t.data = values.data();
  t.dtype = ATTNC_DTYPE_F32;
  dims.resize(4, 1);
  int64_t stride = 1;
  for (int a = 3; a >= 0; --a) {
    t.shape[a] = dims[static_cast<size_t>(a)];
    t.strides[a] = stride;
    stride *= dims[static_cast<size_t>(a)];
  }
  return t;
}

std::vector<uint16_t> bf16Of(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  for (size_t e = 0; e < x.size(); ++e)
    out[e] = toBf16(x[e]);
  return out;
}

std::vector<float> roundedToBf16(const std::vector<float> &x) {
  std::vector<float> out(x.size());
  for (size_t e = 0; e < x.size(); ++e)
    out[e] = fromBf16(toBf16(x[e]));
  return out;
}

attnc_tensor viewBf16(std::vector<uint16_t> &data, int64_t batch, int64_t heads, int64_t n, int64_t d) {
  std::vector<float> none;
  attnc_tensor t = view(none, batch, heads, n, d);
  t.data = data.data();
  t.dtype = ATTNC_DTYPE_BF16;
  return t;
}

/// A float input of the call and, for the backward, its gradient's tensor.
struct FloatArg {
  std::string name;
  std::vector<int64_t> dims;
  std::vector<float> values, grad;
};

/// One problem: shapes, tensors, float inputs and what the kernels gave.
struct ScoreRun {
  int64_t batch = 1, hq = 2, hkv = 2, nq = 0, n = 0, d = 16;
  std::vector<float> q, k, v, dO, o, lse, dq, dk, dv;
  std::vector<FloatArg> floats;
  std::vector<attnc_input> intInputs; ///< a data pattern's, as they are
  attnc_dtype dtype = ATTNC_DTYPE_F32;
  bool inputGrads = true; ///< the backward pass asks for the float inputs' gradients

  ScoreRun(int64_t batch, int64_t hq, int64_t hkv, int64_t nq, int64_t n, int64_t d, uint32_t seed, float qScale = 1)
      : batch(batch), hq(hq), hkv(hkv), nq(nq), n(n), d(d) {
    q = randomFloats(static_cast<size_t>(batch * hq * nq * d), seed, qScale);
    k = randomFloats(static_cast<size_t>(batch * hkv * n * d), seed + 1, 1.0f);
    v = randomFloats(static_cast<size_t>(batch * hkv * n * d), seed + 2, 1.0f);
    dO = randomFloats(static_cast<size_t>(batch * hq * nq * d), seed + 3, 1.0f);
  }

  std::vector<double> params() const {
    std::vector<double> p;
    for (const FloatArg &f : floats)
      p.insert(p.end(), f.values.begin(), f.values.end());
    return p;
  }

  /// The call's inputs: intInputs, then the float ones (and their
  /// gradients' tensors).
  void describe(std::vector<attnc_input> &inputs, std::vector<attnc_input> &gradInputs) {
    inputs = intInputs;
    for (FloatArg &f : floats) {
      inputs.push_back({f.name.c_str(), floatTensor(f.values, f.dims)});
      f.grad.assign(f.values.size(), -7.0f);
      gradInputs.push_back({f.name.c_str(), floatTensor(f.grad, f.dims)});
    }
  }

  attnc_status forward(const attnc_kernel *kernel) {
    std::vector<attnc_input> inputs, grads;
    describe(inputs, grads);
    o.assign(q.size(), -7.0f);
    lse.assign(static_cast<size_t>(batch * hq * nq), -7.0f);
    std::vector<uint16_t> qb, kb, vb;
    attnc_tensor tq = view(q, batch, hq, nq, d), tk = view(k, batch, hkv, n, d), tv = view(v, batch, hkv, n, d),
                 to = view(o, batch, hq, nq, d), tl = view(lse, batch, hq, nq, 1);
    if (dtype == ATTNC_DTYPE_BF16) {
      qb = bf16Of(q);
      kb = bf16Of(k);
      vb = bf16Of(v);
      tq = viewBf16(qb, batch, hq, nq, d);
      tk = viewBf16(kb, batch, hkv, n, d);
      tv = viewBf16(vb, batch, hkv, n, d);
    }
    attnc_call c;
    attnc_call_init(&c);
    c.q = &tq;
    c.k = &tk;
    c.v = &tv;
    c.o = &to;
    c.lse = &tl;
    c.inputs = inputs.data();
    c.num_inputs = static_cast<int64_t>(inputs.size());
    return attnc_forward(kernel, &c);
  }

  attnc_status backward(const attnc_kernel *kernel) {
    std::vector<attnc_input> inputs, grads;
    describe(inputs, grads);
    dq.assign(q.size(), -7.0f);
    dk.assign(k.size(), -7.0f);
    dv.assign(v.size(), -7.0f);
    attnc_tensor tq = view(q, batch, hq, nq, d), tk = view(k, batch, hkv, n, d), tv = view(v, batch, hkv, n, d),
                 to = view(o, batch, hq, nq, d), tl = view(lse, batch, hq, nq, 1), tdo = view(dO, batch, hq, nq, d),
                 tdq = view(dq, batch, hq, nq, d), tdk = view(dk, batch, hkv, n, d), tdv = view(dv, batch, hkv, n, d);
    attnc_call c;
    attnc_call_init(&c);
    c.q = &tq;
    c.k = &tk;
    c.v = &tv;
    c.o = &to;
    c.lse = &tl;
    c.d_o = &tdo;
    c.d_q = &tdq;
    c.d_k = &tdk;
    c.d_v = &tdv;
    c.inputs = inputs.data();
    c.num_inputs = static_cast<int64_t>(inputs.size());
    c.d_inputs = inputGrads ? grads.data() : nullptr;
    c.num_d_inputs = inputGrads ? static_cast<int64_t>(grads.size()) : 0;
    return attnc_backward(kernel, &c);
  }

  /// Both passes against the reference; the float inputs' gradients
  /// against central differences of its loss.
  void check(const attnc_kernel *kernel, const Model &m, const std::string &what, double tol = 3e-5) {
    ASSERT_EQ(forward(kernel), ATTNC_OK) << what << ": " << attnc_last_error();
    const std::vector<double> p = params();
    const Reference r = reference(m, p, q, k, v, dO, batch, hq, hkv, nq, n, d, true);
    EXPECT_LT(maxError(o, r.o), tol) << what << " (O)";
    for (size_t x = 0; x < lse.size(); ++x) {
      if (std::isinf(r.lse[x]))
        EXPECT_TRUE(std::isinf(lse[x]) && lse[x] < 0) << what << ": row " << x << " has no key, lse " << lse[x];
      else
        EXPECT_NEAR(lse[x], r.lse[x], tol * std::max(1.0, std::abs(r.lse[x]))) << what << " (lse row " << x << ")";
    }
    if (dtype != ATTNC_DTYPE_F32)
      return; // (the backward pass takes f32)
    ASSERT_EQ(backward(kernel), ATTNC_OK) << what << ": " << attnc_last_error();
    EXPECT_LT(maxError(dq, r.dq), 4 * tol) << what << " (dQ)";
    EXPECT_LT(maxError(dk, r.dk), 4 * tol) << what << " (dK)";
    EXPECT_LT(maxError(dv, r.dv), 4 * tol) << what << " (dV)";
    size_t at = 0;
    for (const FloatArg &f : floats)
      for (size_t e = 0; e < f.values.size() && inputGrads; ++e, ++at) {
        std::vector<double> up = p, down = p;
        const double eps = 1e-4;
        up[at] += eps;
        down[at] -= eps;
        const double want = (reference(m, up, q, k, v, dO, batch, hq, hkv, nq, n, d, false).loss -
                             reference(m, down, q, k, v, dO, batch, hq, hkv, nq, n, d, false).loss) /
                            (2 * eps);
        EXPECT_NEAR(f.grad[e], want, 1e-3 * std::max(1.0, std::abs(want)))
            << what << ": d loss / d " << f.name << "[" << e << "]";
      }
  }
};

// The issue's three contract patterns, exactly as written there.
const char *kAlibiLocal = R"(
pattern alibi_local { param w = 96  input slope : float[heads]  causal
  attend { j : i - j < w }  score s + slope[h] * (j - i) }
)";
const char *kCappedFixed = R"(
pattern capped_fixed { param l = 64  param c = 8  param cap = 20  causal
  attend { j : j / l == i / l } | { j : j % l >= l - c }  score cap * tanh(s / cap) }
)";
const char *kSinkWindow = R"(
pattern sink_window { param w = 128  input z : float[heads]  causal
  attend { j : i - j < w }  sink z[h] }
)";

Model alibiModel(int64_t w) {
  return {[=](int64_t i, int64_t j) { return j <= i && i - j < w; },
          [](double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p) {
            return s + p[static_cast<size_t>(h)] * double(j - i);
          },
          nullptr};
}

Model cappedModel(int64_t l, int64_t c, double cap) {
  return {[=](int64_t i, int64_t j) { return j <= i && (j / l == i / l || j % l >= l - c); },
          [=](double s, int64_t, int64_t, int64_t, const std::vector<double> &) { return cap * std::tanh(s / cap); },
          nullptr};
}

Model sinkModel(int64_t w) {
  return {[=](int64_t i, int64_t j) { return j <= i && i - j < w; }, nullptr,
          [](int64_t, int64_t h, const std::vector<double> &p) { return p[static_cast<size_t>(h)]; }};
}

std::vector<float> values(std::initializer_list<float> v) { return std::vector<float>(v); }

class ScoreLengths : public ::testing::TestWithParam<int64_t> {};

TEST_P(ScoreLengths, AlibiLocalMatchesReferenceWithSlopeGradients) {
  const int64_t n = GetParam();
  KernelPtr kernel = compileSource(kAlibiLocal);
  ASSERT_TRUE(kernel);
  ScoreRun run(1, 3, 3, n, n, 16, 3);
  run.floats.push_back({"slope", {3}, values({0.5f, 0.125f, -0.0625f}), {}});
  run.check(kernel.get(), alibiModel(96), "alibi_local n=" + std::to_string(n));
}

TEST_P(ScoreLengths, CappedFixedMatchesReference) {
  const int64_t n = GetParam();
  KernelPtr kernel = compileSource(kCappedFixed);
  ASSERT_TRUE(kernel);
  ScoreRun run(2, 2, 2, n, n, 32, 7);
  run.check(kernel.get(), cappedModel(64, 8, 20), "capped_fixed n=" + std::to_string(n));
}

TEST_P(ScoreLengths, SinkWindowMatchesReferenceWithSinkGradients) {
  const int64_t n = GetParam();
  KernelPtr kernel = compileSource(kSinkWindow);
  ASSERT_TRUE(kernel);
  ScoreRun run(1, 3, 3, n, n, 16, 9);
  run.floats.push_back({"z", {3}, values({0.7f, -1.5f, 2.5f}), {}});
  run.check(kernel.get(), sinkModel(128), "sink_window n=" + std::to_string(n));
}

INSTANTIATE_TEST_SUITE_P(Ragged, ScoreLengths, ::testing::Values(1, 2, 63, 200, 777));

TEST(ScoreModifiers, ExtremeLogitsStayFiniteUnderTheCapAndTheSink) {
  // Logits of ~1000: the cap keeps them within +-20; sinks of +50 and -50
  // take almost all or none of a row's weight.
  KernelPtr capped = compileSource(kCappedFixed);
  ASSERT_TRUE(capped);
  ScoreRun run(1, 2, 2, 150, 150, 16, 21, 250.0f);
  run.check(capped.get(), cappedModel(64, 8, 20), "capped_fixed, logits x250", 2e-4);
  for (float o : run.o)
    ASSERT_TRUE(std::isfinite(o));
  KernelPtr sink = compileSource(kSinkWindow);
  ASSERT_TRUE(sink);
  ScoreRun big(1, 2, 2, 130, 130, 16, 23, 30.0f);
  big.floats.push_back({"z", {2}, values({50.0f, -50.0f}), {}});
  big.check(sink.get(), sinkModel(128), "sink_window, sinks +-50, logits x30", 2e-4);
  for (float o : big.o)
    ASSERT_TRUE(std::isfinite(o));
}

TEST(ScoreModifiers, RelativeBiasTableGetsGradientsPerBucket) {
  // A T5-style table: a bias per head and distance bucket (exact up to 3,
  // then one bucket per doubling, the last one open), read per pair.
  const char *source = R"(
pattern rel_bias {
  param w = 40
  input rel : float[heads, 6]
  causal
  attend { j : i - j < w }
  score s + rel[h, where(i - j < 4, i - j, min(floor(log(i - j) / log(2)) + 2, 5))]
}
)";
  KernelPtr kernel = compileSource(source);
  ASSERT_TRUE(kernel);
  auto bucket = [](int64_t dist) -> size_t {
    if (dist < 4)
      return static_cast<size_t>(dist);
    int64_t b = 2;
    while ((int64_t{1} << (b - 1)) <= dist && b < 6)
      ++b;
    return static_cast<size_t>(std::min<int64_t>(b, 5));
  };
  // (floor(log2(dist)) + 2 for dist >= 4: 4..7 -> 4, 8.. -> 5.)
  Model m{[](int64_t i, int64_t j) { return j <= i && i - j < 40; },
          [&](double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p) {
            const int64_t dist = i - j;
            const size_t b = dist < 4 ? static_cast<size_t>(dist)
                                      : static_cast<size_t>(std::min<int64_t>(
                                            static_cast<int64_t>(std::floor(std::log2(double(dist)))) + 2, 5));
            (void)bucket;
            return s + p[static_cast<size_t>(h) * 6 + b];
          },
          nullptr};
  ScoreRun run(1, 2, 2, 90, 90, 16, 31);
  run.floats.push_back({"rel", {2, 6}, randomFloats(12, 77, 1.0f), {}});
  run.check(kernel.get(), m, "relative bias");
}

TEST(ScoreModifiers, BiasesOfTheDistanceWithoutTheirInputsGradients) {
  // ALiBi's slope[h] * (j - i) and a T5 table are tabulated by distance and
  // added in the tile kernels' registers; a backward pass that asks for dQ,
  // dK and dV alone sums nothing by distance (and writes nowhere for it).
  KernelPtr alibi = compileSource(kAlibiLocal);
  ASSERT_TRUE(alibi);
  ScoreRun run(2, 4, 2, 777, 777, 16, 71);
  run.floats.push_back({"slope", {4}, values({0.5f, 0.25f, 0.125f, 0.0625f}), {}});
  run.inputGrads = false;
  run.check(alibi.get(), alibiModel(96), "alibi_local, no input gradients");
  for (float g : run.floats[0].grad)
    EXPECT_EQ(g, -7.0f) << "a gradient not asked for was written";
  KernelPtr t5 = compileSource(R"(
pattern rel { input rel : float[heads, 8]  causal  attend { j : i - j < 64 }  score s + rel[h, min(i - j, 7)] }
)");
  ASSERT_TRUE(t5);
  Model m{[](int64_t i, int64_t j) { return j <= i && i - j < 64; },
          [](double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p) {
            return s + p[static_cast<size_t>(h * 8 + std::min<int64_t>(i - j, 7))];
          },
          nullptr};
  ScoreRun t(1, 2, 2, 300, 300, 16, 73);
  t.floats.push_back({"rel", {2, 8}, randomFloats(16, 74, 1.0f), {}});
  t.inputGrads = false;
  t.check(t5.get(), m, "T5 table, no input gradients");
  t.inputGrads = true;
  t.check(t5.get(), m, "T5 table, with them");
}

TEST(ScoreModifiers, ABiasTableWithDistancesOutsideItsInput) {
  // The bias of a distance alone is tabulated per slice over every distance
  // (ScoreProgram's float tables); here the distances 2 mod 3 (and many
  // past the window) read rel[20], outside it: holes in the table that no
  // pair of the pattern may reach, and one that does fails naming its read.
  const char *source = R"(
pattern holes {
  input rel : float[15]
  causal
  attend { j : i - j < 30 } - { j : (i - j) % 3 == 2 }
  score s + rel[(i - j) % 3 * 10]
}
)";
  KernelPtr kernel = compileSource(source);
  ASSERT_TRUE(kernel);
  Model m{[](int64_t i, int64_t j) { return j <= i && i - j < 30 && (i - j) % 3 != 2; },
          [](double s, int64_t i, int64_t j, int64_t, const std::vector<double> &p) {
            return s + p[static_cast<size_t>((i - j) % 3 * 10)];
          },
          nullptr};
  ScoreRun run(1, 2, 2, 150, 150, 16, 61);
  run.floats.push_back({"rel", {15}, randomFloats(15, 62, 1.0f), {}});
  run.check(kernel.get(), m, "a bias table with holes");
  KernelPtr reaches = compileSource(R"(
pattern reaches {
  input rel : float[15]
  causal
  attend { j : i - j < 30 }
  score s + rel[(i - j) % 3 * 10]
}
)");
  ASSERT_TRUE(reaches);
  EXPECT_EQ(run.forward(reaches.get()), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("rel[20] at query i = "), std::string::npos) << attnc_last_error();
}

TEST(ScoreModifiers, GqaBatchAndBf16) {
  KernelPtr kernel = compileSource(kAlibiLocal);
  ASSERT_TRUE(kernel);
  ScoreRun run(2, 4, 2, 300, 300, 32, 41);
  run.floats.push_back({"slope", {4}, values({0.25f, 0.5f, 1.0f, 2.0f}), {}});
  run.check(kernel.get(), alibiModel(96), "alibi_local GQA 4/2, batch 2");
  ScoreRun bf(1, 2, 2, 200, 200, 32, 43);
  bf.floats.push_back({"slope", {2}, values({0.25f, 0.5f}), {}});
  bf.dtype = ATTNC_DTYPE_BF16;
  // The reference reads the same bf16-rounded q, k and v.
  for (auto *x : {&bf.q, &bf.k, &bf.v})
    *x = roundedToBf16(*x);
  bf.check(kernel.get(), alibiModel(96), "alibi_local bf16", 5e-5);
}

TEST(ScoreModifiers, DecodingRowsAtTheEndOfTheKeys) {
  // A few queries at the end of many keys run row by row (a decoding step).
  KernelPtr alibi = compileSource(kAlibiLocal);
  ASSERT_TRUE(alibi);
  ScoreRun run(1, 2, 2, 3, 640, 16, 51);
  run.floats.push_back({"slope", {2}, values({0.3f, 0.05f}), {}});
  run.check(alibi.get(), alibiModel(96), "alibi_local, 3 queries of 640 keys");
  KernelPtr sink = compileSource(kSinkWindow);
  ASSERT_TRUE(sink);
  ScoreRun last(1, 2, 2, 1, 700, 16, 53);
  last.floats.push_back({"z", {2}, values({1.0f, -0.5f}), {}});
  last.check(sink.get(), sinkModel(128), "sink_window, 1 query of 700 keys");
}

TEST(ScoreModifiers, ResidueClassesSeeTruePositions) {
  // strided's residue classes run on gathered rows and keys: a score of
  // i and j must still see the pairs' positions.
  const char *source = R"(
pattern strided_alibi {
  param l = 16
  input slope : float[heads]
  causal
  attend { j : i - j < l } | { j : (i - j) % l == 0 }
  score s + slope[h] * (j - i) + 0.01 * (i % 7)
}
)";
  KernelPtr kernel = compileSource(source);
  ASSERT_TRUE(kernel);
  ScoreRun run(1, 2, 2, 500, 500, 16, 61);
  run.floats.push_back({"slope", {2}, values({0.02f, 0.1f}), {}});
  Model m{[](int64_t i, int64_t j) { return j <= i && (i - j < 16 || (i - j) % 16 == 0); },
          [](double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p) {
            return s + p[static_cast<size_t>(h)] * double(j - i) + 0.01 * double(i % 7);
          },
          nullptr};
  run.check(kernel.get(), m, "strided + score of i and j");
}

TEST(ScoreModifiers, DenseBaselineTakesScoresToo) {
  KernelPtr kernel = compileSource(kCappedFixed, "dense");
  ASSERT_TRUE(kernel);
  ScoreRun run(1, 2, 2, 130, 130, 16, 71, 20.0f);
  run.check(kernel.get(), cappedModel(64, 8, 20), "capped_fixed on the dense baseline", 1e-4);
}

TEST(ScoreModifiers, BadFloatInputsAreRefusedNamingThem) {
  KernelPtr kernel = compileSource(kAlibiLocal);
  ASSERT_TRUE(kernel);
  EXPECT_EQ(attnc_kernel_modifiers(kernel.get()), ATTNC_MODIFIER_SCORE);
  attnc_input_info info{};
  info.size = sizeof info;
  ASSERT_EQ(attnc_kernel_input_info(kernel.get(), 0, 100, 5, &info), ATTNC_OK) << attnc_last_error();
  EXPECT_STREQ(info.name, "slope");
  EXPECT_EQ(info.is_float, 1);
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.dims[0], 5);
  ScoreRun run(1, 2, 2, 40, 40, 16, 81);
  // Missing.
  EXPECT_EQ(run.forward(kernel.get()), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("slope"), std::string::npos) << attnc_last_error();
  // Wrong shape: one slope for two heads.
  run.floats.push_back({"slope", {1}, values({0.5f}), {}});
  EXPECT_EQ(run.forward(kernel.get()), ATTNC_ERROR_SHAPE);
  EXPECT_NE(std::string(attnc_last_error()).find("[2, 1, 1, 1]"), std::string::npos) << attnc_last_error();
  // Int values for a float input.
  std::vector<int32_t> ints{1, 2};
  attnc_tensor ti{};
  ti.data = ints.data();
  ti.dtype = ATTNC_DTYPE_I32;
  ti.shape[0] = 2;
  ti.shape[1] = ti.shape[2] = ti.shape[3] = 1;
  ti.strides[0] = ti.strides[1] = ti.strides[2] = ti.strides[3] = 1;
  attnc_input in{"slope", ti};
  std::vector<float> q = run.q, o(run.q.size());
  attnc_tensor tq = view(run.q, 1, 2, 40, 16), tk = view(run.k, 1, 2, 40, 16), tv = view(run.v, 1, 2, 40, 16),
               to = view(o, 1, 2, 40, 16);
  attnc_call c;
  attnc_call_init(&c);
  c.q = &tq;
  c.k = &tk;
  c.v = &tv;
  c.o = &to;
  c.inputs = &in;
  c.num_inputs = 1;
  EXPECT_EQ(attnc_forward(kernel.get(), &c), ATTNC_ERROR_DTYPE);
  EXPECT_NE(std::string(attnc_last_error()).find("float input"), std::string::npos) << attnc_last_error();
  // d_inputs in a forward call.
  std::vector<float> slope{0.5f, 0.25f}, grad(2);
  attnc_input good{"slope", floatTensor(slope, {2})}, dgood{"slope", floatTensor(grad, {2})};
  c.inputs = &good;
  c.d_inputs = &dgood;
  c.num_d_inputs = 1;
  EXPECT_EQ(attnc_forward(kernel.get(), &c), ATTNC_ERROR_INVALID_ARGUMENT);
  c.d_inputs = nullptr;
  c.num_d_inputs = 0;
  EXPECT_EQ(attnc_forward(kernel.get(), &c), ATTNC_OK) << attnc_last_error();
}

TEST(ScoreModifiers, BadGradientTensorsAndInfoQueriesAreRefused) {
  KernelPtr kernel = compileSource(kAlibiLocal);
  ASSERT_TRUE(kernel);
  ScoreRun run(1, 2, 2, 40, 40, 16, 99);
  run.floats.push_back({"slope", {2}, values({0.5f, 0.25f}), {}});
  ASSERT_EQ(run.forward(kernel.get()), ATTNC_OK) << attnc_last_error();
  // Each bad d_inputs, with the gradients left as they were (nothing computed).
  std::vector<float> grad(2, -7.0f), wrongShape(3, -7.0f);
  std::vector<uint16_t> bf16(2);
  attnc_tensor bfTensor = floatTensor(grad, {2});
  bfTensor.data = bf16.data();
  bfTensor.dtype = ATTNC_DTYPE_BF16;
  attnc_tensor negative = floatTensor(grad, {2});
  negative.strides[0] = -1;
  const struct {
    std::vector<attnc_input> grads;
    attnc_status status;
    const char *says;
  } cases[] = {
      {{{"nope", floatTensor(grad, {2})}}, ATTNC_ERROR_INVALID_ARGUMENT, "not a float input"},
      {{{"slope", floatTensor(grad, {2})}, {"slope", floatTensor(grad, {2})}}, ATTNC_ERROR_INVALID_ARGUMENT, "twice"},
      {{{"slope", floatTensor(wrongShape, {3})}}, ATTNC_ERROR_SHAPE, "the input's shape [2, 1, 1, 1]"},
      {{{"slope", bfTensor}}, ATTNC_ERROR_DTYPE, "must be f32"},
      {{{"slope", negative}}, ATTNC_ERROR_STRIDE, "stride"},
      {{{nullptr, floatTensor(grad, {2})}}, ATTNC_ERROR_INVALID_ARGUMENT, "no name"},
  };
  for (const auto &c : cases) {
    std::vector<attnc_input> inputs{{"slope", floatTensor(run.floats[0].values, {2})}};
    attnc_tensor tq = view(run.q, 1, 2, 40, 16), tk = view(run.k, 1, 2, 40, 16), tv = view(run.v, 1, 2, 40, 16),
                 to = view(run.o, 1, 2, 40, 16), tl = view(run.lse, 1, 2, 40, 1), tdo = view(run.dO, 1, 2, 40, 16);
    std::vector<float> dq(run.q.size()), dk(run.k.size()), dv(run.v.size());
    attnc_tensor tdq = view(dq, 1, 2, 40, 16), tdk = view(dk, 1, 2, 40, 16), tdv = view(dv, 1, 2, 40, 16);
    attnc_call call;
    attnc_call_init(&call);
    call.q = &tq, call.k = &tk, call.v = &tv, call.o = &to, call.lse = &tl, call.d_o = &tdo;
    call.d_q = &tdq, call.d_k = &tdk, call.d_v = &tdv;
    call.inputs = inputs.data();
    call.num_inputs = 1;
    call.d_inputs = c.grads.data();
    call.num_d_inputs = static_cast<int64_t>(c.grads.size());
    EXPECT_EQ(attnc_backward(kernel.get(), &call), c.status) << c.says << ": " << attnc_last_error();
    EXPECT_NE(std::string(attnc_last_error()).find(c.says), std::string::npos) << attnc_last_error();
    EXPECT_EQ(grad, std::vector<float>(2, -7.0f)) << c.says;
  }
  // attnc_kernel_input_info refuses what it cannot answer.
  attnc_input_info info{};
  info.size = sizeof info;
  EXPECT_EQ(attnc_kernel_input_info(kernel.get(), 1, 100, 2, &info), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_input_info(kernel.get(), 0, 100, 0, &info), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_input_info(kernel.get(), 0, 0, 2, &info), ATTNC_ERROR_INVALID_ARGUMENT);
  info.size = sizeof info - 1;
  EXPECT_EQ(attnc_kernel_input_info(kernel.get(), 0, 100, 2, &info), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_input_info(kernel.get(), 0, 100, 2, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_modifiers(nullptr), 0);
}

TEST(ScoreModifiers, AnEmptyBackwardCallZeroesTheInputsGradients) {
  KernelPtr kernel = compileSource(kAlibiLocal);
  ASSERT_TRUE(kernel);
  ScoreRun run(0, 2, 2, 16, 16, 16, 97); // batch 0: no pair
  run.floats.push_back({"slope", {2}, values({0.5f, 0.25f}), {}});
  ASSERT_EQ(run.backward(kernel.get()), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(run.floats[0].grad, std::vector<float>({0.0f, 0.0f}));
}

TEST(ScoreModifiers, AReadOutsideAFloatInputFailsNamingIt) {
  // rel has 8 entries; pairs up to 12 apart read past them.
  const char *source = R"(
pattern too_far {
  input rel : float[8]
  causal
  attend { j : i - j < 12 }
  score s + rel[i - j]
}
)";
  KernelPtr kernel = compileSource(source);
  ASSERT_TRUE(kernel);
  ScoreRun run(1, 1, 1, 50, 50, 16, 91);
  run.floats.push_back({"rel", {8}, randomFloats(8, 5, 1.0f), {}});
  EXPECT_EQ(run.forward(kernel.get()), ATTNC_ERROR_INVALID_ARGUMENT);
  // (Which pair is found first depends on the threads: any of distance 8 to 11.)
  const std::string message = attnc_last_error();
  const size_t at = message.find("rel[");
  ASSERT_NE(at, std::string::npos) << message;
  const int index = std::atoi(message.c_str() + at + 4);
  EXPECT_TRUE(index >= 8 && index <= 11) << message;
  EXPECT_NE(message.find("outside its dimensions [8]"), std::string::npos) << message;
  // Within the window it is fine.
  const char *fits = R"(
pattern near {
  input rel : float[8]
  causal
  attend { j : i - j < 8 }
  score s + rel[i - j]
}
)";
  KernelPtr ok = compileSource(fits);
  ASSERT_TRUE(ok);
  Model m{[](int64_t i, int64_t j) { return j <= i && i - j < 8; },
          [](double s, int64_t i, int64_t j, int64_t, const std::vector<double> &p) {
            return s + p[static_cast<size_t>(i - j)];
          },
          nullptr};
  run.check(ok.get(), m, "rel[i - j] within the window");
  // A read in a where's branch counts only where the branch is taken (as
  // evalScore has it): t[i - j] for i - j < 4 only, pairs up to 9 apart.
  const char *guarded = R"(
pattern guarded {
  input t : float[4]
  causal
  attend { j : i - j < 10 }
  score where(i - j < 4, s + t[i - j], s - 1)
}
)";
  KernelPtr g = compileSource(guarded);
  ASSERT_TRUE(g);
  ScoreRun gr(1, 1, 1, 50, 50, 16, 93);
  gr.floats.push_back({"t", {4}, randomFloats(4, 6, 1.0f), {}});
  Model gm{[](int64_t i, int64_t j) { return j <= i && i - j < 10; },
           [](double s, int64_t i, int64_t j, int64_t, const std::vector<double> &p) {
             return i - j < 4 ? s + p[static_cast<size_t>(i - j)] : s - 1;
           },
           nullptr};
  gr.check(g.get(), gm, "a guarded read");
}

TEST(ScoreModifiers, DataPatternGroupsSeeTruePositions) {
  // LSH classes run gathered in bucket order: the score's i and j are
  // still the pairs' positions.
  const char *source = R"(
pattern lsh_alibi {
  input b0 : int[n]
  input slope : float[heads]
  causal
  attend { j : b0[j] == b0[i] }
  score s + slope[h] * (j - i)
}
)";
  KernelPtr kernel = compileSource(source);
  ASSERT_TRUE(kernel);
  const int64_t n = 300;
  std::vector<int32_t> buckets(static_cast<size_t>(n));
  std::mt19937 rng(5);
  for (int32_t &b : buckets)
    b = static_cast<int32_t>(rng() % 6);
  ScoreRun run(1, 2, 2, n, n, 16, 101);
  run.floats.push_back({"slope", {2}, values({0.05f, 0.2f}), {}});
  Model m{[&](int64_t i, int64_t j) { return j <= i && buckets[static_cast<size_t>(i)] == buckets[static_cast<size_t>(j)]; },
          [](double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p) {
            return s + p[static_cast<size_t>(h)] * double(j - i);
          },
          nullptr};
  // The int input goes with the float one: both passes, the slope's gradient too.
  attnc_input b{};
  b.name = "b0";
  b.values.data = buckets.data();
  b.values.dtype = ATTNC_DTYPE_I32;
  b.values.shape[0] = b.values.shape[1] = b.values.shape[3] = 1;
  b.values.shape[2] = n;
  b.values.strides[0] = b.values.strides[1] = n;
  b.values.strides[2] = b.values.strides[3] = 1;
  run.intInputs.push_back(b);
  run.check(kernel.get(), m, "lsh classes + ALiBi");
}

/// Every positional pattern of patterns/ with each modifier added: a soft
/// cap, ALiBi and a sink, against the oracle's masks.
class LibraryScores : public ::testing::TestWithParam<const char *> {};

TEST_P(LibraryScores, EachModifierOnThePatternMatchesTheReference) {
  std::ifstream file(patternPath(GetParam()));
  ASSERT_TRUE(file) << patternPath(GetParam());
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind('}');
  ASSERT_NE(close, std::string::npos);
  const ir::PatternIR ir = patternIr(GetParam(), {});
  const int64_t n = 200, heads = ir.headsDeclared ? ir.numHeads : 2;
  const std::vector<std::vector<char>> masks = masksFromOracle(text, true, {}, heads, n);
  ASSERT_EQ(masks.size(), static_cast<size_t>(heads));
  auto headMask = [&](int64_t i, int64_t j, int64_t h) {
    return masks[static_cast<size_t>(h)][static_cast<size_t>(i * n + j)] != 0;
  };
  struct Modifier {
    const char *name, *text;
    Model model;
    std::vector<FloatArg> floats;
  };
  const std::vector<Modifier> modifiers{
      {"soft cap", "  score 7 * tanh(s / 7)\n",
       {nullptr, nullptr, nullptr},
       {}},
      {"alibi", "  input zslope : float[heads]\n  score s + zslope[h] * (j - i)\n",
       {nullptr, [](double s, int64_t i, int64_t j, int64_t h, const std::vector<double> &p) {
          return s + p[static_cast<size_t>(h)] * double(j - i);
        }, nullptr},
       {{"zslope", {heads}, randomFloats(static_cast<size_t>(heads), 7, 0.2f), {}}}},
      {"sink", "  input zsink : float[heads]\n  sink zsink[h]\n",
       {nullptr, nullptr, [](int64_t, int64_t h, const std::vector<double> &p) { return p[static_cast<size_t>(h)]; }},
       {{"zsink", {heads}, randomFloats(static_cast<size_t>(heads), 8, 1.5f), {}}}},
  };
  for (const Modifier &mod : modifiers) {
    const std::string source = text.substr(0, close) + mod.text + text.substr(close);
    KernelPtr kernel = compileSource(source);
    ASSERT_TRUE(kernel) << source;
    Model m = mod.model;
    m.headMask = headMask;
    if (std::string(mod.name) == "soft cap")
      m.score = [](double s, int64_t, int64_t, int64_t, const std::vector<double> &) { return 7 * std::tanh(s / 7); };
    ScoreRun run(1, heads, heads, n, n, 16, 111, 3.0f);
    run.floats = mod.floats;
    run.check(kernel.get(), m, std::string(GetParam()) + " + " + mod.name, 5e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Library, LibraryScores,
                         ::testing::Values("axial", "bigbird", "causal", "dilated", "fixed", "fixed_multihead",
                                           "fixed_subblocks", "full", "local", "longformer", "strided",
                                           "strided_multihead"));

TEST(ScoreModifiers, OtherBackendsRefuseScoresClearly) {
  std::string error;
  for (const char *backend : {"sparsifier", "halide"}) {
    error.clear();
    KernelPtr kernel = jitCompile(nullptr, kCappedFixed, {}, backend, jitCacheDir(), error);
    EXPECT_FALSE(kernel) << backend;
    // (A build without the backend says so first.)
    EXPECT_TRUE(error.find("score modifier") != std::string::npos || error.find("not built into") != std::string::npos)
        << backend << ": " << error;
  }
}

} // namespace
} // namespace attnc::test
