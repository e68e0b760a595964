//===- Shards.cpp - A sequence's positions shared out across ranks --------===//
#include "attnc/analysis/Shards.h"

#include "KeySegments.h"

#include "attnc/plan/RowEvaluator.h"
#include "attnc/support/Check.h"

#include <algorithm>
#include <memory>
#include <numeric>

namespace attnc::ir {

namespace {

/// One head set's rows at n: as periodic segments where the set allows (a
/// row past the segment table's limits, or a set with a predicate, as an
/// IntervalSet).
class SetRows {
public:
  SetRows(const SetRef &set, int64_t n) : intervals_(set, n) {
    if (SegmentEvaluator::supports(*set))
      segments_ = std::make_unique<SegmentEvaluator>(set, n, table_);
  }

  /// Row i's keys: counted, and added to `keys` when not null.
  int64_t row(int64_t i, KeyUnion *keys) {
    if (segments_ && segments_->row(i, seg_)) {
      if (keys)
        keys->add(seg_);
      return countKeys(table_, seg_, 0, intervals_.n());
    }
    intervals_.row(i, 0, intervals_.n(), set_);
    if (keys)
      keys->add(set_);
    return cardinality(set_);
  }
  const PatternTable &table() const { return table_; }

private:
  PatternTable table_;
  std::unique_ptr<SegmentEvaluator> segments_;
  RowEvaluator intervals_;
  Segments seg_;
  IntervalSet set_;
};

/// The weight of each head set: the heads it serves (one set serving every
/// head when the pattern declares none).
std::vector<int64_t> setWeights(const PatternIR &ir) {
  std::vector<int64_t> w;
  for (const PatternIR::Head &h : ir.heads)
    w.push_back(ir.headsDeclared ? static_cast<int64_t>(h.heads.size()) : 1);
  return w;
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

/// Sorts and merges touching ranges.
void mergeRanges(Ranges &r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto &x : r) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  r.swap(out);
}

/// Keys of `keys` inside the ranges.
int64_t keysIn(const IntervalSet &keys, const Ranges &ranges) {
  int64_t total = 0;
  for (const auto &[lo, hi] : ranges)
    total += cardinality(clip(keys, lo, hi));
  return total;
}

} // namespace

double ShardPlan::imbalance() const {
  if (pairs.empty())
    return 1;
  const double sum = std::accumulate(pairs.begin(), pairs.end(), 0.0);
  if (sum <= 0)
    return 1;
  return *std::max_element(pairs.begin(), pairs.end()) / (sum / static_cast<double>(pairs.size()));
}

namespace {

constexpr double kBalanced = 1.05; ///< a layout within this of the mean pairs per rank is balanced

/// A layout's pairs per rank, and the rows each receives: per rank the keys
/// its rows read (over every head set; each set's segments are spelled out
/// with its own pattern table), less its own.
ShardPlan measure(const PatternIR &ir, const std::vector<int64_t> &weights, int64_t totalWeight, int64_t n,
                  std::vector<Ranges> ranges) {
  const int ranks = static_cast<int>(ranges.size());
  ShardPlan plan;
  plan.n = n;
  plan.ranks = ranks;
  plan.ranges = std::move(ranges);
  std::vector<IntervalSet> reads(static_cast<size_t>(ranks));
  plan.pairs.assign(static_cast<size_t>(ranks), 0.0);
  for (int q = 0; q < ranks; ++q) {
    int64_t pairs = 0;
    for (size_t s = 0; s < ir.heads.size(); ++s) {
      SetRows rows(ir.heads[s].set, n);
      KeyUnion keys;
      for (const auto &[lo, hi] : plan.ranges[static_cast<size_t>(q)])
        for (int64_t i = lo; i < hi; ++i)
          pairs += weights[s] * rows.row(i, &keys);
      reads[static_cast<size_t>(q)] = unite(reads[static_cast<size_t>(q)], keys.keys(&rows.table()));
    }
    plan.pairs[static_cast<size_t>(q)] = static_cast<double>(pairs) / static_cast<double>(totalWeight);
  }
  plan.recvRows.assign(static_cast<size_t>(ranks), 0);
  plan.returnRows.assign(static_cast<size_t>(ranks), 0);
  for (int q = 0; q < ranks; ++q) {
    const IntervalSet &read = reads[static_cast<size_t>(q)];
    plan.recvRows[static_cast<size_t>(q)] = cardinality(read) - keysIn(read, plan.ranges[static_cast<size_t>(q)]);
    for (int o = 0; o < ranks; ++o)
      if (o != q)
        plan.returnRows[static_cast<size_t>(o)] += keysIn(read, plan.ranges[static_cast<size_t>(o)]);
  }
  plan.reads = std::move(reads);
  return plan;
}

} // namespace

ShardPlan shardContext(const PatternIR &ir, int64_t n, int ranks) {
  ATTNC_CHECK(n >= 1 && ranks >= 1, "shardContext needs n >= 1 and ranks >= 1");
  ATTNC_CHECK(!ir.heads.empty(), "a pattern without head sets");
  const std::vector<int64_t> weights = setWeights(ir);
  const int64_t totalWeight = std::accumulate(weights.begin(), weights.end(), int64_t{0});

  // Each row's pairs over every head.
  std::vector<int64_t> rowPairs(static_cast<size_t>(n), 0);
  for (size_t s = 0; s < ir.heads.size(); ++s) {
    SetRows rows(ir.heads[s].set, n);
    for (int64_t i = 0; i < n; ++i)
      rowPairs[static_cast<size_t>(i)] += weights[s] * rows.row(i, nullptr);
  }
  const double total = std::accumulate(rowPairs.begin(), rowPairs.end(), 0.0);
  const double share = total / ranks;

  // Heavy rows (rows whose pairs pass `threshold`: global rows) in order of
  // position, cut into `ranks` consecutive groups of equal pairs, group r to
  // rank r (a row to the first rank whose cumulative share reaches the
  // middle of the row). Global rows come in runs of similar weight, so each
  // rank gets one run of them, a single range to compute, and an equal part
  // of their pairs; one per row, heaviest first to the least loaded rank,
  // balanced no better and scattered them one row per range.
  // Row i appended to a rank's ranges (extending the last one when it ends at i).
  auto addRow = [](Ranges &mine, int64_t i) {
    if (!mine.empty() && mine.back().second == i)
      mine.back().second = i + 1;
    else
      mine.push_back({i, i + 1});
  };
  struct Heavy {
    std::vector<Ranges> ranges;
    std::vector<double> load;
    std::vector<char> is;
    int64_t count = 0;
  };
  auto placeHeavy = [&](double threshold) {
    Heavy h{std::vector<Ranges>(static_cast<size_t>(ranks)), std::vector<double>(static_cast<size_t>(ranks), 0.0),
            std::vector<char>(static_cast<size_t>(n), 0), 0};
    std::vector<int64_t> rows;
    double heavyPairs = 0;
    for (int64_t i = 0; i < n && ranks > 1; ++i)
      if (static_cast<double>(rowPairs[static_cast<size_t>(i)]) > threshold) {
        rows.push_back(i);
        heavyPairs += static_cast<double>(rowPairs[static_cast<size_t>(i)]);
      }
    const double each = heavyPairs / ranks;
    double done = 0;
    size_t r = 0;
    for (int64_t i : rows) {
      const double w = static_cast<double>(rowPairs[static_cast<size_t>(i)]);
      while (r + 1 < static_cast<size_t>(ranks) && done + w / 2 > each * static_cast<double>(r + 1))
        ++r;
      h.load[r] += w;
      done += w;
      addRow(h.ranges[r], i);
      h.is[static_cast<size_t>(i)] = 1;
    }
    h.count = static_cast<int64_t>(rows.size());
    return h;
  };

  // Layout 1, runs: rows past 1/40 of a share placed first; the other rows
  // in order, row i to the first rank whose cumulative room (its share less
  // its heavy rows) reaches the middle of the row, so that errors do not add
  // up from rank to rank. Few K/V rows cross for local patterns; but a rank
  // of heavier rows holds fewer positions.
  const Heavy runsHeavy = placeHeavy(share / 40);
  std::vector<Ranges> runs = runsHeavy.ranges;
  {
    std::vector<double> roomUpTo(static_cast<size_t>(ranks));
    double room = 0;
    for (int r = 0; r < ranks; ++r) {
      room += std::max(0.0, share - runsHeavy.load[static_cast<size_t>(r)]);
      roomUpTo[static_cast<size_t>(r)] = room;
    }
    double done = 0;
    int r = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (runsHeavy.is[static_cast<size_t>(i)])
        continue;
      const double w = static_cast<double>(rowPairs[static_cast<size_t>(i)]);
      while (r + 1 < ranks && done + w / 2 > roomUpTo[static_cast<size_t>(r)])
        ++r;
      addRow(runs[static_cast<size_t>(r)], i);
      done += w;
    }
  }
  // Layout 2, zig-zag: rows of more than 16 times the mean row's pairs (a
  // global row) placed first, then the other rows cut into 2R runs of equal
  // length, rank r taking runs r and 2R - 1 - r. Every rank holds about
  // n / R positions (so it never receives more than ring attention's
  // n (R - 1) / R rows), and rows whose pairs grow linearly with i (causal
  // stripes) balance.
  const Heavy zigHeavy = placeHeavy(std::min(share / 40, 16 * total / static_cast<double>(n)));
  std::vector<Ranges> zigzag = zigHeavy.ranges;
  {
    const int64_t light = n - zigHeavy.count;
    int64_t seen = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (zigHeavy.is[static_cast<size_t>(i)])
        continue;
      const int64_t run = seen++ * 2 * ranks / std::max<int64_t>(light, 1);
      addRow(zigzag[static_cast<size_t>(run < ranks ? run : 2 * ranks - 1 - run)], i);
    }
  }

  ShardPlan best;
  for (std::vector<Ranges> *layout : {&runs, &zigzag}) {
    for (Ranges &mine : *layout)
      mergeRanges(mine);
    ShardPlan plan = measure(ir, weights, totalWeight, n, std::move(*layout));
    plan.layout = layout == &runs ? "runs" : "zigzag";
    const auto maxRecv = [](const ShardPlan &p) { return *std::max_element(p.recvRows.begin(), p.recvRows.end()); };
    const bool balanced = plan.imbalance() <= kBalanced, bestBalanced = best.ranks > 0 && best.imbalance() <= kBalanced;
    if (best.ranks == 0 || (balanced && !bestBalanced) ||
        (balanced == bestBalanced && (balanced ? maxRecv(plan) < maxRecv(best) : plan.imbalance() < best.imbalance())))
      best = std::move(plan);
  }
  return best;
}

} // namespace attnc::ir
