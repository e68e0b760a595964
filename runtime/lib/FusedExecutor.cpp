//===- FusedExecutor.cpp - Running a plan's tiles with online softmax -----===//
//
// A row block's query rows (16, 32 or 64) are the lanes of 1, 2 or 4 16-wide
// vectors for Q K^T and the softmax. Per block: Q^T is built with 16 x 16
// register transposes and the rows' running max and sum are loaded. Per tile
// of keys:
//   1. S^T = K_tile Q^T: each key row broadcast against Q^T, kAcc
//      accumulators at a time; scaled, masked (partial tiles, rows past the
//      block) and
//      folded into the new row max as it leaves the registers,
//   2. the correction exp(old max - new max) and P = exp(S - max) per lane,
//   3. O = O * correction + P V with the head dimension as lanes instead:
//      a group of rows' output stays in registers for the whole tile, each
//      probability a broadcast; O is the row-major accumulator itself, so it
//      is never transposed.
// The kernels (FusedTiles.inc, GradTiles.inc) are one source compiled per
// instruction set: always once in plain C++ with GCC/Clang vector extensions
// on 128-bit vectors (the generic path, for any 64-bit target: SSE2, NEON)
// and, on x86-64, once for AVX2 with FMA and once for AVX-512; there the CPU
// picks the best it has at first use (kernels(); ATTNC_FUSED_ISA forces one).
// ATTNC_FUSED_GENERIC_ONLY=1 leaves out every x86-specific piece on x86-64
// too, so that the tests run the generic path as other targets build it.
// Inputs in bf16 (runFusedHeadBf16) run the same blocks through the kernels
// of FusedTilesBf16.inc with AVX512_BF16, else through the f32 kernels
// instantiated for bf16 rows (widened as they load).
//
//===----------------------------------------------------------------------===//
#include "FusedExecutor.h"

#include "ExpPoly.h"

#include "attnc/support/Check.h"
#include "attnc/support/ThreadPool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#ifndef ATTNC_FUSED_GENERIC_ONLY
#define ATTNC_FUSED_GENERIC_ONLY 0
#endif
#if defined(__x86_64__) && !ATTNC_FUSED_GENERIC_ONLY
#define ATTNC_FUSED_X86 1
#else
#define ATTNC_FUSED_X86 0
#endif

#if ATTNC_FUSED_X86
// GCC 12 reports every inlined _mm512_max_ps and friends as "'__Y' may be
// used uninitialized": their _mm512_undefined_ps() is `__m512 __Y = __Y;`, a
// deliberate undefined value (324 warnings in this file alone). The warning
// is placed in the header, so it is silenced for the header's text only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace attnc::rt {

namespace {

/// A block kernel's arguments; T: float, or uint16_t for bf16 inputs.
template <typename T>
struct TileArgsOf {
  const T *q;             // [n, d] row-major, as are k, v and acc
  const T *k;
  const T *v;
  int64_t d;
  float scale;
  int64_t tileRows;       // R: rows per block (at most 64)
  int64_t tileCols;       // C: keys per tile
  int64_t rowBase, rowStride; // block row t is query rowBase + t * rowStride, or
  float *rowMax, *rowSum, *acc; // the online-softmax state; acc is the output slice
  bool init = false;      // the first pass: start every row's state instead of loading it
  bool finalize = false;  // the only pass: normalise each row when its block ends
  bool everyPair = false; // the dense baseline: P V over every key of a tile too
  /// A score modifier, else null: key t of k is stored key keyBase + t keyStride of the slice.
  const ScoreRun *score = nullptr;
  int64_t keyBase = 0, keyStride = 1;
  /// Where not null, block row t is query rowMap[t] instead (PassOrder), and
  /// the blocks' keys are positions in no particular order.
  const int32_t *rowMap = nullptr;
  int64_t query(int64_t t) const { return rowMap ? rowMap[t] : rowBase + t * rowStride; }
};
using TileArgs = TileArgsOf<float>;
using TileArgsBf16 = TileArgsOf<uint16_t>;

/// The backward pass's block kernel (GradTiles.inc): one slice's arrays,
/// contiguous [n, d] (lse, delta: n).
struct GradArgs {
  const float *q, *k, *v, *dO, *lse, *delta;
  float *dq, *dk, *dv;
  int64_t d;
  float scale;
  int64_t tileRows;
  /// Where not null, a byte per row of dq (per key of dk and dv): nonzero
  /// while nothing has been written there. The first sum is stored, not
  /// added, so the arrays need no clearing pass first (fixed, n = 4096,
  /// d = 128: 3% of the backward); what stays fresh is cleared at the end.
  uint8_t *dqFresh = nullptr, *kvFresh = nullptr;
  /// The dense baseline: every pair of every tile in every product, where
  /// the fused kernels skip the 16-row vectors and the row and key ranges
  /// that have no pair of the pattern.
  bool everyPair = false;
  /// A score modifier, else null: row t of q is stored row rowBase + t
  /// rowStride of the slice, key t of k stored key keyBase + t keyStride.
  const ScoreRun *score = nullptr;
  int64_t rowBase = 0, rowStride = 1, keyBase = 0, keyStride = 1;
  /// Where not null, block row t is query rowMap[t] of the arrays (PassOrder).
  const int32_t *rowMap = nullptr;
};

constexpr int kGradTile = 48; // keys per tile of the backward pass (a multiple of every key group, 24 / H)

} // namespace

