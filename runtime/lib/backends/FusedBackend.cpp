//===- FusedBackend.cpp - The fused tile kernels and the dense baseline ---===//
//
// Backends "fused" and "dense": the plan's row blocks run by the tile kernels
// of FusedExecutor.cpp (the dense baseline is the same code on blocks that
// skip no key). Per n, the blocks of every head are kept when they fit
// fusedCacheBytes(); otherwise the executor generates them as it runs.
//
//===----------------------------------------------------------------------===//
#include "Backend.h"

#include "../FusedExecutor.h"
#include "../RowsExecutor.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace attnc::rt {

namespace {

/// Per n and kernel, the fused row blocks kept: 64 MiB (fixed, l=128, c=8,
/// needs ~35 MB at n = 131,072), or $ATTNC_FUSED_CACHE_MB.
size_t fusedCacheBytes() {
  static const size_t bytes = [] {
    const char *env = std::getenv("ATTNC_FUSED_CACHE_MB");
    return (env && *env ? static_cast<size_t>(std::strtoull(env, nullptr, 10)) : size_t{64}) << 20;
  }();
  return bytes;
}

struct FusedState : LengthState {
  const plan::Plan *plan = nullptr;
  std::vector<plan::HeadShapes> blocks; ///< empty: generated as the kernels run
  size_t bytes() const override {
    size_t total = 0;
    for (const plan::HeadShapes &head : blocks)
      for (const auto &piece : head.pieces)
        for (const auto &cls : piece)
          for (const plan::BlockShape &block : cls)
            total += block.bytes();
    return total;
  }
};

struct FusedWorker : Scratch {
  FusedScratch fused;
  FusedGradScratch grad;
  RowsGradScratch rowsGrad;
};

class FusedBackend final : public Backend {
public:
  FusedBackend(const LoadedKernel &kernel, bool dense) : plans_(kernelPlans(kernel)), dense_(dense) {
    if (!fusedIsaError().empty())
      throw RunError{ATTNC_ERROR_UNSUPPORTED, fusedIsaError()};
    for (const ir::PatternIR::Head &head : kernel.ir.heads)
      sets_.push_back(head.set);
  }

  const void *variant(int64_t d, Pass pass) const override { return &planFor(d, pass); }

  std::shared_ptr<const LengthState> prepare(int64_t n, int64_t d, Pass pass, int threads) const override {
    checkKeysFit32Bits(n);
    auto state = std::make_shared<FusedState>();
    state->plan = &planFor(d, pass);
    plan::buildShapes(*state->plan, n, dense_, fusedCacheBytes(), state->blocks, threads);
    return state;
  }

  const char *name() const override { return dense_ ? "dense" : "fused"; }
  bool writesLse() const override { return true; }
  bool hasBackward() const override { return true; }
  /// The fused kernels on bf16 (AVX512_BF16's dot products, or the f32
  /// kernels widening the rows as they load); the dense baseline
  /// stays the f32 kernel it is measured as. (Rows run on their own take
  /// bf16 on any CPU: Slice::firstRow > 0 reads them as they are.)
  bool takesBf16(int64_t d) const override { return !dense_ && fusedBf16Available(d); }
  bool takesBf16Rows() const override { return !dense_; }
  /// A few queries at the end of the keys (a decoding step, or its
  /// backward pass) run row by row over their own keys: the row blocks of
  /// all n positions would compute n / rows times the work, and be built
  /// anew for every length.
  bool takesRowRange(int64_t rows, int64_t n) const override { return !dense_ && rows * kRowRangeRatio <= n; }

  std::unique_ptr<Scratch> newScratch() const override { return std::make_unique<FusedWorker>(); }

