//===- Score.h - Score modifiers: what a pattern does to allowed logits ---===//
//
// `score EXPR` rewrites the scaled logit s = q·k/√d of every allowed pair;
// `sink EXPR` adds exp(EXPR) to every row's softmax denominator (a logit
// with no value row). Both are float expressions (ScoreExpr) over s, the
// query i, the key j, the head h, the length n, constants (parameters are
// folded) and reads of float inputs (`input NAME : float[DIMS]`), whose
// indices are integer-valued ScoreExprs.
//
// A ScoreExpr is a tree, as Sema typed it: `isInt` nodes are integer-valued
// (i, j, h, n, integer arithmetic with floor division and non-negative
// modulo, floor(x)); the others are float. Conditions (comparisons, &&, ||,
// !) are 1 or 0. The runtime compiles the tree into a vector program over a
// tile of pairs, and its derivatives (by s and by each input read) into the
// backward's (ScoreProgram.h in the runtime); evalScore below is the scalar
// meaning of the tree that both follow.
//
// Integer-valued nodes are computed exactly while their values stay within
// ±2^24 (the vector programs compute them in f32); positions beyond that are
// refused by the runtime for patterns that score with them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/support/SourceRange.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnc {

enum class ScoreOp {
  Const,                  ///< value
  S, I, J, H, N,          ///< the scaled logit (float); query, key, head, length (int)
  Input,                  ///< input[args...]: an entry of float input `input` (its index in PatternIR::inputs)
  Add, Sub, Mul, Div,     ///< Div: true division of floats; of two ints, floor division (IDiv)
  IDiv, Mod,              ///< integer floor division and non-negative modulo (divisor >= 1)
  Neg, Abs, Min, Max,     ///< Min / Max: two or more operands
  Tanh, Exp, Log, Floor,  ///< Floor: float -> int
  Where,                  ///< where(args[0], args[1], args[2]): args[0] != 0 ? args[1] : args[2]
  Lt, Le, Gt, Ge, Eq, Ne, And, Or, Not, ///< 1 or 0
};

struct ScoreExpr;
using ScoreRef = std::shared_ptr<const ScoreExpr>;

struct ScoreExpr {
  ScoreOp op = ScoreOp::Const;
  bool isInt = false;      ///< integer-valued (Sema's type)
  double value = 0;        ///< Const
  int64_t input = -1;      ///< Input: the input's index among the pattern's declarations
  std::vector<ScoreRef> args;
  SourceRange loc;

  static ScoreRef constant(double v, bool isInt, SourceRange loc = {});
  static ScoreRef make(ScoreOp op, std::vector<ScoreRef> args, bool isInt, SourceRange loc = {});
  static ScoreRef read(int64_t input, std::vector<ScoreRef> indices, SourceRange loc = {});
};

/// Whether the tree mentions op anywhere (e.g. ScoreOp::S, ScoreOp::J).
bool mentions(const ScoreExpr &e, ScoreOp op);

/// Equal trees: the same operators, types, inputs and values (bit for bit,
/// NaN equal to NaN), ignoring source locations.
bool structurallyEqual(const ScoreExpr &a, const ScoreExpr &b);

/// The operator's name in IrText ("add", "idiv", "tanh", "where", ...).
const char *scoreOpName(ScoreOp op);

/// How many levels the tree nests (a leaf is 1).
size_t scoreDepth(const ScoreExpr &e);

/// A conservative range of an integer-valued tree for i, j in [0, n),
/// n >= 1 and any head h >= 0 (INT64_MIN / INT64_MAX: unbounded). Sema and
/// parseScoreText refuse an integer divisor or modulus whose lo is below 1.
struct ScoreIntRange {
  int64_t lo, hi;
};
ScoreIntRange scoreIntRange(const ScoreExpr &e);

/// `cap * tanh(s / cap)`: source-like rendering, input reads by name.
std::string printScore(const ScoreExpr &e, const std::vector<std::string> &inputNames);

/// The s-expression of IrText ("(mul (const 20) (tanh (div s (const 20))))")
/// and its parser; parseScoreText returns null and sets `error` on bad text.
///
/// Atoms: s i j h n, and integer constants as bare decimal integers ("31").
/// `(const V)` is a float constant, V printed with "%.17g" (so it reads back
/// bit for bit; "nan", "inf" and "-inf" included); `(input K IDX...)` reads
/// float input K (its index among the pattern's inputs); every other node is
/// `(NAME ARGS...)` with scoreOpName's names. The parser rebuilds each node's
/// type from its operator and operands, and refuses text Sema could not have
/// made: wrong operand counts, integer operators (idiv, mod, floor's result,
/// indices) on floats, a div of two integers (that is idiv), an integer
/// divisor that may be below 1, nesting past 512 levels, input indices
/// outside [0, numInputs). Whether an input is a float one of the right rank
/// is checked against the declarations by readIr (IrText.h).
std::string scoreText(const ScoreExpr &e);
ScoreRef parseScoreText(const std::string &text, size_t numInputs, std::string &error);

/// A float input's values for one call, row-major over its dimensions.
struct FloatInput {
  const float *values = nullptr;
  std::vector<int64_t> dims;
};

/// What a scalar evaluation sees.
struct ScoreEnv {
  double s = 0;
  int64_t i = 0, j = 0, h = 0, n = 1;
  /// Indexed like PatternIR::inputs (entries of int inputs are ignored).
  const std::vector<FloatInput> *inputs = nullptr;
};

/// The value of `e` in double precision (reads outside an input throw
/// InputError naming it, through `inputNames`).
///
/// Integer-valued nodes are exact in int64 (floor division and non-negative
/// modulo, as Term.h; +, -, * wrap modulo 2^64); float nodes follow IEEE
/// double: log(0) is -inf, log of a negative NaN, x / 0.0 is +-inf (0 / 0.0
/// NaN), exp overflows to inf. min and max are fmin / fmax (a NaN operand is
/// ignored). floor(x) is the integer floor of x, saturated to +-2^62; NaN
/// floors to 0. where(c, a, b) evaluates only the branch c selects, and &&
/// and || only what decides them (as in C), so a read that a condition
/// guards is not made where the condition excludes it.
double evalScore(const ScoreExpr &e, const ScoreEnv &env, const std::vector<std::string> &inputNames);

} // namespace attnc
