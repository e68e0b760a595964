//===- Compile.h - The one compile entry point ----------------------------===//
//
// Every way of making a kernel (`attnc compile`, the JIT, `attnc tune`'s
// candidates, the tests) goes through these two stages, in this order:
//
//   prepare   source -> checked Pattern -> canonical IR (once) -> options
//             (backend, tiles tuned for this machine) -> the cache key: what
//             determines the kernel and nothing else
//   build     the IR and options -> a kernel file in memory (format/): the
//             IR as text for the runtime's plan, and for the sparsifier and
//             halide backends their native code
//
// The front end (dsl/, frontend/) runs before `prepare` (Frontend::parse*);
// its diagnostics are the caller's to print. Nothing here writes a file.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/codegen/CodeGen.h"
#include "attnc/format/KernelFile.h"
#include "attnc/frontend/Driver.h"

#include <string>

namespace attnc::compiler {

/// The compiler version recorded in kernels and cache keys.
const char *compilerVersion();

/// "l=128,c=8": the parameters as the kernel metadata stores them.
std::string paramString(const Pattern &pattern);

/// "" when `backend` was built into this attnc, else why not (for the
/// user: which build option or package it needs).
std::string backendUnavailable(codegen::Backend backend);

/// "" when `backend` takes the pattern, else why not: a pattern that reads
/// data runs on the fused, dense and sparsifier backends (prepare refuses
/// halide); one with a score or sink on the fused and dense backends.
std::string dataRefusal(const ir::PatternIR &ir, codegen::Backend backend);

/// What to compile besides the source.
struct CompileRequest {
  std::vector<Define> defines;  ///< -D name=value
  std::string pattern;          ///< which pattern of the source ("" = the first)
  /// The backend and, where set, explicit tiles or a Halide schedule.
  codegen::CodeGenOptions options;
  /// `attnc tune`'s database: its winners for this pattern and machine
  /// replace the default tiles or schedule ("" = none).
  std::string tuningDatabase;
};

/// A checked pattern, ready to build.
struct Compilation {
  const Pattern *pattern = nullptr; ///< owned by the Frontend
  ir::PatternIR ir;
  std::string irText;               ///< ir::writeIr(ir)
  codegen::CodeGenOptions options;  ///< resolved (tuning applied)
  std::string tuning;               ///< what tuning applied ("" = none)
  /// Every input of build(): equal keys give equal kernels. Fused and dense
  /// kernels carry no code, so their key is the IR text and the tiles, not
  /// the source text or the host; code backends add their generator's inputs.
  std::string cacheKey;
};

/// Runs Sema on the parsed `fe`, selects the pattern and canonicalises it.
/// False when the pattern does not check (diagnostics in `fe`) or the
/// backend is unavailable (`error`).
bool prepare(Frontend &fe, const CompileRequest &request, Compilation &out, std::string &error);
/// The same for a pattern that `fe` has already checked (the CLI's
/// loadPattern); `request.defines` and `request.pattern` are not read.
bool prepare(const Frontend &fe, const Pattern &pattern, const CompileRequest &request, Compilation &out,
             std::string &error);

/// Generates the kernel. False and `error` when code generation fails (an
/// internal error for a prepared pattern).
bool build(const Frontend &fe, const Compilation &compilation, format::KernelFile &out, std::string &error);

/// Applies the winner that `attnc tune` recorded in the database at `dbPath`
/// for this pattern, host and `options.backend` (fused: the tile shape tuned
/// at each head dimension, chosen per call by the runtime; halide: the
/// schedule last tuned). Returns a description of what was applied, or "" when nothing
/// was recorded (or the entry is unusable) and `options` is unchanged.
std::string applyTuning(const std::string &dbPath, std::string_view source, const Pattern &pattern,
                        codegen::CodeGenOptions &options);

/// prepare's last steps and build() for an already checked pattern, into
/// encoded bytes (`attnc tune`'s candidates and the tests).
bool buildKernelFile(Frontend &fe, const Pattern &pattern, const codegen::CodeGenOptions &options,
                     std::string &bytes, std::string &error);

} // namespace attnc::compiler

namespace attnc::codegen {
// The names callers used before the driver had its own namespace.
using compiler::applyTuning;
using compiler::buildKernelFile;
using compiler::compilerVersion;
using compiler::paramString;
} // namespace attnc::codegen
