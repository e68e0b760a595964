//===- Score.cpp - Score modifiers: trees, text and scalar meaning --------===//
//
// The s-expression reader is bounded in depth and checks every node before
// building it: kernel files are input, and a corrupt one must fail with a
// message, never crash or build a tree that evalScore cannot evaluate.
//
//===----------------------------------------------------------------------===//
#include "attnc/plan/Score.h"

#include "attnc/plan/Inputs.h"
#include "attnc/plan/Term.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace attnc {

ScoreRef ScoreExpr::constant(double v, bool isInt, SourceRange loc) {
  auto e = std::make_shared<ScoreExpr>();
  e->op = ScoreOp::Const;
  e->isInt = isInt;
  e->value = v;
  e->loc = loc;
  return e;
}

ScoreRef ScoreExpr::make(ScoreOp op, std::vector<ScoreRef> args, bool isInt, SourceRange loc) {
  auto e = std::make_shared<ScoreExpr>();
  e->op = op;
  e->isInt = isInt;
  e->args = std::move(args);
  e->loc = loc;
  return e;
}

ScoreRef ScoreExpr::read(int64_t input, std::vector<ScoreRef> indices, SourceRange loc) {
  auto e = std::make_shared<ScoreExpr>();
  e->op = ScoreOp::Input;
  e->isInt = false;
  e->input = input;
  e->args = std::move(indices);
  e->loc = loc;
  return e;
}

bool mentions(const ScoreExpr &e, ScoreOp op) {
  if (e.op == op)
    return true;
  for (const ScoreRef &a : e.args)
    if (mentions(*a, op))
      return true;
  return false;
}

bool structurallyEqual(const ScoreExpr &a, const ScoreExpr &b) {
  if (a.op != b.op || a.isInt != b.isInt || a.input != b.input || a.args.size() != b.args.size())
    return false;
  if (a.op == ScoreOp::Const &&
      !(std::memcmp(&a.value, &b.value, sizeof(double)) == 0 || (std::isnan(a.value) && std::isnan(b.value))))
    return false;
  for (size_t k = 0; k < a.args.size(); ++k)
    if (!structurallyEqual(*a.args[k], *b.args[k]))
      return false;
  return true;
}

