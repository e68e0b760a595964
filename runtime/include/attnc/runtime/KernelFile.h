//===- KernelFile.h - The on-disk format of a compiled kernel -------------===//
//
// One self-contained file per kernel:
//
//   "ATTNCKRN"  u32 formatVersion  u32 abiVersion  u32 sectionCount
//   sectionCount x { char tag[4]  u64 size  bytes[size] }
//   u64 checksum   (FNV-1a 64 of every byte before it)
//
// Integers are little-endian. Sections: "META" (key=value lines), "SRC "
// (the pattern source, so that the runtime rebuilds row sets for any n),
// "CODE" (a native shared object). Readers reject unknown format versions,
// truncated files, oversized sections and bad checksums.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnc::rt {

constexpr uint32_t kKernelFormatVersion = 1;

struct KernelFile {
  uint32_t abiVersion = 0;
  std::map<std::string, std::string> metadata;
  std::string source;
  std::string code; ///< shared-object bytes
};

/// Serialises a kernel file.
std::string encodeKernelFile(const KernelFile &file);
/// Parses bytes; returns false and sets `error` when they are not a valid
/// kernel file of this format version.
bool decodeKernelFile(const std::string &bytes, KernelFile &out, std::string &error);

/// FNV-1a 64-bit hash, as hex (used for source hashes and cache keys).
std::string fnv1aHex(const std::string &bytes);
uint64_t fnv1a(const void *data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);

/// Reads a whole file. Returns false and sets `error` on failure.
bool readFileBytes(const std::string &path, std::string &out, std::string &error);
/// Writes atomically: a temporary file in the same directory, fsync, then
/// rename over `path`. Concurrent writers of the same content are safe.
bool writeFileAtomically(const std::string &path, const std::string &bytes, std::string &error);

/// Creates `path` and its missing parents (mkdir -p); false and `error` on failure.
bool makeDirectories(const std::string &path, std::string &error);

} // namespace attnc::rt
