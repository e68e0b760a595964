//===- LowerToMlir.h - Pattern IR to the MLIR sparse-tensor dialect -------===//
#pragma once

#include "attnc/dsl/Diagnostics.h"
#include "attnc/plan/PatternIR.h"

#include <string>

namespace attnc::codegen {

/// Name of the MLIR function computing distinct head set `set`.
std::string headFunctionName(size_t set);

/// MLIR text, one function per distinct head set (see LowerToMlir.cpp for
/// the op chain). Verifies with mlir-opt-19.
std::string lowerToMlir(const ir::PatternIR &ir, const dsl::SourceManager &sources);

} // namespace attnc::codegen
