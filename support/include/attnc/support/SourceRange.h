//===- SourceRange.h - Byte positions in source buffers -------------------===//
//
// Every token, AST node, Term and IR node carries a SourceRange. The buffers
// themselves belong to the front end (dsl::SourceManager); these are plain
// values, so that the IR below the front end can carry locations without it.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace attnc {

/// A byte position inside one buffer of a SourceManager. `buffer == 0` means
/// "no location" (e.g. a value that came from the command line).
struct SourceLoc {
  uint32_t buffer = 0;
  uint32_t offset = 0;
  bool isValid() const { return buffer != 0; }
};

/// A half-open byte range [begin, end) inside one buffer.
struct SourceRange {
  SourceLoc begin;
  SourceLoc end;
  bool isValid() const { return begin.isValid(); }
  static SourceRange merge(SourceRange a, SourceRange b) {
    if (!a.isValid())
      return b;
    if (!b.isValid())
      return a;
    return {a.begin, b.end};
  }
};

} // namespace attnc
