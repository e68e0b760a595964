//===- Term.h - Typed, resolved expressions of a pattern ------------------===//
//
// Sema turns the AST into Terms: immutable, typed expression trees in which
// parameters are constants, `let`s are inlined and names are resolved. The
// only free variables left are the query i, the key j, the sequence length n
// and (before per-head substitution) the head index h, plus the pattern's
// `input` arrays, which a call gives (Inputs.h): an Input or InputRow term
// names one by its index in the pattern's declarations and reads it only once
// bindInputs (Inputs.h) has given it the call's data.
//
// Arithmetic is on int64 with FLOOR division and a NON-NEGATIVE modulo:
// a / m = floor(a / m) and a % m = a - m * floor(a / m), in [0, m) for m > 0.
// Sema guarantees every divisor is >= 1 for every value its variables can take
// (i, j in [0, n), n >= 1); evaluating a division by a value < 1 is an
// internal error.
//
// A Set term denotes, for every query i, a set of keys j; it is always
// clipped to [0, n). `x in S` means x is in S's key set for the current i.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/support/Check.h"
#include "attnc/support/SourceRange.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

enum class Type { Int, Bool, Set };

enum class Op {
  // Int-valued.
  Const, VarI, VarJ, VarN, VarH, Add, Sub, Mul, Div, Mod, Neg, Abs, Min, Max,
  Input,        ///< NAME[args...]: an entry of input value() (1 index of a 1-D input, 2 of a 2-D one)
  // Bool-valued.
  BoolConst, Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not, In,
  // Set-valued.
  Builder,      ///< { j : args[0] }
  Range,        ///< { args[0] .. args[1] } inclusive
  List,         ///< { args... }
  Union, Intersect, Difference,
  RandomBlocks, ///< random_blocks(block, count, seed): see randomBlocksOf()
  InputRow,     ///< NAME[args[0]] of a 2-D input value(): the row's entries other than -1, as keys
  Fallback,     ///< A else B: row i's keys are A's, or B's where A's are empty
};

/// Which variables a term mentions.
enum VarMask : unsigned { kUsesI = 1, kUsesJ = 2, kUsesN = 4, kUsesH = 8, kUsesData = 16 };

class Term;
using TermRef = std::shared_ptr<const Term>;
struct InputArray;

/// An immutable node. Build only through the `make` functions, which check
/// operand types and fold constants.
class Term {
public:
  Op op() const { return op_; }
  Type type() const { return type_; }
  /// Value of Const / BoolConst (0 or 1); Input / InputRow: the input's index.
  int64_t value() const { return value_; }
  /// Input / InputRow: the call's data once bound (bindInputs), else null.
  const InputArray *data() const { return data_.get(); }
  const std::shared_ptr<const InputArray> &dataRef() const { return data_; }
  const std::vector<TermRef> &args() const { return args_; }
  const TermRef &arg(size_t k) const { return args_[k]; }
  SourceRange loc() const { return loc_; }
  /// Bit set of VarMask.
  unsigned vars() const { return vars_; }
  bool uses(VarMask v) const { return (vars_ & v) != 0; }
  bool isConst() const { return op_ == Op::Const || op_ == Op::BoolConst; }

  static TermRef constant(int64_t v, SourceRange loc = {});
  static TermRef boolean(bool v, SourceRange loc = {});
  static TermRef var(Op which, SourceRange loc = {});
  /// Builds an operation node, folding it if every operand is constant.
  static TermRef make(Op op, std::vector<TermRef> args, SourceRange loc = {});
  /// A read of input `index` (Op::Input with its indices, or Op::InputRow
  /// with the row of a 2-D input); `data` binds it to a call's array.
  static TermRef input(Op op, int64_t index, std::vector<TermRef> indices, SourceRange loc = {},
                       std::shared_ptr<const InputArray> data = nullptr);

private:
  Term(Op op, Type type, int64_t value, std::vector<TermRef> args, SourceRange loc);
  std::shared_ptr<const InputArray> data_;
  Op op_;
  Type type_;
  int64_t value_;
  std::vector<TermRef> args_;
  SourceRange loc_;
  unsigned vars_ = 0;
};

/// Result type of an operator.
Type resultType(Op op);
/// Operand count of an operation (SIZE_MAX: variadic, min/max need one, a list none).
size_t arity(Op op);
/// Type of operand `index` of an operation.
Type operandType(Op op, size_t index);
/// Raises the error of a division by m < 1 (out of line: floorDiv inlines).
[[noreturn]] void divisionByNonPositive(int64_t m);
/// Floor division and non-negative modulo (m >= 1). Inline: the row
/// evaluators divide for every bound of every row (tiled NATTEN's row
/// blocks at n = 65,536 spent a tenth of their time calling it).
inline int64_t floorDiv(int64_t a, int64_t m) {
  if (m < 1) [[unlikely]]
    divisionByNonPositive(m);
  const int64_t q = a / m;
  return a % m != 0 && a < 0 ? q - 1 : q;
}
inline int64_t floorMod(int64_t a, int64_t m) { return a - m * floorDiv(a, m); }

/// Values of the free variables.
struct Env {
  int64_t i = 0, j = 0, n = 1, h = 0;
};

/// The term's value at `env`. +, -, *, unary minus and abs wrap modulo 2^64
/// (Sema refuses constants that overflow; a term kept for evaluation may
/// still overflow at some i, j, and then wraps rather than being undefined).
int64_t evalInt(const Term &t, const Env &env);

