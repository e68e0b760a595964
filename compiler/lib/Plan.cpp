//===- Plan.cpp - Disjoint pieces, layouts and tiles of a pattern ---------===//
#include "attnc/compiler/Plan.h"

#include "attnc/compiler/RowEvaluator.h"

#include <algorithm>
#include <functional>
#include <sstream>

namespace attnc::plan {

namespace {

/// The residue generator a piece is built on, if any.
const ir::SetNode *findResidue(const ir::SetNode &s) {
  if (s.kind == ir::Gen::Residue)
    return &s;
  if (s.kind == ir::Gen::Intersect)
    for (const ir::SetRef &c : s.children)
      if (c->kind == ir::Gen::Residue)
        return c.get();
  return nullptr;
}

/// Tiles of `rows` rows whose keys `rowKeys(r)` returns (sorted intervals).
TileList buildTiles(int64_t rows, const std::function<IntervalSet(int64_t)> &rowKeys, int64_t R,
                    int64_t C, int64_t denseKeys = 0) {
  TileList t;
  std::vector<IntervalSet> blockRows(static_cast<size_t>(R));
  std::vector<uint64_t> bits;
  for (int64_t r0 = 0; r0 < rows; r0 += R) {
    int64_t count = std::min(R, rows - r0);
    IntervalSet unionKeys;
    for (int64_t r = 0; r < count; ++r) {
      blockRows[r] = rowKeys(r0 + r);
      t.useful += cardinality(blockRows[r]);
      unionKeys.insert(unionKeys.end(), blockRows[r].begin(), blockRows[r].end());
    }
    normalize(unionKeys);
    if (denseKeys > 0)
      unionKeys = {{0, denseKeys}};
    TileList::Block block{static_cast<int32_t>(r0), static_cast<int32_t>(count),
                          static_cast<int32_t>(t.tiles.size()), 0};
    size_t keyBase = t.keys.size();
    for (const Interval &x : unionKeys)
      for (int64_t k = x.lo; k < x.hi; ++k)
        t.keys.push_back(static_cast<int32_t>(k));
    int64_t numKeys = static_cast<int64_t>(t.keys.size() - keyBase);
    if (numKeys == 0) {
      t.blocks.push_back(block);
      continue;
    }
    const uint32_t allRows = count == 32 ? 0xffffffffu : ((1u << count) - 1);
    // Common case (e.g. summary columns): every row has the block's keys, so
    // every tile is full and no mask is needed.
    bool uniform = true;
    for (int64_t r = 0; r < count && uniform; ++r)
      uniform = blockRows[r] == unionKeys;
    if (uniform) {
      for (int64_t p0 = 0; p0 < numKeys; p0 += C) {
        int32_t width = static_cast<int32_t>(std::min(C, numKeys - p0));
        t.tiles.push_back({static_cast<int32_t>(keyBase + p0), width, -1});
        t.executed += count * width;
      }
      block.numTiles = static_cast<int32_t>(t.tiles.size()) - block.firstTile;
      t.blocks.push_back(block);
      continue;
    }
    // Per row, a bit per position of the block's compacted key list.
    size_t words = static_cast<size_t>((numKeys + 63) / 64);
    bits.assign(static_cast<size_t>(count) * words, 0);
    const int32_t *keys = t.keys.data() + keyBase;
    for (int64_t r = 0; r < count; ++r)
      for (const Interval &x : blockRows[r]) {
        int64_t a = std::lower_bound(keys, keys + numKeys, x.lo) - keys;
        int64_t b = std::lower_bound(keys, keys + numKeys, x.hi) - keys;
        for (int64_t p = a; p < b; ++p)
          bits[r * words + p / 64] |= uint64_t{1} << (p % 64);
      }
    for (int64_t p0 = 0; p0 < numKeys; p0 += C) {
      int32_t width = static_cast<int32_t>(std::min(C, numKeys - p0));
      bool full = true;
      std::vector<uint32_t> keyMasks(static_cast<size_t>(width));
      for (int32_t c = 0; c < width; ++c) {
        int64_t p = p0 + c;
        uint32_t m = 0;
        for (int64_t r = 0; r < count; ++r)
          if (bits[r * words + p / 64] >> (p % 64) & 1)
            m |= 1u << r;
        keyMasks[c] = m;
        full = full && m == allRows;
      }
      TileList::Tile tile{static_cast<int32_t>(keyBase + p0), width, -1};
      if (!full) {
        tile.maskOffset = static_cast<int32_t>(t.masks.size());
        t.masks.insert(t.masks.end(), keyMasks.begin(), keyMasks.end());
      }
      t.tiles.push_back(tile);
      t.executed += count * width;
    }
    block.numTiles = static_cast<int32_t>(t.tiles.size()) - block.firstTile;
    t.blocks.push_back(block);
  }
  return t;
}

const char *strategyName(Strategy s) {
  return s == Strategy::RowTiles ? "row-tiles" : "residue-relayout";
}

} // namespace

Plan buildPlan(const ir::PatternIR &ir, const PlanOptions &options) {
  ATTNC_CHECK(options.tileRows >= 1 && options.tileRows <= 32, "tile rows must be in [1, 32]");
  ATTNC_CHECK(options.tileCols >= 1, "tile columns must be positive");
  Plan plan;
  plan.pattern = ir.name;
  plan.options = options;
  for (const ir::PatternIR::Head &head : ir.heads) {
    HeadPlan hp;
    hp.heads = head.heads;
    const ir::SetRef &s = head.set;
    std::vector<ir::SetRef> parts, rest;
    if (s->kind == ir::Gen::Union) {
      parts = s->children;
    } else if (s->kind == ir::Gen::Intersect) {
      for (const ir::SetRef &c : s->children) {
        if (c->kind == ir::Gen::Union && parts.empty())
          parts = c->children;
        else
          rest.push_back(c);
      }
    }
    if (parts.empty()) {
      parts = {s};
      rest.clear();
    }
    std::vector<ir::SetRef> earlier;
    for (const ir::SetRef &part : parts) {
      std::vector<ir::SetRef> conj{part};
      conj.insert(conj.end(), rest.begin(), rest.end());
      ir::SetRef pieceSet = ir::SetNode::intersect(conj, part->loc);
      Piece piece;
      ir::SetRef rest = nullptr;
      if (const ir::SetNode *res = findResidue(*pieceSet)) {
        piece.strategy = Strategy::ResidueRelayout;
        piece.modulus = res->modulus;
        piece.residue = res->residue;
        std::vector<ir::SetRef> others;
        if (pieceSet->kind == ir::Gen::Intersect)
          for (const ir::SetRef &c : pieceSet->children)
            if (c.get() != res)
              others.push_back(c);
        rest = ir::SetNode::intersect(others, part->loc);
      }
      if (!earlier.empty()) {
        ir::SetRef before = ir::SetNode::unite(earlier, part->loc);
        pieceSet = ir::SetNode::difference(pieceSet, before, part->loc);
        if (rest)
          rest = ir::SetNode::difference(rest, before, part->loc);
      }
      piece.withoutResidue = rest;
      piece.set = pieceSet;
      earlier.push_back(part);
      hp.pieces.push_back(piece);
    }
    plan.heads.push_back(std::move(hp));
  }
  return plan;
}

PlanInstance instantiate(const Plan &plan, int64_t n) {
  PlanInstance inst;
  inst.n = n;
  const int64_t R = plan.options.tileRows, C = plan.options.tileCols;
  for (const HeadPlan &hp : plan.heads) {
    HeadInstance hi;
    for (const Piece &piece : hp.pieces) {
      ir::RowEvaluator eval(piece.set, n);
      PieceInstance pi;
      pi.strategy = piece.strategy;
      if (piece.strategy == Strategy::RowTiles) {
        pi.classes.push_back(buildTiles(n, [&](int64_t i) { return eval.row(i); }, R, C));
      } else {
        int64_t m = piece.modulus;
        pi.modulus = m;
        ir::RowEvaluator rest(piece.withoutResidue, n);
        for (int64_t c = 0; c < std::min(m, n); ++c) {
          int64_t keyClass = floorMod(c - piece.residue, m);
          int64_t rows = (n - c + m - 1) / m;
          pi.classes.push_back(buildTiles(
              rows,
              [&](int64_t t) {
                // The row's keys are j = keyClass + u m inside the intervals
                // of the piece without its residue factor.
                IntervalSet mapped;
                for (const Interval &x : rest.row(c + t * m)) {
                  int64_t first = floorDiv(x.lo - keyClass + m - 1, m);
                  int64_t last = floorDiv(x.hi - keyClass + m - 1, m); // exclusive
                  if (first < last)
                    mapped.push_back({first, last});
                }
                normalize(mapped);
                return mapped;
              },
              R, C));
          // Tiles index keys by their original position: the executor reads
          // K and V in place and only the rows' order is relaid.
          TileList &tl = pi.classes.back();
          tl.keyClass = keyClass;
          for (int32_t &u : tl.keys)
            u = static_cast<int32_t>(keyClass + int64_t{u} * m);
        }
      }
      for (const TileList &t : pi.classes) {
        hi.useful += t.useful;
        hi.executed += t.executed;
      }
      hi.pieces.push_back(std::move(pi));
    }
    inst.heads.push_back(std::move(hi));
  }
  return inst;
}

PlanInstance instantiateDense(const Plan &plan, int64_t n) {
  PlanInstance inst;
  inst.n = n;
  for (const HeadPlan &hp : plan.heads) {
    std::vector<ir::SetRef> sets;
    for (const Piece &p : hp.pieces)
      sets.push_back(p.set);
    ir::RowEvaluator eval(ir::SetNode::unite(sets, {}), n);
    PieceInstance pi;
    pi.classes.push_back(buildTiles(n, [&](int64_t i) { return eval.row(i); },
                                    plan.options.tileRows, plan.options.tileCols, n));
    HeadInstance hi;
    hi.useful = pi.classes[0].useful;
    hi.executed = pi.classes[0].executed;
    hi.pieces.push_back(std::move(pi));
    inst.heads.push_back(std::move(hi));
  }
  return inst;
}

std::string printPlan(const Plan &plan, int64_t n) {
  std::ostringstream os;
  os << "plan " << plan.pattern << " tiles=" << plan.options.tileRows << "x" << plan.options.tileCols
     << "\n";
  PlanInstance inst;
  if (n > 0)
    inst = instantiate(plan, n);
  for (size_t h = 0; h < plan.heads.size(); ++h) {
    const HeadPlan &hp = plan.heads[h];
    os << "head";
    for (int64_t k : hp.heads)
      os << " " << k;
    os << ": " << hp.pieces.size() << (hp.pieces.size() == 1 ? " piece" : " disjoint pieces")
       << ", merged by log-sum-exp (one online-softmax state per row)\n";
    for (size_t p = 0; p < hp.pieces.size(); ++p) {
      const Piece &piece = hp.pieces[p];
      os << "  piece " << p << ": " << strategyName(piece.strategy);
      if (piece.strategy == Strategy::ResidueRelayout)
        os << " m=" << piece.modulus << " r=" << piece.residue
           << " (gather rows and keys by class i % " << piece.modulus
           << ": the piece becomes a dense band per class, then scatter back)";
      else
        os << " (row blocks of " << plan.options.tileRows << ", the block's keys compacted, chunks of "
           << plan.options.tileCols << ")";
      if (n > 0) {
        int64_t useful = 0, executed = 0, tiles = 0, partial = 0;
        for (const TileList &t : inst.heads[h].pieces[p].classes) {
          useful += t.useful;
          executed += t.executed;
          tiles += static_cast<int64_t>(t.tiles.size());
          for (const TileList::Tile &tile : t.tiles)
            partial += tile.maskOffset >= 0;
        }
        char buf[160];
        std::snprintf(buf, sizeof buf, "\n    at n=%lld: useful %lld, executed %lld (%.3fx), tiles %lld (%lld partial)",
                      static_cast<long long>(n), static_cast<long long>(useful),
                      static_cast<long long>(executed), useful ? double(executed) / double(useful) : 1.0,
                      static_cast<long long>(tiles), static_cast<long long>(partial));
        os << buf;
      }
      os << "\n" << ir::printSet(*piece.set, nullptr, 4);
    }
    if (n > 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "  total at n=%lld: executed/useful = %.3f\n",
                    static_cast<long long>(n),
                    inst.heads[h].useful ? double(inst.heads[h].executed) / double(inst.heads[h].useful) : 1.0);
      os << buf;
    }
  }
  return os.str();
}

} // namespace attnc::plan
