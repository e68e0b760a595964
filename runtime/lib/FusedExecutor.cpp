//===- FusedExecutor.cpp - Running a plan's tiles with online softmax -----===//
//
// Tile kernel, for a block of up to R rows and a tile of up to 16 keys:
//   1. K^T of the tile's keys into a d x 16 buffer (zero-padded),
//   2. S = Q_rows K^T, four rows at a time, 16 lanes,
//   3. scale, mask (partial tiles and padding lanes to -inf),
//   4. online softmax: new max, rescale the running sum and output,
//   5. O_rows += P V_tile.
// Written with GCC vector extensions; `target_clones` builds an AVX-512
// version and a baseline one and picks at load time.
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

inline float hmax(v16 x) {
  float m = x[0];
  for (int c = 1; c < kLanes; ++c)
    m = std::max(m, x[c]);
  return m;
}

inline float hsum(v16 x) {
  float s = 0;
  for (int c = 0; c < kLanes; ++c)
    s += x[c];
  return s;
}

struct TileArgs {
  const float *q;      // rows of the (gathered) query space, row-major [*, d]
  const float *k;
  const float *v;
  int64_t d;
  float scale;
  const int32_t *rowMap; // (gathered) row -> state row; null: identity
  float *rowMax, *rowSum, *acc;
};

__attribute__((target_clones("avx512f", "default")))
void runTiles(const plan::TileList &tl, const TileArgs &a) {
  const int64_t d = a.d;
  const float ninf = -std::numeric_limits<float>::infinity();
  // Plain float storage (vector of v16 need not be 64-byte aligned); loads
  // go through memcpy, i.e. unaligned vector loads.
  std::vector<float> kt(static_cast<size_t>(kLanes * d));
  std::vector<float> vt(static_cast<size_t>(kLanes * d));
  alignas(64) float probs[4][kLanes];
  for (const plan::TileList::Block &block : tl.blocks) {
    for (int32_t ti = 0; ti < block.numTiles; ++ti) {
      const plan::TileList::Tile &tile = tl.tiles[block.firstTile + ti];
      const int32_t *keys = tl.keys.data() + tile.keyOffset;
      // K^T (padded with zeros) and V rows of the tile.
      std::fill(kt.begin(), kt.end(), 0.0f);
      for (int32_t c = 0; c < tile.count; ++c) {
        const float *kr = a.k + static_cast<int64_t>(keys[c]) * d;
        for (int64_t x = 0; x < d; ++x)
          kt[x * kLanes + c] = kr[x];
        std::memcpy(&vt[c * d], a.v + static_cast<int64_t>(keys[c]) * d, sizeof(float) * d);
      }
      const uint32_t *masks = tile.maskOffset >= 0 ? tl.masks.data() + tile.maskOffset : nullptr;
      const uint32_t padMask = tile.count == 32 ? 0xffffffffu : ((1u << tile.count) - 1);
      for (int32_t r0 = 0; r0 < block.rows; r0 += 4) {
        int32_t rows = std::min<int32_t>(4, block.rows - r0);
        v16 s[4] = {v16{}, v16{}, v16{}, v16{}};
        const float *qr[4];
        for (int32_t r = 0; r < 4; ++r)
          qr[r] = a.q + static_cast<int64_t>(block.firstRow + r0 + std::min(r, rows - 1)) * d;
        for (int64_t x = 0; x < d; ++x) {
          v16 kx;
          std::memcpy(&kx, &kt[x * kLanes], sizeof kx);
          s[0] += qr[0][x] * kx;
          s[1] += qr[1][x] * kx;
          s[2] += qr[2][x] * kx;
          s[3] += qr[3][x] * kx;
        }
        for (int32_t r = 0; r < rows; ++r) {
          uint32_t m = masks ? masks[r0 + r] : padMask;
          if (m == 0) {
            for (int c = 0; c < kLanes; ++c)
              probs[r][c] = 0;
            continue;
          }
          v16 sc = s[r] * a.scale;
          for (int c = 0; c < kLanes; ++c)
            if (!(m >> c & 1))
              sc[c] = ninf;
          int64_t row = block.firstRow + r0 + r;
          int64_t state = a.rowMap ? a.rowMap[row] : row;
          float oldMax = a.rowMax[state];
          float newMax = std::max(oldMax, hmax(sc));
          v16 p = exp16(sc - newMax);
          float correction = oldMax == ninf ? 0.0f : std::exp(oldMax - newMax);
          a.rowMax[state] = newMax;
          a.rowSum[state] = a.rowSum[state] * correction + hsum(p);
          float *accRow = a.acc + state * d;
          if (correction != 1.0f)
            for (int64_t x = 0; x < d; ++x)
              accRow[x] *= correction;
          std::memcpy(probs[r], &p, sizeof p);
        }
        // O_rows += P V_tile.
        for (int32_t r = 0; r < rows; ++r) {
          int64_t row = block.firstRow + r0 + r;
          float *accRow = a.acc + (a.rowMap ? a.rowMap[row] : row) * d;
          for (int32_t c = 0; c < tile.count; ++c) {
            float p = probs[r][c];
            if (p == 0.0f)
              continue;
            const float *vr = &vt[c * d];
            for (int64_t x = 0; x < d; ++x)
              accRow[x] += p * vr[x];
          }
        }
      }
    }
  }
}

} // namespace

