//===- RowsBackwardTest.cpp - The backward pass of a few queries ----------===//
//
// attnc_run_backward and attnc_run_backward_varlen where a sequence has at
// most a quarter as many queries as keys, which the fused backend computes
// row by row over each row's own keys (RowsExecutor.cpp, runRowsBackward)
// instead of padding the queries to the square. Through the public C ABI,
// against a double-precision reference written here from the definitions
// (query row r is position r + nk - nq; P = exp(s - lse) over the row's
// keys, membership from the brute-force oracle over Sema's terms, delta from
// P and dP rather than from dO . O), and against the padded path: the same
// queries as the last rows of a square whose other rows are zero. Library
// patterns and one with empty rows, ragged lengths, head dimensions 16, 64
// and 80, grouped query heads, varlen batches that mix both paths, f32 and
// bf16, several thread counts, and NaN.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <sstream>

namespace attnc::test {
namespace {

struct RowsPattern {
  const char *label;
  const char *file;   ///< a library pattern, or null
  const char *source; ///< inline source when `file` is null
  std::vector<std::string> defines;
  int64_t heads; ///< the declared count, else 0 (any)
};

void PrintTo(const RowsPattern &pc, std::ostream *os) { *os << pc.label; }

// Rows with i % 3 != 0 have no keys, so among the last rows two in three are
// empty; keys past the last row that attends them are never attended.
const char *const kEmptyRows = "pattern gaps { attend { j : j < i && i % 3 == 0 } }";

const RowsPattern kPatterns[] = {
    {"Fixed", "fixed", nullptr, {"l=16", "c=4"}, 0},
    {"Strided", "strided", nullptr, {"l=8"}, 0},
    {"Local", "local", nullptr, {"w=5"}, 0},
    {"Longformer", "longformer", nullptr, {"w=4", "g=2"}, 0},
    {"Bigbird", "bigbird", nullptr, {"b=8", "g=1", "r=2"}, 0},
    {"FixedMultihead", "fixed_multihead", nullptr, {"l=8", "c=2"}, 2},
    {"EmptyRows", nullptr, kEmptyRows, {}, 0},
};

const RowsPattern &pattern(const char *label) {
  for (const RowsPattern &pc : kPatterns)
    if (std::string(pc.label) == label)
      return pc;
  ADD_FAILURE() << "no pattern " << label;
  return kPatterns[0];
}

KernelPtr compile(const RowsPattern &pc) {
  std::string error;
  KernelPtr kernel = jitCompile(pc.file, pc.source, pc.defines, "fused", jitCacheDir(), error);
  EXPECT_TRUE(kernel) << pc.label << ": " << error;
  return kernel;
}

/// The oracle's membership masks of `heads` heads at length n, computed
/// once per (pattern, n) for the whole suite.
const std::vector<std::vector<char>> &masks(const RowsPattern &pc, int64_t heads, int64_t n) {
  static std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<std::vector<char>>> cache;
  auto key = std::make_tuple(std::string(pc.label), heads, n);
  auto it = cache.find(key);
  if (it == cache.end())
    it = cache.emplace(key, masksFromOracle(pc.file ? patternPath(pc.file) : pc.source, !pc.file, pc.defines, heads, n))
             .first;
  return it->second;
}

struct Inputs {
  std::vector<float> q, k, v, dO;
};

/// The gradients in double: dQ [.., nqTotal, d], dK and dV [.., nkTotal, d]
/// summed over each group's query heads; `empty` marks rows with no keys
/// and `unused` keys that no query of their key/value head attends.
struct Reference {
  std::vector<double> dq, dk, dv;
  std::vector<char> empty, unused;
};

Reference reference(const RowsPattern &pc, const Problem &p, const Inputs &in) {
  Reference out;
  out.dq.assign(p.qSize(), 0.0);
  out.dk.assign(p.kSize(), 0.0);
  out.dv.assign(p.kSize(), 0.0);
  out.empty.assign(p.lseSize(), 0);
  out.unused.assign(static_cast<size_t>(p.batch * p.hkv * p.nkTotal), 1);
  const int64_t d = p.d, group = p.hq / p.hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (const Seq &s : p.seqs) {
    if (s.nq == 0)
      continue;
    for (int64_t h = 0; h < p.hq; ++h) {
      const std::vector<char> &mask = masks(pc, p.hq, s.nk)[static_cast<size_t>(h)];
      const int64_t g = h / group;
      for (int64_t r = 0; r < s.nq; ++r) {
        const int64_t pos = r + s.nk - s.nq, row = (s.b * p.hq + h) * p.nqTotal + s.q0 + r, qi = row * d;
        std::vector<int64_t> keys; // element offsets of the keys' rows
        for (int64_t j = 0; j < s.nk; ++j)
          if (mask[static_cast<size_t>(pos * s.nk + j)]) {
            const int64_t key = (s.b * p.hkv + g) * p.nkTotal + s.k0 + j;
            keys.push_back(key * d);
            out.unused[static_cast<size_t>(key)] = 0;
          }
        if (keys.empty()) {
          out.empty[static_cast<size_t>(row)] = 1;
          continue;
        }
        std::vector<double> sc, prob, dP;
        double best = -INFINITY;
        for (int64_t kj : keys) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(in.q[qi + c]) * double(in.k[kj + c]);
          sc.push_back(dot * scale);
          best = std::max(best, sc.back());
        }
        double sum = 0;
        for (double x : sc)
          sum += std::exp(x - best);
        const double lse = best + std::log(sum);
        double delta = 0;
        for (size_t t = 0; t < keys.size(); ++t) {
          prob.push_back(std::exp(sc[t] - lse));
          double dp = 0;
          for (int64_t c = 0; c < d; ++c)
            dp += double(in.dO[qi + c]) * double(in.v[keys[t] + c]);
          dP.push_back(dp);
          delta += prob[t] * dp;
        }
        for (size_t t = 0; t < keys.size(); ++t) {
          const double ds = prob[t] * (dP[t] - delta);
          for (int64_t c = 0; c < d; ++c) {
            out.dq[qi + c] += scale * ds * in.k[keys[t] + c];
            out.dk[keys[t] + c] += scale * ds * in.q[qi + c];
            out.dv[keys[t] + c] += prob[t] * in.dO[qi + c];
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

/// What a forward and backward call wrote (f32; unwritten elements keep kUnwritten).
struct Result {
  std::vector<float> o, lse, dq, dk, dv;
};

constexpr float kUnwritten = -7.0f;

Inputs randomInputs(const Problem &p, uint32_t seed) {
  return {randomFloats(p.qSize(), seed, 1.5f), randomFloats(p.kSize(), seed + 1, 1.5f),
          randomFloats(p.kSize(), seed + 2, 1.0f), randomFloats(p.qSize(), seed + 3, 1.0f)};
}

std::vector<uint16_t> roundToBf16(std::vector<float> &x) {
  std::vector<uint16_t> out;
  for (float &e : x) {
    out.push_back(toBf16(e));
    e = fromBf16(out.back());
  }
  return out;
}

/// Runs `p` forward (O, lse) and backward through the C ABI on `threads`
/// threads (0: every core). With bf16, `in` is rounded in place first, so
/// that the reference sees the values the kernel sees, and O is handed to
/// the backward pass as bf16 (its inputs share one dtype).
bool run(attnc_kernel *kernel, const Problem &p, Inputs &in, attnc_dtype dtype, int threads, Result &r) {
  const bool bf16 = dtype == ATTNC_DTYPE_BF16;
  std::vector<uint16_t> qb, kb, vb, dOb, ob;
  if (bf16) {
    qb = roundToBf16(in.q);
    kb = roundToBf16(in.k);
    vb = roundToBf16(in.v);
    dOb = roundToBf16(in.dO);
  }
  auto input = [&](std::vector<float> &f, std::vector<uint16_t> &b, int64_t heads, int64_t n) {
    return tensor(bf16 ? static_cast<void *>(b.data()) : f.data(), dtype, p.batch, heads, n, p.d);
  };
  r.o.assign(p.qSize(), kUnwritten);
  r.lse.assign(p.lseSize(), kUnwritten);
  r.dq.assign(p.qSize(), kUnwritten);
  r.dk.assign(p.kSize(), kUnwritten);
  r.dv.assign(p.kSize(), kUnwritten);
  attnc_tensor tq = input(in.q, qb, p.hq, p.nqTotal), tk = input(in.k, kb, p.hkv, p.nkTotal),
               tv = input(in.v, vb, p.hkv, p.nkTotal), tdO = input(in.dO, dOb, p.hq, p.nqTotal);
  attnc_tensor to = tensor(r.o.data(), ATTNC_DTYPE_F32, p.batch, p.hq, p.nqTotal, p.d);
  attnc_tensor tl = tensor(r.lse.data(), ATTNC_DTYPE_F32, p.batch, p.hq, p.nqTotal, 1);
  attnc_tensor tdq = tensor(r.dq.data(), ATTNC_DTYPE_F32, p.batch, p.hq, p.nqTotal, p.d);
  attnc_tensor tdk = tensor(r.dk.data(), ATTNC_DTYPE_F32, p.batch, p.hkv, p.nkTotal, p.d);
  attnc_tensor tdv = tensor(r.dv.data(), ATTNC_DTYPE_F32, p.batch, p.hkv, p.nkTotal, p.d);
  const attnc_varlen lengths{p.cuQ.data(), p.cuK.data(), static_cast<int64_t>(p.seqs.size())};
  const bool isVarlen = !p.cuQ.empty();
  attnc_run_options options{};
  options.num_threads = threads;
  attnc_status s = isVarlen ? attnc_run_varlen(kernel, &tq, &tk, &tv, &to, &tl, &lengths, &options)
                            : attnc_run_forward(kernel, &tq, &tk, &tv, &to, &tl, &options);
  EXPECT_EQ(s, ATTNC_OK) << attnc_last_error();
  if (s != ATTNC_OK)
    return false;
  if (bf16)
    for (float x : r.o)
      ob.push_back(toBf16(x));
  attnc_tensor tO = input(r.o, ob, p.hq, p.nqTotal);
  s = isVarlen ? attnc_run_backward_varlen(kernel, &tq, &tk, &tv, &tO, &tdO, &tl, &tdq, &tdk, &tdv, &lengths, &options)
               : attnc_run_backward(kernel, &tq, &tk, &tv, &tO, &tdO, &tl, &tdq, &tdk, &tdv, &options);
  EXPECT_EQ(s, ATTNC_OK) << attnc_last_error();
  return s == ATTNC_OK;
}

/// The worst max |got - want| / (1 + |want|), NaN counted as infinitely
/// wrong, and where it is.
struct Error {
  double worst = 0;
  size_t at = 0;
};

Error worst(const std::vector<float> &got, const std::vector<double> &want) {
  Error e;
  for (size_t x = 0; x < want.size(); ++x) {
    double diff = std::abs(double(got[x]) - want[x]) / (1 + std::abs(want[x]));
    if (std::isnan(diff))
      diff = INFINITY;
    if (diff > e.worst)
      e = {diff, x};
  }
  return e;
}

constexpr double kF32 = 1e-4, kBf16 = 1e-2;

/// Every gradient element against the reference; rows without keys give
/// exactly zero dQ and keys no query attends exactly zero dK and dV.
void expectMatches(const Problem &p, const Reference &want, const Result &got, double tolerance) {
  for (auto [name, g, w] :
       {std::tuple{"dQ", &got.dq, &want.dq}, {"dK", &got.dk, &want.dk}, {"dV", &got.dv, &want.dv}}) {
    const Error e = worst(*g, *w);
    EXPECT_LT(e.worst, tolerance) << name << " element " << e.at << ": " << (*g)[e.at] << " against " << (*w)[e.at];
  }
  for (size_t row = 0; row < want.empty.size(); ++row) {
    if (!want.empty[row])
      continue;
    for (int64_t c = 0; c < p.d; ++c)
      ASSERT_EQ(got.dq[row * static_cast<size_t>(p.d) + static_cast<size_t>(c)], 0.0f)
          << "dQ of query row " << row << ", which has no keys";
  }
  for (size_t key = 0; key < want.unused.size(); ++key) {
    if (!want.unused[key])
      continue;
    for (int64_t c = 0; c < p.d; ++c) {
      const size_t x = key * static_cast<size_t>(p.d) + static_cast<size_t>(c);
      ASSERT_TRUE(got.dk[x] == 0.0f && got.dv[x] == 0.0f)
          << "key row " << key << " is attended by no query but has dK " << got.dk[x] << ", dV " << got.dv[x];
    }
  }
}

/// A pattern's query heads: its declared count, else `merged`.
int64_t headsOf(const RowsPattern &pc, int64_t merged) { return pc.heads ? pc.heads : merged; }

class RowsBackward : public ::testing::TestWithParam<RowsPattern> {};

TEST_P(RowsBackward, F32MatchesReferenceOnRaggedLengths) {
  const RowsPattern &pc = GetParam();
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  const int64_t heads = headsOf(pc, 2);
  for (int64_t nk : {37, 200, 1000})
    for (int64_t nq : {int64_t{1}, int64_t{3}, int64_t{7}, nk / 4})
      for (int64_t d : {16, 64, 80}) {
        const Problem p = dense(2, heads, heads, nq, nk, d);
        SCOPED_TRACE(p.text());
        Inputs in = randomInputs(p, static_cast<uint32_t>(nk + 7 * nq + d));
        Result r;
        ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, 0, r));
        expectMatches(p, reference(pc, p, in), r, kF32);
      }
}

TEST_P(RowsBackward, GroupedQueryHeadsSumTheirKeyGradients) {
  const RowsPattern &pc = GetParam();
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  // Four query heads per key/value head (two for a pattern of two heads).
  const int64_t hq = headsOf(pc, 8), hkv = pc.heads ? 1 : 2;
  for (int64_t nq : {1, 7, 50}) {
    const Problem p = dense(1, hq, hkv, nq, 200, 64);
    SCOPED_TRACE(p.text());
    Inputs in = randomInputs(p, static_cast<uint32_t>(11 * nq));
    Result r;
    ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, 0, r));
    expectMatches(p, reference(pc, p, in), r, kF32);
  }
}

TEST_P(RowsBackward, Bf16MatchesReferenceOnTheRoundedInputs) {
  const RowsPattern &pc = GetParam();
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  const int64_t hq = headsOf(pc, 4), hkv = pc.heads ? pc.heads : 1;
  for (auto [nq, nk, d] : {std::tuple{1, 200, 80}, {3, 37, 16}, {50, 200, 64}}) {
    const Problem p = dense(1, hq, hkv, nq, nk, d);
    SCOPED_TRACE("bf16 " + p.text());
    Inputs in = randomInputs(p, static_cast<uint32_t>(nq + nk + d));
    Result r;
    ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_BF16, 0, r));
    expectMatches(p, reference(pc, p, in), r, kBf16);
  }
}

TEST_P(RowsBackward, VarlenMixesRowRangesPaddedSequencesAndEmptyOnes) {
  // Row by row: 1/40, 3/37, 50/200, 1/9; padded: 1/1, 7/7, 20/60; no
  // queries: 0/0 and 0/9 (their keys get zero gradients).
  const RowsPattern &pc = GetParam();
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  const int64_t hq = headsOf(pc, 8), hkv = pc.heads ? 1 : 2;
  const Problem p =
      varlen(hq, hkv, {{0, 0}, {1, 40}, {1, 1}, {3, 37}, {0, 9}, {50, 200}, {7, 7}, {1, 9}, {20, 60}, {0, 0}}, 16);
  SCOPED_TRACE(p.text());
  Inputs in = randomInputs(p, 5);
  Result r;
  ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, 0, r));
  expectMatches(p, reference(pc, p, in), r, kF32);
}

