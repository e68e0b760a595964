//===- IrText.h - The canonical pattern IR as stable text -----------------===//
//
// A kernel file carries its pattern's canonical IR in this form (section
// "IR  "), so that the runtime rebuilds the plan for any n without the
// parser or Sema, and the JIT keys its cache on exactly what determines a
// kernel. One line per fact, sets and terms as prefix expressions:
//
//   attnc-ir 1
//   pattern fixed heads=1 declared=0 causal=1
//   param l 128
//   head 0 (union (intersect (block-diag 128) (band - 0)) (intersect (stripe 128 120 127) (band - 0)))
//
// Inputs: `input NAME DIM...` (int) and `input NAME float DIM...` (a float
// input, 1 to 3 dimensions, whose h stands for the call's head count), in
// declaration order before the heads. A pattern with a score modifier ends
// with `score EXPR` and / or `sink EXPR`, EXPR the s-expression of Score.h
// (scoreText), e.g.
//
//   input slope float h
//   score (add s (mul (input 0 h) (sub j i)))
//   sink (input 1 h)
//
// Terms: integers, #t / #f, the variables i j n h, and (OP ARGS...) with the
// operator names of Term.h (add, div, lt, in, builder...). A band's '-' is an
// unbounded side; a key-range's '_' a missing bound, and so a coord-range's,
// which reads `(coord-range s m LO HI)` for LO <= (j / s) % m <= HI. Source locations and
// Sema's terms (the test oracle's input) are not kept.
//
// readIr checks everything it reads (names, arities, types, nesting depth,
// moduli and divisors >= 1) and fails with a message instead of building a
// tree that would break an invariant later: a kernel file is input.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <string>
#include <string_view>

namespace attnc::ir {

/// The text form of `ir` (deterministic: equal trees give equal text).
std::string writeIr(const PatternIR &ir);

/// Parses the text form. Returns false and sets `error` on malformed text.
bool readIr(std::string_view text, PatternIR &out, std::string &error);

} // namespace attnc::ir
