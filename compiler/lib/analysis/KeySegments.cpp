//===- KeySegments.cpp - A row's keys as periodic segments ----------------===//
#include "KeySegments.h"

#include "attnc/plan/Generators.h"
#include "attnc/support/Check.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace attnc::ir {

namespace {

/// Past these a pattern is not built (kTooLarge): one combination expanded to
/// the lcm of its periods, and every pattern the table holds. They bound
/// memory on adversarial patterns (stripes of large coprime moduli); the
/// library's patterns stay far below them.
constexpr int64_t kMaxCombinedIntervals = 1 << 16;
constexpr int64_t kMaxStoredIntervals = 1 << 22;

std::string contentKey(int64_t period, const IntervalSet &keys) {
  std::string key(sizeof(int64_t) * (1 + 2 * keys.size()), '\0');
  std::memcpy(key.data(), &period, sizeof period);
  if (!keys.empty())
    std::memcpy(key.data() + sizeof period, keys.data(), keys.size() * sizeof(Interval));
  return key;
}

/// `keys` (inside [0, period)) repeated up to `length`, a multiple of period.
void repeat(const IntervalSet &keys, int64_t period, int64_t length, IntervalSet &out) {
  out.clear();
  for (int64_t base = 0; base < length; base += period)
    for (const Interval &x : keys) {
      if (!out.empty() && out.back().hi == base + x.lo)
        out.back().hi = base + x.hi; // a run across the period's end
      else
        out.push_back({base + x.lo, base + x.hi});
    }
}

/// The smallest period of `keys` that divides `period`: each prime factor
/// is divided out for as long as the keys repeat at the shorter period.
void reducePeriod(int64_t &period, IntervalSet &keys) {
  IntervalSet part, again;
  int64_t untried = period; // the product of the prime factors not tried yet
  for (int64_t f = 2; untried > 1; ++f) {
    if (f > untried / f)
      f = untried; // what remains is prime
    if (untried % f != 0)
      continue;
    while (untried % f == 0)
      untried /= f;
    while (period % f == 0) {
      const int64_t d = period / f;
      part = clip(keys, 0, d);
      repeat(part, d, period, again);
      if (again != keys)
        break;
      period = d;
      keys.swap(part);
    }
  }
}

int64_t lcmUpTo(int64_t a, int64_t b, int64_t limit) {
  const int64_t g = std::gcd(a, b);
  return a / g > limit / b ? 0 : a / g * b;
}

} // namespace

PatternTable::PatternTable() { store(1, {{0, 1}}); }

PatternId PatternTable::store(int64_t period, IntervalSet keys) {
  Pattern p{period, std::move(keys), {}};
  p.before.reserve(p.keys.size() + 1);
  int64_t sum = 0;
  for (const Interval &x : p.keys) {
    p.before.push_back(sum);
    sum += x.size();
  }
  p.before.push_back(sum);
  storedIntervals_ += static_cast<int64_t>(p.keys.size());
  patterns_.push_back(std::move(p));
  return static_cast<PatternId>(patterns_.size() - 1);
}

PatternId PatternTable::intern(int64_t period, IntervalSet keys) {
  if (keys.empty())
    return kNoKeys;
  std::string asGiven = contentKey(period, keys);
  if (auto it = byContent_.find(asGiven); it != byContent_.end())
    return it->second;
  reducePeriod(period, keys);
  std::string reduced = contentKey(period, keys);
  PatternId id;
  if (auto it = byContent_.find(reduced); it != byContent_.end()) {
    id = it->second;
  } else {
    if (storedIntervals_ + static_cast<int64_t>(keys.size()) > kMaxStoredIntervals)
      return kTooLarge;
    id = store(period, std::move(keys));
    byContent_.emplace(std::move(reduced), id);
  }
  byContent_.emplace(std::move(asGiven), id);
  return id;
}

PatternId PatternTable::interval(int64_t period, int64_t lo, int64_t hi) {
  const int64_t fields[3] = {period, lo, hi};
  std::string key(reinterpret_cast<const char *>(fields), sizeof fields);
  if (auto it = byInterval_.find(key); it != byInterval_.end())
    return it->second;
  PatternId id = intern(period, lo < hi ? IntervalSet{{lo, hi}} : IntervalSet{});
  if (id != kTooLarge)
    byInterval_.emplace(std::move(key), id);
  return id;
}