TEST_P(RowsBackward, AgreesWithThePaddedSquare) {
  // The same queries as the last rows of a square call whose first rows
  // have zero q, o, dO and lse: what the runtime ran before row ranges, on
  // the block kernels. Zero rows add nothing, so dK, dV and the last rows'
  // dQ agree up to the order of f32 sums.
  const RowsPattern &pc = GetParam();
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  const int64_t heads = headsOf(pc, 4), hkv = pc.heads ? pc.heads : 1, nk = 200, d = 64;
  for (int64_t nq : {1, 7, 50}) {
    const Problem p = dense(1, heads, hkv, nq, nk, d);
    SCOPED_TRACE(p.text());
    Inputs in = randomInputs(p, static_cast<uint32_t>(3 * nq));
    Result rows;
    ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, 0, rows));
    const int64_t pad = nk - nq;
    auto square = [&](const std::vector<float> &x, int64_t width) {
      std::vector<float> out(static_cast<size_t>(heads * nk * width), 0.0f);
      for (int64_t h = 0; h < heads; ++h)
        std::copy_n(x.begin() + h * nq * width, nq * width, out.begin() + (h * nk + pad) * width);
      return out;
    };
    std::vector<float> q = square(in.q, d), o = square(rows.o, d), dO = square(in.dO, d), lse = square(rows.lse, 1);
    std::vector<float> dq(static_cast<size_t>(heads * nk * d), kUnwritten), dk(in.k.size(), kUnwritten),
        dv(in.k.size(), kUnwritten);
    attnc_tensor tq = tensor(q.data(), ATTNC_DTYPE_F32, 1, heads, nk, d),
                 to = tensor(o.data(), ATTNC_DTYPE_F32, 1, heads, nk, d),
                 tdO = tensor(dO.data(), ATTNC_DTYPE_F32, 1, heads, nk, d),
                 tl = tensor(lse.data(), ATTNC_DTYPE_F32, 1, heads, nk, 1),
                 tk = tensor(in.k.data(), ATTNC_DTYPE_F32, 1, hkv, nk, d),
                 tv = tensor(in.v.data(), ATTNC_DTYPE_F32, 1, hkv, nk, d),
                 tdq = tensor(dq.data(), ATTNC_DTYPE_F32, 1, heads, nk, d),
                 tdk = tensor(dk.data(), ATTNC_DTYPE_F32, 1, hkv, nk, d),
                 tdv = tensor(dv.data(), ATTNC_DTYPE_F32, 1, hkv, nk, d);
    ASSERT_EQ(attnc_run_backward(kernel.get(), &tq, &tk, &tv, &to, &tdO, &tl, &tdq, &tdk, &tdv, nullptr), ATTNC_OK)
        << attnc_last_error();
    auto close = [](const std::vector<float> &got, const std::vector<float> &want, const char *name) {
      ASSERT_EQ(got.size(), want.size());
      for (size_t x = 0; x < want.size(); ++x)
        ASSERT_NEAR(got[x], want[x], 1e-5 * (1 + std::abs(want[x]))) << name << " element " << x;
    };
    close(rows.dk, dk, "dK");
    close(rows.dv, dv, "dV");
    std::vector<float> lastRows(rows.dq.size());
    for (int64_t h = 0; h < heads; ++h)
      std::copy_n(dq.begin() + (h * nk + pad) * d, nq * d, lastRows.begin() + h * nq * d);
    close(rows.dq, lastRows, "dQ");
  }
}

