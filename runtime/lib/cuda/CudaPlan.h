//===- CudaPlan.h - The plan as tables the CUDA kernels read --------------===//
//
// The GPU kernels are generic over the pattern: what a pattern is enters as
// tables built here, on the host, from the same target-independent plan the
// CPU runs (plan/Plan.h), once per sequence length n and kept on the device.
// Nothing is compiled per pattern or per n.
//
// Forward (one CTA per item, 64 query rows):
//   an item is 64 query positions row0 + r * rowStride (r < rows) and a
//   compacted key list cut into tiles of 64 keys; each key carries the 64-bit
//   mask of the item's rows that have it, and a tile whose keys every row has
//   is marked full (no masking). The row-tiles pieces of a head set are
//   merged per block of 64 consecutive rows (pieces are disjoint, so a key two
//   pieces hold for different rows carries the OR of their masks). Each
//   residue-relayout piece is its own launch over its classes' blocks (rows
//   c, c + m, ...), run first, writing a per-row online-softmax state (O and
//   log-sum-exp, f32) that the next launch starts from: the log-sum-exp merge
//   of the plan's disjoint pieces, with no atomics.
//
// Backward (one CTA per item, up to 64 keys): the pieces transposed. A
// piece's keys that some row has are taken in order and cut into groups of
// 64 (a stripe's columns are compacted, as the forward compacts them); a
// group's rows are the query positions that have one of its keys, each with
// the 64-bit mask of the group's keys it has, cut into tiles of 64 rows. One
// launch per head set; each item adds its keys' dK and dV to f32
// accumulators atomically once (pieces may share keys).
//
// Balance: an item far longer than the rest (global rows or columns, a
// stripe every later row reads) is cut into chunks run by CTAs of their
// own (kSplitTiles); a forward chunk writes its partial O and log-sum-exp
// to a slot that the item merges, a backward chunk adds to dK, dV like any
// item. Each launch runs its longest items first.
//
// Lists are padded to whole tiles with entries whose mask is 0 (key or row
// position 0, read but never counted), so the kernels have no bounds to
// check inside a tile.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "CudaArgs.h"
#include "attnc/plan/Plan.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace attnc::rt::cuda {

inline constexpr int kTileRows = 64; ///< query rows per forward item and backward row tile
inline constexpr int kTileKeys = 64; ///< keys per forward tile and backward item

/// A run of items that one launch computes.
struct Launch {
  int32_t itemBegin = 0, itemCount = 0;
  bool readsState = false;  ///< forward: start each row from the state the last launch wrote
  bool writesState = false; ///< forward: write the state instead of O (a relayout piece before the rest)
  bool writesSlots = false; ///< forward: chunks of the next launch's long items, writing their slots
};

/// Items longer than this many tiles, and than kSplitOverMean times the
/// mean of their launch, are cut into chunks of about that many tiles run
/// side by side (a few long rows or keys -- global tokens -- would
/// otherwise leave one CTA working long after the rest).
inline constexpr int32_t kSplitTiles = 32;
inline constexpr int32_t kSplitOverMean = 4;

/// The tables of one head set at one n.
struct SetTables {
  std::vector<FwdItem> fwdItems;
  std::vector<int32_t> fwdKeys;   ///< key positions
  std::vector<uint64_t> fwdMasks; ///< bit r: item row r has the key
  std::vector<uint8_t> fwdFull;   ///< per tile (entry / 64): every row has every key
  std::vector<Launch> fwdLaunches;

  std::vector<BwdItem> bwdItems;
  std::vector<int32_t> bwdKeys;   ///< key positions, 64 per item
  std::vector<int32_t> bwdRows;   ///< query positions
  std::vector<uint64_t> bwdMasks; ///< bit u: the row has the item's key u
  std::vector<uint8_t> bwdFull;   ///< per row tile: every row has every key of the item
  std::vector<Launch> bwdLaunches;
  int32_t slots = 0; ///< forward chunks' result slots


  bool needsState() const {
    for (const Launch &l : fwdLaunches)
      if (l.writesState)
        return true;
    return false;
  }
  size_t bytes() const;
};

/// The plan the GPU runs: the kernel's pattern on blocks of 64 rows.
plan::Plan gpuPlan(const ir::PatternIR &ir);

/// The tables of every head set of `plan` (from gpuPlan) at length n.
std::vector<SetTables> buildTables(const plan::Plan &plan, int64_t n);

/// The tables of head set `set` alone: for a pattern that reads data, of
/// `plan` bound to one slice's inputs (plan::bindPlan), in raster order (a
/// row block's keys are the union of its rows').
SetTables buildSetTables(const plan::Plan &plan, size_t set, int64_t n);

/// Every pair (query position, key position) the forward kernel computes
/// for one set, read from the tables exactly as the kernel reads them (the
/// items, their tiles, the full flags and the masks): tests check each pair
/// of the pattern comes once and no other.
void forEachForwardPair(const SetTables &t, const std::function<void(int64_t, int64_t)> &pair);
/// The same for the backward kernel's (query, key) pairs.
void forEachBackwardPair(const SetTables &t, const std::function<void(int64_t, int64_t)> &pair);

/// Executed and useful pairs of the forward (what `bench` reports as
/// executed/useful): executed counts every row x key of every tile.
struct TableStats {
  int64_t useful = 0, executedFwd = 0, executedBwd = 0, items = 0, tiles = 0;
  /// The forward's pairs counting what its warps skip: on a partial tile
  /// each warp's 16 rows compute only the 16-key groups they have a key in.
  int64_t executedFwdWarps = 0;
};
TableStats tableStats(const SetTables &t);

/// One entry of a kernel's `cuda_tuned` metadata (`attnc tune --target
/// cuda`): on GPU `gpu` ("NVIDIA_H200@9.0"), for `dtype` at head dimension
/// `d`, forward kernel variant `variant` (0: the default; 1-5 as
/// ATTNC_CUDA_FWD_VARIANT names them) was the fastest.
/// The forward variants: 0 the default, 1-3 of the bf16 d <= 64 kernel, 4
/// the wgmma kernel, 5 the wgmma kernel with 3 key tiles in flight at d <=
/// 64 (4 and 5: compute capability 9.0).
constexpr int kLastForwardVariant = 5;

struct TunedVariant {
  std::string gpu, dtype;
  int64_t d = 0;
  int variant = 0;
};

/// "GPU:dtype:d=variant;..." parsed; malformed entries are skipped.
std::vector<TunedVariant> parseCudaTuned(const std::string &text);

/// The variant tuned for this GPU, dtype and d; `none` if there is none.
int tunedVariant(const std::vector<TunedVariant> &tuned, const std::string &gpu, const std::string &dtype, int64_t d,
                 int none = 0);

} // namespace attnc::rt::cuda
