//===- Main.cpp - The attnc command line ----------------------------------===//
//
// Builds the CLI::App from one setup function per subcommand (Cmd*.cpp) and
// maps outcomes to exit codes: 0 ok, 1 user error, 2 usage error, 3 internal
// error.
//
//===----------------------------------------------------------------------===//
#include "Common.h"

#include "attnc/dsl/Diagnostics.h"

#include <iostream>

int main(int argc, char **argv) {
  using namespace attnc::tool;
  CLI::App app{"attnc " ATTNC_VERSION " - a compiler for sparse attention patterns.\n"
               "Write the pattern once as index sets in a .attn file; attnc checks it, draws it,\n"
               "analyses it and compiles it to attention kernels.",
               "attnc"};
  app.set_version_flag("--version", "attnc " ATTNC_VERSION);
  app.require_subcommand(1);
  app.footer(examplesFooter({"attnc check patterns/fixed.attn",
                             "attnc show patterns/strided.attn --n 64 -D l=8",
                             "attnc analyze patterns/fixed.attn --n 4096 --block 64 --json",
                             "attnc emit patterns/fixed.attn --stage ir"}) +
             "\nExit codes: 0 success, 1 error in the pattern or inputs, 2 usage error,\n"
             "3 internal error (a bug in attnc; please report it).");
  int exitCode = kExitOk;
  setupCheck(app, exitCode);
  setupShow(app, exitCode);
  setupAnalyze(app, exitCode);
  setupEmit(app, exitCode);
  setupCompile(app, exitCode);
  setupRun(app, exitCode);
  setupBench(app, exitCode);
  setupTune(app, exitCode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp &e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion &e) {
    return app.exit(e);
  } catch (const CLI::ParseError &e) {
    app.exit(e);
    return kExitUsage;
  } catch (const attnc::dsl::InternalError &e) {
    std::cerr << "attnc: " << e.message << "\n";
    return kExitInternal;
  } catch (const std::exception &e) {
    std::cerr << "attnc: internal error: " << e.what() << "\n";
    return kExitInternal;
  }
  return exitCode;
}
