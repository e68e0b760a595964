//===- NonFiniteTest.cpp - NaN, infinity and overflowing inputs ------------===//
//
// What attnc.h promises for inputs that are not finite, as PyTorch behaves:
// a NaN in Q row i makes row i NaN; a NaN in K row j makes exactly the rows
// whose key set holds j NaN (which rows those are comes from the brute-force
// oracle); every other row stays finite and right. Inputs so large that
// Q . K overflows float32 give NaN rows, not zeros. In the backward pass a
// NaN in dO row i reaches dQ row i (only) and the dK, dV rows of i's keys. Every
// backend the build has, the fused backend's row-by-row path (one query) and
// its bf16 inputs too.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

namespace attnc::test {
namespace {

constexpr int64_t kN = 64, kD = 16, kHeads = 2;
const std::vector<std::string> kDefines = {"l=16", "c=4"};

KernelPtr compileFixed(const char *backend) {
  std::string error;
  KernelPtr kernel = jitCompile("fixed", nullptr, kDefines, backend, jitCacheDir(), error);
  EXPECT_TRUE(kernel) << error;
  return kernel;
}

const std::vector<char> &mask() {
  static const std::vector<char> m = masksFromOracle(patternPath("fixed"), false, kDefines, 1, kN)[0];
  return m;
}

bool rowHasNaN(const std::vector<float> &o, int64_t head, int64_t row, int64_t rows = kN) {
  for (int64_t c = 0; c < kD; ++c)
    if (std::isnan(o[static_cast<size_t>((head * rows + row) * kD + c)]))
      return true;
  return false;
}

bool rowFinite(const std::vector<float> &o, int64_t head, int64_t row, int64_t rows = kN) {
  for (int64_t c = 0; c < kD; ++c)
    if (!std::isfinite(o[static_cast<size_t>((head * rows + row) * kD + c)]))
      return false;
  return true;
}

class NonFinite : public ::testing::TestWithParam<const char *> {
protected:
  void SetUp() override {
    kernel = compileFixed(GetParam());
    ASSERT_TRUE(kernel);
  }
  /// O of q, k, v ([1, kHeads, rows, kD] queries, the last `rows` of kN).
  std::vector<float> run(const std::vector<float> &q, const std::vector<float> &k, const std::vector<float> &v,
                         int64_t rows = kN, attnc_dtype dtype = ATTNC_DTYPE_F32) {
    std::vector<float> o(static_cast<size_t>(kHeads * rows * kD), 0.0f);
    std::vector<uint16_t> qb, kb, vb;
    for (auto [src, dst] : {std::pair{&q, &qb}, {&k, &kb}, {&v, &vb}})
      for (float x : *src)
        dst->push_back(toBf16(x));
    const bool bf16 = dtype == ATTNC_DTYPE_BF16;
    auto data = [&](const std::vector<float> &f, std::vector<uint16_t> &b) {
      return bf16 ? static_cast<void *>(b.data()) : const_cast<float *>(f.data());
    };
    attnc_tensor tq{data(q, qb), dtype, {1, kHeads, rows, kD}, {kHeads * rows * kD, rows * kD, kD, 1}};
    attnc_tensor tk{data(k, kb), dtype, {1, kHeads, kN, kD}, {kHeads * kN * kD, kN * kD, kD, 1}};
    attnc_tensor tv = tk;
    tv.data = data(v, vb);
    attnc_tensor to{o.data(), ATTNC_DTYPE_F32, {1, kHeads, rows, kD}, {kHeads * rows * kD, rows * kD, kD, 1}};
    EXPECT_EQ(attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr), ATTNC_OK) << attnc_last_error();
    return o;
  }
  std::vector<float> q = randomFloats(kHeads * kN * kD, 11, 1.0f), k = randomFloats(kHeads * kN * kD, 12, 1.0f),
                     v = randomFloats(kHeads * kN * kD, 13, 1.0f);
  KernelPtr kernel{nullptr, attnc_kernel_free};
};

TEST_P(NonFinite, NaNInAQueryRowMakesThatRowNaN) {
  for (attnc_dtype dtype : {ATTNC_DTYPE_F32, ATTNC_DTYPE_BF16}) {
    SCOPED_TRACE(dtype == ATTNC_DTYPE_F32 ? "f32" : "bf16");
    std::vector<float> bad = q;
    bad[static_cast<size_t>(3 * kD + 5)] = std::numeric_limits<float>::quiet_NaN(); // head 0, row 3
    const std::vector<float> o = run(bad, k, v, kN, dtype);
    for (int64_t i = 0; i < kN; ++i) {
      EXPECT_EQ(rowHasNaN(o, 0, i), i == 3) << "row " << i;
      EXPECT_TRUE(rowFinite(o, 1, i)) << "head 1, row " << i;
    }
  }
}

TEST_P(NonFinite, NaNInAKeyRowReachesExactlyTheRowsThatAttendIt) {
  for (int64_t key : {5, 12, 47}) {
    std::vector<float> bad = k;
    bad[static_cast<size_t>(key * kD + 2)] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> o = run(q, bad, v);
    int64_t touched = 0;
    for (int64_t i = 0; i < kN; ++i) {
      const bool attends = mask()[static_cast<size_t>(i * kN + key)] != 0;
      touched += attends;
      EXPECT_EQ(rowHasNaN(o, 0, i), attends) << "key " << key << ", row " << i;
      EXPECT_TRUE(rowFinite(o, 1, i));
    }
    EXPECT_GT(touched, 1) << "the test should use a key several rows attend";
  }
}

TEST_P(NonFinite, ScoresThatOverflowFloat32GiveNaNRowsNotZeros) {
  // |q . k| ~ 1e60 overflows float32 to infinity; the softmax of infinities
  // is NaN, as PyTorch's float32 attention gives.
  std::vector<float> big = q, bigK = k;
  for (float &x : big)
    x *= 1e30f;
  for (float &x : bigK)
    x *= 1e30f;
  const std::vector<float> o = run(big, bigK, v);
  for (int64_t i = 0; i < kN; ++i)
    EXPECT_TRUE(rowHasNaN(o, 0, i)) << "row " << i;
}

TEST_P(NonFinite, OneQueryWithANaNIsNaN) {
  // One query: the fused backend's row-by-row path.
  std::vector<float> one(static_cast<size_t>(kHeads * kD));
  std::copy(q.begin(), q.begin() + kD, one.begin());
  std::copy(q.begin() + kN * kD, q.begin() + kN * kD + kD, one.begin() + kD);
  one[1] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> o = run(one, k, v, 1);
  EXPECT_TRUE(rowHasNaN(o, 0, 0, 1));
  EXPECT_TRUE(rowFinite(o, 1, 0, 1));
}

INSTANTIATE_TEST_SUITE_P(Backends, NonFinite,
                         ::testing::ValuesIn(builtBackends({"fused", "dense", "halide", "sparsifier"})),
                         [](const auto &info) { return std::string(info.param); });

class NonFiniteGradients : public ::testing::TestWithParam<const char *> {};

TEST_P(NonFiniteGradients, NaNInDOReachesItsRowAndItsKeys) {
  KernelPtr kernel = compileFixed(GetParam());
  ASSERT_TRUE(kernel);
  const size_t size = static_cast<size_t>(kHeads * kN * kD);
  std::vector<float> q = randomFloats(size, 1, 1.0f), k = randomFloats(size, 2, 1.0f), v = randomFloats(size, 3, 1.0f),
                     dO = randomFloats(size, 4, 1.0f), o(size), lse(static_cast<size_t>(kHeads * kN)), dq(size),
                     dk(size), dv(size);
  const int64_t row = 37;
  dO[static_cast<size_t>(row * kD + 4)] = std::numeric_limits<float>::quiet_NaN();
  auto t = [](std::vector<float> &x, int64_t d) {
    return attnc_tensor{x.data(), ATTNC_DTYPE_F32, {1, kHeads, kN, d}, {kHeads * kN * d, kN * d, d, 1}};
  };
  attnc_tensor tq = t(q, kD), tk = t(k, kD), tv = t(v, kD), to = t(o, kD), tl = t(lse, 1), tdo = t(dO, kD),
               tdq = t(dq, kD), tdk = t(dk, kD), tdv = t(dv, kD);
  ASSERT_EQ(attnc_run_forward(kernel.get(), &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK) << attnc_last_error();
  ASSERT_EQ(attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tdo, &tl, &tdq, &tdk, &tdv, nullptr), ATTNC_OK)
      << attnc_last_error();
  // dK and dV of row 37's keys are NaN; keys that share a tile with them
  // may be too (0 * NaN in the tile's products, as in PyTorch's dense
  // backward, where a NaN row of dO reaches every key).
  for (int64_t i = 0; i < kN; ++i) {
    const bool key = mask()[static_cast<size_t>(row * kN + i)] != 0;
    EXPECT_EQ(rowHasNaN(dq, 0, i), i == row) << "dQ row " << i;
    if (key) {
      EXPECT_TRUE(rowHasNaN(dk, 0, i)) << "dK row " << i;
      EXPECT_TRUE(rowHasNaN(dv, 0, i)) << "dV row " << i;
    }
    EXPECT_TRUE(rowFinite(dq, 1, i) && rowFinite(dk, 1, i) && rowFinite(dv, 1, i)) << "head 1, row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, NonFiniteGradients, ::testing::Values("fused", "dense"),
                         [](const auto &info) { return std::string(info.param); });

} // namespace
} // namespace attnc::test