void runFusedHead(const plan::HeadInstance &head, int64_t n, int64_t d, const float *q,
                  const float *k, const float *v, float *o, float scale, FusedScratch &s) {
  s.rowMax.assign(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
  s.rowSum.assign(static_cast<size_t>(n), 0.0f);
  s.acc.assign(static_cast<size_t>(n * d), 0.0f);
  TileArgs args{q, k, v, d, scale, nullptr, s.rowMax.data(), s.rowSum.data(), s.acc.data()};
  for (const plan::PieceInstance &piece : head.pieces) {
    if (piece.strategy == plan::Strategy::RowTiles) {
      args.q = q;
      args.k = k;
      args.v = v;
      args.rowMap = nullptr;
      runTiles(piece.classes[0], args);
      continue;
    }
    // Residue relayout: gather class c's queries and its key class's keys and
    // values into contiguous buffers; results go back through rowMap.
    const int64_t m = piece.modulus;
    for (int64_t c = 0; c < static_cast<int64_t>(piece.classes.size()); ++c) {
      const plan::TileList &tl = piece.classes[c];
      if (tl.tiles.empty())
        continue;
      int64_t rows = (n - c + m - 1) / m;
      // Every tile key u of this class stands for j = keyClass + u m.
      s.gq.resize(static_cast<size_t>(rows * d));
      s.rowMap.resize(static_cast<size_t>(rows));
      for (int64_t t = 0; t < rows; ++t) {
        std::memcpy(&s.gq[t * d], q + (c + t * m) * d, sizeof(float) * d);
        s.rowMap[t] = static_cast<int32_t>(c + t * m);
      }
      int64_t keyClass = tl.keyClass;
      int64_t keyRows = keyClass < n ? (n - keyClass + m - 1) / m : 0;
      s.gk.resize(static_cast<size_t>(keyRows * d));
      s.gv.resize(static_cast<size_t>(keyRows * d));
      for (int64_t u = 0; u < keyRows; ++u) {
        std::memcpy(&s.gk[u * d], k + (keyClass + u * m) * d, sizeof(float) * d);
        std::memcpy(&s.gv[u * d], v + (keyClass + u * m) * d, sizeof(float) * d);
      }
      args.q = s.gq.data();
      args.k = s.gk.data();
      args.v = s.gv.data();
      args.rowMap = s.rowMap.data();
      runTiles(tl, args);
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
