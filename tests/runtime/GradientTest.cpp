//===- GradientTest.cpp - The forward lse and the backward pass -----------===//
//
// attnc_run_forward (O and each row's log-sum-exp) and attnc_run_backward
// (dQ, dK, dV of L = sum(O * dO)) through the public C ABI, with kernels
// built by the JIT, against the independent double-precision gradient
// reference of TestSupport (membership from the brute-force oracle over
// Sema's terms; written from the softmax's formulas). The reference itself is
// checked against finite differences in double, and the compiler's
// referenceLse / referenceBackward (what `attnc run --grad --check` uses)
// against it. Every library pattern, inline patterns with empty rows,
// single-key rows and keys no row attends; ragged n, the head dimensions the
// tile kernels specialise, batch x heads > 1, f32 and bf16, strided tensors,
// several thread counts, saturated softmaxes, and every error path.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"
#include "attnc/format/KernelFile.h"
#include "attnc/plan/Csr.h"
#include "attnc/reference/Reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>

namespace attnc::test {
namespace {

/// A library pattern (`file`) or inline source text (`source`), with -D
/// values small enough that the structure shows at n <= 257.
struct GradPattern {
  const char *label;
  const char *file;
  const char *source;
  std::vector<std::string> defines;
};

void PrintTo(const GradPattern &pc, std::ostream *os) { *os << pc.label; }

// Row 0 and every row with i % 3 != 0 have no keys; the last key is never
// attended.
const char *const kEmptyRows = "pattern gaps { attend { j : j < i && i % 3 == 0 } }";
// Odd keys (and every key past the last row attending it) are never attended.
const char *const kUnattendedKeys = "pattern evens { attend { j : j % 2 == 0 && j <= i } }";
// One key per row.
const char *const kSelfOnly = "pattern self { attend { j : j == i } }";
// Declared heads with different empty rows and unattended keys.
const char *const kPerHeadGaps = "pattern mixed { heads 2 "
                                 "head 0 attends { j : j < i && i % 3 == 0 } "
                                 "head 1 attends { j : j % 2 == 0 && j <= i } }";

const GradPattern kPatterns[] = {
    {"FixedSmall", "fixed", nullptr, {"l=16", "c=4"}},
    {"StridedSmall", "strided", nullptr, {"l=8"}},
    {"FixedMultihead", "fixed_multihead", nullptr, {"l=8", "c=2"}},
    {"StridedMultihead", "strided_multihead", nullptr, {"l=8"}},
    {"FixedSubblocks", "fixed_subblocks", nullptr, {"l=16", "c=2", "H=4"}},
    {"Causal", "causal", nullptr, {}},
    {"Full", "full", nullptr, {}},
    {"Local", "local", nullptr, {"w=5"}},
    {"LocalSingleKey", "local", nullptr, {"w=1"}},
    {"Dilated", "dilated", nullptr, {"w=3", "d=2"}},
    {"Longformer", "longformer", nullptr, {"w=4", "g=2"}},
    {"Bigbird", "bigbird", nullptr, {"b=8", "g=1", "r=2"}},
    {"Axial", "axial", nullptr, {"W=8"}},
    {"Natten2d", "natten2d", nullptr, {"H=5", "W=7", "K=3"}},
    {"Sta3d", "sta3d", nullptr, {"T=4", "H=4", "W=6", "KT=2", "KH=4", "KW=4", "TT=2", "TH=1", "TW=2"}},
    {"SwinShifted", "swin", nullptr, {"H=6", "W=6", "M=3", "S=1"}},
    {"EmptyRows", nullptr, kEmptyRows, {}},
    {"UnattendedKeys", nullptr, kUnattendedKeys, {}},
    {"SelfOnly", nullptr, kSelfOnly, {}},
    {"PerHeadGaps", nullptr, kPerHeadGaps, {}},
};

struct Shape {
  int64_t batch, n, d;
};

std::string shapeText(const Shape &s, int64_t heads) {
  std::ostringstream os;
  os << "[" << s.batch << ", " << heads << ", " << s.n << ", " << s.d << "]";
  return os.str();
}

/// One cache directory for the whole suite: each pattern compiles once.
KernelPtr compile(const GradPattern &pc, const char *backend) {
  std::string error;
  KernelPtr kernel = jitCompile(pc.file, pc.source, pc.defines, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << pc.label << ": " << error;
  return kernel;
}

/// The heads a call uses: the declared count, else 3 (any is accepted).
int64_t headsFor(attnc_kernel *kernel) {
  int64_t heads = attnc_kernel_num_heads(kernel);
  return heads == 0 ? 3 : heads;
}

GradientReference referenceFor(const GradPattern &pc, const std::vector<float> &q,
                               const std::vector<float> &k, const std::vector<float> &v,
                               const std::vector<float> &dO, int64_t batch, int64_t heads, int64_t n,
                               int64_t d, double scale = 0) {
  return pc.file ? gradientsFromOracle(patternPath(pc.file), pc.defines, q, k, v, dO, batch, heads, n, d, scale)
                 : gradientsFromSource(pc.source, pc.defines, q, k, v, dO, batch, heads, n, d, scale);
}

struct Inputs {
  std::vector<float> q, k, v, dO;
};

/// Random inputs: Q and K in [-qkScale, qkScale], V and dO in [-1, 1].
Inputs randomInputs(size_t count, uint32_t seed, float qkScale = 1.0f) {
  return {randomFloats(count, seed, qkScale), randomFloats(count, seed + 1, qkScale),
          randomFloats(count, seed + 2, 1.0f), randomFloats(count, seed + 3, 1.0f)};
}

/// What the kernel computed; outputs start as NaN so an element that is not
/// written shows.
struct Result {
  std::vector<float> o, lse, dq, dk, dv;
};

const float kUnwritten = std::numeric_limits<float>::quiet_NaN();

/// attnc_run_forward (O, lse) then attnc_run_backward on contiguous f32
/// tensors. Returns false (with a failure recorded) when a call fails.
bool runContiguous(attnc_kernel *kernel, const Inputs &in, int64_t batch, int64_t heads, int64_t n, int64_t d,
                   const attnc_run_options *options, Result &r) {
  const size_t count = static_cast<size_t>(batch * heads * n * d);
  r.o.assign(count, kUnwritten);
  r.lse.assign(static_cast<size_t>(batch * heads * n), kUnwritten);
  r.dq.assign(count, kUnwritten);
  r.dk.assign(count, kUnwritten);
  r.dv.assign(count, kUnwritten);
  attnc_tensor tq = tensorView(in.q.data(), {batch, heads, n, d}), tk = tensorView(in.k.data(), {batch, heads, n, d}),
               tv = tensorView(in.v.data(), {batch, heads, n, d}), tg = tensorView(in.dO.data(), {batch, heads, n, d}),
               to = view(r.o, batch, heads, n, d), tl = view(r.lse, batch, heads, n, 1),
               tdq = view(r.dq, batch, heads, n, d), tdk = view(r.dk, batch, heads, n, d),
               tdv = view(r.dv, batch, heads, n, d);
  attnc_status s = attnc_run_forward(kernel, &tq, &tk, &tv, &to, &tl, options);
  if (s != ATTNC_OK) {
    ADD_FAILURE() << "attnc_run_forward: " << attnc_status_name(s) << ": " << attnc_last_error();
    return false;
  }
  s = attnc_run_backward(kernel, &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, options);
  if (s != ATTNC_OK) {
    ADD_FAILURE() << "attnc_run_backward: " << attnc_status_name(s) << ": " << attnc_last_error();
    return false;
  }
  return true;
}

double maxAbs(const std::vector<double> &x) {
  double m = 0;
  for (double v : x)
    if (std::isfinite(v))
      m = std::max(m, std::fabs(v));
  return m;
}

/// Every element of `got` ([batch, heads, n, width]) within
/// tol * max(1, max |ref|) of `ref` (the reference, or another run); the
/// failure names the worst element.
/// Entries where ref is -inf must be -inf exactly.
::testing::AssertionResult near(const char *what, const std::vector<float> &got, const std::vector<double> &ref,
                                int64_t heads, int64_t n, int64_t width, double tol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, reference " << ref.size();
  const double bound = tol * std::max(1.0, maxAbs(ref));
  double worst = -1;
  size_t at = 0;
  for (size_t x = 0; x < got.size(); ++x) {
    double err;
    if (std::isinf(ref[x]))
      err = double(got[x]) == ref[x] ? 0.0 : INFINITY;
    else
      err = std::isfinite(got[x]) ? std::fabs(double(got[x]) - ref[x]) : INFINITY;
    if (err > worst) {
      worst = err;
      at = x;
    }
  }
  if (worst <= bound)
    return ::testing::AssertionSuccess();
  const int64_t c = static_cast<int64_t>(at) % width, i = static_cast<int64_t>(at) / width % n,
                h = static_cast<int64_t>(at) / width / n % heads, b = static_cast<int64_t>(at) / width / n / heads;
  return ::testing::AssertionFailure() << what << ": max error " << worst << " > " << bound << " (tol " << tol
                                       << " x max(1, max|ref| = " << maxAbs(ref) << ")) at [b " << b << ", h " << h
                                       << ", i " << i << ", c " << c << "]: " << got[at] << " vs expected "
                                       << ref[at];
}

/// Rows without keys: lse -inf, O and dQ exactly 0. Keys no row attends:
/// dK and dV exactly 0 (the outputs started as NaN, so they were written).
::testing::AssertionResult structuralZeros(const GradientReference &ref, const Result &r, bool checkGrads = true) {
  const int64_t n = ref.n, d = ref.d;
  int64_t emptyRows = 0, unusedKeys = 0;
  for (int64_t h = 0; h < ref.heads; ++h)
    for (int64_t x = 0; x < n; ++x) {
      const bool rowEmpty = ref.rowEmpty(h, x), keyUnused = ref.keyUnused(h, x);
      emptyRows += rowEmpty;
      unusedKeys += keyUnused;
      for (int64_t b = 0; b < ref.batch; ++b) {
        const size_t row = static_cast<size_t>((b * ref.heads + h) * n + x);
        if (rowEmpty && !(std::isinf(r.lse[row]) && r.lse[row] < 0))
          return ::testing::AssertionFailure() << "empty row " << x << " of head " << h << ": lse " << r.lse[row];
        for (int64_t c = 0; c < d; ++c) {
          const size_t e = row * static_cast<size_t>(d) + static_cast<size_t>(c);
          if (rowEmpty && r.o[e] != 0.0f)
            return ::testing::AssertionFailure() << "empty row " << x << " of head " << h << ": O " << r.o[e];
          if (checkGrads && rowEmpty && r.dq[e] != 0.0f)
            return ::testing::AssertionFailure() << "empty row " << x << " of head " << h << ", batch " << b
                                                 << ": dQ[" << c << "] = " << r.dq[e] << ", not 0";
          if (checkGrads && keyUnused && (r.dk[e] != 0.0f || r.dv[e] != 0.0f))
            return ::testing::AssertionFailure() << "key " << x << " of head " << h << ", batch " << b
                                                 << " (no row attends it): dK[" << c << "] = " << r.dk[e]
                                                 << ", dV = " << r.dv[e] << ", not 0";
        }
      }
    }
  return ::testing::AssertionSuccess() << emptyRows << " empty rows, " << unusedKeys << " unattended keys";
}

/// Tolerances, relative to max(1, max |reference|) of each tensor.
struct Tolerance {
  double o, lse, grad;
};
const Tolerance kF32{1e-4, 1e-5, 2e-5};

void expectMatches(const GradientReference &ref, const Result &r, const Tolerance &tol, bool grads = true) {
  const int64_t H = ref.heads, n = ref.n, d = ref.d;
  EXPECT_TRUE(near("O", r.o, ref.o, H, n, d, tol.o));
  EXPECT_TRUE(near("lse", r.lse, ref.lse, H, n, 1, tol.lse));
  if (grads) {
    EXPECT_TRUE(near("dQ", r.dq, ref.dq, H, n, d, tol.grad));
    EXPECT_TRUE(near("dK", r.dk, ref.dk, H, n, d, tol.grad));
    EXPECT_TRUE(near("dV", r.dv, ref.dv, H, n, d, tol.grad));
  }
  EXPECT_TRUE(structuralZeros(ref, r, grads));
}

std::string caseName(const GradPattern &pc, const char *backend) {
  return std::string(backend) + "_" + pc.label;
}

//===----------------------------------------------------------------------===//
// The forward pass's log-sum-exp: every pattern, every backend that has it.
//===----------------------------------------------------------------------===//

class GradientForward : public ::testing::TestWithParam<std::tuple<GradPattern, const char *>> {};

TEST_P(GradientForward, LseMatchesReference) {
  auto [pc, backend] = GetParam();
  KernelPtr kernel = compile(pc, backend);
  ASSERT_TRUE(kernel);
  const int64_t heads = headsFor(kernel.get());
  for (Shape s : {Shape{2, 1, 16}, Shape{1, 45, 64}, Shape{2, 130, 80}, Shape{1, 77, 128}}) {
    SCOPED_TRACE(pc.label + std::string(" ") + shapeText(s, heads));
    const size_t count = static_cast<size_t>(s.batch * heads * s.n * s.d);
    Inputs in = randomInputs(count, static_cast<uint32_t>(7 * s.n + s.d), 2.0f);
    Result r;
    r.o.assign(count, kUnwritten);
    r.lse.assign(static_cast<size_t>(s.batch * heads * s.n), kUnwritten);
    attnc_tensor tq = tensorView(in.q.data(), {s.batch, heads, s.n, s.d}),
                 tk = tensorView(in.k.data(), {s.batch, heads, s.n, s.d}),
                 tv = tensorView(in.v.data(), {s.batch, heads, s.n, s.d}), to = view(r.o, s.batch, heads, s.n, s.d),
                 tl = view(r.lse, s.batch, heads, s.n, 1);
    ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK) << attnc_last_error();
    GradientReference ref = referenceFor(pc, in.q, in.k, in.v, in.dO, s.batch, heads, s.n, s.d);
    expectMatches(ref, r, kF32, /*grads=*/false);
    // With lse null it is attnc_run: the same O.
    std::vector<float> o2(count, kUnwritten);
    attnc_tensor to2 = view(o2, s.batch, heads, s.n, s.d);
    ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to2, nullptr, nullptr), ATTNC_OK)
        << attnc_last_error();
    EXPECT_TRUE(near("O without lse", o2, ref.o, heads, s.n, s.d, kF32.o));
  }
}