PatternId PatternTable::combine(SetOp op, PatternId a, PatternId b) {
  switch (op) { // the identities, without a lookup
  case SetOp::Unite:
    if (a == kNoKeys || a == b)
      return b;
    if (b == kNoKeys)
      return a;
    if (a == kEveryKey || b == kEveryKey)
      return kEveryKey;
    break;
  case SetOp::Intersect:
    if (a == kNoKeys || b == kNoKeys)
      return kNoKeys;
    if (a == kEveryKey || a == b)
      return b;
    if (b == kEveryKey)
      return a;
    break;
  case SetOp::Subtract:
    if (a == kNoKeys || b == kEveryKey || a == b)
      return kNoKeys;
    if (b == kNoKeys)
      return a;
    break;
  }
  const uint64_t key = (static_cast<uint64_t>(op) << 62) | (static_cast<uint64_t>(a) << 31) |
                       static_cast<uint64_t>(b);
  if (auto it = combined_.find(key); it != combined_.end())
    return it->second;
  const Pattern &x = patterns_[a], &y = patterns_[b];
  const int64_t period = lcmUpTo(x.period, y.period, std::numeric_limits<int64_t>::max() / 4);
  PatternId id = kTooLarge;
  if (period != 0 &&
      period / x.period * static_cast<int64_t>(x.keys.size()) +
              period / y.period * static_cast<int64_t>(y.keys.size()) <=
          kMaxCombinedIntervals) {
    IntervalSet left, right, out;
    repeat(x.keys, x.period, period, left);
    repeat(y.keys, y.period, period, right);
    switch (op) {
    case SetOp::Unite:
      uniteInto(left, right, out);
      break;
    case SetOp::Intersect:
      intersectInto(left, right, out);
      break;
    case SetOp::Subtract:
      subtractInto(left, right, out);
      break;
    }
    id = intern(period, std::move(out));
  }
  combined_.emplace(key, id);
  return id;
}

int64_t PatternTable::countBelow(PatternId p, int64_t x) const {
  const Pattern &pat = patterns_[p];
  const int64_t q = floorDiv(x, pat.period), r = x - q * pat.period;
  int64_t count = q * pat.before.back();
  // The intervals that start below r, the last of them maybe cut at r.
  auto it = std::partition_point(pat.keys.begin(), pat.keys.end(),
                                 [r](const Interval &k) { return k.lo < r; });
  if (it != pat.keys.begin()) {
    const size_t k = static_cast<size_t>(it - pat.keys.begin()) - 1;
    count += pat.before[k] + std::min(r, pat.keys[k].hi) - pat.keys[k].lo;
  }
  return count;
}

bool combineSegments(PatternTable &table, SetOp op, const Segments &a, const Segments &b,
                     Segments &out) {
  out.clear();
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  size_t x = 0, y = 0;
  int64_t pos = std::numeric_limits<int64_t>::min();
  // One sweep over the ranges between the segments' ends, each with the
  // pattern of a and of b there (or none).
  while (true) {
    while (x < a.size() && a[x].hi <= pos)
      ++x;
    while (y < b.size() && b[y].hi <= pos)
      ++y;
    if (x == a.size() && (y == b.size() || op != SetOp::Unite))
      break;
    if (y == b.size() && op == SetOp::Intersect)
      break;
    const int64_t nextA = x < a.size() ? a[x].lo : kEnd, nextB = y < b.size() ? b[y].lo : kEnd;
    const int64_t start = std::max(pos, std::min(nextA, nextB));
    const bool inA = nextA <= start, inB = nextB <= start;
    const int64_t end = std::min(inA ? a[x].hi : nextA, inB ? b[y].hi : nextB);
    const PatternId p =
        table.combine(op, inA ? a[x].pattern : kNoKeys, inB ? b[y].pattern : kNoKeys);
    if (p == kTooLarge)
      return false;
    if (p != kNoKeys) {
      if (!out.empty() && out.back().hi == start && out.back().pattern == p)
        out.back().hi = end;
      else
        out.push_back({start, end, p});
    }
    pos = end;
  }
  return true;
}

int64_t countKeys(const PatternTable &table, const Segments &s, int64_t lo, int64_t hi) {
  int64_t count = 0;
  auto it = std::partition_point(s.begin(), s.end(), [lo](const Segment &x) { return x.hi <= lo; });
  for (; it != s.end() && it->lo < hi; ++it) {
    const int64_t a = std::max(lo, it->lo), b = std::min(hi, it->hi);
    count += it->pattern == kEveryKey ? b - a
                                      : table.countBelow(it->pattern, b) -
                                            table.countBelow(it->pattern, a);
  }
  return count;
}

