//===- Csr.h - Compressed sparse rows of one head for a bound n -----------===//
//
// The connectivity structure the kernels consume: pos[n + 1] and crd[nnz]
// (32-bit, sorted keys per row), built from the closed-form row sets in
// O(nnz) time and memory. Never materialises an n x n mask.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::ir {

struct Csr {
  int64_t n = 0;
  std::vector<int32_t> pos; ///< n + 1 offsets into crd
  std::vector<int32_t> crd; ///< keys, sorted within each row
  int64_t nnz() const { return static_cast<int64_t>(crd.size()); }
};

/// Builds the CSR of `set` at length n. Returns false and sets `error` when
/// n or nnz does not fit the 32-bit positions.
bool buildCsr(const SetRef &set, int64_t n, Csr &out, std::string &error);

} // namespace attnc::ir
