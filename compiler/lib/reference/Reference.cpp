//===- Reference.cpp - A plain attention reference in double precision ----===//
#include "attnc/reference/Reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnc {

void referenceAttention(const ir::Csr &csr, const float *q, const float *k, const float *v,
                        float *o, int64_t d, double scale) {
  std::vector<double> scores, acc(static_cast<size_t>(d));
  for (int64_t i = 0; i < csr.n; ++i) {
    int64_t begin = csr.pos[i], end = csr.pos[i + 1];
    std::fill(acc.begin(), acc.end(), 0.0);
    scores.assign(static_cast<size_t>(end - begin), 0.0);
    double best = -std::numeric_limits<double>::infinity();
    for (int64_t p = begin; p < end; ++p) {
      int64_t j = csr.crd[p];
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += static_cast<double>(q[i * d + c]) * static_cast<double>(k[j * d + c]);
      scores[p - begin] = dot * scale;
      best = std::max(best, scores[p - begin]);
    }
    double sum = 0;
    for (int64_t p = begin; p < end; ++p) {
      double w = std::exp(scores[p - begin] - best);
      sum += w;
      int64_t j = csr.crd[p];
      for (int64_t c = 0; c < d; ++c)
        acc[c] += w * static_cast<double>(v[j * d + c]);
    }
    for (int64_t c = 0; c < d; ++c)
      o[i * d + c] = end > begin ? static_cast<float>(acc[c] / sum) : 0.0f;
  }
}

} // namespace attnc