INSTANTIATE_TEST_SUITE_P(Library, RowsBackward, ::testing::ValuesIn(kPatterns),
                         [](const auto &info) { return std::string(info.param.label); });

// One slice shared by threads: the keys are split into ranges.

TEST(RowsBackwardThreads, ThreadCountsAgree) {
  const RowsPattern &pc = pattern("Fixed");
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  // One slice (batch 1, one key/value head) with ~260 keys per row: enough
  // pairs that every thread count here splits the keys (15 queries: at most
  // 1/64 of the keys run row by row).
  const Problem p = dense(1, 1, 1, 15, 1000, 64);
  Inputs in = randomInputs(p, 17);
  const Reference want = reference(pc, p, in);
  Result one;
  ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, 1, one));
  expectMatches(p, want, one, kF32);
  for (int threads : {2, 3, 8}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    Result r;
    ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, threads, r));
    expectMatches(p, want, r, kF32);
    // Each key's dK and dV rows are summed by one thread in row order, as
    // on one thread; dQ adds per-thread partial sums.
    EXPECT_EQ(r.dk, one.dk);
    EXPECT_EQ(r.dv, one.dv);
  }
}

// NaN reaches what it touches, and nothing else (docs/runtime.md).

TEST(RowsBackwardNonFinite, NaNInDOReachesItsRowAndItsKeysOnly) {
  const RowsPattern &pc = pattern("Fixed");
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  const int64_t nq = 3, nk = 192, d = 16; // (row by row: nq <= nk / 64)
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const Problem p = dense(1, 2, 2, nq, nk, d);
    Inputs in = randomInputs(p, 23);
    const int64_t row = 1, pos = row + nk - nq;
    in.dO[static_cast<size_t>(row * d + 4)] = std::numeric_limits<float>::quiet_NaN();
    Result r;
    ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, threads, r));
    const std::vector<char> &mask = masks(pc, 2, nk)[0];
    auto rowNaN = [&](const std::vector<float> &x, int64_t head, int64_t rows, int64_t at) {
      bool nan = false, finite = true;
      for (int64_t c = 0; c < d; ++c) {
        const float e = x[static_cast<size_t>((head * rows + at) * d + c)];
        nan |= std::isnan(e);
        finite &= std::isfinite(e);
      }
      return nan ? 1 : finite ? 0 : 2;
    };
    for (int64_t i = 0; i < nq; ++i) {
      EXPECT_EQ(rowNaN(r.dq, 0, nq, i), i == row ? 1 : 0) << "dQ row " << i;
      EXPECT_EQ(rowNaN(r.dq, 1, nq, i), 0) << "head 1, dQ row " << i;
    }
    for (int64_t j = 0; j < nk; ++j) {
      const int touched = mask[static_cast<size_t>(pos * nk + j)] ? 1 : 0;
      EXPECT_EQ(rowNaN(r.dk, 0, nk, j), touched) << "dK row " << j;
      EXPECT_EQ(rowNaN(r.dv, 0, nk, j), touched) << "dV row " << j;
      EXPECT_EQ(rowNaN(r.dk, 1, nk, j), 0) << "head 1, dK row " << j;
      EXPECT_EQ(rowNaN(r.dv, 1, nk, j), 0) << "head 1, dV row " << j;
    }
  }
}

