//===- CmdEmit.cpp - attnc emit -------------------------------------------===//
#include "CallData.h"
#include "Common.h"

#include "attnc/codegen/CodeGen.h"
#include "attnc/codegen/HalideGen.h"
#include "attnc/compiler/Compile.h"
#include "attnc/plan/Plan.h"
#include "attnc/support/Check.h"
#include "attnc/tuning/Tuning.h"
#include "cuda/CudaPlan.h"
#include "ScoreProgram.h" // (runtime/lib: rt::compileScore, rt::scoreListing)

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace attnc::tool {
/// runtime/lib/cuda's CudaArgs.h and AttentionKernels.cu (CudaSource.cpp, generated).
extern const char *const kCudaSource;
} // namespace attnc::tool

namespace attnc::tool {

namespace {

/// `emit --stage cuda`: what runs on the GPU -- the plan on 64-row blocks,
/// with n the launches and items its tables hold, then the CUDA C++ of the
/// kernels (generic over the pattern; libattnc carries them compiled).
std::string cudaStage(const ir::PatternIR &ir, int64_t n) {
  std::ostringstream out;
  const plan::Plan plan = rt::cuda::gpuPlan(ir);
  out << "// attnc cuda target: pattern '" << ir.name << "'\n"
      << "// The kernels below are the same for every pattern; the pattern enters as tables built on the\n"
      << "// host from this plan (64-row items, compacted 64-key tiles, per-key row masks on partial\n"
      << "// tiles), per sequence length, and kept on the device. libattnc carries them compiled by nvcc\n"
      << "// for sm_80 and sm_90a (and compute_80 PTX).\n//\n";
  std::istringstream planText(plan::printPlan(plan, 0));
  for (std::string line; std::getline(planText, line);)
    out << "// " << line << "\n";
  if (n > 0) {
    const auto tables = rt::cuda::buildTables(plan, n);
    for (size_t s = 0; s < tables.size(); ++s) {
      const rt::cuda::SetTables &t = tables[s];
      const rt::cuda::TableStats st = rt::cuda::tableStats(t);
      out << "//\n// head set " << s << " at n = " << n << ": " << t.fwdLaunches.size() << " forward launch"
          << (t.fwdLaunches.size() == 1 ? "" : "es") << ", " << t.fwdItems.size() << " items, " << st.tiles
          << " key tiles; " << t.bwdItems.size() << " backward items; table bytes " << t.bytes() << "\n";
      for (const rt::cuda::Launch &l : t.fwdLaunches)
        out << "//   forward launch: " << l.itemCount << " items"
            << (l.writesSlots ? " (chunks of long items)" : l.writesState ? " (a residue re-layout: writes the "
                                                                             "row state)" : "")
            << (l.readsState ? ", starting from the row state" : "") << "\n";
      char ratio[64];
      std::snprintf(ratio, sizeof ratio, "%.3f (%.3f at the warps' grain)",
                    st.useful ? double(st.executedFwd) / double(st.useful) : 1.0,
                    st.useful ? double(st.executedFwdWarps) / double(st.useful) : 1.0);
      out << "//   executed/useful pairs, forward: " << ratio << "\n";
    }
  }
  out << "\n" << kCudaSource;
  return out.str();
}

/// The pattern's `score` and `sink` as source-like lines, each after
/// `prefix` (a comment marker at the backends' stages); "" without them.
std::string modifierLines(const ir::PatternIR &ir, const std::string &prefix) {
  const std::vector<std::string> names = ir.inputNames();
  std::string out;
  if (ir.score)
    out += prefix + "score " + printScore(*ir.score, names) + "\n";
  if (ir.sink)
    out += prefix + "sink " + printScore(*ir.sink, names) + "\n";
  return out;
}

/// `emit --stage plan` of a pattern with a score modifier: each expression
/// and the vector code the runtime compiles it into (rt::compileScore, as
/// the fused kernels run it: forward, then backward with the derivatives by
/// s and by the float inputs' entries), for head 0 at n (1 without --n).
/// Entries read at places fixed per slice (slope[h]) are folded into
/// constants per call; here every float input holds a placeholder value.
std::string modifierListing(const ir::PatternIR &ir, int64_t n) {
  constexpr float kPlaceholder = 0.5f;
  const int64_t heads = std::max<int64_t>(1, ir.numHeads), at = n > 0 ? n : 1;
  std::vector<std::vector<float>> storage(ir.inputs.size());
  std::vector<FloatInput> inputs(ir.inputs.size());
  for (size_t x = 0; x < ir.inputs.size(); ++x) {
    if (!ir.inputs[x].isFloat)
      continue;
    int64_t count = 1;
    for (size_t k = 0; k < ir.inputs[x].rank(); ++k) {
      inputs[x].dims.push_back(inputDim(ir.inputs[x], k, at, heads));
      count *= inputs[x].dims.back();
    }
    storage[x].assign(static_cast<size_t>(std::min<int64_t>(count, int64_t{1} << 24)), kPlaceholder);
    inputs[x].values = storage[x].data();
  }
  const std::vector<std::string> names = ir.inputNames();
  std::ostringstream out;
  out << "score modifiers (compiled per head and length into the tile loops; here head 0 at n = " << at;
  if (ir.hasFloatInputs())
    out << ", " << heads << " head" << (heads == 1 ? "" : "s") << ", every float input entry " << kPlaceholder
        << " where a call's values are folded";
  out << "):\n";
  for (const auto &[word, expr] : {std::pair{"score", ir.score.get()}, std::pair{"sink", ir.sink.get()}}) {
    if (!expr)
      continue;
    out << word << " " << printScore(*expr, names) << "\n";
    // (The listing's lines, indented under their pass.)
    auto listing = [&](bool backward) {
      std::istringstream lines(rt::scoreListing(rt::compileScore(*expr, ir, 0, at, inputs, backward)));
      std::string text;
      for (std::string line; std::getline(lines, line);)
        text += "  " + line + "\n";
      return text;
    };
    try {
      out << "  forward:\n" << listing(false);
      out << "  backward (the derivatives by s and by the float inputs' entries):\n" << listing(true);
    } catch (const InputError &e) {
      out << "  (not compiled at this length: " << e.what() << ")\n";
    }
  }
  return out.str();
}

struct EmitOptions {
  PatternOptions pattern;
  std::string stage;
  std::string output;
  int64_t n = 0;
  int64_t d = 64;
  std::string schedule;
  std::vector<std::string> inputs; ///< --input NAME=FILE.npy (the plan of a pattern that reads data)
};

int runEmit(const EmitOptions &opts) {
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  Stage stage = *parseStage(opts.stage);
  std::string text;
  // The backends' stages take the patterns their backends take.
  if (lp->ir.readsData() && stage == Stage::Halide) {
    std::cerr << "attnc: error: --stage halide: " << compiler::dataRefusal(lp->ir, codegen::Backend::Halide)
              << " (--stage ast, ir and plan show it)\n";
    return kExitUserError;
  }
  // A pattern that reads data has GPU tables only for a call's data: given with --input at --n.
  if (lp->ir.readsData() && stage == Stage::Cuda) {
    bool bound = false;
    if (opts.n > 0 && !bindPatternData(lp->ir, opts.inputs, opts.n, bound))
      return kExitUserError;
    if (!bound) {
      std::string flags;
      for (const auto &in : lp->ir.inputs)
        if (!in.isFloat)
          flags += " --input " + in.name + "=FILE.npy";
      std::cerr << "attnc: error: --stage cuda: pattern '" << lp->ir.name << "' reads data, so its GPU tables are "
                << "those of a call's data (built at each call: docs/cuda.md, \"Patterns that read data\"): give "
                << "--n N and" << flags << " (--stage ast, ir and plan show it without)\n";
      return kExitUserError;
    }
  }
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
    // A pattern that reads data is planned from each call's: its pieces are known without data,
    // its tiles at a length only with the data of a call.
    if (!opts.inputs.empty() && opts.n <= 0) {
      std::cerr << "attnc: error: --input: the plan of a call's data needs its length: add --n N (the "
                << "length the arrays were made for)\n";
      return kExitUsage;
    }
    bool bound = false;
    if (!bindPatternData(lp->ir, opts.inputs, opts.n > 0 ? opts.n : 1, bound))
      return kExitUserError;
    if (lp->ir.readsData() && opts.n > 0 && !bound) {
      std::string flags;
      for (const auto &in : lp->ir.inputs)
        if (!in.isFloat)
          flags += " --input " + in.name + "=FILE.npy";
      std::cerr << "attnc: error: --n " << opts.n << ": pattern '" << lp->ir.name << "' reads data, so its "
                << "tiles at a length are those of a call's data: give them with" << flags
                << " (or leave out --n for its pieces)\n";
      return kExitUserError;
    }
    plan::Plan forward = plan::buildPlan(lp->ir);
    // On data, each piece in the order the fused backend runs it: a class's (its rows and keys a run).
    if (bound)
      for (plan::HeadPlan &hp : forward.heads)
        for (plan::Piece &piece : hp.pieces)
          if (std::shared_ptr<const InputArray> classes = plan::runOrder(piece, opts.n))
            piece = plan::permutePiece(piece, classes);
    const int64_t gradRows = plan::gradTileRows(lp->ir, forward.options);
    text = plan::printPlan(forward, opts.n) + "backward pass: row blocks of " + std::to_string(gradRows) +
           (gradRows == forward.options.tileRows ? " (the forward's)\n" : " (grad_tile_rows)\n");
    if (lp->ir.score || lp->ir.sink)
      text += modifierListing(lp->ir, opts.n);
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
  case Stage::Cuda:
    text = cudaStage(lp->ir, opts.n);
    break;
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
  // The backends' stages (their code is generic over the pattern, or shows its sets) name the
  // expressions as comments; ast, ir and plan print them in their own form.
  if (lp->ir.score || lp->ir.sink) {
    if (stage == Stage::Halide || stage == Stage::Cuda || stage == Stage::Mlir)
      text = modifierLines(lp->ir, "// ") + text;
    else if (stage == Stage::Llvm)
      text = modifierLines(lp->ir, "; ") + text;
    else if (stage == Stage::Asm)
      text = modifierLines(lp->ir, "# ") + text;
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
                  "halide backend's loop nests (Halide's lowered statement after scheduling); cuda: "
                  "the cuda target's GPU plan and the CUDA C++ its kernels are compiled from; mlir: "
                  "the sparse-tensor dialect form (verifies with mlir-opt-19); llvm: optimised LLVM "
                  "IR; asm: host assembly")
      ->required()
      ->check(CLI::IsMember({"ast", "ir", "plan", "halide", "cuda", "mlir", "llvm", "asm"}));
  cmd->add_option("--n", opts->n,
                  "With --stage plan: also report each piece's tiles and executed/useful work at "
                  "this length; with --stage cuda, the GPU tables' launches, items and work")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  cmd->add_option("--d", opts->d,
                  "With --stage halide: the head dimension (32, 64 and 128 have their own code; "
                  "others show the generic entry point)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--schedule", opts->schedule,
                  "With --stage halide: a schedule such as r32-k16-s2x8-o4 (default: the tuned one, "
                  "else r64-k24-s4x6-o6)");
  cmd->add_option("--input", opts->inputs,
                  "With --stage plan or cuda and --n: the data of a pattern that reads some, as for attnc run (an "
                  "int32 or int64 .npy per int input: DIMS, [B, DIMS] or [B, H, DIMS]; batch entry 0, each head "
                  "set's first head): the pieces' tiles (the GPU's tables) and executed/useful work on that data")
      ->type_name("NAME=FILE.npy");
  cmd->add_option("-o,--output", opts->output, "Write to this file instead of stdout");
  cmd->footer(examplesFooter({"attnc emit patterns/fixed.attn --stage ir",
                              "attnc emit patterns/strided.attn --stage ast -o strided.ast",
                              "attnc emit patterns/strided.attn --stage plan --n 16384",
                              "attnc emit patterns/lsh.attn --stage plan --n 4096 --input b0=b0.npy --input b1=b1.npy",
                              "attnc emit patterns/fixed.attn --stage halide --d 64",
                              "attnc emit patterns/strided.attn --stage cuda --n 16384",
                              "attnc emit patterns/fixed.attn --stage mlir | mlir-opt-19"}));
  cmd->callback([opts, &exitCode] { exitCode = runEmit(*opts); });
}

} // namespace attnc::tool
