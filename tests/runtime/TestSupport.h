//===- TestSupport.h - Shared helpers of the kernel tests -----------------===//
#pragma once

#include "../ScratchDir.h"

#include "attnc/attnc.h"
#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace attnc::test {

/// Deterministic pseudo-random floats in [-scale, scale].
std::vector<float> randomFloats(size_t count, uint32_t seed, float scale);

/// The independent reference: membership from the brute-force oracle over
/// Sema's terms (not the canonical IR or the CSR the kernels use), softmax in
/// double. Q, K, V, O are contiguous [batch, heads, n, d].
std::vector<float> referenceFromOracle(const std::string &patternPath,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d);

/// Same for pattern source text.
std::vector<float> referenceFromSource(const std::string &source,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d);

/// The independent gradient reference: the forward pass and the gradients
/// of L = sum(O * dO) for contiguous [batch, heads, n, d] inputs, with
/// membership from the brute-force oracle over Sema's terms (as
/// referenceFromOracle), written from the softmax's formulas in double:
/// P_ij = exp(s_ij - lse_i), s_ij = scale q_i . k_j, over the row's keys;
/// dV = P^T dO; dP = dO V^T; D_i = sum_j P_ij dP_ij (from P and dP, not from
/// dO . O); dS = P * (dP - D); dQ = scale dS K; dK = scale dS^T Q.
struct GradientReference {
  int64_t batch = 0, heads = 0, n = 0, d = 0;
  std::vector<double> o, dq, dk, dv; ///< [batch, heads, n, d]
  std::vector<double> lse;           ///< [batch, heads, n]; -inf for a row without keys
  std::vector<std::vector<char>> masks; ///< per head, n x n row-major membership
  /// Whether row i of head h has no keys.
  bool rowEmpty(int64_t h, int64_t i) const;
  /// Whether no row of head h attends key j.
  bool keyUnused(int64_t h, int64_t j) const;
};

/// `scale` 0 means 1/sqrt(d).
GradientReference gradientsFromOracle(const std::string &patternPath, const std::vector<std::string> &defines,
                                      const std::vector<float> &q, const std::vector<float> &k,
                                      const std::vector<float> &v, const std::vector<float> &dO,
                                      int64_t batch, int64_t heads, int64_t n, int64_t d, double scale = 0);

/// Same for pattern source text.
GradientReference gradientsFromSource(const std::string &source, const std::vector<std::string> &defines,
                                      const std::vector<float> &q, const std::vector<float> &k,
                                      const std::vector<float> &v, const std::vector<float> &dO,
                                      int64_t batch, int64_t heads, int64_t n, int64_t d, double scale = 0);

/// The brute-force oracle's n x n row-major membership mask of each of
/// `heads` heads of a library pattern (`isText`: pattern source text), the
/// masks the references above are built from.
std::vector<std::vector<char>> masksFromOracle(const std::string &pattern, bool isText,
                                               const std::vector<std::string> &defines, int64_t heads, int64_t n);

/// bf16 of a float, rounded to nearest even (written here, not taken from
/// the runtime), and back (exact).
uint16_t toBf16(float f);
float fromBf16(uint16_t x);

/// A contiguous [batch, heads, n, d] view.
attnc_tensor view(std::vector<float> &data, int64_t batch, int64_t heads, int64_t n, int64_t d);

/// One sequence of a call: batch element b, query rows [q0, q0 + nq), key
/// rows [k0, k0 + nk).
struct Seq {
  int64_t b, q0, nq, k0, nk;
};

