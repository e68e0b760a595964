//===- FusedExecutor.h - Running a plan's tiles with online softmax -------===//
//
// The fused backend's executor: every tile of every piece updates one
// online-softmax state per query row (running max, running sum, unnormalised
// output), so disjoint pieces merge exactly (log-sum-exp). Q K^T, the softmax
// update and P V happen tile by tile in registers and L1; nothing of size
// n x n exists. The tile kernels are one source (FusedTiles.inc,
// GradTiles.inc) compiled per instruction set: AVX-512 (plus bf16 kernels for
// AVX512_BF16), AVX2 with FMA, and a portable one on 128-bit vectors (NEON on
// Arm, SSE2 on x86-64); the CPU picks the best it has at first use
// (fusedIsa(); ATTNC_FUSED_ISA=avx512|avx2|portable forces one). Building with
// ATTNC_FUSED_GENERIC_ONLY=1 leaves every x86-specific piece out, as other
// targets do.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Plan.h"
#include "attnc/support/AlignedVector.h"

#include "ScoreProgram.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace attnc::rt {

/// A score modifier as the tile kernels run it: the slice's compiled code
/// (its rows and keys are the slice's positions: a residue class's copies
/// say where theirs sit through the kernels' rowBase / keyBase and strides).
struct ScoreRun {
  const ScoreCode *code = nullptr;
  /// Backward: where each float input's entries start in the gradient sums.
  std::vector<int64_t> gradOffsets;
  int64_t gradSize = 0;
};

/// One of several passes over a slice's rows (a pattern that reads data
/// runs its pieces in groups, one order each: FusedBackend), in place:
/// no pass copies Q, K, V or its outputs into its order.
struct PassOrder {
  /// The rows' and keys' order (an input's equality classes, sorted): block
  /// row t is query order[t] and a block's key u is key order[u]; null:
  /// positions in raster order.
  const int32_t *order = nullptr;
  /// Forward: starts every row's online-softmax state (else continues the
  /// state left in the scratch and the output by the passes before).
  /// Backward: nothing is in dq, dk, dv yet (else they hold the sums of the
  /// passes before, and the scratch's fresh flags say what is unwritten).
  bool first = true;
  /// Forward: normalises the rows. Backward: clears what no pass wrote.
  bool last = true;
  /// The cached blocks' keys are positions already (buildShapes' keyOrder):
  /// only blocks generated as they run are mapped through `order`.
  bool cachedKeysMapped = false;
};

/// A row block's keys that run later than the block (see runFusedHead).
struct Waiting {
  std::vector<plan::BlockTiles> pieces; ///< per split piece: the keys past the block's rows
  std::vector<size_t> next;             ///< per piece: how many of them have run
  std::vector<plan::BlockTiles> parts;  ///< per piece: the stretch that runs now
};

/// Per-thread scratch for one (batch, head) slice, reused across calls.
struct FusedScratch {
  support::AlignedVector<float> rowMax, rowSum;          ///< n, n: the online-softmax state (the output slice accumulates)
  std::vector<plan::BlockTiles> blocks;       ///< the current row block of each piece
  plan::BlockShape shape;                     ///< a block generated as it runs
  support::AlignedVector<float> qt, scores;              ///< Q^T of a block (d x 32); S^T / P^T of a tile (C x 32)
  std::vector<const float *> vRows;           ///< a tile's value rows
  std::vector<const plan::BlockTiles *> built; ///< pointers to `blocks`, as the kernels take them
  std::vector<FusedScratch> helpers;          ///< the scratch of the threads that share a slice
  std::vector<const void *> ahead;            ///< cache lines of the next block, prefetched as this one runs
  size_t aheadNext = 0;
  support::AlignedVector<float> classK, classV;          ///< a residue class's keys and values, class-major
  // The bf16 kernels' (runFusedHeadBf16) pairs of adjacent bf16 as 32-bit words.
  support::AlignedVector<uint32_t> qtPairs;              ///< Q^T of a block: (d + 1) / 2 pairs of dimensions x 16 H rows
  support::AlignedVector<uint32_t> probPairs;            ///< P^T of a tile: (C + 1) / 2 pairs of keys x 16 H rows
  support::AlignedVector<uint32_t> valuePairs;           ///< V of a tile: (C + 1) / 2 pairs of keys x d rounded up to 16
  std::vector<const uint16_t *> vRowsBf16;    ///< a tile's value rows
  support::AlignedVector<uint16_t> classKBf16, classVBf16; ///< classK, classV of bf16 inputs
  std::vector<Waiting> waiting;               ///< row blocks' keys that run later
  // A score modifier's (ScoreRun) lanes: its slots, the block's row
  // positions and which lanes are pairs of the pattern.
  std::vector<float> scoreSlots;
  uint64_t slotsFor = 0; ///< the ScoreCode::id they hold constants of
  alignas(64) float rowPos[64];
  bool rowsConsecutive = false; ///< rowPos[r] = rowPos[0] + r for every lane of the block
  uint8_t live[ScoreCode::kMaxLanes];
};

