//===- Sema.cpp - From the AST to a resolved, checked Pattern -------------===//
//
// Two walks over a pattern's statements: the first fixes the parameters
// (defaults, then -D overrides), declares the `input`s (their dimensions are
// over n and parameters), then `causal` and `heads`; the second checks
// `require`s and lowers `let`s and sets to Terms, in statement order (a let
// is visible after its definition only; parameters and inputs everywhere).
//
// An input's values are known only when a kernel is called: a read of one
// (Op::Input, Op::InputRow), directly or through a let, is refused wherever
// a value must be known before that: parameter defaults, `require`, `heads`,
// head indices, input dimensions, divisors and random_blocks' arguments.
//
// With `causal`, each `A else B` (Op::Fallback) gets the causal set inside
// both operands, so that "A's row is empty" means empty after causality.
//
// Lets are inlined by sharing their Terms, so a term can be far deeper than
// the expression it came from (a chain of lets, each one level on top of the
// last) and far larger once expanded (each let twice its predecessor). Every
// expression is measured as it is lowered and refused past kMaxExprNesting
// levels or kMaxTermNodes nodes: the passes after Sema walk terms
// recursively and without memoisation, and are then bounded in stack and
// time.
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Sema.h"

#include "attnc/dsl/Parser.h"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>

namespace attnc {

using namespace dsl;

bool parseDefine(const std::string &text, Define &out, std::string &error) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    error = "expected 'name=value' in -D '" + text + "'";
    return false;
  }
  out.name = text.substr(0, eq);
  std::string value = text.substr(eq + 1);
  for (char c : out.name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      error = "invalid parameter name '" + out.name + "' in -D '" + text + "'";
      return false;
    }
  try {
    size_t used = 0;
    out.value = std::stoll(value, &used, 10);
    if (used != value.size() || value.empty())
      throw std::invalid_argument("trailing");
  } catch (...) {
    error = "value of -D " + out.name + " must be an integer, got '" + value + "'";
    return false;
  }
  return true;
}

bool parseDefineList(const std::string &text, std::vector<Define> &out, std::string &error) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos)
      end = text.size();
    Define d;
    if (!parseDefine(text.substr(begin, end - begin), d, error))
      return false;
    out.push_back(d);
    begin = end + 1;
  }
  return true;
}

const ParamValue *Pattern::param(const std::string &name) const {
  for (const ParamValue &p : params)
    if (p.name == name)
      return &p;
  return nullptr;
}

std::vector<Pattern::Group> Pattern::distinctHeads() const {
  std::vector<Group> groups;
  for (int64_t h = 0; h < numHeads(); ++h) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group &g) {
      return structurallyEqual(*g.set, *heads[h]);
    });
    if (it == groups.end())
      groups.push_back({{h}, heads[h]});
    else
      it->heads.push_back(h);
  }
  return groups;
}

