//===- CudaBench.h - attnc bench --target cuda: CUDA-event timings --------===//
//
// The GPU half of `attnc bench`: random inputs (a score's or a sink's float
// inputs too) copied to a GPU, the kernel run there through attnc_forward /
// attnc_backward on the legacy default stream, timed with CUDA events. The
// memory, copies and events go through the driver libattnc opens
// (Internal.h's attnc_internal_cuda_*): the tool links no CUDA library
// either, and where
// there is no GPU it says why and exits 1.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Common.h"

#include "attnc/attnc.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace attnc::tool {

/// The pattern of `pattern` compiled by the JIT for the fused backend (what
/// the GPU runs); null after printing the error.
attnc_kernel *jitFused(const PatternOptions &pattern);

struct CudaBenchRequest {
  const attnc_kernel *kernel = nullptr;
  std::array<int64_t, 4> qShape{}, kvShape{}; ///< [B, Hq, nq, d], [B, Hkv, nk, d]
  attnc_dtype dtype = ATTNC_DTYPE_BF16;       ///< bf16, f16 or f32
  int device = 0;
  int repeat = 5;
  bool backward = false;
};

struct CudaBenchResult {
  std::string deviceName;
  int major = 0, minor = 0;
  double firstMs = 0;     ///< the first call at this n (it builds and uploads the tables), host clock
  double forwardMs = 0;   ///< median, CUDA events around 10 queued calls, O alone
  double callMs = 0;      ///< median of single calls each waited for (the latency, host included)
  double forwardLseMs = 0, backwardMs = 0; ///< with `backward`: a training step's two calls
};

/// Runs the request's kernel on Normal(0, 1) inputs on GPU `device`: one
/// warm-up call, then `repeat` timings by CUDA events of 10 calls queued
/// back to back, and `repeat` single calls each waited for (medians);
/// with `backward`, as many training steps (forward with the log-sum-exp,
/// then dQ, dK, dV). ATTNC_OK, or the failing call's status with `error`
/// set (ATTNC_ERROR_UNSUPPORTED: no GPU, no driver, a libattnc without the
/// cuda target).
attnc_status cudaBench(const CudaBenchRequest &request, CudaBenchResult &out, std::string &error);

/// Host arrays of one call (`attnc run --target cuda`): contiguous f32
/// views; dO, dQ, dK, dV only for a training step (`dO` non-null).
struct CudaRunArrays {
  attnc_tensor q{}, k{}, v{}, o{};
  const attnc_tensor *dO = nullptr;
  attnc_tensor *dq = nullptr, *dk = nullptr, *dv = nullptr;
  /// The pattern's inputs (int data, a score's or a sink's floats; contiguous host views), copied to the device too.
  std::vector<attnc_input> inputs;
};

/// Copies Q, K, V (and dO) to GPU `device`, runs the kernel there once
/// (forward with the log-sum-exp and the backward with `dO`) and copies O
/// (and dQ, dK, dV) back into the host arrays; each call's time (until its
/// results are back) in `forwardMs` / `backwardMs`. ATTNC_OK, or the
/// failing call's status with `error` set.
attnc_status cudaRun(const attnc_kernel *kernel, int device, CudaRunArrays &arrays, double &forwardMs,
                     double &backwardMs, std::string &error);

} // namespace attnc::tool
