//===- IrText.cpp - The canonical pattern IR as stable text ---------------===//
//
// Writing walks the tree once. Reading is a recursive-descent parser over
// tokens '(' ')' and atoms, bounded in depth so that hostile text cannot
// overflow the stack, and it rebuilds nodes through the checked make*
// functions after validating their fields itself.
//
//===----------------------------------------------------------------------===//
#include "attnc/plan/IrText.h"

#include <charconv>
#include <map>
#include <sstream>
#include <tuple>

namespace attnc::ir {

namespace {

constexpr int kMaxDepth = 256;

struct OpName {
  Op op;
  const char *name;
};
constexpr OpName kOps[] = {
    {Op::Add, "add"},         {Op::Sub, "sub"},       {Op::Mul, "mul"},
    {Op::Div, "div"},         {Op::Mod, "mod"},       {Op::Neg, "neg"},
    {Op::Abs, "abs"},         {Op::Min, "min"},       {Op::Max, "max"},
    {Op::Eq, "eq"},           {Op::Ne, "ne"},         {Op::Lt, "lt"},
    {Op::Le, "le"},           {Op::Gt, "gt"},         {Op::Ge, "ge"},
    {Op::And, "and"},         {Op::Or, "or"},         {Op::Not, "not"},
    {Op::In, "in"},           {Op::Builder, "builder"}, {Op::Range, "range"},
    {Op::List, "set"},        {Op::Union, "set-union"}, {Op::Intersect, "set-intersect"},
    {Op::Difference, "set-difference"}, {Op::RandomBlocks, "random-blocks"},
    {Op::Fallback, "set-else"},       {Op::Input, "input"},   {Op::InputRow, "input-row"},
};

const char *opName(Op op) {
  for (const OpName &o : kOps)
    if (o.op == op)
      return o.name;
  return nullptr;
}

void writeTerm(const Term &t, std::ostringstream &os) {
  switch (t.op()) {
  case Op::Const: os << t.value(); return;
  case Op::BoolConst: os << (t.value() ? "#t" : "#f"); return;
  case Op::VarI: os << 'i'; return;
  case Op::VarJ: os << 'j'; return;
  case Op::VarN: os << 'n'; return;
  case Op::VarH: os << 'h'; return;
  default: break;
  }
  const char *name = opName(t.op());
  ATTNC_CHECK(name, "a term operator without a text name");
  os << '(' << name;
  if (t.op() == Op::Input || t.op() == Op::InputRow)
    os << ' ' << t.value();
  for (const TermRef &a : t.args()) {
    os << ' ';
    writeTerm(*a, os);
  }
  os << ')';
}

void writeBound(int64_t v, std::ostringstream &os) {
  if (v == kUnbounded)
    os << '-';
  else
    os << v;
}

/// A key range's or coordinate range's two bound terms, `_` for none.
void writeTermBounds(const SetNode &s, std::ostringstream &os) {
  for (const TermRef &b : {s.loTerm, s.hiTerm}) {
    os << ' ';
    if (b)
      writeTerm(*b, os);
    else
      os << '_';
  }
}

void writeSet(const SetNode &s, std::ostringstream &os) {
  os << '(' << genName(s.kind);
  switch (s.kind) {
  case Gen::Band:
    os << ' ';
    writeBound(s.lo, os);
    os << ' ';
    writeBound(s.hi, os);
    break;
  case Gen::BlockDiag: os << ' ' << s.modulus; break;
  case Gen::KeyRange: writeTermBounds(s, os); break;
  case Gen::Stripe: os << ' ' << s.modulus << ' ' << s.lo << ' ' << s.hi; break;
  case Gen::Residue: os << ' ' << s.modulus << ' ' << s.residue; break;
  case Gen::CoordRange:
    os << ' ' << s.keyBlock << ' ' << s.modulus;
    writeTermBounds(s, os);
    break;
  case Gen::RowIf:
  case Gen::Predicate:
    os << ' ';
    writeTerm(*s.cond, os);
    break;
  case Gen::List:
    for (const TermRef &e : s.elems) {
      os << ' ';
      writeTerm(*e, os);
    }
    break;
  case Gen::Random: os << ' ' << s.modulus << ' ' << s.count << ' ' << s.seed; break;
  case Gen::Class: os << ' ' << s.input; break;
  case Gen::Select: os << ' ' << s.input << ' ' << s.modulus << ' ' << s.keyBlock; break;
  default: break;
  }
  for (const SetRef &c : s.children) {
    os << ' ';
    writeSet(*c, os);
  }
  os << ')';
}

/// Tokens of one line: '(' ')' and atoms separated by spaces.
class Reader {
public:
  explicit Reader(std::string_view text) : text_(text) {}

