//===- Term.cpp - Typed, resolved expressions of a pattern ----------------===//
#include "attnc/plan/Term.h"

#include "attnc/plan/Inputs.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>

namespace attnc {

Type resultType(Op op) {
  switch (op) {
  case Op::Const: case Op::VarI: case Op::VarJ: case Op::VarN: case Op::VarH:
  case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Mod:
  case Op::Neg: case Op::Abs: case Op::Min: case Op::Max: case Op::Input:
    return Type::Int;
  case Op::BoolConst: case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le:
  case Op::Gt: case Op::Ge: case Op::And: case Op::Or: case Op::Not: case Op::In:
    return Type::Bool;
  default:
    return Type::Set;
  }
}

void divisionByNonPositive(int64_t m) {
  internalError(__FILE__, __LINE__, "division by a non-positive value " + std::to_string(m));
}

Term::Term(Op op, Type type, int64_t value, std::vector<TermRef> args, SourceRange loc)
    : op_(op), type_(type), value_(value), args_(std::move(args)), loc_(loc) {
  switch (op) {
  case Op::VarI: vars_ = kUsesI; break;
  case Op::VarJ: vars_ = kUsesJ; break;
  case Op::VarN: vars_ = kUsesN; break;
  case Op::VarH: vars_ = kUsesH; break;
  case Op::Input: case Op::InputRow: vars_ = kUsesData; break;
  default: break;
  }
  for (const TermRef &a : args_)
    vars_ |= a->vars_;
  // A set-builder binds j; its own key variable is not free outside.
  if (op == Op::Builder)
    vars_ &= ~kUsesJ;
}

TermRef Term::constant(int64_t v, SourceRange loc) {
  return TermRef(new Term(Op::Const, Type::Int, v, {}, loc));
}
TermRef Term::boolean(bool v, SourceRange loc) {
  return TermRef(new Term(Op::BoolConst, Type::Bool, v ? 1 : 0, {}, loc));
}
TermRef Term::var(Op which, SourceRange loc) {
  ATTNC_CHECK(which == Op::VarI || which == Op::VarJ || which == Op::VarN || which == Op::VarH,
              "not a variable");
  return TermRef(new Term(which, Type::Int, 0, {}, loc));
}

size_t arity(Op op) {
  switch (op) {
  case Op::Neg: case Op::Abs: case Op::Not: case Op::Builder: return 1;
  case Op::Min: case Op::Max: case Op::List: return SIZE_MAX; // variadic
  case Op::RandomBlocks: return 3;
  case Op::InputRow: return 1;
  case Op::Input: return SIZE_MAX;
  default: return 2;
  }
}

Type operandType(Op op, size_t index) {
  switch (op) {
  case Op::And: case Op::Or: case Op::Not: case Op::Builder:
    return Type::Bool;
  case Op::Union: case Op::Intersect: case Op::Difference: case Op::Fallback:
    return Type::Set;
  case Op::In:
    return index == 0 ? Type::Int : Type::Set;
  default:
    return Type::Int;
  }
}

TermRef Term::input(Op op, int64_t index, std::vector<TermRef> indices, SourceRange loc,
                    std::shared_ptr<const InputArray> data) {
  ATTNC_CHECK(op == Op::Input || op == Op::InputRow, "not an input read");
  ATTNC_CHECK(data, "an input read needs its array (bound or not)");
  ATTNC_CHECK(op == Op::InputRow ? data->rank == 2 && indices.size() == 1
                                 : indices.size() == static_cast<size_t>(data->rank),
              "wrong index count for input '" + data->name + "'");
  for (const TermRef &x : indices)
    ATTNC_CHECK(x && x->type() == Type::Int, "an input index must be an integer");
  TermRef t(new Term(op, resultType(op), index, std::move(indices), loc));
  const_cast<Term &>(*t).data_ = std::move(data);
  return t;
}

TermRef Term::make(Op op, std::vector<TermRef> args, SourceRange loc) {
  ATTNC_CHECK(op != Op::Input && op != Op::InputRow, "input reads are built by Term::input");
  size_t want = arity(op);
  ATTNC_CHECK(want == SIZE_MAX ? (op == Op::List || !args.empty()) : args.size() == want,
              "wrong operand count");
  for (size_t k = 0; k < args.size(); ++k)
    ATTNC_CHECK(args[k] && args[k]->type() == operandType(op, k), "operand type mismatch");

  bool allConst = std::all_of(args.begin(), args.end(), [](const TermRef &a) { return a->isConst(); });
  Type type = resultType(op);
  if (allConst && !args.empty() && type != Type::Set) {
    // Fold, unless folding would divide by a value < 1 (Sema reports those).
    if (!((op == Op::Div || op == Op::Mod) && args[1]->value() < 1)) {
      Env env;
      TermRef tmp(new Term(op, type, 0, args, loc));
      if (type == Type::Int)
        return constant(evalInt(*tmp, env), loc);
      return boolean(evalBool(*tmp, env), loc);
    }
  }
  // Cheap identities keep printed IR readable.
  auto isConstValue = [](const TermRef &t, int64_t v) { return t->op() == Op::Const && t->value() == v; };
  switch (op) {
  case Op::Add:
    if (isConstValue(args[1], 0)) return args[0];
    if (isConstValue(args[0], 0)) return args[1];
    break;
  case Op::Sub:
    if (isConstValue(args[1], 0)) return args[0];
    break;
  case Op::Mul:
    if (isConstValue(args[1], 1)) return args[0];
    if (isConstValue(args[0], 1)) return args[1];
    break;
  case Op::Div:
    if (isConstValue(args[1], 1)) return args[0];
    break;
  case Op::And:
    for (int k = 0; k < 2; ++k)
      if (args[k]->op() == Op::BoolConst)
        return args[k]->value() ? args[1 - k] : args[k];
    break;
  case Op::Or:
    for (int k = 0; k < 2; ++k)
      if (args[k]->op() == Op::BoolConst)
        return args[k]->value() ? args[k] : args[1 - k];
    break;
  default:
    break;
  }
  return TermRef(new Term(op, type, 0, std::move(args), loc));
}

namespace {
/// Two's-complement arithmetic modulo 2^64: Sema refuses constants that
/// overflow, but a term kept for evaluation (`j * 4611686018427387904 * 4
/// <= i`) can still overflow at some i, j; it wraps instead of being
/// undefined behaviour.
int64_t wrapped(uint64_t x) { return static_cast<int64_t>(x); }
} // namespace

namespace {
/// One node's value from its operands' (`a(k)`: operand k's value).
template <typename Operand>
int64_t evalNode(const Term &t, const Env &env, Operand &&a) {
  auto u = [&](size_t k) { return static_cast<uint64_t>(a(k)); };
  switch (t.op()) {
  case Op::Const: return t.value();
  case Op::VarI: return env.i;
  case Op::VarJ: return env.j;
  case Op::VarN: return env.n;
  case Op::VarH: return env.h;
  case Op::Input: {
    if (!t.data()->bound)
      throw InputError("input '" + t.data()->name + "' has no data (it is given with every call)");
    return t.args().size() == 1 ? t.data()->at(a(0)) : t.data()->at(a(0), a(1));
  }
  case Op::Add: return wrapped(u(0) + u(1));
  case Op::Sub: return wrapped(u(0) - u(1));
  case Op::Mul: return wrapped(u(0) * u(1));
  case Op::Div: return floorDiv(a(0), a(1));
  case Op::Mod: return floorMod(a(0), a(1));
  case Op::Neg: return wrapped(0 - u(0));
  case Op::Abs: {
    const int64_t v = a(0);
    return v < 0 ? wrapped(0 - static_cast<uint64_t>(v)) : v;
  }
  case Op::Min: case Op::Max: {
    int64_t v = a(0);
    for (size_t k = 1; k < t.args().size(); ++k)
      v = t.op() == Op::Min ? std::min(v, a(k)) : std::max(v, a(k));
    return v;
  }
  default:
    ATTNC_CHECK(false, "evalInt on a non-integer term");
  }
  return 0;
}

/// The values evalIntShared keeps: a direct-mapped table of nodes, each
/// entry valid in the scope (generation) and at the variables it was
/// computed in.
struct SharedValues {
  struct Slot {
    const Term *term = nullptr;
    uint64_t generation = 0;
    Env env;
    int64_t value = 0;
  };
  static constexpr size_t kSlots = 256;
  uint64_t generation = 0; ///< the innermost open scope's; 0: none open
  uint64_t next = 1;
  Slot slots[kSlots];
  /// The innermost open TermTape::Scope's tape, values and variables, and
  /// the value arrays of the open ones (one per level, reused).
  const TermTape *tape = nullptr;
  const int64_t *tapeValues = nullptr;
  Env tapeEnv;
  size_t tapeDepth = 0;
  std::vector<std::vector<int64_t>> tapeBuffers;
};
SharedValues &sharedValues() {
  thread_local SharedValues values;
  return values;
}

bool sameEnv(const Env &a, const Env &b) { return a.i == b.i && a.j == b.j && a.n == b.n && a.h == b.h; }
} // namespace

int64_t evalInt(const Term &t, const Env &env) {
  return evalNode(t, env, [&](size_t k) { return evalInt(*t.arg(k), env); });
}

SharedTermsScope::SharedTermsScope() : outer_(sharedValues().generation) {
  SharedValues &v = sharedValues();
  v.generation = v.next++; // (a scope inside another sees none of its values, nor it the inner one's)
}

SharedTermsScope::~SharedTermsScope() { sharedValues().generation = outer_; }

namespace {
int64_t evalShared(const Term &t, const Env &env, SharedValues &v) {
  if (t.args().empty() || t.op() == Op::Input)
    return evalNode(t, env, [&](size_t k) { return evalShared(*t.arg(k), env, v); });
  SharedValues::Slot &slot = v.slots[(reinterpret_cast<uintptr_t>(&t) >> 4) % SharedValues::kSlots];
  if (slot.term == &t && slot.generation == v.generation && sameEnv(slot.env, env))
    return slot.value;
  const int64_t value = evalNode(t, env, [&](size_t k) { return evalShared(*t.arg(k), env, v); });
  slot = {&t, v.generation, env, value};
  return value;
}
} // namespace

int64_t evalIntShared(const Term &t, const Env &env) {
  SharedValues &v = sharedValues(); // (once: a thread_local of a shared library costs a call)
  if (v.tape && sameEnv(v.tapeEnv, env))
    if (const int32_t k = v.tape->find(&t); k >= 0)
      return v.tapeValues[k];
  return v.generation == 0 ? evalInt(t, env) : evalShared(t, env, v);
}

namespace {
/// Whether the tape can hold `t`: integer arithmetic of the variables and
/// constants only, dividing by positive constants (evaluating every root
/// of a row at once must not raise an error a lazy walk would not reach).
bool tapeable(const Term &t) {
  switch (t.op()) {
  case Op::Const: case Op::VarI: case Op::VarJ: case Op::VarN: case Op::VarH:
  case Op::Add: case Op::Sub: case Op::Mul: case Op::Neg: case Op::Abs: case Op::Min: case Op::Max:
    break;
  case Op::Div: case Op::Mod:
    if (t.arg(1)->op() != Op::Const || t.arg(1)->value() < 1)
      return false;
    break;
  default:
    return false;
  }
  return std::all_of(t.args().begin(), t.args().end(), [](const TermRef &a) { return tapeable(*a); });
}
} // namespace

TermTape::TermTape(const std::vector<TermRef> &roots) {
  std::vector<std::pair<const Term *, int32_t>> index; // every node placed so far
  auto indexOf = [&](const Term *t) -> int32_t {
    for (const auto &[term, k] : index) // (tens of distinct nodes: a scan is fine at build time)
      if (term == t)
        return k;
    return -1;
  };
  std::function<int32_t(const Term &)> place = [&](const Term &t) -> int32_t {
    if (const int32_t k = indexOf(&t); k >= 0)
      return k;
    std::vector<int32_t> operands;
    for (const TermRef &a : t.args())
      operands.push_back(place(*a));
    Node node{t.op(), static_cast<int32_t>(args_.size()), static_cast<int32_t>(operands.size()),
              t.op() == Op::Const ? t.value() : 0};
    args_.insert(args_.end(), operands.begin(), operands.end());
    nodes_.push_back(node);
    index.push_back({&t, static_cast<int32_t>(nodes_.size() - 1)});
    return static_cast<int32_t>(nodes_.size() - 1);
  };
  std::vector<std::pair<const Term *, int32_t>> placed;
  for (const TermRef &r : roots)
    if (r && tapeable(*r) && std::none_of(placed.begin(), placed.end(), [&](const auto &p) { return p.first == r.get(); }))
      placed.push_back({r.get(), place(*r)});
  rootCount_ = placed.size();
  size_t size = 8;
  while (size < 2 * placed.size())
    size *= 2;
  table_.assign(size, {nullptr, -1});
  for (const auto &[term, k] : placed) {
    size_t slot = (reinterpret_cast<uintptr_t>(term) >> 4) & (size - 1);
    while (table_[slot].first)
      slot = (slot + 1) & (size - 1);
    table_[slot] = {term, k};
  }
}

void TermTape::markInputs(int32_t slot, std::vector<char> &reached) const {
  const Node &x = nodes_[static_cast<size_t>(slot)];
  if (x.op == Op::Const || reached[static_cast<size_t>(slot)])
    return;
  reached[static_cast<size_t>(slot)] = 1;
  for (int32_t q = 0; q < x.count; ++q)
    markInputs(args_[static_cast<size_t>(x.first + q)], reached);
}

int32_t TermTape::find(const Term *t) const {
  const size_t mask = table_.size() - 1;
  for (size_t slot = (reinterpret_cast<uintptr_t>(t) >> 4) & mask;; slot = (slot + 1) & mask) {
    if (table_[slot].first == t)
      return table_[slot].second;
    if (!table_[slot].first)
      return -1;
  }
}

TermTape::Scope::Scope(const TermTape &tape, const Env &env) {
  SharedValues &v = sharedValues();
  outerTape_ = v.tape;
  outerValues_ = v.tapeValues;
  outerEnv_ = v.tapeEnv;
  if (v.tapeBuffers.size() <= v.tapeDepth)
    v.tapeBuffers.emplace_back();
  std::vector<int64_t> &values = v.tapeBuffers[v.tapeDepth++];
  values.resize(tape.nodes_.size());
  int64_t *val = values.data();
  const int32_t *args = tape.args_.data();
  for (size_t k = 0; k < tape.nodes_.size(); ++k) {
    const Node &x = tape.nodes_[k];
    const int32_t *a = args + x.first;
    auto u = [&](int q) { return static_cast<uint64_t>(val[a[q]]); };
    int64_t r = 0;
    switch (x.op) {
    case Op::Const: r = x.value; break;
    case Op::VarI: r = env.i; break;
    case Op::VarJ: r = env.j; break;
    case Op::VarN: r = env.n; break;
    case Op::VarH: r = env.h; break;
    case Op::Add: r = wrapped(u(0) + u(1)); break;
    case Op::Sub: r = wrapped(u(0) - u(1)); break;
    case Op::Mul: r = wrapped(u(0) * u(1)); break;
    case Op::Div: r = floorDiv(val[a[0]], val[a[1]]); break;
    case Op::Mod: r = floorMod(val[a[0]], val[a[1]]); break;
    case Op::Neg: r = wrapped(0 - u(0)); break;
    case Op::Abs: r = val[a[0]] < 0 ? wrapped(0 - u(0)) : val[a[0]]; break;
    case Op::Min: case Op::Max:
      r = val[a[0]];
      for (int32_t q = 1; q < x.count; ++q)
        r = x.op == Op::Min ? std::min(r, val[a[q]]) : std::max(r, val[a[q]]);
      break;
    default:
      ATTNC_CHECK(false, "a term tape holds integer arithmetic only");
    }
    val[k] = r;
  }
  v.tape = &tape;
  v.tapeValues = val;
  v.tapeEnv = env;
  tape_ = &tape;
  values_ = val;
}

TermTape::Scope::~Scope() {
  SharedValues &v = sharedValues();
  --v.tapeDepth;
  v.tape = outerTape_;
  v.tapeValues = outerValues_;
  v.tapeEnv = outerEnv_;
}

bool evalBool(const Term &t, const Env &env) {
  auto i = [&](size_t k) { return evalInt(*t.arg(k), env); };
  auto b = [&](size_t k) { return evalBool(*t.arg(k), env); };
  switch (t.op()) {
  case Op::BoolConst: return t.value() != 0;
  case Op::Eq: return i(0) == i(1);
  case Op::Ne: return i(0) != i(1);
  case Op::Lt: return i(0) < i(1);
  case Op::Le: return i(0) <= i(1);
  case Op::Gt: return i(0) > i(1);
  case Op::Ge: return i(0) >= i(1);
  case Op::And: return b(0) && b(1);
  case Op::Or: return b(0) || b(1);
  case Op::Not: return !b(0);
  case Op::In: {
    Env inner = env;
    inner.j = i(0);
    return contains(*t.arg(1), inner);
  }
  default:
    ATTNC_CHECK(false, "evalBool on a non-boolean term");
  }
  return false;
}

std::vector<int64_t> randomBlocksOf(int64_t seed, int64_t queryBlock, int64_t count,
                                    int64_t numBlocks) {
  std::vector<int64_t> out;
  if (numBlocks <= 0 || count <= 0)
    return out;
  if (count >= numBlocks) {
    for (int64_t b = 0; b < numBlocks; ++b)
      out.push_back(b);
    return out;
  }
  uint64_t state = static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull ^
                   (static_cast<uint64_t>(queryBlock) + 0x632BE59BD9B4E019ull);
  auto next = [&state]() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  // Floyd's algorithm: `count` distinct values with O(count) work.
  for (int64_t k = numBlocks - count; k < numBlocks; ++k) {
    int64_t pick = static_cast<int64_t>(next() % static_cast<uint64_t>(k + 1));
    if (std::find(out.begin(), out.end(), pick) != out.end())
      pick = k;
    out.push_back(pick);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool contains(const Term &t, const Env &env) {
  if (env.j < 0 || env.j >= env.n)
    return false;
  switch (t.op()) {
  case Op::Builder:
    return evalBool(*t.arg(0), env);
  case Op::Range:
    return evalInt(*t.arg(0), env) <= env.j && env.j <= evalInt(*t.arg(1), env);
  case Op::List:
    for (const TermRef &e : t.args())
      if (evalInt(*e, env) == env.j)
        return true;
    return false;
  case Op::Union:
    return contains(*t.arg(0), env) || contains(*t.arg(1), env);
  case Op::Intersect:
    return contains(*t.arg(0), env) && contains(*t.arg(1), env);
  case Op::Difference:
    return contains(*t.arg(0), env) && !contains(*t.arg(1), env);
  case Op::RandomBlocks: {
    int64_t block = evalInt(*t.arg(0), env);
    int64_t numBlocks = floorDiv(env.n + block - 1, block);
    auto blocks = randomBlocksOf(evalInt(*t.arg(2), env), floorDiv(env.i, block),
                                 evalInt(*t.arg(1), env), numBlocks);
    return std::binary_search(blocks.begin(), blocks.end(), floorDiv(env.j, block));
  }
  case Op::InputRow: {
    const InputArray &a = *t.data();
    if (!a.bound)
      throw InputError("input '" + a.name + "' has no data (it is given with every call)");
    const int64_t r = evalInt(*t.arg(0), env);
    for (int64_t c = 0; c < a.cols; ++c)
      if (a.at(r, c) == env.j)
        return true;
    return false;
  }
  case Op::Fallback: {
    // A's row decides: is any key of [0, n) in it?
    Env probe = env;
    for (probe.j = 0; probe.j < env.n; ++probe.j)
      if (contains(*t.arg(0), probe))
        return contains(*t.arg(0), env);
    return contains(*t.arg(1), env);
  }
  default:
    ATTNC_CHECK(false, "contains on a non-set term");
  }
  return false;
}

TermRef substituteHead(const TermRef &t, int64_t head) {
  if (!t->uses(kUsesH))
    return t;
  if (t->op() == Op::VarH)
    return Term::constant(head, t->loc());
  std::vector<TermRef> args;
  args.reserve(t->args().size());
  for (const TermRef &a : t->args())
    args.push_back(substituteHead(a, head));
  if (t->op() == Op::Input || t->op() == Op::InputRow)
    return Term::input(t->op(), t->value(), std::move(args), t->loc(), t->dataRef());
  return Term::make(t->op(), std::move(args), t->loc());
}

bool structurallyEqual(const Term &a, const Term &b) {
  if (a.op() != b.op() || a.value() != b.value() || a.args().size() != b.args().size())
    return false;
  for (size_t k = 0; k < a.args().size(); ++k)
    if (!structurallyEqual(*a.arg(k), *b.arg(k)))
      return false;
  return true;
}

static int termPrecedence(Op op) {
  switch (op) {
  case Op::Fallback: return 0;
  case Op::Or: return 1;
  case Op::And: return 2;
  case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::In:
    return 3;
  case Op::Union: return 4;
  case Op::Intersect: return 5;
  case Op::Add: case Op::Sub: case Op::Difference: return 6;
  case Op::Mul: case Op::Div: case Op::Mod: return 7;
  case Op::Neg: case Op::Not: return 8;
  default: return 9;
  }
}

static const char *binarySpelling(Op op) {
  switch (op) {
  case Op::Add: return "+"; case Op::Sub: return "-"; case Op::Mul: return "*";
  case Op::Div: return "/"; case Op::Mod: return "%"; case Op::Eq: return "==";
  case Op::Ne: return "!="; case Op::Lt: return "<"; case Op::Le: return "<=";
  case Op::Gt: return ">"; case Op::Ge: return ">="; case Op::And: return "&&";
  case Op::Or: return "||"; case Op::In: return "in"; case Op::Union: return "|";
  case Op::Intersect: return "&"; case Op::Difference: return "-";
  case Op::Fallback: return "else";
  default: return "?";
  }
}

static void printInto(std::ostringstream &os, const Term &t, int parent, bool right) {
  int prec = termPrecedence(t.op());
  bool paren = prec < parent || (right && prec == parent && prec < 8);
  if (paren)
    os << "(";
  switch (t.op()) {
  case Op::Const: os << t.value(); break;
  case Op::BoolConst: os << (t.value() ? "true" : "false"); break;
  case Op::VarI: os << "i"; break;
  case Op::VarJ: os << "j"; break;
  case Op::VarN: os << "n"; break;
  case Op::VarH: os << "h"; break;
  case Op::Neg: os << "-"; printInto(os, *t.arg(0), prec, false); break;
  case Op::Not: os << "!"; printInto(os, *t.arg(0), prec, false); break;
  case Op::Abs: case Op::Min: case Op::Max: case Op::RandomBlocks:
    os << (t.op() == Op::Abs ? "abs" : t.op() == Op::Min ? "min" : t.op() == Op::Max ? "max"
                                                                                 : "random_blocks")
       << "(";
    for (size_t k = 0; k < t.args().size(); ++k) {
      if (k)
        os << ", ";
      printInto(os, *t.arg(k), 0, false);
    }
    os << ")";
    break;
  case Op::Input: case Op::InputRow:
    os << t.data()->name << "[";
    for (size_t k = 0; k < t.args().size(); ++k) {
      if (k)
        os << ", ";
      printInto(os, *t.arg(k), 0, false);
    }
    os << "]";
    break;
  case Op::Builder:
    os << "{ j : ";
    printInto(os, *t.arg(0), 0, false);
    os << " }";
    break;
  case Op::Range:
    os << "{ ";
    printInto(os, *t.arg(0), 0, false);
    os << " .. ";
    printInto(os, *t.arg(1), 0, false);
    os << " }";
    break;
  case Op::Fallback: // loosest, grouped to the right: A else (B else C)
    printInto(os, *t.arg(0), 1, false);
    os << " else ";
    printInto(os, *t.arg(1), 0, false);
    break;
  case Op::List:
    os << "{";
    for (size_t k = 0; k < t.args().size(); ++k) {
      os << (k ? ", " : " ");
      printInto(os, *t.arg(k), 0, false);
    }
    os << (t.args().empty() ? "}" : " }");
    break;
  default: {
    bool cmp = termPrecedence(t.op()) == 3;
    printInto(os, *t.arg(0), cmp ? prec + 1 : prec, false);
    os << " " << binarySpelling(t.op()) << " ";
    printInto(os, *t.arg(1), cmp ? prec + 1 : prec, true);
    break;
  }
  }
  if (paren)
    os << ")";
}

std::string printTerm(const Term &t) {
  std::ostringstream os;
  printInto(os, t, 0, false);
  return os.str();
}

namespace {
constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min();
constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max();

int64_t clampWide(__int128 v) {
  if (v <= static_cast<__int128>(kNegInf))
    return kNegInf;
  if (v >= static_cast<__int128>(kPosInf))
    return kPosInf;
  return static_cast<int64_t>(v);
}
// Treat the sentinels as infinities in products and sums.
__int128 wide(int64_t v) {
  if (v == kNegInf)
    return -(static_cast<__int128>(1) << 100);
  if (v == kPosInf)
    return static_cast<__int128>(1) << 100;
  return v;
}
} // namespace

namespace {
ValueRange addRanges(ValueRange a, ValueRange b) {
  return {clampWide(wide(a.lo) + wide(b.lo)), clampWide(wide(a.hi) + wide(b.hi))};
}

ValueRange negRange(ValueRange a) { return {clampWide(-wide(a.hi)), clampWide(-wide(a.lo))}; }

ValueRange mulRanges(ValueRange a, ValueRange b) {
  // Products of two "infinities" overflow __int128; saturate by sign.
  auto sat = [](int64_t x, int64_t y) -> __int128 {
    bool inf = x == kNegInf || x == kPosInf || y == kNegInf || y == kPosInf;
    if (!inf)
      return static_cast<__int128>(x) * y;
    if (x == 0 || y == 0)
      return 0;
    return ((x < 0) != (y < 0)) ? -(static_cast<__int128>(1) << 100)
                                : (static_cast<__int128>(1) << 100);
  };
  __int128 c[4] = {sat(a.lo, b.lo), sat(a.lo, b.hi), sat(a.hi, b.lo), sat(a.hi, b.hi)};
  return {clampWide(*std::min_element(c, c + 4)), clampWide(*std::max_element(c, c + 4))};
}

/// t = ci*i + cj*j + cn*n + c0 + rest, with `rest` (the parts that are not
/// linear in i, j, n, and h) only bounded by an interval. Interval arithmetic
/// alone forgets that i and j are below n, and bounds `n - i` by -inf; the
/// linear part keeps the three together.
struct LinearForm {
  int64_t ci = 0, cj = 0, cn = 0, c0 = 0;
  ValueRange rest{0, 0};
};

/// Add, Sub, Neg and a product with a constant: the nodes a LinearForm follows.
bool isLinearNode(const Term &t) {
  switch (t.op()) {
  case Op::Add: case Op::Sub: case Op::Neg: return true;
  case Op::Mul: return t.arg(0)->op() == Op::Const || t.arg(1)->op() == Op::Const;
  default: return false;
  }
}

/// Interval rules only, one node deep (operands go through rangeOf).
ValueRange intervalOf(const Term &t, int64_t numHeads);

/// Nullopt when a coefficient overflows (rangeOf then uses intervals).
std::optional<LinearForm> linearForm(const Term &t, int64_t numHeads) {
  LinearForm f;
  switch (t.op()) {
  case Op::Const: f.c0 = t.value(); return f;
  case Op::VarI: f.ci = 1; return f;
  case Op::VarJ: f.cj = 1; return f;
  case Op::VarN: f.cn = 1; return f;
  default: break;
  }
  if (!isLinearNode(t)) {
    f.rest = rangeOf(t, numHeads);
    return f;
  }
  if (t.op() == Op::Add || t.op() == Op::Sub) {
    auto a = linearForm(*t.arg(0), numHeads), b = linearForm(*t.arg(1), numHeads);
    if (!a || !b)
      return std::nullopt;
    bool add = t.op() == Op::Add;
    auto combine = [add](int64_t x, int64_t y, int64_t &out) {
      return add ? !__builtin_add_overflow(x, y, &out) : !__builtin_sub_overflow(x, y, &out);
    };
    if (!combine(a->ci, b->ci, f.ci) || !combine(a->cj, b->cj, f.cj) ||
        !combine(a->cn, b->cn, f.cn) || !combine(a->c0, b->c0, f.c0))
      return std::nullopt;
    f.rest = addRanges(a->rest, add ? b->rest : negRange(b->rest));
    return f;
  }
  // Neg is a product with -1.
  int64_t c = -1;
  const Term *x = t.arg(0).get();
  if (t.op() == Op::Mul) {
    bool left = t.arg(0)->op() == Op::Const;
    c = (left ? t.arg(0) : t.arg(1))->value();
    x = (left ? t.arg(1) : t.arg(0)).get();
  }
  auto a = linearForm(*x, numHeads);
  if (!a || __builtin_mul_overflow(a->ci, c, &f.ci) || __builtin_mul_overflow(a->cj, c, &f.cj) ||
      __builtin_mul_overflow(a->cn, c, &f.cn) || __builtin_mul_overflow(a->c0, c, &f.c0))
    return std::nullopt;
  f.rest = mulRanges(a->rest, {c, c});
  return f;
}

/// Bounds of a LinearForm over n >= 1, i and j in [0, n - 1]. With t = n - 1,
/// the linear part is c0 + cn + t * (cn + ci * i/t + cj * j/t): its least
/// value is c0 + cn (at n = 1) when cn + min(0, ci) + min(0, cj) >= 0, and it
/// is unbounded below otherwise; symmetrically above.
ValueRange boundOf(const LinearForm &f) {
  __int128 atOne = static_cast<__int128>(f.c0) + f.cn;
  __int128 slopeLo = static_cast<__int128>(f.cn) + std::min<int64_t>(0, f.ci) +
                     std::min<int64_t>(0, f.cj);
  __int128 slopeHi = static_cast<__int128>(f.cn) + std::max<int64_t>(0, f.ci) +
                     std::max<int64_t>(0, f.cj);
  ValueRange linear{slopeLo >= 0 ? clampWide(atOne) : kNegInf,
                    slopeHi <= 0 ? clampWide(atOne) : kPosInf};
  return addRanges(linear, f.rest);
}

ValueRange intervalOf(const Term &t, int64_t numHeads) {
  auto r = [&](size_t k) { return rangeOf(*t.arg(k), numHeads); };
  switch (t.op()) {
  case Op::Const: return {t.value(), t.value()};
  case Op::VarI: case Op::VarJ: return {0, kPosInf};
  case Op::VarN: return {1, kPosInf};
  case Op::VarH: return {0, std::max<int64_t>(0, numHeads - 1)};
  case Op::Add: return addRanges(r(0), r(1));
  case Op::Sub: return addRanges(r(0), negRange(r(1)));
  case Op::Neg: return negRange(r(0));
  case Op::Mul: return mulRanges(r(0), r(1));
  case Op::Div: {
    auto a = r(0), b = r(1);
    if (b.lo < 1)
      return {kNegInf, kPosInf};
    auto d = [&](int64_t x, int64_t m) -> int64_t {
      if (x == kNegInf || x == kPosInf)
        return x;
      return m == kPosInf ? (x < 0 ? -1 : 0) : floorDiv(x, m);
    };
    int64_t c[4] = {d(a.lo, b.lo), d(a.lo, b.hi), d(a.hi, b.lo), d(a.hi, b.hi)};
    return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
  }
  case Op::Mod: {
    auto b = r(1);
    if (b.lo < 1)
      return {kNegInf, kPosInf};
    return {0, b.hi == kPosInf ? kPosInf : b.hi - 1};
  }
  case Op::Abs: {
    auto a = r(0);
    if (a.lo >= 0)
      return a;
    if (a.hi <= 0)
      return negRange(a);
    return {0, std::max(clampWide(-wide(a.lo)), a.hi)};
  }
  case Op::Min: case Op::Max: {
    ValueRange v = r(0);
    for (size_t k = 1; k < t.args().size(); ++k) {
      ValueRange w = r(k);
      if (t.op() == Op::Min)
        v = {std::min(v.lo, w.lo), std::min(v.hi, w.hi)};
      else
        v = {std::max(v.lo, w.lo), std::max(v.hi, w.hi)};
    }
    return v;
  }
  default:
    return {kNegInf, kPosInf};
  }
}
} // namespace

ValueRange rangeOf(const Term &t, int64_t numHeads) {
  if (isLinearNode(t))
    if (auto f = linearForm(t, numHeads))
      return boundOf(*f);
  return intervalOf(t, numHeads);
}

std::optional<ValueRange> rangeOverRows(const Term &t, int64_t first, int64_t last, int64_t n) {
  auto r = [&](size_t k) { return rangeOverRows(*t.arg(k), first, last, n); };
  switch (t.op()) {
  case Op::Const: return ValueRange{t.value(), t.value()};
  case Op::VarI: return ValueRange{first, last};
  case Op::VarN: return ValueRange{n, n};
  case Op::Add: case Op::Sub: case Op::Mul: {
    auto a = r(0), b = r(1);
    if (!a || !b)
      return std::nullopt;
    if (t.op() == Op::Mul)
      return mulRanges(*a, *b);
    return addRanges(*a, t.op() == Op::Add ? *b : negRange(*b));
  }
  case Op::Neg: {
    auto a = r(0);
    return a ? std::optional{negRange(*a)} : std::nullopt;
  }
  case Op::Div: case Op::Mod: {
    // By a constant m >= 1 only: floor division is monotone, and so is the
    // remainder within one period of m.
    auto a = r(0), b = r(1);
    if (!a || !b || b->lo != b->hi || b->lo < 1 || a->lo == kNegInf || a->hi == kPosInf)
      return std::nullopt;
    const int64_t m = b->lo;
    if (t.op() == Op::Div)
      return ValueRange{floorDiv(a->lo, m), floorDiv(a->hi, m)};
    if (floorDiv(a->lo, m) == floorDiv(a->hi, m))
      return ValueRange{floorMod(a->lo, m), floorMod(a->hi, m)};
    return ValueRange{0, m - 1};
  }
  case Op::Abs: {
    auto a = r(0);
    if (!a)
      return std::nullopt;
    if (a->lo >= 0)
      return *a;
    if (a->hi <= 0)
      return negRange(*a);
    return ValueRange{0, std::max(clampWide(-wide(a->lo)), a->hi)};
  }
  case Op::Min: case Op::Max: {
    auto v = r(0);
    for (size_t k = 1; v && k < t.args().size(); ++k) {
      auto w = r(k);
      if (!w)
        return std::nullopt;
      v = t.op() == Op::Min ? ValueRange{std::min(v->lo, w->lo), std::min(v->hi, w->hi)}
                            : ValueRange{std::max(v->lo, w->lo), std::max(v->hi, w->hi)};
    }
    return v;
  }
  default: // j, h, booleans: not a function of the row alone
    return std::nullopt;
  }
}

} // namespace attnc
