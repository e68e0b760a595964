//===- FuzzKernels.h - Kernels the runtime targets run, compiled once ------===//
//
// FuzzRunArgs and FuzzCallInputs decode calls onto kernels of fixed
// patterns, compiled in memory for the fused backend at their first use.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/compiler/Compile.h"

#include <cstdlib>
#include <string>

namespace attnc::fuzz {

/// The fused kernel of the first pattern of `source`; aborts when that
/// fails (the harness itself is broken, not the runtime).
inline attnc_kernel *compileFusedKernel(const char *source) {
  Frontend fe;
  std::string bytes, error;
  codegen::CodeGenOptions options;
  options.backend = codegen::Backend::Fused;
  attnc_kernel *kernel = nullptr;
  if (!fe.parseString("fuzz.attn", source) || !fe.analyze({}) ||
      !compiler::buildKernelFile(fe, fe.patterns().front(), options, bytes, error) ||
      attnc_kernel_load_memory(bytes.data(), bytes.size(), &kernel) != ATTNC_OK)
    std::abort();
  return kernel;
}

} // namespace attnc::fuzz
