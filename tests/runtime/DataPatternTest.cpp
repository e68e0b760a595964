//===- DataPatternTest.cpp - Patterns that read the data, end to end ------===//
//
// Kernels of patterns with `input` arrays (LSH buckets, documents, selected
// blocks and tokens), JIT-compiled and called through attnc_forward /
// attnc_backward with their inputs, against attention in double over masks
// written here from the data directly (not through attnc's evaluators), on
// ragged lengths, rows with one key and none, GQA, bf16 and broadcast
// inputs; and the errors of bad inputs. ctest runs it again with each
// instruction set forced (tests/runtime/CMakeLists.txt).
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <utility>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace attnc::test {
namespace {

/// mask(slice, i, j): whether query i of slice (b * hq + h) attends key j.
using Mask = std::function<bool(int64_t slice, int64_t i, int64_t j)>;

using Reference = AttentionInDouble;

/// Softmax attention in double, forward and backward, over `mask`
/// (TestSupport's attentionInDouble); GQA: query head h reads key/value head
/// h / (hq / hkv).
Reference reference(const Mask &mask, const std::vector<float> &q, const std::vector<float> &k,
                    const std::vector<float> &v, const std::vector<float> &dO, int64_t batch, int64_t hq,
                    int64_t hkv, int64_t n, int64_t d) {
  return attentionInDouble({mask}, q, k, v, dO, batch, hq, hkv, n, n, d);
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

/// An int32 input tensor [B, H, D1, D2] over `values`.
attnc_input intInput(const char *name, std::vector<int32_t> &values, int64_t B, int64_t H, int64_t D1, int64_t D2) {
  attnc_input in{};
  in.name = name;
  in.values.data = values.data();
  in.values.dtype = ATTNC_DTYPE_I32;
  const int64_t shape[4] = {B, H, D1, D2};
  int64_t stride = 1;
  for (int a = 3; a >= 0; --a) {
    in.values.shape[a] = shape[a];
    in.values.strides[a] = stride;
    stride *= shape[a];
  }
  return in;
}

/// One problem: shapes, the tensors and what the kernels gave.
struct DataRun {
  int64_t batch = 1, hq = 2, hkv = 2, n = 0, d = 16;
  std::vector<float> q, k, v, dO, o, lse, dq, dk, dv;

  DataRun(int64_t batch, int64_t hq, int64_t hkv, int64_t n, int64_t d, uint32_t seed)
      : batch(batch), hq(hq), hkv(hkv), n(n), d(d) {
    q = randomFloats(static_cast<size_t>(batch * hq * n * d), seed, 1.0f);
    k = randomFloats(static_cast<size_t>(batch * hkv * n * d), seed + 1, 1.0f);
    v = randomFloats(static_cast<size_t>(batch * hkv * n * d), seed + 2, 1.0f);
    dO = randomFloats(static_cast<size_t>(batch * hq * n * d), seed + 3, 1.0f);
  }

  using Pass = attnc_status (*)(const attnc_kernel *, const attnc_call *);

  /// One call of `pass` (attnc_forward, or attnc_backward with the gradient
  /// tensors too) over this problem's tensors and `inputs`; `adjust` may
  /// change the call description before it is made.
  attnc_status call(Pass pass, const attnc_kernel *kernel, std::vector<attnc_input> &inputs,
                    const std::function<void(attnc_call &)> &adjust = {}) {
    attnc_tensor tq = view(q, batch, hq, n, d), tk = view(k, batch, hkv, n, d), tv = view(v, batch, hkv, n, d),
                 to = view(o, batch, hq, n, d), tl = view(lse, batch, hq, n, 1), tdo = view(dO, batch, hq, n, d),
                 tdq = view(dq, batch, hq, n, d), tdk = view(dk, batch, hkv, n, d), tdv = view(dv, batch, hkv, n, d);
    attnc_call c;
    attnc_call_init(&c);
    c.q = &tq;
    c.k = &tk;
    c.v = &tv;
    c.o = &to;
    c.lse = &tl;
    c.inputs = inputs.data();
    c.num_inputs = static_cast<int64_t>(inputs.size());
    if (pass == attnc_backward) {
      c.d_o = &tdo;
      c.d_q = &tdq;
      c.d_k = &tdk;
      c.d_v = &tdv;
    }
    if (adjust)
      adjust(c);
    return pass(kernel, &c);
  }

  attnc_status forward(const attnc_kernel *kernel, std::vector<attnc_input> &inputs,
                       const std::function<void(attnc_call &)> &adjust = {}) {
    o.assign(q.size(), -7.0f);
    lse.assign(static_cast<size_t>(batch * hq * n), -7.0f);
    return call(attnc_forward, kernel, inputs, adjust);
  }

  attnc_status backward(const attnc_kernel *kernel, std::vector<attnc_input> &inputs,
                        const std::function<void(attnc_call &)> &adjust = {}) {
    dq.assign(q.size(), -7.0f);
    dk.assign(k.size(), -7.0f);
    dv.assign(v.size(), -7.0f);
    return call(attnc_backward, kernel, inputs, adjust);
  }

  /// Runs both passes and compares them with the reference over `mask`.
  void check(const attnc_kernel *kernel, std::vector<attnc_input> &inputs, const Mask &mask, const std::string &what) {
    ASSERT_EQ(forward(kernel, inputs), ATTNC_OK) << what << ": " << attnc_last_error();
    ASSERT_EQ(backward(kernel, inputs), ATTNC_OK) << what << ": " << attnc_last_error();
    const Reference r = reference(mask, q, k, v, dO, batch, hq, hkv, n, d);
    EXPECT_LT(maxError(o, r.o), 2e-5) << what << " (O)";
    for (size_t x = 0; x < lse.size(); ++x) {
      if (std::isinf(r.lse[x]))
        EXPECT_TRUE(std::isinf(lse[x]) && lse[x] < 0) << what << ": row " << x << " has no key, lse " << lse[x];
      else
        EXPECT_NEAR(lse[x], r.lse[x], 2e-5) << what << " (lse row " << x << ")";
    }
    EXPECT_LT(maxError(dq, r.dq), 5e-5) << what << " (dQ)";
    EXPECT_LT(maxError(dk, r.dk), 5e-5) << what << " (dK)";
    EXPECT_LT(maxError(dv, r.dv), 5e-5) << what << " (dV)";
  }
};

const char *kLshUnion = R"(
pattern lsh_union {
  input b0 : int[n]
  input b1 : int[n]
  causal
  attend { j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }
}
)";

const char *kSelect = R"(
pattern select {
  param B = 16
  param k = 3
  input sel : int[(n + B - 1) / B, k]
  causal
  attend { j : j / B in sel[i / B] } | { j : i - j < B }
}
)";

/// The seed's LSH attention: two rounds, causal, the query itself only
/// where nothing else is left.
const char *kLshSelf = R"(
pattern lsh {
  input b0 : int[n]
  input b1 : int[n]
  causal
  attend ({ j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }) - { i } else { i }
}
)";

