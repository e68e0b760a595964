//===- Common.cpp - Shared pieces of the attnc subcommands ----------------===//
#include "Common.h"

#include "attnc/frontend/Canonicalize.h"

#include "attnc/support/Json.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <unistd.h>

namespace attnc::tool {

void addPatternOptions(CLI::App &cmd, PatternOptions &opts) {
  cmd.add_option("file", opts.file, "The pattern file (.attn)")->required()->check(CLI::ExistingFile);
  cmd.add_option("-D,--define", opts.defines,
                 "Override a parameter: -D l=256 (repeatable)")
      ->type_name("NAME=INT")
      ->allow_extra_args(false);
  cmd.add_option("--pattern", opts.pattern,
                 "Which pattern of the file to use (default: the first)")
      ->type_name("NAME");
}

bool useColor() {
  if (std::getenv("NO_COLOR"))
    return false;
  return isatty(STDERR_FILENO) != 0;
}

void printDiagnostics(const Frontend &fe) {
  auto &self = const_cast<Frontend &>(fe);
  self.diags().print(std::cerr, useColor());
}

std::optional<LoadedPattern> loadPattern(const PatternOptions &opts, int &exitCode) {
  LoadedPattern out;
  out.frontend = std::make_unique<Frontend>();
  Frontend &fe = *out.frontend;
  SemaOptions sema;
  for (const std::string &d : opts.defines) {
    Define def;
    std::string error;
    if (!parseDefine(d, def, error)) {
      std::cerr << "attnc: error: " << error << "\n";
      exitCode = kExitUsage;
      return std::nullopt;
    }
    sema.defines.push_back(def);
  }
  bool ok = fe.parseFile(opts.file) && fe.analyze(sema);
  if (ok)
    out.pattern = fe.select(opts.pattern);
  printDiagnostics(fe);
  if (!ok || !out.pattern) {
    exitCode = kExitUserError;
    return std::nullopt;
  }
  out.ir = ir::canonicalizePattern(*out.pattern);
  return out;
}


std::string examplesFooter(const std::vector<std::string> &examples) {
  std::string out = "\nExamples:\n";
  for (const std::string &e : examples)
    out += "  " + e + "\n";
  return out;
}

} // namespace attnc::tool