/// While one is open (on this thread), evalIntShared keeps the value of each
/// node it computes, so that terms sharing subterms (the bounds a set's
/// comparisons were solved into, each built around the same `let`) compute
/// them once per row. The terms must outlive the scope: a node is known by
/// its address (and the variables), and a scope's values are forgotten
/// when it closes (a scope opened inside another has values of its own).
class SharedTermsScope {
public:
  SharedTermsScope();
  ~SharedTermsScope();
  SharedTermsScope(const SharedTermsScope &) = delete;
  SharedTermsScope &operator=(const SharedTermsScope &) = delete;

private:
  uint64_t outer_; ///< the enclosing scope's generation (0: none)
};
/// evalInt, reusing the values of nodes met before in the open scope (with
/// none open, evalInt itself), and answering a root of an open TermTape's
/// scope at its variables from the tape's values.
int64_t evalIntShared(const Term &t, const Env &env);

/// Integer terms of i and n (a row evaluator's range bounds) compiled into
/// one flat program over their distinct nodes: evaluating it for a row is
/// one pass over an array, not a walk of each term's tree with a lookup per
/// node. Terms that read data, or divide by anything but a positive
/// constant, are left out (evaluated as before). Immutable once built: one
/// tape serves every thread.
class TermTape {
public:
  explicit TermTape(const std::vector<TermRef> &roots);
  /// How many of the roots it holds.
  size_t roots() const { return rootCount_; }
  /// Where root `t`'s value lies in a Scope (Scope::at), or -1 when `t` is
  /// not one of its roots.
  int32_t slotOf(const Term &t) const { return find(&t); }
  /// Sets reached[k] for every node k that node `slot`'s value is computed
  /// from (itself included), constants aside; `reached` has a flag per node.
  void markInputs(int32_t slot, std::vector<char> &reached) const;
  /// How many nodes it has.
  size_t size() const { return nodes_.size(); }

  /// While open (on this thread), evalIntShared(root, env) of one of the
  /// tape's roots at the scope's variables is the value computed here, for
  /// the whole tape at once. Scopes nest.
  class Scope {
  public:
    Scope(const TermTape &tape, const Env &env);
    ~Scope();
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

    /// Root t's value, where t is one of the tape's roots (else false):
    /// what evalIntShared answers at the scope's variables, without its
    /// lookup of the thread's values (a call, for a thread_local of a
    /// shared library).
    bool lookup(const Term &t, int64_t &value) const {
      const int32_t k = tape_->find(&t);
      if (k < 0)
        return false;
      value = values_[k];
      return true;
    }
    /// The value of the tape's node `slot` (TermTape::slotOf).
    int64_t at(int32_t slot) const { return values_[slot]; }

  private:
    const TermTape *tape_;
    const int64_t *values_;
    const TermTape *outerTape_; ///< the enclosing scope's (null: none)
    const int64_t *outerValues_;
    Env outerEnv_;
  };

private:
  struct Node {
    Op op;
    int32_t first = 0, count = 0; ///< its operands: args_[first .. first + count)
    int64_t value = 0;            ///< Const's
  };
  /// The node index of root `t`, or -1.
  int32_t find(const Term *t) const;
  friend int64_t evalIntShared(const Term &t, const Env &env);

  std::vector<Node> nodes_; ///< operands before the nodes that read them
  std::vector<int32_t> args_;
  /// Roots by address, open addressing (a power of two, at most half full).
  std::vector<std::pair<const Term *, int32_t>> table_;
  size_t rootCount_ = 0;
};
bool evalBool(const Term &t, const Env &env);
/// Membership of key `env.j` in the set term `t` for query `env.i`, including
/// the implicit clip to [0, n). This is the brute-force oracle's primitive.
bool contains(const Term &t, const Env &env);

/// The key blocks chosen by random_blocks for query block `queryBlock`:
/// `count` distinct blocks among [0, numBlocks), sorted, determined by `seed`
/// and `queryBlock` only (a splitmix64 stream). All blocks when count >=
/// numBlocks.
std::vector<int64_t> randomBlocksOf(int64_t seed, int64_t queryBlock, int64_t count,
                                    int64_t numBlocks);

/// Replaces h by a constant and refolds.
TermRef substituteHead(const TermRef &t, int64_t head);
/// Structural equality, ignoring source locations.
bool structurallyEqual(const Term &a, const Term &b);
/// Source-like rendering: `j / 128 == i / 128`.
std::string printTerm(const Term &t);

/// Conservative integer range of an Int term given i, j in [0, n), n >= 1 and
/// h in [0, numHeads). Sums and constant multiples of i, j and n are bounded
/// together (`n - i` is at least 1); everything else by interval arithmetic.
struct ValueRange {
  int64_t lo, hi; ///< inclusive; INT64_MIN / INT64_MAX stand for unbounded
};
ValueRange rangeOf(const Term &t, int64_t numHeads);

/// The values an Int term of i and n takes over the rows i in [first, last]
/// at a fixed n, or a superset of them, by interval arithmetic (saturating
/// at INT64_MIN / INT64_MAX); nullopt for terms that read j or h or divide by
/// anything but a positive constant. Division and remainder by a constant are
/// exact when the rows stay within one period of it. The plan bounds a row
/// block's key ranges with it.
std::optional<ValueRange> rangeOverRows(const Term &t, int64_t first, int64_t last, int64_t n);

} // namespace attnc
