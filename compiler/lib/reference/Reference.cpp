//===- Reference.cpp - A plain attention reference in double precision ----===//
#include "attnc/reference/Reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnc {

/// Row i's scaled scores over its keys (in CSR order) and their
/// log-sum-exp, for the query row at `qi`; -inf when the row has no keys.
static double rowScoresOf(const ir::Csr &csr, int64_t i, const float *qi, const float *k, int64_t d,
                          double scale, std::vector<double> &scores) {
  int64_t begin = csr.pos[i], end = csr.pos[i + 1];
  scores.assign(static_cast<size_t>(end - begin), 0.0);
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t p = begin; p < end; ++p) {
    int64_t j = csr.crd[p];
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += static_cast<double>(qi[c]) * static_cast<double>(k[j * d + c]);
    scores[p - begin] = dot * scale;
    best = std::max(best, scores[p - begin]);
  }
  if (end == begin)
    return -std::numeric_limits<double>::infinity();
  double sum = 0;
  for (double s : scores)
    sum += std::exp(s - best);
  return best + std::log(sum);
}

/// rowScoresOf for a slice whose query rows are the CSR's rows.
static double rowScores(const ir::Csr &csr, int64_t i, const float *q, const float *k, int64_t d,
                        double scale, std::vector<double> &scores) {
  return rowScoresOf(csr, i, q + i * d, k, d, scale, scores);
}

void referenceAttention(const ir::Csr &csr, const float *q, const float *k, const float *v,
                        float *o, int64_t d, double scale) {
  referenceAttentionRows(csr, 0, q, k, v, o, d, scale);
}

void referenceLse(const ir::Csr &csr, const float *q, const float *k, float *lse, int64_t d,
                  double scale) {
  std::vector<double> scores;
  for (int64_t i = 0; i < csr.n; ++i)
    lse[i] = static_cast<float>(rowScores(csr, i, q, k, d, scale, scores));
}

void referenceBackward(const ir::Csr &csr, const float *q, const float *k, const float *v,
                       const float *dO, float *dQ, float *dK, float *dV, int64_t d, double scale) {
  const size_t nd = static_cast<size_t>(csr.n * d);
  std::vector<double> dq(static_cast<size_t>(d)), dk(nd, 0.0), dv(nd, 0.0);
  std::vector<double> scores, prob, dp;
  for (int64_t i = 0; i < csr.n; ++i) {
    int64_t begin = csr.pos[i], end = csr.pos[i + 1];
    double lse = rowScores(csr, i, q, k, d, scale, scores);
    std::fill(dq.begin(), dq.end(), 0.0);
    prob.assign(static_cast<size_t>(end - begin), 0.0);
    dp.assign(static_cast<size_t>(end - begin), 0.0);
    // P, dP and D = sum_j P_ij dP_ij.
    double rowD = 0;
    for (int64_t p = begin; p < end; ++p) {
      int64_t j = csr.crd[p];
      double pij = std::exp(scores[p - begin] - lse);
      double dpij = 0;
      for (int64_t c = 0; c < d; ++c)
        dpij += static_cast<double>(dO[i * d + c]) * static_cast<double>(v[j * d + c]);
      prob[p - begin] = pij;
      dp[p - begin] = dpij;
      rowD += pij * dpij;
    }
    for (int64_t p = begin; p < end; ++p) {
      int64_t j = csr.crd[p];
      double pij = prob[p - begin];
      double ds = pij * (dp[p - begin] - rowD);
      for (int64_t c = 0; c < d; ++c) {
        dv[j * d + c] += pij * static_cast<double>(dO[i * d + c]);
        dq[c] += ds * static_cast<double>(k[j * d + c]);
        dk[j * d + c] += ds * static_cast<double>(q[i * d + c]);
      }
    }
    for (int64_t c = 0; c < d; ++c)
      dQ[i * d + c] = static_cast<float>(scale * dq[c]);
  }
  for (size_t x = 0; x < nd; ++x) {
    dK[x] = static_cast<float>(scale * dk[x]);
    dV[x] = static_cast<float>(dv[x]);
  }
}

void referenceAttentionRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                            float *o, int64_t d, double scale) {
  std::vector<double> scores, acc(static_cast<size_t>(d));
  for (int64_t i = firstRow; i < csr.n; ++i) {
    const int64_t begin = csr.pos[i], end = csr.pos[i + 1], r = i - firstRow;
    const double lse = rowScoresOf(csr, i, q + r * d, k, d, scale, scores);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t p = begin; p < end; ++p) {
      const double w = std::exp(scores[static_cast<size_t>(p - begin)] - lse);
      const int64_t j = csr.crd[p];
      for (int64_t c = 0; c < d; ++c)
        acc[c] += w * static_cast<double>(v[j * d + c]);
    }
    for (int64_t c = 0; c < d; ++c)
      o[r * d + c] = end > begin ? static_cast<float>(acc[c]) : 0.0f;
  }
}

void referenceBackwardRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                           const float *dO, float *dQ, double *dK, double *dV, int64_t d, double scale) {
  std::vector<double> dq(static_cast<size_t>(d)), scores, prob, dp;
  for (int64_t i = firstRow; i < csr.n; ++i) {
    const int64_t begin = csr.pos[i], end = csr.pos[i + 1], r = i - firstRow;
    const float *qi = q + r * d, *dOi = dO + r * d;
    const double lse = rowScoresOf(csr, i, qi, k, d, scale, scores);
    std::fill(dq.begin(), dq.end(), 0.0);
    prob.assign(static_cast<size_t>(end - begin), 0.0);
    dp.assign(static_cast<size_t>(end - begin), 0.0);
    double rowD = 0;
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j = csr.crd[p];
      double dpij = 0;
      for (int64_t c = 0; c < d; ++c)
        dpij += static_cast<double>(dOi[c]) * static_cast<double>(v[j * d + c]);
      prob[p - begin] = std::exp(scores[p - begin] - lse);
      dp[p - begin] = dpij;
      rowD += prob[p - begin] * dpij;
    }
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j = csr.crd[p];
      const double pij = prob[p - begin], ds = pij * (dp[p - begin] - rowD);
      for (int64_t c = 0; c < d; ++c) {
        dV[j * d + c] += pij * static_cast<double>(dOi[c]);
        dq[c] += ds * static_cast<double>(k[j * d + c]);
        dK[j * d + c] += scale * ds * static_cast<double>(qi[c]);
      }
    }
    for (int64_t c = 0; c < d; ++c)
      dQ[r * d + c] = static_cast<float>(scale * dq[c]);
  }
}

} // namespace attnc
