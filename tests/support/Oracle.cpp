//===- Oracle.cpp - Brute-force evaluation, the test oracle ---------------===//
#include "support/Oracle.h"

#include <algorithm>
#include <limits>

namespace attnc::oracle {

std::vector<char> denseMask(const Term &set, int64_t n) {
  std::vector<char> mask(static_cast<size_t>(n * n));
  Env env;
  env.n = n;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      env.i = i;
      env.j = j;
      mask[i * n + j] = contains(set, env) ? 1 : 0;
    }
  return mask;
}

ir::RowStats rowStats(const std::vector<char> &mask, int64_t n) {
  ir::RowStats s;
  s.n = n;
  s.minRow = std::numeric_limits<int64_t>::max();
  for (int64_t i = 0; i < n; ++i) {
    int64_t count = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (!mask[i * n + j])
        continue;
      ++count;
      if (j > i) {
        ++s.leaks;
        if (!s.leakWitness)
          s.leakWitness = std::make_pair(i, j);
      }
    }
    s.nnz += count;
    s.minRow = std::min(s.minRow, count);
    s.maxRow = std::max(s.maxRow, count);
    if (count == 0) {
      ++s.emptyRows;
      if (!s.emptyWitness)
        s.emptyWitness = i;
    }
  }
  s.mean = static_cast<double>(s.nnz) / static_cast<double>(n);
  return s;
}

ir::TileStats tileStats(const std::vector<char> &mask, int64_t n, int64_t br, int64_t bc) {
  ir::TileStats t;
  t.blockRows = br;
  t.blockCols = bc;
  int64_t nnz = 0;
  for (int64_t r0 = 0; r0 < n; r0 += br)
    for (int64_t c0 = 0; c0 < n; c0 += bc) {
      int64_t count = 0, area = 0;
      for (int64_t i = r0; i < std::min(n, r0 + br); ++i)
        for (int64_t j = c0; j < std::min(n, c0 + bc); ++j) {
          ++area;
          count += mask[i * n + j];
        }
      nnz += count;
      if (count == 0) {
        ++t.empty;
        continue;
      }
      t.executedPairs += area;
      ++(count == area ? t.full : t.partial);
    }
  t.waste = nnz == 0 ? 1.0 : static_cast<double>(t.executedPairs) / static_cast<double>(nnz);
  return t;
}

ir::Connectivity connectivity(const std::vector<std::vector<char>> &masks, int64_t n,
                              int64_t maxSteps) {
  ir::Connectivity c;
  c.rowsChecked = n;
  auto edge = [&](int64_t a, int64_t b) {
    for (const auto &m : masks)
      if (m[a * n + b])
        return true;
    return false;
  };
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> dist(n, -1);
    std::vector<int64_t> queue;
    for (int64_t j = 0; j < n; ++j)
      if (edge(i, j)) {
        dist[j] = 1;
        queue.push_back(j);
      }
    for (size_t q = 0; q < queue.size(); ++q)
      for (int64_t j = 0; j < n; ++j)
        if (dist[j] < 0 && edge(queue[q], j)) {
          dist[j] = dist[queue[q]] + 1;
          queue.push_back(j);
        }
    for (int64_t j = 0; j <= i; ++j) {
      if (dist[j] < 0 || dist[j] > maxSteps) {
        c.unreachableWitness = std::make_pair(i, j);
        return c;
      }
      worst = std::max(worst, dist[j]);
    }
  }
  c.p = worst;
  return c;
}

} // namespace attnc::oracle
