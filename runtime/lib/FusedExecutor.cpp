//===- FusedExecutor.cpp - Running a plan's tiles with online softmax -----===//
//
// A row block's 32 query rows are the lanes of two 16-wide vectors. Per
// block: Q^T and the rows' state (max, sum, unnormalised output) are
// transposed in (16 x 16 register transposes). Per tile of keys:
//   1. S^T = K_tile Q^T: each key row broadcast against Q^T, 8 keys at a time,
//   2. scale; mask (partial tiles, rows past the block) to -inf,
//   3. online softmax per lane: new max, rescale sum and output, P = exp(S - max),
//   4. O^T += V_tile^T P^T, 8 keys at a time.
// The state goes back at the end of the block. Written with GCC vector
// extensions; `target_clones` builds an AVX-512 version and a baseline one
// and picks at load time.
//
//===----------------------------------------------------------------------===//
#include "FusedExecutor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace attnc::rt {

namespace {

constexpr int kLanes = 16;
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));

inline v16 splat(float x) { return v16{} + x; }

/// e^x for 16 lanes: 2^(x log2 e) split into 2^round and a degree-6
/// polynomial on [-0.5, 0.5] (relative error ~2e-7); -inf gives 0.
inline v16 exp16(v16 x) {
  const v16 lo = splat(-87.0f), hi = splat(88.0f);
  v16 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  v16 t = xc * 1.44269504088896341f;
  v16 tr = t + 0.5f;
  vi16 ti = __builtin_convertvector(tr, vi16);
  v16 fi = __builtin_convertvector(ti, v16);
  vi16 adjust = fi > tr; // truncation rounded up for negatives
  ti = ti + adjust;      // adjust is -1 where true
  fi = __builtin_convertvector(ti, v16);
  v16 f = (t - fi) * 0.693147180559945309f;
  v16 p = 1.0f + f * (1.0f + f * (0.5f + f * (0.166666667f + f * (0.0416666667f + f * (0.00833333333f + f * 0.00138888889f)))));
  vi16 bits = (ti + 127) << 23;
  v16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  v16 r = p * scale;
  return x < lo ? splat(0.0f) : r;
}

struct TileArgs {
  const float *q;         // [n, d] row-major, as are k, v and acc
  const float *k;
  const float *v;
  int64_t d;
  float scale;
  const int32_t *rowMap;  // tile-list row -> query row (residue relayout); null: identity
  float *rowMax, *rowSum, *acc;
  bool dense = false;    // baseline: never skip masked work
};

inline v16 load16(const float *p) {
  v16 x;
  std::memcpy(&x, p, sizeof x);
  return x;
}
inline void store16(float *p, v16 x) { std::memcpy(p, &x, sizeof x); }

/// Transposes a 16 x 16 block held as 16 row vectors: four stages, each
/// swapping bit b of the row index with bit b of the lane index through
/// two-source permutes (no memory round trip).
template <int B>
inline void transposeStage(v16 r[16], vi16 keep, vi16 swap) {
  for (int i = 0; i < 16; ++i) {
    if (i & B)
      continue;
    v16 lo = __builtin_shuffle(r[i], r[i | B], keep);
    v16 hi = __builtin_shuffle(r[i], r[i | B], swap);
    r[i] = lo;
    r[i | B] = hi;
  }
}

inline void transpose16(v16 r[16]) {
  // keep[l] / swap[l] for stage b: lanes with bit b set come from the partner row.
  static const vi16 kKeep8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  static const vi16 kSwap8 = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  static const vi16 kKeep4 = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
  static const vi16 kSwap4 = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
  static const vi16 kKeep2 = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
  static const vi16 kSwap2 = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
  static const vi16 kKeep1 = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
  static const vi16 kSwap1 = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
  transposeStage<8>(r, kKeep8, kSwap8);
  transposeStage<4>(r, kKeep4, kSwap4);
  transposeStage<2>(r, kKeep2, kSwap2);
  transposeStage<1>(r, kKeep1, kSwap1);
}

