//===- Inputs.h - Integer arrays a call gives a pattern that reads data ---===//
//
// `input NAME : int[DIMS]` declares an array that every call supplies (LSH
// buckets, document ids, selected blocks). A pattern's terms read it through
// Op::Input (`b[j]`: an entry) and Op::InputRow (`sel[i / B]`: a row of a 2-D
// input as a set of keys, -1 meaning none). Until a call binds them, those
// terms carry an InputArray with the name and rank only; bindInputs
// (PatternIR.h: bindSet) swaps in the call's arrays, one (batch, head) slice
// at a time, and nothing past that point re-checks them.
//
// Reading an entry outside the array throws InputError, which the runtime
// reports as a bad argument naming the input: data never makes a read go
// out of bounds or a kernel compute garbage.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Term.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnc {

/// `input NAME : int[DIMS]` or `input NAME : float[DIMS]`.
///
/// An int input (1 or 2 dimensions over n and constants) is read by sets;
/// a float input (1 to 3 dimensions) only by `score` and `sink` (Score.h),
/// never by a set. In a float input's dimensions Op::VarH stands for
/// `heads`, the call's number of query heads (`float[heads, buckets]`), not
/// for a head index; an int input's dimensions never use it.
struct InputDecl {
  std::string name;
  /// Int terms over n, constants and (float inputs) VarH = the head count;
  /// each >= 1 for every n >= 1 and head count >= 1 (Sema, readIr).
  std::vector<TermRef> dims;
  SourceRange loc;
  bool isFloat = false;
  size_t rank() const { return dims.size(); }
};

/// A read of an input that the data does not allow (an index outside its
/// dimensions, a block id out of range), or a call without it.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One input's values for one slice of a call, or, unbound, its name and
/// rank only (what the pattern's terms hold before a call).
struct InputArray {
  std::string name;
  int rank = 1;
  bool bound = false;
  int64_t rows = 0;             ///< entries of a 1-D input, rows of a 2-D one
  int64_t cols = 1;             ///< 2-D: entries per row
  std::vector<int64_t> values;  ///< rows x cols, row-major
  /// Equality classes (filled by indexClasses): every position sorted by
  /// value, ties in position order, and each position's class as a span
  /// [classBegin, classEnd) of `order`. O(n log n) once per slice.
  std::vector<int32_t> order, classBegin, classEnd;
  /// placeOf[p]: where position p is in `order` (its inverse).
  std::vector<int32_t> placeOf;
  /// An order that lays a canvas `canvasWidth` wide out in tiles of
  /// tileRows x tileCols (plan::tiledLayout): 0 for any other.
  int64_t canvasWidth = 0, tileRows = 0, tileCols = 0;

  /// Entry r of a 1-D input, or (r, c) of a 2-D one; InputError outside.
  int64_t at(int64_t r) const;
  int64_t at(int64_t r, int64_t c) const;
  /// Fills order / classBegin / classEnd (1-D inputs of at most 2^31 entries).
  void indexClasses();
  bool hasClasses() const { return !order.empty() || rows == 0; }
};

using InputArrays = std::vector<std::shared_ptr<const InputArray>>;

/// The unbound array of a declaration (name and rank).
std::shared_ptr<const InputArray> unboundInput(const InputDecl &decl);

/// The term with every Input / InputRow read bound to arrays[its index]
/// (returns `t` itself when it reads no input).
TermRef bindTerm(const TermRef &t, const InputArrays &arrays);

/// A dimension of a declaration at length n (its term evaluated); `heads`,
/// the call's query heads, is what VarH stands for in a float input's dims.
int64_t inputDim(const InputDecl &decl, size_t k, int64_t n, int64_t heads = 1);

/// A lower bound of dimension term `dim` over every n >= 1 and head count
/// >= 1 (VarH read as the head count): Sema and readIr refuse a dimension
/// whose bound is below 1.
int64_t inputDimLowerBound(const Term &dim);

} // namespace attnc
