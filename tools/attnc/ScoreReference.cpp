//===- ScoreReference.cpp - attnc run --check for patterns with a score ---===//
#include "ScoreReference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnc::tool {

namespace {

double scored(const ScoreContext &ctx, double s, int64_t i, int64_t j) {
  if (!ctx.score)
    return s;
  ScoreEnv env;
  env.s = s;
  env.i = i;
  env.j = j;
  env.h = ctx.head;
  env.n = ctx.n;
  env.inputs = ctx.inputs;
  return evalScore(*ctx.score, env, *ctx.inputNames);
}

/// dt/ds at s: a central difference (the score is smooth in s but for the
/// kinks of min, max, abs and where, which a random s meets with
/// probability 0).
double scoreSlope(const ScoreContext &ctx, double s, int64_t i, int64_t j) {
  if (!ctx.score)
    return 1.0;
  const double h = 1e-5 * std::max(1.0, std::fabs(s));
  return (scored(ctx, s + h, i, j) - scored(ctx, s - h, i, j)) / (2 * h);
}

/// Row i's rewritten logits over its keys (CSR order) and their
/// log-sum-exp with the sink; -inf for a row without keys.
double rowLogits(const ir::Csr &csr, int64_t i, const float *qi, const float *k, int64_t d, double scale,
                 const ScoreContext &ctx, std::vector<double> &raw, std::vector<double> &logits) {
  const int64_t begin = csr.pos[i], end = csr.pos[i + 1];
  raw.assign(static_cast<size_t>(end - begin), 0.0);
  logits.assign(raw.size(), 0.0);
  if (end == begin)
    return -std::numeric_limits<double>::infinity();
  double best = -std::numeric_limits<double>::infinity();
  for (int64_t p = begin; p < end; ++p) {
    const int64_t j = csr.crd[p];
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += static_cast<double>(qi[c]) * static_cast<double>(k[j * d + c]);
    raw[p - begin] = dot * scale;
    logits[p - begin] = scored(ctx, dot * scale, i, j);
    best = std::max(best, logits[p - begin]);
  }
  double sink = -std::numeric_limits<double>::infinity();
  if (ctx.sink) {
    ScoreEnv env;
    env.i = i;
    env.h = ctx.head;
    env.n = ctx.n;
    env.inputs = ctx.inputs;
    sink = evalScore(*ctx.sink, env, *ctx.inputNames);
    best = std::max(best, sink);
  }
  double sum = ctx.sink ? std::exp(sink - best) : 0.0;
  for (double t : logits)
    sum += std::exp(t - best);
  return best + std::log(sum);
}

} // namespace

void scoredAttentionRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                         float *o, int64_t d, double scale, const ScoreContext &ctx) {
  std::vector<double> raw, logits, acc(static_cast<size_t>(d));
  for (int64_t i = firstRow; i < csr.n; ++i) {
    const int64_t begin = csr.pos[i], end = csr.pos[i + 1], r = i - firstRow;
    const double lse = rowLogits(csr, i, q + r * d, k, d, scale, ctx, raw, logits);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t p = begin; p < end; ++p) {
      const double w = std::exp(logits[static_cast<size_t>(p - begin)] - lse);
      const int64_t j = csr.crd[p];
      for (int64_t c = 0; c < d; ++c)
        acc[c] += w * static_cast<double>(v[j * d + c]);
    }
    for (int64_t c = 0; c < d; ++c)
      o[r * d + c] = end > begin ? static_cast<float>(acc[c]) : 0.0f;
  }
}

void scoredBackwardRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                        const float *dO, float *dQ, double *dK, double *dV, int64_t d, double scale,
                        const ScoreContext &ctx) {
  std::vector<double> dq(static_cast<size_t>(d)), raw, logits, prob, dp;
  for (int64_t i = firstRow; i < csr.n; ++i) {
    const int64_t begin = csr.pos[i], end = csr.pos[i + 1], r = i - firstRow;
    const float *qi = q + r * d, *dOi = dO + r * d;
    const double lse = rowLogits(csr, i, qi, k, d, scale, ctx, raw, logits);
    std::fill(dq.begin(), dq.end(), 0.0);
    prob.assign(static_cast<size_t>(end - begin), 0.0);
    dp.assign(static_cast<size_t>(end - begin), 0.0);
    // The sink has no value row: it takes probability but adds nothing to O or to D.
    double rowD = 0;
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j = csr.crd[p];
      double dpij = 0;
      for (int64_t c = 0; c < d; ++c)
        dpij += static_cast<double>(dOi[c]) * static_cast<double>(v[j * d + c]);
      prob[p - begin] = std::exp(logits[p - begin] - lse);
      dp[p - begin] = dpij;
      rowD += prob[p - begin] * dpij;
    }
    for (int64_t p = begin; p < end; ++p) {
      const int64_t j = csr.crd[p];
      const double pij = prob[p - begin];
      const double ds = pij * (dp[p - begin] - rowD) * scoreSlope(ctx, raw[p - begin], i, j);
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

} // namespace attnc::tool