/// Lanes r (rows of a 32-row block, `half` selects rows 16..31) whose bit is
/// set in `word`.
inline vi16 laneMask(uint32_t word, int half) {
  static const vi16 kLaneBit = {1 << 0,  1 << 1,  1 << 2,  1 << 3,  1 << 4,  1 << 5,
                                1 << 6,  1 << 7,  1 << 8,  1 << 9,  1 << 10, 1 << 11,
                                1 << 12, 1 << 13, 1 << 14, 1 << 15};
  vi16 w = vi16{} + static_cast<int32_t>(half ? word >> 16 : word & 0xffff);
  return (w & kLaneBit) != 0;
}

/// The tiles of one or more pieces that share the same row blocks (every
/// row-tiles piece of a head does: blocks of R consecutive rows). Rows of a
/// block are vector lanes (32 rows = two 16-lane halves), so the softmax
/// needs no horizontal reductions: per tile S^T = K_tile Q_block^T (keys
/// broadcast from their rows, Q^T built once per block), the online-softmax
/// update per lane, and O^T += V_tile^T P^T. A block's state is loaded once
/// and stored once, whatever the number of pieces.
__attribute__((target_clones("avx512f", "default")))
void runTiles(const std::vector<const plan::TileList *> &lists, const TileArgs &a) {
  constexpr int kRows = 32;
  constexpr int kGroup = 8;
  const int64_t d = a.d;
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> qt(static_cast<size_t>(d * kRows)), accT(static_cast<size_t>(d * kRows));
  std::vector<float> probs; // count x kRows
  std::vector<float> scores; // count x kRows
  const size_t numBlocks = lists.front()->blocks.size();
  for (size_t bi = 0; bi < numBlocks; ++bi) {
    const plan::TileList::Block &block = lists.front()->blocks[bi];
    bool anyTile = false;
    for (const plan::TileList *tl : lists)
      anyTile = anyTile || tl->blocks[bi].numTiles > 0;
    if (!anyTile)
      continue;
    const int32_t rows = block.rows;
    const uint32_t rowsValid = rows == 32 ? 0xffffffffu : ((1u << rows) - 1);
    // Q^T of the block and the rows' running state, transposed.
    float rowM[kRows], rowL[kRows];
    int64_t stateOf[kRows];
    for (int r = 0; r < kRows; ++r) {
      int64_t row = block.firstRow + r;
      stateOf[r] = r < rows ? (a.rowMap ? a.rowMap[row] : row) : -1;
      rowM[r] = r < rows ? a.rowMax[stateOf[r]] : ninf;
      rowL[r] = r < rows ? a.rowSum[stateOf[r]] : 0.0f;
    }
    if (d % 16 == 0) {
      v16 tile[16];
      for (int half = 0; half < 2; ++half)
        for (int64_t x0 = 0; x0 < d; x0 += 16) {
          for (int src = 0; src < 2; ++src) {
            const float *base = src == 0 ? a.q : a.acc;
            float *dst = src == 0 ? qt.data() : accT.data();
            for (int r = 0; r < 16; ++r) {
              int64_t st = stateOf[half * 16 + r];
              tile[r] = st >= 0 ? load16(base + st * d + x0) : splat(0.0f);
            }
            transpose16(tile);
            for (int k = 0; k < 16; ++k)
              store16(&dst[(x0 + k) * kRows + half * 16], tile[k]);
          }
        }
    } else {
      for (int r = 0; r < kRows; ++r) {
        const float *qr = stateOf[r] >= 0 ? a.q + stateOf[r] * d : nullptr;
        const float *ar = stateOf[r] >= 0 ? a.acc + stateOf[r] * d : nullptr;
        for (int64_t x = 0; x < d; ++x) {
          qt[x * kRows + r] = qr ? qr[x] : 0.0f;
          accT[x * kRows + r] = ar ? ar[x] : 0.0f;
        }
      }
    }
    v16 M[2] = {load16(rowM), load16(rowM + 16)}, L[2] = {load16(rowL), load16(rowL + 16)};

    for (const plan::TileList *tlp : lists)
    for (int32_t ti = 0; ti < tlp->blocks[bi].numTiles; ++ti) {
      const plan::TileList &tl = *tlp;
      const plan::TileList::Tile &tile = tl.tiles[tl.blocks[bi].firstTile + ti];
      const int32_t count = tile.count;
      const int32_t *keys = tl.keys.data() + tile.keyOffset;
      const uint32_t *masks = tile.maskOffset >= 0 ? tl.masks.data() + tile.maskOffset : nullptr;
      scores.resize(static_cast<size_t>(kRows * count));
      probs.resize(static_cast<size_t>(kRows * count));
      // S^T = K Q^T, kGroup keys at a time.
      for (int32_t c0 = 0; c0 < count; c0 += kGroup) {
        int32_t g = std::min(kGroup, count - c0);
        const float *kr[kGroup];
        for (int32_t c = 0; c < kGroup; ++c)
          kr[c] = a.k + static_cast<int64_t>(keys[c0 + std::min(c, g - 1)]) * d;
        v16 s0[kGroup] = {}, s1[kGroup] = {};
        for (int64_t x = 0; x < d; ++x) {
          v16 q0 = load16(&qt[x * kRows]), q1 = load16(&qt[x * kRows + 16]);
          for (int32_t c = 0; c < kGroup; ++c) {
            s0[c] += kr[c][x] * q0;
            s1[c] += kr[c][x] * q1;
          }
        }
        for (int32_t c = 0; c < g; ++c) {
          store16(&scores[(c0 + c) * kRows], s0[c] * a.scale);
          store16(&scores[(c0 + c) * kRows + 16], s1[c] * a.scale);
        }
      }
      // Mask, new running max per row.
      v16 newM[2] = {M[0], M[1]};
      for (int32_t c = 0; c < count; ++c) {
        uint32_t word = (masks ? masks[c] : 0xffffffffu) & rowsValid;
        for (int h = 0; h < 2; ++h) {
          v16 sc = load16(&scores[c * kRows + 16 * h]);
          vi16 in = laneMask(word, h);
          sc = in ? sc : splat(ninf);
          store16(&scores[c * kRows + 16 * h], sc);
          newM[h] = newM[h] > sc ? newM[h] : sc;
        }
      }
      // Rescale what was accumulated under the old max.
      v16 corr[2];
      bool rescale = false;
      for (int h = 0; h < 2; ++h) {
        vi16 live = M[h] > splat(-3.0e38f); // not -inf (ordered compare)
        corr[h] = live ? exp16(M[h] - newM[h]) : splat(0.0f);
        L[h] *= corr[h];
        M[h] = newM[h];
        vi16 changed = corr[h] < splat(1.0f);
        int32_t any = 0;
        for (int lane = 0; lane < 16; ++lane)
          any |= changed[lane];
        rescale = rescale || any != 0;
      }
      if (rescale || a.dense)
        for (int64_t x = 0; x < d; ++x) {
          store16(&accT[x * kRows], load16(&accT[x * kRows]) * corr[0]);
          store16(&accT[x * kRows + 16], load16(&accT[x * kRows + 16]) * corr[1]);
        }
      // P = exp(S - max), row sums.
      for (int32_t c = 0; c < count; ++c)
        for (int h = 0; h < 2; ++h) {
          v16 sc = load16(&scores[c * kRows + 16 * h]);
          vi16 in = sc > splat(-3.0e38f);
          v16 p = in ? exp16(sc - M[h]) : splat(0.0f);
          L[h] += p;
          store16(&probs[c * kRows + 16 * h], p);
        }
      // O^T += V^T P^T, kGroup keys at a time (their P in registers).
      for (int32_t c0 = 0; c0 < count; c0 += kGroup) {
        int32_t g = std::min(kGroup, count - c0);
        const float *vr[kGroup];
        v16 p0[kGroup], p1[kGroup];
        for (int32_t c = 0; c < kGroup; ++c) {
          bool real = c < g;
          vr[c] = a.v + static_cast<int64_t>(keys[c0 + std::min(c, g - 1)]) * d;
          p0[c] = real ? load16(&probs[(c0 + c) * kRows]) : splat(0.0f);
          p1[c] = real ? load16(&probs[(c0 + c) * kRows + 16]) : splat(0.0f);
        }
        for (int64_t x = 0; x < d; ++x) {
          v16 a0 = load16(&accT[x * kRows]), a1 = load16(&accT[x * kRows + 16]);
          for (int32_t c = 0; c < kGroup; ++c) {
            a0 += vr[c][x] * p0[c];
            a1 += vr[c][x] * p1[c];
          }
          store16(&accT[x * kRows], a0);
          store16(&accT[x * kRows + 16], a1);
        }
      }
    }
    // Store the state back.
    store16(rowM, M[0]);
    store16(rowM + 16, M[1]);
    store16(rowL, L[0]);
    store16(rowL + 16, L[1]);
    for (int r = 0; r < rows; ++r) {
      a.rowMax[stateOf[r]] = rowM[r];
      a.rowSum[stateOf[r]] = rowL[r];
    }
    if (d % 16 == 0) {
      v16 tile[16];
      for (int half = 0; half < 2; ++half)
        for (int64_t x0 = 0; x0 < d; x0 += 16) {
          for (int k = 0; k < 16; ++k)
            tile[k] = load16(&accT[(x0 + k) * kRows + half * 16]);
          transpose16(tile);
          for (int r = 0; r < 16; ++r)
            if (stateOf[half * 16 + r] >= 0)
              store16(a.acc + stateOf[half * 16 + r] * d + x0, tile[r]);
        }
    } else {
      for (int r = 0; r < rows; ++r) {
        float *ar = a.acc + stateOf[r] * d;
        for (int64_t x = 0; x < d; ++x)
          ar[x] = accT[x * kRows + r];
      }
    }
  }
}

} // namespace