/// Computes one contiguous [n, d] slice: o = attention over head `headIndex`
/// of `plan`, its row blocks taken from `cached` (buildShapes at this n), or
/// generated from closed forms as they run when that is null.
/// Every pair of every tile is computed (masked pairs get probability 0), so
/// `dense` (the baseline: every key of every row) is the same code on blocks
/// that skip nothing. `threads` threads share the slice's row blocks (and
/// residue classes): for runs with fewer (batch, head) slices than cores.
/// Rows before `skipRows` and from `endRows` on are padding the caller drops
/// (queries fewer than the keys): blocks of them alone are not run, and
/// their output rows and state are left as they are.
void runFusedHead(const plan::Plan &plan, size_t headIndex, bool dense,
                  const plan::HeadShapes *cached, int64_t n, int64_t d, const float *q,
                  const float *k, const float *v, float *o, float scale, FusedScratch &scratch,
                  int threads = 1, int64_t skipRows = 0,
                  int64_t endRows = std::numeric_limits<int64_t>::max(), const ScoreRun *score = nullptr,
                  const PassOrder &pass = {});

/// The tile kernels' instruction set: "avx512", "avx2" or "portable".
const char *fusedIsa();

/// Empty, or why the kernels ATTNC_FUSED_ISA names cannot run here (this CPU
/// lacks the instructions, this build is not for x86-64, or the name is
/// unknown); the fused and dense backends refuse to load then.
const std::string &fusedIsaError();

/// Whether runFusedHeadBf16 computes on bf16 at head dimension d: d >= 1
/// (every CPU: see fusedBf16DotProducts).
bool fusedBf16Available(int64_t d);

/// Whether runFusedHeadBf16 multiplies pairs of bf16 (AVX512_BF16's
/// vdpbf16ps, P rounded to bf16 for P V): the AVX-512 kernels on a CPU with
/// AVX512_BF16. Elsewhere it runs the f32 kernels on the bf16 rows widened
/// to f32 as they load (P stays f32).
bool fusedBf16DotProducts();

/// runFusedHead on bf16 inputs (contiguous row-major [n, d] bf16 bit
/// patterns), o in f32 as there, the same online-softmax state in `scratch`
/// (rowMax, rowSum). With AVX512_BF16 (fusedBf16DotProducts) Q K^T and P V
/// multiply pairs of bf16 into f32 sums (vdpbf16ps); P is rounded to bf16 for
/// P V and each row's sum adds the rounded probabilities, so the weights that
/// reach O sum to 1. Elsewhere the f32 kernels run on the rows widened to f32
/// in the registers (no f32 copy of Q, K or V is made). Masked pairs,
/// rows without keys and NaN scores are treated as the f32 kernel treats
/// them. Callers check fusedBf16Available(d) first.
void runFusedHeadBf16(const plan::Plan &plan, size_t headIndex, bool dense,
                      const plan::HeadShapes *cached, int64_t n, int64_t d, const uint16_t *q,
                      const uint16_t *k, const uint16_t *v, float *o, float scale, FusedScratch &scratch,
                      int threads = 1, int64_t skipRows = 0,
                      int64_t endRows = std::numeric_limits<int64_t>::max());

/// With a score modifier (`score`), runFusedBackward differentiates it too:
/// the float inputs' gradients are added into inputGrad (score->gradSize
/// doubles, at score->gradOffsets).

/// A thread's scratch in the backward pass.
struct GradScratch {
  support::AlignedVector<float> qt, dot, p, ds; ///< Q^T, dO^T of a block; P^T, dS^T of a tile
  plan::BlockShape shape;            ///< a block generated as it runs
  plan::BlockTiles tiles;            ///< the block being run
  std::vector<plan::BlockTiles> parts; ///< its row-tiles pieces, before they are merged
  support::AlignedVector<float> dk, dv;         ///< a helper thread's partial sums ([n, d] each)
  /// A residue class's rows and keys copied to consecutive rows (q, dO,
  /// lse, delta; k, v) and its gradients before they are added back.
  support::AlignedVector<float> cq, cdo, clse, cdelta, ck, cv, cdq, cdk, cdv;
  const float *doAct[64], *qAct[64]; ///< the rows of a tile that have keys
  float *dqAct[64];
  /// Lines of the next block (its Q, dO, K and V rows) to prefetch, one per
  /// step of the S loops.
  std::vector<const void *> ahead;
  // A score modifier's lanes (as FusedScratch's), and this thread's sums of
  // the float inputs' gradients (ScoreRun::gradOffsets).
  std::vector<float> scoreSlots;
  uint64_t slotsFor = 0; ///< the ScoreCode::id they hold constants of
  uint8_t live[ScoreCode::kMaxLanes];
  float weight[ScoreCode::kMaxLanes];
  alignas(64) float rowPos[64];
  bool rowsConsecutive = false; ///< rowPos[r] = rowPos[0] + r for every lane of the block
  std::vector<double> inputGrad;
};

/// Per-slice scratch of the backward pass, reused across calls.
struct FusedGradScratch {
  std::vector<float> delta;          ///< rowsum(dO * O), n floats
  std::vector<uint8_t> dqFresh, kvFresh; ///< rows of dq, keys of dk and dv not yet written
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
                      FusedGradScratch &scratch, int threads = 1, int64_t skipRows = 0,
                      int64_t endRows = std::numeric_limits<int64_t>::max(), const ScoreRun *score = nullptr,
                      double *inputGrad = nullptr, const PassOrder &pass = {});

} // namespace attnc::rt
