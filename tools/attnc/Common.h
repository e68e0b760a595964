//===- Common.h - Shared pieces of the attnc subcommands ------------------===//
#pragma once

#include "attnc/frontend/Driver.h"
#include "attnc/plan/PatternIR.h"

#include "attnc/support/Json.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc::tool {

/// Process exit codes (documented in the README).
enum ExitCode : int {
  kExitOk = 0,        ///< success
  kExitUserError = 1, ///< the pattern or an input is wrong (diagnostics say why)
  kExitUsage = 2,     ///< the command line is wrong
  kExitInternal = 3,  ///< a bug in attnc: "internal error" with file:line
};

/// FILE.attn, -D k=v..., --pattern NAME: shared by every pattern subcommand.
struct PatternOptions {
  std::string file;
  std::vector<std::string> defines;
  std::string pattern;
};

void addPatternOptions(CLI::App &cmd, PatternOptions &opts);

/// A file parsed, checked and canonicalised.
struct LoadedPattern {
  std::unique_ptr<Frontend> frontend;
  const Pattern *pattern = nullptr;
  ir::PatternIR ir;
};

/// Loads the pattern; prints diagnostics (warnings too) to stderr. Returns
/// nullopt after an error and sets `exitCode`.
std::optional<LoadedPattern> loadPattern(const PatternOptions &opts, int &exitCode);

/// Whether to colour diagnostics on stderr.
bool useColor();
void printDiagnostics(const Frontend &fe);

/// A JSON string literal.
using support::jsonString;

/// Appended to every --help: examples on patterns/.
std::string examplesFooter(const std::vector<std::string> &examples);

/// Registration functions, one per subcommand; `exitCode` receives the
/// subcommand's result.
void setupCheck(CLI::App &app, int &exitCode);
void setupShow(CLI::App &app, int &exitCode);
void setupAnalyze(CLI::App &app, int &exitCode);
void setupEmit(CLI::App &app, int &exitCode);
void setupCompile(CLI::App &app, int &exitCode);
void setupRun(CLI::App &app, int &exitCode);
void setupBench(CLI::App &app, int &exitCode);
void setupTune(CLI::App &app, int &exitCode);

} // namespace attnc::tool
