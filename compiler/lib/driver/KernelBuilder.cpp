//===- KernelBuilder.cpp - A checked pattern to kernel-file bytes ---------===//
#include "attnc/compiler/KernelBuilder.h"

#include "attnc/frontend/Canonicalize.h"
#include "attnc/plan/IrText.h"
#include "attnc/plan/Plan.h"
#include "attnc/tuning/Tuning.h"
#include "attnc/format/KernelFile.h"
#include "../codegen/mlir/Link.h"
#include "attnc/support/Hash.h"
#include "attnc/support/Files.h"

#include <map>
#include <mutex>

namespace attnc::codegen {

const char *compilerVersion() {
  // The build stamp keeps JIT caches from serving kernels of an older build.
  return "attnc-0.1.0 (built " __DATE__ " " __TIME__ ")";
}

std::string paramString(const Pattern &pattern) {
  std::string out;
  for (const ParamValue &p : pattern.params)
    out += (out.empty() ? "" : ",") + p.name + "=" + std::to_string(p.value);
  return out;
}

const char *backendName(Backend backend) {
  switch (backend) {
  case Backend::Fused: return "fused";
  case Backend::Sparsifier: return "sparsifier";
  case Backend::Dense: return "dense";
  case Backend::Halide: return "halide";
  }
  return "?";
}

std::optional<Backend> parseBackend(const std::string &name) {
  for (Backend b : {Backend::Fused, Backend::Halide, Backend::Sparsifier, Backend::Dense})
    if (name == backendName(b))
      return b;
  return std::nullopt;
}

const std::vector<std::string> &backendNames() {
  static const std::vector<std::string> names = {"fused", "halide", "sparsifier", "dense"};
  return names;
}

namespace {

/// The Halide code of a schedule. It does not depend on the pattern and a
/// compilation takes seconds, so it is kept in memory for the process and
/// on disk in $ATTNC_CACHE_DIR/halide (else ~/.cache/attnc/halide), keyed by
/// the schedule, this compiler's and code generator's builds, the Halide
/// target and the ABI. A
/// cached file is the hash of the code, a newline, then the code; one whose
/// hash does not match is rebuilt.
bool halideSharedObject(const halide::Schedule &schedule, std::string &sharedObject, std::string &error) {
  static std::mutex mutex;
  static std::map<std::string, std::string> built;
  const std::string name = halide::scheduleName(schedule);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = built.find(name); it != built.end()) {
      sharedObject = it->second;
      return true;
    }
  }
  const std::string dir = tuning::cacheDirectory() + "/halide";
  const std::string path = dir + "/" + name + "-" +
                           support::fnv1aHex(std::string(compilerVersion()) + '\0' + halide::generatorStamp() + '\0' +
                                        halide::targetString() +
                                        '\0' + std::to_string(format::kAbiVersion)) +
                           ".so";
  std::string cached, ignored;
  if (support::readFileBytes(path, cached, ignored)) {
    size_t newline = cached.find('\n');
    if (newline != std::string::npos && cached.compare(0, newline, support::fnv1aHex(cached.substr(newline + 1))) == 0)
      sharedObject = cached.substr(newline + 1);
  }
  if (sharedObject.empty()) {
    std::vector<std::string> objects;
    if (!halide::compileObjects(schedule, objects, error) || !linkSharedObject(objects, sharedObject, error))
      return false;
    // A cache that cannot be written only costs the next process a compilation.
    if (support::makeDirectories(dir, ignored))
      support::writeFileAtomically(path, support::fnv1aHex(sharedObject) + "\n" + sharedObject, ignored);
  }
  std::lock_guard<std::mutex> lock(mutex);
  built.emplace(name, sharedObject);
  return true;
}
} // namespace

std::string applyTuning(const std::string &dbPath, std::string_view source, const Pattern &pattern,
                        CodeGenOptions &options) {
  if (options.backend != Backend::Fused && options.backend != Backend::Halide)
    return {};
  const std::string key = tuning::tuningKey(source, pattern, hostTarget() + hostFeatureString());
  if (options.backend == Backend::Halide) { // one schedule's code: the last one tuned
    auto tuned = tuning::lookup(dbPath, key, backendName(options.backend));
    if (!tuned || !halide::parseScheduleName(tuned->schedule, options.halideSchedule))
      return {};
    return "Halide schedule " + tuned->schedule;
  }
  // The runtime picks a call's shape by its head dimension.
  std::string used;
  options.tunedTiles.clear();
  for (const tuning::Entry &e : tuning::lookupAll(dbPath, key, backendName(options.backend))) {
    options.tunedTiles.push_back({e.d, e.options});
    used += (used.empty() ? "tiles " : ", ") + std::to_string(e.options.tileRows) + "x" +
            std::to_string(e.options.tileCols) + " at d=" + std::to_string(e.d);
  }
  return used;
}

bool buildKernelFile(Frontend &fe, const Pattern &pattern, const CodeGenOptions &options,
                     std::string &bytes, std::string &error) {
  ir::PatternIR ir = ir::canonicalizePattern(pattern);
  CodeGenResult result;
  // The fused backend's code is the runtime's tile kernels: the file carries
  // the pattern, from which the runtime builds the plan.
  if (options.backend == Backend::Sparsifier && !generate(ir, fe.sources(), options, result, error))
    return false;
  // The Halide backend's code is the schedule's, and the runtime builds the
  // row blocks it reads from the plan, as for the fused backend.
  if (options.backend == Backend::Halide &&
      !halideSharedObject(options.halideSchedule, result.sharedObject, error))
    return false;
  format::KernelFile file;
  file.abiVersion = format::kAbiVersion;
  file.source = std::string(fe.sourceText());
  file.ir = ir::writeIr(ir);
  file.code = std::move(result.sharedObject);
  file.metadata = {
      {"pattern", pattern.name},
      {"params", paramString(pattern)},
      {"heads", pattern.headsDeclared ? std::to_string(pattern.numHeads()) : "any"},
      {"head_sets", std::to_string(ir.heads.size())},
      {"dtype", "f32"},
      {"target", hostTarget()},
      {"backend", backendName(options.backend)},
      {"abi_version", std::to_string(format::kAbiVersion)},
      {"source_hash", support::fnv1aHex(file.source)},
      {"compiler_version", compilerVersion()},
  };
  if (options.backend == Backend::Halide) {
    file.metadata["tile_rows"] = std::to_string(options.halideSchedule.rows);
    file.metadata["tile_cols"] = std::to_string(options.halideSchedule.keyChunk);
    file.metadata["halide_schedule"] = halide::scheduleName(options.halideSchedule);
    file.metadata["halide_target"] = halide::targetString();
  } else if (options.backend != Backend::Sparsifier) {
    file.metadata["tile_rows"] = std::to_string(plan::resolveOptions(ir, options.planOptions).tileRows);
    file.metadata["tile_cols"] = std::to_string(options.planOptions.tileCols);
    if (options.backend == Backend::Fused && !options.tunedTiles.empty())
      file.metadata["tuned_tiles"] = tuning::formatTunedTiles(options.tunedTiles);
  }
  bytes = format::encodeKernelFile(file);
  return true;
}

} // namespace attnc::codegen
