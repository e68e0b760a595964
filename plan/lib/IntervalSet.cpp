//===- IntervalSet.cpp - Sorted disjoint integer intervals ----------------===//
#include "attnc/plan/IntervalSet.h"

#include <algorithm>
#include <span>

namespace attnc {

void normalize(IntervalSet &s) {
  s.erase(std::remove_if(s.begin(), s.end(), [](const Interval &x) { return x.hi <= x.lo; }),
          s.end());
  if (!std::is_sorted(s.begin(), s.end(),
                      [](const Interval &a, const Interval &b) { return a.lo < b.lo; }))
    std::sort(s.begin(), s.end(), [](const Interval &a, const Interval &b) { return a.lo < b.lo; });
  size_t out = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (out > 0 && s[k].lo <= s[out - 1].hi)
      s[out - 1].hi = std::max(s[out - 1].hi, s[k].hi);
    else
      s[out++] = s[k];
  }
  s.resize(out);
}

IntervalSet unite(const IntervalSet &a, const IntervalSet &b) {
  IntervalSet out;
  uniteInto(a, b, out);
  return out;
}

void uniteInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out) {
  // One merge by first key, joining what overlaps or touches as it goes
  // (both inputs are normalised, so the output is too).
  out.clear();
  size_t x = 0, y = 0;
  while (x < a.size() || y < b.size()) {
    const Interval next = y == b.size() || (x < a.size() && a[x].lo < b[y].lo) ? a[x++] : b[y++];
    if (!out.empty() && next.lo <= out.back().hi)
      out.back().hi = std::max(out.back().hi, next.hi);
    else
      out.push_back(next);
  }
}

IntervalSet intersect(const IntervalSet &a, const IntervalSet &b) {
  IntervalSet out;
  intersectInto(a, b, out);
  return out;
}

namespace {
/// out = s clipped to [w.lo, w.hi): the intervals in between are copied
/// whole, found by binary search (a window or band against a long stripe
/// list costs a memcpy, not a merge).
void clipInto(const IntervalSet &s, Interval w, IntervalSet &out) {
  out.clear();
  auto first = std::upper_bound(s.begin(), s.end(), w.lo,
                                [](int64_t k, const Interval &x) { return k < x.hi; });
  auto last = std::lower_bound(first, s.end(), w.hi,
                               [](const Interval &x, int64_t k) { return x.lo < k; });
  if (first == last)
    return;
  out.assign(first, last);
  out.front().lo = std::max(out.front().lo, w.lo);
  out.back().hi = std::min(out.back().hi, w.hi);
}
} // namespace

void intersectInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out) {
  if (b.size() == 1 || a.size() == 1)
    return b.size() == 1 ? clipInto(a, b[0], out) : clipInto(b, a[0], out);
  out.clear();
  size_t x = 0, y = 0;
  while (x < a.size() && y < b.size()) {
    int64_t lo = std::max(a[x].lo, b[y].lo);
    int64_t hi = std::min(a[x].hi, b[y].hi);
    if (lo < hi)
      out.push_back({lo, hi});
    if (a[x].hi < b[y].hi)
      ++x;
    else
      ++y;
  }
}

IntervalSet subtract(const IntervalSet &a, const IntervalSet &b) {
  IntervalSet out;
  subtractInto(a, b, out);
  return out;
}

void subtractInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out) {
  out.clear();
  if (b.size() == 1) { // the keys of a before b[0], then after it, copied whole
    const Interval w = b[0];
    auto cut = std::upper_bound(a.begin(), a.end(), w.lo,
                                [](int64_t k, const Interval &x) { return k < x.hi; });
    out.assign(a.begin(), cut);
    if (cut != a.end() && cut->lo < w.lo)
      out.push_back({cut->lo, w.lo});
    auto rest = std::lower_bound(cut, a.end(), w.hi,
                                 [](const Interval &x, int64_t k) { return x.hi <= k; });
    if (rest != a.end() && rest->lo < w.hi) {
      out.push_back({w.hi, rest->hi});
      ++rest;
    }
    out.insert(out.end(), rest, a.end());
    return;
  }
  // Intervals that b has too leave nothing: skip the common prefix (a
  // block's upper and lower bounds share most of theirs).
  const size_t same = static_cast<size_t>(
      std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())),
                    b.begin())
          .first -
      a.begin());
  size_t y = same;
  for (Interval cur : std::span(a).subspan(same)) {
    while (y < b.size() && b[y].hi <= cur.lo)
      ++y;
    size_t z = y;
    while (z < b.size() && b[z].lo < cur.hi) {
      if (b[z].lo > cur.lo)
        out.push_back({cur.lo, b[z].lo});
      cur.lo = std::max(cur.lo, b[z].hi);
      if (cur.lo >= cur.hi)
        break;
      ++z;
    }
    if (cur.lo < cur.hi)
      out.push_back(cur);
  }
}

void subtractInPlace(IntervalSet &a, Interval w) {
  if (w.lo >= w.hi)
    return;
  auto cut = std::upper_bound(a.begin(), a.end(), w.lo,
                              [](int64_t k, const Interval &x) { return k < x.hi; });
  auto rest = std::lower_bound(cut, a.end(), w.hi,
                               [](const Interval &x, int64_t k) { return x.hi <= k; });
  Interval pieces[2];
  int count = 0;
  if (cut != a.end() && cut->lo < w.lo)
    pieces[count++] = {cut->lo, w.lo};
  if (rest != a.end() && rest->lo < w.hi) {
    pieces[count++] = {w.hi, rest->hi};
    ++rest;
  }
  const auto at = cut - a.begin();
  a.erase(cut, rest);
  a.insert(a.begin() + at, pieces, pieces + count);
}

IntervalSet clip(const IntervalSet &s, int64_t lo, int64_t hi) {
  IntervalSet out;
  for (const Interval &x : s) {
    Interval c{std::max(x.lo, lo), std::min(x.hi, hi)};
    if (c.lo < c.hi)
      out.push_back(c);
  }
  return out;
}

int64_t cardinality(const IntervalSet &s) {
  int64_t total = 0;
  for (const Interval &x : s)
    total += x.size();
  return total;
}

bool containsKey(const IntervalSet &s, int64_t key) {
  auto it = std::upper_bound(s.begin(), s.end(), key,
                             [](int64_t k, const Interval &x) { return k < x.lo; });
  return it != s.begin() && key < (it - 1)->hi;
}

} // namespace attnc