namespace {

struct OpInfo {
  ScoreOp op;
  const char *name;
  size_t minArgs, maxArgs; ///< SIZE_MAX: any number
};
constexpr size_t kAny = SIZE_MAX;
constexpr OpInfo kOps[] = {
    {ScoreOp::Const, "const", 0, 0}, {ScoreOp::S, "s", 0, 0},         {ScoreOp::I, "i", 0, 0},
    {ScoreOp::J, "j", 0, 0},         {ScoreOp::H, "h", 0, 0},         {ScoreOp::N, "n", 0, 0},
    {ScoreOp::Input, "input", 1, kAny}, {ScoreOp::Add, "add", 2, 2},   {ScoreOp::Sub, "sub", 2, 2},
    {ScoreOp::Mul, "mul", 2, 2},     {ScoreOp::Div, "div", 2, 2},     {ScoreOp::IDiv, "idiv", 2, 2},
    {ScoreOp::Mod, "mod", 2, 2},     {ScoreOp::Neg, "neg", 1, 1},     {ScoreOp::Abs, "abs", 1, 1},
    {ScoreOp::Min, "min", 2, kAny},  {ScoreOp::Max, "max", 2, kAny},  {ScoreOp::Tanh, "tanh", 1, 1},
    {ScoreOp::Exp, "exp", 1, 1},     {ScoreOp::Log, "log", 1, 1},     {ScoreOp::Floor, "floor", 1, 1},
    {ScoreOp::Where, "where", 3, 3}, {ScoreOp::Lt, "lt", 2, 2},       {ScoreOp::Le, "le", 2, 2},
    {ScoreOp::Gt, "gt", 2, 2},       {ScoreOp::Ge, "ge", 2, 2},       {ScoreOp::Eq, "eq", 2, 2},
    {ScoreOp::Ne, "ne", 2, 2},       {ScoreOp::And, "and", 2, 2},     {ScoreOp::Or, "or", 2, 2},
    {ScoreOp::Not, "not", 1, 1},
};

const OpInfo &info(ScoreOp op) {
  for (const OpInfo &o : kOps)
    if (o.op == op)
      return o;
  ATTNC_CHECK(false, "a score operator without a name");
  return kOps[0];
}

bool isCondition(ScoreOp op) {
  switch (op) {
  case ScoreOp::Lt: case ScoreOp::Le: case ScoreOp::Gt: case ScoreOp::Ge: case ScoreOp::Eq:
  case ScoreOp::Ne: case ScoreOp::And: case ScoreOp::Or: case ScoreOp::Not:
    return true;
  default:
    return false;
  }
}

/// The shortest "%.Ng" that reads back as `v` exactly, an integral value
/// with a ".0" (the source's spelling of a float).
std::string shortestDouble(double v) {
  char buf[64];
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v || std::isnan(v))
      return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// ---- Printing ------------------------------------------------------------

int precedence(const ScoreExpr &e) {
  switch (e.op) {
  case ScoreOp::Or: return 1;
  case ScoreOp::And: return 2;
  case ScoreOp::Lt: case ScoreOp::Le: case ScoreOp::Gt: case ScoreOp::Ge: case ScoreOp::Eq:
  case ScoreOp::Ne: return 3;
  case ScoreOp::Add: case ScoreOp::Sub: return 6;
  case ScoreOp::Mul: case ScoreOp::Div: case ScoreOp::IDiv: case ScoreOp::Mod: return 7;
  case ScoreOp::Neg: case ScoreOp::Not: return 8;
  case ScoreOp::Const: return e.value < 0 || std::signbit(e.value) ? 8 : 9;
  default: return 9;
  }
}

const char *infix(ScoreOp op) {
  switch (op) {
  case ScoreOp::Add: return "+";
  case ScoreOp::Sub: return "-";
  case ScoreOp::Mul: return "*";
  case ScoreOp::Div: case ScoreOp::IDiv: return "/";
  case ScoreOp::Mod: return "%";
  case ScoreOp::Lt: return "<";
  case ScoreOp::Le: return "<=";
  case ScoreOp::Gt: return ">";
  case ScoreOp::Ge: return ">=";
  case ScoreOp::Eq: return "==";
  case ScoreOp::Ne: return "!=";
  case ScoreOp::And: return "&&";
  case ScoreOp::Or: return "||";
  default: return nullptr;
  }
}

void printInto(std::ostringstream &os, const ScoreExpr &e, const std::vector<std::string> &names, int parentPrec,
               bool rightSide) {
  const int prec = precedence(e);
  const bool paren = prec < parentPrec || (rightSide && prec == parentPrec && prec < 8);
  if (paren)
    os << '(';
  auto list = [&](const char *callee) {
    os << callee << '(';
    for (size_t k = 0; k < e.args.size(); ++k) {
      if (k)
        os << ", ";
      printInto(os, *e.args[k], names, 0, false);
    }
    os << ')';
  };
  switch (e.op) {
  case ScoreOp::Const:
    if (e.isInt)
      os << static_cast<int64_t>(e.value);
    else
      os << shortestDouble(e.value);
    break;
  case ScoreOp::S: os << 's'; break;
  case ScoreOp::I: os << 'i'; break;
  case ScoreOp::J: os << 'j'; break;
  case ScoreOp::H: os << 'h'; break;
  case ScoreOp::N: os << 'n'; break;
  case ScoreOp::Input: {
    const size_t k = static_cast<size_t>(e.input);
    os << (e.input >= 0 && k < names.size() ? names[k] : "input" + std::to_string(e.input)) << '[';
    for (size_t a = 0; a < e.args.size(); ++a) {
      if (a)
        os << ", ";
      printInto(os, *e.args[a], names, 0, false);
    }
    os << ']';
    break;
  }
  case ScoreOp::Neg:
  case ScoreOp::Not:
    os << (e.op == ScoreOp::Neg ? '-' : '!');
    printInto(os, *e.args[0], names, prec, false);
    break;
  case ScoreOp::Abs: case ScoreOp::Min: case ScoreOp::Max: case ScoreOp::Tanh: case ScoreOp::Exp:
  case ScoreOp::Log: case ScoreOp::Floor: case ScoreOp::Where:
    list(info(e.op).name);
    break;
  default:
    if (isCondition(e.op) && e.op != ScoreOp::And && e.op != ScoreOp::Or) {
      printInto(os, *e.args[0], names, prec + 1, false);
      os << ' ' << infix(e.op) << ' ';
      printInto(os, *e.args[1], names, prec + 1, false);
    } else {
      printInto(os, *e.args[0], names, prec, false);
      os << ' ' << infix(e.op) << ' ';
      printInto(os, *e.args[1], names, prec, true);
    }
    break;
  }
  if (paren)
    os << ')';
}

void textInto(std::ostringstream &os, const ScoreExpr &e) {
  switch (e.op) {
  case ScoreOp::Const:
    if (e.isInt) {
      os << static_cast<int64_t>(e.value);
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g", e.value);
      os << "(const " << buf << ')';
    }
    return;
  case ScoreOp::S: case ScoreOp::I: case ScoreOp::J: case ScoreOp::H: case ScoreOp::N:
    os << info(e.op).name;
    return;
  default:
    break;
  }
  os << '(' << info(e.op).name;
  if (e.op == ScoreOp::Input)
    os << ' ' << e.input;
  for (const ScoreRef &a : e.args) {
    os << ' ';
    textInto(os, *a);
  }
  os << ')';
}

// ---- Ranges --------------------------------------------------------------

constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();

int64_t satAdd(int64_t a, int64_t b) {
  if (a == kMin || b == kMin)
    return kMin; // (unbounded below stays so; callers add lo to lo, hi to hi)
  if (a == kMax || b == kMax)
    return kMax;
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    return a > 0 ? kMax : kMin;
  return r;
}

int64_t satMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return 0;
  int64_t r;
  if ((a == kMin || a == kMax || b == kMin || b == kMax) || __builtin_mul_overflow(a, b, &r))
    return (a < 0) != (b < 0) ? kMin : kMax;
  return r;
}

