//===- Reference.h - A plain attention reference in double precision ------===//
//
// What every kernel is checked against: for each query row, a numerically
// stable softmax over exactly the row's keys, accumulated in double. Rows
// with no keys produce zeros. O(nnz * d); meant for checking, not speed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Csr.h"

namespace attnc {

/// One contiguous [n, d] slice: o = softmax(scale * q k^T on csr) v.
void referenceAttention(const ir::Csr &csr, const float *q, const float *k, const float *v,
                        float *o, int64_t d, double scale);

} // namespace attnc
