//===- KernelBuilder.h - A checked pattern to kernel-file bytes -----------===//
#pragma once

#include "attnc/codegen/CodeGen.h"
#include "attnc/frontend/Driver.h"

#include <string>

namespace attnc::codegen {

/// The compiler version recorded in kernels and cache keys.
const char *compilerVersion();

/// "l=128,c=8": the parameters as the kernel metadata stores them.
std::string paramString(const Pattern &pattern);

/// Applies the winner that `attnc tune` recorded in the database at `dbPath`
/// for this pattern, host and `options.backend` (fused: the tile shape tuned
/// at each head dimension, chosen per call by the runtime; halide: the
/// schedule last tuned). Returns a description of what was applied, or "" when nothing
/// was recorded (or the entry is unusable) and `options` is unchanged.
std::string applyTuning(const std::string &dbPath, std::string_view source, const Pattern &pattern,
                        CodeGenOptions &options);

/// Generates code for `pattern` (from `fe`) and wraps it, with its source and
/// metadata, in the kernel file format. Returns false and sets `error`.
bool buildKernelFile(Frontend &fe, const Pattern &pattern, const CodeGenOptions &options,
                     std::string &bytes, std::string &error);

} // namespace attnc::codegen
