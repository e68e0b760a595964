//===- ExpPoly.h - e^x in float operations that vectorise ------*- C++ -*-===//
//
// 2^k e^f, f = x - k ln2 (Cody-Waite: ln2 in two parts), |f| <= ln2 / 2,
// degree 6: relative error below 4e-7; the argument is clamped to [-87, 88]
// (e^88 ~ 1.7e38 is the largest; e^-87 ~ 1.6e-38, so e^-inf is not 0 but a
// normal float that vanishes against any term of a softmax sum). Branch-free
// and libm-free, so a loop over it vectorises for whatever instruction set
// the caller is compiled for (it is always inlined into the caller's).
// tests/runtime/ScoreMathTest.cpp checks the bound on every instruction set.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <bit>
#include <cstdint>

namespace attnc::rt {

[[gnu::always_inline]] inline float expPoly(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  // k = round(x log2 e); f = x - k ln2 in two steps (ln2's high part has
  // few bits, so k times it is exact): x log2 e rounded in f32 would put an
  // error of |x| 2^-24 into f, 5e-6 relative at x = 88.
  const float magic = 12582912.0f;
  const float tm = xc * 1.44269504088896341f + magic, k = tm - magic;
  const float f = (xc - k * 0.693145751953125f) - k * 1.428606765330187e-6f;
  const float p =
      1.0f + f * (1.0f + f * (0.5f + f * (0.166666667f + f * (0.0416666667f + f * (0.00833333333f + f * 0.00138888889f)))));
  const int32_t bits = (std::bit_cast<int32_t>(tm) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}

} // namespace attnc::rt