int64_t satNeg(int64_t a) { return a == kMin ? kMax : a == kMax ? kMin : -a; }

ScoreIntRange rangeOf(const ScoreExpr &e, int depth);

ScoreIntRange rangeOfImpl(const ScoreExpr &e, int depth) {
  auto arg = [&](size_t k) { return rangeOf(*e.args[k], depth + 1); };
  switch (e.op) {
  case ScoreOp::Const: {
    if (!(e.value >= -9.2e18 && e.value <= 9.2e18))
      return {kMin, kMax};
    const auto v = static_cast<int64_t>(e.value);
    return {v, v};
  }
  case ScoreOp::I: case ScoreOp::J: case ScoreOp::H: return {0, kMax};
  case ScoreOp::N: return {1, kMax};
  case ScoreOp::Add: {
    ScoreIntRange a = arg(0), b = arg(1);
    return {satAdd(a.lo, b.lo), satAdd(a.hi, b.hi)};
  }
  case ScoreOp::Sub: {
    ScoreIntRange a = arg(0), b = arg(1);
    return {satAdd(a.lo, satNeg(b.hi)), satAdd(a.hi, satNeg(b.lo))};
  }
  case ScoreOp::Mul: {
    ScoreIntRange a = arg(0), b = arg(1);
    int64_t c[] = {satMul(a.lo, b.lo), satMul(a.lo, b.hi), satMul(a.hi, b.lo), satMul(a.hi, b.hi)};
    return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
  }
  case ScoreOp::Neg: {
    ScoreIntRange a = arg(0);
    return {satNeg(a.hi), satNeg(a.lo)};
  }
  case ScoreOp::Abs: {
    ScoreIntRange a = arg(0);
    if (a.lo >= 0)
      return a;
    if (a.hi <= 0)
      return {satNeg(a.hi), satNeg(a.lo)};
    return {0, std::max(satNeg(a.lo), a.hi)};
  }
  case ScoreOp::Min:
  case ScoreOp::Max: {
    ScoreIntRange r = arg(0);
    for (size_t k = 1; k < e.args.size(); ++k) {
      ScoreIntRange b = arg(k);
      r = e.op == ScoreOp::Min ? ScoreIntRange{std::min(r.lo, b.lo), std::min(r.hi, b.hi)}
                               : ScoreIntRange{std::max(r.lo, b.lo), std::max(r.hi, b.hi)};
    }
    return r;
  }
  case ScoreOp::Mod: {
    ScoreIntRange m = arg(1);
    return {0, m.hi == kMax ? kMax : std::max<int64_t>(0, m.hi - 1)};
  }
  case ScoreOp::IDiv: {
    ScoreIntRange a = arg(0), m = arg(1);
    if (m.lo < 1)
      return {kMin, kMax};
    // a / m for m >= 1 lies between min(a.lo, 0)-ish bounds: |a / m| <= |a|.
    return {a.lo >= 0 ? 0 : a.lo, a.hi <= 0 ? 0 : a.hi};
  }
  case ScoreOp::Where: {
    ScoreIntRange a = arg(1), b = arg(2);
    return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
  }
  default:
    if (isCondition(e.op))
      return {0, 1};
    return {kMin, kMax};
  }
}

