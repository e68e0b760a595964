//===- Files.h - Whole-file reads, atomic writes, mkdir -p ----------------===//
#pragma once

#include <cstdint>
#include <string>

namespace attnc::support {

/// Which file a path named when it was read (device and inode), to tell
/// later whether the path still names that file or one renamed over it.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
};

/// Reads a whole file. Returns false and sets `error` on failure.
bool readFileBytes(const std::string &path, std::string &out, std::string &error);
/// readFileBytes that also gives the identity of the file read and, on
/// failure, errno (ENOENT: no such file; EISDIR: `path` is no regular file).
bool readFileBytes(const std::string &path, std::string &out, FileIdentity &identity, int &errnoValue,
                   std::string &error);
/// Removes `path` if it still names `identity`; false (and `error`) when it
/// names another file, none, or cannot be removed. A writer may rename a new
/// file over `path` between the check and the removal: the window is a
/// system call wide and costs that writer's readers one rebuild.
bool removeFileIfUnchanged(const std::string &path, const FileIdentity &identity, std::string &error);
/// Writes atomically: a temporary file in the same directory, fsync, then
/// rename over `path`. Concurrent writers of the same content are safe.
bool writeFileAtomically(const std::string &path, const std::string &bytes, std::string &error);
/// Creates `path` and its missing parents (mkdir -p); false and `error` on failure.
bool makeDirectories(const std::string &path, std::string &error);

} // namespace attnc::support