#if ATTNC_FUSED_X86
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,bmi,bmi2")
namespace avx512 {
namespace {
#define ATTNC_TILES_AVX512 1
#include "FusedTiles.inc"
#include "GradTiles.inc"
#undef ATTNC_TILES_AVX512
} // namespace
} // namespace avx512
#pragma GCC pop_options

// The bf16 kernels: a region of their own, so that nothing of the f32
// kernels above is compiled for (or could pick up) AVX512_BF16. They reuse
// the f32 kernels' helpers (max, masks, transposes), which inline here.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,bmi,bmi2,avx512bf16")
namespace avx512bf16 {
namespace {
using namespace avx512;
#include "FusedTilesBf16.inc"
} // namespace
} // namespace avx512bf16
#pragma GCC pop_options
#endif

#define ATTNC_TILES_AVX512 0
// (GCC notes, at the end of the file, that vectors passed without the
// target's registers change the ABI: these functions are internal to this
// file, never called across that boundary, so the note is off for the file.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if ATTNC_FUSED_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2")
// (Two S^T loops jammed into one need twice the 16 registers: see
// ATTNC_DOT_LOOP in FusedTiles.inc.)
#pragma GCC optimize("no-loop-unroll-and-jam")
namespace avx2 {
namespace {
#define ATTNC_TILES_LANES 8
#include "FusedTiles.inc"
#include "GradTiles.inc"
#undef ATTNC_TILES_LANES
} // namespace
} // namespace avx2
#pragma GCC pop_options
#endif
#pragma GCC push_options
#pragma GCC optimize("no-loop-unroll-and-jam")
namespace generic {
namespace {
#define ATTNC_TILES_LANES 4
#include "FusedTiles.inc"
#include "GradTiles.inc"
#undef ATTNC_TILES_LANES
} // namespace
} // namespace generic
#pragma GCC pop_options
#undef ATTNC_TILES_AVX512

namespace {
template <typename T>
using RunBlockOf = void (*)(const plan::BlockTiles *const *, int, const TileArgsOf<T> &, FusedScratch &);
using RunBlock = RunBlockOf<float>;
using GradBlock = void (*)(const plan::BlockTiles &, const GradArgs &, GradScratch &);

/// The tile kernels that run: one instruction set's forward, backward and
/// bf16 forward kernels (AVX512_BF16's dot products where the CPU has them,
/// else the f32 kernels on bf16 rows widened as they load).
struct Kernels {
  const char *isa = "portable";
  RunBlock block = &generic::runBlock;
  GradBlock grad = &generic::gradBlock;
  RunBlockOf<uint16_t> bf16 = &generic::runBlockWidened;
  std::string error; ///< not empty: ATTNC_FUSED_ISA names kernels this CPU (or build) cannot run
};

/// The best kernels this CPU has, chosen once: AVX-512 (with the bf16 ones
/// where it has AVX512_BF16), AVX2 with FMA, else the portable 128-bit ones
/// (what other targets build). ATTNC_FUSED_ISA=avx512|avx2|portable forces
/// one, so that one CPU tests every path it can run.
const Kernels &kernels() {
  static const Kernels chosen = [] {
    Kernels k;
    const char *forced = std::getenv("ATTNC_FUSED_ISA");
    const std::string want = forced ? forced : "";
#if ATTNC_FUSED_X86
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("bmi2");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("bmi2");
    if (want == "avx512" && !avx512)
      k.error = "ATTNC_FUSED_ISA=avx512: this CPU lacks AVX-512 (F, DQ, BW and VL); unset it to run the best kernels "
                "it has";
    else if (want == "avx2" && !avx2)
      k.error = "ATTNC_FUSED_ISA=avx2: this CPU lacks AVX2 with FMA; unset it to run the best kernels it has";
    else if (avx512 && (want.empty() || want == "avx512"))
      k = {"avx512", &avx512::runBlock, &avx512::gradBlock,
           __builtin_cpu_supports("avx512bf16") ? &avx512bf16::runBlockBf16 : &avx512::runBlockWidened, ""};
    else if (avx2 && (want.empty() || want == "avx2"))
      k = {"avx2", &avx2::runBlock, &avx2::gradBlock, &avx2::runBlockWidened, ""};
#else
    if (want == "avx512" || want == "avx2")
      k.error = "ATTNC_FUSED_ISA=" + want + ": this build is not for x86-64 and has the portable kernels only";
#endif
    if (!want.empty() && want != "avx512" && want != "avx2" && want != "portable")
      k.error = "ATTNC_FUSED_ISA='" + want + "': expected avx512, avx2 or portable (or unset: the best this CPU has)";
    return k;
  }();
  return chosen;
}

RunBlock blockKernel() { return kernels().block; }
RunBlockOf<uint16_t> blockKernelBf16() { return kernels().bf16; }
GradBlock gradKernel() { return kernels().grad; }
} // namespace

const char *fusedIsa() { return kernels().isa; }

ScoreRunner scoreRunner() {
#if ATTNC_FUSED_X86
  const std::string isa = kernels().isa;
  if (isa == "avx512")
    return &avx512::runScoreLanes;
  if (isa == "avx2")
    return &avx2::runScoreLanes;
#endif
  return &generic::runScoreLanes;
}
const std::string &fusedIsaError() { return kernels().error; }

