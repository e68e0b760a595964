//===- FusedExecutor.h - Running a plan's tiles with online softmax -------===//
//
// The fused backend's executor: every tile of every piece updates one
// online-softmax state per query row (running max, running sum, unnormalised
// output), so disjoint pieces merge exactly (log-sum-exp). Q K^T, the softmax
// update and P V happen tile by tile in registers and L1; nothing of size
// n x n exists. The tile kernels are plain C++ with GCC/Clang vector
// extensions (the generic path, any 64-bit target); on x86-64 an AVX-512 copy
// is compiled too and the CPU's features pick one at first use
// (ATTNC_FUSED_ISA=portable forces the generic one). Building with
// ATTNC_FUSED_GENERIC_ONLY=1 leaves every x86-specific piece out, as other
// targets do.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Plan.h"

#include <cstdint>
#include <vector>

namespace attnc::rt {

/// A row block's keys that run later than the block (see runFusedHead).
struct Waiting {
  std::vector<plan::BlockTiles> pieces; ///< per split piece: the keys past the block's rows
  std::vector<size_t> next;             ///< per piece: how many of them have run
  std::vector<plan::BlockTiles> parts;  ///< per piece: the stretch that runs now
};

/// Per-thread scratch for one (batch, head) slice, reused across calls.
struct FusedScratch {
  std::vector<float> rowMax, rowSum;          ///< n, n: the online-softmax state (the output slice accumulates)
  std::vector<plan::BlockTiles> blocks;       ///< the current row block of each piece
  plan::BlockShape shape;                     ///< a block generated as it runs
  std::vector<float> qt, scores;              ///< Q^T of a block (d x 32); S^T / P^T of a tile (C x 32)
  std::vector<const float *> vRows;           ///< a tile's value rows
  std::vector<const plan::BlockTiles *> built; ///< pointers to `blocks`, as the kernels take them
  std::vector<FusedScratch> helpers;          ///< the scratch of the threads that share a slice
  std::vector<const float *> ahead;           ///< cache lines of the next block, prefetched as this one runs
  size_t aheadNext = 0;
  std::vector<float> classK, classV;          ///< a residue class's keys and values, class-major
  std::vector<Waiting> waiting;               ///< row blocks' keys that run later
};

/// Computes one contiguous [n, d] slice: o = attention over head `headIndex`
/// of `plan`, its row blocks taken from `cached` (buildShapes at this n), or
/// generated from closed forms as they run when that is null.
/// Every pair of every tile is computed (masked pairs get probability 0), so
/// `dense` (the baseline: every key of every row) is the same code on blocks
/// that skip nothing. `threads` threads share the slice's row blocks (and
/// residue classes): for runs with fewer (batch, head) slices than cores.
void runFusedHead(const plan::Plan &plan, size_t headIndex, bool dense,
                  const plan::HeadShapes *cached, int64_t n, int64_t d, const float *q,
                  const float *k, const float *v, float *o, float scale, FusedScratch &scratch,
                  int threads = 1);

/// A thread's scratch in the backward pass.
struct GradScratch {
  std::vector<float> qt, dot, p, ds; ///< Q^T, dO^T of a block; P^T, dS^T of a tile
  plan::BlockShape shape;            ///< a block generated as it runs
  plan::BlockTiles tiles;            ///< the block being run
  std::vector<float> dk, dv;         ///< a helper thread's partial sums ([n, d] each)
  /// A residue class's rows and keys copied to consecutive rows (q, dO,
  /// lse, delta; k, v) and its gradients before they are added back.
  std::vector<float> cq, cdo, clse, cdelta, ck, cv, cdq, cdk, cdv;
  const float *doAct[64], *qAct[64]; ///< the rows of a tile that have keys
  float *dqAct[64];
};

/// Per-slice scratch of the backward pass, reused across calls.
struct FusedGradScratch {
  std::vector<float> delta;          ///< rowsum(dO * O), n floats
  std::vector<GradScratch> workers;  ///< one per thread sharing the slice
};

/// The gradients of one slice (see attnc_run_backward): dq, dk, dv ([n, d],
/// overwritten) from q, k, v, o, dO and each row's log-sum-exp `lse`, over
/// the same row blocks as runFusedHead, one piece after another. With
/// `threads` > 1 the blocks (and residue classes) of a piece are shared out;
/// dQ rows belong to one block per piece, dK and dV go to per-thread partial
/// sums that are added at the end.
void runFusedBackward(const plan::Plan &plan, size_t headIndex, bool dense, const plan::HeadShapes *cached,
                      int64_t n, int64_t d, const float *q, const float *k, const float *v, const float *o,
                      const float *dO, const float *lse, float *dq, float *dk, float *dv, float scale,
                      FusedGradScratch &scratch, int threads = 1);

} // namespace attnc::rt
