//===- MlirSmoke.h - Proves that MLIR 19 links and runs -------------------===//
#pragma once

#include <string>

namespace attnc::mlirbridge {

/// Builds an empty builtin.module in a fresh MLIRContext, verifies it and
/// returns its printed form (empty string when verification fails).
std::string buildEmptyModule();

} // namespace attnc::mlirbridge
