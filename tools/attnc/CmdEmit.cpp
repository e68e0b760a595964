//===- CmdEmit.cpp - attnc emit -------------------------------------------===//
#include "Common.h"

#include "attnc/codegen/CodeGen.h"
#include "attnc/codegen/HalideGen.h"
#include "attnc/compiler/Compile.h"
#include "attnc/plan/Plan.h"
#include "attnc/tuning/Tuning.h"

#include <algorithm>
#include <fstream>
#include <iostream>

namespace attnc::tool {

namespace {
struct EmitOptions {
  PatternOptions pattern;
  std::string stage;
  std::string output;
  int64_t n = 0;
  int64_t d = 64;
  std::string schedule;
};

int runEmit(const EmitOptions &opts) {
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  Stage stage = *parseStage(opts.stage);
  std::string text;
  switch (stage) {
  case Stage::Ast:
    text = dsl::printAst(lp->frontend->module(), lp->frontend->sources());
    break;
  case Stage::Ir: {
    const dsl::SourceManager &sources = lp->frontend->sources();
    text = ir::printPatternIR(lp->ir, [&](SourceRange r) {
      auto [line, col] = sources.lineAndColumn(r.begin);
      return std::string(sources.name(r.begin.buffer)) + ":" + std::to_string(line) + ":" + std::to_string(col);
    });
    break;
  }
  case Stage::Plan: {
    const plan::Plan forward = plan::buildPlan(lp->ir);
    const int64_t gradRows = plan::gradTileRows(lp->ir, forward.options);
    text = plan::printPlan(forward, opts.n) + "backward pass: row blocks of " + std::to_string(gradRows) +
           (gradRows == forward.options.tileRows ? " (the forward's)\n" : " (grad_tile_rows)\n");
    break;
  }
  case Stage::Halide: {
    if (std::string why = compiler::backendUnavailable(codegen::Backend::Halide); !why.empty()) {
      std::cerr << "attnc: error: --stage halide: " << why << "\n";
      return kExitUserError;
    }
    // The schedule: --schedule, else a tuned one, else the default.
    codegen::CodeGenOptions cg;
    cg.backend = codegen::Backend::Halide;
    if (opts.schedule.empty())
      codegen::applyTuning(tuning::databasePath(), lp->frontend->sourceText(), *lp->pattern, cg);
    else if (!halide::parseScheduleName(opts.schedule, cg.halideSchedule)) {
      std::cerr << "attnc: error: --schedule '" << opts.schedule
                << "' is not a valid schedule (rROWS-kCHUNK-sVECTORSxKEYS-oROWS, e.g. "
                << halide::scheduleName({}) << ")\n";
      return kExitUsage;
    }
    const bool specialised = std::count(halide::specialisedDims().begin(), halide::specialisedDims().end(),
                                        static_cast<int>(opts.d)) > 0;
    std::string error;
    if (!halide::loweredStatement(cg.halideSchedule, specialised ? static_cast<int>(opts.d) : 0, text,
                                  error)) {
      std::cerr << "attnc: internal error: " << error << "\n";
      return kExitInternal;
    }
    text = "// Halide schedule " + halide::scheduleName(cg.halideSchedule) + ", entry point " +
           halide::entryName(specialised ? static_cast<int>(opts.d) : 0) + ", target " +
           halide::targetString() + "\n" + text;
    break;
  }
  case Stage::Mlir:
  case Stage::Llvm:
  case Stage::Asm: {
#if ATTNC_HAVE_MLIR
    codegen::CodeGenOptions cg;
    cg.stopAfter = stage;
    cg.link = false;
    codegen::CodeGenResult result;
    std::string error;
    if (!codegen::generate(lp->ir, lp->frontend->sources(), cg, result, error)) {
      std::cerr << "attnc: internal error: code generation failed: " << error << "\n";
      return kExitInternal;
    }
    text = stage == Stage::Mlir ? result.mlir : stage == Stage::Llvm ? result.llvmIr : result.assembly;
    break;
#else
    std::cerr << "attnc: error: --stage " << stageName(stage) << ": "
              << compiler::backendUnavailable(codegen::Backend::Sparsifier) << "\n";
    return kExitUserError;
#endif
  }
  }
  if (opts.output.empty() || opts.output == "-") {
    std::cout << text;
    return kExitOk;
  }
  std::ofstream out(opts.output, std::ios::binary);
  if (!(out << text)) {
    std::cerr << "attnc: error: cannot write '" << opts.output << "'\n";
    return kExitUserError;
  }
  return kExitOk;
}
} // namespace

void setupEmit(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<EmitOptions>();
  CLI::App *cmd = app.add_subcommand("emit", "Print one stage of the compilation pipeline");
  addPatternOptions(*cmd, opts->pattern);
  cmd->add_option("--stage", opts->stage,
                  "ast: the parsed syntax tree; ir: the canonical pattern IR (generators per "
                  "head); plan: the fused backend's disjoint pieces, layouts and tiles; halide: the "
                  "halide backend's loop nests (Halide's lowered statement after scheduling); mlir: "
                  "the sparse-tensor dialect form (verifies with mlir-opt-19); llvm: optimised LLVM "
                  "IR; asm: host assembly")
      ->required()
      ->check(CLI::IsMember({"ast", "ir", "plan", "halide", "mlir", "llvm", "asm"}));
  cmd->add_option("--n", opts->n,
                  "With --stage plan: also report each piece's tiles and executed/useful work at "
                  "this length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  cmd->add_option("--d", opts->d,
                  "With --stage halide: the head dimension (32, 64 and 128 have their own code; "
                  "others show the generic entry point)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--schedule", opts->schedule,
                  "With --stage halide: a schedule such as r32-k16-s2x8-o4 (default: the tuned one, "
                  "else r64-k24-s4x6-o6)");
  cmd->add_option("-o,--output", opts->output, "Write to this file instead of stdout");
  cmd->footer(examplesFooter({"attnc emit patterns/fixed.attn --stage ir",
                              "attnc emit patterns/strided.attn --stage ast -o strided.ast",
                              "attnc emit patterns/strided.attn --stage plan --n 16384",
                              "attnc emit patterns/fixed.attn --stage halide --d 64",
                              "attnc emit patterns/fixed.attn --stage mlir | mlir-opt-19"}));
  cmd->callback([opts, &exitCode] { exitCode = runEmit(*opts); });
}

} // namespace attnc::tool
