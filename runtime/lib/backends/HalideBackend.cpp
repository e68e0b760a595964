//===- HalideBackend.cpp - Halide code over the plan's row blocks ---------===//
//
// Backend "halide": the kernel file carries Halide 14 code compiled ahead of
// time for the plan's row blocks (HalideExecutor.h says what it reads). Per
// n, the blocks become the flat lists the code reads. The code runs a
// slice's blocks on Halide's own thread pool, so slices run one at a time
// with every thread of the call given to it.
//
//===----------------------------------------------------------------------===//
#include "Backend.h"

#include "../HalideExecutor.h"

#include <algorithm>
#include <cstdio>

namespace attnc::rt {

namespace {

struct HalideState : LengthState {
  std::vector<std::vector<HalideBlocks>> blocks; ///< [set][list]
};

struct HalideWorker : Scratch {
  HalideScratch halide;
};

bool cpuHasAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("fma");
#else
  return false; // not even x86-64
#endif
}

class HalideBackend final : public Backend {
public:
  explicit HalideBackend(const LoadedKernel &kernel) : plan_(kernelPlans(kernel).base.forward) {
    // The code was compiled for the schedule's block rows and key chunk.
    const auto &metadata = kernel.file.metadata;
    auto schedule = metadata.find("halide_schedule");
    int rows = 0, chunk = 0;
    if (schedule == metadata.end() || std::sscanf(schedule->second.c_str(), "r%d-k%d-", &rows, &chunk) != 2 ||
        rows != plan_.options.tileRows || chunk != plan_.options.tileCols)
      throw RunError{ATTNC_ERROR_CORRUPT_KERNEL,
                     "kernel metadata: the halide schedule does not match tile_rows and tile_cols"};
    if (!cpuHasAvx512())
      throw RunError{ATTNC_ERROR_UNSUPPORTED, "this halide kernel's code is for AVX-512 (Skylake-AVX512 "
                                              "features) and this CPU lacks them; compile the pattern with "
                                              "--backend fused"};
    code_ = std::make_unique<NativeCode>(kernel.file);
    std::string error;
    if (!entries_.load(code_->handle(), error))
      throw RunError{ATTNC_ERROR_CORRUPT_KERNEL, error};
  }

  std::shared_ptr<const LengthState> prepare(int64_t n, int64_t d, Pass, int threads) const override {
    checkKeysFit32Bits(n);
    auto state = std::make_shared<HalideState>();
    state->blocks = buildHalideBlocks(plan_, n, threads);
    return state;
  }

  const char *name() const override { return "halide"; }
  bool writesLse() const override { return true; }

  std::unique_ptr<Scratch> newScratch() const override { return std::make_unique<HalideWorker>(); }

  Threading threading() const override { return Threading::Inside; }

  void beginRun(int threads) const override { entries_.setNumThreads(threads); }

  void runSlice(const LengthState &state, const Slice &s, Scratch &scratch, int threads) const override {
    const auto &blocks = static_cast<const HalideState &>(state).blocks[static_cast<size_t>(s.set)];
    std::string error;
    if (!runHalideHead(entries_, plan_, blocks, s.n, s.d, s.q, s.k, s.v, s.o, s.scale,
                       static_cast<HalideWorker &>(scratch).halide, error))
      throw RunError{ATTNC_ERROR_INTERNAL, error};
    if (s.lse) // the lists' rows merged by their log-sum-exp: each row's own
      std::copy_n(static_cast<HalideWorker &>(scratch).halide.lse.data(), s.n, s.lse);
  }

private:
  plan::Plan plan_; ///< the schedule's blocks (no tuned shapes, no backward pass)
  std::unique_ptr<NativeCode> code_;
  HalideCode entries_;
};

} // namespace

std::unique_ptr<Backend> makeHalideBackend(const LoadedKernel &kernel) {
  return std::make_unique<HalideBackend>(kernel);
}

} // namespace attnc::rt