  void runSlice(const LengthState &state, const Slice &s, Scratch &scratch, int threads) const override {
    if (s.firstRow > 0) {
      const ir::SetRef &rows = sets_[static_cast<size_t>(s.set)];
      if (s.qb)
        runRows(rows, s.n, s.firstRow, s.d, s.qb, s.kb, s.vb, s.o, s.lse, s.scale, threads);
      else
        runRows(rows, s.n, s.firstRow, s.d, s.q, s.k, s.v, s.o, s.lse, s.scale, threads);
      return;
    }
    const auto &fused = static_cast<const FusedState &>(state);
    const size_t set = static_cast<size_t>(s.set);
    if (s.qb) {
      runFusedHeadBf16(*fused.plan, set, dense_, fused.blocks.empty() ? nullptr : &fused.blocks[set], s.n, s.d,
                       s.qb, s.kb, s.vb, s.o, s.scale, static_cast<FusedWorker &>(scratch).fused, threads, s.skipRows, s.endRows);
    } else {
      runFusedHead(*fused.plan, set, dense_, fused.blocks.empty() ? nullptr : &fused.blocks[set], s.n, s.d,
                   s.q, s.k, s.v, s.o, s.scale, static_cast<FusedWorker &>(scratch).fused, threads, s.skipRows, s.endRows);
    }
    if (s.lse) {
      // The online softmax leaves each row's max and sum of exp(score - max).
      const FusedScratch &f = static_cast<FusedWorker &>(scratch).fused;
      for (int64_t i = s.skipRows; i < std::min(s.n, s.endRows); ++i) { // (the padding rows' are dropped)
        const float sum = f.rowSum[static_cast<size_t>(i)];
        s.lse[i] = sum == 0 ? -std::numeric_limits<float>::infinity() // no key (NaN stays NaN)
                            : f.rowMax[static_cast<size_t>(i)] + std::log(sum);
      }
    }
  }

  void runBackwardSlice(const LengthState &state, const GradSlice &s, Scratch &scratch, int threads) const override {
    if (s.firstRow > 0) {
      const ir::SetRef &rows = sets_[static_cast<size_t>(s.set)];
      RowsGradScratch &rowsGrad = static_cast<FusedWorker &>(scratch).rowsGrad;
      if (s.kb)
        runRowsBackward(rows, s.n, s.firstRow, s.d, s.q, s.kb, s.vb, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale,
                        rowsGrad, threads);
      else
        runRowsBackward(rows, s.n, s.firstRow, s.d, s.q, s.k, s.v, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale,
                        rowsGrad, threads);
      return;
    }
    const auto &fused = static_cast<const FusedState &>(state);
    const size_t set = static_cast<size_t>(s.set);
    runFusedBackward(*fused.plan, set, dense_, fused.blocks.empty() ? nullptr : &fused.blocks[set], s.n, s.d, s.q,
                     s.k, s.v, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale, static_cast<FusedWorker &>(scratch).grad,
                     threads, s.skipRows, s.endRows);
  }

private:
  /// The dense baseline always runs the kernel's own tiles, in both passes.
  const plan::Plan &planFor(int64_t d, Pass pass) const {
    return dense_ ? plans_.base.forward : plans_.forDim(d).of(pass);
  }

  /// Queries at most 1 / kRowRangeRatio of the keys run row by row; more run
  /// on the row blocks, whose padding before them is skipped (n = 16384:
  /// local and strided row by row were faster up to 256 queries, slower from
  /// 1024 on, 4-9x at 4096; docs/runtime.md).
  static constexpr int64_t kRowRangeRatio = 64;

  KernelPlans plans_;
  std::vector<ir::SetRef> sets_; ///< each distinct head set, for rows run on their own
  bool dense_;
};

} // namespace

std::unique_ptr<Backend> makeFusedBackend(const LoadedKernel &kernel) {
  return std::make_unique<FusedBackend>(kernel, false);
}

std::unique_ptr<Backend> makeDenseBackend(const LoadedKernel &kernel) {
  return std::make_unique<FusedBackend>(kernel, true);
}

} // namespace attnc::rt
