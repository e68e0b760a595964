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
// A Plan is symbolic in n; a PlanInstance binds n (built in O(nnz) from the
// closed forms, never O(n^2), and cached by the runtime). Nothing here is
// compiled per n.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/compiler/PatternIR.h"

#include <cstdint>
#include <string>
#include <vector>

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
};

struct HeadPlan {
  std::vector<int64_t> heads;
  std::vector<Piece> pieces;
};

struct PlanOptions {
  int64_t tileRows = 32;   ///< R (at most 32: masks are 32-bit)
  int64_t tileCols = 32;   ///< C
};

struct Plan {
  std::string pattern;
  PlanOptions options;
  std::vector<HeadPlan> heads;
};

Plan buildPlan(const ir::PatternIR &ir, const PlanOptions &options = {});

/// The tiles of one piece at one n, in the piece's own row/key coordinates
/// (gathered coordinates for residue-relayout).
struct TileList {
  struct Block {
    int32_t firstRow, rows;       ///< rows [firstRow, firstRow + rows) of the (gathered) space
    int32_t firstTile, numTiles;  ///< into `tiles`
  };
  struct Tile {
    int32_t keyOffset;  ///< into `keys`: this tile's keys are keys[keyOffset .. + count)
    int32_t count;      ///< <= C
    int32_t maskOffset; ///< -1 when full; else `count` uint32 masks start here in `masks`
  };
  std::vector<Block> blocks;
  std::vector<Tile> tiles;
  std::vector<int32_t> keys;
  std::vector<uint32_t> masks;  ///< bit r of masks[maskOffset + c]: block row r has the tile's key c
  int64_t keyClass = 0;         ///< residue-relayout: keys are keyClass + u m
  int64_t useful = 0;           ///< pairs in the piece
  int64_t executed = 0;         ///< pairs the tiles compute (rows x count per tile)
};

/// A piece bound to n. For residue-relayout, class c's tile list has the
/// rows c, c + m, c + 2m, ... (row t of the list is query c + t m) and keys
/// given by their original positions.
struct PieceInstance {
  Strategy strategy = Strategy::RowTiles;
  int64_t modulus = 1;
  std::vector<TileList> classes; ///< one for row-tiles; m for residue-relayout
};

struct HeadInstance {
  std::vector<PieceInstance> pieces;
  int64_t useful = 0, executed = 0;
};

struct PlanInstance {
  int64_t n = 0;
  std::vector<HeadInstance> heads;
};

PlanInstance instantiate(const Plan &plan, int64_t n);

/// The dense masked baseline: one piece per head whose row blocks take every
/// key [0, n) (no block skipping, no compaction) with the pattern as a mask.
/// What a dense kernel with a boolean mask computes, run by the same tiles.
PlanInstance instantiateDense(const Plan &plan, int64_t n);

/// `attnc emit --stage plan`: the pieces, strategies and tiles; with n > 0,
/// also the executed/useful work per piece at that n.
std::string printPlan(const Plan &plan, int64_t n = 0);

} // namespace attnc::plan
