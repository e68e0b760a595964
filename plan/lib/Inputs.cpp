//===- Inputs.cpp - Integer arrays a call gives a pattern that reads data -===//
#include "attnc/plan/Inputs.h"

#include <algorithm>
#include <numeric>

namespace attnc {

namespace {
[[noreturn]] void outside(const InputArray &a, const std::string &index, const std::string &extent) {
  throw InputError("input '" + a.name + "' read at " + index + ", outside its " + extent);
}
} // namespace

int64_t InputArray::at(int64_t r) const {
  if (r < 0 || r >= rows)
    outside(*this, "[" + std::to_string(r) + "]", std::to_string(rows) + " entries");
  return values[static_cast<size_t>(r)];
}

int64_t InputArray::at(int64_t r, int64_t c) const {
  if (r < 0 || r >= rows || c < 0 || c >= cols)
    outside(*this, "[" + std::to_string(r) + ", " + std::to_string(c) + "]",
            std::to_string(rows) + " x " + std::to_string(cols) + " entries");
  return values[static_cast<size_t>(r * cols + c)];
}

void InputArray::indexClasses() {
  ATTNC_CHECK(rank == 1 && rows < (int64_t{1} << 31), "equality classes of a 1-D input below 2^31 entries");
  const auto count = static_cast<size_t>(rows);
  order.resize(count);
  // Values in a range of at most 4 per entry (buckets, document ids): a
  // counting sort, O(n + range) and stable; else a stable comparison sort.
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  const uint64_t range = count ? static_cast<uint64_t>(*hi) - static_cast<uint64_t>(*lo) : 0;
  if (count && range < 4 * uint64_t{count}) {
    const int64_t base = *lo;
    std::vector<int32_t> start(static_cast<size_t>(range) + 2, 0);
    for (int64_t v : values)
      ++start[static_cast<size_t>(v - base) + 1];
    for (size_t x = 1; x < start.size(); ++x)
      start[x] += start[x - 1];
    for (size_t p = 0; p < count; ++p)
      order[static_cast<size_t>(start[static_cast<size_t>(values[p] - base)]++)] = static_cast<int32_t>(p);
  } else {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
      return values[static_cast<size_t>(x)] < values[static_cast<size_t>(y)];
    });
  }
  classBegin.resize(count);
  classEnd.resize(count);
  placeOf.resize(count);
  for (size_t k = 0; k < count; ++k)
    placeOf[static_cast<size_t>(order[k])] = static_cast<int32_t>(k);
  for (size_t a = 0; a < count;) {
    size_t b = a + 1;
    while (b < count && values[static_cast<size_t>(order[b])] == values[static_cast<size_t>(order[a])])
      ++b;
    for (size_t k = a; k < b; ++k) {
      classBegin[static_cast<size_t>(order[k])] = static_cast<int32_t>(a);
      classEnd[static_cast<size_t>(order[k])] = static_cast<int32_t>(b);
    }
    a = b;
  }
}

std::shared_ptr<const InputArray> unboundInput(const InputDecl &decl) {
  auto a = std::make_shared<InputArray>();
  a->name = decl.name;
  a->rank = static_cast<int>(decl.rank());
  return a;
}

TermRef bindTerm(const TermRef &t, const InputArrays &arrays) {
  if (!t->uses(kUsesData))
    return t;
  std::vector<TermRef> args;
  args.reserve(t->args().size());
  for (const TermRef &a : t->args())
    args.push_back(bindTerm(a, arrays));
  if (t->op() == Op::Input || t->op() == Op::InputRow) {
    const auto index = static_cast<size_t>(t->value());
    ATTNC_CHECK(index < arrays.size() && arrays[index], "no array for input " + std::to_string(index));
    return Term::input(t->op(), t->value(), std::move(args), t->loc(), arrays[index]);
  }
  return Term::make(t->op(), std::move(args), t->loc());
}

int64_t inputDim(const InputDecl &decl, size_t k, int64_t n, int64_t heads) {
  ATTNC_CHECK(k < decl.dims.size(), "input dimension out of range");
  return evalInt(*decl.dims[k], Env{.n = n, .h = heads});
}

namespace {
/// `t` with VarH replaced by h + 1: rangeOf's h lies in [0, numHeads), a
/// head count in [1, numHeads].
TermRef headCountAsIndexPlusOne(const TermRef &t) {
  if (t->op() == Op::VarH)
    return Term::make(Op::Add, {t, Term::constant(1)});
  if (!t->uses(kUsesH) || t->args().empty())
    return t;
  std::vector<TermRef> args;
  for (const TermRef &a : t->args())
    args.push_back(headCountAsIndexPlusOne(a));
  return Term::make(t->op(), std::move(args), t->loc());
}
} // namespace

int64_t inputDimLowerBound(const Term &dim) {
  if (!dim.uses(kUsesH))
    return rangeOf(dim, 1).lo;
  // (A shared_ptr copy of a node that is not owned by one: rebuild from the top.)
  std::vector<TermRef> args(dim.args().begin(), dim.args().end());
  TermRef top = dim.op() == Op::VarH ? Term::var(Op::VarH) : Term::make(dim.op(), args, dim.loc());
  constexpr int64_t kHeads = int64_t(1) << 31;
  return rangeOf(*headCountAsIndexPlusOne(top), kHeads).lo;
}

} // namespace attnc