INSTANTIATE_TEST_SUITE_P(GradientPatterns, GradientForward,
                         ::testing::Combine(::testing::ValuesIn(kPatterns),
                                            ::testing::ValuesIn(builtBackends({"fused", "dense", "halide"}))),
                         [](const ::testing::TestParamInfo<GradientForward::ParamType> &info) {
                           return caseName(std::get<0>(info.param), std::get<1>(info.param));
                         });

//===----------------------------------------------------------------------===//
// The backward pass: every pattern, ragged n, every specialised d.
//===----------------------------------------------------------------------===//

class GradientBackward : public ::testing::TestWithParam<std::tuple<GradPattern, const char *>> {};

// Every n of 1, 7, 33, 70, 100, 257 and every d of 16, 64, 80, 128 (80: a
// slice of 64 columns and one of 16) and 40 (not a multiple of 16: Q^T and
// dO^T element by element) per pattern; batch 2 on some.
const std::vector<Shape> kBackwardShapes = {{2, 1, 80},  {1, 7, 128},   {2, 33, 16}, {1, 100, 64},
                                           {1, 257, 80}, {2, 100, 128}, {1, 70, 40}};

/// `kernel`'s forward and backward on random f32 inputs of each shape (seed
/// seedPerRow * n + d) against the double reference.
void expectF32Matches(const GradPattern &pc, attnc_kernel *kernel, const std::vector<Shape> &shapes,
                      uint32_t seedPerRow) {
  const int64_t heads = headsFor(kernel);
  for (Shape s : shapes) {
    SCOPED_TRACE(pc.label + std::string(" f32 ") + shapeText(s, heads));
    const size_t count = static_cast<size_t>(s.batch * heads * s.n * s.d);
    Inputs in = randomInputs(count, static_cast<uint32_t>(seedPerRow * s.n + s.d));
    Result r;
    if (!runContiguous(kernel, in, s.batch, heads, s.n, s.d, nullptr, r))
      return;
    expectMatches(referenceFor(pc, in.q, in.k, in.v, in.dO, s.batch, heads, s.n, s.d), r, kF32);
  }
}

