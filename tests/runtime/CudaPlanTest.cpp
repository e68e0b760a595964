//===- CudaPlanTest.cpp - The GPU kernels' tables, walked on the host -----===//
//
// No GPU needed. The tables the CUDA kernels read (CudaPlan.h) are walked
// on the host exactly as the kernels walk them (items, tiles, full flags,
// masks) and every pair they compute is counted: for each library pattern
// at ragged lengths, the forward and the backward must each compute every
// pair of the pattern once and no other (against the brute-force oracle's
// mask, which shares no code with the plan).
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "cuda/CudaArgs.h"
#include "cuda/CudaPlan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace attnc::test {
namespace {

struct PlanCase {
  const char *label;
  const char *file;
  std::vector<std::string> defines;
  int64_t heads; ///< for the oracle's masks (the pattern's declared heads, or 1)
};

void PrintTo(const PlanCase &c, std::ostream *os) { *os << c.label; }

const PlanCase kCases[] = {
    {"FixedDefaults", "fixed", {}, 1},
    {"FixedSmall", "fixed", {"l=16", "c=4"}, 1},
    {"Strided", "strided", {"l=8"}, 1},
    {"StridedDefaults", "strided", {}, 1},
    {"Local", "local", {"w=5"}, 1},
    {"LocalDefaults", "local", {}, 1},
    {"Longformer", "longformer", {"w=4", "g=2"}, 1},
    {"Bigbird", "bigbird", {"b=8", "g=1", "r=2"}, 1},
    {"BigbirdDefaults", "bigbird", {}, 1},
    {"Causal", "causal", {}, 1},
    {"Full", "full", {}, 1},
    {"Dilated", "dilated", {}, 1},
    {"Axial", "axial", {}, 0},
    {"FixedMultihead", "fixed_multihead", {"l=8", "c=2"}, 2},
    {"StridedMultihead", "strided_multihead", {"l=8"}, 2},
    {"FixedSubblocks", "fixed_subblocks", {}, 0},
};

/// A library pattern's canonical IR.
ir::PatternIR irOf(const PlanCase &c) { return patternIr(c.file, c.defines); }

/// The pairs each table walk computes (forward, then backward), against
/// `mask`: each pair of the mask once, no other; the first wrong one named.
void expectEveryPairOnce(const rt::cuda::SetTables &t, int64_t n, const std::function<bool(int64_t, int64_t)> &mask,
                         const std::string &what) {
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<int> count(size_t(n * n), 0);
    int64_t outside = 0;
    auto add = [&](int64_t i, int64_t j) {
      if (i < 0 || i >= n || j < 0 || j >= n)
        ++outside;
      else
        ++count[size_t(i * n + j)];
    };
    if (pass == 0)
      rt::cuda::forEachForwardPair(t, add);
    else
      rt::cuda::forEachBackwardPair(t, add);
    ASSERT_EQ(outside, 0) << what << (pass ? " backward" : " forward");
    int64_t wrong = 0, firstI = -1, firstJ = -1;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j)
        if (count[size_t(i * n + j)] != (mask(i, j) ? 1 : 0) && wrong++ == 0)
          firstI = i, firstJ = j;
    EXPECT_EQ(wrong, 0) << what << (pass ? " backward" : " forward") << ": first wrong pair (" << firstI << ", "
                        << firstJ << ") computed " << (firstI >= 0 ? count[size_t(firstI * n + firstJ)] : 0)
                        << " times";
  }
}

class CudaTables : public ::testing::TestWithParam<PlanCase> {};

