//===- CallInputs.h - A call's data for a pattern that reads it -----------===//
//
// The edge where data enters: attnc_input arrays are matched to the
// pattern's `input` declarations by name, checked (dtype, shape, the block
// and token ids a selection reads) and copied into one InputArray per
// distinct (batch, head) they give, equality classes indexed where the
// pattern compares values. Nothing past this point re-checks them. Each
// slice of the call then binds its arrays (Slice::inputs).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <vector>

namespace attnc::rt {

class CallInputs {
public:
  CallInputs() = default;
  CallInputs(const CallInputs &) = delete; // (floats() points into it)
  CallInputs &operator=(const CallInputs &) = delete;
  CallInputs(CallInputs &&) = default;
  CallInputs &operator=(CallInputs &&) = default;
  /// Validates `inputs` for a call of `ir` with `batch` sequences of `n`
  /// keys and `heads` query heads, and builds the arrays with up to
  /// `threads` threads. Throws RunError naming the input at fault. Float
  /// inputs are checked against their dimensions at (n, heads) and copied
  /// to contiguous f32 (floats()).
  CallInputs(const ir::PatternIR &ir, const attnc_input *inputs, int64_t count, int64_t batch, int64_t heads,
             int64_t n, int threads);

  /// What slice (b, h) binds: one array per declared input.
  const InputArrays *slice(int64_t b, int64_t h) const {
    return slices_.empty() ? nullptr : &slices_[static_cast<size_t>(b * heads_ + h)];
  }
  /// The float inputs (score / sink), indexed like the pattern's inputs
  /// (int inputs' entries empty); empty when the pattern has none.
  const std::vector<FloatInput> &floats() const { return floats_; }

private:
  int64_t heads_ = 0;
  std::vector<InputArrays> slices_; ///< [b * heads + h]
  std::vector<FloatInput> floats_;
  std::vector<std::vector<float>> floatValues_; ///< what floats_ point into
};

/// The ids input `index` holds when a selection reads it (`j / B in
/// sel[...]`): each must lie in [-1, limit) at length n; 0 when the pattern
/// reads its values otherwise (any integer).
int64_t inputIdLimit(const ir::PatternIR &ir, size_t index, int64_t n);

/// The call's inputs matched to the pattern's declarations by name, one
/// per declaration in its order: every declared input given once and
/// nothing else, else RunError naming the one at fault.
std::vector<const attnc_input *> matchInputs(const ir::PatternIR &ir, const attnc_input *inputs, int64_t count);

/// Checks float input `decl` given as `t` without reading its values: f32
/// or bf16, the declaration's dimensions at (n, heads) then 1s, strides
/// >= 0 (RunError naming it otherwise). Returns the dimensions.
std::vector<int64_t> checkFloatInput(const InputDecl &decl, const attnc_tensor &t, int64_t n, int64_t heads);

/// Refuses a call without inputs to a kernel whose pattern reads data, and
/// one with inputs to a kernel whose pattern reads none (RunError).
void checkInputsGiven(const ir::PatternIR &ir, int64_t count);

} // namespace attnc::rt
