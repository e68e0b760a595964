//===- Plan.h - Disjoint pieces, layouts and tiles of a pattern -----------===//
//
// The fused backend's plan (target-independent). Each distinct head set is
// split into DISJOINT pieces (for a set `(A | B | C) & R`: A & R, then
// (B & R) - A, then (C & R) - A - B), so that every pair is computed once and
// the pieces merge exactly through one online-softmax state per row (the
// log-sum-exp merge). Each piece gets a strategy:
//
//   row-tiles          rows in blocks of R; the union of the block's keys is
//                      compacted into one key list and cut into chunks of C
//                      keys; a chunk is a tile, full (no mask) or partial (a
//                      per-row bit mask)
//   residue-relayout   a piece that includes (i - j) % m == r: queries and
//                      keys are gathered by residue class i % m, where the
//                      piece becomes a dense band, then tiled as above
//
// A Plan is symbolic in n. A BlockSource generates each row block's keys
// from the closed forms in O(its intervals); the runtime keeps them per n
// when they fit a memory budget and generates them as it runs otherwise.
// Nothing is compiled per n, and nothing is O(n^2).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc::ir {
class RowEvaluator;
} // namespace attnc::ir

namespace attnc::plan {

enum class Strategy { RowTiles, ResidueRelayout };

struct Piece {
  ir::SetRef set;          ///< disjoint from the head's other pieces
  Strategy strategy = Strategy::RowTiles;
  int64_t modulus = 0;     ///< residue-relayout: m
  int64_t residue = 0;     ///< residue-relayout: r in (i - j) % m == r
  /// residue-relayout: the piece without its residue factor. Every key of a
  /// row lies in one residue class, so the row's keys are that class within
  /// this set's intervals: O(intervals) instead of O(keys) to enumerate.
  ir::SetRef withoutResidue;
  /// The smallest p >= 1 such that moving every row and key by p maps the
  /// piece onto itself (row-tiles: its set; relayout: withoutResidue), or 0
  /// when the plan cannot tell (a constant key range, random blocks, a
  /// predicate). A band has p = 1, a block-diagonal or stripe its size:
  /// blocks of such a piece are translates of one another away from 0 and n.
  int64_t period = 0;
  /// A piece run in an input's class order (permutePiece) with equality
  /// classes of other inputs taken out as a test per pair, not as per-row
  /// key sets: rows t and keys u of the order pair up only where
  /// tags[t] != tags[u] for each of these (a tag per position of the order:
  /// its class in the other input). Empty otherwise.
  std::vector<std::shared_ptr<const std::vector<int32_t>>> distinctTags;
};

struct HeadPlan {
  std::vector<int64_t> heads;
  std::vector<Piece> pieces;
};

struct PlanOptions {
  int64_t tileRows = 0;    ///< R (at most 64: masks are 64-bit); 0: buildPlan picks (defaultTileRows)
  int64_t tileCols = 64;   ///< C
};

struct Plan {
  std::string pattern;
  PlanOptions options;
  std::vector<HeadPlan> heads;
};

/// Tile shapes tuned per head dimension, as a kernel file records them
/// (metadata `tuned_tiles`, "64:32x128,128:64x64"): the runtime runs a call
/// with head dimension d on d's shape, and on the kernel's default tiles
/// (`tile_rows`, `tile_cols`) for any other d.
using TunedTiles = std::vector<std::pair<int64_t, PlanOptions>>;
std::string formatTunedTiles(const TunedTiles &tiles);
/// False on malformed text or a shape outside 1..64 rows, 1..4096 keys.
bool parseTunedTiles(const std::string &text, TunedTiles &out);

/// `plan` with head `head`'s pieces bound to a call's inputs (bindSet): a
/// pattern that reads data is planned once, symbolically, and each slice of
/// a call runs a copy whose row blocks come from its data. O(pieces).
Plan bindPlan(const Plan &plan, size_t head, const InputArrays &arrays);

/// The input whose equality classes a (bound) row-tiles piece is best run
/// in the order of: the class it is intersected with (the piece's first
/// factor, before what earlier pieces cover is taken out), or null. In raster
/// order a block's rows each bring their own class, and the block's key union
/// is most of the keys; sorted by class, a class is a run of rows and keys.
std::shared_ptr<const InputArray> pieceClasses(const Piece &piece);

/// The piece renumbered by `classes`' order (SetNode::permuted, pushed
/// through unions, differences and fallbacks, so that each class factor
/// meets its permutation): run on Q, K and V gathered in that order, its
/// outputs scattered back. Another input's class taken out of the whole
/// piece (LSH's second round minus its first: `X - (class(b0) & band)`
/// with X inside the band) becomes Piece::distinctTags, which BlockSource
/// applies to each block's masks: the rest stays closed form in the order
/// (a segment, bands, the diagonal) instead of a per-row set difference
/// with keys scattered by the other permutation.
Piece permutePiece(const Piece &piece, const std::shared_ptr<const InputArray> &classes);

/// Whether a piece selects keys too finely for tiles (a selection of blocks
/// smaller than 16 keys: tokens), so that a row block's union of keys would
/// be most of its rows' keys apart: the fused backend runs its rows one by
/// one, each over its own keys.
bool rowwisePiece(const ir::SetNode &s);

/// The class order the fused backend runs a bound piece in at length n:
/// pieceClasses, unless the piece runs row by row (rowwisePiece) or the
/// input is longer than the sequence (its order is not the rows'); null:
/// raster order.
std::shared_ptr<const InputArray> runOrder(const Piece &piece, int64_t n);

/// The plan with `options` (resolved by resolveOptions).
Plan buildPlan(const ir::PatternIR &ir, const PlanOptions &options = {});

/// `options` with the rows per block picked (defaultTileRows) where they are 0.
PlanOptions resolveOptions(const ir::PatternIR &ir, PlanOptions options);

/// The rows per block when none is given: 64 where 64-row blocks compute no
/// more pairs than 32-row ones (within 0.5%, counted at n = 1024: blocks
/// aligned to the pattern's own blocks, as bigbird's), since a 64-row block
/// loads each key once for twice the rows; else 32, which cuts less off a
/// band's diagonal.
int64_t defaultTileRows(const ir::PatternIR &ir);

/// The rows per block of the backward pass beside a forward plan with
/// `forward` (resolved by resolveOptions): 64 where 64-row blocks compute at most
/// kGradTallerWork times the pairs of the forward's (counted at n = 4096),
/// else the forward's. The backward narrows its products to the 16-row
/// vectors and row ranges a tile's keys have, so padding costs it less than
/// the forward, and a taller block loads each key row for more rows (fixed,
/// local, longformer: 32 -> 64 rows, 1-3% faster; strided, whose band and
/// residue classes execute 1.17x the pairs at 64 rows, 4% slower).
/// attnc compile records it as the kernel's grad_tile_rows.
int64_t gradTileRows(const ir::PatternIR &ir, const PlanOptions &forward);
inline constexpr double kGradTallerWork = 1.14;

/// `count` intervals [lo + k period, lo + k period + len), k = 0 .. count-1:
/// a stripe's keys up to a block (one interval per period of it) are one
/// run, so a block of *fixed* or *strided* is O(1) to store, not O(n / l).
struct KeyRun {
  int64_t lo = 0, len = 0, period = 0, count = 1;
  bool operator==(const KeyRun &o) const {
    return lo == o.lo && len == o.len && period == o.period && count == o.count;
  }
};
using KeyRuns = std::vector<KeyRun>;
/// The runs of a (normalised) interval set: equal intervals equally spaced
/// become one run. One pass.
KeyRuns compressRuns(const IntervalSet &s);
int64_t cardinality(const KeyRuns &runs);

/// One row block of a piece at one n, compactly: the union of the block's
/// rows' keys as runs of intervals, and the rows that have each key only
/// where that is not every row. O(runs + partial keys), not O(keys).
struct BlockShape {
  int64_t firstRow = 0;          ///< first row in the piece's row space (a class's for relayout)
  int32_t rows = 0;              ///< at most R
  uint64_t allRows = 0;          ///< the mask with every row of the block
  KeyRuns keys;                  ///< key k is keyBase + u * keyStride for u in these intervals
  int64_t keyBase = 0, keyStride = 1;
  /// (position in the compacted key list, bit r: block row r has it), for
  /// the positions that not every row has; ascending.
  std::vector<std::pair<int32_t, uint64_t>> partial;
  int64_t useful = 0;            ///< pairs in the block
  int64_t numKeys() const { return cardinality(keys); }
  size_t bytes() const;          ///< object and heap size of a compact copy, for cache budgets
  /// Key k becomes order[k] (a layout's order: key u is position order[u]),
  /// the keys sorted by position and their partial masks moved with them,
  /// keyBase 0 and stride 1. In tiles of 4 x 4 the keys of a window come in
  /// runs of 4 positions, sorted in runs of the window's width, which the
  /// kernels read from one pointer. O(keys + span / 64) over a bitmap of the
  /// positions' span where it is at most 64 times the keys, else a sort;
  /// once per cached block.
  void mapKeys(const int32_t *order);
};

/// A block as the tile kernels read it: every key, ascending, with its row
/// mask. The executor cuts `keys` into tiles of C consecutive entries; a
/// tile whose masks are all `allRows` is full (no masking).
struct BlockTiles {
  int64_t firstRow = 0;
  int32_t rows = 0;
  uint64_t allRows = 0;
  std::vector<int32_t> keys;     ///< key positions, ascending (see expand)
  std::vector<uint64_t> masks;   ///< bit r of masks[k]: block row r has keys[k]
  /// The block's keys as original positions, or with `classLocal` as the
  /// positions u within the key class (key = keyBase + u * keyStride): the
  /// row of a class-major copy of the keys.
  void expand(const BlockShape &shape, bool classLocal = false);
  /// The rows of `all` with its keys [begin, end) (and their masks).
  void assignRange(const BlockTiles &all, size_t begin, size_t end);
};

/// The row blocks of one piece at one n, generated from closed forms. For
/// row-tiles, a block's keys come from bounds on the whole block: keys that
/// every row has (no per-row work) and keys that some row may have (only
/// there are rows evaluated one by one), so a block costs O(its intervals),
/// not O(rows x intervals). For residue relayout, class c's rows are the
/// queries c, c + m, c + 2m, ... (row t is query c + t m). The dense
/// baseline's blocks take every key [0, n) with the pattern as masks.
///
/// A translation-invariant piece (Piece::period) with enough blocks builds
/// its first blocks once with keys past [0, n) as well (the references);
/// every other full block is a reference moved by a multiple of the period
/// and clipped to [0, n): O(runs + partial keys), no row is evaluated.
/// A piece without a period whose rows move with i on a canvas (a
/// neighbourhood, in raster order or in tiles) moves blocks a thread built
/// just before where it checks that every row's keys moved with it
/// (buildMoved): one row evaluation per row, no bounds, unions or masks.
/// `translates = false` builds every block directly (tests compare both).
class BlockSource {
public:
  BlockSource(const Plan &plan, const Piece &piece, int64_t n, int64_t residueClass = 0,
              bool translates = true);
  /// The dense baseline: every key of every row of a head's set.
  static BlockSource dense(const Plan &plan, const HeadPlan &head, int64_t n);