void runFusedHead(const plan::HeadInstance &head, int64_t n, int64_t d, const float *q,
                  const float *k, const float *v, float *o, float scale, bool dense,
                  FusedScratch &s) {
  s.rowMax.assign(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
  s.rowSum.assign(static_cast<size_t>(n), 0.0f);
  s.acc.assign(static_cast<size_t>(n * d), 0.0f);
  TileArgs args{q, k, v, d, scale, nullptr, s.rowMax.data(), s.rowSum.data(), s.acc.data(), dense};
  // Every row-tiles piece in one pass over the row blocks.
  std::vector<const plan::TileList *> rowTiles;
  for (const plan::PieceInstance &piece : head.pieces)
    if (piece.strategy == plan::Strategy::RowTiles)
      rowTiles.push_back(&piece.classes[0]);
  if (!rowTiles.empty())
    runTiles(rowTiles, args);
  for (const plan::PieceInstance &piece : head.pieces) {
    if (piece.strategy == plan::Strategy::RowTiles)
      continue;
    // Residue relayout: class c's rows are the queries c, c + m, ...; keys
    // and values are read in place, the rows through rowMap.
    const int64_t m = piece.modulus;
    for (int64_t c = 0; c < static_cast<int64_t>(piece.classes.size()); ++c) {
      const plan::TileList &tl = piece.classes[c];
      if (tl.tiles.empty())
        continue;
      int64_t rows = (n - c + m - 1) / m;
      s.rowMap.resize(static_cast<size_t>(rows));
      for (int64_t t = 0; t < rows; ++t)
        s.rowMap[t] = static_cast<int32_t>(c + t * m);
      args.rowMap = s.rowMap.data();
      runTiles({&tl}, args);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    float sum = s.rowSum[i];
    float inv = sum > 0 ? 1.0f / sum : 0.0f;
    for (int64_t x = 0; x < d; ++x)
      o[i * d + x] = s.acc[i * d + x] * inv;
  }
}

} // namespace attnc::rt
