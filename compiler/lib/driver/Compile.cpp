//===- Compile.cpp - The one compile entry point --------------------------===//
//
// prepare() checks and canonicalises once and computes the cache key from
// what build() will read; build() runs the backend's code generator (none
// for fused and dense: the runtime's tile kernels run the plan it rebuilds
// from the IR text). The MLIR and Halide generators are called only where
// this attnc was built with them (ATTNC_HAVE_MLIR, ATTNC_HAVE_HALIDE).
//
//===----------------------------------------------------------------------===//
#include "attnc/compiler/Compile.h"

#include "attnc/format/KernelAbi.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/plan/IrText.h"
#include "attnc/plan/Plan.h"
#include "attnc/support/Files.h"
#include "attnc/support/Hash.h"
#include "attnc/support/Host.h"
#include "attnc/tuning/Tuning.h"
#if ATTNC_HAVE_MLIR
#include "attnc/codegen/LowerToMlir.h"
#include "../codegen/mlir/Link.h"
#endif

#include <map>
#include <mutex>

namespace attnc::codegen {

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

} // namespace attnc::codegen

namespace attnc::compiler {

using codegen::Backend;

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

std::string backendUnavailable(Backend backend) {
  if (backend == Backend::Sparsifier && !ATTNC_HAVE_MLIR)
    return "the sparsifier backend is not built into this attnc (it needs MLIR/LLVM 19: configure with "
           "-DATTNC_WITH_MLIR=ON, Debian packages libmlir-19-dev mlir-19-tools); use --backend fused";
  if (backend == Backend::Halide && !ATTNC_HAVE_HALIDE)
    return "the halide backend is not built into this attnc (it needs Halide 14 and MLIR/LLVM 19: "
           "configure with -DATTNC_WITH_HALIDE=ON, Debian package libhalide14-0-dev); use --backend fused";
  return "";
}

std::string dataRefusal(const ir::PatternIR &ir, Backend backend) {
  // Score modifiers are compiled into the fused kernels (the dense baseline
  // is the same code); the sparsifier's and halide's code has no place for
  // them yet.
  if ((ir.score || ir.sink) && (backend == Backend::Halide || backend == Backend::Sparsifier))
    return "pattern '" + ir.name + "' has a " + (ir.score ? "score" : "sink") + " modifier, which the " +
           (backend == Backend::Halide ? "halide" : "sparsifier") +
           " backend does not take yet: use --backend fused (or dense, the baseline)";
  if (!ir.readsData() || backend != Backend::Halide)
    return "";
  const auto read = std::find_if(ir.inputs.begin(), ir.inputs.end(), [](const InputDecl &in) { return !in.isFloat; });
  return "pattern '" + ir.name + "' reads data (input '" + read->name +
         "'), which the halide backend does not take yet: its code is scheduled for key sets known before the "
         "call; use --backend fused (or sparsifier, the reference, or dense, the baseline)";
}

namespace {

#if ATTNC_HAVE_HALIDE
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
    if (!halide::compileObjects(schedule, objects, error) || !codegen::linkSharedObject(objects, sharedObject, error))
      return false;
    // A cache that cannot be written only costs the next process a compilation.
    if (support::makeDirectories(dir, ignored))
      support::writeFileAtomically(path, support::fnv1aHex(sharedObject) + "\n" + sharedObject, ignored);
  }
  std::lock_guard<std::mutex> lock(mutex);
  built.emplace(name, sharedObject);
  return true;
}
#endif

/// The key's part for what the backend's code generator reads beyond the
/// IR and tiles.
std::string generatorKey(const Frontend &fe, const Compilation &c) {
  std::string key;
  switch (c.options.backend) {
  case Backend::Fused:
  case Backend::Dense:
    break; // no code: the runtime's tile kernels run the plan
  case Backend::Sparsifier:
#if ATTNC_HAVE_MLIR
    // The generated MLIR (cheap next to the sparsifier and LLVM): a change
    // in the lowering is a new kernel.
    key = codegen::lowerToMlir(c.ir, fe.sources());
#endif
    key += '\0' + support::hostTarget() + '\0' + support::hostFeatures();
    break;
  case Backend::Halide:
    key = halide::scheduleName(c.options.halideSchedule) + '\0' + halide::generatorStamp() + '\0' +
          halide::targetString();
    break;
  }
  return key;
}

} // namespace

std::string applyTuning(const std::string &dbPath, std::string_view source, const Pattern &pattern,
                        codegen::CodeGenOptions &options) {
  if (options.backend != codegen::Backend::Fused && options.backend != codegen::Backend::Halide)
    return {};
  const std::string key = tuning::tuningKey(source, pattern, support::hostTarget() + support::hostFeatures());
  if (options.backend == codegen::Backend::Halide) { // one schedule's code: the last one tuned
    auto tuned = tuning::lookup(dbPath, key, codegen::backendName(options.backend));
    if (!tuned || !halide::parseScheduleName(tuned->schedule, options.halideSchedule))
      return {};
    return "Halide schedule " + tuned->schedule;
  }
  // The runtime picks a call's shape by its head dimension, and on a GPU
  // the forward variant tuned for that GPU (`attnc tune --target cuda`).
  std::string tiles;
  options.tunedTiles.clear();
  for (const tuning::Entry &e : tuning::lookupAll(dbPath, key, codegen::backendName(options.backend))) {
    options.tunedTiles.push_back({e.d, e.options});
    tiles += (tiles.empty() ? "tiles " : ", ") + std::to_string(e.options.tileRows) + "x" +
             std::to_string(e.options.tileCols) + " at d=" + std::to_string(e.d);
  }
  options.cudaTuned = tuning::formatCudaTuned(tuning::lookupAll(dbPath, tuning::tuningKey(source, pattern, "cuda"),
                                                                "cuda"));
  std::string used = tiles;
  if (!options.cudaTuned.empty())
    used += (used.empty() ? "" : "; ") + std::string("GPU variants ") + options.cudaTuned;
  return used;
}