ScoreIntRange rangeOf(const ScoreExpr &e, int depth) {
  if (depth > 600 || !e.isInt)
    return {kMin, kMax};
  return rangeOfImpl(e, depth);
}

// ---- Reading -------------------------------------------------------------

constexpr int kMaxTextDepth = 512;

struct TextReader {
  std::string_view text;
  size_t pos = 0;
  size_t numInputs;
  std::string error;

  void skipSpace() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t'))
      ++pos;
  }
  std::string_view atom() {
    skipSpace();
    size_t start = pos;
    while (pos < text.size() && text[pos] != ' ' && text[pos] != '\t' && text[pos] != '(' && text[pos] != ')')
      ++pos;
    return text.substr(start, pos - start);
  }
  bool peek(char c) {
    skipSpace();
    return pos < text.size() && text[pos] == c;
  }
  ScoreRef fail(std::string message) {
    if (error.empty())
      error = std::move(message);
    return nullptr;
  }
  static bool parseInt(std::string_view a, int64_t &v) {
    auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
    return ec == std::errc() && end == a.data() + a.size() && !a.empty();
  }
  static bool parseDouble(std::string_view a, double &v) {
    if (a.empty() || a.size() > 40)
      return false;
    std::string copy(a);
    char *end = nullptr;
    v = std::strtod(copy.c_str(), &end);
    return end == copy.c_str() + copy.size();
  }

  ScoreRef expr(int depth) {
    if (depth > kMaxTextDepth)
      return fail("a score nests deeper than " + std::to_string(kMaxTextDepth) + " levels");
    if (!peek('(')) {
      std::string_view a = atom();
      if (a.empty())
        return fail(pos >= text.size() ? "a score ends early" : "expected a score operand, found ')'");
      for (ScoreOp op : {ScoreOp::S, ScoreOp::I, ScoreOp::J, ScoreOp::H, ScoreOp::N})
        if (a == info(op).name)
          return ScoreExpr::make(op, {}, op != ScoreOp::S);
      int64_t v = 0;
      if (!parseInt(a, v))
        return fail("bad score atom '" + std::string(a.substr(0, 40)) + "'");
      if (v > (int64_t(1) << 53) || v < -(int64_t(1) << 53))
        return fail("integer constant " + std::string(a) + " is beyond 2^53");
      return ScoreExpr::constant(static_cast<double>(v), true);
    }
    ++pos; // '('
    std::string_view name = atom();
    const OpInfo *op = nullptr;
    for (const OpInfo &o : kOps)
      if (name == o.name)
        op = &o;
    if (!op || op->op == ScoreOp::S || op->op == ScoreOp::I || op->op == ScoreOp::J || op->op == ScoreOp::H ||
        op->op == ScoreOp::N)
      return fail("unknown score operator '" + std::string(name.substr(0, 40)) + "'");
    ScoreRef out;
    if (op->op == ScoreOp::Const) {
      double v = 0;
      std::string_view a = atom();
      if (!parseDouble(a, v))
        return fail("bad float constant '" + std::string(a.substr(0, 40)) + "'");
      out = ScoreExpr::constant(v, false);
    } else {
      int64_t input = -1;
      if (op->op == ScoreOp::Input) {
        std::string_view a = atom();
        if (!parseInt(a, input) || input < 0 || static_cast<uint64_t>(input) >= numInputs)
          return fail("a score reads input '" + std::string(a.substr(0, 40)) + "', which is not declared");
      }
      std::vector<ScoreRef> args;
      while (!peek(')')) {
        skipSpace();
        if (pos >= text.size())
          return fail("unclosed '(" + std::string(name) + "'");
        ScoreRef a = expr(depth + 1);
        if (!a)
          return nullptr;
        args.push_back(std::move(a));
      }
      if (args.size() < op->minArgs || args.size() > op->maxArgs)
        return fail("'" + std::string(name) + "' has " + std::to_string(args.size()) + " operands");
      out = build(op->op, input, std::move(args));
      if (!out)
        return nullptr;
    }
    if (!peek(')'))
      return fail("expected ')' after '(" + std::string(name) + "'");
    ++pos;
    return out;
  }

  /// The node with its type from its operands, or null for one Sema never makes.
  ScoreRef build(ScoreOp op, int64_t input, std::vector<ScoreRef> args) {
    const bool allInt = std::all_of(args.begin(), args.end(), [](const ScoreRef &a) { return a->isInt; });
    const std::string name = info(op).name;
    switch (op) {
    case ScoreOp::Input:
      if (!allInt)
        return fail("an index of input " + std::to_string(input) + " is not an integer");
      return ScoreExpr::read(input, std::move(args));
    case ScoreOp::Add: case ScoreOp::Sub: case ScoreOp::Mul: case ScoreOp::Min: case ScoreOp::Max:
    case ScoreOp::Abs: case ScoreOp::Neg:
      return ScoreExpr::make(op, std::move(args), allInt);
    case ScoreOp::Div:
      if (allInt)
        return fail("'div' of two integers (integer division is 'idiv')");
      return ScoreExpr::make(op, std::move(args), false);
    case ScoreOp::IDiv:
    case ScoreOp::Mod:
      if (!allInt)
        return fail("'" + name + "' of a float");
      if (rangeOf(*args[1], 0).lo < 1)
        return fail("'" + name + "' by a divisor that may be less than 1: " + printScore(*args[1], {}));
      return ScoreExpr::make(op, std::move(args), true);
    case ScoreOp::Tanh: case ScoreOp::Exp: case ScoreOp::Log:
      return ScoreExpr::make(op, std::move(args), false);
    case ScoreOp::Floor:
      return ScoreExpr::make(op, std::move(args), true);
    case ScoreOp::Where:
      return ScoreExpr::make(op, std::move(args), args[1]->isInt && args[2]->isInt);
    default:
      return ScoreExpr::make(op, std::move(args), true); // a condition: 1 or 0
    }
  }
};