TEST_P(GradientBackward, F32MatchesReference) {
  auto [pc, backend] = GetParam();
  KernelPtr kernel = compile(pc, backend);
  ASSERT_TRUE(kernel);
  expectF32Matches(pc, kernel.get(), kBackwardShapes, 3);
}

/// bf16 tensors [b, h, n, d] from float values (rounded to nearest even).
std::vector<uint16_t> roundToBf16(const std::vector<float> &x) {
  std::vector<uint16_t> out(x.size());
  for (size_t e = 0; e < x.size(); ++e)
    out[e] = toBf16(x[e]);
  return out;
}

std::vector<float> widen(const std::vector<uint16_t> &x) {
  std::vector<float> out(x.size());
  for (size_t e = 0; e < x.size(); ++e)
    out[e] = fromBf16(x[e]);
  return out;
}

//===----------------------------------------------------------------------===//
// Grid patterns whose canvas the fused backend runs in tiles (plan::tiledLayout:
// rows and keys in a tiled order, in place), forward and backward, f32 and bf16
// rows; a length that is not a whole canvas runs in raster order beside it.
//===----------------------------------------------------------------------===//

TEST(GridLayout, TiledOrderMatchesReference) {
  const GradPattern grids[] = {
      {"Natten2d16Wide", "natten2d", nullptr, {"H=12", "W=16", "K=5"}},
      {"Natten2d24Wide", "natten2d", nullptr, {"H=24", "W=24", "K=3"}},
      {"SwinTiles4x8", "swin", nullptr, {"H=16", "W=32", "M=8", "S=4"}},
      // (Windows of 7 on tiles of 8: the queries grouped by equal keys.)
      {"SwinGrouped", "swin", nullptr, {"H=14", "W=28", "M=7", "S=3"}},
  };
  for (const GradPattern &pc : grids) {
    KernelPtr kernel = compile(pc, "fused");
    ASSERT_TRUE(kernel);
    const int64_t width = std::stoll(std::string(pc.defines[1]).substr(2));
    // Whole canvases of 8, 16 and 24 rows (tiled: plan/PlanTest checks the
    // layout is chosen at these), and one that stops mid-row (raster).
    for (int64_t n : {8 * width, 16 * width, 24 * width, 5 * width + 3}) {
      for (int64_t d : {32, 64}) {
        SCOPED_TRACE(pc.label + std::string(" n=") + std::to_string(n) + " d=" + std::to_string(d));
        const int64_t batch = 2, heads = 2;
        Inputs in = randomInputs(static_cast<size_t>(batch * heads * n * d), static_cast<uint32_t>(n + d), 2.0f);
        Result r;
        ASSERT_TRUE(runContiguous(kernel.get(), in, batch, heads, n, d, nullptr, r));
        expectMatches(referenceFor(pc, in.q, in.k, in.v, in.dO, batch, heads, n, d), r, kF32);
      }
    }
    // bf16 rows (widened for the tiled order), against the reference on the rounded inputs.
    const int64_t n = 16 * width, d = 64, batch = 1, heads = 2;
    SCOPED_TRACE(pc.label + std::string(" bf16 n=") + std::to_string(n));
    const size_t count = static_cast<size_t>(batch * heads * n * d);
    Inputs in = randomInputs(count, 99);
    std::vector<uint16_t> q = roundToBf16(in.q), k = roundToBf16(in.k), v = roundToBf16(in.v), o(count, 0xffff);
    in = {widen(q), widen(k), widen(v), in.dO};
    Result r;
    r.lse.assign(static_cast<size_t>(batch * heads * n), kUnwritten);
    attnc_tensor tq = tensorView(q.data(), {batch, heads, n, d}, ATTNC_DTYPE_BF16),
                 tk = tensorView(k.data(), {batch, heads, n, d}, ATTNC_DTYPE_BF16),
                 tv = tensorView(v.data(), {batch, heads, n, d}, ATTNC_DTYPE_BF16),
                 to = tensorView(o.data(), {batch, heads, n, d}, ATTNC_DTYPE_BF16), tl = view(r.lse, batch, heads, n, 1);
    ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK) << attnc_last_error();
    r.o = widen(o);
    expectMatches(referenceFor(pc, in.q, in.k, in.v, in.dO, batch, heads, n, d), r, {4e-3, 1e-4, 1e-2},
                  /*grads=*/false);
  }
}

TEST_P(GradientBackward, Bf16MatchesReferenceOnTheRoundedInputs) {
  // Q, K, V, O and dO in bf16 (the backward's inputs share one dtype), the
  // gradients in f32, against the reference on the rounded Q, K, V and dO.
  // O is rounded to bf16 by the forward pass and the backward's row term
  // uses it, hence the looser tolerance.
  auto [pc, backend] = GetParam();
  KernelPtr kernel = compile(pc, backend);
  ASSERT_TRUE(kernel);
  const int64_t heads = headsFor(kernel.get());
  for (Shape s : {Shape{2, 33, 64}, Shape{1, 100, 80}, Shape{1, 7, 16}}) {
    SCOPED_TRACE(pc.label + std::string(" bf16 ") + shapeText(s, heads));
    const int64_t B = s.batch, n = s.n, d = s.d;
    const size_t count = static_cast<size_t>(B * heads * n * d);
    Inputs in = randomInputs(count, static_cast<uint32_t>(5 * n + d));
    std::vector<uint16_t> q = roundToBf16(in.q), k = roundToBf16(in.k), v = roundToBf16(in.v), g = roundToBf16(in.dO),
                          o(count, 0xffff);
    in = {widen(q), widen(k), widen(v), widen(g)};
    Result r;
    r.lse.assign(static_cast<size_t>(B * heads * n), kUnwritten);
    r.dq.assign(count, kUnwritten);
    r.dk.assign(count, kUnwritten);
    r.dv.assign(count, kUnwritten);
    attnc_tensor tq = tensorView(q.data(), {B, heads, n, d}, ATTNC_DTYPE_BF16),
                 tk = tensorView(k.data(), {B, heads, n, d}, ATTNC_DTYPE_BF16),
                 tv = tensorView(v.data(), {B, heads, n, d}, ATTNC_DTYPE_BF16),
                 tg = tensorView(g.data(), {B, heads, n, d}, ATTNC_DTYPE_BF16),
                 to = tensorView(o.data(), {B, heads, n, d}, ATTNC_DTYPE_BF16), tl = view(r.lse, B, heads, n, 1),
                 tdq = view(r.dq, B, heads, n, d), tdk = view(r.dk, B, heads, n, d), tdv = view(r.dv, B, heads, n, d);
    ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK) << attnc_last_error();
    ASSERT_EQ(attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, nullptr), ATTNC_OK)
        << attnc_last_error();
    r.o = widen(o);
    // lse to 1e-4: the fused backend's bf16 forward takes exp to 4e-5 (P is
    // rounded to bf16 for P V anyway); the gradients' tolerance covers it.
    expectMatches(referenceFor(pc, in.q, in.k, in.v, in.dO, B, heads, n, d), r, {4e-3, 1e-4, 1e-2});
  }
}

INSTANTIATE_TEST_SUITE_P(GradientPatterns, GradientBackward,
                         ::testing::Combine(::testing::ValuesIn(kPatterns),
                                            ::testing::ValuesIn(builtBackends({"fused", "dense"}))),
                         [](const ::testing::TestParamInfo<GradientBackward::ParamType> &info) {
                           return caseName(std::get<0>(info.param), std::get<1>(info.param));
                         });

