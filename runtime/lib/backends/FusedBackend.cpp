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

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <optional>

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
  /// A grid pattern's tiled order at this n (plan::tiledLayout), which a
  /// call of all n rows runs in (its blocks in layoutBlocks); `blocks` are
  /// then generated as they run, for a call with padding rows.
  std::optional<plan::Layout> layout;
  std::vector<plan::HeadShapes> layoutBlocks;
  /// In tiles, layoutBlocks hold their keys as positions (buildShapes' keyOrder): a
  /// patch's keys in runs of its windows' width (NATTEN 13 x 13 forward 5% faster).
  /// Not the groups of equal keys: a block of two Swin windows would interleave
  /// their keys, and P V would run each window's rows over both.
  bool keysMapped() const { return layout && layout->tileRows > 0; }
  size_t bytes() const override {
    size_t total = 0;
    for (const auto *all : {&blocks, &layoutBlocks})
      for (const plan::HeadShapes &head : *all)
        for (const auto &piece : head.pieces)
          for (const auto &cls : piece)
            for (const plan::BlockShape &block : cls)
              total += block.bytes();
    return total;
  }
  /// The layout's order for a slice of rows [skipRows, endRows), or null
  /// (raster order): a layout runs whole slices only.
  const int32_t *orderFor(int64_t n, int64_t skipRows, int64_t endRows) const {
    return layout && skipRows == 0 && endRows >= n ? layout->order->order.data() : nullptr;
  }
};

/// A slice that reads data and has bf16 rows: Q, K and V widened to f32
/// (its groups run the f32 kernels), and the log-sum-exp when the call
/// asks for none. Per thread and kept across calls (these are n x d each:
/// allocating them at every call costs page faults), up to kKeptBytes.
struct DataBuffers {
  std::vector<float> wide[3], lse;
  static constexpr size_t kKeptBytes = size_t{256} << 20;
  size_t bytes() const {
    return (wide[0].capacity() + wide[1].capacity() + wide[2].capacity() + lse.capacity()) * sizeof(float);
  }
  /// Drops them past kKeptBytes (a very long sequence's), after a slice.
  void trim() {
    if (bytes() > kKeptBytes)
      *this = DataBuffers{};
  }
};
DataBuffers &dataBuffers() {
  thread_local DataBuffers buffers;
  return buffers;
}

struct FusedWorker : Scratch {
  FusedScratch fused;
  FusedGradScratch grad;
  RowsGradScratch rowsGrad;
};

/// One group of a data slice's pieces: those that run in one order (raster
/// when `classes` is null, else sorted by that input's classes), or row by
/// row over each row's own keys (`rows`: selected tokens, scattered keys
/// that no tile would gather few enough of).
struct DataGroup {
  std::shared_ptr<const InputArray> classes;
  bool rows = false;
  plan::Plan plan; ///< the pieces of the group as head set `set`'s (renumbered when classes)
  /// rows: the union of the group's (disjoint) pieces.
  ir::SetRef rowSet() const {
    std::vector<ir::SetRef> sets;
    for (const plan::Piece &p : plan.heads[set].pieces)
      sets.push_back(p.set);
    return ir::SetNode::unite(std::move(sets), {});
  }
  size_t set = 0;
};

/// Row log-sum-exp from the online softmax's state: -inf without a key.
void lseFromState(const FusedScratch &f, int64_t n, float *lse) {
  for (int64_t i = 0; i < n; ++i) {
    const float sum = f.rowSum[static_cast<size_t>(i)];
    lse[i] = sum == 0 ? -std::numeric_limits<float>::infinity() : f.rowMax[static_cast<size_t>(i)] + std::log(sum);
  }
}