// ---- Evaluation ----------------------------------------------------------

struct Evaluator {
  const ScoreEnv &env;
  const std::vector<std::string> &names;

  std::string inputName(int64_t k) const {
    return k >= 0 && static_cast<size_t>(k) < names.size() ? names[static_cast<size_t>(k)]
                                                            : "input " + std::to_string(k);
  }

  bool truth(const ScoreExpr &e) { return e.isInt ? ival(e) != 0 : fval(e) != 0; }

  static int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }

  int64_t ival(const ScoreExpr &e) {
    switch (e.op) {
    case ScoreOp::Const: return static_cast<int64_t>(e.value);
    case ScoreOp::I: return env.i;
    case ScoreOp::J: return env.j;
    case ScoreOp::H: return env.h;
    case ScoreOp::N: return env.n;
    case ScoreOp::Add: return wrap(uint64_t(ival(*e.args[0])) + uint64_t(ival(*e.args[1])));
    case ScoreOp::Sub: return wrap(uint64_t(ival(*e.args[0])) - uint64_t(ival(*e.args[1])));
    case ScoreOp::Mul: return wrap(uint64_t(ival(*e.args[0])) * uint64_t(ival(*e.args[1])));
    case ScoreOp::Div:
    case ScoreOp::IDiv:
    case ScoreOp::Mod: {
      const int64_t a = ival(*e.args[0]), m = ival(*e.args[1]);
      ATTNC_CHECK(m >= 1, "a score divides by " + std::to_string(m) + " (divisors are >= 1)");
      return e.op == ScoreOp::Mod ? floorMod(a, m) : floorDiv(a, m);
    }
    case ScoreOp::Neg: return wrap(0 - uint64_t(ival(*e.args[0])));
    case ScoreOp::Abs: {
      const int64_t a = ival(*e.args[0]);
      return a < 0 ? wrap(0 - uint64_t(a)) : a;
    }
    case ScoreOp::Min:
    case ScoreOp::Max: {
      int64_t r = ival(*e.args[0]);
      for (size_t k = 1; k < e.args.size(); ++k) {
        const int64_t b = ival(*e.args[k]);
        r = e.op == ScoreOp::Min ? std::min(r, b) : std::max(r, b);
      }
      return r;
    }
    case ScoreOp::Floor: {
      const double x = std::floor(fval(*e.args[0]));
      constexpr double kLimit = 4611686018427387904.0; // 2^62
      if (std::isnan(x))
        return 0;
      return static_cast<int64_t>(std::clamp(x, -kLimit, kLimit));
    }
    case ScoreOp::Where:
      return truth(*e.args[0]) ? ival(*e.args[1]) : ival(*e.args[2]);
    case ScoreOp::Lt: case ScoreOp::Le: case ScoreOp::Gt: case ScoreOp::Ge: case ScoreOp::Eq:
    case ScoreOp::Ne: {
      const ScoreExpr &a = *e.args[0], &b = *e.args[1];
      if (a.isInt && b.isInt)
        return compare(e.op, ival(a), ival(b));
      return compare(e.op, fval(a), fval(b));
    }
    case ScoreOp::And: return truth(*e.args[0]) && truth(*e.args[1]);
    case ScoreOp::Or: return truth(*e.args[0]) || truth(*e.args[1]);
    case ScoreOp::Not: return !truth(*e.args[0]);
    default:
      ATTNC_CHECK(false, std::string("integer evaluation of a float score node '") + info(e.op).name + "'");
      return 0;
    }
  }

  template <typename T> static int64_t compare(ScoreOp op, T a, T b) {
    switch (op) {
    case ScoreOp::Lt: return a < b;
    case ScoreOp::Le: return a <= b;
    case ScoreOp::Gt: return a > b;
    case ScoreOp::Ge: return a >= b;
    case ScoreOp::Eq: return a == b;
    default: return a != b;
    }
  }

  double read(const ScoreExpr &e) {
    const std::string name = inputName(e.input);
    const FloatInput *in = nullptr;
    if (env.inputs && e.input >= 0 && static_cast<size_t>(e.input) < env.inputs->size())
      in = &(*env.inputs)[static_cast<size_t>(e.input)];
    if (!in || !in->values)
      throw InputError("float input '" + name + "' is not given");
    if (in->dims.size() != e.args.size())
      throw InputError("float input '" + name + "' has " + std::to_string(in->dims.size()) +
                       " dimensions, read with " + std::to_string(e.args.size()) + " indices");
    std::vector<int64_t> at;
    for (const ScoreRef &a : e.args)
      at.push_back(ival(*a));
    int64_t offset = 0;
    bool inside = true;
    for (size_t k = 0; k < at.size(); ++k) {
      inside = inside && at[k] >= 0 && at[k] < in->dims[k];
      offset = inside ? offset * in->dims[k] + at[k] : 0;
    }
    if (!inside) {
      std::string where, dims;
      for (size_t k = 0; k < at.size(); ++k) {
        where += (k ? ", " : "") + std::to_string(at[k]);
        dims += (k ? ", " : "") + std::to_string(in->dims[k]);
      }
      throw InputError("a score reads float input '" + name + "' at [" + where + "], outside its dimensions [" +
                       dims + "] (query " + std::to_string(env.i) + ", key " + std::to_string(env.j) + ", head " +
                       std::to_string(env.h) + ")");
    }
    return static_cast<double>(in->values[offset]);
  }

  double fval(const ScoreExpr &e) {
    if (e.isInt)
      return static_cast<double>(ival(e));
    switch (e.op) {
    case ScoreOp::Const: return e.value;
    case ScoreOp::S: return env.s;
    case ScoreOp::Input: return read(e);
    case ScoreOp::Add: return fval(*e.args[0]) + fval(*e.args[1]);
    case ScoreOp::Sub: return fval(*e.args[0]) - fval(*e.args[1]);
    case ScoreOp::Mul: return fval(*e.args[0]) * fval(*e.args[1]);
    case ScoreOp::Div: return fval(*e.args[0]) / fval(*e.args[1]);
    case ScoreOp::Neg: return -fval(*e.args[0]);
    case ScoreOp::Abs: return std::fabs(fval(*e.args[0]));
    case ScoreOp::Min:
    case ScoreOp::Max: {
      double r = fval(*e.args[0]);
      for (size_t k = 1; k < e.args.size(); ++k)
        r = e.op == ScoreOp::Min ? std::fmin(r, fval(*e.args[k])) : std::fmax(r, fval(*e.args[k]));
      return r;
    }
    case ScoreOp::Tanh: return std::tanh(fval(*e.args[0]));
    case ScoreOp::Exp: return std::exp(fval(*e.args[0]));
    case ScoreOp::Log: return std::log(fval(*e.args[0]));
    case ScoreOp::Where: return truth(*e.args[0]) ? fval(*e.args[1]) : fval(*e.args[2]);
    default:
      ATTNC_CHECK(false, std::string("float evaluation of an integer score node '") + info(e.op).name + "'");
      return 0;
    }
  }
};

} // namespace