std::vector<int32_t> randomInts(size_t count, int32_t lo, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> out(count);
  for (int32_t &x : out)
    x = dist(rng);
  return out;
}

class DataPatternLengths : public ::testing::TestWithParam<int64_t> {};

TEST_P(DataPatternLengths, LshRoundsMatchReferenceWithPerHeadBuckets) {
  const int64_t n = GetParam(), batch = 2, heads = 2;
  KernelPtr kernel = compileSource(kLshUnion);
  ASSERT_TRUE(kernel);
  // Per (batch, head) buckets: 8 of them, so rows have few keys.
  std::vector<int32_t> b0 = randomInts(static_cast<size_t>(batch * heads * n), 0, 7, 11),
                       b1 = randomInts(static_cast<size_t>(batch * heads * n), 0, 7, 12);
  std::vector<attnc_input> inputs{intInput("b0", b0, batch, heads, n, 1), intInput("b1", b1, batch, heads, n, 1)};
  DataRun run(batch, heads, heads, n, 16, 5);
  run.check(kernel.get(), inputs,
            [&](int64_t s, int64_t i, int64_t j) {
              const size_t at = static_cast<size_t>(s * n);
              return j <= i && (b0[at + j] == b0[at + i] || b1[at + j] == b1[at + i]);
            },
            "lsh_union n=" + std::to_string(n));
}

