//===- Files.cpp - Whole-file reads, atomic writes, mkdir -p ---------------===//
#include "attnc/support/Files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <random>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc::support {

bool readFileBytes(const std::string &path, std::string &out, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) {
    error = "cannot read '" + path + "'";
    return false;
  }
  out = s.str();
  return true;
}

bool readFileBytes(const std::string &path, std::string &out, FileIdentity &identity, int &errnoValue,
                   std::string &error) {
  auto failed = [&](const char *what, int fd) {
    errnoValue = errno;
    error = std::string("cannot ") + what + " '" + path + "': " + std::strerror(errnoValue);
    if (fd >= 0)
      ::close(fd);
    return false;
  };
  // One descriptor for the identity and the bytes: a writer renaming a new
  // file over `path` meanwhile cannot make them disagree.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return failed("open", -1);
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return failed("stat", fd);
  if (!S_ISREG(st.st_mode)) {
    errno = EISDIR;
    return failed("read", fd);
  }
  identity = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  for (;;) {
    if (done == bytes.size()) // the file may have grown since fstat
      bytes.resize(bytes.size() + 4096);
    ssize_t r = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return failed("read", fd);
    if (r == 0)
      break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  bytes.resize(done);
  out = std::move(bytes);
  return true;
}

bool removeFileIfUnchanged(const std::string &path, const FileIdentity &identity, std::string &error) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    error = "cannot stat '" + path + "': " + std::strerror(errno);
    return false;
  }
  if (static_cast<uint64_t>(st.st_dev) != identity.device || static_cast<uint64_t>(st.st_ino) != identity.inode) {
    error = "'" + path + "' was replaced since it was read";
    return false;
  }
  if (::unlink(path.c_str()) != 0) {
    error = "cannot remove '" + path + "': " + std::strerror(errno);
    return false;
  }
  return true;
}

bool writeFileAtomically(const std::string &path, const std::string &bytes, std::string &error) {
  std::random_device rd;
  std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    error = "cannot create '" + tmp + "': " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      error = "cannot write '" + tmp + "': " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return false;
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    error = "cannot flush '" + tmp + "': " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    error = "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool makeDirectories(const std::string &path, std::string &error) {
  std::string partial;
  for (size_t k = 0; k <= path.size(); ++k) {
    if ((k == path.size() || path[k] == '/') && !partial.empty() && mkdir(partial.c_str(), 0755) != 0 &&
        errno != EEXIST) {
      error = "cannot create directory '" + partial + "': " + std::strerror(errno);
      return false;
    }
    if (k < path.size())
      partial += path[k];
  }
  return true;
}

} // namespace attnc::support
