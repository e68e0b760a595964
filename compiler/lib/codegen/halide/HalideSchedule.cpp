//===- HalideSchedule.cpp - Halide schedules and the code generator's loader -===//
//
// Everything of the halide backend that does not need Halide itself: the
// schedule template's parameters, names and checks, and the loader of the
// code generator. The generator (lib/halide/HalideGen.cpp, Halide 14 and its
// LLVM 14) is a module of its own, `libattnc_halidegen.so`, opened on the
// first compilation or lowering that needs it: every other use of attnc (the
// fused and sparsifier backends, running halide kernels, analyses) never
// loads Halide.
//
//===----------------------------------------------------------------------===//
#include "attnc/codegen/HalideGen.h"

#include "attnc/format/KernelAbi.h"

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <string>
#include <vector>

namespace attnc::halide {

std::string validate(const Schedule &s) {
  if (s.rows != 16 && s.rows != 32 && s.rows != 64)
    return "rows per block must be 16, 32 or 64, not " + std::to_string(s.rows);
  if (s.scoreRowVectors < 1 || s.rows % (16 * s.scoreRowVectors) != 0)
    return "the score tile's 16 x " + std::to_string(s.scoreRowVectors) + " rows must divide " +
           std::to_string(s.rows);
  if (s.keyChunk < 1 || s.keyChunk > 256)
    return "the key chunk must be 1 to 256 keys, not " + std::to_string(s.keyChunk);
  if (s.scoreKeys < 1 || s.keyChunk % s.scoreKeys != 0)
    return "the score tile's " + std::to_string(s.scoreKeys) + " keys must divide the key chunk " +
           std::to_string(s.keyChunk);
  if (s.scoreRowVectors * s.scoreKeys > 28)
    return "the score tile needs " + std::to_string(s.scoreRowVectors * s.scoreKeys) +
           " accumulators; at most 28 fit 32 vector registers";
  if (s.outRows < 1 || s.outRows > s.rows || s.outRows > 16)
    return "the output tile's rows must be 1 to min(16, rows), not " + std::to_string(s.outRows);
  return {};
}

std::string scheduleName(const Schedule &s) {
  char name[80]; // the format parseScheduleName reads
  std::snprintf(name, sizeof name, "r%d-k%d-s%dx%d-o%d", s.rows, s.keyChunk, s.scoreRowVectors,
                s.scoreKeys, s.outRows);
  return name;
}

bool parseScheduleName(const std::string &name, Schedule &out) {
  Schedule s;
  char tail = 0;
  if (std::sscanf(name.c_str(), "r%d-k%d-s%dx%d-o%d%c", &s.rows, &s.keyChunk, &s.scoreRowVectors,
                  &s.scoreKeys, &s.outRows, &tail) != 5 ||
      !validate(s).empty())
    return false;
  out = s;
  return true;
}

const std::vector<int> &specialisedDims() {
  static const std::vector<int> dims = ATTNC_HALIDE_DIMS;
  return dims;
}

std::string entryName(int d) { return d ? "attnc_halide_d" + std::to_string(d) : "attnc_halide_any"; }

const char *generatorStamp() { return "attnc-halidegen " ATTNC_HALIDEGEN_HASH " (Halide 14)"; }

const std::vector<std::pair<std::string, std::string>> &cpuTargets() {
  static const std::vector<std::pair<std::string, std::string>> targets = {
      {"x86-64-avx512", "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41"},
      {"x86-64-avx2", "x86-64-linux-avx-avx2-f16c-fma-sse41"},
      {"x86-64-sse41", "x86-64-linux-sse41"},
      {"x86-64", "x86-64-linux"},
  };
  return targets;
}

namespace {
/// The best of cpuTargets() this CPU runs (Skylake's AVX-512 subset, AVX2 +
/// FMA, SSE4.1), from the features the CPU reports.
std::string hostTarget() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const auto &t = cpuTargets();
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return t[0].second;
  if (avx2)
    return t[1].second;
  if (__builtin_cpu_supports("sse4.1"))
    return t[2].second;
  return t[3].second;
#elif defined(__aarch64__)
  return "arm-64-linux";
#else
  return "host";
#endif
}
} // namespace

std::string cpuTarget(const std::string &name) {
  if (name == "host")
    return hostTarget();
  for (const auto &[n, target] : cpuTargets())
    if (n == name)
      return target;
  return "";
}

const char *targetString() {
  static const std::string target = [] {
    const char *env = std::getenv("ATTNC_HALIDE_TARGET");
    const std::string named = env && *env ? cpuTarget(env) : "";
    return named.empty() ? hostTarget() : named;
  }();
  return target.c_str();
}

namespace {

/// The generator's entry points (HalideGen.cpp, extern "C").
struct Generator {
  bool (*compileObjects)(const Schedule &, std::vector<std::string> &, std::string &) = nullptr;
  bool (*loweredStatement)(const Schedule &, int, std::string &, std::string &) = nullptr;
  std::string error; ///< why it could not be loaded
};

/// Opens the module once per process: $ATTNC_HALIDEGEN when set (and then
/// only that), else the build tree's, else by name (the dynamic linker's
/// search path).
const Generator &generator() {
  static Generator g;
  static std::once_flag once;
  std::call_once(once, [] {
    const char *forced = std::getenv("ATTNC_HALIDEGEN");
    void *module = nullptr;
    if (forced && *forced) {
      module = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    } else {
      module = dlopen(ATTNC_HALIDEGEN_PATH, RTLD_NOW | RTLD_LOCAL);
      if (!module)
        module = dlopen("libattnc_halidegen.so", RTLD_NOW | RTLD_LOCAL);
    }
    if (!module) {
      const char *why = dlerror();
      g.error = std::string("cannot load the Halide code generator (libattnc_halidegen.so; "
                            "$ATTNC_HALIDEGEN names another): ") +
                (why ? why : "not found");
      return;
    }
    g.compileObjects = reinterpret_cast<decltype(g.compileObjects)>(
        dlsym(module, "attnc_halidegen_compile_objects"));
    g.loweredStatement = reinterpret_cast<decltype(g.loweredStatement)>(
        dlsym(module, "attnc_halidegen_lowered_statement"));
    if (!g.compileObjects || !g.loweredStatement)
      g.error = "the Halide code generator module lacks its entry points";
  });
  return g;
}

/// The loaded generator for a valid schedule, or null with `error` set.
const Generator *generatorFor(const Schedule &s, std::string &error) {
  if (std::string why = validate(s); !why.empty()) {
    error = "bad Halide schedule: " + why;
    return nullptr;
  }
  const Generator &g = generator();
  if (!g.error.empty()) {
    error = g.error;
    return nullptr;
  }
  return &g;
}

} // namespace

bool compileObjects(const Schedule &s, std::vector<std::string> &objects, std::string &error) {
  const Generator *g = generatorFor(s, error);
  return g && g->compileObjects(s, objects, error);
}

bool loweredStatement(const Schedule &s, int d, std::string &text, std::string &error) {
  const Generator *g = generatorFor(s, error);
  return g && g->loweredStatement(s, d, text, error);
}

} // namespace attnc::halide
