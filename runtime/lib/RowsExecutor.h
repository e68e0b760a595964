//===- RowsExecutor.h - A few query rows, each over its own keys ----------===//
//
// The fused backend's path for a handful of queries at the end of a long
// sequence (a decoding step with a key/value cache): each row's keys come
// from the pattern's closed forms (RowEvaluator, O(intervals) per row), and
// only the key and value rows they name are read. Nothing is prepared per
// n, so a decoder whose cache grows by one key per step builds no plan.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <cstdint>

namespace attnc::rt {

/// Queries at positions firstRow .. n - 1 of `set` at length n: q and o are
/// [n - firstRow, d], k and v [n, d], contiguous row-major f32; lse (n -
/// firstRow floats, may be null) gets each row's log-sum-exp. A row without
/// keys gives zeros and -inf; a NaN score makes its row NaN. `threads`
/// threads of the shared pool share the rows.
void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const float *q, const float *k,
             const float *v, float *o, float *lse, float scale, int threads);
/// The same on bf16 q, k and v (uint16_t), widened as they are read, so
/// that only the named rows are touched.
void runRows(const ir::SetRef &set, int64_t n, int64_t firstRow, int64_t d, const uint16_t *q, const uint16_t *k,
             const uint16_t *v, float *o, float *lse, float scale, int threads);

} // namespace attnc::rt