TEST_P(CudaTables, EveryPairOnceForwardAndBackward) {
  const PlanCase &c = GetParam();
  const ir::PatternIR ir = irOf(c);
  const plan::Plan plan = rt::cuda::gpuPlan(ir);
  const int64_t heads = c.heads > 0 ? c.heads : (ir.headsDeclared ? ir.numHeads : 1);
  for (int64_t n : {1, 7, 100, 130, 1000}) {
    const auto tables = rt::cuda::buildTables(plan, n);
    ASSERT_EQ(tables.size(), ir.heads.size());
    const auto masks = masksFromOracle(patternPath(c.file), false, c.defines, heads, n);
    for (size_t s = 0; s < tables.size(); ++s) {
      const int64_t head = ir.heads[s].heads.empty() ? 0 : ir.heads[s].heads.front();
      const std::vector<char> &mask = masks[size_t(head)];
      expectEveryPairOnce(tables[s], n, [&](int64_t i, int64_t j) { return mask[size_t(i * n + j)] != 0; },
                          "n=" + std::to_string(n) + " set " + std::to_string(s));
    }
  }
}

// Long items cut into chunks: global rows (longformer, bigbird) and
// summary columns every later row reads (fixed's backward).
TEST(CudaTables, ChunksOfLongItemsCoverEachPairOnce) {
  const PlanCase cases[] = {{"Longformer", "longformer", {"w=4", "g=2"}, 1},
                            {"Bigbird", "bigbird", {}, 1},
                            {"Fixed", "fixed", {}, 1}};
  const int64_t n = 4097;
  for (const PlanCase &c : cases) {
    const ir::PatternIR ir = irOf(c);
    const auto tables = rt::cuda::buildTables(rt::cuda::gpuPlan(ir), n);
    const auto &t = tables.front();
    bool fwdSplit = false, bwdSplit = false;
    for (const rt::cuda::Launch &l : t.fwdLaunches)
      fwdSplit = fwdSplit || l.writesSlots;
    for (const rt::cuda::BwdItem &x : t.bwdItems)
      bwdSplit = bwdSplit || x.chunk;
    EXPECT_TRUE(bwdSplit) << c.label << ": no backward chunks at n = 4097";
    if (c.file != std::string("fixed")) {
      EXPECT_TRUE(fwdSplit) << c.label << ": no forward chunks at n = 4097";
    }
    // No item is left far longer than the rest.
    int64_t total = 0, longest = 0;
    for (const rt::cuda::FwdItem &x : t.fwdItems)
      total += x.numTiles, longest = std::max<int64_t>(longest, x.numTiles);
    EXPECT_LE(longest, std::max<int64_t>(rt::cuda::kSplitTiles, 2 * rt::cuda::kSplitOverMean * total /
                                                                    int64_t(t.fwdItems.size())))
        << c.label;
    const auto masks = masksFromOracle(patternPath(c.file), false, c.defines, 1, n);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<uint8_t> count(size_t(n * n), 0);
      auto add = [&](int64_t i, int64_t j) { ++count[size_t(i * n + j)]; };
      if (pass == 0)
        rt::cuda::forEachForwardPair(t, add);
      else
        rt::cuda::forEachBackwardPair(t, add);
      int64_t wrong = 0;
      for (size_t x = 0; x < count.size(); ++x)
        wrong += count[x] != (masks[0][x] ? 1 : 0);
      EXPECT_EQ(wrong, 0) << c.label << (pass ? " backward" : " forward");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Library, CudaTables, ::testing::ValuesIn(kCases),
                         [](const auto &info) { return std::string(info.param.label); });

// The plan's re-layouts reach the GPU: fixed's summary columns compacted,
// strided's residue classes run as dense bands. Executed pairs per useful
// pair stay near 1 where a 64 x 64 block mask would be far off.
TEST(CudaTables, ExecutedOverUsefulOfTheLibrary) {
  const std::map<std::string, double> bound = {
      {"fixed", 1.3}, {"strided", 1.6}, {"local", 1.3}, {"longformer", 1.4}, {"bigbird", 1.3}};
  for (const auto &[file, most] : bound) {
    const ir::PatternIR ir = irOf({"", file.c_str(), {}, 1});
    const auto tables = rt::cuda::buildTables(rt::cuda::gpuPlan(ir), 16384);
    const rt::cuda::TableStats st = rt::cuda::tableStats(tables.front());
    ASSERT_GT(st.useful, 0);
    const double ratio = double(st.executedFwd) / double(st.useful);
    EXPECT_LE(ratio, most) << file;
    EXPECT_GE(ratio, 1.0) << file;
    const double bwd = double(st.executedBwd) / double(st.useful);
    EXPECT_LE(bwd, 2 * most) << file << " backward";
    const double warps = double(st.executedFwdWarps) / double(st.useful);
    EXPECT_LE(warps, ratio) << file;
    EXPECT_LE(warps, 1.3) << file << ": what the forward's warps compute";
    std::cout << file << " at n = 16384: executed/useful forward " << ratio << " (warps " << warps << "), backward "
              << bwd << "\n";
  }
}

/// The kernel metadata that `attnc tune --target cuda` leads to
/// (tuning::formatCudaTuned), as the runtime reads it per GPU, dtype and d.
/// A 1-D (rows values) or 2-D (rows x cols) input bound to `values`, its equality classes indexed.
std::shared_ptr<const InputArray> boundInput(const std::string &name, int rank, int64_t rows, int64_t cols,
                                             std::vector<int64_t> values) {
  auto a = std::make_shared<InputArray>();
  a->name = name, a->rank = rank, a->bound = true, a->rows = rows, a->cols = cols;
  a->values = std::move(values);
  if (rank == 1)
    a->indexClasses();
  return a;
}

/// Patterns that read data: the symbolic plan bound to one slice's data
/// (plan::bindPlan, as the runtime binds each slice of a GPU call), its
/// tables in raster order, walked as the kernels walk them, against masks
/// written from the data here (LSH's two rounds and its self rule, documents,
/// selected blocks and tokens with their windows), at ragged lengths, with
/// buckets of one position and one bucket for every position.
TEST(CudaTables, DataPatternsBoundToASlicesInputs) {
  std::mt19937 rng(7);
  for (int64_t n : {1, 2, 63, 100, 300}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    for (int buckets : {1, 5, 1000}) {
      std::uniform_int_distribution<int64_t> pick(0, buckets - 1);
      std::vector<int64_t> b0(static_cast<size_t>(n)), b1(b0), doc(b0);
      for (int64_t i = 0; i < n; ++i)
        b0[size_t(i)] = pick(rng), b1[size_t(i)] = pick(rng), doc[size_t(i)] = (i * buckets) / std::max<int64_t>(n, 1);
      {
        const ir::PatternIR ir = patternIr("lsh", {});
        const plan::Plan bound = plan::bindPlan(rt::cuda::gpuPlan(ir), 0,
                                                {boundInput("b0", 1, n, 1, b0), boundInput("b1", 1, n, 1, b1)});
        auto same = [&](int64_t i, int64_t j) { return b0[size_t(j)] == b0[size_t(i)] || b1[size_t(j)] == b1[size_t(i)]; };
        expectEveryPairOnce(rt::cuda::buildSetTables(bound, 0, n), n,
                            [&](int64_t i, int64_t j) {
                              if (j > i)
                                return false;
                              bool other = false; // the self rule: i itself only where no earlier key shares a bucket
                              for (int64_t x = 0; x < i && !other; ++x)
                                other = same(i, x);
                              return j < i ? same(i, j) : !other;
                            },
                            "lsh, " + std::to_string(buckets) + " buckets");
      }
      {
        const ir::PatternIR ir = patternIr("document", {});
        const plan::Plan bound = plan::bindPlan(rt::cuda::gpuPlan(ir), 0, {boundInput("doc", 1, n, 1, doc)});
        expectEveryPairOnce(rt::cuda::buildSetTables(bound, 0, n), n,
                            [&](int64_t i, int64_t j) { return j <= i && doc[size_t(j)] == doc[size_t(i)]; },
                            "document, " + std::to_string(buckets) + " documents");
      }
    }
    {
      const int64_t B = 16, k = 3, w = 8, rows = (n + B - 1) / B;
      std::vector<int64_t> sel(size_t(rows * k));
      std::uniform_int_distribution<int64_t> block(-1, rows - 1);
      for (int64_t &x : sel)
        x = block(rng);
      const ir::PatternIR ir = patternIr("nsa", {"B=16", "k=3", "w=8"});
      const plan::Plan bound = plan::bindPlan(rt::cuda::gpuPlan(ir), 0, {boundInput("sel", 2, rows, k, sel)});
      expectEveryPairOnce(rt::cuda::buildSetTables(bound, 0, n), n,
                          [&](int64_t i, int64_t j) {
                            if (j > i)
                              return false;
                            bool picked = false;
                            for (int64_t c = 0; c < k; ++c)
                              picked = picked || sel[size_t((i / B) * k + c)] == j / B;
                            return picked || i - j < w;
                          },
                          "nsa");
    }
    {
      const int64_t k = 4, w = 3;
      std::vector<int64_t> top(size_t(n * k));
      std::uniform_int_distribution<int64_t> token(-1, n - 1);
      for (int64_t &x : top)
        x = token(rng);
      const ir::PatternIR ir = patternIr("topk", {"k=4", "w=3"});
      const plan::Plan bound = plan::bindPlan(rt::cuda::gpuPlan(ir), 0, {boundInput("top", 2, n, k, top)});
      expectEveryPairOnce(rt::cuda::buildSetTables(bound, 0, n), n,
                          [&](int64_t i, int64_t j) {
                            if (j > i)
                              return false;
                            bool picked = false;
                            for (int64_t c = 0; c < k; ++c)
                              picked = picked || top[size_t(i * k + c)] == j;
                            return picked || i - j < w;
                          },
                          "topk");
    }
  }
}

TEST(CudaTuned, ParsedPerGpuDtypeAndHeadDimension) {
  const std::vector<rt::cuda::TunedVariant> t =
      rt::cuda::parseCudaTuned("NVIDIA_H200@9.0:bf16:64=2;NVIDIA_H100_80GB_HBM3@9.0:bf16:64=3;"
                           "NVIDIA_H200@9.0:bf16:32=1;bad;x:y=1;NVIDIA_A100@8.0:bf16:64=7;:bf16:64=1;"
                           "NVIDIA_H200@9.0:bf16:64=0;NVIDIA_H200@9.0:f16:128=4;NVIDIA_H200@9.0:bf16:64=6");
  ASSERT_EQ(t.size(), 5u); // the malformed and out-of-range entries are skipped
  EXPECT_EQ(t[0].gpu, "NVIDIA_H200@9.0");
  EXPECT_EQ(t[0].dtype, "bf16");
  EXPECT_EQ(t[0].d, 64);
  EXPECT_EQ(t[0].variant, 2);
  // The last entry for a GPU, dtype and d wins; anything else runs the default.
  EXPECT_EQ(rt::cuda::tunedVariant(t, "NVIDIA_H200@9.0", "bf16", 64), 0);
  EXPECT_EQ(rt::cuda::tunedVariant(t, "NVIDIA_H100_80GB_HBM3@9.0", "bf16", 64), 3);
  EXPECT_EQ(rt::cuda::tunedVariant(t, "NVIDIA_H200@9.0", "bf16", 32), 1);
  EXPECT_EQ(rt::cuda::tunedVariant(t, "NVIDIA_H200@9.0", "f16", 64), 0);
  EXPECT_EQ(rt::cuda::tunedVariant(t, "NVIDIA_H200@9.0", "f16", 128), 4); // wgmma, for fp16 at d = 128
  EXPECT_EQ(rt::cuda::tunedVariant(t, "NVIDIA_A100@8.0", "bf16", 64), 0);
  EXPECT_TRUE(rt::cuda::parseCudaTuned("").empty());
}

// --- The wgmma forward's operands (variant 4) ------------------------------------

/// The shared-memory byte wgmma reads for element (mn, k) of one 64 x 16
/// (K-major) or 16 x N (MN-major) operand of 16-bit elements, decoded from
/// its descriptor by the canonical layouts of the PTX ISA (T = 8 elements,
/// 16 bytes; strides in elements except LBO / SBO, in bytes):
///   K-major:  ((8, m), (T, 2)) : ((8T, SBO), (1, T))   (LBO unused)
///   MN-major: ((T, 8, m), (8, 2)) : ((1, T, LBO), (8T, SBO))
/// followed by the 128-byte swizzle: address bits 4-6 XOR bits 7-9.
uint32_t wgmmaReads(uint64_t desc, bool mnMajor, int mn, int k) {
  const uint32_t start = uint32_t(desc & 0x3FFF) << 4, lbo = uint32_t((desc >> 16) & 0x3FFF) << 4,
                 sbo = uint32_t((desc >> 32) & 0x3FFF) << 4;
  EXPECT_EQ(desc >> 62, 1u) << "128-byte swizzle";
  EXPECT_EQ((desc >> 49) & 7, 0u) << "base offset (the tiles are 1024-byte aligned)";
  const uint32_t off = mnMajor ? uint32_t(mn % 64) * 2 + uint32_t(mn / 64) * lbo + uint32_t(k % 8) * 128 +
                                     uint32_t(k / 8) * sbo
                               : uint32_t(mn % 8) * 128 + uint32_t(mn / 8) * sbo + uint32_t(k) * 2;
  const uint32_t addr = start + off;
  return addr ^ (((addr >> 7) & 7) << 4);
}

/// Every element the wgmma forward's products read is the one its tiles hold
/// there: Q and K (K-major, S = Q K^T) at each 16-column k-step, V (MN-major,
/// O = P V) at each 16-key step, for DP = 64 and 128; and the layout puts the
/// 64 x DP elements at distinct addresses inside the tile.
TEST(CudaWgmma, DescriptorsReadWhatTheTilesHold) {
  using namespace rt::cuda;
  const uint32_t base = 0x5000; // a 1024-byte aligned shared-memory address
  for (const int dp : {64, 128}) {
    std::vector<int> seen(size_t(64 * dp), 0);
    auto at = [&](int row, int col) { return base + 2u * uint32_t(wgSwizzled(row, col / 8) + col % 8); };
    for (int row = 0; row < 64; ++row)
      for (int col = 0; col < dp; ++col) {
        const uint32_t e = (at(row, col) - base) / 2;
        ASSERT_LT(e, seen.size());
        ASSERT_EQ(seen[e]++, 0) << "two elements at " << e;
      }
    int mismatches = 0;
    for (int kk = 0; kk < dp / 16; ++kk) {
      const uint64_t desc = wgDescriptor(base + wgKStep(kk), 16);
      for (int row = 0; row < 64; ++row)
        for (int kc = 0; kc < 16; ++kc)
          mismatches += wgmmaReads(desc, false, row, kc) != at(row, 16 * kk + kc);
    }
    EXPECT_EQ(mismatches, 0) << "K-major (Q, K), DP " << dp;
    mismatches = 0;
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t desc = wgDescriptor(base + wgVStep(kk), kWgVLeading);
      for (int key = 0; key < 16; ++key)
        for (int col = 0; col < dp; ++col)
          mismatches += wgmmaReads(desc, true, col, key) != at(16 * kk + key, col);
    }
    EXPECT_EQ(mismatches, 0) << "MN-major (V), DP " << dp;
  }
  // The forward's shared memory leaves room to align its tiles.
  for (const int dp : {64, 128})
    EXPECT_GE(fwdSmemBytes(dp), 1023 + 5 * 64 * dp * 2 + 2 * 64 * 8);
}

} // namespace
} // namespace attnc::test
