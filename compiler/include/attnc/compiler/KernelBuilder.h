//===- KernelBuilder.h - A checked pattern to kernel-file bytes -----------===//
#pragma once

#include "attnc/compiler/CodeGen.h"
#include "attnc/compiler/Driver.h"

#include <string>

namespace attnc::codegen {

/// The compiler version recorded in kernels and cache keys.
const char *compilerVersion();

/// "l=128,c=8": the parameters as the kernel metadata stores them.
std::string paramString(const Pattern &pattern);

/// Generates code for `pattern` (from `fe`) and wraps it, with its source and
/// metadata, in the kernel file format. Returns false and sets `error`.
bool buildKernelFile(Frontend &fe, const Pattern &pattern, const CodeGenOptions &options,
                     std::string &bytes, std::string &error);

} // namespace attnc::codegen
