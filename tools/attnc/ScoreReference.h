//===- ScoreReference.h - attnc run --check for patterns with a score -----===//
//
// The double-precision reference rows (attnc/reference/Reference.h's
// referenceAttentionRows and referenceBackwardRows) of a pattern with a
// score modifier: each allowed pair's scaled logit s = scale q_i . k_j is
// rewritten to t = score(s, i, j, h, n, inputs) and every row's softmax
// denominator gains exp(sink(i, h, n, inputs)), both evaluated by
// plan/Score.h's evalScore (the scalar meaning the runtime's vector programs
// follow). The backward takes dt/ds by a central difference in double.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Csr.h"
#include "attnc/plan/Score.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::tool {

/// What a head's rows are scored with.
struct ScoreContext {
  const ScoreExpr *score = nullptr; ///< null: t = s
  const ScoreExpr *sink = nullptr;  ///< null: no sink
  const std::vector<FloatInput> *inputs = nullptr;
  const std::vector<std::string> *inputNames = nullptr;
  int64_t head = 0; ///< the query head
  int64_t n = 1;    ///< the key length
};

/// referenceAttentionRows with the score and the sink.
void scoredAttentionRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                         float *o, int64_t d, double scale, const ScoreContext &ctx);

/// referenceBackwardRows with the score and the sink (dK, dV added to).
void scoredBackwardRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                        const float *dO, float *dQ, double *dK, double *dV, int64_t d, double scale,
                        const ScoreContext &ctx);

} // namespace attnc::tool
