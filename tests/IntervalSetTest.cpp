//===- IntervalSetTest.cpp - Interval set algebra against bit vectors -----===//
//
// unite, intersect and subtract (and their *Into forms, including the
// single-interval fast paths) on random sorted sets, checked key by key
// against plain boolean vectors.
//
//===----------------------------------------------------------------------===//
#include "attnc/plan/IntervalSet.h"
#include "attnc/plan/Plan.h"

#include <gtest/gtest.h>

#include <random>

namespace attnc {
namespace {

constexpr int64_t kKeys = 60;

/// A normalised random set of about `count` intervals inside [0, kKeys).
IntervalSet randomSet(std::mt19937 &rng, int count) {
  std::uniform_int_distribution<int64_t> pos(-3, kKeys + 3), len(1, 9);
  IntervalSet s;
  for (int k = 0; k < count; ++k) {
    int64_t lo = pos(rng);
    s.push_back({lo, lo + len(rng)});
  }
  normalize(s);
  return s;
}

std::vector<bool> bits(const IntervalSet &s) {
  std::vector<bool> out(kKeys + 20, false);
  for (const Interval &x : s)
    for (int64_t k = x.lo; k < x.hi; ++k)
      out[static_cast<size_t>(k + 5)] = true;
  return out;
}

void expectNormalised(const IntervalSet &s) {
  for (size_t k = 0; k < s.size(); ++k) {
    EXPECT_LT(s[k].lo, s[k].hi);
    if (k > 0) {
      EXPECT_LT(s[k - 1].hi, s[k].lo) << "sorted, disjoint, not adjacent";
    }
  }
}

TEST(IntervalSet, AlgebraMatchesBitVectors) {
  std::mt19937 rng(7);
  IntervalSet into;
  for (int trial = 0; trial < 3000; ++trial) {
    // Sizes 0..6 on each side: 1 takes the single-interval paths.
    IntervalSet a = randomSet(rng, trial % 7), b = randomSet(rng, (trial / 7) % 7);
    std::vector<bool> ba = bits(a), bb = bits(b), both(ba.size()), diff(ba.size()), any(ba.size());
    for (size_t k = 0; k < ba.size(); ++k) {
      both[k] = ba[k] && bb[k];
      diff[k] = ba[k] && !bb[k];
      any[k] = ba[k] || bb[k];
    }
    IntervalSet i = intersect(a, b), d = subtract(a, b), u = unite(a, b);
    EXPECT_EQ(bits(i), both);
    EXPECT_EQ(bits(d), diff);
    EXPECT_EQ(bits(u), any);
    expectNormalised(i);
    expectNormalised(d);
    expectNormalised(u);
    intersectInto(a, b, into);
    EXPECT_EQ(into, i) << "intersectInto reuses `out` and agrees";
    subtractInto(a, b, into);
    EXPECT_EQ(into, d);
    if (b.size() == 1) {
      IntervalSet inPlace = a;
      subtractInPlace(inPlace, b[0]);
      EXPECT_EQ(inPlace, d);
    }
  }
}

/// Block shapes store keys as runs of equal, equally spaced intervals.
TEST(IntervalSet, RunsRoundTrip) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    IntervalSet s = randomSet(rng, trial % 9);
    if (trial % 3 == 0) // a stripe piece: equal intervals, equal spacing, then a tail
      for (int64_t k = 0; k < trial % 13; ++k)
        s.push_back({100 + 8 * k, 103 + 8 * k});
    plan::KeyRuns runs = plan::compressRuns(s);
    IntervalSet back;
    for (const plan::KeyRun &r : runs) {
      ASSERT_GE(r.count, 1);
      for (int64_t k = 0; k < r.count; ++k)
        back.push_back({r.lo + k * r.period, r.lo + k * r.period + r.len});
    }
    EXPECT_EQ(back, s);
    EXPECT_EQ(plan::cardinality(runs), cardinality(s));
  }
  IntervalSet stripe;
  for (int64_t k = 0; k < 1000; ++k)
    stripe.push_back({128 * k + 120, 128 * k + 128});
  EXPECT_EQ(plan::compressRuns(stripe).size(), 1u) << "a stripe up to a block is one run";
}

} // namespace
} // namespace attnc