  bool atEnd() {
    skipSpace();
    return pos_ == text_.size();
  }
  bool peekOpen() {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == '(';
  }
  bool peekClose() {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == ')';
  }
  bool open() { return eat('('); }
  bool close() { return eat(')'); }
  std::string_view atom() {
    skipSpace();
    size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] != ' ' && text_[pos_] != '(' && text_[pos_] != ')')
      ++pos_;
    return text_.substr(start, pos_ - start);
  }
  bool integer(int64_t &v) { return parseInt(atom(), v); }
  /// The rest of the line, unread.
  std::string_view rest() const { return text_.substr(pos_); }
  static bool parseInt(std::string_view a, int64_t &v) {
    auto [end, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
    return ec == std::errc() && end == a.data() + a.size() && !a.empty();
  }

private:
  void skipSpace() {
    while (pos_ < text_.size() && text_[pos_] == ' ')
      ++pos_;
  }
  bool eat(char c) {
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  std::string_view text_;
  size_t pos_ = 0;
};

struct Parser {
  Reader in;
  std::string error;
  int64_t numHeads = 1;
  const std::vector<InputDecl> *inputs = nullptr; ///< the pattern's, declared before its heads

  /// Input `index` of rank `rank` (0: any), or null after a failure.
  std::shared_ptr<const InputArray> inputArray(int64_t index, int rank) {
    if (!inputs || index < 0 || index >= static_cast<int64_t>(inputs->size()))
      return fail("input " + std::to_string(index) + " is not declared"), nullptr;
    const InputDecl &decl = (*inputs)[static_cast<size_t>(index)];
    if (decl.isFloat)
      return fail("a set reads float input '" + decl.name + "' (only a score or a sink may)"), nullptr;
    if (rank && static_cast<int>(decl.rank()) != rank)
      return fail("input '" + decl.name + "' has rank " + std::to_string(decl.rank())), nullptr;
    return unboundInput(decl);
  }

  bool fail(std::string message) {
    if (error.empty())
      error = std::move(message);
    return false;
  }

  TermRef term(int depth) {
    if (depth > kMaxDepth)
      return fail("terms nest deeper than " + std::to_string(kMaxDepth)), nullptr;
    if (!in.peekOpen()) {
      std::string_view a = in.atom();
      int64_t v = 0;
      if (a == "#t" || a == "#f")
        return Term::boolean(a == "#t");
      if (a == "i" || a == "j" || a == "n" || a == "h") {
        const Op var = a == "i" ? Op::VarI : a == "j" ? Op::VarJ : a == "n" ? Op::VarN : Op::VarH;
        return interned(var, {}, 0, [&] { return Term::var(var); });
      }
      if (Reader::parseInt(a, v))
        return interned(Op::Const, {}, v, [&] { return Term::constant(v); });
      return fail("bad term '" + std::string(a) + "'"), nullptr;
    }
    in.open();
    std::string_view name = in.atom();
    const OpName *op = nullptr;
    for (const OpName &o : kOps)
      if (name == o.name)
        op = &o;
    if (!op)
      return fail("unknown term operator '" + std::string(name) + "'"), nullptr;
    int64_t inputIndex = 0;
    std::shared_ptr<const InputArray> array;
    if (op->op == Op::Input || op->op == Op::InputRow) {
      if (!in.integer(inputIndex) || !(array = inputArray(inputIndex, op->op == Op::InputRow ? 2 : 0)))
        return fail("'" + std::string(name) + "' needs a declared input"), nullptr;
    }
    std::vector<TermRef> args;
    while (!in.peekClose()) {
      if (in.atEnd())
        return fail("unclosed '(" + std::string(name) + "'"), nullptr;
      TermRef a = term(depth + 1);
      if (!a)
        return nullptr;
      if (a->type() != operandType(op->op, args.size()))
        return fail("operand " + std::to_string(args.size() + 1) + " of '" + std::string(name) + "' has the wrong type"),
               nullptr;
      args.push_back(std::move(a));
    }
    in.close();
    if (array) {
      if (args.size() != (op->op == Op::InputRow ? 1u : static_cast<size_t>(array->rank)))
        return fail("'" + std::string(name) + "' of '" + array->name + "' has " + std::to_string(args.size()) +
                    " indices"),
               nullptr;
      return Term::input(op->op, inputIndex, std::move(args), {}, std::move(array));
    }
    const size_t want = arity(op->op);
    if (want != SIZE_MAX ? args.size() != want : (op->op != Op::List && args.empty()))
      return fail("'" + std::string(name) + "' has " + std::to_string(args.size()) + " operands"), nullptr;
    if ((op->op == Op::Div || op->op == Op::Mod) && rangeOf(*args[1], numHeads).lo < 1)
      return fail("a divisor that can be less than 1: " + printTerm(*args[1])), nullptr;
    std::vector<const Term *> operands;
    for (const TermRef &a : args)
      operands.push_back(a.get());
    return interned(op->op, std::move(operands), 0, [&] { return Term::make(op->op, std::move(args)); });
  }

  /// One node per distinct term: the IR text writes a shared subterm out at
  /// each use (a clamped canvas coordinate in every bound of a
  /// neighbourhood), and evaluators that keep a row's values per node
  /// (SharedTermsScope) only find them again on the same node. (Inputs are
  /// left apart: they carry their arrays.)
  struct TermKey {
    Op op;
    int64_t value;
    std::vector<const Term *> operands;
    bool operator<(const TermKey &o) const {
      return std::tie(op, value, operands) < std::tie(o.op, o.value, o.operands);
    }
  };
  std::map<TermKey, TermRef> terms;
  template <typename Make> TermRef interned(Op op, std::vector<const Term *> operands, int64_t value, Make make) {
    TermKey key{op, value, std::move(operands)};
    if (auto at = terms.find(key); at != terms.end())
      return at->second;
    TermRef t = make();
    terms.emplace(std::move(key), t);
    return t;
  }

  /// A j-free integer term (key-range bounds, list elements).
  TermRef rowTerm(int depth, const char *what) {
    TermRef t = term(depth);
    if (t && (t->type() != Type::Int || t->uses(kUsesJ)))
      return fail(std::string(what) + " must be a j-free integer"), nullptr;
    return t;
  }

  bool bound(int64_t &v) {
    std::string_view a = in.atom();
    if (a == "-") {
      v = kUnbounded;
      return true;
    }
    return Reader::parseInt(a, v) && v != kUnbounded ? true : fail("bad band bound '" + std::string(a) + "'");
  }

  SetRef set(int depth) {
    if (depth > kMaxDepth)
      return fail("sets nest deeper than " + std::to_string(kMaxDepth)), nullptr;
    if (!in.open())
      return fail("expected '(' before a set"), nullptr;
    std::string_view name = in.atom();
    std::optional<Gen> kind;
    for (int g = 0; g <= static_cast<int>(Gen::Fallback); ++g)
      if (name == genName(static_cast<Gen>(g)))
        kind = static_cast<Gen>(g);
    if (!kind)
      return fail("unknown set generator '" + std::string(name) + "'"), nullptr;
    SetRef out;
    int64_t a = 0, b = 0, c = 0;
    switch (*kind) {
    case Gen::All: out = SetNode::all(); break;
    case Gen::None: out = SetNode::none(); break;
    case Gen::Band:
      if (!bound(a) || !bound(b))
        return nullptr;
      out = SetNode::band(a, b, {});
      break;
    case Gen::BlockDiag:
      if (!in.integer(a) || a < 1)
        return fail("block-diag needs a size >= 1"), nullptr;
      out = SetNode::blockDiag(a, {});
      break;
    case Gen::KeyRange:
    case Gen::CoordRange: {
      const bool coord = *kind == Gen::CoordRange;
      int64_t period = 0;
      if (coord && (!in.integer(a) || !in.integer(b) || a < 1 || b < 1 || __builtin_mul_overflow(a, b, &period)))
        return fail("a coord-range needs s >= 1 and m >= 1 with s * m within int64"), nullptr;
      TermRef bounds[2];
      for (TermRef &t : bounds) {
        if (!in.peekOpen() && !in.peekClose()) {
          // An atom: '_' (no bound) or a term atom.
          Reader save = in;
          if (in.atom() == "_")
            continue;
          in = save;
        }
        if (!(t = rowTerm(depth + 1, coord ? "a coord-range bound" : "a key-range bound")))
          return nullptr;
      }
      out = coord ? SetNode::coordRange(a, b, bounds[0], bounds[1], {})
                  : SetNode::keyRange(bounds[0], bounds[1], {});
      break;
    }
    case Gen::Stripe:
      if (!in.integer(a) || !in.integer(b) || !in.integer(c) || a < 1 || b < 0 || b > c || c >= a)
        return fail("a stripe needs m >= 1 and 0 <= lo <= hi < m"), nullptr;
      out = SetNode::stripe(a, b, c, {});
      break;
    case Gen::Residue:
      if (!in.integer(a) || !in.integer(b) || a < 1 || b < 0 || b >= a)
        return fail("a residue class needs m >= 1 and 0 <= r < m"), nullptr;
      out = SetNode::residueClass(a, b, {});
      break;
    case Gen::RowIf:
    case Gen::Predicate: {
      TermRef cond = term(depth + 1);
      if (!cond)
        return nullptr;
      if (cond->type() != Type::Bool || (*kind == Gen::RowIf && cond->uses(kUsesJ)))
        return fail(std::string(name) + " needs a condition" + (*kind == Gen::RowIf ? " without j" : "")),
               nullptr;
      out = *kind == Gen::RowIf ? SetNode::rowIf(cond, {}) : SetNode::predicate(cond, {});
      break;
    }
    case Gen::List: {
      std::vector<TermRef> elems;
      while (!in.peekClose() && !in.atEnd()) {
        TermRef e = rowTerm(depth + 1, "a list element");
        if (!e)
          return nullptr;
        elems.push_back(std::move(e));
      }
      out = SetNode::list(std::move(elems), {});
      break;
    }
    case Gen::Random:
      if (!in.integer(a) || !in.integer(b) || !in.integer(c) || a < 1 || b < 0)
        return fail("random blocks need block >= 1 and count >= 0"), nullptr;
      out = SetNode::random(a, b, c, {});
      break;
    case Gen::Class:
    case Gen::Select: {
      const bool select = *kind == Gen::Select;
      std::shared_ptr<const InputArray> array;
      if (!in.integer(a) || !(array = inputArray(a, select ? 2 : 1)))
        return fail(std::string(name) + " needs a declared input"), nullptr;
      if (select && (!in.integer(b) || !in.integer(c) || b < 1 || c < 1))
        return fail("a selection needs blocks of at least 1"), nullptr;
      out = select ? SetNode::select(a, std::move(array), b, c, {}) : SetNode::equalClass(a, std::move(array), {});
      break;
    }
    case Gen::Union:
    case Gen::Intersect:
    case Gen::Difference:
    case Gen::Fallback: {
      std::vector<SetRef> children;
      while (in.peekOpen()) {
        SetRef child = set(depth + 1);
        if (!child)
          return nullptr;
        children.push_back(std::move(child));
      }
      const bool pair = *kind == Gen::Difference || *kind == Gen::Fallback;
      if (pair ? children.size() != 2 : children.size() < 2)
        return fail(std::string(name) + " has " + std::to_string(children.size()) + " operands"), nullptr;
      if (*kind == Gen::Difference)
        out = SetNode::difference(children[0], children[1], {});
      else if (*kind == Gen::Fallback)
        out = SetNode::fallback(children[0], children[1], {});
      else if (*kind == Gen::Union)
        out = SetNode::unite(std::move(children), {});
      else
        out = SetNode::intersect(std::move(children), {});
      break;
    }
    }
    if (!in.close())
      return fail("expected ')' after a " + std::string(name) + " set"), nullptr;
    return out;
  }
};

/// Why a score's input reads do not fit the declarations (empty: they do):
/// each reads a float input with one index per dimension.
std::string checkScoreReads(const ScoreExpr &e, const std::vector<InputDecl> &inputs) {
  if (e.op == ScoreOp::Input) {
    const InputDecl &decl = inputs.at(static_cast<size_t>(e.input)); // (parseScoreText checked the index)
    if (!decl.isFloat)
      return "a score reads int input '" + decl.name + "'";
    if (e.args.size() != decl.rank())
      return "a score reads input '" + decl.name + "' with " + std::to_string(e.args.size()) + " indices";
  }
  for (const ScoreRef &a : e.args)
    if (std::string why = checkScoreReads(*a, inputs); !why.empty())
      return why;
  return "";
}

bool fieldInt(std::string_view field, std::string_view key, int64_t &v) {
  return field.substr(0, key.size()) == key && Reader::parseInt(field.substr(key.size()), v);
}

} // namespace

std::string writeIr(const PatternIR &ir) {
  std::ostringstream os;
  os << "attnc-ir 1\n";
  os << "pattern " << ir.name << " heads=" << ir.numHeads << " declared=" << ir.headsDeclared
     << " causal=" << ir.causal << "\n";
  for (const auto &[name, value] : ir.params)
    os << "param " << name << ' ' << value << "\n";
  for (const InputDecl &in : ir.inputs) {
    os << "input " << in.name << (in.isFloat ? " float" : "");
    for (const TermRef &d : in.dims) {
      os << ' ';
      writeTerm(*d, os);
    }
    os << "\n";
  }
  for (const PatternIR::Head &h : ir.heads) {
    os << "head";
    for (int64_t k : h.heads)
      os << ' ' << k;
    os << ' ';
    writeSet(*h.set, os);
    os << "\n";
  }
  if (ir.score)
    os << "score " << scoreText(*ir.score) << "\n";
  if (ir.sink)
    os << "sink " << scoreText(*ir.sink) << "\n";
  return os.str();
}

bool readIr(std::string_view text, PatternIR &out, std::string &error) {
  out = PatternIR{};
  size_t lineNo = 0;
  bool sawPattern = false, sawScore = false;
  auto fail = [&](const std::string &message) {
    error = "pattern IR line " + std::to_string(lineNo) + ": " + message;
    return false;
  };
  try {
    while (!text.empty()) {
      size_t eol = text.find('\n');
      std::string_view line = text.substr(0, eol);
      text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
      ++lineNo;
      if (line.empty())
        continue;
      Reader words(line);
      std::string_view kind = words.atom();
      if (lineNo == 1) {
        if (line != "attnc-ir 1")
          return fail("expected 'attnc-ir 1', got '" + std::string(line.substr(0, 40)) + "'");
        continue;
      }
      if (kind == "pattern") {
        out.name = std::string(words.atom());
        int64_t heads = 0, declared = 0, causal = 0;
        if (out.name.empty() || !fieldInt(words.atom(), "heads=", heads) ||
            !fieldInt(words.atom(), "declared=", declared) || !fieldInt(words.atom(), "causal=", causal) ||
            heads < 1 || heads > (int64_t{1} << 20) || declared < 0 || declared > 1 || causal < 0 || causal > 1)
          return fail("malformed pattern line");
        out.numHeads = heads;
        out.headsDeclared = declared;
        out.causal = causal;
        sawPattern = true;
      } else if (kind == "param") {
        std::string name(words.atom());
        int64_t value = 0;
        if (name.empty() || !words.integer(value))
          return fail("malformed param line");
        out.params.push_back({name, value});
      } else if (kind == "input") {
        InputDecl decl;
        decl.name = std::string(words.atom());
        if (decl.name.empty() || !sawPattern)
          return fail("malformed input line");
        for (const InputDecl &other : out.inputs)
          if (other.name == decl.name)
            return fail("input '" + decl.name + "' declared twice");
        if (sawScore)
          return fail("an input after the score or the sink");
        {
          Reader save = words;
          if (words.atom() == "float")
            decl.isFloat = true;
          else
            words = save;
        }
        // A float input's dimensions may use the head count (h there).
        const unsigned allowed = decl.isFloat ? unsigned(kUsesN | kUsesH) : unsigned(kUsesN);
        Parser p{words, {}, out.numHeads, nullptr};
        while (!p.in.atEnd()) {
          TermRef dim = p.term(0);
          if (!dim)
            return fail(p.error);
          if (dim->type() != Type::Int || dim->vars() & ~allowed)
            return fail("input '" + decl.name + "' has a dimension that is not a term of n" +
                        (decl.isFloat ? " and the head count" : ""));
          if (inputDimLowerBound(*dim) < 1)
            return fail("input '" + decl.name + "' has a dimension that may be 0");
          decl.dims.push_back(std::move(dim));
        }
        const size_t maxRank = decl.isFloat ? 3 : 2;
        if (decl.dims.empty() || decl.dims.size() > maxRank)
          return fail("input '" + decl.name + "' needs 1 to " + std::to_string(maxRank) + " dimensions");
        out.inputs.push_back(std::move(decl));
      } else if (kind == "score" || kind == "sink") {
        if (!sawPattern)
          return fail("a " + std::string(kind) + " before the pattern line");
        ScoreRef &slot = kind == "score" ? out.score : out.sink;
        if (slot)
          return fail("a second " + std::string(kind));
        std::string scoreError;
        slot = parseScoreText(std::string(words.rest()), out.inputs.size(), scoreError);
        if (!slot)
          return fail(scoreError);
        if (std::string why = checkScoreReads(*slot, out.inputs); !why.empty())
          return fail(why);
        if (kind == "sink" && (mentions(*slot, ScoreOp::S) || mentions(*slot, ScoreOp::J)))
          return fail("a sink that uses s or j");
        sawScore = true;
      } else if (kind == "head") {
        if (!sawPattern)
          return fail("a head before the pattern line");
        PatternIR::Head head;
        while (!words.peekOpen()) {
          int64_t h = 0;
          if (!words.integer(h) || h < 0 || h >= out.numHeads)
            return fail("bad head index");
          head.heads.push_back(h);
        }
        Parser p{words, {}, out.numHeads, &out.inputs};
        head.set = p.set(0);
        if (!head.set)
          return fail(p.error);
        if (!p.in.atEnd())
          return fail("trailing text after a head's set");
        if (head.heads.empty())
          return fail("a head set that serves no head");
        out.heads.push_back(std::move(head));
      } else {
        return fail("unknown line '" + std::string(kind) + "'");
      }
    }
  } catch (const InternalError &e) {
    return fail("inconsistent IR: " + e.message);
  }
  if (!sawPattern || out.heads.empty()) {
    error = "pattern IR has no pattern or no head set";
    return false;
  }
  // Every head, when heads are declared, is served by exactly one set.
  if (out.headsDeclared) {
    std::vector<int> served(static_cast<size_t>(out.numHeads), 0);
    for (const PatternIR::Head &h : out.heads)
      for (int64_t k : h.heads)
        ++served[static_cast<size_t>(k)];
    for (int count : served)
      if (count != 1) {
        error = "pattern IR: a declared head is served by " + std::to_string(count) + " sets";
        return false;
      }
  }
  return true;
}

} // namespace attnc::ir
