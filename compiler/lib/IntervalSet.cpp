//===- IntervalSet.cpp - Sorted disjoint integer intervals ----------------===//
#include "attnc/compiler/IntervalSet.h"

#include <algorithm>

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
  out.reserve(a.size() + b.size());
  std::merge(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out),
             [](const Interval &x, const Interval &y) { return x.lo < y.lo; });
  normalize(out);
  return out;
}

IntervalSet intersect(const IntervalSet &a, const IntervalSet &b) {
  IntervalSet out;
  intersectInto(a, b, out);
  return out;
}

void intersectInto(const IntervalSet &a, const IntervalSet &b, IntervalSet &out) {
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
  size_t y = 0;
  for (Interval cur : a) {
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
