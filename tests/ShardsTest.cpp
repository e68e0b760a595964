//===- ShardsTest.cpp - Context-parallel shards against the oracle --------===//
//
// shardContext (attnc/analysis/Shards.h) shares a sequence's positions out to
// ranks. Checked against the brute-force oracle's dense masks, for every
// library pattern (small parameters, so that every generator meets ragged
// edges) at ragged n and rank counts from 1 to more ranks than rows: the
// ranges cover [0, n) exactly once, each rank's pairs are its rows' pairs,
// the rows it receives are exactly the keys its rows read that it does not
// hold, and the rows sent back in the backward pass exactly the reverse. And
// the balance the issue asks for at a length where it matters.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Shards.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

namespace attnc {
namespace {

struct Case {
  std::string name;
  std::vector<Define> defines;
};

void PrintTo(const Case &c, std::ostream *os) { *os << c.name; }

const std::vector<Case> &cases() {
  static const std::vector<Case> all = {
      {"axial", {{"W", 7}}},
      {"bigbird", {{"b", 5}, {"g", 1}, {"r", 2}}},
      {"causal", {}},
      {"dilated", {{"w", 5}, {"d", 3}}},
      {"fixed", {{"l", 12}, {"c", 5}}},
      {"fixed_multihead", {{"l", 12}, {"c", 3}}},
      {"fixed_subblocks", {{"l", 24}, {"c", 3}, {"H", 5}}},
      {"full", {}},
      {"local", {{"w", 9}}},
      {"longformer", {{"w", 6}, {"g", 2}}},
      {"strided", {{"l", 9}}},
      {"strided_multihead", {{"l", 11}}},
  };
  return all;
}

struct Loaded {
  std::unique_ptr<Frontend> frontend = std::make_unique<Frontend>();
  ir::PatternIR ir;
};

std::unique_ptr<Loaded> load(const std::string &name, const std::vector<Define> &defines) {
  auto l = std::make_unique<Loaded>();
  if (!l->frontend->parseFile(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn") ||
      !l->frontend->analyze({defines}))
    return nullptr;
  l->ir = ir::canonicalizePattern(l->frontend->patterns().front());
  return l;
}

class Shards : public ::testing::TestWithParam<std::tuple<Case, int64_t, int>> {};

TEST_P(Shards, CoverEveryPositionOnceAndCountWhatTheOracleCounts) {
  const auto &[c, n, ranks] = GetParam();
  std::unique_ptr<Loaded> l = load(c.name, c.defines);
  ASSERT_TRUE(l);
  const ir::ShardPlan plan = ir::shardContext(l->ir, n, ranks);
  ASSERT_EQ(plan.ranges.size(), static_cast<size_t>(ranks));
  // Every position belongs to exactly one rank; ranges are sorted and disjoint.
  std::vector<int> owner(static_cast<size_t>(n), -1);
  for (int r = 0; r < ranks; ++r) {
    int64_t last = -1;
    for (const auto &[a, b] : plan.ranges[static_cast<size_t>(r)]) {
      ASSERT_LT(a, b);
      ASSERT_GT(a, last) << "rank " << r << ": ranges must be sorted and apart";
      last = b;
      for (int64_t i = a; i < b; ++i) {
        ASSERT_TRUE(i >= 0 && i < n);
        ASSERT_EQ(owner[static_cast<size_t>(i)], -1) << "position " << i << " twice";
        owner[static_cast<size_t>(i)] = r;
      }
    }
  }
  for (int64_t i = 0; i < n; ++i)
    ASSERT_NE(owner[static_cast<size_t>(i)], -1) << "position " << i << " on no rank";
  // The oracle: per rank, pairs (weighted by the heads of each set) and the
  // keys its rows read.
  int64_t totalWeight = 0;
  std::vector<int64_t> pairs(static_cast<size_t>(ranks), 0);
  std::vector<std::vector<char>> reads(static_cast<size_t>(ranks), std::vector<char>(static_cast<size_t>(n), 0));
  for (const ir::PatternIR::Head &h : l->ir.heads) {
    const int64_t weight = l->ir.headsDeclared ? static_cast<int64_t>(h.heads.size()) : 1;
    totalWeight += weight;
    const std::vector<char> mask = oracle::denseMask(*h.term, n);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (mask[static_cast<size_t>(i * n + j)]) {
          const int r = owner[static_cast<size_t>(i)];
          pairs[static_cast<size_t>(r)] += weight;
          reads[static_cast<size_t>(r)][static_cast<size_t>(j)] = 1;
        }
  }
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_DOUBLE_EQ(plan.pairs[static_cast<size_t>(r)],
                     static_cast<double>(pairs[static_cast<size_t>(r)]) / static_cast<double>(totalWeight));
    int64_t recv = 0, back = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (reads[static_cast<size_t>(r)][static_cast<size_t>(j)] && owner[static_cast<size_t>(j)] != r)
        ++recv;
      if (owner[static_cast<size_t>(j)] == r)
        for (int s = 0; s < ranks; ++s)
          back += s != r && reads[static_cast<size_t>(s)][static_cast<size_t>(j)];
    }
    EXPECT_EQ(plan.recvRows[static_cast<size_t>(r)], recv);
    // Straight back to the owner.
    EXPECT_EQ(plan.returnRows[static_cast<size_t>(r)], back);
    // The keys read, exactly.
    std::vector<char> read(static_cast<size_t>(n), 0);
    for (const Interval &iv : plan.reads[static_cast<size_t>(r)])
      for (int64_t j = iv.lo; j < iv.hi; ++j)
        read[static_cast<size_t>(j)] = 1;
    EXPECT_EQ(read, reads[static_cast<size_t>(r)]);
  }
  EXPECT_TRUE(plan.layout == "runs" || plan.layout == "zigzag") << plan.layout;
}

INSTANTIATE_TEST_SUITE_P(Library, Shards,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Values<int64_t>(1, 7, 100, 257),
                                            ::testing::Values(1, 2, 3, 16, 300)),
                         [](const auto &info) {
                           return std::get<0>(info.param).name + "_n" + std::to_string(std::get<1>(info.param)) +
                                  "_R" + std::to_string(std::get<2>(info.param));
                         });

/// The library patterns with their own parameters: every rank's pairs within
/// 5% of the mean (equal contiguous ranges give ~2x on causal patterns).
TEST(ShardBalance, LibraryPatternsWithinFivePercentOfTheMean) {
  for (const char *name : {"fixed", "strided", "local", "longformer", "bigbird", "fixed_multihead", "axial"}) {
    std::unique_ptr<Loaded> l = load(name, {});
    ASSERT_TRUE(l) << name;
    for (int ranks : {2, 4, 8, 16, 64}) {
      const ir::ShardPlan plan = ir::shardContext(l->ir, 65536, ranks);
      EXPECT_LE(plan.imbalance(), 1.05) << name << " over " << ranks << " ranks";
      // Where the zig-zag layout was chosen no rank receives more than ring attention.
      if (plan.layout == "zigzag") {
        for (int64_t rows : plan.recvRows)
          EXPECT_LE(rows, 65536 * (ranks - 1) / ranks) << name << " over " << ranks << " ranks";
      }
    }
  }
}

} // namespace
} // namespace attnc