//===----------------------------------------------------------------------===//
// The backward pass on its own row blocks (grad_tile_rows), taller or
// shorter than the forward's.
//===----------------------------------------------------------------------===//

struct GradTiles {
  int64_t rows, cols, gradRows; ///< the forward's tiles, the backward's rows
};

class GradientTileShapes : public ::testing::TestWithParam<std::tuple<GradPattern, GradTiles>> {};

/// The fused kernel of a library pattern with the forward's tiles given and
/// grad_tile_rows set to `gradRows` in its metadata.
KernelPtr fusedKernelWithGradRows(const GradPattern &pc, const GradTiles &tiles) {
  format::KernelFile file;
  std::string error;
  EXPECT_TRUE(format::decodeKernelFile(fusedKernelBytes(pc.file, pc.defines, tiles.rows, tiles.cols), file, error))
      << error;
  EXPECT_EQ(file.metadata.count("grad_tile_rows"), 1u) << "attnc compile records the backward's rows";
  file.metadata["grad_tile_rows"] = std::to_string(tiles.gradRows);
  const std::string bytes = format::encodeKernelFile(file);
  attnc_kernel *raw = nullptr;
  EXPECT_EQ(attnc_kernel_load_memory(bytes.data(), bytes.size(), &raw), ATTNC_OK) << attnc_last_error();
  return KernelPtr(raw, attnc_kernel_free);
}

TEST_P(GradientTileShapes, MatchesReference) {
  auto [pc, tiles] = GetParam();
  KernelPtr kernel = fusedKernelWithGradRows(pc, tiles);
  ASSERT_TRUE(kernel);
  expectF32Matches(pc, kernel.get(), {{1, 130, 64}, {2, 45, 33}, {1, 97, 128}}, 7);
}

const GradPattern kGradTilePatterns[] = {
    {"FixedSmall", "fixed", nullptr, {"l=16", "c=4"}},
    {"StridedSmall", "strided", nullptr, {"l=8"}},
    {"Local", "local", nullptr, {"w=5"}},
    {"Bigbird", "bigbird", nullptr, {"b=8", "g=1", "r=2"}},
    {"LongformerG17", "longformer", nullptr, {"w=3", "g=17"}},
    {"Causal", "causal", nullptr, {}},
};

INSTANTIATE_TEST_SUITE_P(Library, GradientTileShapes,
                         ::testing::Combine(::testing::ValuesIn(kGradTilePatterns),
                                            ::testing::Values(GradTiles{32, 64, 64}, GradTiles{64, 64, 32},
                                                              GradTiles{32, 64, 16}, GradTiles{7, 5, 48})),
                         [](const ::testing::TestParamInfo<GradientTileShapes::ParamType> &info) {
                           const GradTiles &t = std::get<1>(info.param);
                           return std::string(std::get<0>(info.param).label) + "_" + std::to_string(t.rows) + "x" +
                                  std::to_string(t.cols) + "_grad" + std::to_string(t.gradRows);
                         });

//===----------------------------------------------------------------------===//
// Layouts, dtypes, threads, magnitudes and finite differences, per backend.
//===----------------------------------------------------------------------===//

class GradientRuns : public ::testing::TestWithParam<const char *> {};

const GradPattern kStrided{"StridedSmall", "strided", nullptr, {"l=8"}};
const GradPattern kBigbird{"Bigbird", "bigbird", nullptr, {"b=8", "g=1", "r=2"}};
const GradPattern kEmpty{"EmptyRows", nullptr, kEmptyRows, {}};

/// [b, h, n, w] values laid out as [b, n, h, w + pad] (heads interleaved,
/// rows padded); the padding holds `fill`.
struct Interleaved {
  int64_t b, h, n, w, pad;
  size_t size() const { return static_cast<size_t>(b * n * h * (w + pad)); }
  size_t at(int64_t bb, int64_t hh, int64_t i, int64_t c) const {
    return static_cast<size_t>(((bb * n + i) * h + hh) * (w + pad) + c);
  }
  template <typename T> std::vector<T> from(const std::vector<T> &src, T fill) const {
    std::vector<T> dst(size(), fill);
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < w; ++c)
            dst[at(bb, hh, i, c)] = src[static_cast<size_t>(((bb * h + hh) * n + i) * w + c)];
    return dst;
  }
  /// Back to contiguous [b, h, n, w]; false when the padding changed.
  template <typename T> bool to(const std::vector<T> &src, T fill, std::vector<T> &dst) const {
    dst.assign(static_cast<size_t>(b * h * n * w), fill);
    std::vector<char> inView(size(), 0);
    for (int64_t bb = 0; bb < b; ++bb)
      for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c = 0; c < w; ++c) {
            dst[static_cast<size_t>(((bb * h + hh) * n + i) * w + c)] = src[at(bb, hh, i, c)];
            inView[at(bb, hh, i, c)] = 1;
          }
    for (size_t e = 0; e < size(); ++e)
      if (!inView[e] && std::memcmp(&src[e], &fill, sizeof(T)) != 0)
        return false;
    return true;
  }
  attnc_tensor tensor(void *data, attnc_dtype dtype) const {
    attnc_tensor t{data, dtype, {b, h, n, w}, {n * h * (w + pad), w + pad, h * (w + pad), 1}};
    return t;
  }
};

/// Equal within `tol` relative to max(1, max |a|) (both from the kernel).
::testing::AssertionResult same(const char *what, const std::vector<float> &got, const std::vector<float> &want,
                                int64_t heads, int64_t n, int64_t width, double tol) {
  std::vector<double> w(want.begin(), want.end());
  return near(what, got, w, heads, n, width, tol);
}

TEST_P(GradientRuns, StridedTensorsGiveTheContiguousResult) {
  // Q, K, V, O, dO, dQ, dK, dV as [b, n, h, d] with padded rows, lse as
  // [b, n, h] with gaps: the same values as the contiguous run, and nothing
  // written outside the views.
  for (const GradPattern &pc : {kStrided, kEmpty}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    const int64_t B = 2, H = 3, n = 45;
    for (int64_t d : {16, 80}) {
      SCOPED_TRACE(pc.label + std::string(" d = ") + std::to_string(d));
      const size_t count = static_cast<size_t>(B * H * n * d);
      Inputs in = randomInputs(count, 91);
      Result r;
      ASSERT_TRUE(runContiguous(kernel.get(), in, B, H, n, d, nullptr, r));
      const float fill = 12345.0f;
      Interleaved lay{B, H, n, d, 3}, layLse{B, H, n, 1, 2};
      std::vector<float> q = lay.from(in.q, fill), k = lay.from(in.k, fill), v = lay.from(in.v, fill),
                         g = lay.from(in.dO, fill), o(lay.size(), fill), lse(layLse.size(), fill),
                         dq(lay.size(), fill), dk(lay.size(), fill), dv(lay.size(), fill);
      attnc_tensor tq = lay.tensor(q.data(), ATTNC_DTYPE_F32), tk = lay.tensor(k.data(), ATTNC_DTYPE_F32),
                   tv = lay.tensor(v.data(), ATTNC_DTYPE_F32), tg = lay.tensor(g.data(), ATTNC_DTYPE_F32),
                   to = lay.tensor(o.data(), ATTNC_DTYPE_F32), tl = layLse.tensor(lse.data(), ATTNC_DTYPE_F32),
                   tdq = lay.tensor(dq.data(), ATTNC_DTYPE_F32), tdk = lay.tensor(dk.data(), ATTNC_DTYPE_F32),
                   tdv = lay.tensor(dv.data(), ATTNC_DTYPE_F32);
      tl.strides[3] = 1000003; // not read: lse's last dimension has one element
      ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK) << attnc_last_error();
      ASSERT_EQ(attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, nullptr), ATTNC_OK)
          << attnc_last_error();
      Result s;
      ASSERT_TRUE(lay.to(o, fill, s.o)) << "O written outside its view";
      ASSERT_TRUE(layLse.to(lse, fill, s.lse)) << "lse written outside its view";
      ASSERT_TRUE(lay.to(dq, fill, s.dq)) << "dQ written outside its view";
      ASSERT_TRUE(lay.to(dk, fill, s.dk)) << "dK written outside its view";
      ASSERT_TRUE(lay.to(dv, fill, s.dv)) << "dV written outside its view";
      EXPECT_TRUE(same("strided O", s.o, r.o, H, n, d, 1e-6));
      EXPECT_TRUE(same("strided lse", s.lse, r.lse, H, n, 1, 1e-6));
      EXPECT_TRUE(same("strided dQ", s.dq, r.dq, H, n, d, 1e-6));
      EXPECT_TRUE(same("strided dK", s.dk, r.dk, H, n, d, 1e-6));
      EXPECT_TRUE(same("strided dV", s.dv, r.dv, H, n, d, 1e-6));
      expectMatches(referenceFor(pc, in.q, in.k, in.v, in.dO, B, H, n, d), s, kF32);
    }
  }
}