class FusedBackend final : public Backend {
public:
  FusedBackend(const LoadedKernel &kernel, bool dense)
      : plans_(kernelPlans(kernel)), dense_(dense), readsData_(kernel.ir.readsData()), ir_(kernel.ir) {
    if (!fusedIsaError().empty())
      throw RunError{ATTNC_ERROR_UNSUPPORTED, fusedIsaError()};
    for (const ir::PatternIR::Head &head : kernel.ir.heads)
      sets_.push_back(head.set);
    for (const PassPlans *p : allPlans())
      if (!dense_ && !p->backward && plan::narrowsOnACanvas(p->forward))
        ownBackward_.push_back(p);
  }

  /// The plan of the pass, but a backward that shares its plan with a forward
  /// whose canvas may run in narrower blocks (plan::tiledLayout) keys a
  /// state of its own: its row blocks and layout are not the forward's.
  const void *variant(int64_t d, Pass pass) const override {
    const PassPlans &plans = plans_.forDim(d);
    if (pass == Pass::Backward && std::find(ownBackward_.begin(), ownBackward_.end(), &plans) != ownBackward_.end())
      return &plans.backward; // (an address no plan has)
    return &planFor(d, pass);
  }

  std::shared_ptr<const LengthState> prepare(int64_t n, int64_t d, Pass pass, int threads) const override {
    checkKeysFit32Bits(n);
    auto state = std::make_shared<FusedState>();
    state->plan = &planFor(d, pass);
    if (readsData_) // row blocks come from each call's data, as the kernels run
      return state;
    if (!dense_)
      state->layout = plan::tiledLayout(*state->plan, n, pass == Pass::Forward);
    if (state->layout) {
      plan::buildShapes(state->layout->plan, n, false, fusedCacheBytes(), state->layoutBlocks, threads,
                        state->keysMapped() ? state->layout->order->order.data() : nullptr);
    } else {
      plan::buildShapes(*state->plan, n, dense_, fusedCacheBytes(), state->blocks, threads);
    }
    return state;
  }

  const char *name() const override { return dense_ ? "dense" : "fused"; }
  bool writesLse() const override { return true; }
  bool hasBackward() const override { return true; }
  /// The fused kernels on bf16 (AVX512_BF16's dot products, or the f32
  /// kernels widening the rows as they load); the dense baseline
  /// stays the f32 kernel it is measured as. (Rows run on their own take
  /// bf16 on any CPU: Slice::firstRow > 0 reads them as they are.)
  /// (A score modifier runs on the f32 kernels: bf16 inputs are widened.)
  bool takesBf16(int64_t d) const override { return !dense_ && !ir_.score && fusedBf16Available(d); }
  bool takesBf16Rows() const override { return !dense_; }
  /// A few queries at the end of the keys (a decoding step, or its
  /// backward pass) run row by row over their own keys: the row blocks of
  /// all n positions would compute n / rows times the work, and be built
  /// anew for every length.
  bool takesRowRange(int64_t rows, int64_t n) const override { return !dense_ && rows * kRowRangeRatio <= n; }

  std::unique_ptr<Scratch> newScratch() const override { return std::make_unique<FusedWorker>(); }

  void runSlice(const LengthState &state, const Slice &in, Scratch &scratch, int threads) const override {
    if (!ir_.score && !ir_.sink) {
      runSliceOf(state, in, scratch, threads, nullptr);
      return;
    }
    // Score modifiers: the score's code compiled for this slice's head and
    // inputs; a sink folded into each row's O and log-sum-exp at the end.
    Slice s = in;
    thread_local std::vector<float> lse;
    if (ir_.sink && !s.lse) {
      lse.resize(static_cast<size_t>(s.n));
      s.lse = lse.data();
    }
    std::optional<ScoreCode> code;
    if (ir_.score)
      code = compileScore(*ir_.score, ir_, s.head, s.n, floatsOf(s.floats), false,
                          s.firstRow == 0 && !s.heldKeys ? scoreRunner() : nullptr);
    runSliceOf(state, s, scratch, threads, code ? &*code : nullptr);
    if (ir_.sink)
      applySink(s);
  }

