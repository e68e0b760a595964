//===- CmdCompile.cpp - attnc compile -------------------------------------===//
#include "Common.h"

#include "attnc/codegen/HalideGen.h"
#include "attnc/compiler/Compile.h"
#include "attnc/tuning/Tuning.h"
#include "attnc/format/KernelFile.h"
#include "attnc/support/Files.h"

#include <chrono>
#include <cstdlib>
#include <iostream>

namespace attnc::tool {

namespace {
struct CompileOptions {
  PatternOptions pattern;
  std::string target = "cpu";
  std::string backend = "fused";
  std::string cpuTarget;
  std::string output;
};

int runCompile(const CompileOptions &opts) {
  if (opts.target != "cpu" && opts.target != "cuda") {
    std::cerr << "attnc: error: --target " << opts.target << " is not a target; available: cpu, cuda\n";
    return kExitUsage;
  }
  if (opts.target == "cuda" && opts.backend != "fused") {
    std::cerr << "attnc: error: --target cuda runs the fused backend's plan on the GPU; --backend "
              << opts.backend << " has no GPU code (leave --backend out)\n";
    return kExitUsage;
  }
  if (!opts.cpuTarget.empty()) {
    if (opts.backend != "halide") {
      std::cerr << "attnc: error: --cpu-target takes --backend halide (it names the CPU that code is for); --backend "
                << opts.backend << " compiles no CPU code (the runtime's kernels pick the CPU's best path)\n";
      return kExitUsage;
    }
    // Read once, by the code generator's first compilation below.
    setenv("ATTNC_HALIDE_TARGET", opts.cpuTarget.c_str(), 1);
  }
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  auto start = std::chrono::steady_clock::now();
  compiler::CompileRequest request;
  request.options.backend = codegen::parseBackend(opts.backend).value_or(codegen::Backend::Fused);
  request.tuningDatabase = tuning::databasePath();
  compiler::Compilation compilation;
  format::KernelFile file;
  std::string error;
  if (!compiler::prepare(*lp->frontend, *lp->pattern, request, compilation, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  if (!compilation.tuning.empty())
    std::cerr << "using tuned " << compilation.tuning << " from " << tuning::databasePath() << "\n";
  if (!compiler::build(*lp->frontend, compilation, file, error)) {
    std::cerr << "attnc: internal error: code generation failed: " << error << "\n";
    return kExitInternal;
  }
  if (opts.target == "cuda") {
    // The GPU code is the runtime's (compiled ahead of time, generic over the
    // pattern); the file carries the pattern the runtime builds its tables from.
    file.metadata["target"] = "cuda";
    file.metadata["dtype"] = "bf16,f16,f32";
  }
  const std::string bytes = format::encodeKernelFile(file);
  if (!support::writeFileAtomically(opts.output, bytes, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "wrote " << opts.output << " (pattern '" << lp->pattern->name << "', "
            << lp->pattern->numHeads() << (lp->pattern->numHeads() == 1 ? " head" : " heads") << ", "
            << bytes.size() << " bytes, " << static_cast<int64_t>(ms) << " ms)\n";
  return kExitOk;
}
} // namespace

void setupCompile(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<CompileOptions>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a pattern to a kernel file that attnc run and the runtime (attnc.h) load");
  addPatternOptions(*cmd, opts->pattern);
  cmd->add_option("--target", opts->target,
                  "cpu (the host CPU) or cuda (NVIDIA GPUs of compute capability 8.0 and newer: the "
                  "runtime's tensor-core kernels read the plan's tables; compiling needs no GPU, and "
                  "the file also runs on the CPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--backend", opts->backend,
                  "fused: the plan of disjoint pieces run by the runtime's fused tile kernels; "
                  "halide: the same plan's row blocks as Halide 14 code compiled into the kernel file "
                  "(for the CPU it compiles on, or --cpu-target's); sparsifier: MLIR's sparse-tensor compiler, native code in the kernel "
                  "file; dense: the dense masked baseline (every pair, the pattern as a mask)")
      ->capture_default_str()
      ->check(CLI::IsMember(codegen::backendNames()));
  std::vector<std::string> cpuTargets = {"host"};
  for (const auto &[name, target] : halide::cpuTargets())
    cpuTargets.push_back(name);
  cmd->add_option("--cpu-target", opts->cpuTarget,
                  "With --backend halide: the CPU its code is for (default host: this machine's best of "
                  "AVX-512, AVX2 + FMA, SSE4.1; the file records it as halide_target, and a CPU without "
                  "those features refuses the kernel with a message)")
      ->check(CLI::IsMember(cpuTargets));
  cmd->add_option("-o,--output", opts->output, "The kernel file to write (conventionally .attnk)")
      ->required();
  cmd->footer(examplesFooter({"attnc compile patterns/fixed.attn -o fixed.attnk",
                              "attnc compile patterns/strided.attn -D l=64 -o strided64.attnk",
                              "attnc compile patterns/fixed.attn --backend sparsifier -o fixed-mlir.attnk",
                              "attnc compile patterns/local.attn --target cuda -o local-gpu.attnk",
                              "attnc compile patterns/fixed.attn --backend halide --cpu-target x86-64-avx2 -o f.attnk"}));
  cmd->callback([opts, &exitCode] { exitCode = runCompile(*opts); });
}

} // namespace attnc::tool
