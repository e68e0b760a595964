//===- Reference.h - A plain attention reference in double precision ------===//
//
// What every kernel is checked against: for each query row, a numerically
// stable softmax over exactly the row's keys, accumulated in double. Rows
// with no keys produce zeros. O(nnz * d); meant for checking, not speed.
// The gradients (referenceLse, referenceBackward) are written from the
// softmax's formulas in the same way, in double.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Csr.h"

namespace attnc {

/// One contiguous [n, d] slice: o = softmax(scale * q k^T on csr) v.
void referenceAttention(const ir::Csr &csr, const float *q, const float *k, const float *v,
                        float *o, int64_t d, double scale);

/// One contiguous [n, d] slice: lse[i] = log(sum over the row's keys j of
/// exp(scale * q_i . k_j)), computed stably (max first) in double; -inf for a
/// row with no keys. lse has n elements.
void referenceLse(const ir::Csr &csr, const float *q, const float *k, float *lse, int64_t d,
                  double scale);

/// One contiguous [n, d] slice: the gradients of L = sum(O * dO) with
/// O = softmax(scale * q k^T on csr) v, in double:
///
///   P_ij = exp(s_ij - lse_i) over the row's keys, s_ij = scale q_i . k_j
///   dV_j = sum_i P_ij dO_i,   dP_ij = dO_i . v_j,   D_i = sum_j P_ij dP_ij
///   dS_ij = P_ij (dP_ij - D_i),  dQ_i = scale sum_j dS_ij k_j,
///   dK_j = scale sum_i dS_ij q_i.
///
/// D_i comes from P and dP (not from dO . O), so it does not share the
/// kernels' shortcut. A row with no keys gets zero dQ; a key no row attends
/// gets zero dK and dV. dQ, dK, dV are [n, d] and overwritten.
void referenceBackward(const ir::Csr &csr, const float *q, const float *k, const float *v,
                       const float *dO, float *dQ, float *dK, float *dV, int64_t d, double scale);

/// Queries at positions firstRow .. csr.n - 1 of one slice (the last of its
/// keys: fewer queries than keys, bottom-right aligned): q and o are
/// [csr.n - firstRow, d], query row r being position firstRow + r, and k, v
/// [csr.n, d]; otherwise referenceAttention. Rows of csr before firstRow are
/// not read (they may be empty).
void referenceAttentionRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                            float *o, int64_t d, double scale);

/// referenceBackward for the queries at positions firstRow .. csr.n - 1 (q,
/// dO, dQ: [csr.n - firstRow, d]; k, v: [csr.n, d]). dQ is overwritten;
/// dK and dV ([csr.n, d], double) are added to, scaled as referenceBackward
/// scales them, so that several query heads sharing one key/value head
/// (grouped-query attention) sum their gradients in double.
void referenceBackwardRows(const ir::Csr &csr, int64_t firstRow, const float *q, const float *k, const float *v,
                           const float *dO, float *dQ, double *dK, double *dV, int64_t d, double scale);

} // namespace attnc
