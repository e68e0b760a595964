//===- Diagnostics.h - Source buffers and clang-style diagnostics ---------===//
//
// Every token and AST node carries a SourceRange into a buffer owned by a
// SourceManager. Diagnostics are collected (several per file) by a
// DiagnosticEngine and printed the way clang prints them:
//
//   fixed.attn:7:35: error: modulus must be a positive integer, got 'l - 64'
//     let A2 = { j : j % (l - 64) >= l - c }
//                        ^~~~~~~~
//   fixed.attn:2:3: note: 'l' is 64 here
//
// A note that suggests a fix may carry a fix-it: the text that should replace
// its range, printed on a line of its own under the caret, as clang does:
//
//   s.attn:3:12: note: use '|' for the keys in either set
//     attend A or B
//              ^~
//              |
//
// Messages are lowercase, have no final period and quote the offending thing.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/support/Check.h"
#include "attnc/support/SourceRange.h"

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attnc::dsl {

using attnc::SourceLoc;
using attnc::SourceRange;

/// Owns the text of every buffer that diagnostics may point into.
class SourceManager {
public:
  /// Adds a buffer and returns its id (never 0).
  uint32_t addBuffer(std::string name, std::string text);
  /// Reads a file from disk into a new buffer; returns 0 and sets `error` if
  /// the file cannot be read.
  uint32_t addFile(const std::string &path, std::string &error);

  std::string_view name(uint32_t buffer) const;
  std::string_view text(uint32_t buffer) const;
  /// 1-based line and column of a location.
  std::pair<unsigned, unsigned> lineAndColumn(SourceLoc loc) const;
  /// The full text of the line that contains `loc`, without the newline.
  std::string_view lineText(SourceLoc loc) const;
  /// The text a range covers.
  std::string_view slice(SourceRange range) const;

private:
  struct Buffer {
    std::string name;
    std::string text;
    std::vector<size_t> lineStarts; ///< offsets where lines begin (0 first)
  };
  std::vector<Buffer> buffers_;
};

enum class Severity { Note, Warning, Error };

struct Diagnostic {
  Severity severity = Severity::Error;
  SourceRange range;
  std::string message;
  /// Notes printed after the diagnostic, each with its own location.
  std::vector<Diagnostic> notes;
  /// The text that should replace `range` (a fix-it); empty when there is
  /// none. Printed under the caret.
  std::string fixIt;
};

/// Collects diagnostics; prints them on demand. Never throws, never aborts.
class DiagnosticEngine {
public:
  explicit DiagnosticEngine(const SourceManager &sources) : sources_(sources) {}

  Diagnostic &error(SourceRange range, std::string message);
  Diagnostic &warning(SourceRange range, std::string message);
  /// Attaches a note to the most recently reported diagnostic; `fixIt`, when
  /// not empty, is the text that should replace `range`.
  void note(SourceRange range, std::string message, std::string fixIt = {});

  unsigned errorCount() const { return errors_; }
  unsigned warningCount() const { return warnings_; }
  bool hasErrors() const { return errors_ != 0; }
  const std::vector<Diagnostic> &diagnostics() const { return diags_; }

  /// Prints every diagnostic clang-style. `color` adds ANSI colours.
  void print(std::ostream &os, bool color = false) const;
  /// Formats one diagnostic (and its notes) clang-style.
  std::string format(const Diagnostic &diag, bool color = false) const;

private:
  Diagnostic &report(Severity severity, SourceRange range, std::string message);

  const SourceManager &sources_;
  std::vector<Diagnostic> diags_;
  unsigned errors_ = 0;
  unsigned warnings_ = 0;
};

using attnc::InternalError;
using attnc::internalError;

} // namespace attnc::dsl
