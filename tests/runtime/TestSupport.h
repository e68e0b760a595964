//===- TestSupport.h - Shared helpers of the kernel tests -----------------===//
#pragma once

#include "../ScratchDir.h"

#include "attnc/attnc.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace attnc::test {

/// Deterministic pseudo-random floats in [-scale, scale].
std::vector<float> randomFloats(size_t count, uint32_t seed, float scale);

/// The independent reference: membership from the brute-force oracle over
/// Sema's terms (not the canonical IR or the CSR the kernels use), softmax in
/// double. Q, K, V, O are contiguous [batch, heads, n, d].
std::vector<float> referenceFromOracle(const std::string &patternPath,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d);

/// Same for pattern source text.
std::vector<float> referenceFromSource(const std::string &source,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d);

/// A contiguous [batch, heads, n, d] view.
attnc_tensor view(std::vector<float> &data, int64_t batch, int64_t heads, int64_t n, int64_t d);

/// The path of a library pattern.
std::string patternPath(const std::string &name);

/// The backends of `all` that this build has (ATTNC_WITH_MLIR / _HALIDE):
/// the suites run every backend the build can run, and no other.
std::vector<const char *> builtBackends(std::initializer_list<const char *> all);

} // namespace attnc::test
