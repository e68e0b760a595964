//===- KernelFile.h - The on-disk format of a compiled kernel -------------===//
//
// One self-contained file per kernel:
//
//   "ATTNCKRN"  u32 formatVersion  u32 abiVersion  u32 sectionCount
//   sectionCount x { char tag[4]  u64 size  bytes[size] }
//   u64 checksum   (FNV-1a 64 of every byte before it)
//
// Integers are little-endian. Sections: "META" (key=value lines), "SRC "
// (the pattern source, for people and tools), "IR  " (the canonical pattern
// IR as text, plan/IrText.h: the runtime rebuilds the plan's row blocks for
// any n from it, with no parser), "CODE" (a native shared object). Readers
// check the magic, the size and the checksum before reading any field, skip
// unknown sections, and reject unknown format versions, truncated files,
// sections reaching into the checksum, a known section given twice and
// trailing bytes. Format 1 had no "IR  " section.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnc::format {

constexpr uint32_t kKernelFormatVersion = 2;
/// The oldest format this reader decodes.
constexpr uint32_t kOldestKernelFormatVersion = 1;

/// The runtime ABI (attnc.h's ATTNC_ABI_VERSION) that kernels are built for,
/// here so that the compiler stamps files without the runtime's headers.
constexpr uint32_t kAbiVersion = 10;
/// The oldest ABI whose kernel files the runtime still loads (versions 2 to
/// 7 only added functions, shapes and devices to attnc.h; kernel code and
/// files are unchanged).
constexpr uint32_t kOldestAbiVersion = 1;

struct KernelFile {
  uint32_t formatVersion = kKernelFormatVersion; ///< as read (encode writes the current one)
  uint32_t abiVersion = 0;
  std::map<std::string, std::string> metadata;
  std::string source;
  std::string ir;   ///< the canonical IR as text (empty in format 1 files)
  std::string code; ///< shared-object bytes
};

/// Serialises a kernel file.
std::string encodeKernelFile(const KernelFile &file);
/// Parses bytes; returns false and sets `error` when they are not a valid
/// kernel file of a format version this reader knows.
bool decodeKernelFile(const std::string &bytes, KernelFile &out, std::string &error);

} // namespace attnc::format