/// A call's sizes: q [batch, hq, nqTotal, d], k and v [batch, hkv, nkTotal,
/// d], and its sequences (one per batch element for a dense batch).
struct Problem {
  int64_t batch, hq, hkv, nqTotal, nkTotal, d;
  std::vector<Seq> seqs;
  std::vector<int32_t> cuQ, cuK; ///< varlen offsets (empty: a dense batch)
  /// A dense batch's first query position (attnc_run_*_at); -1: nk - nq.
  int64_t firstQuery = -1;
  size_t qSize() const { return static_cast<size_t>(batch * hq * nqTotal * d); }
  size_t kSize() const { return static_cast<size_t>(batch * hkv * nkTotal * d); }
  size_t lseSize() const { return static_cast<size_t>(batch * hq * nqTotal); }
  /// "hq=8 hkv=2 d=16 seqs 7/37 ...": for failure messages.
  std::string text() const;
};

/// A dense batch: every element nq queries over nk keys.
Problem dense(int64_t batch, int64_t hq, int64_t hkv, int64_t nq, int64_t nk, int64_t d);
/// A varlen batch of one element: the (nq, nk) of each sequence, packed.
Problem varlen(int64_t hq, int64_t hkv, const std::vector<std::pair<int64_t, int64_t>> &lengths, int64_t d);

/// A kernel that frees itself.
using KernelPtr = std::unique_ptr<attnc_kernel, void (*)(attnc_kernel *)>;
/// JIT-compiles library pattern `file` ("fixed"), or pattern source text
/// `source` when `file` is null, with `defines` ("l=16") for `backend`,
/// through the cache in `cacheDir`. A failure gives a null kernel and the
/// runtime's message in `error`.
KernelPtr jitCompile(const char *file, const char *source, const std::vector<std::string> &defines,
                     const char *backend, const std::string &cacheDir, std::string &error);
/// The JIT cache directory of this process's suites (a ScratchDir, removed
/// at exit), for jitCompile's `cacheDir`.
const std::string &jitCacheDir();
/// The path of a library pattern.
std::string patternPath(const std::string &name);
/// Library pattern `name`'s canonical IR with `defines` ("l=16"); throws
/// std::runtime_error when it does not compile.
ir::PatternIR patternIr(const std::string &name, const std::vector<std::string> &defines);
/// The fused kernel file of library pattern `name` with `defines` ("l=16")
/// on the forward tiles `rows` x `cols`, built in process (no JIT cache).
/// Throws std::runtime_error when it does not build.
std::string fusedKernelBytes(const std::string &name, const std::vector<std::string> &defines, int64_t rows,
                             int64_t cols);

/// Softmax attention in double over a mask, a score and a sink written by a
/// test (independently of attnc's evaluators): mask(slice, i, j) with
/// slice = b * hq + h; score(s, i, j, h) the modified scaled logit (null:
/// s); sink(i, h) a logit added to each row's denominator (null: none).
struct ScoredAttention {
  std::function<bool(int64_t slice, int64_t i, int64_t j)> mask;
  std::function<double(double s, int64_t i, int64_t j, int64_t h)> score = nullptr;
  std::function<double(int64_t i, int64_t h)> sink = nullptr;
};

/// O, each row's log-sum-exp (-inf without a key), dQ, dK, dV of sum(O * dO)
/// (with `grads`) and that sum. q, o, dO [batch, hq, nq, d], the queries the
/// last nq of n positions; k, v [batch, hkv, n, d], query head h reading
/// key/value head h / (hq / hkv). dS goes through the score's derivative,
/// taken numerically.
struct AttentionInDouble {
  std::vector<double> o, lse, dq, dk, dv;
  double loss = 0;
};
AttentionInDouble attentionInDouble(const ScoredAttention &model, const std::vector<float> &q,
                                    const std::vector<float> &k, const std::vector<float> &v,
                                    const std::vector<float> &dO, int64_t batch, int64_t hq, int64_t hkv, int64_t nq,
                                    int64_t n, int64_t d, bool grads = true);

/// The backends of `all` that this build has (ATTNC_WITH_MLIR / _HALIDE):
/// the suites run every backend the build can run, and no other.
std::vector<const char *> builtBackends(std::initializer_list<const char *> all);

} // namespace attnc::test
