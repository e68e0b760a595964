//===- CodeGen.h - From the pattern IR to native kernels ------------------===//
//
// The back half of the pipeline, for the sparsifier (reference) backend:
//
//   lowerToMlir      per distinct head set, one func.func over a CSR-encoded
//                    sparse_tensor mask: SDDMM -> row max -> exp -> row sum ->
//                    SpMM, as in-place linalg.generic ops (stage "mlir")
//   runSparsifier    the sparse-tensor pipeline down to the LLVM dialect
//   translateToLlvm  LLVM IR, optimised at O3 for the host CPU (stage "llvm")
//   emitObject       a native object (stage "asm" prints its assembly)
//   linkShared       a shared object, linked in-process with lld
//
// The exported entry points follow runtime/include/attnc/runtime/KernelAbi.h.
// n, d, batch and heads are run-time values: one kernel serves every length.
// Nothing here is visible to the runtime, which never links MLIR.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/frontend/Driver.h"
#include "attnc/codegen/HalideGen.h"
#include "attnc/plan/PatternIR.h"
#include "attnc/plan/Plan.h"
#include "attnc/support/Host.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc::codegen {

enum class Backend {
  Fused,      ///< the plan (Plan.h), executed by the runtime's tile kernels
  Sparsifier, ///< MLIR's sparse-tensor compiler, native code in the kernel file
  Dense,      ///< baseline: every pair computed by the same tiles, the pattern as a mask
  Halide,     ///< the plan's row blocks as Halide 14 code (HalideGen.h) in the kernel file
};

/// "fused" / "sparsifier" / "dense" / "halide".
const char *backendName(Backend backend);
/// The inverse of backendName.
std::optional<Backend> parseBackend(const std::string &name);
/// Every backend name, the default first (for --help and error messages).
const std::vector<std::string> &backendNames();

struct CodeGenOptions {
  Backend backend = Backend::Fused;
  /// Stop after this stage and leave its text in the result; with Asm and
  /// `link`, go on to the shared object.
  Stage stopAfter = Stage::Asm;
  bool link = true;
  /// Fused and dense backends: the tile shape recorded in the kernel.
  plan::PlanOptions planOptions;
  /// Fused backend: shapes tuned per head dimension (metadata tuned_tiles).
  std::vector<std::pair<int64_t, plan::PlanOptions>> tunedTiles;
  /// Fused backend: the GPU forward variants tuned per GPU, dtype and d
  /// (metadata cuda_tuned, tuning::formatCudaTuned).
  std::string cudaTuned;
  /// Halide backend: the schedule template's parameters.
  halide::Schedule halideSchedule;
};

struct CodeGenResult {
  std::string mlir;         ///< sparse-tensor form (verifies with mlir-opt)
  std::string llvmIr;       ///< optimised LLVM IR
  std::string assembly;     ///< host assembly
  std::string sharedObject; ///< ELF shared object bytes
  double seconds = 0;
};

/// Runs the back end for one checked pattern. Returns false and sets `error`
/// when a stage fails (which is an internal error for valid IR).
bool generate(const ir::PatternIR &ir, const dsl::SourceManager &sources, const CodeGenOptions &options,
              CodeGenResult &out, std::string &error);

/// What a kernel is built for and the CPU features in cache keys
/// (support/Host.h: the same with and without MLIR).
using support::hostTarget;
inline std::string hostFeatureString() { return support::hostFeatures(); }

} // namespace attnc::codegen