namespace {

/// Runs `body(worker scratch, item)` for items [0, count) on the calling
/// thread and up to `threads - 1` threads of the shared pool, handing out
/// items in order. The calling thread uses `s`; pool worker w uses
/// s.helpers[w - 1].
template <typename Body>
void forEachItem(int64_t count, int threads, FusedScratch &s, Body &&body) {
  threads = static_cast<int>(std::min<int64_t>(threads, count));
  if (threads <= 1) {
    for (int64_t item = 0; item < count; ++item)
      body(s, item);
    return;
  }
  if (s.helpers.size() < static_cast<size_t>(threads - 1))
    s.helpers.resize(static_cast<size_t>(threads - 1));
  support::parallelFor(count, threads, [&](int worker, int64_t item) {
    body(worker == 0 ? s : s.helpers[static_cast<size_t>(worker - 1)], item);
  });
}

/// Lists the cache lines of the Q and output rows of the block that starts
/// at block row t0 (of `rows`), and of the key and value rows keyFirst +
/// t keyStride for the same t, for the kernel to prefetch as it runs the
/// current block. A block's 32 rows span two 4 KiB pages (d = 64) and are
/// read a few lines per row at a time; the hardware prefetchers, which stop
/// at page boundaries, left every block starting on cache misses (a block of
/// one tile ran 1.4x slower). Key rows of the same indices are a guess that
/// holds for causal bands and triangles (a block's new keys).
template <typename T>
void fetchAhead(FusedScratch &ws, const TileArgsOf<T> &a, int64_t t0, int64_t rows, int64_t keyFirst,
                int64_t keyStride) {
  constexpr int64_t kLine = 64 / sizeof(T);
  const int64_t count = std::max<int64_t>(0, std::min(rows, t0 + a.tileRows) - t0);
  const int64_t lines = (a.d + kLine - 1) / kLine, outLines = (a.d + 15) / 16;
  ws.ahead.resize(static_cast<size_t>((3 * lines + outLines) * count));
  ws.aheadNext = 0;
  const void **out = ws.ahead.data();
  for (int64_t t = t0; t < t0 + count; ++t) {
    // (In a class order, a row's own position is the guess for a key.)
    const int64_t at = a.query(t) * a.d, key = (a.rowMap ? a.rowMap[t] : keyFirst + t * keyStride) * a.d;
    for (int64_t x = 0; x < a.d; x += 16) {
      const bool inputLine = x % kLine == 0; // (bf16 rows have half the lines)
      if (inputLine)
        *out++ = a.q + at + x;
      *out++ = a.acc + at + x;
      if (inputLine) {
        *out++ = a.k + key + x;
        *out++ = a.v + key + x;
      }
    }
  }
}

/// Copies rows first, first + stride, ... (`count` of them, d elements each)
/// of `src` into consecutive rows of `dst`, prefetching a few rows ahead:
/// every row lies on its own page when the stride is large.
template <typename T>
void gatherRows(const T *src, int64_t first, int64_t stride, int64_t count, int64_t d, T *dst) {
  constexpr int64_t kAhead = 8, kLine = 64 / sizeof(T);
  for (int64_t u = 0; u < count; ++u) {
    if (u + kAhead < count)
      for (int64_t x = 0; x < d; x += kLine)
        __builtin_prefetch(src + (first + (u + kAhead) * stride) * d + x, 0, 3);
    std::memcpy(dst + u * d, src + (first + u * stride) * d, static_cast<size_t>(d) * sizeof(T));
  }
}

/// dst rows first, first + stride, ... (`count` of them, d floats each) +=
/// the consecutive rows of `src` (=, where `fresh` is not null and the
/// row's byte in it nonzero: see GradArgs::dqFresh), prefetching ahead as
/// gatherRows does.
void addRowsBack(float *dst, int64_t first, int64_t stride, int64_t count, int64_t d, const float *src,
                 const uint8_t *fresh) {
  constexpr int64_t kAhead = 8, kLine = 16;
  for (int64_t u = 0; u < count; ++u) {
    const int64_t i = first + u * stride;
    if (u + kAhead < count)
      for (int64_t x = 0; x < d; x += kLine)
        __builtin_prefetch(dst + (i + kAhead * stride) * d + x, 1, 3);
    float *row = dst + i * d;
    const float *from = src + u * d;
    if (fresh && fresh[i])
      std::memcpy(row, from, static_cast<size_t>(d) * sizeof(float));
    else
      for (int64_t x = 0; x < d; ++x)
        row[x] += from[x];
  }
}

/// The keys of blocks `parts` (of the same rows, keys ascending, no pair in
/// two of them) as one block: keys ascending, a key's masks OR-ed.
void mergeBlocks(const std::vector<plan::BlockTiles> &parts, plan::BlockTiles &out) {
  out.firstRow = parts[0].firstRow;
  out.rows = parts[0].rows;
  out.allRows = parts[0].allRows;
  out.keys.clear();
  out.masks.clear();
  for (const plan::BlockTiles &part : parts)
    ATTNC_CHECK(part.firstRow == out.firstRow, "the backward's row-tiles pieces do not share their row blocks");
  std::vector<size_t> at(parts.size(), 0);
  for (;;) {
    int32_t key = std::numeric_limits<int32_t>::max();
    for (size_t i = 0; i < parts.size(); ++i)
      if (at[i] < parts[i].keys.size())
        key = std::min(key, parts[i].keys[at[i]]);
    if (key == std::numeric_limits<int32_t>::max())
      return;
    uint64_t mask = 0;
    for (size_t i = 0; i < parts.size(); ++i)
      if (at[i] < parts[i].keys.size() && parts[i].keys[at[i]] == key)
        mask |= parts[i].masks[at[i]++];
    out.keys.push_back(key);
    out.masks.push_back(mask);
  }
}

/// Marks rows first, first + stride, ... (`count` of them) written.
void markWritten(uint8_t *fresh, int64_t first, int64_t stride, int64_t count) {
  if (fresh)
    for (int64_t u = 0; u < count; ++u)
      fresh[first + u * stride] = 0;
}

/// Zeroes the rows of `array` ([n, d]) whose byte in `fresh` is nonzero.
void clearFresh(float *array, const uint8_t *fresh, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i)
    if (fresh[i])
      std::fill(array + i * d, array + (i + 1) * d, 0.0f);
}

