//===- Hash.h - FNV-1a hashing for source hashes, checksums and keys ------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnc::support {

/// FNV-1a 64 of `size` bytes, continuing from `seed`.
uint64_t fnv1a(const void *data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);
/// FNV-1a 64 of `bytes` as 16 lowercase hex digits (source hashes, cache keys).
std::string fnv1aHex(const std::string &bytes);

} // namespace attnc::support
