//===- Oracle.h - Brute-force evaluation, the test oracle -----------------===//
//
// Evaluates Sema's Terms directly, pair by pair, with none of the canonical
// IR's machinery: O(n^2) and meant for tests and small pictures only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/analysis/Analysis.h"
#include "attnc/plan/Term.h"

#include <vector>

namespace attnc::oracle {

/// Row-major n x n membership matrix of a Set term.
std::vector<char> denseMask(const Term &set, int64_t n);

ir::RowStats rowStats(const std::vector<char> &mask, int64_t n);
ir::TileStats tileStats(const std::vector<char> &mask, int64_t n, int64_t blockRows,
                        int64_t blockCols);
/// Criterion 2 by breadth-first search on the union of the heads' masks.
ir::Connectivity connectivity(const std::vector<std::vector<char>> &masks, int64_t n,
                              int64_t maxSteps = 64);

} // namespace attnc::oracle
