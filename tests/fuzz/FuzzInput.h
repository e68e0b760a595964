//===- FuzzInput.h - Structured values from a fuzzer's bytes --------------===//
//
// The targets that need more than raw bytes (FuzzRunArgs) read their choices
// through a ByteReader: each value takes the next bytes, and past the end
// every read is zero, so that any input, even an empty one, decodes to some
// call and small mutations change few choices. Written for this repository
// (libFuzzer's FuzzedDataProvider is clang-only; the replay build is GCC).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace attnc::fuzz {

class ByteReader {
public:
  ByteReader(const uint8_t *data, size_t size) : data_(data), size_(size) {}

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }

  /// The next `Int`-sized bytes, little-endian.
  template <typename Int> Int integer() {
    uint64_t v = 0;
    for (size_t k = 0; k < sizeof(Int); ++k)
      v |= uint64_t(byte()) << (8 * k);
    return static_cast<Int>(v);
  }

  /// A value in [0, count), from one byte (count <= 256).
  unsigned pick(unsigned count) { return count ? byte() % count : 0; }

  float real() {
    uint32_t bits = integer<uint32_t>();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }

private:
  const uint8_t *data_;
  size_t size_;
  size_t pos_ = 0;
};

} // namespace attnc::fuzz