bool prepare(Frontend &fe, const CompileRequest &request, Compilation &out, std::string &error) {
  out = Compilation{};
  if (std::string why = backendUnavailable(request.options.backend); !why.empty()) {
    error = why;
    return false;
  }
  if (fe.diags().hasErrors() || !fe.analyze({request.defines}))
    return false;
  const Pattern *pattern = fe.select(request.pattern);
  return pattern && prepare(fe, *pattern, request, out, error);
}

bool prepare(const Frontend &fe, const Pattern &pattern, const CompileRequest &request, Compilation &out,
             std::string &error) {
  out = Compilation{};
  if (std::string why = backendUnavailable(request.options.backend); !why.empty()) {
    error = why;
    return false;
  }
  out.pattern = &pattern;
  out.ir = ir::canonicalizePattern(pattern);
  if (std::string why = dataRefusal(out.ir, request.options.backend); !why.empty()) {
    error = why;
    return false;
  }
  out.irText = ir::writeIr(out.ir);
  out.options = request.options;
  if (!request.tuningDatabase.empty())
    out.tuning = applyTuning(request.tuningDatabase, fe.sourceText(), *out.pattern, out.options);
  const codegen::CodeGenOptions &o = out.options;
  out.cacheKey = out.irText + '\0' + codegen::backendName(o.backend) + '\0' + compilerVersion() + '\0' +
                 std::to_string(format::kAbiVersion) + '\0' + std::to_string(format::kKernelFormatVersion) +
                 '\0' + "tiles=" + std::to_string(o.planOptions.tileRows) + "x" +
                 std::to_string(o.planOptions.tileCols) + ";tuned=" + plan::formatTunedTiles(o.tunedTiles) +
                 ";cuda=" + o.cudaTuned +
                 '\0' + generatorKey(fe, out);
  return true;
}

bool build(const Frontend &fe, const Compilation &c, format::KernelFile &file, std::string &error) {
  const Pattern &pattern = *c.pattern;
  const codegen::CodeGenOptions &options = c.options;
  if (std::string why = backendUnavailable(options.backend); !why.empty()) {
    error = why;
    return false;
  }
  ATTNC_CHECK(dataRefusal(c.ir, options.backend).empty(), "prepare refuses what build cannot take");
  std::string code;
#if ATTNC_HAVE_MLIR
  // The sparsifier's code: MLIR's sparse-tensor compiler, LLVM and lld.
  if (options.backend == Backend::Sparsifier) {
    codegen::CodeGenResult result;
    if (!codegen::generate(c.ir, fe.sources(), options, result, error))
      return false;
    code = std::move(result.sharedObject);
  }
#endif
#if ATTNC_HAVE_HALIDE
  // The Halide backend's code is the schedule's; the runtime builds the row
  // blocks it reads from the plan, as for the fused backend.
  if (options.backend == Backend::Halide && !halideSharedObject(options.halideSchedule, code, error))
    return false;
#endif
  file = format::KernelFile{};
  file.abiVersion = format::kAbiVersion;
  file.source = std::string(fe.sourceText());
  file.ir = c.irText;
  file.code = std::move(code);
  file.metadata = {
      {"pattern", pattern.name},
      {"params", paramString(pattern)},
      {"heads", pattern.headsDeclared ? std::to_string(pattern.numHeads()) : "any"},
      {"head_sets", std::to_string(c.ir.heads.size())},
      {"dtype", "f32,bf16"}, // the element types attnc_run accepts (bf16 is widened per slice)
      {"target", support::hostTarget()},
      {"backend", codegen::backendName(options.backend)},
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
    const plan::PlanOptions tiles = plan::resolveOptions(c.ir, options.planOptions);
    file.metadata["tile_rows"] = std::to_string(tiles.tileRows);
    file.metadata["tile_cols"] = std::to_string(tiles.tileCols);
    if (options.backend == Backend::Fused && !options.tunedTiles.empty())
      file.metadata["tuned_tiles"] = plan::formatTunedTiles(options.tunedTiles);
    if (options.backend == Backend::Fused && !options.cudaTuned.empty())
      file.metadata["cuda_tuned"] = options.cudaTuned;
    if (options.backend == Backend::Fused) // the backward pass's blocks, at every d
      file.metadata["grad_tile_rows"] = std::to_string(plan::gradTileRows(c.ir, tiles));
  }
  return true;
}

bool buildKernelFile(Frontend &fe, const Pattern &pattern, const codegen::CodeGenOptions &options,
                     std::string &bytes, std::string &error) {
  CompileRequest request;
  request.options = options;
  Compilation c;
  format::KernelFile file;
  if (!prepare(fe, pattern, request, c, error) || !build(fe, c, file, error))
    return false;
  bytes = format::encodeKernelFile(file);
  return true;
}

} // namespace attnc::compiler
