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
