//===- Worker.h - attnc_jit_worker processes and what they run -*- C++ -*-===//
//
// Workers are started with fork + exec rather than fork alone: the test
// process has thread-pool threads whose locks a forked child could inherit
// held, and a fresh process is what these tests are about (a cold pool, its
// own counters).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "TestSupport.h"

#include "attnc/support/Hash.h"

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <grp.h>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace attnc::test {

/// The call every worker makes: two batches, two heads, ragged n, fixed
/// inputs. Returns FNV-1a of the output's bytes as 16 hex digits, or ""
/// (and attnc_last_error) when the run fails.
inline std::string fixedRunHash(attnc_kernel *kernel, int32_t threads) {
  constexpr int64_t b = 2, h = 2, n = 203, d = 32;
  const size_t count = static_cast<size_t>(b * h * n * d);
  std::vector<float> q = randomFloats(count, 11, 1), k = randomFloats(count, 12, 1),
                     v = randomFloats(count, 13, 1), o(count);
  attnc_tensor tq = view(q, b, h, n, d), tk = view(k, b, h, n, d), tv = view(v, b, h, n, d), to = view(o, b, h, n, d);
  attnc_run_options options{0.0f, threads};
  if (attnc_run(kernel, &tq, &tk, &tv, &to, &options) != ATTNC_OK)
    return "";
  return support::fnv1aHex(std::string(reinterpret_cast<const char *>(o.data()), o.size() * sizeof(float)));
}

/// A started worker: wait() gives its exit code (-1 when it did not exit
/// normally) and what it printed on stdout and stderr.
class Worker {
public:
  /// Starts ATTNC_JIT_WORKER with `args`, the test's environment plus `env`
  /// ("NAME=value", overriding), its output into `outputFile`. With
  /// `asUser` >= 0 the child first drops to that uid and gid (exit 77 when
  /// it may not).
  Worker(const std::vector<std::string> &args, const std::vector<std::string> &env, std::string outputFile,
         int asUser = -1)
      : outputFile_(std::move(outputFile)) {
    // Everything the child needs is built before fork: between fork and
    // exec it makes async-signal-safe calls only.
    std::vector<std::string> argStrings{ATTNC_JIT_WORKER};
    argStrings.insert(argStrings.end(), args.begin(), args.end());
    std::vector<std::string> envStrings;
    for (char **e = environ; *e; ++e) {
      std::string entry = *e;
      bool overridden = false;
      for (const std::string &o : env)
        overridden |= entry.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0;
      if (!overridden)
        envStrings.push_back(entry);
    }
    envStrings.insert(envStrings.end(), env.begin(), env.end());
    std::vector<char *> argv, envp;
    for (std::string &s : argStrings)
      argv.push_back(s.data());
    argv.push_back(nullptr);
    for (std::string &s : envStrings)
      envp.push_back(s.data());
    envp.push_back(nullptr);
    const int out = ::open(outputFile_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = out < 0 ? -1 : ::fork();
    if (pid_ == 0) {
      if (::dup2(out, 1) < 0 || ::dup2(out, 2) < 0)
        ::_exit(126);
      if (asUser >= 0 && (::setgroups(0, nullptr) != 0 || ::setgid(static_cast<gid_t>(asUser)) != 0 ||
                          ::setuid(static_cast<uid_t>(asUser)) != 0))
        ::_exit(77);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    if (out >= 0)
      ::close(out);
  }
  Worker(const Worker &) = delete;
  Worker &operator=(const Worker &) = delete;
  Worker(Worker &&other) noexcept : pid_(other.pid_), outputFile_(std::move(other.outputFile_)) { other.pid_ = -1; }
  ~Worker() {
    if (pid_ > 0)
      wait();
  }

  bool started() const { return pid_ > 0; }

  /// Waits for the exit; the exit code, or -1.
  int wait() {
    if (pid_ <= 0)
      return -1;
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  /// What it printed (after wait()).
  std::string output() const {
    std::ifstream in(outputFile_);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

private:
  pid_t pid_ = -1;
  std::string outputFile_;
};

} // namespace attnc::test