  int64_t numBlocks() const { return (rows_ + R_ - 1) / R_; }
  /// Query of row t of this source's row space.
  int64_t query(int64_t t) const { return rowBase_ + t * rowStride_; }
  int64_t rowBase() const { return rowBase_; }
  int64_t rowStride() const { return rowStride_; }
  /// Relayout: the keys of this class are keyClass() + u * rowStride(), u = 0 ..
  /// keyRows() - 1 (every row's keys lie in that one class).
  int64_t keyClass() const { return keyClass_; }
  int64_t keyRows() const { return (n_ - keyClass_ + modulus_ - 1) / modulus_; }
  void build(int64_t block, BlockShape &out) const;
  /// Clears the mask bits of a block's pairs whose rows and keys share a
  /// tag of Piece::distinctTags (nothing for other pieces): applied to the
  /// expanded blocks of build(). O(keys + rows) per block.
  void dropSameTags(BlockTiles &block) const;
  /// Block `block` as the tile kernels read it: build(), BlockTiles::expand
  /// and dropSameTags in one (`shape` is scratch). A set of one interval per
  /// row in closed form that reads data (a class's causal segment in its
  /// order, a fallback's rows where causal classes are empty) goes from its
  /// rows' ends straight to keys and masks: O(rows + keys), the data patterns'
  /// planning inside every call.
  void buildTiles(int64_t block, BlockTiles &out, BlockShape &shape, bool classLocal = false) const;
  /// How many references build() moves blocks from (0: it builds each block).
  int64_t references() const;
  /// How many blocks back build() looks for a block to move on a canvas (0: none).
  int64_t moveBlocks() const { return moveBlocks_; }
  /// Blocks this thread has moved on a canvas so far, in any source (what
  /// tests and benchmarks count).
  static int64_t canvasMovesOnThisThread();
  /// A reference block (defined in Plan.cpp, whose helpers move it).
  struct Reference;
  /// A part of a fallback's A: rows whose class (in `classes`) has a
  /// position at most i + hi (classesBefore in Plan.cpp).
  struct ClassBefore {
    const InputArray *classes;
    int64_t hi;
  };

private:
  /// `evaluator`: make the set's row evaluator (a set that reads data gets
  /// one regardless).
  BlockSource(ir::SetRef set, int64_t n, int64_t R, bool evaluator);
  /// build() with keys (row-tiles) or the set's keys before the class is
  /// taken (relayout) inside [lo, hi) instead of [0, n).
  void buildIn(int64_t block, BlockShape &out, int64_t lo, int64_t hi) const;
  /// build() of a full block where moves are on: the block `moveBlocks_`
  /// before it moved, when each of its rows' keys are that block's row's
  /// moved (checked row by row), else buildIn.
  void buildMoved(int64_t block, BlockShape &out) const;
  /// Turns moves on where they apply (the constructor, for row tiles).
  void enableMoves();

