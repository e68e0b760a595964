//===- CmdCheck.cpp - attnc check -----------------------------------------===//
#include "Common.h"

#include <iostream>

namespace attnc::tool {

namespace {
struct CheckOptions {
  PatternOptions pattern;
  bool quiet = false;
};

int runCheck(const CheckOptions &opts) {
  int exitCode = kExitOk;
  auto loaded = loadPattern(opts.pattern, exitCode);
  if (!loaded)
    return exitCode;
  if (opts.quiet)
    return kExitOk;
  for (const Pattern &p : loaded->frontend->patterns()) {
    std::cout << opts.pattern.file << ": pattern '" << p.name << "' ok: " << p.numHeads()
              << (p.numHeads() == 1 ? " head" : " heads") << (p.causal ? ", causal" : "");
    for (const ParamValue &v : p.params)
      std::cout << ", " << v.name << "=" << v.value;
    // What a call must give, and the modifiers (only where the pattern has them).
    for (const InputDecl &in : p.inputs)
      std::cout << ", input " << in.name << (in.isFloat ? " (float)" : " (int)");
    if (p.score)
      std::cout << ", score";
    if (p.sink)
      std::cout << ", sink";
    std::cout << "\n";
  }
  return kExitOk;
}
} // namespace

void setupCheck(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<CheckOptions>();
  CLI::App *cmd = app.add_subcommand(
      "check", "Parse and check a pattern file; print diagnostics (exit 1 on error)");
  addPatternOptions(*cmd, opts->pattern);
  cmd->add_flag("-q,--quiet", opts->quiet, "Print nothing on success");
  cmd->footer(examplesFooter({"attnc check patterns/fixed.attn",
                              "attnc check patterns/fixed.attn -D l=256 -D c=16"}));
  cmd->callback([opts, &exitCode] { exitCode = runCheck(*opts); });
}

} // namespace attnc::tool
