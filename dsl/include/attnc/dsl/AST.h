//===- AST.h - Syntax tree of the pattern language ------------------------===//
//
// The parser's output: a faithful, untyped tree of what the user wrote, every
// node with its source range. Names are not resolved and types are not known
// here; compiler/Sema does both. `-` is kept as one operator: Sema decides
// whether it is integer subtraction or set difference.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/dsl/Diagnostics.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnc::dsl {

enum class ExprKind {
  Int,        ///< 42
  Float,      ///< 0.5, 1e-3 (scores only)
  Bool,       ///< true / false
  Name,       ///< i, j, h, n, a param, a let or an input
  Index,      ///< b[j], sel[i / B, k]: `name` and the indices as operands (maybe none)
  Unary,      ///< -x, !p
  Binary,     ///< x + y, p && q, A | B, A & B, A - B, A else B ...
  Compare,    ///< a < b <= c (a chain: operands.size() == ops.size() + 1)
  In,         ///< x in S
  Call,       ///< abs(x), min(a, b), random_blocks(b, r, seed)
  SetBuilder, ///< { j : predicate }
  SetRange,   ///< { a .. b } (inclusive)
  SetList,    ///< { a, b, c } or {}
};

enum class UnaryOp { Neg, Not };
/// Else is the per-row fallback `A else B`, the loosest operator, grouping
/// to the right.
enum class BinaryOp { Add, Sub, Mul, Div, Mod, And, Or, Union, Intersect, Else };
enum class CompareOp { Eq, Ne, Lt, Le, Gt, Ge };

const char *spelling(UnaryOp op);
const char *spelling(BinaryOp op);
const char *spelling(CompareOp op);

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind;
  SourceRange range;           ///< The expression itself, without parentheses around it.
  /// The outermost parentheses around the expression, `(a + b)`; invalid
  /// when it has none. Diagnostics about the expression quote `range`; an
  /// enclosing node's range covers `outerRange()`, so that `(a + b) * c` is
  /// quoted whole.
  SourceRange parenRange;
  int64_t intValue = 0;        ///< Int
  double floatValue = 0;       ///< Float
  bool boolValue = false;      ///< Bool
  std::string name;            ///< Name, Index (input), Call (callee), SetBuilder (bound variable)
  SourceRange nameRange;       ///< Index input / Call callee / SetBuilder variable
  SourceRange opRange;         ///< Binary: the operator token
  UnaryOp unaryOp = UnaryOp::Neg;
  BinaryOp binaryOp = BinaryOp::Add;
  std::vector<CompareOp> compareOps; ///< Compare
  std::vector<ExprPtr> operands;
  /// How many levels the expression nests, its own node and its parentheses
  /// included: a name is 1, `(x)` 2, `-(x + 1)` 4, `a < b < c` 3 (each
  /// comparison of a chain is a level: Sema lowers the chain to a nest of
  /// '&&'). The parser never returns an expression deeper than
  /// kMaxExprNesting (Parser.h), so every recursive walk of the tree is
  /// bounded by it.
  unsigned nesting = 1;

  /// `range` with the parentheses around it, if any.
  SourceRange outerRange() const { return parenRange.isValid() ? parenRange : range; }
};

enum class StmtKind {
  Param,       ///< param NAME = EXPR
  Require,     ///< require EXPR [: "message"]
  Causal,      ///< causal
  Heads,       ///< heads EXPR
  Let,         ///< let NAME = EXPR
  Attend,      ///< attend SET
  HeadAttends, ///< head EXPR attends SET
  Input,       ///< input NAME : TYPE[DIM, ...]
  Score,       ///< score EXPR (the allowed pairs' logits rewritten)
  Sink,        ///< sink EXPR (exp(EXPR) added to each row's softmax denominator)
};

struct Stmt {
  StmtKind kind;
  SourceRange range;     ///< The whole statement.
  std::string name;      ///< Param / Let / Input
  SourceRange nameRange; ///< Param / Let / Input
  ExprPtr value;         ///< Param default, Require condition, Heads count, Let value, the set, Score / Sink expression
  ExprPtr head;          ///< HeadAttends: the head index
  std::string message;   ///< Require: optional message
  std::string elementType;   ///< Input: the word after ':' ("int" or "float")
  SourceRange typeRange;     ///< Input: that word
  std::vector<ExprPtr> dims; ///< Input: the dimensions, one or more as written
};

struct PatternDecl {
  std::string name;
  SourceRange nameRange;
  SourceRange range;
  std::vector<Stmt> body;
};

/// One parsed `.attn` buffer.
struct Module {
  uint32_t buffer = 0;
  std::vector<PatternDecl> patterns;
};

/// Prints the tree as indented S-expressions (`attnc emit --stage ast`).
std::string printAst(const Module &module, const SourceManager &sources);
/// Prints one expression in source-like syntax, fully parenthesised where
/// precedence needs it (used in diagnostics and the IR printer).
std::string printExpr(const Expr &expr);

} // namespace attnc::dsl
