//===- Connectivity.cpp - Sparse Transformer criterion 2 ------------------===//
//
// A breadth-first search per query row over interval sets: R_1 = S(i),
// R_{k+1} = R_k united with S(j) for every j newly reached in step k. Keys are
// expanded from the highest down (in causal patterns later rows see more)
// and the search stops as soon as [0, i] is covered, which keeps the seeds'
// p = 2 patterns to a few hundred row evaluations per query.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Analysis.h"

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

std::vector<int64_t> rowsToCheck(int64_t n, const ConnectivityOptions &o, bool &exact) {
  std::vector<int64_t> rows;
  // A sample at least as large as the sequence is every row: its first and
  // last rows would otherwise run past [0, n).
  exact = n <= o.exactUpTo || n <= o.sampleRows;
  if (exact) {
    for (int64_t i = 0; i < n; ++i)
      rows.push_back(i);
    return rows;
  }
  int64_t edge = o.sampleRows / 4;
  for (int64_t i = 0; i < edge; ++i)
    rows.push_back(i);
  for (int64_t i = n - edge; i < n; ++i)
    rows.push_back(i);
  int64_t middle = o.sampleRows - 2 * edge;
  for (int64_t k = 0; k < middle; ++k)
    rows.push_back(edge + (n - 2 * edge) * k / std::max<int64_t>(1, middle));
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
    IntervalSet reached = unions.row(i);
    IntervalSet frontier = reached;
    int64_t steps = 1;
    while (!coversPrefix(reached, i)) {
      if (frontier.empty() || steps >= options.maxSteps) {
        IntervalSet missing = subtract({{0, i + 1}}, reached);
        result.p.reset();
        result.unreachableWitness = std::make_pair(i, missing.front().lo);
        result.gaveUp = !frontier.empty();
        return result;
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
          int level = 0;
          while (level < 40 && end % (int64_t{2} << level) == 0 &&
                 end - (int64_t{2} << level) >= it->lo)
            ++level;
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
    worst = std::max(worst, steps);
  }
  result.p = worst;
  return result;
}

} // namespace attnc::ir