IntervalSet expandKeys(const PatternTable &table, const Segments &s, int64_t lo, int64_t hi) {
  IntervalSet out;
  for (const Segment &seg : s) {
    const int64_t a = std::max(lo, seg.lo), b = std::min(hi, seg.hi);
    const int64_t period = table.period(seg.pattern);
    for (int64_t base = floorDiv(a, period) * period; base < b; base += period)
      for (const Interval &x : table.keys(seg.pattern))
        out.push_back({std::max(a, base + x.lo), std::min(b, base + x.hi)});
  }
  normalize(out);
  return out;
}

BlockCount countBlocks(const PatternTable &table, const Segments &s, int64_t n, int64_t w,
                       bool whole) {
  BlockCount out;
  const int64_t numBlocks = (n + w - 1) / w;
  auto widthOf = [&](int64_t c) { return std::min(n, (c + 1) * w) - c * w; };
  auto holds = [&](int64_t keys, int64_t width) { return whole ? keys == width : keys > 0; };
  // A block that a segment's end cuts, or the clipped last block: from
  // every segment it overlaps.
  auto decide = [&](int64_t c) {
    const int64_t width = widthOf(c);
    if (holds(countKeys(table, s, c * w, c * w + width), width)) {
      ++out.blocks;
      out.width += width;
    }
  };
  int64_t next = 0; // blocks below it are counted
  for (const Segment &seg : s) {
    const int64_t first = (seg.lo + w - 1) / w;
    // Blocks [first, last) lie inside seg, all of width w: the clipped last
    // block, if any, is decided as a tail below.
    const int64_t last = std::min(seg.hi / w, numBlocks);
    if (seg.lo % w != 0 && seg.lo / w >= next) {
      decide(seg.lo / w);
      next = seg.lo / w + 1;
    }
    const int64_t from = std::max(first, next);
    if (from < last) {
      // Whole blocks inside one segment: block c has the pattern's keys in
      // [c w, c w + w), which repeat with c every period / gcd(period, w).
      const int64_t count = last - from;
      int64_t held = count;
      if (seg.pattern != kEveryKey) {
        const int64_t period = table.period(seg.pattern);
        const int64_t cycle = period / std::gcd(period, w);
        const int64_t seen = std::min(cycle, count), rest = count % cycle;
        int64_t inCycle = 0, inRest = 0;
        for (int64_t k = 0; k < seen; ++k) {
          if (k == rest)
            inRest = inCycle;
          const int64_t c = from + k;
          const int64_t keys =
              table.countBelow(seg.pattern, c * w + w) - table.countBelow(seg.pattern, c * w);
          inCycle += holds(keys, w);
        }
        held = count <= cycle ? inCycle : count / cycle * inCycle + inRest;
      }
      out.blocks += held;
      out.width += held * w;
    }
    next = std::max(next, last);
    const int64_t tail = (seg.hi - 1) / w;
    if (tail >= next) {
      decide(tail);
      next = tail + 1;
    }
  }
  return out;
}

SegmentEvaluator::SegmentEvaluator(SetRef set, int64_t n, PatternTable &table)
    : set_(std::move(set)), n_(n), table_(table) {
  ATTNC_CHECK(n >= 1, "sequence length must be at least 1");
  ATTNC_CHECK(supports(*set_), "segments cannot hold a per-key predicate");
  size_t depth = 0;
  // Scratch sets are taken by reference while deeper levels run: sized once.
  auto walk = [&](auto &&self, const SetRef &s, size_t level) -> void {
    depth = std::max(depth, level);
    if (s->kind == Gen::List || s->kind == Gen::Random)
      leaves_.emplace(s.get(), Leaf{RowEvaluator(s, n), -1, {}});
    for (const SetRef &c : s->children)
      self(self, c, level + 1);
  };
  walk(walk, set_, 0);
  scratch_.resize(2 * depth + 2);
}

bool SegmentEvaluator::supports(const SetNode &s) { return !hasPredicate(s) && !readsData(s); }

bool SegmentEvaluator::row(int64_t i, Segments &out) { return eval(*set_, i, out, 0); }

