//===- Files.h - Whole-file reads, atomic writes, mkdir -p ----------------===//
#pragma once

#include <string>

namespace attnc::support {

/// Reads a whole file. Returns false and sets `error` on failure.
bool readFileBytes(const std::string &path, std::string &out, std::string &error);
/// Writes atomically: a temporary file in the same directory, fsync, then
/// rename over `path`. Concurrent writers of the same content are safe.
bool writeFileAtomically(const std::string &path, const std::string &bytes, std::string &error);
/// Creates `path` and its missing parents (mkdir -p); false and `error` on failure.
bool makeDirectories(const std::string &path, std::string &error);

} // namespace attnc::support