/// delta[i] = sum over x of dO[i, x] O[i, x] for rows [0, n): 16 partial sums
/// a row, in lanes the compiler can vectorize, added in a fixed order.
void rowDots(const float *dO, const float *o, int64_t n, int64_t d, float *delta) {
  constexpr int kLanes = 16;
  const int64_t whole = d - d % kLanes;
  for (int64_t i = 0; i < n; ++i) {
    const float *a = dO + i * d, *b = o + i * d;
    float part[kLanes] = {};
    for (int64_t x = 0; x < whole; x += kLanes)
      for (int l = 0; l < kLanes; ++l)
        part[l] += a[x + l] * b[x + l];
    for (int64_t x = whole; x < d; ++x)
      part[x - whole] += a[x] * b[x];
    float sum = 0.0f;
    for (int l = 0; l < kLanes; ++l)
      sum += part[l];
    delta[i] = sum;
  }
}

} // namespace

namespace {

/// A residue class's copies of its keys and values, in T.
support::AlignedVector<float> &classKeys(FusedScratch &s, float) { return s.classK; }
support::AlignedVector<float> &classValues(FusedScratch &s, float) { return s.classV; }
support::AlignedVector<uint16_t> &classKeys(FusedScratch &s, uint16_t) { return s.classKBf16; }
support::AlignedVector<uint16_t> &classValues(FusedScratch &s, uint16_t) { return s.classVBf16; }

/// runFusedHead's order of blocks and classes, for f32 (T = float) or bf16
/// (T = uint16_t) inputs and the block kernel of that type.
template <typename T>
void runHead(const plan::Plan &plan, size_t headIndex, bool dense, const plan::HeadShapes *cached, int64_t n,
             int64_t d, const T *q, const T *k, const T *v, float *o, float scale, FusedScratch &s, int threads,
             RunBlockOf<T> kernel, int64_t skipRows, int64_t endRows, const ScoreRun *score,
             const PassOrder &pass) {
  const plan::HeadPlan &head = plan.heads[headIndex];
  std::vector<size_t> relayouts; // the residue-relayout pieces (the dense baseline has none)
  if (!dense)
    for (size_t p = 0; p < head.pieces.size(); ++p)
      if (head.pieces[p].strategy == plan::Strategy::ResidueRelayout)
        relayouts.push_back(p);
  ATTNC_CHECK(!pass.order || relayouts.empty(), "a residue relayout runs in raster order only");
  // The output slice is the accumulator: rows are started by the first pass
  // over them and normalised, while in cache, by the last. Blocks of one
  // pass (and residue classes) own disjoint rows, so several threads share
  // the state arrays.
  s.rowMax.resize(static_cast<size_t>(n));
  s.rowSum.resize(static_cast<size_t>(n));
  TileArgsOf<T> args{q, k, v, d, scale, plan.options.tileRows, plan.options.tileCols, 0, 1,
                     s.rowMax.data(), s.rowSum.data(), o};
  args.everyPair = dense;
  args.score = score && score->code ? score : nullptr;
  args.rowMap = pass.order;
  // Block b of piece p, class c: from the cache, or generated now; a class's
  // keys as rows of its class-major copy.
  auto blockOf = [&](const plan::BlockSource &src, size_t p, size_t c, int64_t b, FusedScratch &ws,
                     plan::BlockTiles &out, bool classLocal = false) {
    if (cached) {
      out.expand(cached->pieces[p][c][static_cast<size_t>(b)], classLocal);
    } else {
      src.buildTiles(b, out, ws.shape, classLocal);
    }
    if (pass.order && !(cached && pass.cachedKeysMapped)) // (the keys of a class order, as positions)
      for (int32_t &key : out.keys)
        key = pass.order[key];
  };
  // The row-tiles pieces (or the dense baseline's one).
  std::vector<plan::BlockSource> sources;
  std::vector<size_t> pieceOf;
  if (dense) {
    sources.push_back(plan::BlockSource::dense(plan, head, n));
    pieceOf.push_back(0);
  } else {
    for (size_t p = 0; p < head.pieces.size(); ++p)
      if (head.pieces[p].strategy == plan::Strategy::RowTiles) {
        sources.emplace_back(plan, head.pieces[p], n, 0, !cached); // (references only to generate)
        pieceOf.push_back(p);
      }
  }
  if (sources.empty() && pass.first) {
    std::fill(s.rowMax.begin(), s.rowMax.end(), -std::numeric_limits<float>::infinity());
    std::fill(s.rowSum.begin(), s.rowSum.end(), 0.0f);
    std::memset(o, 0, static_cast<size_t>(n * d) * sizeof(float));
  }
  // The row blocks of every row-tiles piece, all pieces of a block at once:
  // its state is loaded and stored once. When one thread runs them in order,
  // a block that has at least half of all keys in a piece (global rows) runs
  // only its keys up to its own rows; the rest wait and run kStretch blocks
  // at a time, right after the blocks whose own keys they are, while those
  // keys and values are in cache. (Run at once, such a block streams all of
  // K and V for its few rows: ~10% of longformer's time at n = 16384.)
  auto rowBlocks = [&](int64_t numBlocks, bool finalize) {
    constexpr int64_t kStretch = 16, kMaxWaiting = 4;
    TileArgsOf<T> blockArgs = args;
    blockArgs.init = pass.first;
    blockArgs.finalize = finalize;
    const int64_t sharing = std::min<int64_t>(threads, numBlocks);
    const int64_t R = args.tileRows;
    std::vector<Waiting> &waiting = s.waiting;
    waiting.clear();
    // The waiting keys below `upTo` (all of them when `last`).
    auto runWaiting = [&](int64_t upTo, bool last) {
      TileArgsOf<T> laterArgs = args;
      laterArgs.finalize = last && finalize;
      for (Waiting &w : waiting) {
        bool any = false;
        s.built.clear();
        for (size_t i = 0; i < w.pieces.size(); ++i) {
          const std::vector<int32_t> &keys = w.pieces[i].keys;
          const size_t from = w.next[i];
          const size_t to = last ? keys.size()
                                 : static_cast<size_t>(std::lower_bound(keys.begin() + static_cast<std::ptrdiff_t>(from),
                                                                        keys.end(), upTo) - keys.begin());
          plan::BlockTiles &part = w.parts[i];
          part.assignRange(w.pieces[i], from, to);
          w.next[i] = to;
          any = any || to > from;
          s.built.push_back(&part);
        }
        if (any || last) // the last call normalises the rows
          kernel(s.built.data(), static_cast<int>(s.built.size()), laterArgs, s);
      }
      if (last)
        waiting.clear();
    };
    // Blocks wholly before skipRows or from endRows on hold only padding
    // rows: not run.
    const int64_t lastBlock = std::min(numBlocks, (std::min(endRows, n) + R - 1) / R);
    const int64_t firstBlock = std::min(lastBlock, skipRows / R);
    forEachItem(lastBlock - firstBlock, threads, s, [&](FusedScratch &ws, int64_t item) {
      const int64_t b = firstBlock + item;
      ws.blocks.resize(sources.size());
      ws.built.resize(sources.size());
      for (size_t p = 0; p < sources.size(); ++p) {
        blockOf(sources[p], pieceOf[p], 0, b, ws, ws.blocks[p]);
        ws.built[p] = &ws.blocks[p];
      }
      // A block without keys that neither starts nor finishes its rows has nothing to do (a fallback's
      // rows between two passes: most of its blocks), and prefetches nothing for the next.
      if (!blockArgs.init && !blockArgs.finalize &&
          std::all_of(ws.blocks.begin(), ws.blocks.end(), [](const plan::BlockTiles &t) { return t.keys.empty(); }))
        return;
      TileArgsOf<T> thisArgs = blockArgs;
      if (sharing == 1 && !dense && !pass.order && static_cast<int64_t>(waiting.size()) < kMaxWaiting) {
        Waiting *w = nullptr;
        const int32_t bound = static_cast<int32_t>(std::min<int64_t>(n, (b + 1) * R));
        for (plan::BlockTiles &t : ws.blocks) {
          auto cut = std::lower_bound(t.keys.begin(), t.keys.end(), bound);
          if (2 * static_cast<int64_t>(t.keys.size()) < n || cut == t.keys.end())
            continue;
          if (!w) {
            w = &waiting.emplace_back();
            thisArgs.finalize = false; // the waiting keys' last run does
          }
          const size_t at = static_cast<size_t>(cut - t.keys.begin());
          w->pieces.emplace_back().assignRange(t, at, t.keys.size());
          t.keys.resize(at);
          t.masks.resize(at);
          w->next.push_back(0);
          w->parts.emplace_back();
        }
      }
      // The next block this thread (likely) takes; threads take turns.
      fetchAhead(ws, blockArgs, (b + sharing) * blockArgs.tileRows, n, 0, 1);
      kernel(ws.built.data(), static_cast<int>(ws.built.size()), thisArgs, ws);
      if (!waiting.empty() && ((b + 1) % kStretch == 0 || b + 1 == lastBlock))
        runWaiting((b + 1) * R, b + 1 == lastBlock);
    });
  };
  // Every residue class of relayout piece p, each running all its blocks in
  // turn: class c's rows are the queries c, c + m, ... (read and accumulated
  // in place); its keys are one key class, copied into consecutive rows as
  // the blocks reach them (the next block's are prefetched). In place, a
  // class's key rows are m d floats apart: at m d = 8192 (strided, d = 64)
  // every one maps to the same few L1 sets, and a tile's keys and values did
  // not stay in L1 from one row group to the next. (Copying the query and
  // output rows as well cost more than it saved: strided 1 thread 5.5 ->
  // 6.0 ms.)
  auto classBlocks = [&](size_t p, bool finalize) {
    const plan::Piece &piece = head.pieces[p];
    const int64_t classes = plan::numClasses(piece, n);
    const int64_t sharing = std::min<int64_t>(threads, classes);
    forEachItem(classes, threads, s, [&](FusedScratch &ws, int64_t c) {
      plan::BlockSource src(plan, piece, n, c, !cached);
      const int64_t m = src.rowStride(), keyClass = src.keyClass();
      support::AlignedVector<T> &classK = classKeys(ws, T{}), &classV = classValues(ws, T{});
      classK.resize(static_cast<size_t>(src.keyRows() * d));
      classV.resize(static_cast<size_t>(src.keyRows() * d));
      int64_t copied = 0; // key rows [0, copied) are in classK and classV
      TileArgsOf<T> classArgs = args;
      classArgs.k = classK.data();
      classArgs.v = classV.data();
      classArgs.rowBase = src.rowBase();
      classArgs.rowStride = m;
      classArgs.keyBase = keyClass;
      classArgs.keyStride = m;
      classArgs.finalize = finalize;
      ws.blocks.resize(1);
      const plan::BlockTiles *one = &ws.blocks[0];
      const int64_t end = src.numBlocks(), classRows = plan::classRows(piece, n, c);
      for (int64_t b = 0; b < end; ++b) {
        // (A block whose rows all lie before skipRows, or from endRows on,
        // holds only padding.)
        if (src.rowBase() + (std::min(classRows, (b + 1) * args.tileRows) - 1) * m < skipRows ||
            src.rowBase() + b * args.tileRows * m >= endRows)
          continue;
        blockOf(src, p, static_cast<size_t>(c), b, ws, ws.blocks[0], true);
        const int64_t needed = ws.blocks[0].keys.empty() ? 0 : ws.blocks[0].keys.back() + 1;
        if (needed > copied) {
          gatherRows(k, keyClass + copied * m, m, needed - copied, d, classK.data() + copied * d);
          gatherRows(v, keyClass + copied * m, m, needed - copied, d, classV.data() + copied * d);
          copied = needed;
        }
        // Next: this class's next block, else (likely) the first of the
        // class this thread takes next; rows in place.
        const bool sameClass = b + 1 < end;
        const int64_t nextClass = sameClass ? c : c + sharing;
        if (nextClass < classes) {
          TileArgsOf<T> nextArgs = args;
          nextArgs.rowBase = nextClass;
          nextArgs.rowStride = m;
          const int64_t nextKeyClass = plan::keyClass(piece, nextClass);
          fetchAhead(ws, nextArgs, (sameClass ? b + 1 : 0) * args.tileRows,
                     plan::classRows(piece, n, nextClass), nextKeyClass, m);
        }
        kernel(&one, 1, classArgs, ws);
      }
    });
  };
  const int64_t numBlocks = sources.empty() ? 0 : sources.front().numBlocks();
  // (Alternating row blocks with the class blocks over the same rows kept
  // the output rows in cache but read every class's keys again per round:
  // 17% slower for strided at n = 65,536.)
  if (numBlocks > 0)
    rowBlocks(numBlocks, relayouts.empty() && pass.last);
  for (size_t r = 0; r < relayouts.size(); ++r)
    classBlocks(relayouts[r], r + 1 == relayouts.size() && pass.last);
}

} // namespace