TEST_P(GradientRuns, Bf16GradientsAreTheF32OnesRounded) {
  // f32 inputs, bf16 dQ, dK, dV (contiguous, and strided): each element is
  // the f32 gradient rounded to nearest even. One thread, so both runs do the
  // same arithmetic.
  const attnc_run_options one{0.0f, 1};
  for (const GradPattern &pc : {kBigbird, kEmpty}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    const int64_t B = 1, H = 3, n = 70, d = 64;
    SCOPED_TRACE(pc.label);
    const size_t count = static_cast<size_t>(B * H * n * d);
    Inputs in = randomInputs(count, 93);
    Result r;
    ASSERT_TRUE(runContiguous(kernel.get(), in, B, H, n, d, &one, r));
    attnc_tensor tq = tensorView(in.q.data(), {B, H, n, d}), tk = tensorView(in.k.data(), {B, H, n, d}),
                 tv = tensorView(in.v.data(), {B, H, n, d}), tg = tensorView(in.dO.data(), {B, H, n, d}),
                 to = view(r.o, B, H, n, d), tl = view(r.lse, B, H, n, 1);
    for (bool strided : {false, true}) {
      SCOPED_TRACE(strided ? "strided bf16 gradients" : "contiguous bf16 gradients");
      const uint16_t fill = 0x7fc1; // a NaN pattern the rounding never produces
      Interleaved lay{B, H, n, d, strided ? 5 : 0};
      std::vector<uint16_t> dq(lay.size(), fill), dk(lay.size(), fill), dv(lay.size(), fill);
      attnc_tensor tdq = lay.tensor(dq.data(), ATTNC_DTYPE_BF16), tdk = lay.tensor(dk.data(), ATTNC_DTYPE_BF16),
                   tdv = lay.tensor(dv.data(), ATTNC_DTYPE_BF16);
      if (!strided)
        for (attnc_tensor *t : {&tdq, &tdk, &tdv})
          *t = tensorView(t->data, {B, H, n, d}, ATTNC_DTYPE_BF16);
      ASSERT_EQ(attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, &one), ATTNC_OK)
          << attnc_last_error();
      std::vector<uint16_t> got[3];
      const std::vector<uint16_t> *raw[3] = {&dq, &dk, &dv};
      const std::vector<float> *f32[3] = {&r.dq, &r.dk, &r.dv};
      const char *names[3] = {"dQ", "dK", "dV"};
      for (int t = 0; t < 3; ++t) {
        if (strided)
          ASSERT_TRUE(lay.to(*raw[t], fill, got[t])) << names[t] << " written outside its view";
        else
          got[t] = *raw[t];
        for (size_t e = 0; e < count; ++e)
          ASSERT_EQ(got[t][e], toBf16((*f32[t])[e]))
              << names[t] << " element " << e << ": " << fromBf16(got[t][e]) << " vs f32 " << (*f32[t])[e];
      }
    }
  }
}

TEST_P(GradientRuns, ThreadCountsAgree) {
  // One slice (the fused backend splits its row blocks among threads) and
  // six slices; 1, 2 and 3 threads give the same gradients within rounding,
  // and each matches the reference.
  for (const GradPattern &pc : {kStrided, kBigbird}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    for (Shape s : {Shape{1, 300, 64}, Shape{2, 100, 16}}) {
      const int64_t H = s.batch == 1 ? 1 : 3;
      SCOPED_TRACE(pc.label + std::string(" ") + shapeText(s, H));
      const size_t count = static_cast<size_t>(s.batch * H * s.n * s.d);
      Inputs in = randomInputs(count, 95);
      GradientReference ref = referenceFor(pc, in.q, in.k, in.v, in.dO, s.batch, H, s.n, s.d);
      Result first;
      for (int threads : {1, 2, 3}) {
        SCOPED_TRACE(std::to_string(threads) + " threads");
        const attnc_run_options options{0.0f, threads};
        Result r;
        ASSERT_TRUE(runContiguous(kernel.get(), in, s.batch, H, s.n, s.d, &options, r));
        expectMatches(ref, r, kF32);
        if (threads == 1) {
          first = r;
          continue;
        }
        EXPECT_TRUE(same("O", r.o, first.o, H, s.n, s.d, 1e-6));
        EXPECT_TRUE(same("lse", r.lse, first.lse, H, s.n, 1, 1e-6));
        EXPECT_TRUE(same("dQ", r.dq, first.dq, H, s.n, s.d, 1e-5));
        EXPECT_TRUE(same("dK", r.dk, first.dk, H, s.n, s.d, 1e-5));
        EXPECT_TRUE(same("dV", r.dv, first.dv, H, s.n, s.d, 1e-5));
      }
    }
  }
}

TEST_P(GradientRuns, LargeMagnitudesStayFiniteAndAccurate) {
  // |q|, |k| up to 30: scores in the hundreds, each row's softmax close to
  // one-hot. The reference stays finite, and the kernel matches it.
  for (const GradPattern &pc : {kStrided, kBigbird, kEmpty, GradPattern{"Full", "full", nullptr, {}}}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    for (Shape s : {Shape{1, 100, 16}, Shape{1, 40, 64}}) {
      const int64_t H = 3;
      SCOPED_TRACE(pc.label + std::string(" ") + shapeText(s, H));
      const size_t count = static_cast<size_t>(s.batch * H * s.n * s.d);
      Inputs in = randomInputs(count, 97, 30.0f);
      GradientReference ref = referenceFor(pc, in.q, in.k, in.v, in.dO, s.batch, H, s.n, s.d);
      double maxLse = 0;
      for (const std::vector<double> *t : {&ref.o, &ref.dq, &ref.dk, &ref.dv})
        for (double x : *t)
          ASSERT_TRUE(std::isfinite(x)) << "the reference is not finite";
      for (double x : ref.lse) {
        ASSERT_FALSE(std::isnan(x));
        if (std::isfinite(x))
          maxLse = std::max(maxLse, std::fabs(x));
      }
      EXPECT_GT(maxLse, 100.0) << "the scores should reach the hundreds";
      Result r;
      ASSERT_TRUE(runContiguous(kernel.get(), in, s.batch, H, s.n, s.d, nullptr, r));
      expectMatches(ref, r, {2e-3, 1e-5, 5e-4});
    }
  }
}

TEST_P(GradientRuns, HonoursTheScaleOption) {
  // attnc_run_options.scale other than 1/sqrt(d), in both passes.
  KernelPtr kernel = compile(kBigbird, GetParam());
  ASSERT_TRUE(kernel);
  const int64_t B = 1, H = 2, n = 50, d = 16;
  Inputs in = randomInputs(static_cast<size_t>(B * H * n * d), 99);
  const attnc_run_options options{0.7f, 0};
  Result r;
  ASSERT_TRUE(runContiguous(kernel.get(), in, B, H, n, d, &options, r));
  expectMatches(referenceFor(kBigbird, in.q, in.k, in.v, in.dO, B, H, n, d, double(0.7f)), r, kF32);
}

