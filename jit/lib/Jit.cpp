//===- Jit.cpp - Compile patterns from a host program, with a disk cache --===//
//
// Order: parse and check the pattern (diagnostics become the error message),
// compute the cache key, try the cached file, and only on a miss (or a
// corrupt entry) run the code generator and publish the result atomically.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc_jit.h"

#include "attnc/frontend/Canonicalize.h"
#include "attnc/compiler/KernelBuilder.h"
#include "attnc/codegen/LowerToMlir.h"
#include "attnc/tuning/Tuning.h"
#include "attnc/runtime/Internal.h"
#include "attnc/format/KernelFile.h"
#include "attnc/support/Hash.h"
#include "attnc/support/Files.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace {

std::atomic<int64_t> cacheHits{0}, cacheMisses{0}, cacheRebuilt{0};

attnc_status jitFail(attnc_status status, const std::string &message) {
  attnc_internal_set_last_error(message.c_str());
  return status;
}

std::string cacheDir(const attnc_jit_options *options) {
  if (options && options->cache_dir && *options->cache_dir)
    return options->cache_dir;
  return attnc::tuning::cacheDirectory();
}

attnc_status compile(attnc::Frontend &fe, const attnc_jit_options *options, attnc_kernel **out) {
  using namespace attnc;
  if (!out)
    return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_jit: 'out' is null");
  *out = nullptr;
  SemaOptions sema;
  if (options)
    for (int32_t k = 0; k < options->num_defines; ++k) {
      Define d;
      std::string error;
      if (!options->defines || !options->defines[k])
        return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_jit: define " + std::to_string(k) + " is null");
      if (!parseDefine(options->defines[k], d, error))
        return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, error);
      sema.defines.push_back(d);
    }
  const Pattern *pattern = nullptr;
  if (!fe.diags().hasErrors() && fe.analyze(sema))
    pattern = fe.select(options && options->pattern ? options->pattern : "");
  if (!pattern) {
    std::string message;
    for (const auto &d : fe.diags().diagnostics())
      message += fe.diags().format(d);
    return jitFail(ATTNC_ERROR_COMPILE, message.empty() ? "the pattern does not check" : message);
  }

  codegen::CodeGenOptions cg;
  if (options && options->backend && *options->backend) {
    std::string b = options->backend;
    if (auto parsed = codegen::parseBackend(b))
      cg.backend = *parsed;
    else
      return jitFail(ATTNC_ERROR_INVALID_ARGUMENT,
                     "unknown backend '" + b + "'; available: fused, halide, sparsifier, dense");
  }
  std::string keyText = std::string(fe.sourceText()) + '\0' + pattern->name + '\0' +
                        codegen::paramString(*pattern) + '\0' + codegen::backendName(cg.backend) + '\0' +
                        codegen::compilerVersion() + '\0' + codegen::hostTarget() + '\0' +
                        codegen::hostFeatureString() + '\0' + std::to_string(ATTNC_ABI_VERSION) +
                        '\0' +
                        // The generated MLIR: a change in the lowering is a new kernel.
                        codegen::lowerToMlir(ir::canonicalizePattern(*pattern), fe.sources());
  // A tile shape or Halide schedule measured by `attnc tune` for this
  // pattern and machine.
  codegen::applyTuning(cacheDir(options) + "/tuning.db", fe.sourceText(), *pattern, cg);
  keyText += '\0';
  keyText += "tiles=" + std::to_string(cg.planOptions.tileRows) + "x" +
             std::to_string(cg.planOptions.tileCols) + ";tuned=" + tuning::formatTunedTiles(cg.tunedTiles);
  if (cg.backend == codegen::Backend::Halide) {
    keyText += '\0';
    keyText += "halide=" + halide::scheduleName(cg.halideSchedule) + '\0' + halide::generatorStamp();
  }
  bool useCache = !(options && options->no_cache);
  std::string dir = cacheDir(options);
  std::string path = dir + "/" + pattern->name + "-" + support::fnv1aHex(keyText) + ".attnk";
  bool rebuilding = false;
  if (useCache) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
      attnc_status s = attnc_kernel_load(path.c_str(), out);
      if (s == ATTNC_OK) {
        ++cacheHits;
        return ATTNC_OK;
      }
      if (s != ATTNC_ERROR_CORRUPT_KERNEL && s != ATTNC_ERROR_ABI_MISMATCH && s != ATTNC_ERROR_IO)
        return s;
      rebuilding = true; // fall through: rebuild over the bad entry
    }
  }
  std::string bytes, error;
  if (!codegen::buildKernelFile(fe, *pattern, cg, bytes, error))
    return jitFail(ATTNC_ERROR_COMPILE, error);
  ++cacheMisses;
  if (rebuilding)
    ++cacheRebuilt;
  if (!useCache) {
    char tmpl[] = "/tmp/attnc-jit-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0)
      return jitFail(ATTNC_ERROR_IO, std::string("cannot create a temporary file: ") + std::strerror(errno));
    close(fd);
    if (!support::writeFileAtomically(tmpl, bytes, error))
      return jitFail(ATTNC_ERROR_IO, error);
    attnc_status s = attnc_kernel_load(tmpl, out);
    unlink(tmpl);
    return s;
  }
  if (!support::makeDirectories(dir, error) || !support::writeFileAtomically(path, bytes, error))
    return jitFail(ATTNC_ERROR_IO, error);
  return attnc_kernel_load(path.c_str(), out);
}

} // namespace

extern "C" {

attnc_status attnc_jit_compile_file(const char *path, const attnc_jit_options *options,
                                    attnc_kernel **out) {
  if (!path)
    return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_jit_compile_file: path is null");
  try {
    attnc::Frontend fe;
    if (!fe.parseFile(path)) {
      std::string message;
      for (const auto &d : fe.diags().diagnostics())
        message += fe.diags().format(d);
      return jitFail(fe.module().patterns.empty() && fe.sourceText().empty() ? ATTNC_ERROR_IO
                                                                             : ATTNC_ERROR_COMPILE,
                     message);
    }
    return compile(fe, options, out);
  } catch (const attnc::InternalError &e) {
    return jitFail(ATTNC_ERROR_INTERNAL, e.message);
  } catch (const std::exception &e) {
    return jitFail(ATTNC_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

attnc_status attnc_jit_compile_string(const char *source, const char *name,
                                      const attnc_jit_options *options, attnc_kernel **out) {
  if (!source)
    return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_jit_compile_string: source is null");
  try {
    attnc::Frontend fe;
    fe.parseString(name ? name : "<string>", source);
    return compile(fe, options, out);
  } catch (const attnc::InternalError &e) {
    return jitFail(ATTNC_ERROR_INTERNAL, e.message);
  } catch (const std::exception &e) {
    return jitFail(ATTNC_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

void attnc_jit_cache_stats(int64_t *hits, int64_t *misses, int64_t *rebuilt) {
  if (hits)
    *hits = cacheHits;
  if (misses)
    *misses = cacheMisses;
  if (rebuilt)
    *rebuilt = cacheRebuilt;
}

} // extern "C"