void runFusedHead(const plan::Plan &plan, size_t headIndex, bool dense, const plan::HeadShapes *cached, int64_t n,
                  int64_t d, const float *q, const float *k, const float *v, float *o, float scale, FusedScratch &s,
                  int threads, int64_t skipRows, int64_t endRows, const ScoreRun *score, const PassOrder &pass) {
  runHead(plan, headIndex, dense, cached, n, d, q, k, v, o, scale, s, threads, blockKernel(), skipRows, endRows,
          score, pass);
}

bool fusedBf16Available(int64_t d) { return d >= 1 && blockKernelBf16() != nullptr; }

bool fusedBf16DotProducts() {
#if ATTNC_FUSED_X86
  return blockKernelBf16() == &avx512bf16::runBlockBf16;
#else
  return false;
#endif
}

void runFusedHeadBf16(const plan::Plan &plan, size_t headIndex, bool dense, const plan::HeadShapes *cached,
                      int64_t n, int64_t d, const uint16_t *q, const uint16_t *k, const uint16_t *v, float *o,
                      float scale, FusedScratch &s, int threads, int64_t skipRows, int64_t endRows) {
  const RunBlockOf<uint16_t> kernel = blockKernelBf16();
  ATTNC_CHECK(kernel && d >= 1, "runFusedHeadBf16 called where fusedBf16Available(" + std::to_string(d) + ") is false");
  runHead(plan, headIndex, dense, cached, n, d, q, k, v, o, scale, s, threads, kernel, skipRows, endRows,
          static_cast<const ScoreRun *>(nullptr), PassOrder{});
}

