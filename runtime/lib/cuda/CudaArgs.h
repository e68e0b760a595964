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
  int32_t first;            ///< the position of query row 0 (nk - nq, or first_query)
  /// A soft cap (the capped kernels, attnc_fwd_cap_*): the logit of a raw
  /// product x is capOutLog2 * tanh(capIn * x) in base 2, i.e. c tanh(b s)
  /// of the scaled s = scale x with capIn = b scale, capOutLog2 = c log2(e).
  float capIn, capOutLog2;
  /// A sink (`sink z[h]`): f32 [heads], each head's logit, folded into the
  /// rows' O and log-sum-exp as they are written (null: none).
  const float *sink;
  /// A distance bias (the alibi kernels, attnc_fwd_alibi_*): the logit of
  /// query i and key j gets slope[h] sgn (j - i) (slope: f32 [heads]);
  /// slopeLog2 = sgn log2(e).
  const float *slope;
  float slopeLog2;
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
  int32_t first; ///< the position of query row 0 (nk - nq, or first_query)
  /// The capped kernels (attnc_bwd_cap_*): FwdArgs' capIn and capOutLog2,
  /// and capGrad = b c, the derivative of c tanh(b s) being b c (1 - tanh^2).
  float capIn, capOutLog2, capGrad;
  /// The alibi kernels (attnc_bwd_alibi_*): FwdArgs' slope, slopeSign = sgn,
  /// and dSlope: f32 [heads], each head's sum of dS sgn (j - i) added to it
  /// (null: the slopes' gradient is not asked for).
  const float *slope;
  float slopeSign;
  float *dSlope;
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

#if defined(__CUDACC__)
#define ATTNC_HOST_DEVICE __host__ __device__
#else
#define ATTNC_HOST_DEVICE
#endif

// --- The wgmma forward's shared-memory operands (variant 4, sm_90a) --------
//
// Tiles of 64 rows (query rows, or keys) by DP columns in the 128-byte
// swizzle: DP / 64 blocks of 64 columns, each 64 rows of 128 bytes, every
// 8-row atom (1024 bytes, 1024-aligned) with its 16-byte chunks XOR-ed by
// the row. Q and K are K-major operands (S = Q K^T: K is d), V an MN-major
// one (O = P V: K is the key). Host-callable so that CudaPlanTest checks
// them against the layouts the PTX ISA defines for such descriptors.

/// Element offset of (row, 16-byte chunk) in such a tile.
ATTNC_HOST_DEVICE constexpr int wgSwizzled(int row, int chunk) {
  return (chunk >> 3) * (64 * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}
/// The matrix descriptor: start address, leading byte offset (K-major:
/// unused; MN-major: the next 64 columns), stride byte offset 1024 (the
/// next 8 rows), 128-byte swizzle.
ATTNC_HOST_DEVICE constexpr uint64_t wgDescriptor(uint32_t addr, uint32_t leadingBytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | uint64_t(leadingBytes >> 4) << 16 | uint64_t(1024 >> 4) << 32 |
         uint64_t(1) << 62;
}
/// Bytes into a K-major tile of k-step kk (columns 16 kk ..): 32 bytes a
/// step within a 128-byte row, the next 64 columns a block on.
ATTNC_HOST_DEVICE constexpr uint32_t wgKStep(int kk) { return uint32_t((kk >> 2) * 64 * 128 + (kk & 3) * 32); }
/// Bytes into V's tile of k-step kk (keys 16 kk ..: two 8-row atoms).
ATTNC_HOST_DEVICE constexpr uint32_t wgVStep(int kk) { return uint32_t(kk * 16 * 128); }
/// V's leading byte offset: from one block of 64 columns to the next.
constexpr uint32_t kWgVLeading = 64 * 128;

/// Shared memory of the kernels, bytes (DP: the padded head dimension; the
/// forward's key tiles in flight), with 1024 bytes of slack to align the
/// wgmma kernels' tiles.
constexpr int fwdSmemBytes(int dp, int stages = 2) {
  return 2 * ((1 + 2 * stages) * 64 * dp) + stages * 64 * 8 + 1024;
}
constexpr int bwdSmemBytes(int dp) { return 2 * (6 * 64 * dp + 64 * 64) + 2 * 64 * (8 + 4 + 4 + 4) + 1024; }

} // namespace attnc::rt::cuda