/// sum(O * dO) with O from the kernel's forward pass, in double.
double kernelLoss(attnc_kernel *kernel, const Inputs &in, int64_t B, int64_t H, int64_t n, int64_t d) {
  std::vector<float> o(in.q.size(), kUnwritten);
  attnc_tensor tq = tensorView(in.q.data(), {B, H, n, d}), tk = tensorView(in.k.data(), {B, H, n, d}),
               tv = tensorView(in.v.data(), {B, H, n, d}), to = view(o, B, H, n, d);
  EXPECT_EQ(attnc_run(kernel, &tq, &tk, &tv, &to, nullptr), ATTNC_OK) << attnc_last_error();
  double loss = 0;
  for (size_t e = 0; e < o.size(); ++e)
    loss += double(o[e]) * double(in.dO[e]);
  return loss;
}

TEST_P(GradientRuns, MatchesFiniteDifferences) {
  // Every element of Q, K and V moved by +-h in f32: the central difference
  // of sum(O * dO) agrees with attnc_run_backward's gradient to f32's
  // accuracy (the difference's own error is about 1e-4 here).
  const float h = 1e-2f;
  for (const GradPattern &pc : {GradPattern{"FixedTiny", "fixed", nullptr, {"l=4", "c=2"}}, kEmpty, kBigbird,
                                GradPattern{"PerHeadGaps", nullptr, kPerHeadGaps, {}}}) {
    KernelPtr kernel = compile(pc, GetParam());
    ASSERT_TRUE(kernel);
    const int64_t B = 1, H = 2, n = 8, d = 4;
    SCOPED_TRACE(pc.label);
    const size_t count = static_cast<size_t>(B * H * n * d);
    Inputs in = randomInputs(count, 101);
    Result r;
    ASSERT_TRUE(runContiguous(kernel.get(), in, B, H, n, d, nullptr, r));
    std::vector<float> *inputs[3] = {&in.q, &in.k, &in.v};
    const std::vector<float> *grads[3] = {&r.dq, &r.dk, &r.dv};
    const char *names[3] = {"dQ", "dK", "dV"};
    int nonzero = 0;
    for (int t = 0; t < 3; ++t)
      for (size_t e = 0; e < count; ++e) {
        const float saved = (*inputs[t])[e];
        (*inputs[t])[e] = saved + h;
        const double up = kernelLoss(kernel.get(), in, B, H, n, d);
        (*inputs[t])[e] = saved - h;
        const double down = kernelLoss(kernel.get(), in, B, H, n, d);
        (*inputs[t])[e] = saved;
        const double step = double(saved + h) - double(saved - h); // the f32 step actually taken
        const double fd = (up - down) / step, g = (*grads[t])[e];
        nonzero += std::fabs(g) > 1e-3;
        EXPECT_NEAR(g, fd, 2e-2 * std::fabs(fd) + 1e-3) << names[t] << " element " << e;
      }
    EXPECT_GT(nonzero, 20) << "too few gradients to check";
  }
}

INSTANTIATE_TEST_SUITE_P(GradientBackends, GradientRuns, ::testing::ValuesIn(builtBackends({"fused", "dense"})),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

//===----------------------------------------------------------------------===//
// The references.
//===----------------------------------------------------------------------===//

/// Inputs on a grid of 2^-12 in [-1, 1]: x +- 2^-8 and x +- 2^-9 are exact
/// floats.
Inputs gridInputs(size_t count, uint32_t seed) {
  Inputs in = randomInputs(count, seed);
  for (std::vector<float> *x : {&in.q, &in.k, &in.v, &in.dO})
    for (float &e : *x)
      e = std::round(e * 4096.0f) / 4096.0f;
  return in;
}

TEST(GradientReferenceCheck, DoubleReferenceMatchesFiniteDifferences) {
  // The test reference's gradients against Richardson-extrapolated central
  // differences of its own forward pass in double (error about h^4), every
  // element of Q, K and V, with empty rows, unattended keys, declared heads
  // and a scale other than 1/sqrt(d).
  struct Case {
    GradPattern pc;
    int64_t heads;
    double scale;
  };
  for (const Case &c : {Case{{"FixedTiny", "fixed", nullptr, {"l=4", "c=2"}}, 2, 0.0},
                        Case{{"EmptyRows", nullptr, kEmptyRows, {}}, 1, 0.9},
                        Case{{"PerHeadGaps", nullptr, kPerHeadGaps, {}}, 2, 0.0},
                        Case{{"Full", "full", nullptr, {}}, 1, 1.3}}) {
    SCOPED_TRACE(c.pc.label);
    const int64_t B = 1, H = c.heads, n = 8, d = 4;
    const size_t count = static_cast<size_t>(B * H * n * d);
    Inputs in = gridInputs(count, 103);
    GradientReference ref = referenceFor(c.pc, in.q, in.k, in.v, in.dO, B, H, n, d, c.scale);
    auto loss = [&]() {
      GradientReference r = referenceFor(c.pc, in.q, in.k, in.v, in.dO, B, H, n, d, c.scale);
      double sum = 0;
      for (size_t e = 0; e < count; ++e)
        sum += r.o[e] * double(in.dO[e]);
      return sum;
    };
    std::vector<float> *inputs[3] = {&in.q, &in.k, &in.v};
    const std::vector<double> *grads[3] = {&ref.dq, &ref.dk, &ref.dv};
    const char *names[3] = {"dQ", "dK", "dV"};
    for (int t = 0; t < 3; ++t)
      for (size_t e = 0; e < count; ++e) {
        const float saved = (*inputs[t])[e];
        auto central = [&](float h) {
          (*inputs[t])[e] = saved + h;
          const double up = loss();
          (*inputs[t])[e] = saved - h;
          const double down = loss();
          (*inputs[t])[e] = saved;
          return (up - down) / (2.0 * double(h));
        };
        const double fd = (4.0 * central(1.0f / 512) - central(1.0f / 256)) / 3.0;
        EXPECT_NEAR((*grads[t])[e], fd, 1e-7 * (1.0 + std::fabs(fd))) << names[t] << " element " << e;
      }
  }
}

/// The CSR of an oracle mask.
ir::Csr csrOf(const std::vector<char> &mask, int64_t n) {
  ir::Csr csr;
  csr.n = n;
  csr.pos.push_back(0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j)
      if (mask[static_cast<size_t>(i * n + j)])
        csr.crd.push_back(static_cast<int32_t>(j));
    csr.pos.push_back(static_cast<int32_t>(csr.crd.size()));
  }
  return csr;
}

TEST(GradientReferenceCheck, CompilerReferenceMatchesTheTestReference) {
  // referenceLse and referenceBackward (compiler/lib/reference, what
  // `attnc run --grad --check` compares with) on the oracle's CSR, slice by
  // slice, against the test reference: ordinary and saturated scores, empty
  // rows (-inf, zero dQ) and unattended keys (zero dK, dV).
  for (const GradPattern &pc : {kEmpty, GradPattern{"PerHeadGaps", nullptr, kPerHeadGaps, {}}, kBigbird, kStrided}) {
    for (float qkScale : {1.0f, 30.0f}) {
      SCOPED_TRACE(pc.label + std::string(qkScale > 1 ? " saturated" : ""));
      const int64_t B = 2, H = 2, n = 61, d = 24;
      const size_t count = static_cast<size_t>(B * H * n * d);
      Inputs in = randomInputs(count, 107, qkScale);
      const double scale = 1.0 / std::sqrt(double(d));
      GradientReference ref = referenceFor(pc, in.q, in.k, in.v, in.dO, B, H, n, d, scale);
      Result r;
      r.o.assign(count, 0.0f);
      r.lse.assign(static_cast<size_t>(B * H * n), kUnwritten);
      r.dq.assign(count, kUnwritten);
      r.dk.assign(count, kUnwritten);
      r.dv.assign(count, kUnwritten);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h) {
          const ir::Csr csr = csrOf(ref.masks[static_cast<size_t>(h)], n);
          const size_t off = static_cast<size_t>((b * H + h) * n * d), row = static_cast<size_t>((b * H + h) * n);
          referenceAttention(csr, in.q.data() + off, in.k.data() + off, in.v.data() + off, r.o.data() + off, d,
                             scale);
          referenceLse(csr, in.q.data() + off, in.k.data() + off, r.lse.data() + row, d, scale);
          referenceBackward(csr, in.q.data() + off, in.k.data() + off, in.v.data() + off, in.dO.data() + off,
                            r.dq.data() + off, r.dk.data() + off, r.dv.data() + off, d, scale);
        }
      for (const std::vector<double> *t : {&ref.dq, &ref.dk, &ref.dv})
        for (double x : *t)
          ASSERT_TRUE(std::isfinite(x));
      // Both in double, rounded once to f32.
      expectMatches(ref, r, {1e-6, 1e-7, 1e-6});
    }
  }
}

