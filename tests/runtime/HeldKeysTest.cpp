//===- HeldKeysTest.cpp - keys a cache kept, and which it may drop --------===//
//
// attnc_kernel_last_readers against a brute-force scan of masks written
// here (C++ lambdas, not attnc's evaluators); attnc_forward with
// attnc_call::key_positions (k and v hold only the keys a generation cache
// kept) against attention in double over the whole sequence, for queries
// at the end and inside it, with extra keys held, GQA, batches and score
// modifiers; and its errors: a dropped key a query reads (nothing written),
// positions out of order, the backward pass, patterns and backends it does
// not take. ctest runs it again with each instruction set forced.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace attnc::test {
namespace {

using Mask = std::function<bool(int64_t i, int64_t j)>;

KernelPtr compileSource(const std::string &source, const char *backend = "fused") {
  std::string error;
  KernelPtr kernel = jitCompile(nullptr, source.c_str(), {}, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << error;
  return kernel;
}

struct Case {
  const char *name;
  std::string source;
  Mask mask; ///< causal included
};

std::vector<Case> cases() {
  return {
      {"local_global", "pattern p { causal attend { j : i - j < 16 } | { j : j < 3 } }",
       [](int64_t i, int64_t j) { return j <= i && (i - j < 16 || j < 3); }},
      {"causal", "pattern p { causal attend { j : j <= i } }", [](int64_t i, int64_t j) { return j <= i; }},
      {"fixed", "pattern p { causal attend { j : j / 8 == i / 8 } | { j : j % 8 >= 6 } }",
       [](int64_t i, int64_t j) { return j <= i && (j / 8 == i / 8 || j % 8 >= 6); }},
      {"blocks", "pattern p { causal attend { j : j / 5 == i / 5 } }",
       [](int64_t i, int64_t j) { return j <= i && j / 5 == i / 5; }},
      {"dilated", "pattern p { causal attend { j : i - j < 24 && (i - j) % 3 == 0 } }",
       [](int64_t i, int64_t j) { return j <= i && i - j < 24 && (i - j) % 3 == 0; }},
  };
}

std::vector<int64_t> bruteLastReaders(const Mask &mask, int64_t n) {
  std::vector<int64_t> last(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j)
      if (mask(i, j))
        last[static_cast<size_t>(j)] = i;
  return last;
}

TEST(HeldKeys, LastReadersMatchABruteForceScan) {
  for (const Case &c : cases()) {
    KernelPtr kernel = compileSource(c.source);
    ASSERT_TRUE(kernel);
    for (int64_t n : {1, 2, 7, 40, 301}) {
      std::vector<int64_t> last(static_cast<size_t>(n), -9);
      ASSERT_EQ(attnc_kernel_last_readers(kernel.get(), n, last.data()), ATTNC_OK) << attnc_last_error();
      EXPECT_EQ(last, bruteLastReaders(c.mask, n)) << c.name << " n=" << n;
    }
  }
}

TEST(HeldKeys, LastReadersOfPerHeadPatternsTakeEveryHead) {
  KernelPtr kernel = compileSource("pattern p { heads 2  causal  head 0 attends { j : i - j < 4 } "
                                   "head 1 attends { j : i - j < 9 } }");
  ASSERT_TRUE(kernel);
  std::vector<int64_t> last(50);
  ASSERT_EQ(attnc_kernel_last_readers(kernel.get(), 50, last.data()), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(last, bruteLastReaders([](int64_t i, int64_t j) { return j <= i && i - j < 9; }, 50));
}

TEST(HeldKeys, LastReadersRefuseWhatNoSingleAnswerFits) {
  std::vector<int64_t> last(64);
  KernelPtr byLength = compileSource("pattern p { causal attend { j : j >= n - 4 } }");
  ASSERT_TRUE(byLength);
  EXPECT_EQ(attnc_kernel_last_readers(byLength.get(), 64, last.data()), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(attnc_last_error()).find("sequence length n"), std::string::npos) << attnc_last_error();
  KernelPtr data = compileSource("pattern p { input b : int[n]  causal attend { j : b[j] == b[i] } }");
  ASSERT_TRUE(data);
  EXPECT_EQ(attnc_kernel_last_readers(data.get(), 64, last.data()), ATTNC_ERROR_UNSUPPORTED);
  KernelPtr plain = compileSource("pattern p { causal attend { j : j <= i } }");
  ASSERT_TRUE(plain);
  EXPECT_EQ(attnc_kernel_last_readers(plain.get(), 0, last.data()), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_last_readers(plain.get(), 64, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
}

/// A call over held keys: q [batch, hq, nq, d] at positions first.., the
/// keys at `positions` gathered from k, v [batch, hkv, n, d].
struct HeldCall {
  int64_t batch, hq, hkv, nq, d;
  std::vector<int64_t> positions;
  std::vector<float> q, k, v, o;

  attnc_status run(const attnc_kernel *kernel, int64_t first, const attnc_input *inputs = nullptr,
                   int64_t numInputs = 0) {
    const int64_t nk = static_cast<int64_t>(positions.size());
    o.assign(q.size(), -7.0f);
    attnc_tensor tq = view(q, batch, hq, nq, d), tk = view(k, batch, hkv, nk, d), tv = view(v, batch, hkv, nk, d),
                 to = view(o, batch, hq, nq, d);
    attnc_call c;
    attnc_call_init(&c);
    c.q = &tq;
    c.k = &tk;
    c.v = &tv;
    c.o = &to;
    c.first_query = first;
    c.key_positions = positions.data();
    c.inputs = inputs;
    c.num_inputs = numInputs;
    return attnc_forward(kernel, &c);
  }
};

/// Keys [batch, hkv, n, d] at `positions` only.
std::vector<float> gather(const std::vector<float> &x, int64_t slices, int64_t n, int64_t d,
                          const std::vector<int64_t> &positions) {
  std::vector<float> out;
  for (int64_t s = 0; s < slices; ++s)
    for (int64_t p : positions)
      out.insert(out.end(), x.begin() + (s * n + p) * d, x.begin() + (s * n + p + 1) * d);
  return out;
}

std::vector<float> randomValues(size_t count, std::mt19937 &rng) {
  std::normal_distribution<float> dist;
  std::vector<float> x(count);
  for (float &e : x)
    e = dist(rng);
  return x;
}

/// The keys a cache holds before the queries from `first` on: those read
/// by some query at or after `first` (last reader >= first), plus every
/// `extra`-th of the others (a cache that has not compacted yet).
std::vector<int64_t> heldPositions(const std::vector<int64_t> &last, int64_t first, int64_t end, int64_t extra) {
  std::vector<int64_t> held;
  for (int64_t j = 0; j < end; ++j)
    if (last[static_cast<size_t>(j)] >= first || (extra && j % extra == 0))
      held.push_back(j);
  return held;
}

TEST(HeldKeys, QueriesOverHeldKeysEqualTheWholeSequence) {
  std::mt19937 rng(7);
  for (const Case &c : cases()) {
    KernelPtr kernel = compileSource(c.source);
    ASSERT_TRUE(kernel);
    for (const auto &[n, nq, first, extra] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
             {1, 1, 0, 0}, {60, 1, 59, 0}, {97, 3, 94, 0}, {97, 2, 40, 0}, {130, 1, 129, 7}, {130, 4, 126, 3}}) {
      const int64_t batch = 2, hq = 4, hkv = 2, d = 16;
      std::vector<int64_t> last(static_cast<size_t>(n));
      ASSERT_EQ(attnc_kernel_last_readers(kernel.get(), n, last.data()), ATTNC_OK);
      HeldCall call{batch, hq, hkv, nq, d, heldPositions(last, first, first + nq, extra), {}, {}, {}, {}};
      std::vector<float> k = randomValues(static_cast<size_t>(batch * hkv * n * d), rng),
                         v = randomValues(k.size(), rng);
      call.q = randomValues(static_cast<size_t>(batch * hq * nq * d), rng);
      call.k = gather(k, batch * hkv, n, d, call.positions);
      call.v = gather(v, batch * hkv, n, d, call.positions);
      // The queries at positions [first, first + nq): the reference's last nq of first + nq keys.
      const int64_t end = first + nq;
      std::vector<int64_t> prefix(static_cast<size_t>(end));
      std::iota(prefix.begin(), prefix.end(), int64_t{0});
      const std::vector<float> kEnd = gather(k, batch * hkv, n, d, prefix), vEnd = gather(v, batch * hkv, n, d, prefix);
      ScoredAttention model;
      model.mask = [&](int64_t, int64_t i, int64_t j) { return c.mask(i, j); };
      const AttentionInDouble want =
          attentionInDouble(model, call.q, kEnd, vEnd, std::vector<float>(call.q.size()), batch, hq, hkv, nq, end, d,
                            false);
      // Queries ending at the last held key take the default first_query.
      const bool atEnd = call.positions.back() == end - 1;
      ASSERT_EQ(call.run(kernel.get(), atEnd ? ATTNC_LAST_QUERIES : first), ATTNC_OK)
          << c.name << " n=" << n << ": " << attnc_last_error();
      double err = 0;
      for (size_t x = 0; x < call.o.size(); ++x)
        err = std::max(err, std::abs(double(call.o[x]) - want.o[x]));
      EXPECT_LT(err, 2e-5) << c.name << " n=" << n << " nq=" << nq << " first=" << first << " held "
                           << call.positions.size();
    }
  }
}

TEST(HeldKeys, ScoreModifiersSeeTheKeysPositions) {
  // ALiBi reads j - i and the sink a per-head input: over held keys they
  // must see positions, not rows.
  KernelPtr kernel = compileSource("pattern p { input slope : float[heads]  input z : float[heads]  causal "
                                   "attend { j : i - j < 12 } | { j : j < 2 }  score s + slope[h] * (j - i)  "
                                   "sink z[h] }");
  ASSERT_TRUE(kernel);
  std::mt19937 rng(3);
  const int64_t n = 70, nq = 2, hq = 2, d = 8;
  std::vector<float> slope = {0.25f, -0.5f}, z = {0.3f, -1.0f};
  std::vector<int64_t> last(static_cast<size_t>(n));
  ASSERT_EQ(attnc_kernel_last_readers(kernel.get(), n, last.data()), ATTNC_OK);
  HeldCall call{1, hq, hq, nq, d, heldPositions(last, n - nq, n, 0), {}, {}, {}, {}};
  ASSERT_EQ(call.positions.size(), 2u + 13u); // the two global keys and the window of the first query
  std::vector<float> k = randomValues(static_cast<size_t>(hq * n * d), rng), v = randomValues(k.size(), rng);
  call.q = randomValues(static_cast<size_t>(hq * nq * d), rng);
  call.k = gather(k, hq, n, d, call.positions);
  call.v = gather(v, hq, n, d, call.positions);
  attnc_input inputs[2] = {{"slope", view(slope, 2, 1, 1, 1)}, {"z", view(z, 2, 1, 1, 1)}};
  ASSERT_EQ(call.run(kernel.get(), ATTNC_LAST_QUERIES, inputs, 2), ATTNC_OK) << attnc_last_error();
  ScoredAttention model;
  model.mask = [](int64_t, int64_t i, int64_t j) { return j <= i && (i - j < 12 || j < 2); };
  model.score = [&](double s, int64_t i, int64_t j, int64_t h) { return s + slope[h] * double(j - i); };
  model.sink = [&](int64_t, int64_t h) { return double(z[h]); };
  const AttentionInDouble want =
      attentionInDouble(model, call.q, k, v, std::vector<float>(call.q.size()), 1, hq, hq, nq, n, d, false);
  for (size_t x = 0; x < call.o.size(); ++x)
    EXPECT_NEAR(call.o[x], want.o[x], 2e-5) << x;
}

TEST(HeldKeys, ADroppedKeyAQueryReadsIsRefusedBeforeAnythingIsWritten) {
  KernelPtr kernel = compileSource("pattern p { causal attend { j : i - j < 16 } | { j : j < 3 } }");
  ASSERT_TRUE(kernel);
  std::mt19937 rng(5);
  HeldCall call{1, 2, 2, 1, 8, {}, {}, {}, {}, {}};
  for (int64_t j = 0; j < 100; ++j)
    if (j != 1 && (j < 3 || j >= 84)) // global key 1 dropped
      call.positions.push_back(j);
  call.q = randomValues(16, rng);
  call.k = randomValues(call.positions.size() * 16, rng);
  call.v = randomValues(call.k.size(), rng);
  EXPECT_EQ(call.run(kernel.get(), ATTNC_LAST_QUERIES), ATTNC_ERROR_INVALID_ARGUMENT);
  const std::string message = attnc_last_error();
  EXPECT_NE(message.find("position 99 reads the key at position 1"), std::string::npos) << message;
  for (float x : call.o)
    EXPECT_EQ(x, -7.0f);
  // A window key dropped from the middle of a run.
  call.positions = {0, 1, 2};
  for (int64_t j = 84; j < 100; ++j)
    if (j != 90)
      call.positions.push_back(j);
  call.k.resize(call.positions.size() * 16);
  call.v.resize(call.k.size());
  EXPECT_EQ(call.run(kernel.get(), ATTNC_LAST_QUERIES), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("key at position 90"), std::string::npos) << attnc_last_error();
}

TEST(HeldKeys, BadPositionsAndCallsItDoesNotTakeGetClearErrors) {
  KernelPtr kernel = compileSource("pattern p { causal attend { j : i - j < 16 } }");
  ASSERT_TRUE(kernel);
  HeldCall call{1, 1, 1, 1, 4, {3, 5, 5}, std::vector<float>(4, 1.0f), std::vector<float>(12, 1.0f),
                std::vector<float>(12, 1.0f), {}};
  EXPECT_EQ(call.run(kernel.get(), ATTNC_LAST_QUERIES), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("ascend strictly"), std::string::npos) << attnc_last_error();
  call.positions = {-1, 4, 5};
  EXPECT_EQ(call.run(kernel.get(), ATTNC_LAST_QUERIES), ATTNC_ERROR_INVALID_ARGUMENT);
  call.positions = {0, 1, 2};
  call.nq = 1;
  EXPECT_EQ(call.run(kernel.get(), 2), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(call.run(kernel.get(), 5), ATTNC_ERROR_INVALID_ARGUMENT); // position 5 reads 3 and 4
  EXPECT_NE(std::string(attnc_last_error()).find("position 5 reads the key at position 3"), std::string::npos)
      << attnc_last_error();
  // The backward pass has none.
  std::vector<float> lse(1), grads(12);
  attnc_tensor tq = view(call.q, 1, 1, 1, 4), tk = view(call.k, 1, 1, 3, 4), tv = view(call.v, 1, 1, 3, 4),
               to = view(call.o, 1, 1, 1, 4), tl = view(lse, 1, 1, 1, 1), tg = view(grads, 1, 1, 3, 4),
               tgq = view(grads, 1, 1, 1, 4);
  attnc_call c;
  attnc_call_init(&c);
  c.q = &tq, c.k = &tk, c.v = &tv, c.o = &to, c.lse = &tl, c.d_o = &to, c.d_q = &tgq, c.d_k = &tg, c.d_v = &tg;
  c.key_positions = call.positions.data();
  EXPECT_EQ(attnc_backward(kernel.get(), &c), ATTNC_ERROR_UNSUPPORTED);
  // Patterns that read data, and backends without rows.
  KernelPtr data = compileSource("pattern p { input b : int[n]  causal attend { j : b[j] == b[i] } }");
  ASSERT_TRUE(data);
  EXPECT_NE(call.run(data.get(), ATTNC_LAST_QUERIES), ATTNC_OK);
  KernelPtr dense = compileSource("pattern p { causal attend { j : i - j < 16 } }", "dense");
  ASSERT_TRUE(dense);
  EXPECT_EQ(call.run(dense.get(), ATTNC_LAST_QUERIES), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(attnc_last_error()).find("--backend fused"), std::string::npos) << attnc_last_error();
}

} // namespace
} // namespace attnc::test
