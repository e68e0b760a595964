//===- PatternIR.cpp - Canonical generators of a head's key set -----------===//
#include "attnc/plan/PatternIR.h"

#include "attnc/plan/Generators.h"

#include <cctype>
#include <sstream>

namespace attnc::ir {

const char *genName(Gen g) { return traits(g).name; }

SetRef SetNode::all(SourceRange loc) { return SetRef(new SetNode(Gen::All, loc)); }
SetRef SetNode::none(SourceRange loc) { return SetRef(new SetNode(Gen::None, loc)); }

SetRef SetNode::band(int64_t lo, int64_t hi, SourceRange loc) {
  if (lo != kUnbounded && hi != kUnbounded && lo > hi)
    return none(loc);
  if (lo == kUnbounded && hi == kUnbounded)
    return all(loc);
  auto s = new SetNode(Gen::Band, loc);
  s->lo = lo;
  s->hi = hi;
  return SetRef(s);
}

SetRef SetNode::blockDiag(int64_t l, SourceRange loc) {
  ATTNC_CHECK(l >= 1, "block-diag needs l >= 1");
  if (l == 1)
    return band(0, 0, loc);
  auto s = new SetNode(Gen::BlockDiag, loc);
  s->modulus = l;
  return SetRef(s);
}

SetRef SetNode::keyRange(TermRef lo, TermRef hi, SourceRange loc) {
  ATTNC_CHECK((!lo || lo->type() == Type::Int) && (!hi || hi->type() == Type::Int),
              "key-range bounds must be integers");
  ATTNC_CHECK((!lo || !lo->uses(kUsesJ)) && (!hi || !hi->uses(kUsesJ)),
              "key-range bounds must not use j");
  if (!lo && !hi)
    return all(loc);
  auto s = new SetNode(Gen::KeyRange, loc);
  s->loTerm = std::move(lo);
  s->hiTerm = std::move(hi);
  return SetRef(s);
}

SetRef SetNode::stripe(int64_t m, int64_t lo, int64_t hi, SourceRange loc) {
  ATTNC_CHECK(m >= 1, "stripe needs m >= 1");
  if (hi < lo)
    return none(loc);
  if (hi - lo + 1 >= m)
    return all(loc);
  lo = floorMod(lo, m);
  hi = floorMod(hi, m);
  if (lo > hi) // wraps around m
    return unite({stripe(m, lo, m - 1, loc), stripe(m, 0, hi, loc)}, loc);
  if (m == 1)
    return all(loc);
  auto s = new SetNode(Gen::Stripe, loc);
  s->modulus = m;
  s->lo = lo;
  s->hi = hi;
  return SetRef(s);
}

SetRef SetNode::residueClass(int64_t m, int64_t r, SourceRange loc) {
  ATTNC_CHECK(m >= 1, "residue needs m >= 1");
  if (m == 1)
    return all(loc);
  auto s = new SetNode(Gen::Residue, loc);
  s->modulus = m;
  s->residue = floorMod(r, m);
  return SetRef(s);
}

SetRef SetNode::coordRange(int64_t step, int64_t m, TermRef lo, TermRef hi, SourceRange loc) {
  int64_t period;
  ATTNC_CHECK(step >= 1 && m >= 1 && !__builtin_mul_overflow(step, m, &period),
              "coord-range needs s, m >= 1 and s * m within int64");
  ATTNC_CHECK((!lo || lo->type() == Type::Int) && (!hi || hi->type() == Type::Int),
              "coord-range bounds must be integers");
  ATTNC_CHECK((!lo || !lo->uses(kUsesJ)) && (!hi || !hi->uses(kUsesJ)),
              "coord-range bounds must not use j");
  // The coordinate lies in [0, m): a bound outside it says nothing more.
  if (lo && lo->op() == Op::Const && lo->value() <= 0)
    lo = nullptr;
  if (hi && hi->op() == Op::Const && hi->value() >= m - 1)
    hi = nullptr;
  if (!lo && !hi)
    return all(loc);
  if ((!lo || lo->op() == Op::Const) && (!hi || hi->op() == Op::Const)) {
    // (j / s) % m in [a, b] is j % (s m) in [a s, b s + s - 1].
    const int64_t a = lo ? lo->value() : 0, b = hi ? hi->value() : m - 1;
    if (b < a || b < 0 || a >= m)
      return none(loc);
    return stripe(period, a * step, (b + 1) * step - 1, loc);
  }
  auto s = new SetNode(Gen::CoordRange, loc);
  s->keyBlock = step;
  s->modulus = m;
  s->loTerm = std::move(lo);
  s->hiTerm = std::move(hi);
  return SetRef(s);
}

SetRef SetNode::rowIf(TermRef cond, SourceRange loc) {
  ATTNC_CHECK(cond->type() == Type::Bool && !cond->uses(kUsesJ), "row-if needs a j-free condition");
  if (cond->op() == Op::BoolConst)
    return cond->value() ? all(loc) : none(loc);
  auto s = new SetNode(Gen::RowIf, loc);
  s->cond = std::move(cond);
  return SetRef(s);
}

SetRef SetNode::list(std::vector<TermRef> elems, SourceRange loc) {
  if (elems.empty())
    return none(loc);
  for (const TermRef &e : elems)
    ATTNC_CHECK(e->type() == Type::Int && !e->uses(kUsesJ), "list elements must be j-free integers");
  auto s = new SetNode(Gen::List, loc);
  s->elems = std::move(elems);
  return SetRef(s);
}

SetRef SetNode::random(int64_t block, int64_t count, int64_t seed, SourceRange loc) {
  ATTNC_CHECK(block >= 1, "random blocks need block >= 1");
  if (count <= 0)
    return none(loc);
  auto s = new SetNode(Gen::Random, loc);
  s->modulus = block;
  s->count = count;
  s->seed = seed;
  return SetRef(s);
}

SetRef SetNode::predicate(TermRef cond, SourceRange loc) {
  ATTNC_CHECK(cond->type() == Type::Bool, "predicate must be a condition");
  if (cond->op() == Op::BoolConst)
    return cond->value() ? all(loc) : none(loc);
  if (!cond->uses(kUsesJ))
    return rowIf(std::move(cond), loc);
  auto s = new SetNode(Gen::Predicate, loc);
  s->cond = std::move(cond);
  return SetRef(s);
}

SetRef SetNode::equalClass(int64_t index, std::shared_ptr<const InputArray> data, SourceRange loc) {
  ATTNC_CHECK(index >= 0 && data && data->rank == 1, "a class needs a 1-D input");
  auto s = new SetNode(Gen::Class, loc);
  s->input = index;
  s->data = std::move(data);
  return SetRef(s);
}

SetRef SetNode::select(int64_t index, std::shared_ptr<const InputArray> data, int64_t rowBlock,
                       int64_t keyBlock, SourceRange loc) {
  ATTNC_CHECK(index >= 0 && data && data->rank == 2, "a selection needs a 2-D input");
  ATTNC_CHECK(rowBlock >= 1 && keyBlock >= 1, "a selection needs blocks of at least 1");
  auto s = new SetNode(Gen::Select, loc);
  s->input = index;
  s->data = std::move(data);
  s->modulus = rowBlock;
  s->keyBlock = keyBlock;
  return SetRef(s);
}

SetRef SetNode::fallback(SetRef a, SetRef b, SourceRange loc) {
  if (a->kind == Gen::All || b->kind == Gen::None)
    return a;
  auto s = new SetNode(Gen::Fallback, loc);
  s->children = {std::move(a), std::move(b)};
  return SetRef(s);
}

SetRef SetNode::permuted(SetRef child, std::shared_ptr<const InputArray> classes, SourceRange loc) {
  ATTNC_CHECK(classes && classes->bound && classes->hasClasses(), "a permutation needs an indexed input");
  if (child->kind == Gen::All || child->kind == Gen::None)
    return child;
  auto s = new SetNode(Gen::Permuted, loc);
  // Another input's class under the permutation: its values in this order,
  // for RowEvaluator's contiguous scan (ids that do not fit 32 bits keep the
  // per-key path).
  const SetNode *cls = child->kind == Gen::Class ? child.get() : nullptr;
  if (child->kind == Gen::Intersect)
    for (const SetRef &c : child->children)
      if (c->kind == Gen::Class && !cls)
        cls = c.get();
  if (cls && cls->data != classes && cls->data->bound && cls->data->rows == classes->rows) {
    auto values = std::make_shared<std::vector<int32_t>>(classes->order.size());
    bool fits = true;
    for (size_t u = 0; u < values->size() && fits; ++u) {
      const int64_t v = cls->data->values[static_cast<size_t>(classes->order[u])];
      fits = v == static_cast<int32_t>(v);
      (*values)[u] = static_cast<int32_t>(v);
    }
    if (fits)
      s->valuesInOrder = std::move(values);
  }
  s->data = std::move(classes);
  s->children = {std::move(child)};
  return SetRef(s);
}

SetRef SetNode::segment(std::shared_ptr<const InputArray> classes, SourceRange loc) {
  ATTNC_CHECK(classes && classes->bound && classes->hasClasses(), "a segment needs an indexed input");
  auto s = new SetNode(Gen::Segment, loc);
  s->data = std::move(classes);
  return SetRef(s);
}

SetRef SetNode::whereEmpty(SetRef a, SetRef b, SourceRange loc) {
  if (a->kind == Gen::None || b->kind == Gen::None)
    return a->kind == Gen::None ? b : b;
  auto s = new SetNode(Gen::WhereEmpty, loc);
  s->children = {std::move(a), std::move(b)};
  return SetRef(s);
}

static int64_t tighterLo(int64_t a, int64_t b) {
  return a == kUnbounded ? b : b == kUnbounded ? a : std::max(a, b);
}
static int64_t tighterHi(int64_t a, int64_t b) {
  return a == kUnbounded ? b : b == kUnbounded ? a : std::min(a, b);
}

/// Inside an intersection: stripes of one modulus intersect into one stripe,
/// and a key range (or a coordinate range of one axis) bounded only below
/// meets one bounded only above.
static std::vector<SetRef> mergeStripesAndRanges(std::vector<SetRef> in) {
  std::vector<SetRef> out;
  for (SetRef &c : in) {
    bool merged = false;
    for (SetRef &prev : out) {
      if (c->kind == Gen::Stripe && prev->kind == Gen::Stripe && c->modulus == prev->modulus) {
        prev = SetNode::stripe(c->modulus, std::max(c->lo, prev->lo), std::min(c->hi, prev->hi),
                               prev->loc);
        merged = true;
      } else if (c->kind == Gen::KeyRange && prev->kind == Gen::KeyRange &&
                 (!c->loTerm || !prev->loTerm) && (!c->hiTerm || !prev->hiTerm)) {
        prev = SetNode::keyRange(c->loTerm ? c->loTerm : prev->loTerm,
                                 c->hiTerm ? c->hiTerm : prev->hiTerm, prev->loc);
        merged = true;
      } else if (c->kind == Gen::CoordRange && prev->kind == Gen::CoordRange &&
                 c->keyBlock == prev->keyBlock && c->modulus == prev->modulus &&
                 (!c->loTerm || !prev->loTerm) && (!c->hiTerm || !prev->hiTerm)) {
        prev = SetNode::coordRange(c->keyBlock, c->modulus, c->loTerm ? c->loTerm : prev->loTerm,
                                   c->hiTerm ? c->hiTerm : prev->hiTerm, prev->loc);
        merged = true;
      }
      if (merged)
        break;
    }
    if (!merged)
      out.push_back(std::move(c));
  }
  return out;
}

/// Flattens same-kind children and drops identities. Returns the absorbing
/// element if a child is one; otherwise leaves the operands in `flat`.
static SetRef flatten(Gen kind, std::vector<SetRef> children, std::vector<SetRef> &flat) {
  Gen identity = kind == Gen::Union ? Gen::None : Gen::All;
  Gen absorbing = kind == Gen::Union ? Gen::All : Gen::None;
  for (SetRef &c : children) {
    if (c->kind == absorbing)
      return c;
    if (c->kind == identity)
      continue;
    if (c->kind == kind)
      flat.insert(flat.end(), c->children.begin(), c->children.end());
    else
      flat.push_back(std::move(c));
  }
  if (kind == Gen::Intersect) {
    // Bands intersect into one band.
    std::vector<SetRef> merged;
    SetRef bandSoFar;
    for (SetRef &c : flat) {
      if (c->kind != Gen::Band)
        merged.push_back(std::move(c));
      else if (!bandSoFar)
        bandSoFar = c;
      else
        bandSoFar = SetNode::band(tighterLo(bandSoFar->lo, c->lo), tighterHi(bandSoFar->hi, c->hi),
                                  bandSoFar->loc);
    }
    if (bandSoFar) {
      if (bandSoFar->kind == Gen::None)
        return bandSoFar;
      merged.push_back(bandSoFar);
    }
    flat = mergeStripesAndRanges(std::move(merged));
    for (const SetRef &c : flat)
      if (c->kind == Gen::None)
        return c;
  }
  return nullptr;
}

SetRef SetNode::unite(std::vector<SetRef> children, SourceRange loc) {
  std::vector<SetRef> flat;
  if (SetRef absorbed = flatten(Gen::Union, std::move(children), flat))
    return absorbed;
  if (flat.empty())
    return none(loc);
  if (flat.size() == 1)
    return flat.front();
  auto s = new SetNode(Gen::Union, loc);
  s->children = std::move(flat);
  return SetRef(s);
}

SetRef SetNode::intersect(std::vector<SetRef> children, SourceRange loc) {
  std::vector<SetRef> flat;
  if (SetRef absorbed = flatten(Gen::Intersect, std::move(children), flat))
    return absorbed;
  if (flat.empty())
    return all(loc);
  if (flat.size() == 1)
    return flat.front();
  auto s = new SetNode(Gen::Intersect, loc);
  s->children = std::move(flat);
  return SetRef(s);
}

SetRef SetNode::difference(SetRef a, SetRef b, SourceRange loc) {
  if (a->kind == Gen::None || b->kind == Gen::All)
    return none(loc);
  if (b->kind == Gen::None)
    return a;
  auto s = new SetNode(Gen::Difference, loc);
  s->children = {std::move(a), std::move(b)};
  return SetRef(s);
}

bool hasPredicate(const SetNode &set) {
  if (set.kind == Gen::Predicate)
    return true;
  for (const SetRef &c : set.children)
    if (hasPredicate(*c))
      return true;
  return false;
}

static bool termReadsData(const TermRef &t) { return t && t->uses(kUsesData); }

bool readsData(const SetNode &set) {
  if (set.kind == Gen::Class || set.kind == Gen::Select || set.kind == Gen::Permuted || set.kind == Gen::Segment ||
      termReadsData(set.cond) ||
      termReadsData(set.loTerm) || termReadsData(set.hiTerm))
    return true;
  for (const TermRef &e : set.elems)
    if (termReadsData(e))
      return true;
  for (const SetRef &c : set.children)
    if (readsData(*c))
      return true;
  return false;
}

static bool termReadsLength(const TermRef &t) { return t && t->uses(kUsesN); }

bool dependsOnLength(const SetNode &set) {
  if (set.kind == Gen::Random || termReadsLength(set.cond) || termReadsLength(set.loTerm) ||
      termReadsLength(set.hiTerm))
    return true;
  for (const TermRef &e : set.elems)
    if (termReadsLength(e))
      return true;
  for (const SetRef &c : set.children)
    if (dependsOnLength(*c))
      return true;
  return false;
}

SetRef bindSet(const SetRef &set, const InputArrays &arrays) {
  if (!readsData(*set))
    return set;
  auto s = new SetNode(*set);
  SetRef out(s);
  if (s->kind == Gen::Class || s->kind == Gen::Select) {
    const auto index = static_cast<size_t>(s->input);
    ATTNC_CHECK(index < arrays.size() && arrays[index] && arrays[index]->bound,
                "no data for input " + std::to_string(s->input));
    ATTNC_CHECK(s->kind == Gen::Select || arrays[index]->hasClasses(),
                "input '" + arrays[index]->name + "' is read as classes but was not indexed");
    s->data = arrays[index];
  }
  if (s->cond)
    s->cond = bindTerm(s->cond, arrays);
  if (s->loTerm)
    s->loTerm = bindTerm(s->loTerm, arrays);
  if (s->hiTerm)
    s->hiTerm = bindTerm(s->hiTerm, arrays);
  for (TermRef &e : s->elems)
    e = bindTerm(e, arrays);
  for (SetRef &c : s->children)
    c = bindSet(c, arrays);
  return out;
}

static std::string bound(int64_t v) { return v == kUnbounded ? "inf" : std::to_string(v); }

std::string printSet(const SetNode &s, const LocationPrinter &where, int indent) {
  std::ostringstream os;
  os << std::string(indent, ' ') << genName(s.kind);
  switch (s.kind) {
  case Gen::Band:
    os << " j - i in [" << (s.lo == kUnbounded ? "-inf" : std::to_string(s.lo)) << ", "
       << bound(s.hi) << "]";
    break;
  case Gen::BlockDiag:
    os << " j / " << s.modulus << " == i / " << s.modulus;
    break;
  case Gen::KeyRange:
    os << " " << (s.loTerm ? printTerm(*s.loTerm) : "-inf") << " <= j <= "
       << (s.hiTerm ? printTerm(*s.hiTerm) : "inf");
    break;
  case Gen::Stripe:
    os << " j % " << s.modulus << " in [" << s.lo << ", " << s.hi << "]";
    break;
  case Gen::CoordRange:
    os << " " << (s.loTerm ? printTerm(*s.loTerm) : "-inf") << " <= "
       << (s.keyBlock == 1 ? "j" : "(j / " + std::to_string(s.keyBlock) + ")") << " % " << s.modulus
       << " <= " << (s.hiTerm ? printTerm(*s.hiTerm) : "inf");
    break;
  case Gen::Residue:
    os << " (i - j) % " << s.modulus << " == " << s.residue;
    break;
  case Gen::RowIf:
  case Gen::Predicate:
    os << " " << printTerm(*s.cond);
    break;
  case Gen::List:
    os << " {";
    for (size_t k = 0; k < s.elems.size(); ++k)
      os << (k ? ", " : " ") << printTerm(*s.elems[k]);
    os << " }";
    break;
  case Gen::Random:
    os << " block=" << s.modulus << " count=" << s.count << " seed=" << s.seed;
    break;
  case Gen::Class:
    os << " " << s.data->name << "[j] == " << s.data->name << "[i]";
    break;
  case Gen::Select:
    os << " j / " << s.keyBlock << " in " << s.data->name << "[i / " << s.modulus << "]";
    break;
  default:
    break;
  }
  if (where && s.loc.isValid())
    os << "  @" << where(s.loc);
  os << "\n";
  for (const SetRef &c : s.children)
    os << printSet(*c, where, indent + 2);
  return os.str();
}

std::string printPatternIR(const PatternIR &ir, const LocationPrinter &where) {
  std::ostringstream os;
  os << "pattern " << ir.name << " heads=" << ir.numHeads << (ir.causal ? " causal" : "");
  for (const auto &[name, value] : ir.params)
    os << " " << name << "=" << value;
  os << "\n";
  for (const InputDecl &in : ir.inputs) {
    os << "input " << in.name << (in.isFloat ? " : float[" : " : int[");
    for (size_t k = 0; k < in.dims.size(); ++k) {
      std::string dim = printTerm(*in.dims[k]);
      if (in.isFloat) {
        // VarH is the head count there: spell it as written, 'heads'.
        std::string spelled;
        for (size_t c = 0; c < dim.size(); ++c) {
          const bool word = dim[c] == 'h' && (c == 0 || !std::isalnum(static_cast<unsigned char>(dim[c - 1]))) &&
                            (c + 1 == dim.size() || !std::isalnum(static_cast<unsigned char>(dim[c + 1])));
          spelled += word ? std::string("heads") : std::string(1, dim[c]);
        }
        dim = spelled;
      }
      os << (k ? ", " : "") << dim;
    }
    os << "]\n";
  }
  for (const PatternIR::Head &h : ir.heads) {
    os << "head";
    for (int64_t k : h.heads)
      os << " " << k;
    os << ":\n" << printSet(*h.set, where, 2);
  }
  const std::vector<std::string> names = ir.inputNames();
  if (ir.score)
    os << "score " << printScore(*ir.score, names) << "\n";
  if (ir.sink)
    os << "sink " << printScore(*ir.sink, names) << "\n";
  return os.str();
}

} // namespace attnc::ir
