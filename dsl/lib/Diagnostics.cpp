//===- Diagnostics.cpp - Source buffers and clang-style diagnostics -------===//
#include "attnc/dsl/Diagnostics.h"

#include <algorithm>
#include <fstream>
#include <ostream>
#include <sstream>

namespace attnc::dsl {

uint32_t SourceManager::addBuffer(std::string name, std::string text) {
  std::vector<size_t> lineStarts{0};
  for (size_t k = 0; k < text.size(); ++k)
    if (text[k] == '\n')
      lineStarts.push_back(k + 1);
  buffers_.push_back({std::move(name), std::move(text), std::move(lineStarts)});
  return static_cast<uint32_t>(buffers_.size());
}

uint32_t SourceManager::addFile(const std::string &path, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open '" + path + "'";
    return 0;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    error = "cannot read '" + path + "'";
    return 0;
  }
  return addBuffer(path, text.str());
}

std::string_view SourceManager::name(uint32_t buffer) const {
  if (buffer == 0 || buffer > buffers_.size())
    return "<command line>";
  return buffers_[buffer - 1].name;
}

std::string_view SourceManager::text(uint32_t buffer) const {
  if (buffer == 0 || buffer > buffers_.size())
    return {};
  return buffers_[buffer - 1].text;
}

std::pair<unsigned, unsigned> SourceManager::lineAndColumn(SourceLoc loc) const {
  if (loc.buffer == 0 || loc.buffer > buffers_.size())
    return {1, 1};
  const Buffer &b = buffers_[loc.buffer - 1];
  const size_t at = std::min<size_t>(loc.offset, b.text.size());
  // The last line that starts at or before `at` (a binary search: files with
  // thousands of diagnostics, or AST dumps that print a location per node,
  // made a scan from the top quadratic).
  const auto line = std::upper_bound(b.lineStarts.begin(), b.lineStarts.end(), at) - 1;
  return {static_cast<unsigned>(line - b.lineStarts.begin() + 1), static_cast<unsigned>(at - *line + 1)};
}

std::string_view SourceManager::lineText(SourceLoc loc) const {
  std::string_view t = text(loc.buffer);
  size_t at = std::min<size_t>(loc.offset, t.size());
  size_t begin = t.rfind('\n', at == 0 ? std::string_view::npos : at - 1);
  begin = (begin == std::string_view::npos || at == 0) ? 0 : begin + 1;
  if (at > 0 && t[at - 1] == '\n')
    begin = at;
  size_t end = t.find('\n', at);
  if (end == std::string_view::npos)
    end = t.size();
  return t.substr(begin, end - begin);
}

std::string_view SourceManager::slice(SourceRange range) const {
  std::string_view t = text(range.begin.buffer);
  size_t b = std::min<size_t>(range.begin.offset, t.size());
  size_t e = std::min<size_t>(std::max(range.end.offset, range.begin.offset), t.size());
  return t.substr(b, e - b);
}

Diagnostic &DiagnosticEngine::report(Severity severity, SourceRange range,
                                     std::string message) {
  diags_.push_back({severity, range, std::move(message), {}, {}});
  return diags_.back();
}

Diagnostic &DiagnosticEngine::error(SourceRange range, std::string message) {
  ++errors_;
  return report(Severity::Error, range, std::move(message));
}

Diagnostic &DiagnosticEngine::warning(SourceRange range, std::string message) {
  ++warnings_;
  return report(Severity::Warning, range, std::move(message));
}

void DiagnosticEngine::note(SourceRange range, std::string message, std::string fixIt) {
  ATTNC_CHECK(!diags_.empty(), "note without a diagnostic");
  diags_.back().notes.push_back({Severity::Note, range, std::move(message), {}, std::move(fixIt)});
}

static const char *severityName(Severity s) {
  switch (s) {
  case Severity::Note:
    return "note";
  case Severity::Warning:
    return "warning";
  case Severity::Error:
    return "error";
  }
  return "error";
}

static const char *severityColor(Severity s) {
  switch (s) {
  case Severity::Note:
    return "\033[1;36m";
  case Severity::Warning:
    return "\033[1;35m";
  case Severity::Error:
    return "\033[1;31m";
  }
  return "";
}

std::string DiagnosticEngine::format(const Diagnostic &diag, bool color) const {
  std::ostringstream os;
  const char *bold = color ? "\033[1m" : "";
  const char *reset = color ? "\033[0m" : "";
  if (diag.range.isValid()) {
    auto [line, col] = sources_.lineAndColumn(diag.range.begin);
    os << bold << sources_.name(diag.range.begin.buffer) << ":" << line << ":" << col
       << ": " << reset;
  } else {
    os << bold << "attnc: " << reset;
  }
  os << (color ? severityColor(diag.severity) : "") << severityName(diag.severity)
     << ": " << reset << bold << diag.message << reset << "\n";
  if (diag.range.isValid()) {
    std::string_view lineText = sources_.lineText(diag.range.begin);
    auto [line, col] = sources_.lineAndColumn(diag.range.begin);
    (void)line;
    os << lineText << "\n";
    std::string caret(col - 1, ' ');
    // Keep tabs so that the caret lines up with the source line.
    for (size_t k = 0; k < caret.size() && k < lineText.size(); ++k)
      if (lineText[k] == '\t')
        caret[k] = '\t';
    size_t width = 1;
    if (diag.range.end.buffer == diag.range.begin.buffer &&
        diag.range.end.offset > diag.range.begin.offset) {
      width = diag.range.end.offset - diag.range.begin.offset;
      // Underline at most to the end of the first line.
      width = std::min<size_t>(width, lineText.size() >= col - 1 ? lineText.size() - (col - 1) : 1);
      width = std::max<size_t>(width, 1);
    }
    os << (color ? "\033[1;32m" : "") << caret << "^" << std::string(width - 1, '~')
       << reset << "\n";
    if (!diag.fixIt.empty())
      os << (color ? "\033[0;32m" : "") << caret << diag.fixIt << reset << "\n";
  }
  for (const Diagnostic &note : diag.notes)
    os << format(note, color);
  return os.str();
}

void DiagnosticEngine::print(std::ostream &os, bool color) const {
  for (const Diagnostic &d : diags_)
    os << format(d, color);
  if (errors_ || warnings_) {
    if (warnings_)
      os << warnings_ << (warnings_ == 1 ? " warning" : " warnings");
    if (warnings_ && errors_)
      os << " and ";
    if (errors_)
      os << errors_ << (errors_ == 1 ? " error" : " errors");
    os << " generated.\n";
  }
}

} // namespace attnc::dsl
