//===- CudaArgs.h - What the host passes the CUDA kernels -----------------===//
//
// Included by AttentionKernels.cu (nvcc) and by the host code (CudaPlan,
// CudaRun), so that the two sides agree on every layout. Plain structs of
// fixed-size fields, no dependencies.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stdint.h>

namespace attnc::rt::cuda {

/// One forward CTA: 64 query rows and their compacted keys.
struct FwdItem {
  int32_t row0;      ///< query position of the item's row 0
  int32_t rowStride; ///< positions between consecutive rows (m for a residue class)
  int32_t rows;      ///< 1..64
  int32_t keyBegin;  ///< first entry in keys / masks (a multiple of 64)
  int32_t numTiles;  ///< entries keyBegin .. keyBegin + 64 numTiles
  /// A long item's keys are cut into chunks run by CTAs of their own (split
  /// launches, before the item's launch): such a chunk writes its rows'
  /// partial result to `slot`; the item merges slots mergeBegin ..
  /// mergeBegin + mergeCount - 1 into its own before it writes.
  int32_t slot;      ///< -1: not a chunk
  int32_t mergeBegin, mergeCount;
};

/// One backward CTA: a group of keys and the rows that have them.
struct BwdItem {
  int32_t keyBegin; ///< 64 entries in the key list (numKeys of them real)
  int32_t numKeys;  ///< 1..64
  int32_t rowBegin; ///< first entry in the row lists (a multiple of 64)
  int32_t numTiles; ///< row tiles of 64
  /// 1: a chunk of a long group's rows (its other chunks are items too).
  int32_t chunk;
  int32_t pad[3];
};

/// The forward kernel's argument. Strides are in elements.
struct FwdArgs {
  const void *q, *k, *v;
  void *o;
  float *lse;
  int64_t qsb, qsh, qsn, ksb, ksh, ksn, vsb, vsh, vsn, osb, osh, osn, lsb, lsh, lsn;
  int32_t heads, ratio, d, nq, nk, itemBegin;
  float scaleLog2;
  int32_t readsState, writesState, set;
  const FwdItem *items;
  const int32_t *keys;
  const uint64_t *masks;
  const uint8_t *full;
  float *stateO;            ///< [batch * heads][nk][DP]
  float *stateLse;          ///< [batch * heads][nk]
  const int32_t *setOfHead; ///< null: every head runs this set
  float *slotO;             ///< [slots][batch * heads][64][DP]: chunks' partial O (normalised)
  float *slotLse;           ///< [slots][batch * heads][64]
  int32_t writesSlots;      ///< a split launch: each item is a chunk that writes its slot
  int32_t pad;
};

/// The backward kernel's argument.
struct BwdArgs {
  const void *q, *k, *v, *dO;
  const float *lse;
  const float *delta; ///< [batch * heads][nq]: rowsum(dO * O)
  float *dq;          ///< [batch * heads][nq][DP], added to
  float *dk, *dv;     ///< [batch * kvHeads][nk][DP], added to
  int64_t qsb, qsh, qsn, ksb, ksh, ksn, vsb, vsh, vsn, gsb, gsh, gsn, lsb, lsh, lsn;
  int32_t heads, ratio, d, nq, nk, itemBegin;
  float scale, scaleLog2;
  int32_t set;
  const BwdItem *items;
  const int32_t *keys;
  const int32_t *rows;
  const uint64_t *masks;
  const uint8_t *full;
  const int32_t *setOfHead;
};

/// A strided 4-D view for the copy kernels (element strides; any dtype).
struct View {
  void *data;
  int32_t dtype; ///< attnc_dtype: 0 f32, 1 bf16, 2 f16
  int32_t cols;  ///< elements of a row to read, or to write (then zeros past the source's)
  int64_t shape[3]; ///< batch, heads, rows
  int64_t strides[4];
};

/// Shared memory of the kernels, bytes (DP: the padded head dimension).
constexpr int fwdSmemBytes(int dp) { return 2 * (5 * 64 * dp) + 2 * 64 * 8; }
constexpr int bwdSmemBytes(int dp) { return 2 * (6 * 64 * dp + 64 * 64) + 2 * 64 * (8 + 4 + 4 + 4); }

} // namespace attnc::rt::cuda
