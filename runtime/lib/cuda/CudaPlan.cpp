//===- CudaPlan.cpp - The plan as tables the CUDA kernels read ------------===//
#include "CudaPlan.h"

#include "attnc/support/Check.h"

#include <algorithm>
#include <bit>

namespace attnc::rt::cuda {

namespace {

uint64_t lowBits(int64_t count) { return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1; }

/// Appends `keys` and `masks` as one forward item's tiles (padded to 64).
void addForwardItem(SetTables &t, int64_t row0, int64_t rowStride, int64_t rows, const std::vector<int32_t> &keys,
                    const std::vector<uint64_t> &masks) {
  FwdItem item{};
  item.slot = -1;
  item.row0 = static_cast<int32_t>(row0);
  item.rowStride = static_cast<int32_t>(rowStride);
  item.rows = static_cast<int32_t>(rows);
  item.keyBegin = static_cast<int32_t>(t.fwdKeys.size());
  item.numTiles = static_cast<int32_t>((keys.size() + kTileKeys - 1) / kTileKeys);
  const uint64_t all = lowBits(rows);
  for (int32_t tile = 0; tile < item.numTiles; ++tile) {
    bool full = true;
    for (size_t e = size_t(tile) * kTileKeys; e < size_t(tile + 1) * kTileKeys; ++e) {
      const bool real = e < keys.size();
      t.fwdKeys.push_back(real ? keys[e] : 0);
      t.fwdMasks.push_back(real ? masks[e] : 0);
      full = full && real && masks[e] == all;
    }
    t.fwdFull.push_back(full ? 1 : 0);
  }
  t.fwdItems.push_back(item);
}

/// One piece's (or residue class's) row blocks in its own key space: keys
/// are positions (row-tiles) or class-local u (relayout, key = keyBase + u
/// stride), rows are query(firstRow + r).
struct SourceBlocks {
  std::vector<plan::BlockTiles> blocks;
  int64_t keySpace = 0;            ///< keys lie in [0, keySpace)
  int64_t keyBase = 0, keyStride = 1;
  const plan::BlockSource *source = nullptr;
};

/// The backward items of one piece (or class): its keys that some row has,
/// in order, cut into groups of 64, each with the rows that have them.
void addBackwardItems(SetTables &t, const SourceBlocks &sb) {
  std::vector<int32_t> rank(static_cast<size_t>(sb.keySpace), -1);
  for (const plan::BlockTiles &b : sb.blocks)
    for (int32_t k : b.keys)
      rank[static_cast<size_t>(k)] = 0;
  int32_t used = 0;
  std::vector<int32_t> groupKeys;
  for (int64_t k = 0; k < sb.keySpace; ++k)
    if (rank[size_t(k)] == 0) {
      rank[size_t(k)] = used++;
      groupKeys.push_back(static_cast<int32_t>(sb.keyBase + k * sb.keyStride));
    }
  if (used == 0)
    return;
  const int32_t groups = (used + kTileKeys - 1) / kTileKeys;
  std::vector<std::vector<std::pair<int32_t, uint64_t>>> rows(static_cast<size_t>(groups));
  uint64_t cols[64];
  for (const plan::BlockTiles &b : sb.blocks) {
    // Entries are ascending in key, so each group's are one run.
    size_t e = 0;
    while (e < b.keys.size()) {
      const int32_t g = rank[size_t(b.keys[e])] / kTileKeys;
      std::fill(cols, cols + 64, 0);
      uint64_t everyRow = 0;
      for (; e < b.keys.size() && rank[size_t(b.keys[e])] / kTileKeys == g; ++e) {
        const uint64_t bit = uint64_t{1} << (rank[size_t(b.keys[e])] % kTileKeys);
        if (b.masks[e] == b.allRows) {
          everyRow |= bit;
          continue;
        }
        for (uint64_t m = b.masks[e]; m; m &= m - 1)
          cols[std::countr_zero(m)] |= bit;
      }
      for (int r = 0; r < b.rows; ++r)
        if (const uint64_t c = cols[r] | everyRow)
          rows[size_t(g)].emplace_back(static_cast<int32_t>(sb.source->query(b.firstRow + r)), c);
    }
  }
  for (int32_t g = 0; g < groups; ++g) {
    BwdItem item{};
    item.keyBegin = static_cast<int32_t>(t.bwdKeys.size());
    item.numKeys = std::min(kTileKeys, used - g * kTileKeys);
    item.rowBegin = static_cast<int32_t>(t.bwdRows.size());
    const auto &list = rows[size_t(g)];
    item.numTiles = static_cast<int32_t>((list.size() + kTileRows - 1) / kTileRows);
    for (int u = 0; u < kTileKeys; ++u)
      t.bwdKeys.push_back(u < item.numKeys ? groupKeys[size_t(g * kTileKeys + u)] : 0);
    const uint64_t all = lowBits(item.numKeys);
    for (int32_t tile = 0; tile < item.numTiles; ++tile) {
      bool full = true;
      for (size_t e = size_t(tile) * kTileRows; e < size_t(tile + 1) * kTileRows; ++e) {
        const bool real = e < list.size();
        t.bwdRows.push_back(real ? list[e].first : 0);
        t.bwdMasks.push_back(real ? list[e].second : 0);
        full = full && real && list[e].second == all;
      }
      t.bwdFull.push_back(full ? 1 : 0);
    }
    t.bwdItems.push_back(item);
  }
}

/// The tiles at which items of a launch are cut into chunks.
template <class Item> int32_t chunkTiles(const std::vector<Item> &items) {
  int64_t total = 0;
  for (const Item &x : items)
    total += x.numTiles;
  const int64_t count = static_cast<int64_t>(items.size());
  const int64_t mean = count ? (total + count - 1) / count : 0;
  return static_cast<int32_t>(std::max<int64_t>(kSplitTiles, kSplitOverMean * mean));
}

/// Ends a forward launch of the items from `begin` on: long items cut into
/// chunks (a split launch before it), each launch's items longest first.
void closeForwardLaunch(SetTables &t, size_t begin, bool readsState, bool writesState) {
  std::vector<FwdItem> items(t.fwdItems.begin() + static_cast<std::ptrdiff_t>(begin), t.fwdItems.end());
  t.fwdItems.resize(begin);
  const int32_t most = chunkTiles(items);
  std::vector<FwdItem> chunks;
  for (FwdItem &x : items) {
    if (x.numTiles <= most)
      continue;
    const int32_t count = (x.numTiles + most - 1) / most, per = (x.numTiles + count - 1) / count;
    x.mergeBegin = t.slots;
    x.mergeCount = count - 1;
    for (int32_t c = 1; c < count; ++c) {
      FwdItem chunk = x;
      chunk.keyBegin = x.keyBegin + c * per * kTileKeys;
      chunk.numTiles = std::min(per, x.numTiles - c * per);
      chunk.slot = t.slots++;
      chunk.mergeBegin = chunk.mergeCount = 0;
      chunks.push_back(chunk);
    }
    x.numTiles = per;
  }
  auto longestFirst = [](const FwdItem &a, const FwdItem &b) { return a.numTiles > b.numTiles; };
  std::stable_sort(chunks.begin(), chunks.end(), longestFirst);
  std::stable_sort(items.begin(), items.end(), longestFirst);
  if (!chunks.empty()) {
    t.fwdLaunches.push_back({static_cast<int32_t>(t.fwdItems.size()), static_cast<int32_t>(chunks.size()), false,
                             false, true});
    t.fwdItems.insert(t.fwdItems.end(), chunks.begin(), chunks.end());
  }
  t.fwdLaunches.push_back({static_cast<int32_t>(t.fwdItems.size()), static_cast<int32_t>(items.size()), readsState,
                           writesState, false});
  t.fwdItems.insert(t.fwdItems.end(), items.begin(), items.end());
}

/// Ends a backward launch of the items from `begin` on: long groups' rows
/// cut into chunks (CTAs of their own), longest first.
void closeBackwardLaunch(SetTables &t, size_t begin) {
  std::vector<BwdItem> items(t.bwdItems.begin() + static_cast<std::ptrdiff_t>(begin), t.bwdItems.end());
  t.bwdItems.resize(begin);
  const int32_t most = chunkTiles(items);
  std::vector<BwdItem> out;
  for (const BwdItem &x : items) {
    if (x.numTiles <= most) {
      out.push_back(x);
      continue;
    }
    const int32_t count = (x.numTiles + most - 1) / most, per = (x.numTiles + count - 1) / count;
    for (int32_t c = 0; c * per < x.numTiles; ++c) {
      BwdItem chunk = x;
      chunk.rowBegin = x.rowBegin + c * per * kTileRows;
      chunk.numTiles = std::min(per, x.numTiles - c * per);
      chunk.chunk = 1;
      out.push_back(chunk);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const BwdItem &a, const BwdItem &b) { return a.numTiles > b.numTiles; });
  t.bwdLaunches.push_back({static_cast<int32_t>(t.bwdItems.size()), static_cast<int32_t>(out.size())});
  t.bwdItems.insert(t.bwdItems.end(), out.begin(), out.end());
}

SourceBlocks blocksOf(const plan::BlockSource &src, bool relayout, int64_t n) {
  SourceBlocks sb;
  sb.source = &src;
  sb.keySpace = relayout ? src.keyRows() : n;
  sb.keyBase = relayout ? src.keyClass() : 0;
  sb.keyStride = relayout ? src.rowStride() : 1;
  plan::BlockShape shape;
  sb.blocks.resize(static_cast<size_t>(src.numBlocks()));
  for (int64_t b = 0; b < src.numBlocks(); ++b) {
    src.build(b, shape);
    sb.blocks[size_t(b)].expand(shape, relayout);
  }
  return sb;
}

SetTables buildSet(const plan::Plan &plan, const plan::HeadPlan &hp, int64_t n) {
  SetTables t;
  // Relayout pieces first: each is a launch that writes the row state.
  std::vector<SourceBlocks> rowTiles;
  std::vector<std::unique_ptr<plan::BlockSource>> sources;
  bool stateWritten = false;
  for (const plan::Piece &piece : hp.pieces) {
    const bool relayout = piece.strategy == plan::Strategy::ResidueRelayout;
    const int32_t fwdBegin = static_cast<int32_t>(t.fwdItems.size());
    for (int64_t c = 0; c < plan::numClasses(piece, n); ++c) {
      sources.push_back(std::make_unique<plan::BlockSource>(plan, piece, n, c));
      SourceBlocks sb = blocksOf(*sources.back(), relayout, n);
      addBackwardItems(t, sb);
      if (!relayout) {
        rowTiles.push_back(std::move(sb));
        continue;
      }
      for (const plan::BlockTiles &b : sb.blocks) {
        std::vector<int32_t> keys(b.keys.size());
        for (size_t e = 0; e < keys.size(); ++e)
          keys[e] = static_cast<int32_t>(sb.keyBase + int64_t{b.keys[e]} * sb.keyStride);
        if (!keys.empty())
          addForwardItem(t, sb.source->query(b.firstRow), sb.source->rowStride(), b.rows, keys, b.masks);
      }
    }
    if (relayout) {
      closeForwardLaunch(t, size_t(fwdBegin), stateWritten, true);
      stateWritten = true;
    }
  }
  // The row-tiles pieces merged per block of 64 rows: every block gets an
  // item (the rows are written even where no piece has keys).
  const int32_t fwdBegin = static_cast<int32_t>(t.fwdItems.size());
  const int64_t blocks = (n + kTileRows - 1) / kTileRows;
  std::vector<int32_t> keys;
  std::vector<uint64_t> masks;
  for (int64_t b = 0; b < blocks; ++b) {
    keys.clear();
    masks.clear();
    for (const SourceBlocks &sb : rowTiles) {
      const plan::BlockTiles &bt = sb.blocks[size_t(b)];
      ATTNC_CHECK(bt.firstRow == b * kTileRows, "row-tiles pieces share their blocks");
      const size_t mid = keys.size();
      keys.insert(keys.end(), bt.keys.begin(), bt.keys.end());
      masks.insert(masks.end(), bt.masks.begin(), bt.masks.end());
      if (mid == 0)
        continue;
      // Merge the two sorted runs, OR-ing the masks of a key both hold.
      std::vector<std::pair<int32_t, uint64_t>> merged;
      merged.reserve(keys.size());
      size_t x = 0, y = mid;
      while (x < mid || y < keys.size()) {
        if (y == keys.size() || (x < mid && keys[x] < keys[y]))
          merged.emplace_back(keys[x], masks[x]), ++x;
        else if (x == mid || keys[y] < keys[x])
          merged.emplace_back(keys[y], masks[y]), ++y;
        else
          merged.emplace_back(keys[x], masks[x] | masks[y]), ++x, ++y;
      }
      keys.resize(merged.size());
      masks.resize(merged.size());
      for (size_t e = 0; e < merged.size(); ++e)
        keys[e] = merged[e].first, masks[e] = merged[e].second;
    }
    addForwardItem(t, b * kTileRows, 1, std::min<int64_t>(kTileRows, n - b * kTileRows), keys, masks);
  }
  closeForwardLaunch(t, size_t(fwdBegin), stateWritten, false);
  // Every piece's key groups in one backward launch: each item adds its
  // keys' dK and dV atomically, so pieces that share keys need no order.
  closeBackwardLaunch(t, 0);
  return t;
}

} // namespace

size_t SetTables::bytes() const {
  return fwdItems.size() * sizeof(FwdItem) + fwdKeys.size() * 4 + fwdMasks.size() * 8 + fwdFull.size() +
         bwdItems.size() * sizeof(BwdItem) + bwdKeys.size() * 4 + bwdRows.size() * 4 + bwdMasks.size() * 8 +
         bwdFull.size();
}

plan::Plan gpuPlan(const ir::PatternIR &ir) { return plan::buildPlan(ir, {kTileRows, kTileKeys}); }

SetTables buildSetTables(const plan::Plan &plan, size_t set, int64_t n) {
  ATTNC_CHECK(plan.options.tileRows == kTileRows, "the GPU tables need the plan of gpuPlan");
  return buildSet(plan, plan.heads.at(set), n);
}

std::vector<SetTables> buildTables(const plan::Plan &plan, int64_t n) {
  ATTNC_CHECK(plan.options.tileRows == kTileRows, "the GPU tables need the plan of gpuPlan");
  std::vector<SetTables> out;
  for (const plan::HeadPlan &hp : plan.heads)
    out.push_back(buildSet(plan, hp, n));
  return out;
}

void forEachForwardPair(const SetTables &t, const std::function<void(int64_t, int64_t)> &pair) {
  for (const Launch &launch : t.fwdLaunches)
    for (int32_t i = launch.itemBegin; i < launch.itemBegin + launch.itemCount; ++i) {
      const FwdItem &item = t.fwdItems[size_t(i)];
      for (int32_t tile = 0; tile < item.numTiles; ++tile) {
        const size_t base = size_t(item.keyBegin) + size_t(tile) * kTileKeys;
        const bool full = t.fwdFull[base / kTileKeys] != 0;
        for (int r = 0; r < item.rows; ++r)
          for (int k = 0; k < kTileKeys; ++k)
            if (full || ((t.fwdMasks[base + size_t(k)] >> r) & 1))
              pair(int64_t{item.row0} + int64_t{r} * item.rowStride, t.fwdKeys[base + size_t(k)]);
      }
    }
}

void forEachBackwardPair(const SetTables &t, const std::function<void(int64_t, int64_t)> &pair) {
  for (const Launch &launch : t.bwdLaunches)
    for (int32_t i = launch.itemBegin; i < launch.itemBegin + launch.itemCount; ++i) {
      const BwdItem &item = t.bwdItems[size_t(i)];
      for (int32_t tile = 0; tile < item.numTiles; ++tile) {
        const size_t base = size_t(item.rowBegin) + size_t(tile) * kTileRows;
        const bool full = t.bwdFull[base / kTileRows] != 0;
        for (int r = 0; r < kTileRows; ++r)
          for (int u = 0; u < item.numKeys; ++u)
            if (full || ((t.bwdMasks[base + size_t(r)] >> u) & 1))
              pair(t.bwdRows[base + size_t(r)], t.bwdKeys[size_t(item.keyBegin) + size_t(u)]);
      }
    }
}

TableStats tableStats(const SetTables &t) {
  TableStats s;
  s.items = static_cast<int64_t>(t.fwdItems.size());
  for (const FwdItem &item : t.fwdItems) {
    s.tiles += item.numTiles;
    s.executedFwd += int64_t{item.numTiles} * kTileKeys * kTileRows;
  }
  for (size_t e = 0; e < t.fwdMasks.size(); ++e)
    s.useful += std::popcount(t.fwdMasks[e]);
  for (size_t tile = 0; tile < t.fwdFull.size(); ++tile) {
    if (t.fwdFull[tile]) {
      s.executedFwdWarps += kTileRows * kTileKeys;
      continue;
    }
    for (int w = 0; w < 4; ++w)
      for (int group = 0; group < 4; ++group) {
        uint64_t any = 0;
        for (int k = 0; k < 16; ++k)
          any |= (t.fwdMasks[tile * kTileKeys + size_t(group * 16 + k)] >> (16 * w)) & 0xFFFFu;
        s.executedFwdWarps += any ? 16 * 16 : 0;
      }
  }
  for (const BwdItem &item : t.bwdItems)
    s.executedBwd += int64_t{item.numTiles} * kTileKeys * kTileRows;
  return s;
}

std::vector<TunedVariant> parseCudaTuned(const std::string &text) {
  std::vector<TunedVariant> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(';', start), text.size());
    const std::string entry = text.substr(start, end - start);
    start = end + 1;
    // GPU:dtype:d=variant (the GPU id has no ':', '=' or ';').
    const size_t c1 = entry.find(':'), c2 = c1 == std::string::npos ? c1 : entry.find(':', c1 + 1),
                 eq = entry.find('=');
    if (c1 == std::string::npos || c2 == std::string::npos || eq == std::string::npos || eq < c2 || c1 == 0)
      continue;
    TunedVariant t;
    t.gpu = entry.substr(0, c1);
    t.dtype = entry.substr(c1 + 1, c2 - c1 - 1);
    const std::string d = entry.substr(c2 + 1, eq - c2 - 1), v = entry.substr(eq + 1);
    if (d.empty() || v.size() != 1 || d.find_first_not_of("0123456789") != std::string::npos || d.size() > 6 ||
        v[0] < '0' || v[0] > '0' + kLastForwardVariant)
      continue;
    t.d = std::stoll(d);
    t.variant = v[0] - '0';
    out.push_back(t);
  }
  return out;
}

int tunedVariant(const std::vector<TunedVariant> &tuned, const std::string &gpu, const std::string &dtype, int64_t d,
                 int none) {
  int variant = none;
  for (const TunedVariant &t : tuned) // (the last entry for a GPU, dtype and d wins)
    if (t.gpu == gpu && t.dtype == dtype && t.d == d)
      variant = t.variant;
  return variant;
}

} // namespace attnc::rt::cuda
