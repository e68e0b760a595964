//===- NpyTest.cpp - Reading and writing .npy files -----------------------===//
#include "Npy.h"

#include <gtest/gtest.h>

namespace attnc::tool {
namespace {

std::string header(const std::string &dict, size_t payloadFloats) {
  std::string h = dict;
  size_t total = 10 + h.size() + 1;
  h.append((64 - total % 64) % 64, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + std::string(payloadFloats * 4, '\0');
}

TEST(Npy, RoundTripsFourDimensions) {
  NpyArray a{{2, 3, 4, 5}, {}};
  for (int k = 0; k < 120; ++k)
    a.data.push_back(0.5f * k - 3);
  NpyArray b;
  std::string error;
  ASSERT_TRUE(parseNpy(encodeNpy(a), b, error)) << error;
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.data, a.data);
}

TEST(Npy, ReadsWhatNumpyWrites) {
  NpyArray b;
  std::string error;
  ASSERT_TRUE(parseNpy(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 6), b, error))
      << error;
  EXPECT_EQ(b.shape, (std::vector<int64_t>{3, 2}));
}

TEST(Npy, RejectsBadMagic) {
  NpyArray b;
  std::string error;
  EXPECT_FALSE(parseNpy("PK\x03\x04 zip file", b, error));
  EXPECT_NE(error.find("bad magic"), std::string::npos);
}

TEST(Npy, RejectsOtherDtypes) {
  NpyArray b;
  std::string error;
  EXPECT_FALSE(parseNpy(header("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 2), }", 12), b, error));
  EXPECT_NE(error.find("'<f8'"), std::string::npos) << error;
}

TEST(Npy, RejectsFortranOrder) {
  NpyArray b;
  std::string error;
  EXPECT_FALSE(parseNpy(header("{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2), }", 6), b, error));
  EXPECT_NE(error.find("Fortran"), std::string::npos);
}

TEST(Npy, RejectsPayloadOfTheWrongSize) {
  NpyArray b;
  std::string error;
  std::string bytes = header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 6);
  EXPECT_FALSE(parseNpy(bytes.substr(0, bytes.size() - 4), b, error));
  EXPECT_NE(error.find("needs 24"), std::string::npos) << error;
}

TEST(Npy, RejectsTruncatedHeader) {
  NpyArray b;
  std::string error;
  std::string bytes = header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 6);
  EXPECT_FALSE(parseNpy(bytes.substr(0, 20), b, error));
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
}

TEST(Npy, RejectsMalformedShape) {
  NpyArray b;
  std::string error;
  EXPECT_FALSE(parseNpy(header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }", 6), b, error));
  EXPECT_NE(error.find("shape"), std::string::npos);
}

} // namespace
} // namespace attnc::tool