  void runSliceOf(const LengthState &state, const Slice &s, Scratch &scratch, int threads,
                  const ScoreCode *code) const {
    ScoreRun run;
    run.code = code;
    if (s.firstRow > 0 || s.heldKeys) {
      const ir::SetRef rows = boundSet(s.set, s.inputs);
      const HeldKeys held{s.heldKeys, s.heldCount, s.heldKeys ? s.endRows - s.firstRow : 0};
      if (s.qb)
        runRows(rows, s.n, s.firstRow, s.d, s.qb, s.kb, s.vb, s.o, s.lse, s.scale, threads, code, held);
      else
        runRows(rows, s.n, s.firstRow, s.d, s.q, s.k, s.v, s.o, s.lse, s.scale, threads, code, held);
      return;
    }
    const auto &fused = static_cast<const FusedState &>(state);
    const size_t set = static_cast<size_t>(s.set);
    const std::optional<plan::Plan> bound = boundPlan(*fused.plan, set, s.inputs);
    const plan::Plan &plan = bound ? *bound : *fused.plan;
    if (bound && !dense_) {
      std::vector<DataGroup> groups = dataGroups(*bound, set, s.n);
      if (groups.size() > 1 || groups[0].classes || groups[0].rows) {
        runDataForward(groups, set, s, static_cast<FusedWorker &>(scratch), threads, code);
        return;
      }
    }
    if (const int32_t *order = fused.orderFor(s.n, s.skipRows, s.endRows)) {
      // A grid pattern in its tiled order, in place (bf16 rows widened).
      const std::array<const float *, 3> qkv = f32Rows(s, dataBuffers());
      runFusedHead(fused.layout->plan, set, false, fused.layoutBlocks.empty() ? nullptr : &fused.layoutBlocks[set],
                   s.n, s.d, qkv[0], qkv[1], qkv[2], s.o, s.scale, static_cast<FusedWorker &>(scratch).fused, threads,
                   0, std::numeric_limits<int64_t>::max(), code ? &run : nullptr, PassOrder{order, true, true, fused.keysMapped()});
    } else if (s.qb) {
      runFusedHeadBf16(plan, set, dense_, fused.blocks.empty() ? nullptr : &fused.blocks[set], s.n, s.d,
                       s.qb, s.kb, s.vb, s.o, s.scale, static_cast<FusedWorker &>(scratch).fused, threads, s.skipRows, s.endRows);
    } else {
      runFusedHead(plan, set, dense_, fused.blocks.empty() ? nullptr : &fused.blocks[set], s.n, s.d,
                   s.q, s.k, s.v, s.o, s.scale, static_cast<FusedWorker &>(scratch).fused, threads, s.skipRows, s.endRows,
                   code ? &run : nullptr);
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
    // A score modifier: its code with the derivatives, the float inputs'
    // gradients (when asked for) summed into s.inputGrad.
    std::optional<ScoreCode> code;
    ScoreRun run;
    if (ir_.score) {
      code = compileScore(*ir_.score, ir_, s.head, s.n, floatsOf(s.floats), true,
                          s.firstRow == 0 ? scoreRunner() : nullptr);
      if (!s.inputGrad) { // (no input gradient asked for: none summed, not even by distance)
        code->grads.clear();
        code->tableGrads.clear();
        code->biasGradAt = -1;
      }
      run.code = &*code;
      const int64_t entries = floatOffsets(floatsOf(s.floats), run.gradOffsets);
      run.gradSize = scoreGradSize(*code, floatsOf(s.floats));
      if (run.gradSize > entries) {
        // Tables that read float inputs: their sums by distance after the
        // entries, folded into the entries once every pair has run.
        thread_local std::vector<double> sums;
        sums.assign(static_cast<size_t>(run.gradSize), 0.0);
        GradSlice withTables = s;
        withTables.inputGrad = sums.data();
        runBackwardOf(state, withTables, scratch, threads, &run);
        foldTableGrads(*code, run.gradOffsets, sums.data(), scoreRunner());
        for (int64_t e = 0; e < entries; ++e)
          s.inputGrad[e] += sums[static_cast<size_t>(e)];
        if (ir_.sink)
          sinkBackward(s);
        return;
      }
    }
    const ScoreRun *score = code ? &run : nullptr;
    runBackwardOf(state, s, scratch, threads, score);
    if (ir_.sink && s.inputGrad)
      sinkBackward(s);
  }

  void runBackwardOf(const LengthState &state, const GradSlice &s, Scratch &scratch, int threads,
                     const ScoreRun *score) const {
    if (s.firstRow > 0) {
      const ir::SetRef rows = boundSet(s.set, s.inputs);
      RowsGradScratch &rowsGrad = static_cast<FusedWorker &>(scratch).rowsGrad;
      if (s.kb)
        runRowsBackward(rows, s.n, s.firstRow, s.d, s.q, s.kb, s.vb, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale,
                        rowsGrad, threads, score, s.inputGrad);
      else
        runRowsBackward(rows, s.n, s.firstRow, s.d, s.q, s.k, s.v, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale,
                        rowsGrad, threads, score, s.inputGrad);
      return;
    }
    const auto &fused = static_cast<const FusedState &>(state);
    const size_t set = static_cast<size_t>(s.set);
    const std::optional<plan::Plan> bound = boundPlan(*fused.plan, set, s.inputs);
    if (bound && !dense_) {
      std::vector<DataGroup> groups = dataGroups(*bound, set, s.n);
      if (groups.size() > 1 || groups[0].classes || groups[0].rows) {
        runDataBackward(groups, set, s, static_cast<FusedWorker &>(scratch), threads, score);
        return;
      }
    }
    if (const int32_t *order = fused.orderFor(s.n, s.skipRows, s.endRows)) {
      runFusedBackward(fused.layout->plan, set, false,
                       fused.layoutBlocks.empty() ? nullptr : &fused.layoutBlocks[set], s.n, s.d, s.q, s.k, s.v, s.o,
                       s.dO, s.lse, s.dq, s.dk, s.dv, s.scale, static_cast<FusedWorker &>(scratch).grad, threads, 0,
                       std::numeric_limits<int64_t>::max(), score, s.inputGrad, PassOrder{order, true, true, fused.keysMapped()});
      return;
    }
    runFusedBackward(bound ? *bound : *fused.plan, set, dense_, fused.blocks.empty() ? nullptr : &fused.blocks[set], s.n, s.d, s.q,
                     s.k, s.v, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale, static_cast<FusedWorker &>(scratch).grad,
                     threads, s.skipRows, s.endRows, score, s.inputGrad);
  }

private:
  static const std::vector<FloatInput> &floatsOf(const std::vector<FloatInput> *floats) {
    static const std::vector<FloatInput> none;
    return floats ? *floats : none;
  }

  static bool heldOf(const Slice &s) { return s.heldKeys != nullptr; }
  static bool heldOf(const GradSlice &) { return false; }
  /// The stored rows of a slice that are queries, and row t's position.
  template <typename S>
  static void queryRows(const S &s, int64_t &first, int64_t &end, int64_t &offset) {
    if (s.firstRow > 0 || heldOf(s)) { // a row range: stored row t is position firstRow + t
      first = 0;
      end = (heldOf(s) ? s.endRows : s.n) - s.firstRow;
      offset = s.firstRow;
    } else {
      first = s.skipRows;
      end = std::min(s.n, s.endRows);
      offset = 0;
    }
  }

  /// The sink's value for stored rows [t0, t0 + count) (count <= 64) of a
  /// slice whose row t is position t + offset, left in code's value slot.
  static const float *sinkLanes(const ScoreCode &code, std::vector<float> &slots, uint64_t &filled, int64_t t0,
                                int count, int64_t offset) {
    bindScoreSlots(code, slots, filled);
    constexpr int M = ScoreCode::kMaxLanes;
    if (code.usesI)
      for (int l = 0; l < count; ++l)
        slots[static_cast<size_t>(ScoreCode::kI * M + l)] = static_cast<float>(t0 + l + offset);
    const ScoreLanes lanes{slots.data(), count};
    scoreRunner()(code, lanes);
    return lanes.slot(code.value);
  }

  /// Folds the sink into every query row's O and log-sum-exp: with z the
  /// row's sink logit, lse' = log(e^lse + e^z) and O' = O e^(lse - lse').
  /// A row without keys keeps O = 0, and its lse becomes z.
  void applySink(const Slice &s) const {
    const ScoreCode code = compileScore(*ir_.sink, ir_, s.head, s.n, floatsOf(s.floats), false);
    thread_local std::vector<float> slots;
    thread_local uint64_t filled = 0;
    int64_t first, end, offset;
    queryRows(s, first, end, offset);
    const float ninf = -std::numeric_limits<float>::infinity();
    for (int64_t t0 = first; t0 < end; t0 += ScoreCode::kMaxLanes) {
      const int count = static_cast<int>(std::min<int64_t>(ScoreCode::kMaxLanes, end - t0));
      const float *z = sinkLanes(code, slots, filled, t0, count, offset);
      for (int l = 0; l < count; ++l) {
        float &lse = s.lse[t0 + l];
        const float zl = z[l];
        if (zl == ninf || lse != lse)
          continue;
        if (lse == ninf || zl != zl) {
          lse = zl;
          continue;
        }
        const float top = std::max(lse, zl);
        const float merged = top + std::log(std::exp(lse - top) + std::exp(zl - top));
        const float factor = std::exp(lse - merged);
        float *o = s.o + (t0 + l) * s.d;
        for (int64_t x = 0; x < s.d; ++x)
          o[x] *= factor;
        lse = merged;
      }
    }
  }

  /// The sink's share of the float inputs' gradients: d loss / d z of a
  /// row is -e^(z - lse) rowsum(dO * O) (the sink has no value row).
  void sinkBackward(const GradSlice &s) const {
    std::vector<int64_t> offsets;
    floatOffsets(floatsOf(s.floats), offsets);
    const ScoreCode code = compileScore(*ir_.sink, ir_, s.head, s.n, floatsOf(s.floats), true);
    thread_local std::vector<float> slots;
    thread_local uint64_t filled = 0;
    int64_t first, end, offset;
    queryRows(s, first, end, offset);
    float weight[ScoreCode::kMaxLanes];
    for (int64_t t0 = first; t0 < end; t0 += ScoreCode::kMaxLanes) {
      const int count = static_cast<int>(std::min<int64_t>(ScoreCode::kMaxLanes, end - t0));
      const float *z = sinkLanes(code, slots, filled, t0, count, offset);
      for (int l = 0; l < count; ++l) {
        const int64_t t = t0 + l;
        float delta = 0;
        for (int64_t x = 0; x < s.d; ++x)
          delta += s.dO[t * s.d + x] * s.o[t * s.d + x];
        const float p = std::exp(z[l] - s.lse[t]);
        weight[l] = std::isfinite(p) ? -p * delta : 0.0f;
      }
      accumulateScoreGrads(code, ScoreLanes{slots.data(), count}, weight, offsets, s.inputGrad);
    }
  }

  /// A head set bound to a slice's data (the set itself for positional patterns).
  ir::SetRef boundSet(int64_t set, const InputArrays *inputs) const {
    const ir::SetRef &s = sets_[static_cast<size_t>(set)];
    return readsData_ ? ir::bindSet(s, *checked(inputs)) : s;
  }
  /// The plan bound to a slice's data; nothing for positional patterns.
  std::optional<plan::Plan> boundPlan(const plan::Plan &plan, size_t set, const InputArrays *inputs) const {
    if (!readsData_)
      return std::nullopt;
    return plan::bindPlan(plan, set, *checked(inputs));
  }
  /// The bound plan's pieces of head set `set` at length n, grouped by the
  /// order they run in: rows one by one first, then raster order, then each
  /// input's class order.
  static std::vector<DataGroup> dataGroups(const plan::Plan &bound, size_t set, int64_t n) {
    std::vector<DataGroup> groups;
    for (const plan::Piece &piece : bound.heads[set].pieces) {
      const bool rows = plan::rowwisePiece(*piece.set);
      std::shared_ptr<const InputArray> classes = plan::runOrder(piece, n);
      auto at = std::find_if(groups.begin(), groups.end(),
                             [&](const DataGroup &g) { return g.classes == classes && g.rows == rows; });
      if (at == groups.end()) {
        groups.push_back({classes, rows, bound, set});
        groups.back().plan.heads[set].pieces.clear();
        at = groups.end() - 1;
      }
      at->plan.heads[set].pieces.push_back(classes ? plan::permutePiece(piece, classes) : piece);
    }
    // Rows run one by one first (they write their rows whole), then raster order, then the classes' orders.
    std::stable_partition(groups.begin(), groups.end(), [](const DataGroup &g) { return !g.classes; });
    std::stable_partition(groups.begin(), groups.end(), [](const DataGroup &g) { return g.rows; });
    // The first group of blocks starts every row (its blocks without keys still clear their rows' output)
    // and the last normalises every row: a group of fallback rows alone (the rows where A is empty, LSH's
    // self rule: a few rows) runs between two others, where its blocks without keys cost nothing.
    auto blocks = std::find_if(groups.begin(), groups.end(), [](const DataGroup &g) { return !g.rows; });
    if (groups.end() - blocks >= 3 && std::all_of(blocks->plan.heads[set].pieces.begin(),
                                                  blocks->plan.heads[set].pieces.end(), [](const plan::Piece &p) {
                                                    return p.set->kind == ir::Gen::WhereEmpty;
                                                  }))
      std::rotate(blocks, blocks + 1, blocks + 2);
    return groups;
  }

  /// Q, K and V of a slice as f32 rows (bf16 ones widened into `w`).
  static std::array<const float *, 3> f32Rows(const Slice &s, DataBuffers &w) {
    if (!s.qb)
      return {s.q, s.k, s.v};
    const uint16_t *from[3] = {s.qb, s.kb, s.vb};
    for (int x = 0; x < 3; ++x) {
      w.wide[x].resize(static_cast<size_t>(s.n * s.d));
      for (size_t e = 0; e < w.wide[x].size(); ++e) {
        const uint32_t bits = uint32_t{from[x][e]} << 16;
        std::memcpy(&w.wide[x][e], &bits, 4);
      }
    }
    return {w.wide[0].data(), w.wide[1].data(), w.wide[2].data()};
  }

  /// A data slice's forward, group by group, in place: a group of rows
  /// run one by one (selected tokens) first, straight into O and the
  /// log-sum-exp; then each group of row blocks, in its order, continues
  /// one online-softmax state per row (the pieces are disjoint, so the
  /// state sums each pair once). A finished row (O, lse) is the state
  /// (acc O, max lse, sum 1) that later groups continue.
  void runDataForward(const std::vector<DataGroup> &groups, size_t set, const Slice &s, FusedWorker &worker,
                      int threads, const ScoreCode *code) const {
    const int64_t n = s.n, d = s.d;
    DataBuffers &w = dataBuffers();
    const std::array<const float *, 3> qkv = f32Rows(s, w);
    float *lse = s.lse;
    if (!lse) {
      w.lse.resize(static_cast<size_t>(n));
      lse = w.lse.data();
    }
    FusedScratch &state = worker.fused;
    bool started = false, inState = false; // rows written; their state in `state` (else in O and lse)
    for (const DataGroup &g : groups) {
      if (g.rows) {
        runRows(g.rowSet(), n, 0, d, qkv[0], qkv[1], qkv[2], s.o, lse, s.scale, threads, code);
        started = true;
        continue;
      }
      if (started && !inState) {
        state.rowMax.resize(static_cast<size_t>(n));
        state.rowSum.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          const float l = lse[i]; // (-inf: no key yet, O = 0; NaN stays NaN through the sum)
          state.rowMax[static_cast<size_t>(i)] = l;
          state.rowSum[static_cast<size_t>(i)] = l == -std::numeric_limits<float>::infinity() ? 0.0f : l != l ? l : 1.0f;
        }
      }
      ScoreRun run;
      run.code = code;
      const PassOrder pass{g.classes ? g.classes->order.data() : nullptr, !started, &g == &groups.back()};
      runFusedHead(g.plan, set, false, nullptr, n, d, qkv[0], qkv[1], qkv[2], s.o, s.scale, state, threads, 0,
                   std::numeric_limits<int64_t>::max(), code ? &run : nullptr, pass);
      started = inState = true;
    }
    if (inState)
      lseFromState(state, n, lse);
    w.trim();
  }

