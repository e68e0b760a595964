//===- PredicateLanes.h - A predicate evaluated over a run of keys --------===//
//
// A `predicate` generator is the set of keys j where a condition over i and
// j holds, found key by key. Evaluating its term tree per pair costs a
// call and a switch per node, and recomputes every part that does not read
// j (NATTEN's clamped window centre, a tile's coordinates of the query) at
// every key. PredicateLanes compiles the condition once into straight-line
// code over lanes of keys: the parts free of j are evaluated once per row
// (by the tree evaluator, so their meaning is the same), the rest per lane
// with the tree evaluator's arithmetic (wrapping +, -, *; floor division and
// a non-negative modulo by a positive divisor). A condition that reads data
// (an input, `in`) is not compiled, and a row whose lanes would divide by a
// value below 1 (which the tree's short-circuit of && and || may avoid) is
// not answered: the tree evaluates those (RowEvaluator).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/IntervalSet.h"
#include "attnc/plan/Term.h"

#include <cstdint>
#include <vector>

namespace attnc::ir {

class PredicateLanes {
public:
  /// Compiles `cond` (a Bool term); ok() says whether it could.
  explicit PredicateLanes(const Term &cond);
  bool ok() const { return ok_; }

  /// Appends the keys j in [lo, hi) where the condition holds at `row`
  /// (its i, n and h; j is set here) to `out` as intervals, after any it
  /// holds (which end at or before lo). false, with `out` as it was, when
  /// the condition is not compiled or the row's lanes divide by a value
  /// below 1: the tree evaluator decides those.
  bool keys(const Env &row, int64_t lo, int64_t hi, IntervalSet &out) const;

  static constexpr int kLanes = 64;

private:
  enum class K : uint8_t {
    Row, ///< a part free of j: evaluated once per row by the tree evaluator
    J, Add, Sub, Mul, Div, Mod, Neg, Abs, Min, Max, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not,
  };
  struct Instr {
    K kind;
    int16_t out = -1, a = -1, b = -1;
    const Term *row = nullptr; ///< Row: the part, kept alive by the condition
  };
  int16_t emit(const Term &t);
  bool keysByLanes(const Env &row, int64_t lo, int64_t hi, IntervalSet &out) const;

  std::vector<Instr> code_;
  int16_t result_ = -1;
  int slots_ = 0;
  bool ok_ = true;
};

} // namespace attnc::ir
