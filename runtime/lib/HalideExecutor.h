//===- HalideExecutor.h - Running the halide backend's compiled code ------===//
//
// The halide backend's kernel file carries Halide 14 code compiled ahead of
// time (compiler/include/attnc/compiler/HalideGen.h), its own Halide runtime
// included; this side needs only HalideRuntime.h's buffer struct and never
// links Halide. Per n, the row blocks become flat arrays the code reads: a
// block table, the gathered keys padded to whole chunks, and the row masks.
// A head's row-tiles pieces share one list per row block (their keys are
// disjoint); each relayout piece is one more list, every residue class's
// blocks concatenated. Each list writes its rows with their log-sum-exp,
// and the lists merge into O.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Plan.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnc::rt {

/// The entry points of a loaded halide kernel and its runtime's controls.
struct HalideCode {
  using Specialised = int (*)(void *, void *, void *, void *, void *, void *, int32_t, int32_t, float,
                              void *);
  using Generic = int (*)(void *, void *, void *, void *, void *, void *, int32_t, int32_t, float,
                          int32_t, void *);
  std::map<int64_t, Specialised> byDim;
  Generic generic = nullptr;
  int (*setNumThreadsFn)(int) = nullptr;
  void setNumThreads(int threads) const { setNumThreadsFn(threads); }
  /// Resolves the symbols in `library` (a dlopen handle); false and `error`
  /// when one is missing.
  bool load(void *library, std::string &error);
};

/// One list of row blocks at one n, as the Halide code reads them.
struct HalideBlocks {
  int32_t maxChunks = 0;
  std::vector<int32_t> table;  ///< per block: key offset, chunks, first query, query stride
  std::vector<int32_t> rows;   ///< per block: rows in use
  std::vector<int32_t> keys;   ///< every block's keys, padded with -1 to whole chunks
  std::vector<uint32_t> masks; ///< words per key: bit r of word r / 32 = row r has the key
  int64_t numBlocks() const { return static_cast<int64_t>(rows.size()); }
};

/// Every list of every distinct head set at one n: [set][list], built by
/// up to `threads` threads.
std::vector<std::vector<HalideBlocks>> buildHalideBlocks(const plan::Plan &plan, int64_t n, int threads);

/// Per-call scratch: each piece's rows (R x (d + 1) per block) and the
/// merged rows' log-sum-exp.
struct HalideScratch {
  std::vector<float> rows, lse;
};

/// o ([n, d], row-major) = attention over head set `set` of the plan.
/// Returns false with `error` when the Halide code reports one.
bool runHalideHead(const HalideCode &code, const plan::Plan &plan,
                   const std::vector<HalideBlocks> &pieces, int64_t n, int64_t d, const float *q,
                   const float *k, const float *v, float *o, float scale, HalideScratch &scratch,
                   std::string &error);

} // namespace attnc::rt
