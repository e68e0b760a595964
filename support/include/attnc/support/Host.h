//===- Host.h - What machine this process runs on -------------------------===//
//
// Kernel metadata, JIT cache keys and the tuning database name the machine a
// kernel was built or tuned on. These come from the C++ compiler's target
// macros and the operating system (/proc/cpuinfo), not from LLVM, so that
// builds with and without MLIR agree on them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace attnc::support {

/// "x86_64-linux:AMD EPYC 9R14 96-Core Processor": the architecture and the
/// CPU's model name ("unknown" where the system does not say).
std::string hostTarget();

/// The CPU's instruction-set features that kernels depend on, sorted and
/// comma-separated ("avx2,avx512bw,avx512f,fma"), "" where unknown.
std::string hostFeatures();

} // namespace attnc::support
