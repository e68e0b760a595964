//===- ScoreProgram.cpp - Compiling score and sink expressions ------------===//
//
// ScoreExpr -> a DAG of nodes (hash-consed: equal subtrees are one node;
// constants folded; x + 0, x * 1, x * 0 and the like simplified) -> the
// derivatives as more nodes of the same DAG -> straight-line code over
// slots, each slot reused once its last reader has run.
//
//===----------------------------------------------------------------------===//
#include "ScoreProgram.h"

#include "attnc/plan/Inputs.h"
#include "attnc/plan/Term.h"

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace attnc::rt {

namespace {

using K = ScoreCode::Kind;

/// Leaves and operations of the DAG.
enum class N : uint8_t { S, I, J, Const, Param, Read, Op };

struct Node {
  N what = N::Const;
  K kind = K::Add;   ///< Op
  double value = 0;  ///< Const, Param (the entry's value)
  int a = -1, b = -1, c = -1;
  int64_t input = -1, flat = -1; ///< Param: the entry; Read: the input (a, b, c its indices)
  bool isInt = false;
};

class Dag {
public:
  std::vector<Node> nodes;

  int leaf(N what) { return add(Node{what}); }
  int constant(double v, bool isInt = false) {
    Node n{N::Const};
    n.value = v;
    n.isInt = isInt;
    return add(n);
  }
  int param(int64_t input, int64_t flat, double v) {
    Node n{N::Param};
    n.input = input;
    n.flat = flat;
    n.value = v;
    return add(n);
  }
  /// A read of `input` at indices a, b, c; `guard` (-1: none): the node
  /// under which the expression evaluates it (a where's branch), so that
  /// only lanes where the guard holds must read inside the input.
  int read(int64_t input, int a, int b, int c, int guard = -1) {
    Node n{N::Read};
    n.input = input;
    n.a = a, n.b = b, n.c = c;
    n.flat = guard;
    return add(n);
  }
  /// tables[table][index - offset] (ScoreCode::Lookup): an integer table,
  /// or a float one (a table that reads float inputs).
  int lookup(int index, int64_t table, bool isInt = true) {
    Node n{N::Op};
    n.kind = K::Lookup;
    n.a = index;
    n.input = table;
    n.isInt = isInt;
    return add(n);
  }
  bool isOp(int x, K k) const {
    return nodes[static_cast<size_t>(x)].what == N::Op && nodes[static_cast<size_t>(x)].kind == k;
  }
  bool isConst(int x, double v) const { return isConstNode(x) && nodes[static_cast<size_t>(x)].value == v; }
  bool isConstNode(int x) const { return nodes[static_cast<size_t>(x)].what == N::Const; }

  /// An operation, folded or simplified where that is exact enough for
  /// scores (x * 0 is 0 even for an infinite x: only derivatives make it).
  int op(K k, int a, int b = -1, int c = -1, bool isInt = false) {
    const bool unary = b < 0;
    if (isConstNode(a) && (unary || isConstNode(b)) && (c < 0 || isConstNode(c)))
      return constant(fold(k, nodes[a].value, b < 0 ? 0 : nodes[b].value, c < 0 ? 0 : nodes[c].value), isInt);
    switch (k) {
    case K::Add:
      if (isConst(a, 0)) return b;
      if (isConst(b, 0)) return a;
      // x * y + z in one instruction (ALiBi's s + slope * (j - i)).
      if (!isInt)
        for (auto [m, z] : {std::pair{a, b}, std::pair{b, a}})
          if (isOp(m, K::Mul) && !nodes[static_cast<size_t>(m)].isInt)
            return op(K::Fma, nodes[static_cast<size_t>(m)].a, nodes[static_cast<size_t>(m)].b, z);
      break;
    case K::Sub:
      if (isConst(b, 0)) return a;
      if (isConst(a, 0)) return op(K::Neg, b);
      // i - j and j - i: from the lanes' positions, no i or j lanes filled.
      if ((nodes[static_cast<size_t>(a)].what == N::I && nodes[static_cast<size_t>(b)].what == N::J) ||
          (nodes[static_cast<size_t>(a)].what == N::J && nodes[static_cast<size_t>(b)].what == N::I)) {
        Node n{N::Op};
        n.kind = K::Rel;
        n.value = nodes[static_cast<size_t>(a)].what == N::I ? 1 : -1;
        n.isInt = true;
        return add(n);
      }
      break;
    case K::Mul:
      if (isConst(a, 0) || isConst(b, 0)) return constant(0);
      if (isConst(a, 1)) return b;
      if (isConst(b, 1)) return a;
      // cap * tanh(x * k) (soft-capping; x / cap became x * (1 / cap)).
      for (auto [c2, t] : {std::pair{a, b}, std::pair{b, a}})
        if (isConstNode(c2) && isOp(t, K::Tanh)) {
          const int inner = nodes[static_cast<size_t>(t)].a;
          if (isOp(inner, K::Mul))
            for (auto [x, c1] : {std::pair{nodes[static_cast<size_t>(inner)].a, nodes[static_cast<size_t>(inner)].b},
                                 std::pair{nodes[static_cast<size_t>(inner)].b, nodes[static_cast<size_t>(inner)].a}})
              if (isConstNode(c1))
                return op(K::CapTanh, x, c1, c2);
        }
      break;
    case K::Div:
      if (isConst(b, 1)) return a;
      if (isConst(a, 0)) return constant(0);
      // By a constant: times its reciprocal (exact for powers of two, else
      // within an ulp of f32's division; a division costs several
      // multiplications).
      if (isConstNode(b) && nodes[static_cast<size_t>(b)].value != 0)
        return op(K::Mul, a, constant(1.0 / nodes[static_cast<size_t>(b)].value));
      break;
    case K::Neg:
      if (nodes[a].what == N::Op && nodes[a].kind == K::Neg) return nodes[a].a;
      break;
    case K::Where:
      if (isConstNode(a)) return nodes[static_cast<size_t>(a)].value != 0 ? b : c;
      if (b == c) return b;
      break;
    default:
      break;
    }
    Node n{N::Op};
    n.kind = k;
    n.a = a, n.b = b, n.c = c;
    n.isInt = isInt;
    return add(n);
  }

  static double fold(K k, double a, double b, double c) {
    switch (k) {
    case K::Add: return a + b;
    case K::Sub: return a - b;
    case K::Mul: return a * b;
    case K::Div: return a / b;
    case K::Neg: return -a;
    case K::Abs: return std::fabs(a);
    case K::Min: return std::min(a, b);
    case K::Max: return std::max(a, b);
    case K::Tanh: return std::tanh(a);
    case K::Exp: return std::exp(a);
    case K::Log: return std::log(a);
    case K::Floor: return std::floor(a);
    case K::IDiv: return std::floor(a / b);
    case K::Mod: return a - b * std::floor(a / b);
    case K::Where: return a != 0 ? b : c;
    case K::Fma: return a * b + c;
    case K::CapTanh: return c * std::tanh(b * a);
    case K::Rel: break;
    case K::Lt: return a < b;
    case K::Le: return a <= b;
    case K::Gt: return a > b;
    case K::Ge: return a >= b;
    case K::Eq: return a == b;
    case K::Ne: return a != b;
    case K::And: return a != 0 && b != 0;
    case K::Or: return a != 0 || b != 0;
    case K::Not: return a == 0;
    case K::Read:
    case K::Lookup: break;
    }
    ATTNC_CHECK(false, "folding a read");
    return 0;
  }

private:
  // (Values by their bits: NaN is a key like any other.)
  std::map<std::tuple<int, int, uint64_t, int, int, int, int64_t, int64_t, bool>, int> memo_;
  int add(const Node &n) {
    auto key = std::make_tuple(static_cast<int>(n.what), static_cast<int>(n.kind), std::bit_cast<uint64_t>(n.value),
                               n.a, n.b, n.c, n.input, n.flat, n.isInt);
    auto [at, fresh] = memo_.emplace(key, static_cast<int>(nodes.size()));
    if (fresh)
      nodes.push_back(n);
    return at->second;
  }
};

/// ScoreExpr -> DAG, with h and n substituted and reads at constant places
/// turned into Params.
struct Lowering {
  Dag &dag;
  const ir::PatternIR &ir;
  int64_t h, n;
  const std::vector<FloatInput> &inputs;
  /// The condition under which the node being lowered is evaluated (-1:
  /// always): where's branches and the right operands of && and || are
  /// evaluated only where they decide the value (evalScore), so a read
  /// there must lie inside its input only where the guard holds.
  int guard = -1;

  /// `guard` narrowed by `cond`; a constant 0 where it never holds.
  int narrowed(int cond) const {
    if (dag.isConstNode(cond))
      return dag.nodes[static_cast<size_t>(cond)].value != 0 ? guard : cond;
    return guard < 0 ? cond : dag.op(K::And, guard, cond, -1, true);
  }

  /// Lowers e under `cond` (the guard narrowed by it).
  int lowerUnder(const ScoreExpr &e, int cond) {
    const int saved = guard;
    guard = narrowed(cond);
    const int out = lower(e);
    guard = saved;
    return out;
  }

  int lower(const ScoreExpr &e) {
    auto arg = [&](size_t k) { return lower(*e.args[k]); };
    switch (e.op) {
    case ScoreOp::Const: return dag.constant(e.value, e.isInt);
    case ScoreOp::S: return dag.leaf(N::S);
    case ScoreOp::I: return dag.leaf(N::I);
    case ScoreOp::J: return dag.leaf(N::J);
    case ScoreOp::H: return dag.constant(static_cast<double>(h), true);
    case ScoreOp::N: return dag.constant(static_cast<double>(n), true);
    case ScoreOp::Input: return lowerRead(e);
    case ScoreOp::Add: return dag.op(K::Add, arg(0), arg(1), -1, e.isInt);
    case ScoreOp::Sub: return dag.op(K::Sub, arg(0), arg(1), -1, e.isInt);
    case ScoreOp::Mul: return dag.op(K::Mul, arg(0), arg(1), -1, e.isInt);
    case ScoreOp::Div: return e.isInt ? dag.op(K::IDiv, arg(0), arg(1), -1, true) : dag.op(K::Div, arg(0), arg(1));
    case ScoreOp::IDiv: return dag.op(K::IDiv, arg(0), arg(1), -1, true);
    case ScoreOp::Mod: return dag.op(K::Mod, arg(0), arg(1), -1, true);
    case ScoreOp::Neg: return dag.op(K::Neg, arg(0), -1, -1, e.isInt);
    case ScoreOp::Abs: return dag.op(K::Abs, arg(0), -1, -1, e.isInt);
    case ScoreOp::Min:
    case ScoreOp::Max: {
      int acc = arg(0);
      for (size_t k = 1; k < e.args.size(); ++k)
        acc = dag.op(e.op == ScoreOp::Min ? K::Min : K::Max, acc, arg(k), -1, e.isInt);
      return acc;
    }
    case ScoreOp::Tanh: return dag.op(K::Tanh, arg(0));
    case ScoreOp::Exp: return dag.op(K::Exp, arg(0));
    case ScoreOp::Log: return dag.op(K::Log, arg(0));
    case ScoreOp::Floor: return dag.op(K::Floor, arg(0), -1, -1, true);
    case ScoreOp::Where: {
      const int cond = arg(0);
      const int a = lowerUnder(*e.args[1], cond), b = lowerUnder(*e.args[2], dag.op(K::Not, cond, -1, -1, true));
      return dag.op(K::Where, cond, a, b, e.isInt);
    }
    case ScoreOp::Lt: return dag.op(K::Lt, arg(0), arg(1), -1, true);
    case ScoreOp::Le: return dag.op(K::Le, arg(0), arg(1), -1, true);
    case ScoreOp::Gt: return dag.op(K::Gt, arg(0), arg(1), -1, true);
    case ScoreOp::Ge: return dag.op(K::Ge, arg(0), arg(1), -1, true);
    case ScoreOp::Eq: return dag.op(K::Eq, arg(0), arg(1), -1, true);
    case ScoreOp::Ne: return dag.op(K::Ne, arg(0), arg(1), -1, true);
    case ScoreOp::And: {
      const int a = arg(0);
      return dag.op(K::And, a, lowerUnder(*e.args[1], a), -1, true);
    }
    case ScoreOp::Or: {
      const int a = arg(0);
      return dag.op(K::Or, a, lowerUnder(*e.args[1], dag.op(K::Not, a, -1, -1, true)), -1, true);
    }
    case ScoreOp::Not: return dag.op(K::Not, arg(0), -1, -1, true);
    }
    ATTNC_CHECK(false, "unknown score operation");
    return -1;
  }

  int lowerRead(const ScoreExpr &e) {
    const size_t x = static_cast<size_t>(e.input);
    ATTNC_CHECK(x < inputs.size() && x < ir.inputs.size() && ir.inputs[x].isFloat,
                "a score reads input " + std::to_string(e.input) + ", which is not a float input");
    const FloatInput &in = inputs[x];
    ATTNC_CHECK(in.values || elements(in) == 0, "float input '" + ir.inputs[x].name + "' is not bound");
    ATTNC_CHECK(e.args.size() == in.dims.size() && !e.args.empty() && e.args.size() <= 3,
                "a read of '" + ir.inputs[x].name + "' with " + std::to_string(e.args.size()) + " indices");
    int idx[3] = {-1, -1, -1};
    bool fixed = true;
    for (size_t k = 0; k < e.args.size(); ++k) {
      idx[k] = lower(*e.args[k]);
      fixed = fixed && dag.isConstNode(idx[k]);
    }
    if (guard >= 0 && dag.isConst(guard, 0))
      return dag.constant(0); // (never evaluated)
    if (!fixed)
      return dag.read(e.input, idx[0], idx[1], idx[2], guard);
    int64_t flat = 0;
    std::vector<int64_t> at;
    bool inside = true;
    for (size_t k = 0; k < e.args.size(); ++k) {
      const int64_t v = static_cast<int64_t>(dag.nodes[static_cast<size_t>(idx[k])].value);
      at.push_back(v);
      inside = inside && v >= 0 && v < in.dims[k];
      flat = flat * in.dims[k] + v;
    }
    if (!inside && guard >= 0) // (outside only matters where the guard holds: checked per lane)
      return dag.read(e.input, idx[0], idx[1], idx[2], guard);
    if (!inside) {
      std::string where;
      for (size_t k = 0; k < at.size(); ++k)
        where.append(k ? ", " : "").append(std::to_string(at[k]));
      std::string dims;
      for (size_t k = 0; k < in.dims.size(); ++k)
        dims.append(k ? ", " : "").append(std::to_string(in.dims[k]));
      throw InputError("the pattern's score reads " + ir.inputs[x].name + "[" + where + "] (head " +
                       std::to_string(h) + "), outside its dimensions [" + dims + "]");
    }
    return dag.param(e.input, flat, static_cast<double>(in.values[flat]));
  }

  static int64_t elements(const FloatInput &in) {
    int64_t total = 1;
    for (int64_t d : in.dims)
      total *= d;
    return total;
  }
};

/// d(node) / d(wrt), memoised, as more nodes of the DAG.
struct Derivative {
  Dag &dag;
  int wrt;
  std::map<int, int> memo;

  int of(int x) {
    if (x == wrt)
      return dag.constant(1);
    if (auto at = memo.find(x); at != memo.end())
      return at->second;
    const Node n = dag.nodes[static_cast<size_t>(x)];
    int r;
    if (n.what != N::Op || n.isInt) {
      r = dag.constant(0); // leaves other than wrt; integer-valued nodes are steps
    } else {
      auto d = [&](int y) { return of(y); };
      switch (n.kind) {
      case K::Add: r = dag.op(K::Add, d(n.a), d(n.b)); break;
      case K::Sub: r = dag.op(K::Sub, d(n.a), d(n.b)); break;
      case K::Mul: r = dag.op(K::Add, dag.op(K::Mul, d(n.a), n.b), dag.op(K::Mul, n.a, d(n.b))); break;
      case K::Div:
        r = dag.op(K::Sub, dag.op(K::Div, d(n.a), n.b),
                   dag.op(K::Div, dag.op(K::Mul, n.a, d(n.b)), dag.op(K::Mul, n.b, n.b)));
        break;
      case K::Neg: r = dag.op(K::Neg, d(n.a)); break;
      case K::Abs: {
        const int da = d(n.a);
        r = dag.op(K::Where, dag.op(K::Lt, n.a, dag.constant(0), -1, true), dag.op(K::Neg, da), da);
        break;
      }
      case K::Min: r = dag.op(K::Where, dag.op(K::Le, n.a, n.b, -1, true), d(n.a), d(n.b)); break;
      case K::Max: r = dag.op(K::Where, dag.op(K::Ge, n.a, n.b, -1, true), d(n.a), d(n.b)); break;
      case K::Tanh:
        r = dag.op(K::Mul, d(n.a), dag.op(K::Sub, dag.constant(1), dag.op(K::Mul, x, x)));
        break;
      case K::Exp: r = dag.op(K::Mul, d(n.a), x); break;
      case K::Log: r = dag.op(K::Div, d(n.a), n.a); break;
      case K::Where: r = dag.op(K::Where, n.a, d(n.b), d(n.c)); break;
      case K::Fma:
        r = dag.op(K::Add, dag.op(K::Add, dag.op(K::Mul, d(n.a), n.b), dag.op(K::Mul, n.a, d(n.b))), d(n.c));
        break;
      case K::CapTanh: {
        // c tanh(b a): c b (1 - tanh^2) da = b (c - x^2 / c) da, x this node.
        const double c = dag.nodes[static_cast<size_t>(n.c)].value;
        r = dag.op(K::Mul, d(n.a),
                   dag.op(K::Mul, n.b, dag.op(K::Sub, n.c, dag.op(K::Mul, x, dag.op(K::Mul, x, dag.constant(1 / c))))));
        break;
      }
      default: r = dag.constant(0); break;
      }
    }
    memo.emplace(x, r);
    return r;
  }
};

} // namespace

int64_t floatOffsets(const std::vector<FloatInput> &inputs, std::vector<int64_t> &offsets) {
  offsets.assign(inputs.size(), 0);
  int64_t total = 0;
  for (size_t x = 0; x < inputs.size(); ++x) {
    offsets[x] = total;
    if (!inputs[x].values && inputs[x].dims.empty())
      continue;
    int64_t size = 1;
    for (int64_t d : inputs[x].dims)
      size *= d;
    total += size;
  }
  return total;
}

namespace {

/// What an instruction of node nd reads: its operands, and a read's guard.
std::array<int, 4> operands(const Node &nd) {
  return {nd.a, nd.b, nd.c, nd.what == N::Read ? static_cast<int>(nd.flat) : -1};
}

/// A root of the code: a node whose value the caller reads.
struct Root {
  int node;
  int64_t input = -1, flat = -1;
  int read = -1;   ///< a Read node
  int lookup = -1; ///< a float table's Lookup node (its derivative goes by distance)
};

ScoreCode emit(Dag &dag, int value, int dValue, const std::vector<Root> &gradRoots, const ir::PatternIR &ir,
               const std::vector<FloatInput> &inputs, std::vector<std::vector<float>> tables);

/// What relative() counts in a subexpression of the distance alone.
struct RelativeCounts {
  int ops = 0;    ///< operations, reads and distances
  int reads = 0;  ///< reads of float inputs at places that vary with the distance
  int params = 0; ///< input entries at fixed places (ALiBi's slope[h])
  int rels = 0;   ///< i - j or j - i
};

/// Whether x (no s) reads i and j only as i - j or j - i, counting what it
/// has in `c`: such a node is a function of the distance alone (an input's
/// entries are fixed for a slice).
bool relative(const Dag &dag, int x, RelativeCounts &c) {
  const Node &nd = dag.nodes[static_cast<size_t>(x)];
  switch (nd.what) {
  case N::Const: return true;
  case N::Param: ++c.params; return true;
  case N::Op: break;
  case N::Read:
    ++c.reads;
    ++c.ops;
    for (int y : operands(nd))
      if (y >= 0 && !relative(dag, y, c))
        return false;
    return true;
  default: return false; // s, a bare i or j
  }
  if (nd.kind == K::Rel) {
    ++c.ops;
    ++c.rels;
    return true;
  }
  if (!nd.isInt && nd.kind != K::Div && nd.kind != K::Log && nd.kind != K::Mul && nd.kind != K::Add &&
      nd.kind != K::Sub && nd.kind != K::Neg && nd.kind != K::Abs && nd.kind != K::Min && nd.kind != K::Max &&
      nd.kind != K::Exp && nd.kind != K::Tanh && nd.kind != K::Where && nd.kind != K::Fma && nd.kind != K::CapTanh)
    return false;
  ++c.ops;
  for (int y : {nd.a, nd.b, nd.c})
    if (y >= 0 && !relative(dag, y, c))
      return false;
  return true;
}

/// A code of the distance alone run on the 2n - 1 distances i - j =
/// t - (n - 1) (lanes are the rows i of the key j = 0): its value per
/// distance, with `run` called on each chunk of lanes as well
/// (foldTableGrads). A read outside its input marks its distance in
/// `outside` (when given) and reads 0: no error is thrown here.
std::vector<float> overDistances(const ScoreCode &sub, int64_t n, ScoreRunner runner,
                                 std::vector<uint8_t> *outside = nullptr,
                                 const std::function<void(const ScoreLanes &, int64_t t0)> &run = {}) {
  const int64_t size = 2 * n - 1;
  std::vector<float> table(static_cast<size_t>(size)), slots;
  prepareScoreSlots(sub, slots);
  constexpr int M = ScoreCode::kMaxLanes;
  std::vector<float> rows(static_cast<size_t>(M));
  const float key = 0.0f;
  std::fill_n(slots.data() + ScoreCode::kJ * M, M, 0.0f);
  uint8_t marks[M];
  if (outside)
    outside->assign(static_cast<size_t>(size), 0);
  for (int64_t t0 = 0; t0 < size; t0 += M) {
    const int lanes = static_cast<int>(std::min<int64_t>(M, size - t0));
    for (int l = 0; l < M; ++l)
      rows[static_cast<size_t>(l)] = slots[static_cast<size_t>(ScoreCode::kI * M + l)] =
          static_cast<float>(t0 + l - (n - 1));
    ScoreLanes lanesOf{slots.data(), lanes};
    lanesOf.rowPos = rows.data();
    lanesOf.keyPos = &key;
    lanesOf.width = M;
    std::fill_n(marks, M, uint8_t{0});
    lanesOf.outside = marks;
    runner(sub, lanesOf);
    std::copy_n(lanesOf.slot(sub.value), lanes, table.data() + t0);
    if (outside)
      std::copy_n(marks, lanes, outside->data() + t0);
    if (run)
      run(lanesOf, t0);
  }
  return table;
}

/// The backward code of node x alone: its derivatives by every input entry
/// it reads (a float table's, for foldTableGrads).
std::shared_ptr<const ScoreCode> tableGradCode(Dag &dag, int x, const ir::PatternIR &ir,
                                               const std::vector<FloatInput> &inputs);

/// What tabulate makes: the tables, and per float table what the backward
/// pass and the checks need.
struct Tables {
  ScoreRunner runner;
  bool backward;
  std::vector<std::vector<float>> values;
  std::map<int, int> done; ///< node -> its replacement
  std::map<int64_t, std::shared_ptr<const ScoreCode>> subs; ///< a float table's own backward code
  std::vector<std::vector<uint8_t>> bad;                     ///< per table: the distances read outside
  std::vector<std::shared_ptr<const ScoreCode>> codes;      ///< per table with such: its code
  std::set<int64_t> linear; ///< tables of X * (i - j) or X * (j - i), X free of the distance
};

/// Replaces the largest subexpressions of the distance i - j alone by a
/// lookup in a table over every distance of length n, computed here by the
/// runner on 2n - 1 lanes: integer ones (T5's bucket of a relative
/// position: a log, a division, a floor, a min) and float ones that read
/// inputs (T5's whole bias rel[h, bucket(j - i)], ALiBi's slope[h] * (j - i):
/// an entry at a fixed place counts when the distance is read too). Per pair, a subtraction
/// and a load (consecutive rows: a copy) instead of the whole expression
/// and its gathers. The distances at which a float table reads outside its
/// input (j > i, for a causal T5 bias) are marked (`bad`): a pair of the
/// pattern at one of them fails as its own read would. With `backward`,
/// each float table's own backward code is kept in `subs`.
int tabulate(Dag &dag, int x, int64_t n, const ir::PatternIR &ir, const std::vector<FloatInput> &inputs, Tables &t) {
  if (auto at = t.done.find(x); at != t.done.end())
    return at->second;
  const Node nd = dag.nodes[static_cast<size_t>(x)];
  int out = -1;
  RelativeCounts c;
  if ((nd.what == N::Op || nd.what == N::Read) && relative(dag, x, c) &&
      (nd.isInt ? c.ops >= 3 && c.reads == 0 : c.reads > 0 || (c.params > 0 && c.rels > 0))) {
    auto sub = std::make_shared<const ScoreCode>(emit(dag, x, -1, {}, ir, inputs, {}));
    std::vector<uint8_t> outside;
    std::vector<float> values = overDistances(*sub, n, t.runner, &outside);
    if (std::find(outside.begin(), outside.end(), uint8_t{0}) != outside.end()) { // (some distance reads inside)
      t.values.push_back(std::move(values));
      const bool any = std::find(outside.begin(), outside.end(), uint8_t{1}) != outside.end();
      t.bad.push_back(any ? std::move(outside) : std::vector<uint8_t>{});
      t.codes.push_back(any ? sub : nullptr);
      const int distance = dag.op(K::Sub, dag.leaf(N::I), dag.leaf(N::J), -1, true);
      const auto table = static_cast<int64_t>(t.values.size() - 1);
      out = dag.lookup(distance, table, nd.isInt);
      if (t.backward && !nd.isInt)
        t.subs.emplace(table, tableGradCode(dag, x, ir, inputs));
      // X times the distance, X free of it: every derivative of the table
      // is linear in the distance too.
      if (nd.what == N::Op && nd.kind == K::Mul && !nd.isInt)
        for (auto [r, other] : {std::pair{nd.a, nd.b}, std::pair{nd.b, nd.a}}) {
          RelativeCounts o;
          if (dag.isOp(r, K::Rel) && relative(dag, other, o) && o.rels == 0)
            t.linear.insert(table);
        }
    }
  }
  // x * y + z came as one instruction: a product of the distance alone
  // (ALiBi's slope[h] * (j - i) + s) is tabulated on its own.
  if (out < 0 && nd.what == N::Op && nd.kind == K::Fma && !nd.isInt) {
    RelativeCounts m;
    if (relative(dag, nd.a, m) && relative(dag, nd.b, m) && (m.reads > 0 || (m.params > 0 && m.rels > 0))) {
      const int product = tabulate(dag, dag.op(K::Mul, nd.a, nd.b), n, ir, inputs, t);
      if (dag.isOp(product, K::Lookup))
        out = dag.op(K::Add, product, tabulate(dag, nd.c, n, ir, inputs, t));
    }
  }
  if (out < 0) {
    out = x;
    if (nd.what == N::Op || nd.what == N::Read) {
      int args[3] = {nd.a, nd.b, nd.c};
      bool changed = false;
      for (int &y : args)
        if (y >= 0) {
          const int z = tabulate(dag, y, n, ir, inputs, t);
          changed = changed || z != y;
          y = z;
        }
      if (changed)
        out = nd.what == N::Read ? dag.read(nd.input, args[0], args[1], args[2], static_cast<int>(nd.flat))
                                 : dag.op(nd.kind, args[0], args[1], args[2], nd.isInt);
    }
  }
  t.done.emplace(x, out);
  return out;
}

/// The roots of the backward code of `value`: d/ds, and d/d(every input
/// entry it reads and every float table it looks up).
int gradientRoots(Dag &dag, int value, std::vector<Root> &roots) {
  const size_t before = dag.nodes.size();
  const int dValue = Derivative{dag, dag.leaf(N::S), {}}.of(value);
  for (size_t x = 0; x < before; ++x) {
    const Node nd = dag.nodes[x];
    const bool table = nd.what == N::Op && nd.kind == K::Lookup && !nd.isInt;
    if (nd.what != N::Param && nd.what != N::Read && !table)
      continue;
    const int deriv = Derivative{dag, static_cast<int>(x), {}}.of(value);
    if (dag.isConst(deriv, 0))
      continue;
    Root r{deriv, nd.input, nd.what == N::Param ? nd.flat : -1, nd.what == N::Read ? static_cast<int>(x) : -1};
    if (table) {
      r.input = -1;
      r.lookup = static_cast<int>(x);
    }
    roots.push_back(r);
  }
  return dValue;
}

std::shared_ptr<const ScoreCode> tableGradCode(Dag &dag, int x, const ir::PatternIR &ir,
                                               const std::vector<FloatInput> &inputs) {
  std::vector<Root> roots;
  const int dValue = gradientRoots(dag, x, roots);
  return std::make_shared<const ScoreCode>(emit(dag, x, dValue, roots, ir, inputs, {}));
}

} // namespace

ScoreCode compileScore(const ScoreExpr &expr, const ir::PatternIR &ir, int64_t h, int64_t n,
                       const std::vector<FloatInput> &inputs, bool backward, ScoreRunner tables) {
  Dag dag;
  Lowering lowering{dag, ir, h, n, inputs};
  int value = lowering.lower(expr);
  Tables t{tables, backward, {}, {}, {}, {}, {}, {}};
  if (tables && n <= (int64_t{1} << 22))
    value = tabulate(dag, value, n, ir, inputs, t);
  // The roots: the value, then (backward) d/ds and d/d(every entry read).
  int dValue = -1;
  std::vector<Root> gradRoots;
  if (backward)
    dValue = gradientRoots(dag, value, gradRoots);
  ScoreCode code = emit(dag, value, dValue, gradRoots, ir, inputs, std::move(t.values));
  code.tableBad = std::move(t.bad);
  code.tableCode = std::move(t.codes);
  for (const std::vector<uint8_t> &marks : code.tableBad) {
    ScoreCode::Good good;
    if (!marks.empty()) {
      const auto first = std::find(marks.begin(), marks.end(), uint8_t{0});
      const auto last = std::find(marks.rbegin(), marks.rend(), uint8_t{0});
      good.first = static_cast<int32_t>(first - marks.begin());
      good.second = static_cast<int32_t>(marks.rend() - last - 1);
      good.holes = std::find(first, last.base(), uint8_t{1}) != last.base();
    }
    code.tableGood.push_back(good);
  }
  // The tables' sums by distance, past the inputs' entries.
  std::vector<int64_t> offsets;
  int64_t at = floatOffsets(inputs, offsets);
  for (ScoreCode::TableGrad &g : code.tableGrads) {
    g.at = at;
    g.sub = t.subs.at(g.table);
    at += 2 * n - 1;
  }
  // Two forms the tile kernels run in registers instead of the code (which
  // stays for the row-by-row paths). A soft cap alone, c * tanh(b * s) with
  // constants b and c:
  const Node &root = dag.nodes[static_cast<size_t>(value)];
  if (root.what == N::Op && root.kind == K::CapTanh && dag.nodes[static_cast<size_t>(root.a)].what == N::S &&
      dag.nodes[static_cast<size_t>(root.b)].what == N::Const && dag.nodes[static_cast<size_t>(root.c)].what == N::Const) {
    code.inlineCap = true;
    code.capPre = static_cast<float>(dag.nodes[static_cast<size_t>(root.b)].value);
    code.capPost = static_cast<float>(dag.nodes[static_cast<size_t>(root.c)].value);
  }
  // and s plus a float table of i - j (T5's bias or ALiBi's once
  // tabulated), with nothing else to read or to differentiate.
  if (root.what == N::Op && root.kind == K::Add && code.reads.empty() && code.grads.empty() &&
      code.tableGrads.size() <= 1) {
    for (auto [x, y] : {std::pair{root.a, root.b}, std::pair{root.b, root.a}}) {
      const Node &look = dag.nodes[static_cast<size_t>(y)];
      if (dag.nodes[static_cast<size_t>(x)].what != N::S || look.what != N::Op || look.kind != K::Lookup ||
          look.isInt)
        continue;
      const Node &distance = dag.nodes[static_cast<size_t>(look.a)];
      const size_t table = static_cast<size_t>(look.input);
      if (distance.what != N::Op || distance.kind != K::Rel || distance.value != 1 ||
          (!code.tableGrads.empty() && static_cast<size_t>(code.tableGrads[0].table) != table))
        continue;
      code.inlineBias = static_cast<int16_t>(table);
      code.biasGradAt = code.tableGrads.empty() ? -1 : code.tableGrads[0].at;
      code.biasLinear = t.linear.count(static_cast<int64_t>(table)) > 0;
      break;
    }
  }
  return code;
}

namespace {

ScoreCode emit(Dag &dag, int value, int dValue, const std::vector<Root> &gradRoots, const ir::PatternIR &ir,
               const std::vector<FloatInput> &inputs, std::vector<std::vector<float>> tables) {
  const bool backward = dValue >= 0;
  ScoreCode code;
  static std::atomic<uint64_t> ids{0};
  code.id = ++ids;
  for (const InputDecl &decl : ir.inputs)
    code.names.push_back(decl.name);
  // Which nodes the roots need, and each one's last reader.
  const size_t count = dag.nodes.size();
  std::vector<char> needed(count, 0);
  std::vector<int> lastUse(count, -1);
  std::vector<int> all{value};
  if (backward) {
    all.push_back(dValue);
    for (const Root &r : gradRoots) {
      all.push_back(r.node);
      if (r.lookup >= 0) // (its distance stays in its slot: accumulateScoreGrads reads it)
        all.push_back(dag.nodes[static_cast<size_t>(r.lookup)].a);
      if (r.read < 0)
        continue;
      all.push_back(r.read); // (its indices stay in their slots: accumulateScoreGrads reads them)
      const Node &rn = dag.nodes[static_cast<size_t>(r.read)];
      for (int y : {rn.a, rn.b, rn.c})
        if (y >= 0)
          all.push_back(y);
    }
  }
  for (int r : all)
    needed[static_cast<size_t>(r)] = 1;
  for (size_t x = count; x-- > 0;) {
    if (!needed[x])
      continue;
    for (int y : operands(dag.nodes[x]))
      if (y >= 0) {
        needed[static_cast<size_t>(y)] = 1;
        lastUse[static_cast<size_t>(y)] = std::max(lastUse[static_cast<size_t>(y)], static_cast<int>(x));
      }
  }
  for (int r : all) // the roots live to the end
    lastUse[static_cast<size_t>(r)] = std::numeric_limits<int>::max();
  // Slots: s, i, j, the constants, then the operations' (reused).
  std::vector<int16_t> slotOf(count, -1);
  std::map<uint32_t, int16_t> constSlot; // by the value's bits
  std::vector<int16_t> freeSlots;
  int16_t nextSlot = ScoreCode::kFirstConst;
  // Constants first (one slot per value; an input's entry has its own),
  // then the operations' slots.
  for (size_t x = 0; x < count; ++x) {
    const Node &nd = dag.nodes[x];
    if (!needed[x] || (nd.what != N::Const && nd.what != N::Param))
      continue;
    const float v = static_cast<float>(nd.value);
    if (nd.what == N::Const)
      if (auto at = constSlot.find(std::bit_cast<uint32_t>(v)); at != constSlot.end()) {
        slotOf[x] = at->second;
        continue;
      }
    code.consts.push_back(v);
    slotOf[x] = nextSlot++;
    if (nd.what == N::Const)
      constSlot.emplace(std::bit_cast<uint32_t>(v), slotOf[x]);
  }
  std::vector<std::vector<int16_t>> freedAt(count);
  std::vector<int16_t> readOf(count, -1); // a Read node's index in code.reads
  for (size_t x = 0; x < count; ++x) {
    if (!needed[x])
      continue;
    const Node &nd = dag.nodes[x];
    switch (nd.what) {
    case N::S: slotOf[x] = ScoreCode::kS; continue;
    case N::I: slotOf[x] = ScoreCode::kI; code.usesI = true; continue;
    case N::J: slotOf[x] = ScoreCode::kJ; code.usesJ = true; continue;
    case N::Const:
    case N::Param: continue;
    default: break;
    }
    // Operands whose last reader this is give their slots back after it.
    for (int y : operands(nd))
      if (y >= 0 && lastUse[static_cast<size_t>(y)] == static_cast<int>(x)) {
        const Node &yn = dag.nodes[static_cast<size_t>(y)];
        if (yn.what == N::Op || yn.what == N::Read)
          freedAt[x].push_back(slotOf[static_cast<size_t>(y)]);
      }
    int16_t out;
    if (!freeSlots.empty()) {
      out = freeSlots.back();
      freeSlots.pop_back();
    } else {
      out = nextSlot++;
    }
    slotOf[x] = out;
    ScoreCode::Instr in{nd.what == N::Read ? K::Read : nd.kind, out};
    if (nd.what == N::Op && nd.kind == K::Lookup)
      in.read = static_cast<int16_t>(nd.input);
    if (nd.what == N::Op && nd.kind == K::Rel) {
      in.read = static_cast<int16_t>(nd.value); // (the sign: +1 for i - j)
      code.usesRel = true;
    }
    auto slot = [&](int y) { return y < 0 ? int16_t{-1} : slotOf[static_cast<size_t>(y)]; };
    in.a = slot(nd.a);
    in.b = slot(nd.b);
    in.c = slot(nd.c);
    if (nd.what == N::Read)
      in.guard = slot(static_cast<int>(nd.flat));
    if (nd.what == N::Read) {
      ScoreCode::ReadOf r;
      r.input = nd.input;
      r.values = inputs[static_cast<size_t>(nd.input)].values;
      r.dims = inputs[static_cast<size_t>(nd.input)].dims;
      in.read = static_cast<int16_t>(code.reads.size());
      readOf[x] = in.read;
      code.reads.push_back(std::move(r));
    }
    code.code.push_back(in);
    for (int16_t s : freedAt[x]) // (after the instruction: an output may not overwrite its operand mid-loop)
      if (s != out)
        freeSlots.push_back(s);
  }
  ATTNC_CHECK(nextSlot < 512, "a score expression too large to compile (" + std::to_string(nextSlot) + " slots)");
  code.numSlots = nextSlot;
  code.value = slotOf[static_cast<size_t>(value)];
  // (The value's slot is a root's: only its own instruction writes it.)
  const N valueIs = dag.nodes[static_cast<size_t>(value)].what;
  code.valueLast = !code.code.empty() && code.code.back().out == code.value && (valueIs == N::Op || valueIs == N::Read);
  if (backward) {
    code.dValue = slotOf[static_cast<size_t>(dValue)];
    for (const Root &r : gradRoots) {
      if (r.lookup >= 0) {
        ScoreCode::TableGrad t;
        t.table = static_cast<int16_t>(dag.nodes[static_cast<size_t>(r.lookup)].input);
        t.index = slotOf[static_cast<size_t>(dag.nodes[static_cast<size_t>(r.lookup)].a)];
        t.deriv = slotOf[static_cast<size_t>(r.node)];
        code.tableGrads.push_back(t);
        continue;
      }
      ScoreCode::Grad g;
      g.input = r.input;
      g.flat = r.flat;
      g.deriv = slotOf[static_cast<size_t>(r.node)];
      if (r.read >= 0)
        g.read = readOf[static_cast<size_t>(r.read)];
      code.grads.push_back(g);
    }
  }
  code.tables = std::move(tables);
  return code;
}

} // namespace

std::string scoreListing(const ScoreCode &code) {
  static const char *names[] = {"add", "sub", "mul", "div", "neg", "abs", "min", "max", "tanh", "exp", "log",
                                "floor", "idiv", "mod", "where", "lt", "le", "gt", "ge", "eq", "ne", "and", "or",
                                "not", "read", "lookup", "rel", "fma", "captanh"};
  auto slot = [&](int16_t s) -> std::string {
    if (s == ScoreCode::kS) return "s";
    if (s == ScoreCode::kI) return "i";
    if (s == ScoreCode::kJ) return "j";
    if (s >= ScoreCode::kFirstConst && s < ScoreCode::kFirstConst + static_cast<int>(code.consts.size())) {
      std::ostringstream os;
      os << code.consts[static_cast<size_t>(s - ScoreCode::kFirstConst)];
      return os.str();
    }
    std::string name = "%";
    return name.append(std::to_string(s));
  };
  std::ostringstream os;
  for (const ScoreCode::Instr &in : code.code) {
    os << "  %" << in.out << " = " << names[in.kind];
    if (in.kind == K::Read)
      os << " " << code.names[static_cast<size_t>(code.reads[static_cast<size_t>(in.read)].input)];
    if (in.kind == K::Lookup)
      os << " table" << in.read;
    if (in.kind == K::Rel)
      os << (in.read > 0 ? " i - j" : " j - i");
    for (int16_t s : {in.a, in.b, in.c})
      if (s >= 0)
        os << " " << slot(s);
    os << "\n";
  }
  os << "  value " << slot(code.value) << "\n";
  if (code.dValue >= 0)
    os << "  d/ds " << slot(code.dValue) << "\n";
  for (const ScoreCode::Grad &g : code.grads)
    os << "  d/d" << code.names[static_cast<size_t>(g.input)]
       << (g.flat >= 0 ? "[" + std::to_string(g.flat) + "]" : "[read]") << " " << slot(g.deriv) << "\n";
  for (const ScoreCode::TableGrad &t : code.tableGrads)
    os << "  d/dtable" << t.table << "[" << slot(t.index) << "] " << slot(t.deriv) << "\n";
  if (code.inlineCap)
    os << "  (a soft cap alone: the tile kernels apply " << code.capPost << " * tanh(" << code.capPre
       << " * s) to the scores in registers)\n";
  if (code.inlineBias >= 0)
    os << "  (s plus table" << code.inlineBias << " by distance: the tile kernels add it to the scores in registers)\n";
  return os.str();
}

void prepareScoreSlots(const ScoreCode &code, std::vector<float> &slots) {
  slots.resize(static_cast<size_t>(code.numSlots) * ScoreCode::kMaxLanes);
  for (size_t k = 0; k < code.consts.size(); ++k)
    std::fill_n(slots.data() + (ScoreCode::kFirstConst + k) * ScoreCode::kMaxLanes, ScoreCode::kMaxLanes,
                code.consts[k]);
}

void bindScoreSlots(const ScoreCode &code, std::vector<float> &slots, uint64_t &filledFor) {
  if (filledFor == code.id && slots.size() >= static_cast<size_t>(code.numSlots) * ScoreCode::kMaxLanes)
    return;
  prepareScoreSlots(code, slots);
  filledFor = code.id;
}

void throwScoreRead(const ScoreCode &code, int read, const int64_t *idx, int64_t i, int64_t j) {
  const ScoreCode::ReadOf &r = code.reads[static_cast<size_t>(read)];
  std::string where, dims;
  for (size_t k = 0; k < r.dims.size(); ++k) {
    where.append(k ? ", " : "").append(std::to_string(idx[k]));
    dims.append(k ? ", " : "").append(std::to_string(r.dims[k]));
  }
  std::string pair;
  if (i >= 0)
    pair = " at query i = " + std::to_string(i) + (j >= 0 ? ", key j = " + std::to_string(j) : "");
  throw InputError("the pattern reads " + code.names[static_cast<size_t>(r.input)] + "[" + where + "]" + pair +
                   ", outside its dimensions [" + dims + "]");
}

namespace {

/// to[entry read by lane l] += weight[l] deriv[l] for a rank-R read: the
/// products and entries in a pass the compiler vectorises, then the sums
/// added a run of lanes on one entry at a time (T5's far buckets: many
/// consecutive lanes). A lane that did not evaluate the read (derivative
/// 0, its index anywhere) adds nothing.
template <int R>
void scatterReadGrads(const ScoreCode::ReadOf &r, const float *const *idx, const float *weight, const float *deriv,
                      int lanes, double *to) {
  constexpr int M = ScoreCode::kMaxLanes;
  float dims[3] = {1.0f, 1.0f, 1.0f};
  for (int k = 0; k < R; ++k)
    dims[k] = static_cast<float>(r.dims[static_cast<size_t>(k)]);
  int32_t flat[M];
  float part[M];
  for (int l = 0; l < lanes; ++l) {
    const float w = weight[l] * deriv[l];
    bool inside = w != 0.0f;
    float at = 0.0f;
    for (int k = 0; k < R; ++k) {
      const float v = idx[k][l];
      inside = inside & (v >= 0.0f) & (v < dims[k]);
      at = at * dims[k] + v;
    }
    flat[l] = inside ? static_cast<int32_t>(at) : -1;
    part[l] = w;
  }
  int32_t run = -1;
  double sum = 0;
  for (int l = 0; l < lanes; ++l) {
    if (flat[l] < 0)
      continue;
    if (flat[l] != run) {
      if (run >= 0)
        to[run] += sum;
      run = flat[l];
      sum = 0;
    }
    sum += part[l];
  }
  if (run >= 0)
    to[run] += sum;
}

} // namespace

void accumulateScoreGrads(const ScoreCode &code, const ScoreLanes &lanes, const float *weight,
                          const std::vector<int64_t> &offsets, double *grad) {
  for (const ScoreCode::TableGrad &t : code.tableGrads) {
    const float *deriv = lanes.slot(t.deriv), *distance = lanes.slot(t.index);
    const int32_t last = static_cast<int32_t>(code.tables[static_cast<size_t>(t.table)].size()) - 1;
    double *to = grad + t.at;
    // A row block's lanes: a key's rows are consecutive distances, added
    // as a run (a lane without a pair adds 0, whatever its derivative).
    const int width = lanes.width;
    bool consecutive = lanes.rowPos && lanes.keyPos && width >= 16 && lanes.lanes % width == 0;
    for (int r = 1; consecutive && r < width; ++r)
      consecutive = lanes.rowPos[r] == lanes.rowPos[0] + static_cast<float>(r);
    for (int k = 0; consecutive && k * width < lanes.lanes; ++k)
      consecutive = lanes.rowPos[0] - lanes.keyPos[k] + static_cast<float>(last / 2) >= 0.0f &&
                    lanes.rowPos[0] - lanes.keyPos[k] + static_cast<float>(last / 2 + width - 1) <= static_cast<float>(last);
    if (consecutive) {
      for (int k = 0; k * width < lanes.lanes; ++k) {
        double *run = to + static_cast<int32_t>(lanes.rowPos[0] - lanes.keyPos[k]) + last / 2;
        const float *w = weight + k * width, *dv = deriv + k * width;
        for (int r = 0; r < width; ++r)
          run[r] += w[r] == 0.0f ? 0.0f : w[r] * dv[r];
      }
      continue;
    }
    for (int l = 0; l < lanes.lanes; ++l) {
      if (weight[l] == 0.0f) // (no pair here: its distance may be anything)
        continue;
      int32_t at = static_cast<int32_t>(distance[l]) + last / 2;
      at = at < 0 ? 0 : at > last ? last : at;
      to[at] += weight[l] * deriv[l];
    }
  }
  for (const ScoreCode::Grad &g : code.grads) {
    const float *deriv = lanes.slot(g.deriv);
    double *to = grad + offsets[static_cast<size_t>(g.input)];
    if (g.flat >= 0) {
      float part[16] = {}; // (16 partial sums: a vectorised reduction)
      int l = 0;
      for (; l + 16 <= lanes.lanes; l += 16)
        for (int x = 0; x < 16; ++x)
          part[x] += weight[l + x] == 0 ? 0.0f : weight[l + x] * deriv[l + x];
      for (; l < lanes.lanes; ++l)
        part[l % 16] += weight[l] == 0 ? 0.0f : weight[l] * deriv[l];
      double sum = 0;
      for (float x : part)
        sum += x;
      to[g.flat] += sum;
      continue;
    }
    // Where the read read: its indices' slots, as the runner computed them.
    const ScoreCode::Instr *read = nullptr;
    for (const ScoreCode::Instr &in : code.code)
      if (in.kind == K::Read && in.read == g.read)
        read = &in;
    ATTNC_CHECK(read, "a score gradient without its read");
    const ScoreCode::ReadOf &r = code.reads[static_cast<size_t>(g.read)];
    const float *idx[3] = {lanes.slot(read->a), read->b >= 0 ? lanes.slot(read->b) : nullptr,
                           read->c >= 0 ? lanes.slot(read->c) : nullptr};
    switch (r.dims.size()) {
    case 1: scatterReadGrads<1>(r, idx, weight, deriv, lanes.lanes, to); break;
    case 2: scatterReadGrads<2>(r, idx, weight, deriv, lanes.lanes, to); break;
    default: scatterReadGrads<3>(r, idx, weight, deriv, lanes.lanes, to); break;
    }
  }
}

int64_t scoreGradSize(const ScoreCode &code, const std::vector<FloatInput> &inputs) {
  std::vector<int64_t> offsets;
  int64_t total = floatOffsets(inputs, offsets);
  for (const ScoreCode::TableGrad &t : code.tableGrads)
    total += static_cast<int64_t>(code.tables[static_cast<size_t>(t.table)].size());
  return total;
}

void foldTableGrads(const ScoreCode &code, const std::vector<int64_t> &offsets, double *grad, ScoreRunner runner) {
  std::vector<float> weight(ScoreCode::kMaxLanes);
  for (const ScoreCode::TableGrad &t : code.tableGrads) {
    const int64_t n = (static_cast<int64_t>(code.tables[static_cast<size_t>(t.table)].size()) + 1) / 2;
    const double *sums = grad + t.at;
    overDistances(*t.sub, n, runner, nullptr, [&](const ScoreLanes &lanes, int64_t t0) {
      for (int l = 0; l < lanes.lanes; ++l)
        weight[static_cast<size_t>(l)] = static_cast<float>(sums[t0 + l]);
      accumulateScoreGrads(*t.sub, lanes, weight.data(), offsets, grad);
    });
  }
}

} // namespace attnc::rt
