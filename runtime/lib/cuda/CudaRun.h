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

namespace attnc::rt {
class CallInputs;
}

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

/// Host copies of a GPU call's inputs (`inputs`: tensors on `device`, each
/// checked to be its memory): waits for the call's stream, copies each
/// tensor's extent into `storage` and returns views of the copies with the
/// same shapes and strides (what CallInputs reads). A capture fails here,
/// saying why. Throws RunError.
std::vector<attnc_input> hostCopies(const attnc_device &device, const attnc_input *inputs, int64_t count,
                                    std::vector<std::vector<unsigned char>> &storage);

/// Forces the bf16 d <= 64 forward kernel's variant for every call of the
/// process (0-3; -1: none, the kernel's tuned one or ATTNC_CUDA_FWD_VARIANT):
/// what `attnc tune --target cuda` measures with.
void forceForwardVariant(int variant);
/// Forces the backward's variant likewise (0 the default, 1 wgmma; -1: none,
/// ATTNC_CUDA_BWD_VARIANT decides).
void forceBackwardVariant(int variant);

/// A float input the kernels read one entry of per query head (`float[heads]`).
struct HeadInput {
  int64_t input = -1;       ///< its index among the pattern's inputs (-1: none)
  std::string name, grad;   ///< its name and its gradient's ("d_" + it), for messages
  explicit operator bool() const { return input >= 0; }
};

/// A pattern's `score` and `sink` as the GPU kernels run them.
struct Modifiers {
  /// A soft cap alone, capPost * tanh(capPre * s) (Gemma 2's `score c * tanh(s / c)`):
  /// the capped kernels. capPost 0: no cap.
  float capPre = 0, capPost = 0;
  /// ALiBi's `score s + slope[h] * (j - i)` (or `(i - j)`: slopeSign -1): the alibi kernels.
  HeadInput slope;
  float slopeSign = 0;
  /// `sink z[h]` (gpt-oss's): a logit per query head.
  HeadInput sink;
  bool capped() const { return capPost != 0; }
  /// The kernels' family (AttentionKernels.cu's Mod): 0 plain, 1 capped, 2 alibi.
  int family() const { return capped() ? 1 : slope ? 2 : 0; }
};

/// The modifiers of `ir` as the GPU runs them; throws RunError
/// (ATTNC_ERROR_UNSUPPORTED) naming the score or sink it does not run yet,
/// or a float input that neither reads.
Modifiers gpuModifiers(const ir::PatternIR &ir);

/// A GPU call's per-head float inputs (Modifiers' slope and sink: their
/// values, checked by the caller with CallInputs' checkFloatInput but for
/// living on the device) and where their gradients go (f32 of their shapes;
/// null: not asked for). Null exactly where the pattern has no such input.
struct HeadTensors {
  const attnc_tensor *slope = nullptr, *slopeGrad = nullptr;
  const attnc_tensor *sink = nullptr, *sinkGrad = nullptr;
};

class Engine {
public:
  /// `cudaTuned`: the kernel's metadata cuda_tuned (TunedVariant entries).
  Engine(const ir::PatternIR &ir, std::vector<int64_t> headToSet, const std::string &cudaTuned = "");
  ~Engine();

  /// `floats`: the modifiers' per-head inputs (the forward: no gradients).
  /// `data`: a pattern that reads data, the call's inputs (on the host,
  /// hostCopies): each (batch, head) slice runs on tables built from its own
  /// inputs at this call, in raster order (the plan bound to them: a row
  /// block's keys are the union of its rows'), uploaded and freed with it.
  void forward(const attnc_device &device, const Dims &dims, const attnc_tensor &q, const attnc_tensor &k,
               const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor *lse, float scale,
               const HeadTensors &floats = {}, const CallInputs *data = nullptr);
  void backward(const attnc_device &device, const Dims &dims, const attnc_tensor &q, const attnc_tensor &k,
                const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor &dO, const attnc_tensor &lse,
                const attnc_tensor &dq, const attnc_tensor &dk, const attnc_tensor &dv, float scale,
                const HeadTensors &floats = {}, const CallInputs *data = nullptr);

  /// The pattern's modifiers as the kernels run them (default when they cannot: calls then fail saying why).
  const Modifiers &modifiers() const { return modifiers_; }

  struct DeviceTables;

private:
  std::shared_ptr<const DeviceTables> tables(int device, int64_t n);
  /// Throws unless the GPU runs the pattern's modifiers and the call gives
  /// the per-head inputs it has, and only those.
  void checkModifiers(const HeadTensors &floats) const;

  plan::Plan plan_;
  Modifiers modifiers_;
  std::string unsupported_; ///< why the GPU cannot run the pattern's modifiers ("": it can)
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