const char *scoreOpName(ScoreOp op) { return info(op).name; }

size_t scoreDepth(const ScoreExpr &e) {
  size_t deepest = 0;
  for (const ScoreRef &a : e.args)
    deepest = std::max(deepest, scoreDepth(*a));
  return deepest + 1;
}

ScoreIntRange scoreIntRange(const ScoreExpr &e) { return rangeOf(e, 0); }

std::string printScore(const ScoreExpr &e, const std::vector<std::string> &inputNames) {
  std::ostringstream os;
  printInto(os, e, inputNames, 0, false);
  return os.str();
}

std::string scoreText(const ScoreExpr &e) {
  std::ostringstream os;
  textInto(os, e);
  return os.str();
}

ScoreRef parseScoreText(const std::string &text, size_t numInputs, std::string &error) {
  TextReader r{text, 0, numInputs, {}};
  ScoreRef e;
  try {
    e = r.expr(0);
  } catch (const InternalError &x) {
    r.fail("inconsistent score: " + x.message);
    e = nullptr;
  }
  if (e) {
    r.skipSpace();
    if (r.pos != text.size())
      e = r.fail("trailing text after a score: '" + text.substr(r.pos, 40) + "'");
  }
  if (!e)
    error = r.error.empty() ? "malformed score" : r.error;
  return e;
}

double evalScore(const ScoreExpr &e, const ScoreEnv &env, const std::vector<std::string> &inputNames) {
  Evaluator ev{env, inputNames};
  return ev.fval(e);
}

} // namespace attnc
