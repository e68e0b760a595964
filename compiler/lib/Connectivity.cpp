//===- Connectivity.cpp - Sparse Transformer criterion 2 ------------------===//
//
// A breadth-first search per query row over interval sets: R_1 = S(i),
// R_{k+1} = R_k united with S(j) for every j newly reached in step k. Keys are
// expanded from the highest down (in causal patterns later rows see more)
// and the search stops as soon as [0, i] is covered, which keeps the seeds'
// p = 2 patterns to a few hundred row evaluations per query.
//
//===----------------------------------------------------------------------===//
#include "attnc/compiler/Analysis.h"

#include "attnc/compiler/RowEvaluator.h"

#include <algorithm>

namespace attnc::ir {

namespace {

bool coversPrefix(const IntervalSet &r, int64_t i) {
  return !r.empty() && r.front().lo <= 0 && r.front().hi >= i + 1;
}

std::vector<int64_t> rowsToCheck(int64_t n, const ConnectivityOptions &o, bool &exact) {
  std::vector<int64_t> rows;
  exact = n <= o.exactUpTo;
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

} // namespace

Connectivity analyzeConnectivity(const std::vector<SetRef> &heads, int64_t n,
                                 const ConnectivityOptions &options) {
  std::vector<RowEvaluator> evals;
  for (const SetRef &h : heads)
    evals.emplace_back(h, n);
  auto keysOf = [&](int64_t r) {
    IntervalSet out;
    for (const RowEvaluator &e : evals) {
      IntervalSet part = e.row(r);
      out.insert(out.end(), part.begin(), part.end());
    }
    normalize(out);
    return out;
  };

  Connectivity result;
  int64_t worst = 0;
  std::vector<int64_t> rows = rowsToCheck(n, options, result.exact);
  result.rowsChecked = static_cast<int64_t>(rows.size());
  for (int64_t i : rows) {
    IntervalSet reached = keysOf(i);
    IntervalSet frontier = reached;
    int64_t steps = 1;
    while (!coversPrefix(reached, i)) {
      if (frontier.empty() || steps >= options.maxSteps) {
        IntervalSet missing = subtract({{0, i + 1}}, reached);
        result.p.reset();
        result.unreachableWitness = std::make_pair(i, missing.front().lo);
        return result;
      }
      IntervalSet next = reached;
      IntervalSet batch;
      bool done = false;
      int64_t batched = 0;
      for (auto it = frontier.rbegin(); it != frontier.rend() && !done; ++it) {
        for (int64_t j = it->hi - 1; j >= it->lo && !done; --j) {
          IntervalSet keys = keysOf(j);
          batch.insert(batch.end(), keys.begin(), keys.end());
          if (++batched % 32 == 0) {
            normalize(batch);
            next = unite(next, batch);
            batch.clear();
            done = coversPrefix(next, i);
          }
        }
      }
      normalize(batch);
      next = unite(next, batch);
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