TEST(RowsBackwardNonFinite, NaNInAKeyReachesTheRowsThatAttendIt) {
  // A NaN key makes its rows' O and lse NaN in the forward pass; in the
  // backward pass those rows' dQ and every key row they attend turn NaN.
  const RowsPattern &pc = pattern("Local");
  KernelPtr kernel = compile(pc);
  ASSERT_TRUE(kernel);
  const int64_t nq = 7, nk = 448, d = 16, key = nk - 3; // in the windows of the last three rows; nq <= nk / 64
  const Problem p = dense(1, 1, 1, nq, nk, d);
  Inputs in = randomInputs(p, 29);
  in.k[static_cast<size_t>(key * d)] = std::numeric_limits<float>::quiet_NaN();
  Result r;
  ASSERT_TRUE(run(kernel.get(), p, in, ATTNC_DTYPE_F32, 1, r));
  const std::vector<char> &mask = masks(pc, 1, nk)[0];
  std::vector<char> reached(static_cast<size_t>(nk), 0);
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t pos = i + nk - nq;
    const bool nanRow = mask[static_cast<size_t>(pos * nk + key)] != 0;
    for (int64_t j = 0; j < nk; ++j)
      if (nanRow && mask[static_cast<size_t>(pos * nk + j)])
        reached[static_cast<size_t>(j)] = 1;
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(std::isnan(r.dq[static_cast<size_t>(i * d + c)]), nanRow) << "dQ row " << i << " column " << c;
  }
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t c = 0; c < d; ++c) {
      const size_t x = static_cast<size_t>(j * d + c);
      EXPECT_EQ(std::isnan(r.dk[x]), reached[static_cast<size_t>(j)] != 0) << "dK row " << j;
      EXPECT_EQ(std::isnan(r.dv[x]), reached[static_cast<size_t>(j)] != 0) << "dV row " << j;
    }
}

} // namespace
} // namespace attnc::test