bool SegmentEvaluator::eval(const SetNode &s, int64_t i, Segments &out, size_t depth) {
  out.clear();
  auto every = [&](int64_t lo, int64_t hi) {
    if (lo < hi)
      out.push_back({lo, hi, kEveryKey});
  };
  auto periodic = [&](PatternId p) {
    if (p == kTooLarge)
      return false;
    if (p != kNoKeys)
      out.push_back({0, n_, p});
    return true;
  };
  if (oneIntervalPerRow(s)) { // bands, blocks, key ranges and their intersections
    int64_t lo = 0, hi = n_;
    narrowToRow(s, i, n_, lo, hi);
    every(lo, hi);
    return true;
  }
  switch (s.kind) {
  case Gen::None:
    return true;
  case Gen::Stripe:
    return periodic(table_.interval(s.modulus, s.lo, s.hi + 1));
  case Gen::CoordRange: { // a stripe of period s m whose ends move with the row
    int64_t first, last;
    coordBoundsAt(s, i, n_, first, last);
    first = std::max<int64_t>(first, 0);
    last = std::min(last, s.modulus - 1);
    if (first > last)
      return true;
    return periodic(table_.interval(s.keyBlock * s.modulus, first * s.keyBlock, (last + 1) * s.keyBlock));
  }
  case Gen::Residue: {
    const int64_t phase = floorMod(i - s.residue, s.modulus);
    return periodic(table_.interval(s.modulus, phase, phase + 1));
  }
  case Gen::RowIf:
    if (evalBool(*s.cond, Env{i, 0, n_, 0}))
      every(0, n_);
    return true;
  case Gen::List:
  case Gen::Random: {
    Leaf &leaf = leaves_.at(&s);
    const int64_t block = s.kind == Gen::Random ? floorDiv(i, s.modulus) : -1;
    if (block < 0 || block != leaf.block)
      leaf.eval.row(i, 0, n_, leaf.keys);
    leaf.block = block;
    for (const Interval &x : leaf.keys)
      every(x.lo, x.hi);
    return true;
  }
  case Gen::Union:
  case Gen::Intersect:
  case Gen::Difference: {
    const SetOp op = s.kind == Gen::Union       ? SetOp::Unite
                     : s.kind == Gen::Intersect ? SetOp::Intersect
                                                : SetOp::Subtract;
    Segments &part = scratch_[2 * depth], &combined = scratch_[2 * depth + 1];
    if (!eval(*s.children[0], i, out, depth + 1))
      return false;
    for (size_t k = 1; k < s.children.size(); ++k) {
      if (out.empty() && op != SetOp::Unite)
        return true;
      if (!eval(*s.children[k], i, part, depth + 1) ||
          !combineSegments(table_, op, out, part, combined))
        return false;
      out.swap(combined);
    }
    return true;
  }
  default:
    ATTNC_CHECK(false, "unexpected generator in a segment evaluation");
    return false;
  }
}

void KeyUnion::add(const Segments &row) {
  for (const Segment &s : row)
    addRange(s.pattern, s.lo, s.hi);
}

void KeyUnion::add(const IntervalSet &row) {
  for (const Interval &x : row)
    addRange(kEveryKey, x.lo, x.hi);
}

IntervalSet KeyUnion::keys(const PatternTable *table) {
  IntervalSet keys;
  for (auto &[pattern, ranges] : ranges_) {
    normalize(ranges);
    if (pattern == kEveryKey) {
      keys.insert(keys.end(), ranges.begin(), ranges.end());
      continue;
    }
    ATTNC_CHECK(table, "periodic keys without their pattern table");
    for (const Interval &x : ranges) {
      IntervalSet some = expandKeys(*table, Segments{{x.lo, x.hi, pattern}}, x.lo, x.hi);
      keys.insert(keys.end(), some.begin(), some.end());
    }
  }
  normalize(keys);
  return keys;
}

void KeyUnion::addRange(PatternId pattern, int64_t lo, int64_t hi) {
  IntervalSet &ranges = ranges_[pattern];
  // Rows come in order, so a pattern's next range mostly extends its last.
  if (!ranges.empty() && lo >= ranges.back().lo && lo <= ranges.back().hi) {
    ranges.back().hi = std::max(ranges.back().hi, hi);
    return;
  }
  ranges.push_back({lo, hi});
  size_t &limit = limits_[pattern];
  if (ranges.size() > limit) { // keep memory linear in the union, not in the rows
    normalize(ranges);
    limit = 2 * ranges.size() + 1024;
  }
}

} // namespace attnc::ir
