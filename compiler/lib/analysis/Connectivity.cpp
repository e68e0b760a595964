//===- Connectivity.cpp - Sparse Transformer criterion 2 ------------------===//
//
// A breadth-first search per query row over interval sets: R_1 = S(i),
// R_{k+1} = R_k united with S(j) for every j newly reached in step k. Keys are
// expanded from the highest down (in causal patterns later rows see more)
// and the search stops as soon as [0, i] is covered, which keeps the seeds'
// p = 2 patterns to a few hundred row evaluations per query. With fewer
// queries than keys (ConnectivityOptions::firstRow) only the searches start
// from the last rows; their steps go through any row.
//
// The sets are periodic segments (KeySegments.h) where the heads allow: a
// stripe or residue class reached by a row is then one segment, where an
// IntervalSet holds one interval per period and every union along the
// search costs O(n / period) (minutes per query row at n = 2^20). A row
// whose patterns pass the segments' limits is searched over IntervalSets.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Analysis.h"

#include "KeySegments.h"

#include "attnc/plan/RowEvaluator.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <unordered_map>

namespace attnc::ir {

namespace {

bool coversPrefix(const IntervalSet &r, int64_t i) {
  return !r.empty() && r.front().lo <= 0 && r.front().hi >= i + 1;
}

/// The query rows [o.firstRow, n) to search from: all of them, or a sample.
std::vector<int64_t> rowsToCheck(int64_t n, const ConnectivityOptions &o, bool &exact) {
  std::vector<int64_t> rows;
  const int64_t lo = std::clamp<int64_t>(o.firstRow, 0, n), count = n - lo;
  // A sample at least as large as the rows is every row: its first and last
  // rows would otherwise run past [lo, n).
  exact = count <= o.exactUpTo || count <= o.sampleRows;
  if (exact) {
    for (int64_t i = lo; i < n; ++i)
      rows.push_back(i);
    return rows;
  }
  int64_t edge = o.sampleRows / 4;
  for (int64_t i = lo; i < lo + edge; ++i)
    rows.push_back(i);
  for (int64_t i = n - edge; i < n; ++i)
    rows.push_back(i);
  int64_t middle = o.sampleRows - 2 * edge;
  for (int64_t k = 0; k < middle; ++k)
    rows.push_back(lo + edge + (count - 2 * edge) * k / std::max<int64_t>(1, middle));
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

/// `rows` (ascending) in an order that covers their range evenly at every
/// prefix: the first, the last, then the midpoints of the gaps, level by level.
std::vector<int64_t> spreadOrder(const std::vector<int64_t> &rows) {
  const size_t count = rows.size();
  std::vector<int64_t> out;
  if (count == 0)
    return out;
  std::vector<char> taken(count, 0);
  auto take = [&](size_t k) {
    if (!taken[k]) {
      taken[k] = 1;
      out.push_back(rows[k]);
    }
  };
  take(0);
  take(count - 1);
  for (size_t step = count; step > 1; step = (step + 1) / 2)
    for (size_t k = step / 2; k < count; k += step)
      take(k);
  for (size_t k = 0; k < count; ++k)
    take(k);
  return out;
}

/// Unions of the key sets of aligned power-of-two row blocks, built lazily
/// from their halves. Expanding a frontier interval then costs one cached
/// union per aligned block instead of one row evaluation per row.
class BlockUnions {
public:
  static constexpr int kMinLevel = 3;

  BlockUnions(std::function<IntervalSet(int64_t)> keysOf, int64_t n)
      : keysOf_(std::move(keysOf)), n_(n) {}

  IntervalSet row(int64_t r) const { return keysOf_(r); }

  /// Keys of rows [index << level, (index + 1) << level) clipped to n.
  const IntervalSet &block(int level, int64_t index) {
    uint64_t key = (static_cast<uint64_t>(level) << 48) | static_cast<uint64_t>(index);
    if (auto it = cache_.find(key); it != cache_.end())
      return it->second;
    IntervalSet value;
    if (level == kMinLevel) {
      for (int64_t r = index << level; r < std::min(n_, (index + 1) << level); ++r) {
        IntervalSet keys = keysOf_(r);
        value.insert(value.end(), keys.begin(), keys.end());
      }
      normalize(value);
    } else {
      value = unite(block(level - 1, 2 * index), block(level - 1, 2 * index + 1));
    }
    stored_ += static_cast<int64_t>(value.size());
    if (stored_ > kMaxStored) { // Bound memory on adversarial patterns.
      cache_.clear();
      stored_ = 0;
    }
    return cache_[key] = std::move(value);
  }

private:
  static constexpr int64_t kMaxStored = 32 << 20;
  std::function<IntervalSet(int64_t)> keysOf_;
  int64_t n_;
  std::unordered_map<uint64_t, IntervalSet> cache_;
  int64_t stored_ = 0;
};

/// BlockUnions over segments, for every head at once.
class SegmentUnions {
public:
  SegmentUnions(const std::vector<SetRef> &heads, int64_t n) : n_(n) {
    evals_.reserve(heads.size());
    for (const SetRef &h : heads)
      evals_.emplace_back(h, n, table_);
  }
  SegmentUnions(const SegmentUnions &) = delete; // evals_ refer to table_
  SegmentUnions &operator=(const SegmentUnions &) = delete;

  PatternTable &table() { return table_; }

  /// Keys of row r in any head into `out`; false past the segments' limits.
  bool row(int64_t r, Segments &out) {
    if (!evals_[0].row(r, out))
      return false;
    for (size_t h = 1; h < evals_.size(); ++h) {
      if (!evals_[h].row(r, part_) || !combineSegments(table_, SetOp::Unite, out, part_, merged_))
        return false;
      out.swap(merged_);
    }
    return true;
  }

  /// Keys of rows [index << level, (index + 1) << level) clipped to n;
  /// nullptr past the limits. Valid until the next call.
  const Segments *block(int level, int64_t index) {
    uint64_t key = (static_cast<uint64_t>(level) << 48) | static_cast<uint64_t>(index);
    if (auto it = cache_.find(key); it != cache_.end())
      return &it->second;
    Segments value, keys, merged;
    if (level == BlockUnions::kMinLevel) {
      for (int64_t r = index << level; r < std::min(n_, (index + 1) << level); ++r) {
        if (!row(r, keys) || !combineSegments(table_, SetOp::Unite, value, keys, merged))
          return nullptr;
        value.swap(merged);
      }
    } else {
      const Segments *low = block(level - 1, 2 * index);
      if (!low)
        return nullptr;
      Segments first = *low; // the next call may clear the cache
      const Segments *high = block(level - 1, 2 * index + 1);
      if (!high || !combineSegments(table_, SetOp::Unite, first, *high, value))
        return nullptr;
    }
    stored_ += static_cast<int64_t>(value.size());
    if (stored_ > kMaxStored) { // Bound memory on adversarial patterns.
      cache_.clear();
      stored_ = 0;
    }
    return &(cache_[key] = std::move(value));
  }

private:
  static constexpr int64_t kMaxStored = 8 << 20;
  PatternTable table_;
  std::vector<SegmentEvaluator> evals_;
  int64_t n_;
  Segments part_, merged_;
  std::unordered_map<uint64_t, Segments> cache_;
  int64_t stored_ = 0;
};

/// How one query row's search ended.
struct RowReach {
  int64_t steps = 0;              ///< every j <= i reached in this many steps
  std::optional<int64_t> missing; ///< or a key j <= i not reached ...
  bool gaveUp = false;            ///< ... within maxSteps (false: never)
};

/// The level of the largest aligned block of rows that ends at `end` and
/// starts at or after `lo` (0: one row).
int alignedLevel(int64_t end, int64_t lo) {
  int level = 0;
  while (level < 40 && end % (int64_t{2} << level) == 0 && end - (int64_t{2} << level) >= lo)
    ++level;
  return level;
}

RowReach searchIntervals(BlockUnions &unions, int64_t i, int64_t maxSteps) {
  IntervalSet reached = unions.row(i);
  IntervalSet frontier = reached;
  int64_t steps = 1;
  while (!coversPrefix(reached, i)) {
    if (frontier.empty() || steps >= maxSteps) {
      IntervalSet missing = subtract({{0, i + 1}}, reached);
      return {0, missing.front().lo, !frontier.empty()};
    }
    IntervalSet next = reached;
    IntervalSet batch;
    bool done = false;
    auto flush = [&] {
      normalize(batch);
      next = unite(next, batch);
      batch.clear();
      done = coversPrefix(next, i);
    };
    // Highest rows first; each step takes the largest aligned block that
    // ends at the current row.
    for (auto it = frontier.rbegin(); it != frontier.rend() && !done; ++it) {
      int64_t end = it->hi;
      while (end > it->lo && !done) {
        const int level = alignedLevel(end, it->lo);
        int64_t width = int64_t{1} << level;
        if (level >= BlockUnions::kMinLevel) {
          const IntervalSet &keys = unions.block(level, end / width - 1);
          batch.insert(batch.end(), keys.begin(), keys.end());
        } else {
          for (int64_t r = end - 1; r >= end - width; --r) {
            IntervalSet keys = unions.row(r);
            batch.insert(batch.end(), keys.begin(), keys.end());
          }
        }
        end -= width;
        if (batch.size() > 4096)
          flush();
      }
    }
    flush();
    ++steps;
    frontier = subtract(next, reached);
    reached = std::move(next);
  }
  return {steps, std::nullopt, false};
}

/// searchIntervals over segments, in the same order; nullopt past the
/// segments' limits.
std::optional<RowReach> searchSegments(SegmentUnions &unions, int64_t i, int64_t maxSteps) {
  PatternTable &table = unions.table();
  // Not just a first segment of every key: a periodic one may hold [0, i]
  // when i is small.
  auto covers = [&table, i](const Segments &r) { return countKeys(table, r, 0, i + 1) == i + 1; };
  Segments reached, frontier, next, merged, keys;
  if (!unions.row(i, reached))
    return std::nullopt;
  frontier = reached;
  int64_t steps = 1;
  while (!covers(reached)) {
    if (frontier.empty() || steps >= maxSteps) {
      IntervalSet missing = subtract({{0, i + 1}}, expandKeys(table, reached, 0, i + 1));
      return RowReach{0, missing.front().lo, !frontier.empty()};
    }
    next = reached;
    bool done = false;
    auto add = [&](const Segments &more) {
      if (!combineSegments(table, SetOp::Unite, next, more, merged))
        return false;
      next.swap(merged);
      done = covers(next);
      return true;
    };
    // The rows [lo, hi), highest first, by aligned blocks.
    auto expand = [&](int64_t lo, int64_t hi) {
      for (int64_t end = hi; end > lo && !done;) {
        const int level = alignedLevel(end, lo);
        const int64_t width = int64_t{1} << level;
        if (level >= BlockUnions::kMinLevel) {
          const Segments *block = unions.block(level, end / width - 1);
          if (!block || !add(*block))
            return false;
        } else {
          for (int64_t r = end - 1; r >= end - width && !done; --r)
            if (!unions.row(r, keys) || !add(keys))
              return false;
        }
        end -= width;
      }
      return true;
    };
    for (auto seg = frontier.rbegin(); seg != frontier.rend() && !done; ++seg) {
      if (seg->pattern == kEveryKey) {
        if (!expand(seg->lo, seg->hi))
          return std::nullopt;
        continue;
      }
      // A periodic segment's rows, one interval of its pattern at a time.
      const int64_t period = table.period(seg->pattern);
      // A copy: expand() stores new sets in the same table, which may move
      // its entries (ASan caught the reference dangling).
      const IntervalSet pattern = table.keys(seg->pattern);
      for (int64_t base = floorDiv(seg->hi - 1, period) * period; base + period > seg->lo && !done;
           base -= period)
        for (auto x = pattern.rbegin(); x != pattern.rend() && !done; ++x)
          if (!expand(std::max(seg->lo, base + x->lo), std::min(seg->hi, base + x->hi)))
            return std::nullopt;
    }
    ++steps;
    if (!combineSegments(table, SetOp::Subtract, next, reached, frontier))
      return std::nullopt;
    reached.swap(next);
  }
  return RowReach{steps, std::nullopt, false};
}

} // namespace

Connectivity analyzeConnectivity(const std::vector<SetRef> &heads, int64_t n,
                                 const ConnectivityOptions &options) {
  std::vector<RowEvaluator> evals;
  for (const SetRef &h : heads)
    evals.emplace_back(h, n);
  BlockUnions unions(
      [&evals](int64_t r) {
        IntervalSet out;
        for (const RowEvaluator &e : evals) {
          IntervalSet part = e.row(r);
          out.insert(out.end(), part.begin(), part.end());
        }
        normalize(out);
        return out;
      },
      n);
  std::optional<SegmentUnions> segments;
  if (std::all_of(heads.begin(), heads.end(),
                  [](const SetRef &h) { return SegmentEvaluator::supports(*h); }))
    segments.emplace(heads, n);

  Connectivity result;
  int64_t worst = 0;
  std::vector<int64_t> rows = rowsToCheck(n, options, result.exact);
  const auto start = std::chrono::steady_clock::now();
  if (options.timeBudgetSeconds > 0)
    rows = spreadOrder(rows);
  result.rowsChecked = static_cast<int64_t>(rows.size());
  int64_t done = 0;
  for (int64_t i : rows) {
    if (options.timeBudgetSeconds > 0 && done > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            options.timeBudgetSeconds) {
      result.stoppedEarly = true;
      result.exact = false;
      result.rowsChecked = done;
      break;
    }
    ++done;
    std::optional<RowReach> reach;
    if (segments) {
      reach = searchSegments(*segments, i, options.maxSteps);
      if (!reach)
        segments.reset(); // past its limits: IntervalSets from here on
    }
    if (!reach)
      reach = searchIntervals(unions, i, options.maxSteps);
    if (reach->missing) {
      result.p.reset();
      result.unreachableWitness = std::make_pair(i, *reach->missing);
      result.gaveUp = reach->gaveUp;
      return result;
    }
    worst = std::max(worst, reach->steps);
  }
  result.p = worst;
  return result;
}

} // namespace attnc::ir
