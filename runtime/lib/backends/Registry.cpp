//===- Registry.cpp - The backends this runtime was built with ------------===//
//
// One line per backend: the name a kernel file's "backend" metadata gives
// and the factory of its file. A backend whose support was left out of this
// build (the halide executor needs HalideRuntime.h) is listed with no
// factory, so that its kernels get a clear ATTNC_ERROR_UNSUPPORTED.
//
//===----------------------------------------------------------------------===//
#include "Backend.h"

#include <string>

#ifndef ATTNC_RUNTIME_HALIDE
#define ATTNC_RUNTIME_HALIDE 0
#endif

namespace attnc::rt {

std::unique_ptr<Backend> makeFusedBackend(const LoadedKernel &kernel);
std::unique_ptr<Backend> makeDenseBackend(const LoadedKernel &kernel);
std::unique_ptr<Backend> makeSparsifierBackend(const LoadedKernel &kernel);
#if ATTNC_RUNTIME_HALIDE
std::unique_ptr<Backend> makeHalideBackend(const LoadedKernel &kernel);
#endif

namespace {

struct Entry {
  const char *name;
  std::unique_ptr<Backend> (*make)(const LoadedKernel &);
  const char *missing; ///< why a backend without a factory is missing
};

const Entry kBackends[] = {
    {"fused", &makeFusedBackend, nullptr},
    {"dense", &makeDenseBackend, nullptr},
    {"sparsifier", &makeSparsifierBackend, nullptr},
#if ATTNC_RUNTIME_HALIDE
    {"halide", &makeHalideBackend, nullptr},
#else
    {"halide", nullptr, "this runtime was built without HalideRuntime.h (Debian: libhalide14-0-dev)"},
#endif
};

} // namespace

std::unique_ptr<Backend> makeBackend(const LoadedKernel &kernel) {
  auto it = kernel.file.metadata.find("backend");
  // (Kernel files without the key predate it: they carry sparsifier code.)
  const std::string name = it == kernel.file.metadata.end() ? "sparsifier" : it->second;
  std::string known;
  for (const Entry &e : kBackends) {
    if (name == e.name) {
      if (!e.make)
        throw RunError{ATTNC_ERROR_UNSUPPORTED, "kernel backend '" + name + "' is not available: " + e.missing};
      // Score modifiers are compiled into the fused kernels (and the dense
      // baseline, the same code); the sparsifier's and halide's generated
      // code has no place for them yet.
      if ((kernel.ir.score || kernel.ir.sink) && name != "fused" && name != "dense")
        throw RunError{ATTNC_ERROR_UNSUPPORTED, "pattern '" + kernel.ir.name + "' has a " +
                                                    (kernel.ir.score ? "score" : "sink") +
                                                    " modifier, which the " + name +
                                                    " backend does not take: compile it with --backend fused "
                                                    "(or dense, the baseline)"};
      return e.make(kernel);
    }
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  throw RunError{ATTNC_ERROR_CORRUPT_KERNEL, "kernel file names an unknown backend '" + name + "' (this runtime knows " + known + ")"};
}

} // namespace attnc::rt