/// The reference of a causal block selection plus a window: j <= i, and
/// within w of i or in a block that i's query block (of B) selects.
bool selectedOrNear(const std::vector<int32_t> &sel, int64_t slots, int64_t B, int64_t w, int64_t i, int64_t j) {
  if (j > i)
    return false;
  if (i - j < w)
    return true;
  for (int64_t c = 0; c < slots; ++c)
    if (sel[static_cast<size_t>((i / B) * slots + c)] == j / B)
      return true;
  return false;
}

TEST_P(DataPatternLengths, BlockSelectionMatchesReferenceWithUnusedSlots) {
  const int64_t n = GetParam(), B = 16, slots = 3, blocks = (n + B - 1) / B;
  KernelPtr kernel = compileSource(kSelect);
  ASSERT_TRUE(kernel);
  // One table for the whole batch and every head (broadcast), -1 slots included.
  std::vector<int32_t> sel = randomInts(static_cast<size_t>(blocks * slots), -1, static_cast<int32_t>(blocks - 1), 21);
  std::vector<attnc_input> inputs{intInput("sel", sel, 1, 1, blocks, slots)};
  DataRun run(2, 2, 2, n, 16, 7);
  run.check(kernel.get(), inputs,
            [&](int64_t, int64_t i, int64_t j) { return selectedOrNear(sel, slots, B, B, i, j); },
            "select n=" + std::to_string(n));
}

/// NSA's shape: blocks of B = 32 or 64 queries (a whole row block or two
/// share one selection, so the plan builds each block from its rows' ends
/// and the selection once) and a window of w keys other than B, less the
/// selected blocks it overlaps; slots of -1 and a block selected twice.
TEST_P(DataPatternLengths, SelectionsOfWholeRowBlocksWithAWindowMatchReference) {
  const int64_t n = GetParam(), slots = 4;
  for (const auto [B, w] : {std::pair<int64_t, int64_t>{64, 40}, {32, 64}, {64, 64}}) {
    const int64_t blocks = (n + B - 1) / B;
    KernelPtr kernel = compileSource("pattern nsa { param B = " + std::to_string(B) + "  param k = 4  param w = " +
                                     std::to_string(w) +
                                     "  input sel : int[(n + B - 1) / B, k]  causal\n"
                                     "  attend { j : j / B in sel[i / B] } | { j : i - j < w } }");
    ASSERT_TRUE(kernel);
    std::vector<int32_t> sel = randomInts(static_cast<size_t>(blocks * slots), -1, static_cast<int32_t>(blocks - 1),
                                          static_cast<uint32_t>(41 + B + w));
    if (blocks > 1)
      sel[static_cast<size_t>(slots)] = sel[static_cast<size_t>(slots + 1)] = 0; // block 1 selects block 0 twice
    std::vector<attnc_input> inputs{intInput("sel", sel, 1, 1, blocks, slots)};
    DataRun run(1, 2, 2, n, 16, 17);
    run.check(kernel.get(), inputs,
              [&](int64_t, int64_t i, int64_t j) { return selectedOrNear(sel, slots, B, w, i, j); },
              "nsa B=" + std::to_string(B) + " w=" + std::to_string(w) + " n=" + std::to_string(n));
  }
}