namespace {

unsigned editDistance(const std::string &a, const std::string &b) {
  std::vector<unsigned> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t k = 0; k <= b.size(); ++k)
    prev[k] = static_cast<unsigned>(k);
  for (size_t x = 1; x <= a.size(); ++x) {
    cur[0] = static_cast<unsigned>(x);
    for (size_t y = 1; y <= b.size(); ++y)
      cur[y] = std::min({prev[y] + 1, cur[y - 1] + 1, prev[y - 1] + (a[x - 1] != b[y - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

/// The most nodes a term may have with its lets expanded: far above any
/// written pattern (a list of 60,000 keys fits), far below what doubling
/// lets reach in a few lines, and small enough that canonicalising the
/// largest term allowed takes well under a second.
constexpr uint64_t kMaxTermNodes = uint64_t(1) << 16;
/// The most heads a pattern may have (declared, or implied by its largest
/// head index): every layer keeps a table per head, and k + 1 must not
/// overflow.
constexpr int64_t kMaxHeads = int64_t(1) << 16;

const char *typeName(Type t) {
  switch (t) {
  case Type::Int: return "an integer";
  case Type::Bool: return "a condition";
  case Type::Set: return "a set";
  }
  return "?";
}

/// What a name in scope stands for.
struct Binding {
  enum Kind { Param, Let, Input } kind;
  TermRef term;          ///< Param: its constant (null when its default failed); Let: its value
  SourceRange decl;
  bool used = false;
  size_t input = 0;      ///< Input: its index in Pattern::inputs
};

/// Why an input cannot be read where a value must be known before a call.
constexpr const char *kInputsAreLate = " (its values are known only when the kernel is called)";

class PatternSema {
public:
  PatternSema(const PatternDecl &decl, const SourceManager &sources, DiagnosticEngine &diags,
              const SemaOptions &options, std::set<std::string> &definesUsed)
      : decl_(decl), sources_(sources), diags_(diags), options_(options),
        definesUsed_(definesUsed) {}

  std::optional<Pattern> run() {
    unsigned errorsBefore = diags_.errorCount();
    pattern_.name = decl_.name;
    pattern_.loc = decl_.nameRange;
    declareInputs();
    collectParams();
    lowerInputDims();
    collectHeadsAndCausal();
    lowerBody();
    checkPendingDivisors();
    for (const auto &[name, b] : scope_)
      if (b.kind == Binding::Let && !b.used)
        diags_.warning(b.decl, "unused let '" + name + "'");
    if (diags_.errorCount() != errorsBefore)
      return std::nullopt;
    assembleHeads();
    if (diags_.errorCount() != errorsBefore)
      return std::nullopt;
    return std::move(pattern_);
  }

private:
  // ---- Parameters, heads, causal -------------------------------------
  void collectParams() {
    for (const Stmt &s : decl_.body) {
      if (s.kind != StmtKind::Param)
        continue;
      if (isReserved(s.name, s.nameRange))
        continue;
      if (auto it = scope_.find(s.name); it != scope_.end()) {
        diags_.error(s.nameRange, it->second.kind == Binding::Input
                                      ? "redefinition of '" + s.name + "'"
                                      : "redefinition of parameter '" + s.name + "'");
        diags_.note(it->second.decl, "previous definition is here");
        continue;
      }
      noInputs_ = "a parameter default"; // (before the inputs' arrays exist)
      TermRef value = lowerConstant(*s.value, "a parameter default");
      noInputs_.clear();
      if (!value) {
        // The parameter is declared all the same: a -D naming it is not
        // unknown, a redefinition is one, and a use is not reported again
        // (the binding has no value; lowerName returns nullptr quietly).
        for (const Define &d : options_.defines)
          if (d.name == s.name)
            definesUsed_.insert(d.name);
        scope_[s.name] = {Binding::Param, nullptr, s.nameRange, true};
        continue;
      }
      ParamValue p{s.name, value->value(), s.nameRange, false};
      for (const Define &d : options_.defines)
        if (d.name == s.name) {
          p.value = d.value;
          p.fromDefine = true;
          definesUsed_.insert(d.name);
        }
      scope_[s.name] = {Binding::Param, Term::constant(p.value, s.nameRange), s.nameRange, true};
      pattern_.params.push_back(p);
    }
  }

  void collectHeadsAndCausal() {
    for (const Stmt &s : decl_.body) {
      if (s.kind == StmtKind::Causal) {
        if (pattern_.causal) {
          diags_.warning(s.range, "duplicate 'causal'");
          diags_.note(pattern_.causalLoc, "first 'causal' is here");
        }
        pattern_.causal = true;
        pattern_.causalLoc = s.range;
      } else if (s.kind == StmtKind::Heads) {
        if (headsStmt_) {
          diags_.error(s.range, "duplicate 'heads' statement");
          diags_.note(headsStmt_->range, "previous 'heads' is here");
          continue;
        }
        headsStmt_ = &s;
        TermRef count = lowerConstant(*s.value, "'heads'");
        if (!count)
          continue;
        if (count->value() < 1 || count->value() > kMaxHeads) {
          diags_.error(s.value->range, std::string("head count must be ") +
                                           (count->value() < 1 ? "at least 1" : "at most " + std::to_string(kMaxHeads)) +
                                           ", got '" + std::string(sources_.slice(s.value->range)) +
                                           "' which is " + std::to_string(count->value()));
          noteParams(*s.value);
          continue;
        }
        declaredHeads_ = count->value();
      }
    }
  }

  // ---- Inputs ----------------------------------------------------------
  /// Declares every `input`, before the parameters, so that a use anywhere
  /// finds it. Pattern::inputs gets one entry per declared name, in order;
  /// an input whose declaration has an error is kept (its uses are not
  /// reported again) but fails the pattern.
  void declareInputs() {
    std::vector<const Stmt *> &declared = inputStmts_;
    for (const Stmt &s : decl_.body) {
      if (s.kind != StmtKind::Input || isReserved(s.name, s.nameRange))
        continue;
      if (auto it = scope_.find(s.name); it != scope_.end()) {
        diags_.error(s.nameRange, it->second.kind == Binding::Input
                                      ? "redefinition of input '" + s.name + "'"
                                      : "redefinition of '" + s.name + "'");
        diags_.note(it->second.decl, "previous definition is here");
        continue;
      }
      scope_[s.name] = {Binding::Input, nullptr, s.nameRange, true, declared.size()};
      declared.push_back(&s);
      InputDecl decl{s.name, {}, s.nameRange};
      decl.isFloat = s.elementType == "float";
      pattern_.inputs.push_back(std::move(decl));
    }
    arrays_.resize(declared.size());
    inputOk_.assign(declared.size(), true);
  }

  /// Checks the inputs' element types and ranks and lowers their dimensions
  /// (after the parameters, which they may use), then gives each input its
  /// unbound array.
  void lowerInputDims() {
    for (size_t k = 0; k < inputStmts_.size(); ++k) {
      const Stmt *s = inputStmts_[k];
      bool ok = true;
      InputDecl &input = pattern_.inputs[k];
      const size_t maxRank = input.isFloat ? 3 : 2;
      if (s->dims.size() > maxRank) {
        diags_.error(s->dims[maxRank]->range,
                     "input '" + s->name + "' has " + std::to_string(s->dims.size()) + " dimensions; " +
                         (input.isFloat ? "a float input has 1 to 3" : "an int input has 1 or 2"));
        ok = false;
      }
      for (const ExprPtr &dim : s->dims) {
        TermRef t = lowerInputDim(*dim, input.isFloat);
        ok = ok && t;
        if (t)
          input.dims.push_back(t);
      }
      arrays_[k] = unboundInput(input);
      inputOk_[k] = ok;
    }
  }

  /// The rank an input is declared with (its dimensions as written).
  size_t rankOf(size_t input) const { return inputStmts_[input]->dims.size(); }

  /// One dimension of an input: an integer over n and parameters (and, for
  /// a float input, `heads`, the call's head count, as VarH), at least 1 for
  /// every n >= 1 and head count >= 1.
  TermRef lowerInputDim(const Expr &e, bool isFloat) {
    const size_t pendingBefore = pendingDivisors_.size();
    noInputs_ = "an input dimension";
    inDims_ = true;
    dimsTakeHeads_ = isFloat;
    TermRef t = lower(e);
    noInputs_.clear();
    inDims_ = dimsTakeHeads_ = false;
    if (!t || !expectType(t, Type::Int, e))
      return nullptr;
    for (auto [mask, name] : {std::pair{kUsesI, "i"}, {kUsesJ, "j"}, {kUsesH, "h"}})
      if (t->uses(mask) && !(isFloat && mask == kUsesH)) {
        diags_.error(findVar(*t, mask), std::string("'") + name +
                                            "' cannot be used in an input dimension, which may "
                                            "depend on n and parameters only");
        // (A divisor over h waiting for the head count is moot now.)
        pendingDivisors_.resize(pendingBefore);
        return nullptr;
      }
    std::string text(sources_.slice(e.range));
    if (t->op() == Op::Const) {
      if (t->value() >= 1)
        return t;
      diags_.error(e.range, "input dimension must be at least 1, got " +
                                (text == std::to_string(t->value())
                                     ? text
                                     : "'" + text + "' which is " + std::to_string(t->value())));
      noteParams(e);
      return nullptr;
    }
    if (inputDimLowerBound(*t) >= 1)
      return t;
    diags_.error(e.range, "input dimension '" + text + "' may be 0 (it must be at least 1 for every n >= 1" +
                              (t->uses(kUsesH) ? " and every head count" : "") + ")");
    diags_.note(e.range, "write 'max(1, " + text + ")' if that is what you mean");
    return nullptr;
  }

  /// Reports that `e`, whose term `t` reads an input, is used in `context`,
  /// where values must be known before a call: at the read itself, or at the
  /// let that hides it with a note at the read.
  void reportInputUse(const Expr &e, const Term &t, const std::string &context) {
    if (const Expr *use = firstInputUse(e)) {
      if (use->kind == ExprKind::Index) {
        diags_.error(use->range, "input '" + use->name + "' cannot be used in " + context +
                                     kInputsAreLate);
        return;
      }
      const Term &let = *scope_.at(use->name).term;
      const Term *read = findInputRead(let);
      diags_.error(use->range, "'" + use->name + "' reads input '" + read->data()->name +
                                   "' and cannot be used in " + context + kInputsAreLate);
      diags_.note(read->loc(), "'" + use->name + "' reads input '" + read->data()->name + "' here");
      return;
    }
    const Term *read = findInputRead(t);
    diags_.error(read ? read->loc() : e.range,
                 "input '" + (read ? read->data()->name : std::string("?")) +
                     "' cannot be used in " + context + kInputsAreLate);
  }

  /// The first input read in `e`, or the first let that `e` names whose
  /// value reads one, in source order.
  const Expr *firstInputUse(const Expr &e) const {
    auto it = scope_.find(e.name);
    if (e.kind == ExprKind::Index && it != scope_.end() && it->second.kind == Binding::Input)
      return &e;
    if (e.kind == ExprKind::Name && it != scope_.end() && it->second.kind == Binding::Let &&
        it->second.term->uses(kUsesData))
      return &e;
    for (const ExprPtr &c : e.operands)
      if (const Expr *use = firstInputUse(*c))
        return use;
    return nullptr;
  }

  static const Term *findInputRead(const Term &t) {
    if (t.op() == Op::Input || t.op() == Op::InputRow)
      return &t;
    for (const TermRef &a : t.args())
      if (a->uses(kUsesData))
        if (const Term *read = findInputRead(*a))
          return read;
    return nullptr;
  }

  bool isReserved(const std::string &name, SourceRange where) {
    static const std::set<std::string> kReserved = {"i", "j", "h", "n", "abs", "min", "max",
                                                     "random_blocks"};
    if (kReserved.count(name)) {
      diags_.error(where, "'" + name + "' is reserved and cannot be redefined");
      return true;
    }
    return false;
  }

  /// Notes the value of every parameter an expression mentions.
  void noteParams(const Expr &e) {
    std::vector<std::string> seen;
    collectNames(e, seen);
    for (const std::string &name : seen) {
      const ParamValue *p = nullptr;
      for (const ParamValue &q : pattern_.params)
        if (q.name == name)
          p = &q;
      if (!p)
        continue;
      if (p->fromDefine)
        diags_.note(p->decl, "'" + name + "' is " + std::to_string(p->value) + " (set by -D " +
                                 name + "=" + std::to_string(p->value) + ")");
      else
        diags_.note(p->decl, "'" + name + "' is " + std::to_string(p->value) + " here");
    }
  }

  static void collectNames(const Expr &e, std::vector<std::string> &out) {
    if (e.kind == ExprKind::Name && std::find(out.begin(), out.end(), e.name) == out.end())
      out.push_back(e.name);
    for (const ExprPtr &c : e.operands)
      collectNames(*c, out);
  }

  /// Lowers an expression that must be an integer depending on parameters only.
  TermRef lowerConstant(const Expr &e, const std::string &context) {
    constantContext_ = context;
    TermRef t = lower(e);
    constantContext_.clear();
    if (!t)
      return nullptr;
    if (!expectType(t, Type::Int, e))
      return nullptr;
    if (!onlyParams(t, e, context))
      return nullptr;
    ATTNC_CHECK(t->op() == Op::Const, "parameter expression did not fold");
    return t;
  }

  bool onlyParams(const TermRef &t, const Expr &e, const std::string &context) {
    if (t->uses(kUsesData)) {
      reportInputUse(e, *t, context);
      return false;
    }
    static const std::pair<VarMask, const char *> kVars[] = {
        {kUsesI, "i"}, {kUsesJ, "j"}, {kUsesN, "n"}, {kUsesH, "h"}};
    for (auto [mask, name] : kVars)
      if (t->uses(mask)) {
        diags_.error(findVar(*t, mask), std::string("'") + name + "' cannot be used in " + context +
                                            ", which may depend on parameters only");
        return false;
      }
    return true;
  }

  static SourceRange findVar(const Term &t, VarMask mask) {
    static const std::pair<VarMask, Op> kOps[] = {
        {kUsesI, Op::VarI}, {kUsesJ, Op::VarJ}, {kUsesN, Op::VarN}, {kUsesH, Op::VarH}};
    for (auto [m, op] : kOps)
      if (m == mask && t.op() == op)
        return t.loc();
    for (const TermRef &a : t.args())
      if (a->uses(mask) || (a->op() == Op::Builder && mask == kUsesJ)) {
        SourceRange r = findVar(*a, mask);
        if (r.isValid())
          return r;
      }
    return t.loc();
  }

  /// The location of the first node with operator `op`, or an invalid range.
  static SourceRange findOp(const Term &t, Op op) {
    if (t.op() == op)
      return t.loc();
    for (const TermRef &a : t.args())
      if (SourceRange r = findOp(*a, op); r.isValid())
        return r;
    return {};
  }

  bool expectType(const TermRef &t, Type want, const Expr &e) {
    if (t->type() == want)
      return true;
    diags_.error(e.range, std::string("expected ") + typeName(want) + ", got " +
                              typeName(t->type()) + " '" + std::string(sources_.slice(e.range)) +
                              "'");
    if (want == Type::Set && t->type() == Type::Bool)
      diags_.note(e.range, "wrap a condition on j in a set-builder: '{ j : " +
                               std::string(sources_.slice(e.range)) + " }'");
    if (want == Type::Int && t->op() == Op::InputRow)
      diags_.note(e.range, "one index on a 2-D input is its row, a set of keys; an entry is '" +
                               t->data()->name + "[r, c]'");
    return false;
  }

  // ---- Statements that produce terms ----------------------------------
  void lowerBody() {
    for (const Stmt &s : decl_.body) {
      switch (s.kind) {
      case StmtKind::Require:
        checkRequire(s);
        break;
      case StmtKind::Let: {
        if (isReserved(s.name, s.nameRange))
          break;
        if (auto it = scope_.find(s.name); it != scope_.end()) {
          diags_.error(s.nameRange, "redefinition of '" + s.name + "'");
          diags_.note(it->second.decl, "previous definition is here");
          break;
        }
        TermRef t = lower(*s.value);
        if (t)
          scope_[s.name] = {Binding::Let, t, s.nameRange, usedBeforeLet_.count(s.name) != 0};
        else
          poisoned_.insert(s.name);
        break;
      }
      case StmtKind::Attend: {
        if (defaultSet_) {
          diags_.error(s.range, "pattern '" + decl_.name + "' already has an 'attend' statement");
          diags_.note(defaultStmt_->range, "previous 'attend' is here");
          break;
        }
        TermRef t = lowerSet(*s.value);
        defaultStmt_ = &s;
        defaultSet_ = t ? t : Term::make(Op::List, {});
        break;
      }
      case StmtKind::HeadAttends:
        lowerHeadAttends(s);
        break;
      case StmtKind::Score:
      case StmtKind::Sink:
        lowerScoreStatement(s);
        break;
      default:
        break;
      }
    }
    if (!defaultStmt_ && !sawHeadStatement_)
      diags_.error(decl_.nameRange, "pattern '" + decl_.name +
                                        "' attends nothing: add 'attend SET' or 'head K attends SET'");
  }

  TermRef lowerSet(const Expr &e) {
    TermRef t = lower(e);
    if (!t || !expectType(t, Type::Set, e))
      return nullptr;
    return t;
  }

  void checkRequire(const Stmt &s) {
    constantContext_ = "a 'require'";
    TermRef t = lower(*s.value);
    constantContext_.clear();
    if (!t)
      return;
    if (!expectType(t, Type::Bool, *s.value) || !onlyParams(t, *s.value, "a 'require'"))
      return;
    if (t->op() != Op::BoolConst) {
      // Only `x in S` stays unfolded: a set's keys are clipped to [0, n),
      // so Term::make cannot fold membership without n. A requirement has no
      // n; it asks whether x is a key of S for a sequence long enough to hold
      // it, which is evaluating with n unbounded. random_blocks has no such
      // reading: its blocks depend on the query and on n.
      if (SourceRange at = findOp(*t, Op::RandomBlocks); at.isValid()) {
        diags_.error(at, "'random_blocks' cannot be used in a 'require': its keys depend on the "
                         "query and on n");
        return;
      }
      Env env;
      env.n = std::numeric_limits<int64_t>::max();
      t = Term::boolean(evalBool(*t, env), t->loc());
    }
    if (t->value())
      return;
    std::string text(sources_.slice(s.value->range));
    if (s.message.empty())
      diags_.error(s.value->range, "requirement '" + text + "' does not hold");
    else
      diags_.error(s.value->range, "requirement '" + text + "' does not hold: " + s.message);
    noteParams(*s.value);
  }

  void lowerHeadAttends(const Stmt &s) {
    sawHeadStatement_ = true;
    TermRef index = lowerConstant(*s.head, "a head index");
    TermRef set = lowerSet(*s.value);
    if (!index) {
      headStatementFailed_ = true;
      return;
    }
    int64_t k = index->value();
    if (k < 0 || k >= kMaxHeads || (declaredHeads_ && k >= *declaredHeads_)) {
      std::string range = declaredHeads_ ? "; pattern '" + decl_.name + "' has " +
                                               std::to_string(*declaredHeads_) + " heads (0 to " +
                                               std::to_string(*declaredHeads_ - 1) + ")"
                          : k < 0        ? "; head indices start at 0"
                                         : "; a pattern has at most " + std::to_string(kMaxHeads) + " heads";
      diags_.error(s.head->range, "head index " + std::to_string(k) + " is out of range" + range);
      if (declaredHeads_)
        diags_.note(headsStmt_->range, "head count declared here");
      headStatementFailed_ = true;
      return;
    }
    for (const auto &[prevIndex, prev] : headStmts_)
      if (prevIndex == k) {
        diags_.error(s.head->range, "head " + std::to_string(k) + " is given a set twice");
        diags_.note(prev->range, "previous set for head " + std::to_string(k) + " is here");
        headStatementFailed_ = true;
        return;
      }
    headStmts_.push_back({k, &s});
    headSets_[k] = set ? set : Term::make(Op::List, {});
  }

  void assembleHeads() {
    pattern_.headsDeclared = declaredHeads_.has_value() || !headStmts_.empty();
    int64_t count = 1;
    if (declaredHeads_) {
      count = *declaredHeads_;
    } else if (!headStmts_.empty()) {
      for (const auto &[k, stmt] : headStmts_)
        count = std::max(count, k + 1);
    }
    std::vector<int64_t> missing; // heads without a set (a failed 'head' statement was already reported)
    for (int64_t k = 0; k < count; ++k) {
      TermRef set = headSets_.count(k) ? headSets_[k] : defaultSet_;
      if (!set) {
        if (!headStatementFailed_)
          missing.push_back(k);
        continue;
      }
      if (set->uses(kUsesH) && !declaredHeads_ && headStmts_.empty() && k == 0)
        diags_.warning(findVar(*set, kUsesH),
                       "'h' is always 0: pattern '" + decl_.name + "' declares no 'heads'");
      TermRef head = substituteHead(set, k);
      if (pattern_.causal) {
        SourceRange at = pattern_.causalLoc;
        TermRef causal = Term::make(
            Op::Builder, {Term::make(Op::Le, {Term::var(Op::VarJ, at), Term::var(Op::VarI, at)}, at)},
            at);
        hasFallback_.clear(); // (its keys are the terms of one head)
        head = applyCausal(head, causal);
        if (!checkCausalDepth(head, k))
          continue;
      }
      pattern_.heads.push_back(head);
    }
    reportMissingHeads(missing);
  }

  /// `set & causal`, with the causal set pushed into both operands of every
  /// `else` (top-level ones get no intersection around them): a row of A
  /// that has keys only after i is empty, and B's keys take its place.
  TermRef applyCausal(const TermRef &set, const TermRef &causal) {
    if (set->op() == Op::Fallback)
      return Term::make(Op::Fallback,
                        {applyCausal(set->arg(0), causal), applyCausal(set->arg(1), causal)},
                        set->loc());
    return Term::make(Op::Intersect, {causalInsideFallbacks(set, causal), causal},
                      causal->loc());
  }

  TermRef causalInsideFallbacks(const TermRef &t, const TermRef &causal) {
    if (!containsFallback(*t))
      return t;
    if (t->op() == Op::Fallback)
      return applyCausal(t, causal);
    // (Input reads hold integers only, never an 'else': Term::make rebuilds
    // everything on the way down.)
    std::vector<TermRef> args;
    for (const TermRef &a : t->args())
      args.push_back(causalInsideFallbacks(a, causal));
    return Term::make(t->op(), std::move(args), t->loc());
  }

  bool containsFallback(const Term &t) {
    if (auto it = hasFallback_.find(&t); it != hasFallback_.end())
      return it->second;
    bool found = t.op() == Op::Fallback;
    for (const TermRef &a : t.args())
      found = containsFallback(*a) || found;
    return hasFallback_[&t] = found;
  }

  /// Causality inside nested 'else's adds a level per 'else' on a path: the
  /// guarantee of Sema.h (kMaxExprNesting, one more with causal) is checked
  /// here, once per statement.
  bool checkCausalDepth(const TermRef &head, int64_t k) {
    const unsigned depth = extentOf(head).depth;
    if (depth <= kMaxExprNesting + 1)
      return true;
    const Stmt *stmt = defaultStmt_;
    for (const auto &[index, s] : headStmts_)
      if (index == k)
        stmt = s;
    if (stmt && reportedDepth_.insert(stmt).second)
      diags_.error(stmt->value->range,
                   "set nests " + std::to_string(depth) +
                       " levels deep with 'causal' inside each 'else'; the limit is " +
                       std::to_string(kMaxExprNesting + 1));
    return false;
  }

  /// One error per head without a set, or for more than kMaxListedHeads of
  /// them one error that lists them as runs ("heads 0, 1, 3 .. 29999"):
  /// 'heads 30000' with one 'head' statement would print 29,999 errors.
  void reportMissingHeads(const std::vector<int64_t> &missing) {
    constexpr size_t kMaxListedHeads = 4;
    const std::string hint = " attends ...' or add a default 'attend ...'";
    if (missing.size() <= kMaxListedHeads) {
      for (int64_t k : missing) {
        diags_.error(decl_.nameRange,
                     "head " + std::to_string(k) + " of pattern '" + decl_.name + "' has no set");
        diags_.note(decl_.nameRange, "give it one with 'head " + std::to_string(k) + hint);
      }
      return;
    }
    std::string runs;
    for (size_t a = 0; a < missing.size();) {
      size_t b = a;
      while (b + 1 < missing.size() && missing[b + 1] == missing[b] + 1)
        ++b;
      runs += (runs.empty() ? "" : ", ") + std::to_string(missing[a]);
      if (b == a + 1)
        runs += ", " + std::to_string(missing[b]);
      else if (b > a)
        runs += " .. " + std::to_string(missing[b]);
      a = b + 1;
    }
    diags_.error(decl_.nameRange, std::to_string(missing.size()) + " heads of pattern '" + decl_.name +
                                      "' have no set: " + runs);
    diags_.note(decl_.nameRange, "give each one with 'head K" + hint);
  }

  // ---- Score modifiers -------------------------------------------------
  /// Reports a float input read where a set (or a constant) is computed.
  TermRef reportFloatInSet(const Expr &e) {
    if (!constantContext_.empty())
      diags_.error(e.range, "float input '" + e.name + "' cannot be used in " + constantContext_ +
                                ": float inputs are read only by 'score' and 'sink'");
    else
      diags_.error(e.range, "float input '" + e.name +
                                "' cannot decide which keys a query attends: sets read only int inputs");
    return nullptr;
  }

  /// `score EXPR` / `sink EXPR`: at most one of each, lowered where it
  /// stands (lets defined before it are visible).
  void lowerScoreStatement(const Stmt &s) {
    const bool sink = s.kind == StmtKind::Sink;
    const char *word = sink ? "sink" : "score";
    const Stmt *&previous = sink ? sinkStmt_ : scoreStmt_;
    if (previous) {
      diags_.error(s.range, "pattern '" + decl_.name + "' already has a '" + word + "'");
      diags_.note(previous->range, std::string("previous '") + word + "' is here");
      return;
    }
    previous = &s;
    inScore_ = true;
    inSink_ = sink;
    std::optional<Typed> t = lowerScore(*s.value);
    inScore_ = inSink_ = false;
    if (!t)
      return;
    if (t->kind == SK::Cond) {
      diags_.error(s.value->range, std::string("a ") + word + " is a number, got a condition '" +
                                       std::string(sources_.slice(s.value->range)) + "'");
      diags_.note(s.value->range, "use where(cond, a, b) to choose between two values");
      return;
    }
    const size_t depth = scoreDepth(*t->e);
    if (depth > kMaxExprNesting) {
      diags_.error(s.value->range, std::string("'") + word + "' nests " + std::to_string(depth) +
                                       " levels deep with its lets expanded; the limit is " +
                                       std::to_string(kMaxExprNesting));
      return;
    }
    (sink ? pattern_.sink : pattern_.score) = t->e;
  }

  /// What a score node is: an integer, a float or a condition (1 or 0).
  enum class SK { Int, Float, Cond };
  struct Typed {
    ScoreRef e;
    SK kind;
  };

  static const char *kindName(SK k) {
    return k == SK::Int ? "an integer" : k == SK::Float ? "a float" : "a condition";
  }

  const char *scoreWord() const { return inSink_ ? "'sink'" : "'score'"; }

  /// A constant integer operand of a float operation becomes a float one.
  static ScoreRef promote(const ScoreRef &e) {
    if (e->op == ScoreOp::Const && e->isInt)
      return ScoreExpr::constant(e->value, false, e->loc);
    return e;
  }

  /// The node, folded to a constant when its operands all are.
  Typed node(ScoreOp op, std::vector<ScoreRef> args, SK kind, SourceRange loc) {
    const bool isInt = kind != SK::Float;
    if (kind == SK::Float)
      for (ScoreRef &a : args)
        a = promote(a);
    ScoreRef e = ScoreExpr::make(op, std::move(args), isInt, loc);
    if (std::all_of(e->args.begin(), e->args.end(), [](const ScoreRef &a) { return a->op == ScoreOp::Const; }))
      e = ScoreExpr::constant(evalScore(*e, ScoreEnv{}, {}), isInt, loc);
    return {e, kind};
  }

  std::optional<Typed> scoreError(SourceRange at, const std::string &message) {
    diags_.error(at, message);
    return std::nullopt;
  }

  /// A number (integer or float) operand; reports anything else.
  bool expectNumber(const Typed &t, const Expr &e, const std::string &what) {
    if (t.kind != SK::Cond)
      return true;
    diags_.error(e.range, what + " needs a number, got a condition '" + std::string(sources_.slice(e.range)) +
                              "'");
    diags_.note(e.range, "use where(cond, a, b) to choose between two values");
    return false;
  }

  bool expectCondition(const Typed &t, const Expr &e, const std::string &what) {
    if (t.kind == SK::Cond)
      return true;
    diags_.error(e.range, what + " needs a condition, got " + kindName(t.kind) + " '" +
                              std::string(sources_.slice(e.range)) + "'");
    return false;
  }

  /// An integer divisor or modulus of a score: at least 1 wherever it is
  /// evaluated, by scoreIntRange.
  bool scoreDivisorOk(const ScoreRef &d, const Expr &e, bool modulo) {
    const char *what = modulo ? "modulus" : "divisor";
    if (d->op == ScoreOp::Const) {
      if (d->value >= 1)
        return true;
      diags_.error(e.range, std::string(what) + " must be a positive integer, got '" +
                                std::string(sources_.slice(e.range)) + "' which is " +
                                std::to_string(static_cast<int64_t>(d->value)));
      noteParams(e);
      return false;
    }
    if (scoreIntRange(*d).lo >= 1)
      return true;
    std::string text(sources_.slice(e.range));
    diags_.error(e.range, std::string(what) + " '" + text + "' can be zero or negative; it must be at least 1");
    diags_.note(e.range, "write 'max(1, " + text + ")' if that is what you mean");
    return false;
  }

  /// A let's Int or Bool term as a score tree (null for what a score cannot
  /// hold: a set, a membership test).
  static ScoreRef termToScore(const Term &t, SourceRange use) {
    auto args = [&](std::vector<ScoreRef> &out) {
      for (const TermRef &a : t.args()) {
        ScoreRef x = termToScore(*a, use);
        if (!x)
          return false;
        out.push_back(std::move(x));
      }
      return true;
    };
    ScoreOp op;
    switch (t.op()) {
    case Op::Const: return ScoreExpr::constant(static_cast<double>(t.value()), true, use);
    case Op::BoolConst: return ScoreExpr::constant(t.value() ? 1 : 0, true, use);
    case Op::VarI: return ScoreExpr::make(ScoreOp::I, {}, true, t.loc());
    case Op::VarJ: return ScoreExpr::make(ScoreOp::J, {}, true, t.loc());
    case Op::VarN: return ScoreExpr::make(ScoreOp::N, {}, true, t.loc());
    case Op::VarH: return ScoreExpr::make(ScoreOp::H, {}, true, t.loc());
    case Op::Add: op = ScoreOp::Add; break;
    case Op::Sub: op = ScoreOp::Sub; break;
    case Op::Mul: op = ScoreOp::Mul; break;
    case Op::Div: op = ScoreOp::IDiv; break;
    case Op::Mod: op = ScoreOp::Mod; break;
    case Op::Neg: op = ScoreOp::Neg; break;
    case Op::Abs: op = ScoreOp::Abs; break;
    case Op::Min: op = ScoreOp::Min; break;
    case Op::Max: op = ScoreOp::Max; break;
    case Op::Eq: op = ScoreOp::Eq; break;
    case Op::Ne: op = ScoreOp::Ne; break;
    case Op::Lt: op = ScoreOp::Lt; break;
    case Op::Le: op = ScoreOp::Le; break;
    case Op::Gt: op = ScoreOp::Gt; break;
    case Op::Ge: op = ScoreOp::Ge; break;
    case Op::And: op = ScoreOp::And; break;
    case Op::Or: op = ScoreOp::Or; break;
    case Op::Not: op = ScoreOp::Not; break;
    default: return nullptr;
    }
    std::vector<ScoreRef> out;
    if (!args(out))
      return nullptr;
    return ScoreExpr::make(op, std::move(out), true, t.loc());
  }

  std::optional<Typed> lowerScoreName(const Expr &e) {
    if (e.name == "s" || (e.name == "j" && inSink_)) {
      if (inSink_)
        return scoreError(e.range, "'" + e.name + "' cannot be used in 'sink': a sink is one logit per row, "
                                                   "with no key (it may use i, h, n, parameters and float inputs)");
      if (scope_.count("s"))
        return scoreError(e.range, "'s' is the scaled logit in 'score', but the pattern also defines a name 's'; "
                                   "rename it");
      return Typed{ScoreExpr::make(ScoreOp::S, {}, false, e.range), SK::Float};
    }
    static const std::pair<const char *, ScoreOp> kVars[] = {
        {"i", ScoreOp::I}, {"j", ScoreOp::J}, {"n", ScoreOp::N}, {"h", ScoreOp::H}};
    for (auto [name, op] : kVars)
      if (e.name == name)
        return Typed{ScoreExpr::make(op, {}, true, e.range), SK::Int};
    auto it = scope_.find(e.name);
    if (it == scope_.end()) {
      unknownName(e.name, e.range);
      return std::nullopt;
    }
    Binding &b = it->second;
    b.used = true;
    switch (b.kind) {
    case Binding::Param:
      if (!b.term)
        return std::nullopt; // (its default has an error, reported there)
      return Typed{ScoreExpr::constant(static_cast<double>(b.term->value()), true, e.range), SK::Int};
    case Binding::Input: {
      const InputDecl &in = pattern_.inputs[b.input];
      if (!inputOk_[b.input])
        return std::nullopt;
      if (!in.isFloat)
        return scoreError(e.range, std::string("score and sink read float inputs only; '") + e.name +
                                       "' is an int input");
      std::string example = e.name + "[h";
      for (size_t k = 1; k < in.rank(); ++k)
        example += ", 0";
      diags_.error(e.range, "float input '" + e.name + "' must be indexed, as in '" + example + "]'");
      diags_.note(b.decl, "input '" + e.name + "' is declared here");
      return std::nullopt;
    }
    case Binding::Let: {
      const Term &t = *b.term;
      if (t.uses(kUsesData)) {
        const Term *read = findInputRead(t);
        return scoreError(e.range, "'" + e.name + "' reads int input '" + read->data()->name +
                                       "'; score and sink read float inputs only");
      }
      if (t.type() == Type::Set)
        return scoreError(e.range, "'" + e.name + "' is a set, which cannot be used in " + scoreWord() +
                                       " (a number)");
      if (inSink_ && t.uses(kUsesJ)) {
        diags_.error(e.range, "'" + e.name + "' uses 'j', which cannot be used in 'sink': a sink is one logit "
                                             "per row, with no key");
        diags_.note(findVar(t, kUsesJ), "'" + e.name + "' uses 'j' here");
        return std::nullopt;
      }
      ScoreRef x = termToScore(t, e.range);
      if (!x)
        return scoreError(e.range, "'" + e.name + "' tests membership in a set, which cannot be used in " +
                                       scoreWord());
      return Typed{x, t.type() == Type::Bool ? SK::Cond : SK::Int};
    }
    }
    return std::nullopt;
  }

  std::optional<Typed> lowerScoreIndex(const Expr &e) {
    auto it = scope_.find(e.name);
    if (it == scope_.end() || it->second.kind != Binding::Input) {
      if (lowerIndex(e)) // (reports every other case, as in a set)
        ATTNC_CHECK(false, "an index of a name that is not an input lowered");
      return std::nullopt;
    }
    it->second.used = true;
    const size_t index = it->second.input;
    if (!inputOk_[index])
      return std::nullopt;
    const InputDecl &in = pattern_.inputs[index];
    if (!in.isFloat)
      return scoreError(e.range, "score and sink read float inputs only; '" + e.name + "' is an int input");
    const size_t rank = in.rank(), count = e.operands.size();
    if (count != rank) {
      diags_.error(e.range, "input '" + e.name + "' has " + std::to_string(rank) + " dimension" +
                                (rank == 1 ? "" : "s") + ", indexed with " + std::to_string(count));
      diags_.note(it->second.decl, "input '" + e.name + "' is declared here");
      return std::nullopt;
    }
    std::vector<ScoreRef> indices;
    for (const ExprPtr &c : e.operands) {
      std::optional<Typed> t = lowerScore(*c);
      if (!t)
        return std::nullopt;
      if (t->kind != SK::Int) {
        std::string text(sources_.slice(c->range));
        diags_.error(c->range, "an index of '" + e.name + "' must be an integer, got " + kindName(t->kind) +
                                   " '" + text + "'");
        if (t->kind == SK::Float)
          diags_.note(c->range, "use floor(...) to round it down", "floor(" + text + ")");
        return std::nullopt;
      }
      indices.push_back(t->e);
    }
    return Typed{ScoreExpr::read(static_cast<int64_t>(index), std::move(indices), e.range), SK::Float};
  }

  std::optional<Typed> lowerScoreCall(const Expr &e) {
    struct Fn {
      const char *name;
      ScoreOp op;
      size_t minArgs, maxArgs;
    };
    static const Fn kFns[] = {{"tanh", ScoreOp::Tanh, 1, 1}, {"exp", ScoreOp::Exp, 1, 1},
                              {"log", ScoreOp::Log, 1, 1},   {"abs", ScoreOp::Abs, 1, 1},
                              {"min", ScoreOp::Min, 2, SIZE_MAX}, {"max", ScoreOp::Max, 2, SIZE_MAX},
                              {"floor", ScoreOp::Floor, 1, 1}, {"where", ScoreOp::Where, 3, 3}};
    const Fn *fn = nullptr;
    for (const Fn &f : kFns)
      if (e.name == f.name)
        fn = &f;
    if (!fn) {
      if (e.name == "random_blocks")
        return scoreError(e.nameRange, std::string("'random_blocks' is a set, which cannot be used in ") +
                                           scoreWord() + " (a number)");
      std::string best;
      for (const Fn &f : kFns)
        if (editDistance(f.name, e.name) <= 2 && (best.empty() || editDistance(f.name, e.name) <
                                                                      editDistance(best, e.name)))
          best = f.name;
      return scoreError(e.nameRange, "unknown function '" + e.name + "' in " + scoreWord() +
                                         (best.empty() ? "" : "; did you mean '" + best + "'?") +
                                         " (available: tanh, exp, log, abs, min, max, floor, where)");
    }
    const size_t count = e.operands.size();
    if (count < fn->minArgs || count > fn->maxArgs) {
      std::string want = fn->minArgs == fn->maxArgs ? std::to_string(fn->minArgs)
                                                    : "at least " + std::to_string(fn->minArgs);
      return scoreError(e.range, "'" + e.name + "' takes " + want + " argument" +
                                     (fn->maxArgs == 1 ? "" : "s") + ", got " + std::to_string(count));
    }
    std::vector<Typed> args;
    for (const ExprPtr &c : e.operands) {
      std::optional<Typed> t = lowerScore(*c);
      if (!t)
        return std::nullopt;
      args.push_back(*t);
    }
    const std::string what = "'" + e.name + "'";
    if (fn->op == ScoreOp::Where) {
      if (!expectCondition(args[0], *e.operands[0], "the first argument of 'where'") ||
          !expectNumber(args[1], *e.operands[1], what) || !expectNumber(args[2], *e.operands[2], what))
        return std::nullopt;
      if (args[0].e->op == ScoreOp::Const) // a constant condition picks its branch
        return args[0].e->value != 0 ? args[1] : args[2];
      const SK kind = args[1].kind == SK::Int && args[2].kind == SK::Int ? SK::Int : SK::Float;
      return node(ScoreOp::Where, {args[0].e, args[1].e, args[2].e}, kind, e.range);
    }
    bool allInt = true;
    std::vector<ScoreRef> operands;
    for (size_t k = 0; k < args.size(); ++k) {
      if (!expectNumber(args[k], *e.operands[k], what))
        return std::nullopt;
      allInt = allInt && args[k].kind == SK::Int;
      operands.push_back(args[k].e);
    }
    switch (fn->op) {
    case ScoreOp::Floor:
      if (allInt)
        return args[0]; // (already an integer)
      return node(ScoreOp::Floor, std::move(operands), SK::Int, e.range);
    case ScoreOp::Abs:
    case ScoreOp::Min:
    case ScoreOp::Max:
      return node(fn->op, std::move(operands), allInt ? SK::Int : SK::Float, e.range);
    default:
      return node(fn->op, std::move(operands), SK::Float, e.range);
    }
  }

  std::optional<Typed> lowerScoreBinary(const Expr &e) {
    const std::string op = std::string("operator '") + spelling(e.binaryOp) + "'";
    switch (e.binaryOp) {
    case BinaryOp::Union:
    case BinaryOp::Intersect:
    case BinaryOp::Else:
      return scoreError(e.opRange, op + " combines sets, which cannot be used in " + scoreWord() + " (a number)");
    default:
      break;
    }
    std::optional<Typed> a = lowerScore(*e.operands[0]);
    std::optional<Typed> b = a ? lowerScore(*e.operands[1]) : std::nullopt;
    if (!a || !b)
      return std::nullopt;
    if (e.binaryOp == BinaryOp::And || e.binaryOp == BinaryOp::Or) {
      if (!expectCondition(*a, *e.operands[0], op) || !expectCondition(*b, *e.operands[1], op))
        return std::nullopt;
      return node(e.binaryOp == BinaryOp::And ? ScoreOp::And : ScoreOp::Or, {a->e, b->e}, SK::Cond, e.range);
    }
    if (!expectNumber(*a, *e.operands[0], op) || !expectNumber(*b, *e.operands[1], op))
      return std::nullopt;
    const bool ints = a->kind == SK::Int && b->kind == SK::Int;
    const SK kind = ints ? SK::Int : SK::Float;
    switch (e.binaryOp) {
    case BinaryOp::Add: return node(ScoreOp::Add, {a->e, b->e}, kind, e.range);
    case BinaryOp::Sub: return node(ScoreOp::Sub, {a->e, b->e}, kind, e.range);
    case BinaryOp::Mul: return node(ScoreOp::Mul, {a->e, b->e}, kind, e.range);
    case BinaryOp::Div:
      if (!ints)
        return node(ScoreOp::Div, {a->e, b->e}, SK::Float, e.range);
      if (!scoreDivisorOk(b->e, *e.operands[1], false))
        return std::nullopt;
      return node(ScoreOp::IDiv, {a->e, b->e}, SK::Int, e.range);
    case BinaryOp::Mod:
      if (!ints) {
        const Expr &f = *e.operands[a->kind == SK::Float ? 0 : 1];
        return scoreError(f.range, "operator '%' needs integers, got a float '" +
                                       std::string(sources_.slice(f.range)) + "'");
      }
      if (!scoreDivisorOk(b->e, *e.operands[1], true))
        return std::nullopt;
      return node(ScoreOp::Mod, {a->e, b->e}, SK::Int, e.range);
    default:
      return std::nullopt;
    }
  }

  /// A score or sink expression, typed; nullopt after reporting an error.
  std::optional<Typed> lowerScore(const Expr &e) {
    switch (e.kind) {
    case ExprKind::Int:
      if (e.intValue > (int64_t(1) << 53) || e.intValue < -(int64_t(1) << 53))
        return scoreError(e.range, "integer " + std::to_string(e.intValue) + " is too large for " + scoreWord() +
                                       " (at most 2^53)");
      return Typed{ScoreExpr::constant(static_cast<double>(e.intValue), true, e.range), SK::Int};
    case ExprKind::Float:
      return Typed{ScoreExpr::constant(e.floatValue, false, e.range), SK::Float};
    case ExprKind::Bool:
      return Typed{ScoreExpr::constant(e.boolValue ? 1 : 0, true, e.range), SK::Cond};
    case ExprKind::Name:
      return lowerScoreName(e);
    case ExprKind::Index:
      return lowerScoreIndex(e);
    case ExprKind::Unary: {
      std::optional<Typed> a = lowerScore(*e.operands[0]);
      if (!a)
        return std::nullopt;
      if (e.unaryOp == UnaryOp::Not) {
        if (!expectCondition(*a, *e.operands[0], "operator '!'"))
          return std::nullopt;
        return node(ScoreOp::Not, {a->e}, SK::Cond, e.range);
      }
      if (!expectNumber(*a, *e.operands[0], "operator '-'"))
        return std::nullopt;
      return node(ScoreOp::Neg, {a->e}, a->kind, e.range);
    }
    case ExprKind::Binary:
      return lowerScoreBinary(e);
    case ExprKind::Compare: {
      std::vector<Typed> terms;
      for (const ExprPtr &c : e.operands) {
        std::optional<Typed> t = lowerScore(*c);
        if (!t || !expectNumber(*t, *c, "a comparison"))
          return std::nullopt;
        terms.push_back(*t);
      }
      std::optional<Typed> result;
      for (size_t k = 0; k < e.compareOps.size(); ++k) {
        static const ScoreOp kOps[] = {ScoreOp::Eq, ScoreOp::Ne, ScoreOp::Lt,
                                       ScoreOp::Le, ScoreOp::Gt, ScoreOp::Ge};
        ScoreRef x = terms[k].e, y = terms[k + 1].e;
        if (terms[k].kind != terms[k + 1].kind)
          x = promote(x), y = promote(y);
        SourceRange r = SourceRange::merge(e.operands[k]->outerRange(), e.operands[k + 1]->outerRange());
        Typed cmp = node(kOps[static_cast<int>(e.compareOps[k])], {x, y}, SK::Cond, r);
        result = result ? node(ScoreOp::And, {result->e, cmp.e}, SK::Cond, e.range) : cmp;
      }
      return result;
    }
    case ExprKind::Call:
      return lowerScoreCall(e);
    case ExprKind::In:
    case ExprKind::SetBuilder:
    case ExprKind::SetRange:
    case ExprKind::SetList:
      return scoreError(e.range, std::string("a set cannot be used in ") + scoreWord() +
                                     ", which is a number for each " + (inSink_ ? "row" : "allowed pair"));
    }
    return std::nullopt;
  }

  // ---- Expressions -----------------------------------------------------
  /// Lowers `e` and refuses a result deeper or larger than the limits.
  TermRef lower(const Expr &e) {
    TermRef t = lowerNode(e);
    if (!t)
      return nullptr;
    Extent x = extentOf(t);
    if (x.depth > kMaxExprNesting) {
      diags_.error(e.range, "expression nests " + std::to_string(x.depth) +
                                " levels deep with its lets expanded; the limit is " +
                                std::to_string(kMaxExprNesting));
      noteLets(e, [](const Extent &x) { return uint64_t(x.depth); }, "is", " levels deep");
      return nullptr;
    }
    if (x.nodes > kMaxTermNodes) {
      diags_.error(e.range, "expression has " +
                                (x.nodes == UINT64_MAX ? std::string("more than 2^64")
                                                       : std::to_string(x.nodes)) +
                                " nodes with its lets expanded; the limit is " +
                                std::to_string(kMaxTermNodes));
      noteLets(e, [](const Extent &x) { return x.nodes; }, "has", " nodes");
      return nullptr;
    }
    return t;
  }

  /// Depth and node count of a term with its lets expanded (shared subterms
  /// counted once per use); the node count saturates at UINT64_MAX.
  struct Extent {
    unsigned depth = 1;
    uint64_t nodes = 1;
  };

  /// Measures `root`, memoised over every term measured before: each new
  /// node costs O(its operands). Iterative, because the term measured may be
  /// the one too deep to walk recursively.
  Extent extentOf(const TermRef &root) {
    if (auto it = extents_.find(root.get()); it != extents_.end())
      return it->second;
    // Measured terms stay alive with the root, so that no address in the
    // memo is ever reused by another term.
    measured_.push_back(root);
    std::vector<std::pair<const Term *, size_t>> stack{{root.get(), 0}};
    while (!stack.empty()) {
      const Term *t = stack.back().first;
      size_t next = stack.back().second;
      if (next < t->args().size()) {
        ++stack.back().second;
        const Term *a = t->arg(next).get();
        if (!extents_.count(a))
          stack.push_back({a, 0});
        continue;
      }
      Extent x;
      for (const TermRef &a : t->args()) {
        const Extent &y = extents_.at(a.get());
        x.depth = std::max(x.depth, y.depth + 1);
        x.nodes = y.nodes > UINT64_MAX - x.nodes ? UINT64_MAX : x.nodes + y.nodes;
      }
      extents_[t] = x;
      stack.pop_back();
    }
    return extents_.at(root.get());
  }

  /// Notes the let that `e` uses with the largest `measure`: "'a' is 200
  /// levels deep".
  template <typename Measure>
  void noteLets(const Expr &e, Measure measure, const char *verb, const char *unit) {
    std::vector<std::string> names;
    collectNames(e, names);
    const Binding *deepest = nullptr;
    std::string deepestName;
    for (const std::string &name : names) {
      auto it = scope_.find(name);
      if (it == scope_.end() || it->second.kind != Binding::Let)
        continue;
      if (!deepest || measure(extentOf(it->second.term)) > measure(extentOf(deepest->term))) {
        deepest = &it->second;
        deepestName = name;
      }
    }
    if (deepest)
      diags_.note(deepest->decl, "'" + deepestName + "' " + verb + " " +
                                     std::to_string(measure(extentOf(deepest->term))) + unit);
  }

  TermRef lowerNode(const Expr &e) {
    switch (e.kind) {
    case ExprKind::Int:
      return Term::constant(e.intValue, e.range);
    case ExprKind::Float:
      diags_.error(e.range, "float '" + std::string(sources_.slice(e.range)) +
                                "' cannot be used here: sets, lets and parameters are integers (only "
                                "'score' and 'sink' compute with floats)");
      return nullptr;
    case ExprKind::Bool:
      return Term::boolean(e.boolValue, e.range);
    case ExprKind::Name:
      return lowerName(e);
    case ExprKind::Index:
      return lowerIndex(e);
    case ExprKind::Unary: {
      TermRef a = lower(*e.operands[0]);
      if (!a)
        return nullptr;
      Type want = e.unaryOp == UnaryOp::Neg ? Type::Int : Type::Bool;
      if (a->type() != want) {
        diags_.error(e.range, std::string("operator '") + spelling(e.unaryOp) + "' needs " +
                                  typeName(want) + " operand, got " + typeName(a->type()));
        return nullptr;
      }
      Op op = e.unaryOp == UnaryOp::Neg ? Op::Neg : Op::Not;
      if (!foldFits(op, {a}, e))
        return nullptr;
      return Term::make(op, {a}, e.range);
    }
    case ExprKind::Binary:
      return lowerBinary(e);
    case ExprKind::Compare:
      return lowerCompare(e);
    case ExprKind::In: {
      TermRef x = lower(*e.operands[0]);
      TermRef s = lower(*e.operands[1]);
      if (!x || !s || !expectType(x, Type::Int, *e.operands[0]) ||
          !expectType(s, Type::Set, *e.operands[1]))
        return nullptr;
      return Term::make(Op::In, {x, s}, e.range);
    }
    case ExprKind::Call:
      return lowerCall(e);
    case ExprKind::SetBuilder: {
      if (e.name != "j") {
        diags_.error(e.nameRange, "the set-builder variable must be 'j' (the key), got '" + e.name +
                                      "'");
        return nullptr;
      }
      TermRef p = lower(*e.operands[0]);
      if (!p || !expectType(p, Type::Bool, *e.operands[0]))
        return nullptr;
      return Term::make(Op::Builder, {p}, e.range);
    }
    case ExprKind::SetRange:
    case ExprKind::SetList: {
      std::vector<TermRef> elems;
      for (const ExprPtr &c : e.operands) {
        TermRef t = lower(*c);
        if (!t || !expectType(t, Type::Int, *c))
          return nullptr;
        if (t->uses(kUsesJ)) {
          diags_.error(findVar(*t, kUsesJ),
                       "set bounds and elements cannot depend on the key 'j'; use a set-builder "
                       "'{ j : ... }'");
          return nullptr;
        }
        elems.push_back(t);
      }
      return Term::make(e.kind == ExprKind::SetRange ? Op::Range : Op::List, std::move(elems),
                        e.range);
    }
    }
    return nullptr;
  }

  TermRef lowerName(const Expr &e) {
    if (e.name == "heads") { // (the parser makes this name in input dimensions only)
      if (inDims_ && dimsTakeHeads_)
        return Term::var(Op::VarH, e.range);
      diags_.error(e.range, "'heads' (the call's head count) can be used only in a float input's dimensions");
      return nullptr;
    }
    if (e.name == "h" && inDims_ && dimsTakeHeads_) {
      diags_.error(e.range, "'h' cannot be used in an input dimension, which may depend on n, parameters "
                            "and 'heads' only");
      return nullptr;
    }
    static const std::pair<const char *, Op> kVars[] = {
        {"i", Op::VarI}, {"j", Op::VarJ}, {"n", Op::VarN}, {"h", Op::VarH}};
    for (auto [name, op] : kVars)
      if (e.name == name)
        return Term::var(op, e.range);
    if (auto it = scope_.find(e.name); it != scope_.end()) {
      it->second.used = true;
      if (it->second.kind == Binding::Input) {
        if (!inputOk_[it->second.input])
          return nullptr; // Its declaration has an error, reported there.
        if (!noInputs_.empty()) {
          diags_.error(e.range, "input '" + e.name + "' cannot be used in " + noInputs_ +
                                    kInputsAreLate);
          return nullptr;
        }
        if (pattern_.inputs[it->second.input].isFloat)
          return reportFloatInSet(e);
        const bool rows = rankOf(it->second.input) == 2;
        diags_.error(e.range, "input '" + e.name + "' must be indexed, as in '" + e.name +
                                  (rows ? "[i]' (a row, as a set of keys) or '" + e.name + "[i, 0]'"
                                        : "[j]'"));
        diags_.note(it->second.decl, "input '" + e.name + "' is declared here");
        return nullptr;
      }
      if (!it->second.term)
        return nullptr; // A parameter whose default has an error, reported there.
      return relocate(it->second.term, e.range);
    }
    return unknownName(e.name, e.range);
  }

  /// Reports a name that is not in scope (unless its definition already
  /// failed), with the closest name in scope as a suggestion.
  TermRef unknownName(const std::string &name, SourceRange at) {
    if (poisoned_.count(name))
      return nullptr; // Its definition already has an error.
    if (name == "s" && !inScore_) {
      diags_.error(at, "'s', the scaled logit, can be used only in 'score'");
      return nullptr;
    }
    std::string best;
    unsigned bestDistance = 3;
    for (const auto &[known, b] : scope_) {
      unsigned d = editDistance(known, name);
      if (d < bestDistance)
        bestDistance = d, best = known;
    }
    for (const char *builtin : {"i", "j", "n", "h"})
      if (editDistance(builtin, name) == 0)
        best = builtin;
    if (inScore_ && best.empty())
      for (const char *fn : {"tanh", "exp", "log", "abs", "min", "max", "floor", "where"})
        if (editDistance(fn, name) <= 1 && name.size() > 2)
          best = fn;
    bool later = std::any_of(decl_.body.begin(), decl_.body.end(), [&](const Stmt &s) {
      return s.kind == StmtKind::Let && s.name == name;
    });
    if (later) {
      usedBeforeLet_.insert(name);
      diags_.error(at, "'" + name + "' is used before its 'let'");
    }
    else if (!best.empty())
      diags_.error(at, "use of undeclared name '" + name + "'; did you mean '" + best + "'?");
    else
      diags_.error(at, "use of undeclared name '" + name + "'");
    return nullptr;
  }

  /// `NAME[E]` / `NAME[E1, E2]`: an entry of an input (Op::Input), or with
  /// one index on a 2-D input its row as a set of keys (Op::InputRow).
  TermRef lowerIndex(const Expr &e) {
    auto it = scope_.find(e.name);
    if (it == scope_.end() || it->second.kind != Binding::Input) {
      static const std::pair<const char *, const char *> kVars[] = {
          {"i", "the query position"}, {"j", "the key position"}, {"n", "the sequence length"},
          {"h", "the head index"}};
      std::string what;
      for (auto [name, meaning] : kVars)
        if (e.name == name)
          what = meaning;
      if (it != scope_.end()) {
        it->second.used = true;
        what = it->second.kind == Binding::Param ? "a parameter" : "a let";
      }
      if (what.empty())
        return unknownName(e.name, e.nameRange);
      diags_.error(e.nameRange,
                   "'" + e.name + "' is " + what + ", not an input; only inputs can be indexed");
      return nullptr;
    }
    it->second.used = true;
    const size_t index = it->second.input;
    if (!inputOk_[index])
      return nullptr; // Its declaration has an error, reported there.
    if (!noInputs_.empty()) {
      diags_.error(e.range, "input '" + e.name + "' cannot be used in " + noInputs_ +
                                kInputsAreLate);
      return nullptr;
    }
    if (pattern_.inputs[index].isFloat)
      return reportFloatInSet(e);
    const size_t rank = rankOf(index), count = e.operands.size();
    if (count != rank && !(rank == 2 && count == 1)) {
      diags_.error(e.range, "input '" + e.name + "' has " + std::to_string(rank) + " dimension" +
                                (rank == 1 ? "" : "s") + ", indexed with " + std::to_string(count));
      diags_.note(it->second.decl, "input '" + e.name + "' is declared here");
      return nullptr;
    }
    std::vector<TermRef> indices;
    for (const ExprPtr &c : e.operands) {
      TermRef t = lower(*c);
      if (!t || !expectType(t, Type::Int, *c))
        return nullptr;
      indices.push_back(t);
    }
    return Term::input(count == rank ? Op::Input : Op::InputRow, static_cast<int64_t>(index),
                       std::move(indices), e.range, arrays_[index]);
  }

  /// A let's value keeps its own locations; a parameter takes the use's.
  static TermRef relocate(const TermRef &t, SourceRange use) {
    if (t->op() == Op::Const)
      return Term::constant(t->value(), use);
    return t;
  }

  TermRef lowerBinary(const Expr &e) {
    TermRef a = lower(*e.operands[0]);
    TermRef b = lower(*e.operands[1]);
    if (!a || !b)
      return nullptr;
    Op op{};       // (every case below sets both; GCC 12 cannot tell)
    Type want{};
    switch (e.binaryOp) {
    case BinaryOp::Add: op = Op::Add; want = Type::Int; break;
    case BinaryOp::Sub:
      if (a->type() == Type::Set || b->type() == Type::Set) {
        op = Op::Difference;
        want = Type::Set;
      } else {
        op = Op::Sub;
        want = Type::Int;
      }
      break;
    case BinaryOp::Mul: op = Op::Mul; want = Type::Int; break;
    case BinaryOp::Div: op = Op::Div; want = Type::Int; break;
    case BinaryOp::Mod: op = Op::Mod; want = Type::Int; break;
    case BinaryOp::And: op = Op::And; want = Type::Bool; break;
    case BinaryOp::Or: op = Op::Or; want = Type::Bool; break;
    case BinaryOp::Union: op = Op::Union; want = Type::Set; break;
    case BinaryOp::Intersect: op = Op::Intersect; want = Type::Set; break;
    case BinaryOp::Else: op = Op::Fallback; want = Type::Set; break;
    }
    for (int k = 0; k < 2; ++k) {
      const TermRef &t = k == 0 ? a : b;
      if (t->type() != want) {
        std::string hint;
        if (want == Type::Set && t->type() == Type::Bool)
          hint = op == Op::Fallback
                     ? "; wrap a condition on j in a set-builder: '{ j : ... }'"
                     : "; use '&&' / '||' for conditions and '&' / '|' for sets";
        if (want == Type::Bool && t->type() == Type::Set)
          hint = "; use '&' / '|' to combine sets";
        diags_.error(e.operands[k]->range,
                     std::string("operator '") + spelling(e.binaryOp) + "' needs " + typeName(want) +
                         " on both sides, got " + typeName(t->type()) + " '" +
                         std::string(sources_.slice(e.operands[k]->range)) + "'" + hint);
        return nullptr;
      }
    }
    if (op == Op::Div || op == Op::Mod) {
      if (!checkDivisor(b, *e.operands[1], op == Op::Mod))
        return nullptr;
    }
    if (!foldFits(op, {a, b}, e))
      return nullptr;
    return Term::make(op, {a, b}, e.range);
  }

  bool checkDivisor(const TermRef &d, const Expr &e, bool modulo) {
    if (d->uses(kUsesData)) {
      reportInputUse(e, *d, modulo ? "a modulus" : "a divisor");
      return false;
    }
    if (d->op() == Op::Const) {
      if (d->value() >= 1)
        return true;
      const char *what = modulo ? "modulus" : "divisor";
      std::string text(sources_.slice(e.range));
      std::string got = text == std::to_string(d->value())
                            ? "got " + text
                            : "got '" + text + "' which is " + std::to_string(d->value());
      diags_.error(e.range, std::string(what) + " must be a positive integer, " + got);
      noteParams(e);
      return false;
    }
    if (d->uses(kUsesH) && !declaredHeads_) {
      // Without 'heads' the head count is max K + 1 over the 'head K
      // attends' statements, and some of them may come later: h's range is
      // known only after the whole body (checkPendingDivisors).
      pendingDivisors_.push_back({d, &e, modulo});
      return true;
    }
    return divisorInRange(d, e, modulo, declaredHeads_.value_or(1));
  }

  /// The range-analysis half of checkDivisor, for h in [0, numHeads).
  bool divisorInRange(const TermRef &d, const Expr &e, bool modulo, int64_t numHeads) {
    ValueRange r = rangeOf(*d, numHeads);
    if (r.lo >= 1)
      return true;
    std::string text(sources_.slice(e.range));
    diags_.error(e.range, std::string(modulo ? "modulus" : "divisor") + " '" + text +
                              "' can be zero or negative; it must be at least 1 for every i, j "
                              "in [0, n)");
    diags_.note(e.range, "write 'max(1, " + text + ")' if that is what you mean");
    return false;
  }

  /// Checks the divisors deferred by checkDivisor, now that every 'head K
  /// attends' statement has been seen. The terms that hold them were built
  /// already; an error here keeps run() from assembling the heads.
  void checkPendingDivisors() {
    int64_t count = 1;
    for (const auto &[k, stmt] : headStmts_)
      count = std::max(count, k + 1);
    for (const PendingDivisor &p : pendingDivisors_)
      divisorInRange(p.divisor, *p.expr, p.modulo, count);
  }

  TermRef lowerCompare(const Expr &e) {
    std::vector<TermRef> terms;
    for (const ExprPtr &c : e.operands) {
      TermRef t = lower(*c);
      if (!t || !expectType(t, Type::Int, *c))
        return nullptr;
      terms.push_back(t);
    }
    TermRef result;
    for (size_t k = 0; k < e.compareOps.size(); ++k) {
      Op op{}; // (every case below sets it)
      switch (e.compareOps[k]) {
      case CompareOp::Eq: op = Op::Eq; break;
      case CompareOp::Ne: op = Op::Ne; break;
      case CompareOp::Lt: op = Op::Lt; break;
      case CompareOp::Le: op = Op::Le; break;
      case CompareOp::Gt: op = Op::Gt; break;
      case CompareOp::Ge: op = Op::Ge; break;
      }
      SourceRange r =
          SourceRange::merge(e.operands[k]->outerRange(), e.operands[k + 1]->outerRange());
      TermRef cmp = Term::make(op, {terms[k], terms[k + 1]}, r);
      result = result ? Term::make(Op::And, {result, cmp}, e.range) : cmp;
    }
    return result;
  }

  TermRef lowerCall(const Expr &e) {
    struct Builtin {
      const char *name;
      Op op;
      size_t minArgs, maxArgs;
    };
    static const Builtin kBuiltins[] = {{"abs", Op::Abs, 1, 1},
                                        {"min", Op::Min, 2, SIZE_MAX},
                                        {"max", Op::Max, 2, SIZE_MAX},
                                        {"random_blocks", Op::RandomBlocks, 3, 3}};
    const Builtin *fn = nullptr;
    for (const Builtin &b : kBuiltins)
      if (e.name == b.name)
        fn = &b;
    if (!fn) {
      diags_.error(e.nameRange, "unknown function '" + e.name +
                                    "'; available: abs, min, max, random_blocks");
      return nullptr;
    }
    size_t count = e.operands.size();
    if (count < fn->minArgs || count > fn->maxArgs) {
      std::string want = fn->minArgs == fn->maxArgs ? std::to_string(fn->minArgs)
                                                    : "at least " + std::to_string(fn->minArgs);
      diags_.error(e.range, "'" + e.name + "' takes " + want + " argument" +
                                (fn->minArgs == 1 && fn->maxArgs == 1 ? "" : "s") + ", got " +
                                std::to_string(count));
      return nullptr;
    }
    std::vector<TermRef> args;
    for (const ExprPtr &c : e.operands) {
      TermRef t = lower(*c);
      if (!t || !expectType(t, Type::Int, *c))
        return nullptr;
      args.push_back(t);
    }
    if (fn->op == Op::RandomBlocks) {
      static const char *kArgNames[] = {"block size", "block count", "seed"};
      for (size_t k = 0; k < 3; ++k) {
        if (args[k]->uses(kUsesData)) {
          reportInputUse(*e.operands[k], *args[k],
                         std::string("the ") + kArgNames[k] + " of 'random_blocks'");
          return nullptr;
        }
        for (auto [mask, name] : {std::pair{kUsesI, "i"}, {kUsesJ, "j"}, {kUsesN, "n"}})
          if (args[k]->uses(mask)) {
            diags_.error(findVar(*args[k], mask),
                         std::string("the ") + kArgNames[k] + " of 'random_blocks' cannot use '" +
                             name + "'; it may depend on parameters and 'h' only");
            return nullptr;
          }
      }
      if (!checkDivisor(args[0], *e.operands[0], false))
        return nullptr;
      if (args[1]->op() == Op::Const && args[1]->value() < 0) {
        diags_.error(e.operands[1]->range, "the block count of 'random_blocks' must not be "
                                           "negative, got " + std::to_string(args[1]->value()));
        return nullptr;
      }
    }
    if (!foldFits(fn->op, args, e))
      return nullptr;
    return Term::make(fn->op, std::move(args), e.range);
  }

  /// Term::make folds an operation on constants in int64; one whose result
  /// does not fit is the user's error, reported here before it is folded.
  bool foldFits(Op op, const std::vector<TermRef> &args, const Expr &e) {
    if (args.empty() || !std::all_of(args.begin(), args.end(),
                                      [](const TermRef &a) { return a->op() == Op::Const; }))
      return true;
    int64_t a = args[0]->value(), b = args.size() > 1 ? args[1]->value() : 0, r;
    std::string values;
    switch (op) {
    case Op::Add:
      if (!__builtin_add_overflow(a, b, &r))
        return true;
      values = std::to_string(a) + " + " + std::to_string(b);
      break;
    case Op::Sub:
      if (!__builtin_sub_overflow(a, b, &r))
        return true;
      values = std::to_string(a) + " - " + std::to_string(b);
      break;
    case Op::Mul:
      if (!__builtin_mul_overflow(a, b, &r))
        return true;
      values = std::to_string(a) + " * " + std::to_string(b);
      break;
    case Op::Neg:
      if (a != std::numeric_limits<int64_t>::min())
        return true;
      values = "-(" + std::to_string(a) + ")";
      break;
    case Op::Abs:
      if (a != std::numeric_limits<int64_t>::min())
        return true;
      values = "abs(" + std::to_string(a) + ")";
      break;
    default:
      return true;
    }
    std::string text(sources_.slice(e.range));
    diags_.error(e.range, "'" + text + "' overflows a 64-bit integer" +
                              (text == values ? std::string() : ": it is " + values));
    noteParams(e);
    return false;
  }

  const PatternDecl &decl_;
  const SourceManager &sources_;
  DiagnosticEngine &diags_;
  const SemaOptions &options_;
  std::set<std::string> &definesUsed_;
  Pattern pattern_;
  std::map<std::string, Binding> scope_;
  std::set<std::string> poisoned_;
  const Stmt *headsStmt_ = nullptr;
  std::optional<int64_t> declaredHeads_;
  const Stmt *defaultStmt_ = nullptr;
  TermRef defaultSet_;
  std::vector<std::pair<int64_t, const Stmt *>> headStmts_;
  bool sawHeadStatement_ = false;
  bool headStatementFailed_ = false;
  std::set<std::string> usedBeforeLet_;
  std::map<int64_t, TermRef> headSets_;
  struct PendingDivisor {
    TermRef divisor;
    const Expr *expr;
    bool modulo;
  };
  std::vector<PendingDivisor> pendingDivisors_;
  std::unordered_map<const Term *, Extent> extents_;
  std::vector<TermRef> measured_;
  /// Per input, in Pattern::inputs order: its unbound array (what its reads
  /// hold until a call binds them) and whether its declaration checked.
  std::vector<const Stmt *> inputStmts_;
  std::vector<std::shared_ptr<const InputArray>> arrays_;
  std::vector<bool> inputOk_;
  /// Set while lowering what no input can be read in before the inputs'
  /// arrays exist (a parameter default, an input dimension): the context,
  /// for the error.
  std::string noInputs_;
  /// containsFallback's memo (terms alive in the pattern being assembled).
  std::unordered_map<const Term *, bool> hasFallback_;
  std::set<const Stmt *> reportedDepth_;
  /// Lowering an input's dimensions (and whether they may use 'heads').
  bool inDims_ = false, dimsTakeHeads_ = false;
  /// lowerConstant's context ("a 'require'"), for a float input read there.
  std::string constantContext_;
  /// Lowering a score or a sink.
  bool inScore_ = false, inSink_ = false;
  const Stmt *scoreStmt_ = nullptr, *sinkStmt_ = nullptr;
};

} // namespace

std::vector<Pattern> analyzeModule(const Module &module, const SourceManager &sources,
                                   DiagnosticEngine &diags, const SemaOptions &options) {
  std::vector<Pattern> out;
  if (module.patterns.empty()) {
    diags.error({{module.buffer, 0}, {module.buffer, 0}},
                "no pattern defined; a file needs at least one 'pattern NAME { ... }'");
    return out;
  }
  std::set<std::string> definesUsed;
  std::map<std::string, const PatternDecl *> names;
  for (const PatternDecl &decl : module.patterns) {
    if (decl.name.empty())
      continue; // The parser reported it.
    if (auto it = names.find(decl.name); it != names.end()) {
      diags.error(decl.nameRange, "redefinition of pattern '" + decl.name + "'");
      diags.note(it->second->nameRange, "previous definition is here");
      continue;
    }
    names[decl.name] = &decl;
    if (auto p = PatternSema(decl, sources, diags, options, definesUsed).run())
      out.push_back(std::move(*p));
  }
  for (const Define &d : options.defines)
    if (!definesUsed.count(d.name)) {
      // Each name once, in the order of first declaration: patterns of one
      // file often share parameter names.
      std::string known;
      std::set<std::string> listed;
      for (const PatternDecl &decl : module.patterns)
        for (const Stmt &s : decl.body)
          if (s.kind == StmtKind::Param && listed.insert(s.name).second)
            known += (known.empty() ? "" : ", ") + s.name;
      diags.error({}, "unknown parameter '" + d.name + "' in -D " + d.name + "=" +
                          std::to_string(d.value) +
                          (known.empty() ? "; the file declares no parameters"
                                         : "; the file declares: " + known));
    }
  return out;
}

} // namespace attnc