//===----------------------------------------------------------------------===//
// Error paths.
//===----------------------------------------------------------------------===//

/// A fused kernel and valid [1, 2, 8, 4] f32 tensors for both passes.
class GradientErrors : public ::testing::Test {
protected:
  void SetUp() override {
    kernel = compile({"Window", nullptr, "pattern win { causal attend { j : i - j < 4 } }", {}}, "fused");
    ASSERT_TRUE(kernel);
    for (std::vector<float> *x : {&q, &k, &v, &o, &g, &dq, &dk, &dv})
      *x = randomFloats(64, 7, 1.0f);
    lse.assign(16, 0.0f);
    tq = view(q, 1, 2, 8, 4);
    tk = view(k, 1, 2, 8, 4);
    tv = view(v, 1, 2, 8, 4);
    to = view(o, 1, 2, 8, 4);
    tg = view(g, 1, 2, 8, 4);
    tl = view(lse, 1, 2, 8, 1);
    tdq = view(dq, 1, 2, 8, 4);
    tdk = view(dk, 1, 2, 8, 4);
    tdv = view(dv, 1, 2, 8, 4);
    ASSERT_EQ(forward(), ATTNC_OK) << attnc_last_error();
  }
  attnc_status forward() { return attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr); }
  attnc_status backward() {
    return attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, nullptr);
  }
  /// The backward's tensors by their names in attnc.h.
  std::vector<std::pair<const char *, attnc_tensor *>> backwardTensors() {
    return {{"q", &tq}, {"k", &tk}, {"v", &tv}, {"o", &to}, {"d_o", &tg},
            {"lse", &tl}, {"d_q", &tdq}, {"d_k", &tdk}, {"d_v", &tdv}};
  }
  static bool names(const char *tensor) {
    return std::string(attnc_last_error()).find(std::string("'") + tensor + "'") != std::string::npos;
  }
  KernelPtr kernel{nullptr, attnc_kernel_free};
  std::vector<float> q, k, v, o, g, dq, dk, dv, lse;
  attnc_tensor tq, tk, tv, to, tg, tl, tdq, tdk, tdv;
};

