//===- PatternIR.h - Canonical generators of a head's key set -------------===//
//
// The pattern IR: per head, a small immutable tree whose leaves are canonical
// generators, each with a closed form for "the keys of row i":
//
//   band          i + lo <= j <= i + hi          (lo/hi may be unbounded)
//   block-diag    j / l == i / l
//   key-range     lo(i, n) <= j <= hi(i, n)       (any j-free bounds)
//   stripe        j % m in [lo, hi]               (0 <= lo <= hi < m)
//   coord-range   lo(i, n) <= (j / s) % m <= hi(i, n)   (a grid coordinate
//                 of j: s = 1 is j % m, the column of a row-major canvas of
//                 width m; any j-free bounds, one interval per period s * m)
//   residue       (i - j) % m == r
//   row-if        cond(i, n) ? every key : none   (global rows: i < g)
//   list          explicit keys e(i, n)
//   random        random_blocks(block, count, seed)
//   predicate     generic cond(i, j, n), evaluated per key (the slow fallback)
//   class         b[j] == b[i] for a 1-D input b: the positions of i's value
//   select        j / B in sel[i / R] for a 2-D input sel: the key blocks
//                 that row block i / R lists (-1: none); B = R = 1 for tokens
//
// combined with union, intersect, difference and fallback (A else B: row
// i's keys are A's, or B's where A's are empty). Class and select read an
// input (Inputs.h): a call binds the tree to its data (bindSet) before any
// row is evaluated; predicates, row-ifs and key ranges may read inputs too. Arithmetic is the Term
// arithmetic (floor '/', non-negative '%'). Every set is clipped to
// [0, n); n need not be a multiple of any block or modulus. The tree is
// symbolic in n: bind n with a RowEvaluator.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Inputs.h"
#include "attnc/plan/IntervalSet.h"
#include "attnc/plan/Score.h"
#include "attnc/plan/Term.h"

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace attnc::ir {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::min();

enum class Gen {
  All, None, Band, BlockDiag, KeyRange, Stripe, Residue, RowIf, List, Random, Predicate,
  Class, Select, CoordRange,
  Union, Intersect, Difference, Fallback,
  Permuted,   ///< run time only: its child with rows and keys renumbered by an input's class order
  WhereEmpty, ///< plan only: B's keys on the rows where A has none (a fallback's last piece)
  Segment,    ///< run time only: in an input's class order, the run of row t's class (a class there)
};

const char *genName(Gen g);

class SetNode;
using SetRef = std::shared_ptr<const SetNode>;

/// One node of the canonical tree. Fields that a kind does not use are zero
/// or null. Build only through the `make*` functions, which validate fields.
class SetNode {
public:
  Gen kind;
  SourceRange loc;
  int64_t lo = 0, hi = 0;  ///< Band: offsets (kUnbounded = none); Stripe: residues
  int64_t modulus = 0;     ///< BlockDiag l, Stripe m, Residue m, Random block, Select R (rows per entry row)
  int64_t residue = 0;     ///< Residue r
  int64_t count = 0;       ///< Random: blocks per query block
  int64_t seed = 0;        ///< Random
  int64_t keyBlock = 0;    ///< Select: B, keys per listed block; CoordRange: s, keys per coordinate step
  int64_t input = -1;      ///< Class, Select: the input's index in PatternIR::inputs
  std::shared_ptr<const InputArray> data; ///< Class, Select: the input (bound or not); Permuted, Segment: the order
  /// Permuted around another input's class: that input's values in this
  /// node's order (values[order[u]]), scanned contiguously for a row's keys.
  std::shared_ptr<const std::vector<int32_t>> valuesInOrder;
  TermRef loTerm, hiTerm;  ///< KeyRange, CoordRange bounds (inclusive; null = unbounded)
  TermRef cond;            ///< RowIf (uses i, n), Predicate (uses i, j, n)
  std::vector<TermRef> elems;    ///< List
  std::vector<SetRef> children;  ///< Union, Intersect (>= 2), Difference (2)

  static SetRef all(SourceRange loc = {});
  static SetRef none(SourceRange loc = {});
  static SetRef band(int64_t lo, int64_t hi, SourceRange loc);
  static SetRef blockDiag(int64_t l, SourceRange loc);
  static SetRef keyRange(TermRef lo, TermRef hi, SourceRange loc);
  /// j % m in [lo, hi]; a range that wraps or covers every residue is split
  /// or widened, so this may return a union, All or None.
  static SetRef stripe(int64_t m, int64_t lo, int64_t hi, SourceRange loc);
  static SetRef residueClass(int64_t m, int64_t r, SourceRange loc);
  /// lo <= (j / s) % m <= hi (s, m >= 1; null bound: none on that side):
  /// the keys whose coordinate at stride s on an axis of m values lies in
  /// [lo, hi]. Constant bounds give a stripe of modulus s * m (or All,
  /// None); a coordinate that takes every value gives All.
  static SetRef coordRange(int64_t s, int64_t m, TermRef lo, TermRef hi, SourceRange loc);
  static SetRef rowIf(TermRef cond, SourceRange loc);
  static SetRef list(std::vector<TermRef> elems, SourceRange loc);
  static SetRef random(int64_t block, int64_t count, int64_t seed, SourceRange loc);
  static SetRef predicate(TermRef cond, SourceRange loc);
  /// b[j] == b[i] for the 1-D input `index`.
  static SetRef equalClass(int64_t index, std::shared_ptr<const InputArray> data, SourceRange loc);
  /// j / keyBlock in sel[i / rowBlock] for the 2-D input `index`.
  static SetRef select(int64_t index, std::shared_ptr<const InputArray> data, int64_t rowBlock,
                       int64_t keyBlock, SourceRange loc);
  /// A else B.
  static SetRef fallback(SetRef a, SetRef b, SourceRange loc);
  /// `child` in the order of `classes`' positions sorted by value (its
  /// InputArray::order): row t is query order[t], key position u is key
  /// order[u]. An equality class of that input becomes one interval per row
  /// there (under causality, the class's earlier positions), which is how
  /// the fused backend runs such pieces (Plan.h: permutePiece).
  static SetRef permuted(SetRef child, std::shared_ptr<const InputArray> classes, SourceRange loc = {});
  /// B on the rows where A is empty: `A else B` minus A.
  static SetRef whereEmpty(SetRef a, SetRef b, SourceRange loc = {});
  /// In `classes`' class order, row t's class: the positions
  /// [classBegin[order[t]], classEnd[order[t]]), one interval per row that
  /// never moves back as t grows (a block-diagonal of uneven blocks).
  static SetRef segment(std::shared_ptr<const InputArray> classes, SourceRange loc = {});
  /// Flattens nested unions/intersections and drops All/None identities.
  static SetRef unite(std::vector<SetRef> children, SourceRange loc);
  static SetRef intersect(std::vector<SetRef> children, SourceRange loc);
  static SetRef difference(SetRef a, SetRef b, SourceRange loc);

private:
  explicit SetNode(Gen kind, SourceRange loc) : kind(kind), loc(loc) {}
};

/// The canonical IR of a whole pattern: one tree per distinct head set.
struct PatternIR {
  struct Head {
    std::vector<int64_t> heads; ///< The heads that share this set.
    SetRef set;
    TermRef term;               ///< The Sema term it was built from (the oracle's input).
  };
  std::string name;
  int64_t numHeads = 1;
  bool headsDeclared = false; ///< false: the one set serves any head count
  bool causal = false;
  std::vector<std::pair<std::string, int64_t>> params;
  /// The arrays every call gives (empty: a positional pattern): int inputs,
  /// which the sets read, and float inputs, which only `score` and `sink` read.
  std::vector<InputDecl> inputs;
  std::vector<Head> heads;
  /// `score EXPR` and `sink EXPR` (Score.h); null: none. They never change
  /// the sets: canonicalisation, the analyses and the plans ignore them, but
  /// the IR text (and so a kernel's key) includes them.
  ScoreRef score, sink;
  /// Whether the sets read data: an int input is declared. Float inputs only
  /// feed the score and the sink, so a pattern with only those has its sets
  /// (and plans) known before any call.
  bool readsData() const {
    for (const InputDecl &in : inputs)
      if (!in.isFloat)
        return true;
    return false;
  }
  bool hasFloatInputs() const {
    for (const InputDecl &in : inputs)
      if (in.isFloat)
        return true;
    return false;
  }
  /// The names of the inputs, indexed like `inputs` (for printScore, evalScore).
  std::vector<std::string> inputNames() const {
    std::vector<std::string> names;
    for (const InputDecl &in : inputs)
      names.push_back(in.name);
    return names;
  }
};

/// One line per node, indented; each with its location when `where` is given.
/// Renders a node's location ("fixed.attn:7:35"); the front end supplies it.
using LocationPrinter = std::function<std::string(SourceRange)>;

std::string printSet(const SetNode &set, const LocationPrinter &where = {},
                     int indent = 0);
std::string printPatternIR(const PatternIR &ir, const LocationPrinter &where = {});

/// Whether any leaf of the tree is a Predicate (the per-element fallback).
bool hasPredicate(const SetNode &set);

/// Whether the tree reads an input (a class, a selection, or a term that
/// reads one).
bool readsData(const SetNode &set);

/// Whether a row's keys may depend on the sequence length n beyond the
/// clipping to [0, n): a term that reads n, or random blocks (drawn among
/// the blocks of n). Row i of such a tree at one length need not be row i
/// at another.
bool dependsOnLength(const SetNode &set);

/// The tree with every input read bound to `arrays` (index: the input's in
/// PatternIR::inputs), classes indexed; `set` itself when it reads none.
/// O(tree size); the arrays are shared, not copied.
SetRef bindSet(const SetRef &set, const InputArrays &arrays);

} // namespace attnc::ir