  /// A data slice's backward, group by group, in place: a group of rows
  /// run one by one first (it writes dQ and adds to dK and dV, cleared
  /// for it), then each group of row blocks in its order, adding to what
  /// the groups before wrote (P of a pair is exp(score - lse) whatever group
  /// has it).
  void runDataBackward(const std::vector<DataGroup> &groups, size_t set, const GradSlice &s, FusedWorker &worker,
                       int threads, const ScoreRun *score) const {
    const int64_t n = s.n, d = s.d;
    const size_t size = static_cast<size_t>(n * d);
    bool started = false;
    for (const DataGroup &g : groups) {
      if (g.rows) {
        std::fill(s.dk, s.dk + size, 0.0f);
        std::fill(s.dv, s.dv + size, 0.0f);
        runRowsBackward(g.rowSet(), n, 0, d, s.q, s.k, s.v, s.o, s.dO, s.lse, s.dq, s.dk, s.dv, s.scale,
                        worker.rowsGrad, threads, score, s.inputGrad);
        worker.grad.dqFresh.assign(static_cast<size_t>(n), 0); // (every row and key holds a sum now)
        worker.grad.kvFresh.assign(static_cast<size_t>(n), 0);
        worker.grad.delta.clear(); // (the next pass computes it)
        started = true;
        continue;
      }
      const PassOrder pass{g.classes ? g.classes->order.data() : nullptr, !started, &g == &groups.back()};
      runFusedBackward(g.plan, set, false, nullptr, n, d, s.q, s.k, s.v, s.o, s.dO, s.lse, s.dq, s.dk, s.dv,
                       s.scale, worker.grad, threads, 0, std::numeric_limits<int64_t>::max(), score, s.inputGrad,
                       pass);
      started = true;
    }
  }

  static const InputArrays *checked(const InputArrays *inputs) {
    ATTNC_CHECK(inputs, "a slice of a pattern that reads data without its inputs");
    return inputs;
  }

  /// The base plans and those tuned per d.
  std::vector<const PassPlans *> allPlans() const {
    std::vector<const PassPlans *> all{&plans_.base};
    for (const auto &tuned : plans_.tuned)
      all.push_back(&tuned.second);
    return all;
  }

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
  bool readsData_; ///< row blocks from each call's data (CallInputs), none kept per n
  /// The plans whose backward keys a state of its own (variant): one plan
  /// for both passes that may run a canvas's forward in narrower blocks.
  std::vector<const PassPlans *> ownBackward_;
  ir::PatternIR ir_; ///< its score and sink (and inputs), compiled per slice
};

} // namespace

std::unique_ptr<Backend> makeFusedBackend(const LoadedKernel &kernel) {
  return std::make_unique<FusedBackend>(kernel, false);
}

std::unique_ptr<Backend> makeDenseBackend(const LoadedKernel &kernel) {
  return std::make_unique<FusedBackend>(kernel, true);
}

} // namespace attnc::rt
