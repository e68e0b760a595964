//===- FusedExecutor.h - Running a plan's tiles with online softmax -------===//
//
// The fused backend's executor: every tile of every piece updates one
// online-softmax state per query row (running max, running sum, unnormalised
// output), so disjoint pieces merge exactly (log-sum-exp). Q K^T, the softmax
// update and P V happen tile by tile in registers and L1; nothing of size
// n x n exists. Vector code for AVX-512 with a portable fallback, chosen at
// load time by the CPU (function multiversioning).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/compiler/Plan.h"

#include <cstdint>
#include <vector>

namespace attnc::rt {

/// Per-thread scratch for one (batch, head) slice.
struct FusedScratch {
  std::vector<float> rowMax, rowSum, acc;     ///< n, n, n * d
  std::vector<int32_t> rowMap;                ///< residue relayout: list row -> query
};

/// Computes one contiguous [n, d] slice: o = attention over the head's pieces.
/// Every pair of every tile is computed (masked pairs get probability 0), so
/// the dense baseline is this same code on a plan instance without skipping.
void runFusedHead(const plan::HeadInstance &head, int64_t n, int64_t d, const float *q,
                  const float *k, const float *v, float *o, float scale,
                  FusedScratch &scratch);

} // namespace attnc::rt
