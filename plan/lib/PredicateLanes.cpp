//===- PredicateLanes.cpp - A predicate evaluated over a run of keys ------===//
#include "PredicateLanes.h"

#include "attnc/support/Check.h"

#include <algorithm>

namespace attnc::ir {

namespace {
inline int64_t wrap(uint64_t x) { return static_cast<int64_t>(x); }
constexpr int64_t kExact = int64_t{1} << 53;
} // namespace

// The lanes compiled for AVX-512 as well (double division and conversions
// 8 lanes at a time), the CPU choosing; not under TSan, whose
// instrumentation of the resolver runs before TSan is up.
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define ATTNC_LANES_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define ATTNC_LANES_CLONES
#endif

PredicateLanes::PredicateLanes(const Term &cond) {
  result_ = emit(cond);
  if (slots_ > 4096)
    ok_ = false;
}

int16_t PredicateLanes::emit(const Term &t) {
  if (!ok_)
    return -1;
  Instr in;
  in.out = static_cast<int16_t>(slots_++);
  if (!(t.vars() & (kUsesJ | kUsesData))) {
    in.kind = K::Row;
    in.row = &t;
    code_.push_back(in);
    return in.out;
  }
  auto binary = [&](K kind) {
    in.kind = kind;
    in.a = emit(*t.arg(0));
    in.b = emit(*t.arg(1));
  };
  switch (t.op()) {
  case Op::VarJ: in.kind = K::J; break;
  case Op::Add: binary(K::Add); break;
  case Op::Sub: binary(K::Sub); break;
  case Op::Mul: binary(K::Mul); break;
  case Op::Div: binary(K::Div); break;
  case Op::Mod: binary(K::Mod); break;
  case Op::Eq: binary(K::Eq); break;
  case Op::Ne: binary(K::Ne); break;
  case Op::Lt: binary(K::Lt); break;
  case Op::Le: binary(K::Le); break;
  case Op::Gt: binary(K::Gt); break;
  case Op::Ge: binary(K::Ge); break;
  case Op::And: binary(K::And); break;
  case Op::Or: binary(K::Or); break;
  case Op::Neg: in.kind = K::Neg, in.a = emit(*t.arg(0)); break;
  case Op::Abs: in.kind = K::Abs, in.a = emit(*t.arg(0)); break;
  case Op::Not: in.kind = K::Not, in.a = emit(*t.arg(0)); break;
  case Op::Min: case Op::Max: { // a chain of pairs, left to right as the tree takes them
    int16_t acc = emit(*t.arg(0));
    for (size_t k = 1; k < t.args().size() && ok_; ++k) {
      Instr step;
      step.kind = t.op() == Op::Min ? K::Min : K::Max;
      step.a = acc;
      step.b = emit(*t.arg(k));
      step.out = k + 1 == t.args().size() ? in.out : static_cast<int16_t>(slots_++);
      code_.push_back(step);
      acc = step.out;
    }
    if (t.args().size() == 1) { // (min(x) is x)
      Instr copy;
      copy.kind = K::Max;
      copy.a = copy.b = acc;
      copy.out = in.out;
      code_.push_back(copy);
    }
    return in.out;
  }
  default: // an input's entry, `in`, anything that reads data: the tree evaluates the condition
    ok_ = false;
    return -1;
  }
  code_.push_back(in);
  return in.out;
}

ATTNC_LANES_CLONES bool PredicateLanes::keysByLanes(const Env &row, int64_t lo, int64_t hi, IntervalSet &out) const {
  constexpr int L = kLanes;
  thread_local std::vector<int64_t> slots;
  slots.resize(static_cast<size_t>(slots_) * L);
  int64_t *const S = slots.data();
  // The parts free of j, once for the row. One may divide by a value below 1
  // (the tree refuses that), where the tree's && or || would not reach it:
  // then the tree decides the row.
  try {
    for (const Instr &in : code_)
      if (in.kind == K::Row) {
        const int64_t v = in.row->type() == Type::Bool ? int64_t{evalBool(*in.row, row)} : evalInt(*in.row, row);
        std::fill_n(S + in.out * L, L, v);
      }
  } catch (const InternalError &) {
    return false;
  }
  for (int64_t j0 = lo; j0 < hi; j0 += L) {
    // The lanes up to a multiple of 8 are computed (whole vectors), those
    // past hi with keys past it, whose results are not read.
    const int n = static_cast<int>(std::min<int64_t>(L, hi - j0)), m = (n + 7) & ~7;
    for (const Instr &in : code_) {
      int64_t *__restrict o = S + in.out * L; // (each instruction writes a slot of its own)
      const int64_t *__restrict a = in.a >= 0 ? S + in.a * L : S, *__restrict b = in.b >= 0 ? S + in.b * L : S;
#define ATTNC_LANES(expr)                                                                                              \
  for (int l = 0; l < m; ++l)                                                                                          \
    o[l] = (expr);                                                                                                     \
  break;
      switch (in.kind) {
      case K::Row: break;
      case K::J: ATTNC_LANES(j0 + l)
      case K::Add: ATTNC_LANES(wrap(static_cast<uint64_t>(a[l]) + static_cast<uint64_t>(b[l])))
      case K::Sub: ATTNC_LANES(wrap(static_cast<uint64_t>(a[l]) - static_cast<uint64_t>(b[l])))
      case K::Mul: ATTNC_LANES(wrap(static_cast<uint64_t>(a[l]) * static_cast<uint64_t>(b[l])))
      case K::Neg: ATTNC_LANES(wrap(0 - static_cast<uint64_t>(a[l])))
      case K::Abs: ATTNC_LANES(a[l] < 0 ? wrap(0 - static_cast<uint64_t>(a[l])) : a[l])
      case K::Min: ATTNC_LANES(std::min(a[l], b[l]))
      case K::Max: ATTNC_LANES(std::max(a[l], b[l]))
      case K::Eq: ATTNC_LANES(a[l] == b[l])
      case K::Ne: ATTNC_LANES(a[l] != b[l])
      case K::Lt: ATTNC_LANES(a[l] < b[l])
      case K::Le: ATTNC_LANES(a[l] <= b[l])
      case K::Gt: ATTNC_LANES(a[l] > b[l])
      case K::Ge: ATTNC_LANES(a[l] >= b[l])
      case K::And: ATTNC_LANES(a[l] & b[l])
      case K::Or: ATTNC_LANES(a[l] | b[l])
      case K::Not: ATTNC_LANES(a[l] ^ 1)
      case K::Div:
      case K::Mod: {
        // Below 2^53 in magnitude the quotient in double is within
        // |a / b| 2^-53 < 1 / b of the true one, which lies at least 1 / b
        // from the next integer (or is one), so it truncates to the true
        // quotient's truncation, one above its floor when negative and not
        // whole; and the lanes run as vectors where integer division would not.
        uint64_t outside = 0; // (an OR of the lanes' tests: a loop that vectorises)
        for (int l = 0; l < m; ++l)
          outside |= (static_cast<uint64_t>(b[l]) - 1 >= static_cast<uint64_t>(kExact - 1)) |
                     (static_cast<uint64_t>(a[l]) + static_cast<uint64_t>(kExact - 1) >=
                      static_cast<uint64_t>(2 * kExact - 1));
        if (!outside) {
          for (int l = 0; l < m; ++l) {
            const auto q = static_cast<int64_t>(static_cast<double>(a[l]) / static_cast<double>(b[l]));
            o[l] = q * b[l] > a[l] ? q - 1 : q;
          }
          if (in.kind == K::Mod)
            for (int l = 0; l < m; ++l)
              o[l] = a[l] - b[l] * o[l];
          break;
        }
        for (int l = 0; l < m; ++l) {
          if (b[l] < 1) {
            if (l >= n) { // (a key past hi: any value)
              o[l] = 0;
              continue;
            }
            return false; // (the tree decides: its && and || may never divide here)
          }
          const int64_t q = floorDiv(a[l], b[l]);
          o[l] = in.kind == K::Div ? q : wrap(static_cast<uint64_t>(a[l]) - static_cast<uint64_t>(b[l] * q));
        }
        break;
      }
      }
#undef ATTNC_LANES
    }
    const int64_t *r = S + result_ * L;
    for (int l = 0; l < n; ++l) {
      if (!r[l])
        continue;
      const int64_t j = j0 + l;
      if (!out.empty() && out.back().hi == j)
        ++out.back().hi;
      else
        out.push_back({j, j + 1});
    }
  }
  return true;
}

bool PredicateLanes::keys(const Env &row, int64_t lo, int64_t hi, IntervalSet &out) const {
  const size_t before = out.size();
  const int64_t lastHi = before ? out.back().hi : 0;
  if (ok_ && keysByLanes(row, lo, hi, out))
    return true;
  out.resize(before); // (as it was: the caller's tree decides)
  if (before)
    out.back().hi = lastHi;
  return false;
}

} // namespace attnc::ir