  std::shared_ptr<const std::vector<Reference>> refs_; ///< blocks 0 .. P-1, keys past [0, n) too
  ir::SetRef set_;        ///< row-tiles / dense: the piece's set
  ir::SetRef rest_;       ///< residue relayout: the piece without its residue factor
  int64_t n_ = 0, R_ = 32;
  int64_t rows_ = 0;      ///< rows in this source's row space
  int64_t rowBase_ = 0, rowStride_ = 1;
  int64_t modulus_ = 1, keyClass_ = 0; ///< relayout: keys are keyClass + u m
  bool dense_ = false;
  bool perKeyWork_ = false; ///< the set has a predicate: its rows cost their window, not their keys
  bool rowsOnce_ = false;   ///< the set reads data: each row evaluated once, no block bounds
  bool oneInterval_ = false; ///< reads data, one interval per row in closed form (a class's segment)
  std::vector<std::shared_ptr<const std::vector<int32_t>>> distinct_; ///< Piece::distinctTags
  /// The set's row evaluator, made once per source (it compiles the set's
  /// predicates and weighs its terms) and shared by the threads that build
  /// its blocks. (A residue relayout's source, made per class at every
  /// call, has none: its blocks evaluate the set without its residue.)
  std::shared_ptr<const ir::RowEvaluator> eval_;
  /// buildTiles' direct path: each row's interval from `ends_` (the set
  /// itself when null), intersected with (`commonMinus_`: less) the sets of
  /// `common_`, whose keys are the same on every row of a block.
  ir::SetRef ends_;
  std::vector<std::shared_ptr<const ir::RowEvaluator>> common_;
  bool commonMinus_ = false;
  /// A fallback's last piece: its rows take ends_ (B) where none of these
  /// finds a key of A.
  std::vector<ClassBefore> before_;
  /// Unsure intervals past which a row is evaluated once over their span.
  static constexpr size_t kManyUnsure = 4;
  /// Moves on a canvas (sets without a period whose rows move with i, like
  /// a neighbourhood's): a full block is the block moveBlocks_ before it
  /// moved by moveBlocks_ * R rows and keys where every row's keys are that
  /// block's row's moved, which a thread checks on the rows it remembers
  /// from building that block (one row evaluation each, no bounds, unions
  /// or masks). 0: off. The check is exact, so a block at a canvas's edge,
  /// or the first a thread builds, is built as before.
  int64_t moveBlocks_ = 0;
  /// A canvas in tiles (a Permuted set in plan::tiledLayout's order):
  /// rows are compared in raster order through its child's evaluator, and
  /// a move is one tile to the right (tileCols positions in raster order).
  const InputArray *tiles_ = nullptr;
  std::shared_ptr<const ir::RowEvaluator> rasterEval_;
  uint64_t id_ = 0; ///< which source a thread's remembered blocks are of
};

/// The blocks of `piece` that the rest are moves of (lcm(step, period) /
/// step for a step of R queries, R m in a residue class), or 0 when its
/// period is unknown.
int64_t referenceBlocks(const Plan &plan, const Piece &piece);

/// The residue classes a piece is run in at length n (1 for row-tiles).
int64_t numClasses(const Piece &piece, int64_t n);
/// Rows of residue class c of a residue-relayout piece: the queries c, c + m, ... below n.
int64_t classRows(const Piece &piece, int64_t n, int64_t c);
/// The key class of query class c: its rows' keys are keyClass + u m.
int64_t keyClass(const Piece &piece, int64_t c);

/// Every block of every piece (and residue class) of one head at one n.
struct HeadShapes {
  std::vector<std::vector<std::vector<BlockShape>>> pieces; ///< [piece][class][block]
};

/// The blocks of every head at n (the dense baseline's with `dense`), or
/// false (and `out` empty) as soon as they would take more than `maxBytes`:
/// the runtime caches them per n when they fit and generates blocks as it
/// runs otherwise. Built by up to `threads` threads of the shared pool (0:
/// support::defaultThreads()). With `keyOrder` (a Layout's order), every
/// block's keys are then mapped to positions (BlockShape::mapKeys).
bool buildShapes(const Plan &plan, int64_t n, bool dense, size_t maxBytes,
                 std::vector<HeadShapes> &out, int threads = 0, const int32_t *keyOrder = nullptr);

/// Useful and executed pairs and tile counts of a plan at one n, from one
/// pass over every block (what `emit --stage plan`, bench and tune report).
struct PieceStats {
  int64_t useful = 0, executed = 0, tiles = 0, partial = 0, blocks = 0;
  int64_t bytes = 0; ///< what its BlockShapes take (buildShapes' budget)
};
struct HeadStats {
  std::vector<PieceStats> pieces;
  int64_t useful = 0, executed = 0;
};
std::vector<HeadStats> planStats(const Plan &plan, int64_t n);
/// The dense baseline's: every key of every row block.
std::vector<HeadStats> denseStats(const Plan &plan, int64_t n);
/// executed / useful over every head (1 when nothing is useful).
double executedOverUseful(const std::vector<HeadStats> &stats);

/// A plan run with its rows and keys in another order than raster: tokens
/// on an image laid out tile by tile, so that a row block is a compact patch
/// of the canvas and its keys the union of a few windows rather than of a
/// strip of canvas rows (NATTEN 7x7 on 64 x 64 executes 5.0x its useful pairs
/// in raster order, 2.6x in tiles of 8 x 8). The kernels run it in place
/// (block row t is query order[t], key u is key order[u]), the same pairs.
struct Layout {
  /// The canvas's width, the tile's rows and columns; tiles of 0 x 0 for an
  /// order of equal rows (`groups` of queries whose keys are the same, a
  /// Swin window's, each group's positions together).
  int64_t width = 0, tileRows = 0, tileCols = 0, groups = 0;
  std::shared_ptr<const InputArray> order;       ///< its order: a class of one position each, sorted by tile
  Plan plan;                                     ///< the plan's pieces renumbered by it (permutePiece)
  /// Pairs its blocks execute, and raster order's, on the canvas it was
  /// chosen on: n's, or its first 32 rows when the sets do not depend on n.
  int64_t executed = 0, rasterExecuted = 0;
};

/// The layout of `plan` at length n, when its sets are neighbourhoods on a
/// canvas W tokens wide (a coordinate range `(j / 1) % W`: a column), n is
/// a whole number of canvas rows, tiles of 8 x 8 (then 4 x 8; for blocks
/// of 16 rows or fewer, 4 x 4 first) cut the canvas exactly with two or
/// more across, and it executes at most 3/4 of raster order's pairs
/// (counted on at most 32 canvas rows: the runtime asks at each new n). Or,
/// where that executes fewer pairs still, the queries grouped by equal keys
/// (Swin's windows: a block-diagonal of the windows, not tiles that
/// straddle them), when on average 4 or more share them. With
/// `narrowBlocks` (a forward pass), tiles for a plan of 32-row blocks may
/// come back with blocks of 16 rows (Layout::plan's options), each a 4 x 4
/// patch of the canvas, where those execute at most 0.85 of the pairs
/// (NATTEN 7 x 7 on 64 x 64: 1.89 against 2.60 times the useful pairs).
/// Never for a pattern that reads data or a residue relayout.
std::optional<Layout> tiledLayout(const Plan &plan, int64_t n, bool narrowBlocks = false);

/// Whether tiledLayout with `narrowBlocks` may give `plan` other blocks than
/// without: 32-row blocks of pieces that read one canvas (the runtime keeps
/// such a plan's forward and backward states apart).
bool narrowsOnACanvas(const Plan &plan);

/// `attnc emit --stage plan`: the pieces, strategies and tiles; with n > 0,
/// also the executed/useful work per piece at that n.
std::string printPlan(const Plan &plan, int64_t n = 0);

} // namespace attnc::plan