TEST_P(DataPatternLengths, DocumentsAttendWithinTheirIds) {
  const int64_t n = GetParam();
  KernelPtr kernel = compileSource("pattern document { input doc : int[n]  causal  attend { j : doc[j] == doc[i] } }");
  ASSERT_TRUE(kernel);
  // Packed documents of ragged lengths (ids need not be sorted: two ids alternate at the end).
  std::vector<int32_t> doc(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    doc[static_cast<size_t>(i)] = static_cast<int32_t>(i < n / 2 ? i / 37 : 1000 + (i % 2));
  std::vector<attnc_input> inputs{intInput("doc", doc, 1, 1, n, 1)};
  DataRun run(1, 4, 2, n, 8, 9); // GQA: 4 query heads on 2 key/value heads
  run.check(kernel.get(), inputs,
            [&](int64_t, int64_t i, int64_t j) { return j <= i && doc[static_cast<size_t>(j)] == doc[static_cast<size_t>(i)]; },
            "document n=" + std::to_string(n));
}

TEST_P(DataPatternLengths, SelectedTokensWithoutCausalityIncludeEmptyRows) {
  const int64_t n = GetParam(), slots = 2;
  // No window and no causality: rows whose slots are all -1 have no key.
  KernelPtr kernel = compileSource("pattern topk { param k = 2  input top : int[n, k]  attend { j : j in top[i] } }");
  ASSERT_TRUE(kernel);
  std::vector<int32_t> top = randomInts(static_cast<size_t>(n * slots), -1, static_cast<int32_t>(n - 1), 31);
  for (int64_t i = 0; i < n; i += 5) // every fifth row selects nothing
    top[static_cast<size_t>(i * slots)] = top[static_cast<size_t>(i * slots + 1)] = -1;
  std::vector<attnc_input> inputs{intInput("top", top, 1, 1, n, slots)};
  DataRun run(1, 2, 2, n, 16, 13);
  run.check(kernel.get(), inputs,
            [&](int64_t, int64_t i, int64_t j) {
              return top[static_cast<size_t>(i * slots)] == j || top[static_cast<size_t>(i * slots + 1)] == j;
            },
            "topk n=" + std::to_string(n));
}

/// Three groups in one call: selected tokens (row by row), a window (raster
/// row blocks) and documents (row blocks in the ids' order), each continuing
/// the rows' softmax and gradient sums in place after the one before.
TEST_P(DataPatternLengths, TokensWindowAndDocumentsRunAsThreeGroups) {
  const int64_t n = GetParam(), slots = 2;
  KernelPtr kernel = compileSource("pattern mixed { param k = 2  input top : int[n, k]  input doc : int[n]  causal "
                                   "attend { j : j in top[i] } | { j : i - j < 4 } | { j : doc[j] == doc[i] } }");
  ASSERT_TRUE(kernel);
  std::vector<int32_t> top = randomInts(static_cast<size_t>(2 * n * slots), -1, static_cast<int32_t>(n - 1), 51),
                       doc = randomInts(static_cast<size_t>(2 * n), 0, 9, 52);
  std::vector<attnc_input> inputs{intInput("top", top, 1, 2, n, slots), intInput("doc", doc, 1, 2, n, 1)};
  DataRun run(1, 2, 2, n, 16, 53);
  run.check(kernel.get(), inputs,
            [&](int64_t s, int64_t i, int64_t j) {
              const int32_t *t = top.data() + (s * n + i) * slots, *id = doc.data() + s * n;
              return j <= i && (t[0] == j || t[1] == j || i - j < 4 || id[j] == id[i]);
            },
            "tokens, window and documents n=" + std::to_string(n));
}

INSTANTIATE_TEST_SUITE_P(Ragged, DataPatternLengths, ::testing::Values(1, 2, 63, 777, 4097),
                         [](const auto &info) { return "n" + std::to_string(info.param); });

/// An input longer than the sequence (its extra entries never read as
/// keys): its classes run in raster order, not in an order of other length.
TEST(DataPattern, ClassesOfAnInputLongerThanTheSequence) {
  const int64_t n = 200;
  KernelPtr kernel = compileSource("pattern longer { input b : int[n + 7] causal attend { j : b[j] == b[i] } }");
  ASSERT_TRUE(kernel);
  std::vector<int32_t> b = randomInts(static_cast<size_t>(n + 7), 0, 5, 71);
  std::vector<attnc_input> inputs{intInput("b", b, 1, 1, n + 7, 1)};
  DataRun run(1, 2, 2, n, 16, 73);
  run.check(kernel.get(), inputs,
            [&](int64_t, int64_t i, int64_t j) { return j <= i && b[static_cast<size_t>(j)] == b[static_cast<size_t>(i)]; },
            "an input of n + 7 entries");
}

/// Two rounds whose second input is longer and whose first is shorter than
/// the sequence: a row past the shorter one's entries is a bad input, named.
TEST(DataPattern, RoundsOfOtherLengthsAreReadWithinTheirEntries) {
  const int64_t n = 120;
  const char *source = "pattern mixed { input b0 : int[n] input b1 : int[n + 3] causal "
                       "attend { j : b0[j] == b0[i] } | { j : b1[j] == b1[i] } }";
  KernelPtr kernel = compileSource(source);
  ASSERT_TRUE(kernel);
  std::vector<int32_t> b0 = randomInts(n, 0, 6, 81), b1 = randomInts(n + 3, 0, 6, 82);
  std::vector<attnc_input> inputs{intInput("b0", b0, 1, 1, n, 1), intInput("b1", b1, 1, 1, n + 3, 1)};
  DataRun run(1, 2, 2, n, 16, 83);
  run.check(kernel.get(), inputs,
            [&](int64_t, int64_t i, int64_t j) {
              return j <= i && (b0[static_cast<size_t>(j)] == b0[static_cast<size_t>(i)] ||
                                b1[static_cast<size_t>(j)] == b1[static_cast<size_t>(i)]);
            },
            "b1 of n + 3 entries");
  KernelPtr shorter = compileSource("pattern short { input b : int[(n + 1) / 2] attend { j : b[j] == b[i] } }");
  ASSERT_TRUE(shorter);
  std::vector<int32_t> half = randomInts(n / 2, 0, 3, 84);
  std::vector<attnc_input> halfInputs{intInput("b", half, 1, 1, n / 2, 1)};
  EXPECT_EQ(run.forward(shorter.get(), halfInputs), ATTNC_ERROR_INVALID_ARGUMENT) << attnc_last_error();
  EXPECT_NE(std::string(attnc_last_error()).find("input 'b' read at [60], outside its 60 entries"), std::string::npos)
      << attnc_last_error();
}

/// The self rule on its extremes: a bucket per position (every row falls
/// back to itself), one bucket for all (every row but the first has others).
TEST(DataPattern, LshSelfRuleFallsBackToTheQueryOnlyWhenAlone) {
  const int64_t n = 300;
  KernelPtr kernel = compileSource(kLshSelf);
  ASSERT_TRUE(kernel);
  std::vector<int32_t> unique(static_cast<size_t>(n)), same(static_cast<size_t>(n), 4), mixed = randomInts(n, 0, 40, 3);
  for (int64_t i = 0; i < n; ++i)
    unique[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (auto *pair : {&unique, &same, &mixed}) {
    std::vector<int32_t> &b0 = *pair, b1 = *pair == mixed ? randomInts(n, 0, 40, 4) : b0;
    std::vector<attnc_input> inputs{intInput("b0", b0, 1, 1, n, 1), intInput("b1", b1, 1, 1, n, 1)};
    DataRun run(1, 2, 2, n, 16, 17);
    auto others = [&](int64_t i, int64_t j) {
      return j < i && (b0[static_cast<size_t>(j)] == b0[static_cast<size_t>(i)] ||
                       b1[static_cast<size_t>(j)] == b1[static_cast<size_t>(i)]);
    };
    run.check(kernel.get(), inputs,
              [&](int64_t, int64_t i, int64_t j) {
                bool alone = true;
                for (int64_t x = 0; x < i && alone; ++x)
                  alone = !others(i, x);
                return alone ? j == i : others(i, j);
              },
              pair == &unique ? "a bucket per position" : pair == &same ? "one bucket" : "41 buckets");
  }
}

TEST(DataPattern, DenseBaselineAndBf16AgreeWithTheFusedKernels) {
  const int64_t n = 200;
  std::vector<int32_t> b0 = randomInts(n, 0, 5, 41), b1 = randomInts(n, 0, 5, 42);
  std::vector<attnc_input> inputs{intInput("b0", b0, 1, 1, n, 1), intInput("b1", b1, 1, 1, n, 1)};
  auto mask = [&](int64_t, int64_t i, int64_t j) {
    return j <= i && (b0[static_cast<size_t>(j)] == b0[static_cast<size_t>(i)] ||
                      b1[static_cast<size_t>(j)] == b1[static_cast<size_t>(i)]);
  };
  KernelPtr dense = compileSource(kLshUnion, "dense");
  ASSERT_TRUE(dense);
  DataRun run(1, 2, 2, n, 16, 23);
  run.check(dense.get(), inputs, mask, "dense");

  // bf16 inputs, computed in f32 from the rounded values: compare with the
  // reference on the same rounded values.
  KernelPtr fused = compileSource(kLshUnion);
  ASSERT_TRUE(fused);
  for (std::vector<float> *t : {&run.q, &run.k, &run.v})
    for (float &x : *t)
      x = fromBf16(toBf16(x));
  std::vector<uint16_t> qb(run.q.size()), kb(run.k.size()), vb(run.v.size());
  for (size_t x = 0; x < qb.size(); ++x) {
    qb[x] = toBf16(run.q[x]);
    kb[x] = toBf16(run.k[x]);
    vb[x] = toBf16(run.v[x]);
  }
  std::vector<float> o(run.q.size());
  auto bf16View = [&](std::vector<uint16_t> &data) {
    attnc_tensor t{};
    t.data = data.data();
    t.dtype = ATTNC_DTYPE_BF16;
    const int64_t shape[4] = {1, 2, n, 16}, strides[4] = {2 * n * 16, n * 16, 16, 1};
    for (int a = 0; a < 4; ++a) {
      t.shape[a] = shape[a];
      t.strides[a] = strides[a];
    }
    return t;
  };
  attnc_tensor tq = bf16View(qb), tk = bf16View(kb), tv = bf16View(vb), to = view(o, 1, 2, n, 16);
  attnc_call call;
  attnc_call_init(&call);
  call.q = &tq;
  call.k = &tk;
  call.v = &tv;
  call.o = &to;
  call.inputs = inputs.data();
  call.num_inputs = 2;
  ASSERT_EQ(attnc_forward(fused.get(), &call), ATTNC_OK) << attnc_last_error();
  const Reference r = reference(mask, run.q, run.k, run.v, run.dO, 1, 2, 2, n, 16);
  EXPECT_LT(maxError(o, r.o), 2e-2); // P is rounded to bf16 where AVX512_BF16 multiplies
}

/// A call's inputs are checked before anything runs: each mistake names the
/// input, and the output is left as it was.
TEST(DataPattern, BadInputsAreRefusedNamingTheInput) {
  const int64_t n = 64, B = 16, blocks = 4;
  KernelPtr kernel = compileSource(kSelect);
  ASSERT_TRUE(kernel);
  DataRun run(1, 2, 2, n, 16, 1);
  std::vector<int32_t> sel(static_cast<size_t>(blocks * 3), 0);
  std::vector<int64_t> sel64(sel.size(), 0);
  struct Case {
    const char *what;
    std::function<void(std::vector<attnc_input> &)> spoil;
    attnc_status status;
    const char *message;
  };
  const std::vector<Case> cases{
      {"none", [](auto &in) { in.clear(); }, ATTNC_ERROR_INVALID_ARGUMENT, "reads the input 'sel'"},
      {"unknown", [](auto &in) { in[0].name = "sle"; }, ATTNC_ERROR_INVALID_ARGUMENT, "has no input 'sle'"},
      {"twice", [](auto &in) { in.push_back(in[0]); }, ATTNC_ERROR_INVALID_ARGUMENT, "'sel' is given twice"},
      {"dtype", [](auto &in) { in[0].values.dtype = ATTNC_DTYPE_F32; }, ATTNC_ERROR_DTYPE, "input 'sel' has dtype"},
      {"rows", [](auto &in) { in[0].values.shape[2] = 5; }, ATTNC_ERROR_SHAPE, "it must be [1, 1 or 2, 4, 3]"},
      {"batch", [](auto &in) { in[0].values.shape[0] = 3; }, ATTNC_ERROR_SHAPE, "input 'sel' has shape [3, 1, 4, 3]"},
      {"block id", [&](auto &) { sel[5] = static_cast<int32_t>(blocks); }, ATTNC_ERROR_INVALID_ARGUMENT,
       "input 'sel' holds 4 at [0, 0, 1, 2]"},
      {"below -1", [&](auto &) { sel[5] = -2; }, ATTNC_ERROR_INVALID_ARGUMENT, "or be -1 (none)"},
  };
  for (const Case &c : cases) {
    std::fill(sel.begin(), sel.end(), 0);
    std::vector<attnc_input> inputs{intInput("sel", sel, 1, 1, blocks, 3)};
    c.spoil(inputs);
    EXPECT_EQ(run.forward(kernel.get(), inputs), c.status) << c.what;
    EXPECT_NE(std::string(attnc_last_error()).find(c.message), std::string::npos)
        << c.what << ": " << attnc_last_error();
    EXPECT_EQ(run.o[0], -7.0f) << c.what << ": nothing is computed";
    EXPECT_EQ(run.backward(kernel.get(), inputs), c.status) << c.what << " (backward)";
  }
  // int64 values work as int32 ones do.
  attnc_input wide = intInput("sel", sel, 1, 1, blocks, 3);
  wide.values.data = sel64.data();
  wide.values.dtype = ATTNC_DTYPE_I64;
  std::vector<attnc_input> inputs{wide};
  EXPECT_EQ(run.forward(kernel.get(), inputs), ATTNC_OK) << attnc_last_error();

  // Where data patterns do not run yet: in varlen calls, refused before
  // any row is computed. (A CUDA device takes them: CudaHostData.*.)
  const int32_t offsets[2] = {0, static_cast<int32_t>(n)};
  const attnc_varlen varlen{offsets, offsets, 1};
  auto adjust = [&](attnc_call &c) { c.varlen = &varlen; };
  EXPECT_EQ(run.forward(kernel.get(), inputs, adjust), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(attnc_last_error()).find("reads data (its inputs), which varlen calls"), std::string::npos)
      << attnc_last_error();
  EXPECT_EQ(run.o[0], -7.0f) << "nothing is computed";
  EXPECT_EQ(run.backward(kernel.get(), inputs, adjust), ATTNC_ERROR_UNSUPPORTED) << "(backward)";

  // The older calls cannot give inputs: they say which call can.
  attnc_tensor tq = view(run.q, 1, 2, n, 16), to = view(run.o, 1, 2, n, 16);
  EXPECT_EQ(attnc_run(kernel.get(), &tq, &tq, &tq, &to, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("attnc_forward"), std::string::npos) << attnc_last_error();
  // A call description that was not initialised.
  attnc_call zero{};
  EXPECT_EQ(attnc_forward(kernel.get(), &zero), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("attnc_call_init"), std::string::npos) << attnc_last_error();
  (void)B;
}

TEST(DataPattern, KernelDescribesItsInputs) {
  KernelPtr kernel = compileSource(kSelect);
  ASSERT_TRUE(kernel);
  ASSERT_EQ(attnc_kernel_num_inputs(kernel.get()), 1);
  const char *name = nullptr;
  int32_t rank = 0;
  int64_t dims[2] = {0, 0}, limit = -5;
  ASSERT_EQ(attnc_kernel_input(kernel.get(), 0, 100, &name, &rank, dims, &limit), ATTNC_OK);
  EXPECT_STREQ(name, "sel");
  EXPECT_EQ(rank, 2);
  EXPECT_EQ(dims[0], 7); // ceil(100 / 16)
  EXPECT_EQ(dims[1], 3);
  EXPECT_EQ(limit, 7); // block ids of 16 keys
  EXPECT_EQ(attnc_kernel_input(kernel.get(), 1, 100, &name, &rank, dims, &limit), ATTNC_ERROR_INVALID_ARGUMENT);
  KernelPtr lsh = compileSource(kLshUnion);
  ASSERT_TRUE(lsh);
  ASSERT_EQ(attnc_kernel_input(lsh.get(), 1, 100, &name, &rank, dims, &limit), ATTNC_OK);
  EXPECT_STREQ(name, "b1");
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(dims[0], 100);
  EXPECT_EQ(dims[1], 1);
  EXPECT_EQ(limit, 0); // buckets: any integer
}

TEST(DataPattern, HalideRefusesDataPatterns) {
  for (const char *backend : builtBackends({"halide"})) {
    std::string error;
    KernelPtr kernel = jitCompile(nullptr, kLshUnion, {}, backend, jitCacheDir(), error);
    EXPECT_FALSE(kernel) << backend;
    EXPECT_NE(error.find("reads data"), std::string::npos) << backend << ": " << error;
  }
}

/// The reference backend: MLIR's sparsifier code over a CSR assembled from
/// each slice's data at the call (forward only).
TEST(DataPattern, SparsifierReferenceAssemblesEachSlicesRowsFromItsData) {
  for (const char *backend : builtBackends({"sparsifier"})) {
    const int64_t n = 150, batch = 2, heads = 2;
    KernelPtr kernel = compileSource(kLshSelf, backend);
    ASSERT_TRUE(kernel);
    std::vector<int32_t> b0 = randomInts(static_cast<size_t>(batch * heads * n), 0, 9, 51),
                         b1 = randomInts(static_cast<size_t>(batch * n), 0, 9, 52);
    std::vector<attnc_input> inputs{intInput("b0", b0, batch, heads, n, 1), intInput("b1", b1, batch, 1, n, 1)};
    DataRun run(batch, heads, heads, n, 16, 61);
    run.lse.assign(static_cast<size_t>(batch * heads * n), 0.0f);
    run.o.assign(run.q.size(), -7.0f);
    attnc_tensor tq = view(run.q, batch, heads, n, 16), tk = view(run.k, batch, heads, n, 16),
                 tv = view(run.v, batch, heads, n, 16), to = view(run.o, batch, heads, n, 16);
    attnc_call call;
    attnc_call_init(&call);
    call.q = &tq;
    call.k = &tk;
    call.v = &tv;
    call.o = &to;
    call.inputs = inputs.data();
    call.num_inputs = 2;
    ASSERT_EQ(attnc_forward(kernel.get(), &call), ATTNC_OK) << attnc_last_error();
    auto others = [&](int64_t s, int64_t i, int64_t j) {
      const size_t a0 = static_cast<size_t>(s * n), a1 = static_cast<size_t>((s / heads) * n);
      return j < i && (b0[a0 + j] == b0[a0 + i] || b1[a1 + j] == b1[a1 + i]);
    };
    const Reference r = reference(
        [&](int64_t s, int64_t i, int64_t j) {
          bool alone = true;
          for (int64_t x = 0; x < i && alone; ++x)
            alone = !others(s, i, x);
          return alone ? j == i : others(s, i, j);
        },
        run.q, run.k, run.v, run.dO, batch, heads, heads, n, 16);
    EXPECT_LT(maxError(run.o, r.o), 2e-5) << backend;
  }
}

} // namespace
} // namespace attnc::test