void runFusedBackward(const plan::Plan &plan, size_t headIndex, bool dense, const plan::HeadShapes *cached,
                      int64_t n, int64_t d, const float *q, const float *k, const float *v, const float *o,
                      const float *dO, const float *lse, float *dq, float *dk, float *dv, float scale,
                      FusedGradScratch &s, int threads, int64_t skipRows, int64_t endRows, const ScoreRun *score,
                      double *inputGrad, const PassOrder &pass) {
  const plan::HeadPlan &head = plan.heads[headIndex];
  const size_t nd = static_cast<size_t>(n * d);
  // (A later pass of the same call reuses the rows' delta; a pass after a
  // row-by-row group finds it cleared: FusedBackend.)
  if (pass.first || s.delta.size() != static_cast<size_t>(n)) {
    s.delta.resize(static_cast<size_t>(n));
    rowDots(dO, o, n, d, s.delta.data());
  }
  if (pass.first) {
    s.dqFresh.assign(static_cast<size_t>(n), 1);
    s.kvFresh.assign(static_cast<size_t>(n), 1);
  }
  ATTNC_CHECK(s.dqFresh.size() == static_cast<size_t>(n) && s.kvFresh.size() == static_cast<size_t>(n),
              "a later backward pass without the first one's flags");
  threads = std::max(1, threads);
  if (s.workers.size() < static_cast<size_t>(threads))
    s.workers.resize(static_cast<size_t>(threads));
  const GradBlock kernel = gradKernel();
  GradArgs args{q, k, v, dO, lse, s.delta.data(), dq, dk, dv, d, scale, plan.options.tileRows, s.dqFresh.data(),
                s.kvFresh.data(), dense};
  args.rowMap = pass.order;
  if (score && score->code) {
    args.score = score;
    for (int w = 0; w < threads; ++w) // (each worker sums the float inputs' gradients apart)
      s.workers[static_cast<size_t>(w)].inputGrad.assign(static_cast<size_t>(score->gradSize), 0.0);
  }
  // Worker 0 sums into dk and dv; the others into their own partial sums
  // (cleared: no fresh rows).
  auto argsFor = [&](int worker) {
    GradArgs wa = args;
    if (worker > 0) {
      wa.kvFresh = nullptr;
      GradScratch &ws = s.workers[static_cast<size_t>(worker)];
      if (ws.dk.size() != nd) {
        ws.dk.assign(nd, 0.0f);
        ws.dv.assign(nd, 0.0f);
      }
      wa.dk = ws.dk.data();
      wa.dv = ws.dv.data();
    }
    return wa;
  };
  auto pieceBlocks = [&](size_t p, size_t c) -> const std::vector<plan::BlockShape> * {
    return cached ? &cached->pieces[p][c] : nullptr;
  };
  // Block b of one source (a row-tiles piece, the dense baseline, or one
  // residue class) into ws.tiles, from the cache or generated now.
  auto loadBlock = [&pass](const plan::BlockSource &src, const std::vector<plan::BlockShape> *blocks, int64_t b,
                           GradScratch &ws, bool classLocal) {
    if (blocks) {
      ws.tiles.expand((*blocks)[static_cast<size_t>(b)], classLocal);
    } else {
      src.buildTiles(b, ws.tiles, ws.shape, classLocal);
    }
    if (pass.order && !(blocks && pass.cachedKeysMapped)) // (the keys of a class order, as positions)
      for (int32_t &key : ws.tiles.keys)
        key = pass.order[key];
  };
  // Row block b of the row-tiles pieces `pieces` (or of the dense
  // baseline: pieces empty): its rows are queries, in place. The pieces'
  // keys run as one block, merged (ascending, each key's rows OR-ed: the
  // pieces share no pair), as the forward runs a block's pieces together:
  // one Q^T, dO^T and pass over the rows' dQ, and full tiles where a piece
  // alone has a few keys (longformer's 4 global keys per block).
  auto runRowBlock = [&](const std::vector<plan::BlockSource> &sources, const std::vector<size_t> &pieces,
                         int worker, int64_t b) {
    GradScratch &ws = s.workers[static_cast<size_t>(worker)];
    if (sources.size() == 1) {
      loadBlock(sources[0], pieces.empty() ? pieceBlocks(0, 0) : pieceBlocks(pieces[0], 0), b, ws, false);
    } else {
      ws.parts.resize(sources.size());
      for (size_t i = 0; i < sources.size(); ++i) {
        loadBlock(sources[i], pieceBlocks(pieces[i], 0), b, ws, false);
        std::swap(ws.parts[i], ws.tiles);
      }
      mergeBlocks(ws.parts, ws.tiles);
    }
    // The lines of the next block this worker (likely) takes, its rows of
    // Q, dO, K and V, for the kernel to prefetch as it runs this one (as
    // the forward does; fixed, n = 4096: 3% of the backward).
    const int64_t R = plan.options.tileRows, next = (b + threads) * R;
    const int64_t rows = std::max<int64_t>(0, std::min(n, next + R) - next), lines = (d + 15) / 16;
    ws.ahead.resize(static_cast<size_t>(4 * rows * lines));
    const void **line = ws.ahead.data();
    for (const float *array : {q, dO, k, v})
      for (int64_t t = next; t < next + rows; ++t)
        for (int64_t x = 0; x < d; x += 16)
          *line++ = array + (pass.order ? pass.order[t] : t) * d + x;
    kernel(ws.tiles, argsFor(worker), ws);
    ws.ahead.clear();
  };
  std::vector<plan::BlockSource> rowSources;
  std::vector<size_t> rowPieces;
  if (dense) {
    rowSources.push_back(plan::BlockSource::dense(plan, head, n));
  } else {
    for (size_t p = 0; p < head.pieces.size(); ++p)
      if (head.pieces[p].strategy == plan::Strategy::RowTiles) {
        rowSources.emplace_back(plan, head.pieces[p], n, 0, !cached);
        rowPieces.push_back(p);
      }
  }
  if (!rowSources.empty()) {
    // Blocks wholly before skipRows hold only padding rows (dO = 0: they
    // add nothing to dK or dV), so they are not run.
    const int64_t numBlocks = rowSources.front().numBlocks(), R = plan.options.tileRows;
    const int64_t lastBlock = std::min(numBlocks, (std::min(endRows, n) + R - 1) / R);
    const int64_t firstBlock = std::min(lastBlock, skipRows / R);
    support::parallelFor(lastBlock - firstBlock, threads,
                         [&](int w, int64_t b) { runRowBlock(rowSources, rowPieces, w, firstBlock + b); });
  }
  if (!dense) {
    for (size_t p = 0; p < head.pieces.size(); ++p) {
      const plan::Piece &piece = head.pieces[p];
      if (piece.strategy == plan::Strategy::ResidueRelayout) {
        ATTNC_CHECK(!pass.order, "a residue relayout runs in raster order only");
        // Residue classes own disjoint rows and disjoint key classes: a
        // class per item. Its rows and keys are m rows apart in place (at
        // m d = 8192 floats every one maps to the same few L1 sets, as in
        // the forward): they are copied into consecutive rows, run there,
        // and the class's gradients added back.
        support::parallelFor(plan::numClasses(piece, n), threads, [&](int w, int64_t c) {
          plan::BlockSource src(plan, piece, n, c, !cached);
          GradScratch &ws = s.workers[static_cast<size_t>(w)];
          const int64_t m = src.rowStride(), rows = plan::classRows(piece, n, c), keys = src.keyRows(),
                        keyClass = src.keyClass();
          const size_t rowFloats = static_cast<size_t>(rows * d), keyFloats = static_cast<size_t>(keys * d);
          for (auto *buffer : {&ws.cq, &ws.cdo})
            buffer->resize(rowFloats);
          for (auto *buffer : {&ws.ck, &ws.cv})
            buffer->resize(keyFloats);
          ws.cdq.assign(rowFloats, 0.0f);
          ws.cdk.assign(keyFloats, 0.0f);
          ws.cdv.assign(keyFloats, 0.0f);
          ws.clse.resize(static_cast<size_t>(rows));
          ws.cdelta.resize(static_cast<size_t>(rows));
          gatherRows(q, c, m, rows, d, ws.cq.data());
          gatherRows(dO, c, m, rows, d, ws.cdo.data());
          gatherRows(k, keyClass, m, keys, d, ws.ck.data());
          gatherRows(v, keyClass, m, keys, d, ws.cv.data());
          for (int64_t t = 0; t < rows; ++t) {
            ws.clse[static_cast<size_t>(t)] = lse[c + t * m];
            ws.cdelta[static_cast<size_t>(t)] = s.delta[static_cast<size_t>(c + t * m)];
          }
          GradArgs classArgs{ws.cq.data(), ws.ck.data(), ws.cv.data(), ws.cdo.data(), ws.clse.data(),
                             ws.cdelta.data(), ws.cdq.data(), ws.cdk.data(), ws.cdv.data(), d, scale,
                             plan.options.tileRows};
          classArgs.score = args.score; // (the class's rows c + t m, keys keyClass + t m)
          classArgs.rowBase = c;
          classArgs.rowStride = m;
          classArgs.keyBase = keyClass;
          classArgs.keyStride = m;
          const std::vector<plan::BlockShape> *blocks = pieceBlocks(p, static_cast<size_t>(c));
          for (int64_t b = 0; b < src.numBlocks(); ++b) {
            if (c + (std::min(rows, (b + 1) * plan.options.tileRows) - 1) * m < skipRows ||
                c + b * plan.options.tileRows * m >= endRows)
              continue; // (padding rows only)
            loadBlock(src, blocks, b, ws, true); // rows and keys of the class's copies
            kernel(ws.tiles, classArgs, ws);
          }
          const GradArgs out = argsFor(w);
          addRowsBack(dq, c, m, rows, d, ws.cdq.data(), out.dqFresh);
          markWritten(out.dqFresh, c, m, rows);
          addRowsBack(out.dk, keyClass, m, keys, d, ws.cdk.data(), out.kvFresh);
          addRowsBack(out.dv, keyClass, m, keys, d, ws.cdv.data(), out.kvFresh);
          markWritten(out.kvFresh, keyClass, m, keys);
        });
      }
    }
  }
  if (args.score && inputGrad)
    for (int w = 0; w < threads; ++w)
      for (int64_t e = 0; e < score->gradSize; ++e)
        inputGrad[e] += s.workers[static_cast<size_t>(w)].inputGrad[static_cast<size_t>(e)];
  for (int w = 1; w < threads; ++w) {
    GradScratch &ws = s.workers[static_cast<size_t>(w)];
    if (ws.dk.size() != nd) // (this worker took no block: it has no sums of this shape)
      continue;
    // A key row nothing has been written to yet takes the helper's sums
    // as they are (a later pass adds to them).
    for (int64_t key = 0; key < n; ++key) {
      const size_t at = static_cast<size_t>(key * d);
      if (s.kvFresh[static_cast<size_t>(key)]) {
        std::copy_n(ws.dk.data() + at, d, dk + at);
        std::copy_n(ws.dv.data() + at, d, dv + at);
        s.kvFresh[static_cast<size_t>(key)] = 0;
      } else {
        for (int64_t x = 0; x < d; ++x) {
          dk[at + x] += ws.dk[at + x];
          dv[at + x] += ws.dv[at + x];
        }
      }
    }
    std::fill(ws.dk.begin(), ws.dk.end(), 0.0f);
    std::fill(ws.dv.begin(), ws.dv.end(), 0.0f);
  }
  // Rows without keys and keys nobody attends were never written.
  if (pass.last) {
    clearFresh(dq, s.dqFresh.data(), n, d);
    clearFresh(dk, s.kvFresh.data(), n, d);
    clearFresh(dv, s.kvFresh.data(), n, d);
  }
}

} // namespace attnc::rt
