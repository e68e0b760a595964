//===- AlignedVectorTest.cpp - support::AlignedVector ----------------------===//
//
// The cache-line allocator behind the kernels' scratch and the benchmarks'
// tensors: every block on a 64-byte boundary, and a count whose bytes would
// wrap refused as std::allocator refuses it, not allocated short.
//
//===----------------------------------------------------------------------===//
#include "attnc/support/AlignedVector.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <new>

namespace {

using attnc::support::AlignedVector;
using attnc::support::CacheLineAllocator;

TEST(AlignedVector, EveryBlockStartsOnACacheLine) {
  for (size_t count : {1u, 3u, 17u, 1000u, 1u << 20}) {
    AlignedVector<float> v(count, 1.0f);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u) << count;
    v.resize(count * 3 + 1);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data()) % 64, 0u) << count;
    EXPECT_EQ(v[0], 1.0f);
  }
}

TEST(AlignedVector, ACountWhoseBytesWouldWrapThrows) {
  CacheLineAllocator<float> alloc;
  const size_t wraps = std::numeric_limits<size_t>::max() / sizeof(float) + 1; // * 4 wraps to 0
  EXPECT_THROW((void)alloc.allocate(wraps), std::bad_array_new_length);
  EXPECT_THROW((void)alloc.allocate(std::numeric_limits<size_t>::max()), std::bad_array_new_length);
  float *one = alloc.allocate(1);
  EXPECT_NE(one, nullptr);
  alloc.deallocate(one, 1);
}

} // namespace
