//===- Check.cpp - Internal invariants ------------------------------------===//
#include "attnc/support/Check.h"

namespace attnc {

void internalError(const char *file, int line, const std::string &what) {
  throw InternalError{std::string("internal error at ") + file + ":" + std::to_string(line) + ": " + what};
}

} // namespace attnc
