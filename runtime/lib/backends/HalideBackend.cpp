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
#include <string>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace attnc::rt {

namespace {

struct HalideState : LengthState {
  std::vector<std::vector<HalideBlocks>> blocks; ///< [set][list]
};

struct HalideWorker : Scratch {
  HalideScratch halide;
};

/// Kernels written before halide_target was recorded were all compiled for this.
constexpr const char *kOldHalideTarget = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";

/// The features of a Halide target string (the kernel's `halide_target`)
/// that this CPU lacks, comma-separated ("" when it has them all); a feature
/// this runtime does not know counts as missing.
std::string missingCpuFeatures(const std::string &target) {
  std::string missing;
  auto lacks = [&](const std::string &what) { missing += (missing.empty() ? "" : ", ") + what; };
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (target.rfind("x86-64-", 0) != 0)
    return "an x86-64 CPU (the code is for '" + target + "')";
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  // Halide's feature names and whether this CPU has them.
  const std::pair<const char *, bool> known[] = {
      {"sse41", __builtin_cpu_supports("sse4.1")},
      {"avx", __builtin_cpu_supports("avx")},
      {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},
      {"f16c", f16c},
      {"avx512", __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd")},
      {"avx512_skylake", __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                             __builtin_cpu_supports("avx512vl")},
      {"linux", true},
      {"no_runtime", true},
  };
  size_t begin = std::string("x86-64-").size();
  while (begin < target.size()) {
    const size_t end = std::min(target.find('-', begin), target.size());
    const std::string f = target.substr(begin, end - begin);
    begin = end + 1;
    const auto *it = std::find_if(std::begin(known), std::end(known), [&](const auto &k) { return f == k.first; });
    if (it == std::end(known))
      lacks(f + " (a feature this runtime does not know)");
    else if (!it->second)
      lacks(f);
  }
#else
  missing = "an x86-64 CPU (the code is for '" + target + "')";
#endif
  return missing;
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
    // The code is for the CPU it was compiled for (halide_target); this one
    // must have every feature of it.
    auto target = metadata.find("halide_target");
    const std::string code = target == metadata.end() ? kOldHalideTarget : target->second;
    if (const std::string missing = missingCpuFeatures(code); !missing.empty())
      throw RunError{ATTNC_ERROR_UNSUPPORTED, "this halide kernel's code is for the Halide target '" + code +
                                                  "' and this CPU lacks " + missing +
                                                  "; compile the pattern on this machine (the halide backend "
                                                  "compiles for the CPU it runs on), or with --backend fused"};
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
