//===- Hash.cpp - FNV-1a hashing ------------------------------------------===//
#include "attnc/support/Hash.h"

#include <cstdio>

namespace attnc::support {

uint64_t fnv1a(const void *data, size_t size, uint64_t seed) {
  uint64_t h = seed;
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t k = 0; k < size; ++k) {
    h ^= p[k];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string fnv1aHex(const std::string &bytes) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx",
                static_cast<unsigned long long>(fnv1a(bytes.data(), bytes.size())));
  return buf;
}

} // namespace attnc::support
