//===- CudaRun.h - Running a kernel's pattern on a CUDA GPU ---------------===//
//
// The cuda target's host side: per kernel, the GPU plan (the pattern on
// blocks of 64 rows) and, per (device, n), its tables on the device; per
// call, the checks that every tensor lives on the named device, packing of
// what the kernels cannot read in place (f32, unaligned or strided rows),
// and the launches on the caller's stream. Every failure is a RunError.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/plan/PatternIR.h"
#include "attnc/plan/Plan.h"

#include "CudaPlan.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace attnc::rt::cuda {

/// Whether this libattnc carries the GPU code (built with nvcc).
bool compiledIn();

/// Throws RunError unless device `index` can run the kernels (a driver, the
/// device, compute capability 8.0+, the GPU code loaded).
void checkDevice(int index);

/// The sizes of a validated call (Runtime.cpp's Shape).
struct Dims {
  int64_t batch = 0, hq = 0, hkv = 0, nq = 0, nk = 0, d = 0;
  int64_t first = -1; ///< the queries' first position (attnc_run_forward_at); -1: nk - nq
};

/// Forces the bf16 d <= 64 forward kernel's variant for every call of the
/// process (0-3; -1: none, the kernel's tuned one or ATTNC_CUDA_FWD_VARIANT):
/// what `attnc tune --target cuda` measures with.
void forceForwardVariant(int variant);
/// Forces the backward's variant likewise (0 the default, 1 wgmma; -1: none,
/// ATTNC_CUDA_BWD_VARIANT decides).
void forceBackwardVariant(int variant);

class Engine {
public:
  /// `cudaTuned`: the kernel's metadata cuda_tuned (TunedVariant entries).
  Engine(const ir::PatternIR &ir, std::vector<int64_t> headToSet, const std::string &cudaTuned = "");
  ~Engine();

  void forward(const attnc_device &device, const Dims &dims, const attnc_tensor &q, const attnc_tensor &k,
               const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor *lse, float scale);
  void backward(const attnc_device &device, const Dims &dims, const attnc_tensor &q, const attnc_tensor &k,
                const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor &dO, const attnc_tensor &lse,
                const attnc_tensor &dq, const attnc_tensor &dk, const attnc_tensor &dv, float scale);

  struct DeviceTables;

private:
  std::shared_ptr<const DeviceTables> tables(int device, int64_t n);

  plan::Plan plan_;
  std::vector<int64_t> headToSet_;
  std::vector<TunedVariant> tuned_;
  std::mutex mutex_;
  /// (device, n) -> its tables and when they were last used (uses_ then).
  struct Cached {
    std::shared_ptr<const DeviceTables> tables;
    uint64_t used = 0;
  };
  std::map<std::pair<int, int64_t>, Cached> tables_;
  uint64_t uses_ = 0;
};

} // namespace attnc::rt::cuda
