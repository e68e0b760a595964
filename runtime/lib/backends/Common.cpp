//===- Common.cpp - What several backends share ---------------------------===//
#include "Backend.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <sys/mman.h>
#include <unistd.h>

namespace attnc::rt {

KernelPlans kernelPlans(const LoadedKernel &kernel) {
  const auto &metadata = kernel.file.metadata;
  auto get = [&](const char *key, int64_t fallback) {
    auto it = metadata.find(key);
    return it == metadata.end() ? fallback : std::atoll(it->second.c_str());
  };
  plan::PlanOptions options;
  // (Files without them predate tuning and were built for 32 x 32 tiles.)
  options.tileRows = get("tile_rows", 32);
  options.tileCols = get("tile_cols", 32);
  // (Files without it run the backward pass on the forward's blocks.)
  const bool hasGrad = metadata.count("grad_tile_rows") != 0;
  const int64_t gradRows = get("grad_tile_rows", 0);
  if (options.tileRows < 1 || options.tileRows > 64 || options.tileCols < 1 || options.tileCols > 4096 ||
      (hasGrad && (gradRows < 1 || gradRows > 64)))
    throw RunError{ATTNC_ERROR_CORRUPT_KERNEL, "kernel metadata has bad tile sizes (tile_rows and "
                                               "grad_tile_rows must be 1-64, tile_cols 1-4096)"};
  auto both = [&](const plan::PlanOptions &forward) {
    PassPlans p{plan::buildPlan(kernel.ir, forward), std::nullopt};
    if (hasGrad && gradRows != forward.tileRows)
      p.backward = plan::buildPlan(kernel.ir, {gradRows, forward.tileCols});
    return p;
  };
  KernelPlans plans;
  plans.base = both(options);
  if (auto tuned = metadata.find("tuned_tiles"); tuned != metadata.end()) {
    plan::TunedTiles tiles;
    if (!plan::parseTunedTiles(tuned->second, tiles))
      throw RunError{ATTNC_ERROR_CORRUPT_KERNEL, "kernel metadata has bad tuned_tiles '" + tuned->second + "'"};
    for (const auto &[d, t] : tiles)
      plans.tuned.push_back({d, both(t)});
  }
  return plans;
}

NativeCode::NativeCode(const format::KernelFile &file) {
  const std::string &code = file.code;
  if (code.empty())
    throw RunError{ATTNC_ERROR_CORRUPT_KERNEL, "kernel file has no code section"};
  memfd_ = memfd_create("attnc-kernel", MFD_CLOEXEC);
  if (memfd_ < 0)
    throw RunError{ATTNC_ERROR_IO, std::string("memfd_create failed: ") + std::strerror(errno)};
  size_t done = 0;
  while (done < code.size()) {
    ssize_t w = write(memfd_, code.data() + done, code.size() - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      std::string why = std::strerror(errno);
      close(memfd_);
      throw RunError{ATTNC_ERROR_IO, "cannot stage kernel code: " + why};
    }
    done += static_cast<size_t>(w);
  }
  std::string path = "/proc/self/fd/" + std::to_string(memfd_);
  library_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char *why = dlerror();
    close(memfd_);
    throw RunError{ATTNC_ERROR_CORRUPT_KERNEL,
                   std::string("kernel code cannot be loaded: ") + (why ? why : "unknown dlopen error")};
  }
}

NativeCode::~NativeCode() {
  if (library_)
    dlclose(library_);
  if (memfd_ >= 0)
    close(memfd_);
}

void *NativeCode::symbol(const std::string &name) const {
  void *fn = dlsym(library_, name.c_str());
  if (!fn)
    throw RunError{ATTNC_ERROR_CORRUPT_KERNEL, "kernel code lacks the entry point '" + name + "'"};
  return fn;
}

void checkKeysFit32Bits(int64_t n) {
  if (n > std::numeric_limits<int32_t>::max())
    throw RunError{ATTNC_ERROR_SHAPE, "sequence length " + std::to_string(n) + " does not fit 32-bit keys"};
}

} // namespace attnc::rt
