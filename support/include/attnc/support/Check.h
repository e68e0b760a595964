//===- Check.h - Internal invariants that stay on in release builds -------===//
//
// A broken invariant is a bug in attnc, never a user error: ATTNC_CHECK
// throws InternalError, which every entry point (CLI, C ABI, JIT) turns into
// "internal error" (exit code 3, ATTNC_ERROR_INTERNAL) with file:line.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace attnc {

/// Raised by `ATTNC_CHECK` when an internal invariant is broken.
struct InternalError {
  std::string message;
};

[[noreturn]] void internalError(const char *file, int line, const std::string &what);

} // namespace attnc

/// An assertion that stays on in release builds.
#define ATTNC_CHECK(cond, what)                                                \
  do {                                                                         \
    if (!(cond))                                                               \
      ::attnc::internalError(__FILE__, __LINE__, (what));                      \
  } while (false)