TEST_F(GradientErrors, ValidCallsSucceed) {
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, nullptr, nullptr), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, NullKernelIsRejected) {
  EXPECT_EQ(attnc_run_forward(nullptr, &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_STRNE(attnc_last_error(), "");
  EXPECT_EQ(attnc_run_backward(nullptr, &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, nullptr),
            ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_STRNE(attnc_last_error(), "");
}

TEST_F(GradientErrors, NullTensorsAreRejectedByName) {
  for (auto [name, t] : backwardTensors()) {
    SCOPED_TRACE(name);
    attnc_tensor saved = *t;
    attnc_tensor *args[9] = {&tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv};
    for (attnc_tensor *&a : args)
      if (a == t)
        a = nullptr;
    EXPECT_EQ(attnc_run_backward(kernel.get(), args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                                 args[7], args[8], nullptr),
              ATTNC_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(name)) << attnc_last_error();
    // A null data pointer.
    t->data = nullptr;
    EXPECT_EQ(backward(), ATTNC_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(name)) << attnc_last_error();
    *t = saved;
  }
  for (auto [name, t] : {std::pair{"q", &tq}, {"k", &tk}, {"v", &tv}, {"o", &to}, {"lse", &tl}}) {
    SCOPED_TRACE(std::string("forward ") + name);
    void *saved = t->data;
    t->data = nullptr;
    EXPECT_EQ(forward(), ATTNC_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(names(name)) << attnc_last_error();
    t->data = saved;
  }
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, MismatchedShapesAreRejected) {
  for (auto [name, t] : backwardTensors()) {
    if (std::string(name) == "lse")
      continue;
    for (int axis : {0, 2, 3}) {
      SCOPED_TRACE(std::string(name) + " axis " + std::to_string(axis));
      t->shape[axis] -= 1;
      EXPECT_EQ(backward(), ATTNC_ERROR_SHAPE);
      EXPECT_TRUE(names(name)) << attnc_last_error();
      t->shape[axis] += 1;
    }
  }
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, LseMustBeF32OfShapeBHN1) {
  const int64_t wrong[][4] = {{1, 2, 8, 2}, {1, 2, 7, 1}, {1, 2, 9, 1}, {1, 1, 8, 1}, {2, 2, 8, 1}, {1, 2, 8, 4}};
  for (const auto &shape : wrong) {
    SCOPED_TRACE("lse shape [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) + ", " +
                 std::to_string(shape[2]) + ", " + std::to_string(shape[3]) + "]");
    std::vector<float> big(256, 0.0f);
    attnc_tensor saved = tl;
    tl = view(big, shape[0], shape[1], shape[2], shape[3]);
    EXPECT_EQ(forward(), ATTNC_ERROR_SHAPE);
    EXPECT_TRUE(names("lse")) << attnc_last_error();
    EXPECT_EQ(backward(), ATTNC_ERROR_SHAPE);
    EXPECT_TRUE(names("lse")) << attnc_last_error();
    tl = saved;
  }
  for (attnc_dtype dtype : {ATTNC_DTYPE_BF16, ATTNC_DTYPE_F16, static_cast<attnc_dtype>(42)}) {
    SCOPED_TRACE("lse dtype " + std::to_string(dtype));
    tl.dtype = dtype;
    EXPECT_EQ(forward(), ATTNC_ERROR_DTYPE);
    EXPECT_TRUE(names("lse")) << attnc_last_error();
    EXPECT_EQ(backward(), ATTNC_ERROR_DTYPE);
    EXPECT_TRUE(names("lse")) << attnc_last_error();
    tl.dtype = ATTNC_DTYPE_F32;
  }
  tl.strides[2] = 0;
  EXPECT_EQ(forward(), ATTNC_ERROR_STRIDE);
  EXPECT_TRUE(names("lse")) << attnc_last_error();
  EXPECT_EQ(backward(), ATTNC_ERROR_STRIDE);
  EXPECT_TRUE(names("lse")) << attnc_last_error();
  tl.strides[2] = 1;
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, InputsOfMixedDtypesAreRejected) {
  // q, k, v, o and d_o share one dtype; the gradients may differ from it.
  std::vector<uint16_t> half(64, 0x3f80);
  for (auto [name, t] : {std::pair{"o", &to}, {"d_o", &tg}, {"k", &tk}}) {
    SCOPED_TRACE(name);
    attnc_tensor saved = *t;
    *t = tensorView(half.data(), {1, 2, 8, 4}, ATTNC_DTYPE_BF16);
    EXPECT_EQ(backward(), ATTNC_ERROR_DTYPE);
    EXPECT_TRUE(names(name)) << attnc_last_error();
    *t = saved;
  }
  tdk.dtype = ATTNC_DTYPE_F16;
  EXPECT_EQ(backward(), ATTNC_ERROR_DTYPE);
  EXPECT_TRUE(names("d_k")) << attnc_last_error();
}

TEST_F(GradientErrors, GradientsThatOverlapAreRejected) {
  // A gradient on the memory of an input or of another gradient, whole or
  // in part; or with strides that overlap itself.
  auto expectRejected = [&](const char *gradient) {
    attnc_status s = backward();
    EXPECT_TRUE(s == ATTNC_ERROR_INVALID_ARGUMENT || s == ATTNC_ERROR_STRIDE) << attnc_status_name(s);
    EXPECT_TRUE(names(gradient)) << attnc_last_error();
  };
  const std::pair<const char *, attnc_tensor *> grads[] = {{"d_q", &tdq}, {"d_k", &tdk}, {"d_v", &tdv}};
  const std::pair<const char *, attnc_tensor *> inputs[] = {{"q", &tq}, {"k", &tk}, {"v", &tv}, {"o", &to}, {"d_o", &tg}};
  for (auto [gname, gt] : grads) {
    void *saved = gt->data;
    for (auto [iname, it] : inputs) {
      SCOPED_TRACE(std::string(gname) + " on " + iname);
      gt->data = it->data;
      expectRejected(gname);
    }
    for (auto [oname, ot] : grads) {
      if (ot == gt)
        continue;
      SCOPED_TRACE(std::string(gname) + " on " + oname);
      gt->data = ot->data;
      // Whichever of the two comes second is named.
      attnc_status s = backward();
      EXPECT_TRUE(s == ATTNC_ERROR_INVALID_ARGUMENT || s == ATTNC_ERROR_STRIDE) << attnc_status_name(s);
      EXPECT_TRUE(names(gname) || names(oname)) << attnc_last_error();
    }
    gt->data = saved;
  }
  {
    SCOPED_TRACE("d_k partly on d_q");
    std::vector<float> shared(96, 0.0f);
    attnc_tensor savedQ = tdq, savedK = tdk;
    tdq = view(shared, 1, 2, 8, 4);
    tdk = view(shared, 1, 2, 8, 4);
    tdk.data = shared.data() + 32;
    expectRejected("d_k");
    tdq = savedQ;
    tdk = savedK;
  }
  {
    SCOPED_TRACE("d_q partly on q, strided");
    std::vector<float> shared(200, 0.0f);
    attnc_tensor savedQ = tq, savedG = tdq;
    std::copy(q.begin(), q.end(), shared.begin());
    tq = view(shared, 1, 2, 8, 4);
    tdq = view(shared, 1, 2, 8, 4);
    tdq.data = shared.data() + 60;
    tdq.strides[2] = 5; // rows 5 apart: d_q's first elements lie in q's last row
    tdq.strides[1] = 40;
    tdq.strides[0] = 80;
    expectRejected("d_q");
    tq = savedQ;
    tdq = savedG;
  }
  tdk.strides[2] = 1; // rows overlap each other
  expectRejected("d_k");
  tdk.strides[2] = 4;
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, GradientsThatOverlapLseAreRejected) {
  // lse is an input of the backward pass too: a gradient written over it
  // would change the rows of later slices.
  for (auto [gname, gt] : {std::pair{"d_q", &tdq}, {"d_k", &tdk}, {"d_v", &tdv}}) {
    SCOPED_TRACE(std::string(gname) + " on lse");
    std::vector<float> shared(80, 0.0f);
    attnc_tensor savedL = tl, savedG = *gt;
    tl = view(shared, 1, 2, 8, 1);
    tl.data = shared.data() + 64; // the last 16 floats
    std::copy(lse.begin(), lse.end(), shared.begin() + 64);
    *gt = view(shared, 1, 2, 8, 4);
    gt->data = shared.data() + 16; // its last 16 elements are lse's
    attnc_status s = backward();
    EXPECT_TRUE(s == ATTNC_ERROR_INVALID_ARGUMENT || s == ATTNC_ERROR_STRIDE) << attnc_status_name(s);
    EXPECT_TRUE(names(gname)) << attnc_last_error();
    tl = savedL;
    *gt = savedG;
  }
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, LseThatOverlapsTheForwardsTensorsIsRejected) {
  // The forward writes lse while it reads q, k, v and writes o.
  for (auto [name, t] : {std::pair{"q", &tq}, {"k", &tk}, {"v", &tv}, {"o", &to}}) {
    SCOPED_TRACE(std::string("lse on ") + name);
    attnc_tensor saved = tl;
    tl.data = static_cast<float *>(t->data) + 8; // inside that tensor's 64 floats
    EXPECT_EQ(forward(), ATTNC_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(attnc_last_error()).find(std::string("'") + name + "'"), std::string::npos)
        << attnc_last_error();
    tl = saved;
  }
  EXPECT_EQ(forward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, ZeroLengthIsNoWork) {
  // Refused before ABI 3; now an empty call succeeds and writes nothing.
  for (auto [name, t] : backwardTensors())
    t->shape[2] = 0;
  EXPECT_EQ(backward(), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(forward(), ATTNC_OK) << attnc_last_error();
}

TEST_F(GradientErrors, WrongHeadCountForADeclaredPatternIsRejected) {
  KernelPtr multi = compile({"PerHeadGaps", nullptr, kPerHeadGaps, {}}, "fused");
  ASSERT_TRUE(multi);
  ASSERT_EQ(attnc_kernel_num_heads(multi.get()), 2);
  std::vector<float> buf3(3 * 8 * 4, 0.5f), lse3(3 * 8, 0.0f);
  std::vector<float> outs[4];
  for (std::vector<float> &x : outs)
    x.assign(buf3.size(), 0.0f);
  attnc_tensor t = view(buf3, 1, 3, 8, 4), l = view(lse3, 1, 3, 8, 1), to3 = view(outs[0], 1, 3, 8, 4),
               a = view(outs[1], 1, 3, 8, 4), b = view(outs[2], 1, 3, 8, 4), c = view(outs[3], 1, 3, 8, 4);
  EXPECT_EQ(attnc_run_forward(multi.get(), &t, &t, &t, &to3, &l, nullptr), ATTNC_ERROR_SHAPE);
  EXPECT_EQ(attnc_run_backward(multi.get(), &t, &t, &t, &to3, &t, &l, &a, &b, &c, nullptr), ATTNC_ERROR_SHAPE);
  EXPECT_NE(std::string(attnc_last_error()).find("3 heads"), std::string::npos) << attnc_last_error();
}

/// Backends without a backward pass: the sparsifier (no lse either) and
/// halide (lse, no backward), where this build has them.
class BackendWithoutBackward : public ::testing::TestWithParam<const char *> {};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendWithoutBackward);

TEST_P(BackendWithoutBackward, BackwardIsUnsupported) {
  const std::string backend = GetParam();
  KernelPtr kernel = compile(kBigbird, backend.c_str());
  ASSERT_TRUE(kernel);
  const int64_t B = 1, H = 2, n = 40, d = 16;
  const size_t count = static_cast<size_t>(B * H * n * d);
  Inputs in = randomInputs(count, 109);
  std::vector<float> o(count, 0.0f), lse(static_cast<size_t>(B * H * n), 0.0f), dq(count), dk(count), dv(count);
  attnc_tensor tq = view(in.q, B, H, n, d), tk = view(in.k, B, H, n, d), tv = view(in.v, B, H, n, d),
               tg = view(in.dO, B, H, n, d), to = view(o, B, H, n, d), tl = view(lse, B, H, n, 1),
               tdq = view(dq, B, H, n, d), tdk = view(dk, B, H, n, d), tdv = view(dv, B, H, n, d);
  // The plain forward pass works.
  ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, nullptr, nullptr), ATTNC_OK) << attnc_last_error();
  attnc_status s = attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr);
  if (backend == "sparsifier") {
    EXPECT_EQ(s, ATTNC_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(attnc_last_error()).find(backend), std::string::npos) << attnc_last_error();
  } else {
    ASSERT_EQ(s, ATTNC_OK) << attnc_last_error(); // halide gives lse
  }
  EXPECT_EQ(attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tg, &tl, &tdq, &tdk, &tdv, nullptr),
            ATTNC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(attnc_last_error()).find(backend), std::string::npos) << attnc_last_error();
}

INSTANTIATE_TEST_SUITE_P(GradientBackends, BackendWithoutBackward,
                         ::testing::ValuesIn(builtBackends({"sparsifier", "halide"})),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

} // namespace
} // namespace attnc::test
