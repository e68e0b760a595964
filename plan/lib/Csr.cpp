//===- Csr.cpp - Compressed sparse rows of one head for a bound n ---------===//
#include "attnc/plan/Csr.h"

#include "attnc/plan/RowEvaluator.h"

#include <limits>

namespace attnc::ir {

bool buildCsr(const SetRef &set, int64_t n, Csr &out, std::string &error) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (n < 1 || n > kMax) {
    error = "sequence length " + std::to_string(n) + " is outside [1, 2^31 - 1]";
    return false;
  }
  RowEvaluator eval(set, n);
  out = Csr{};
  out.n = n;
  out.pos.resize(static_cast<size_t>(n + 1));
  out.pos[0] = 0;
  int64_t nnz = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (const Interval &x : eval.row(i)) {
      nnz += x.size();
      if (nnz > kMax) {
        error = "the pattern has more than 2^31 - 1 pairs at n = " + std::to_string(n) +
                "; 32-bit positions cannot index it";
        return false;
      }
      for (int64_t j = x.lo; j < x.hi; ++j)
        out.crd.push_back(static_cast<int32_t>(j));
    }
    out.pos[i + 1] = static_cast<int32_t>(nnz);
  }
  return true;
}

} // namespace attnc::ir
