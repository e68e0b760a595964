//===- Jit.cpp - Compile patterns from a host program, with a disk cache --===//
//
// Order: parse, then compiler::prepare (check, canonicalise, the cache key:
// what determines the kernel), try the cached entry, and only on a miss (or
// a bad entry) compiler::build and publish the bytes atomically. The kernel
// is always loaded from the bytes in memory, never written and read back; a
// cache directory that cannot be written is no error.
//
// An entry is a kernel file (format/KernelFile.h: magic, format and ABI
// versions, FNV-1a checksum of every byte) stamped with its key's hash, so
// that the runtime's loader is the entry's validator: a truncated, corrupt,
// foreign (another key's) or stale (another format or ABI) entry fails to
// load, is removed if no writer has replaced it meanwhile, and rebuilt. Each
// of these is a warning (attnc_jit_last_warning), never an error.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc_jit.h"

#include "attnc/compiler/Compile.h"
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
thread_local std::string lastWarning;

/// Which cache key a kernel file was published under, so that an entry
/// renamed or copied from another key is not taken for this one.
constexpr const char *kKeyMetadata = "jit_cache_key";

void warn(const std::string &message) { lastWarning += (lastWarning.empty() ? "" : "\n") + message; }

attnc_status jitFail(attnc_status status, const std::string &message) {
  attnc_internal_set_last_error(message.c_str());
  return status;
}

std::string cacheDir(const attnc_jit_options *options) {
  if (options && options->cache_dir && *options->cache_dir)
    return options->cache_dir;
  return attnc::tuning::cacheDirectory();
}

/// Loads a cache entry's bytes if they are a kernel file published under
/// `keyHash`. When they are not (corrupt, truncated, another key, an ABI
/// or format this runtime refuses), returns an error with `why` set: the
/// entry is to be rebuilt. Other failures (out of memory) leave `why` empty.
attnc_status loadEntry(const std::string &bytes, const std::string &keyHash, attnc_kernel **out, std::string &why) {
  attnc_kernel *kernel = nullptr;
  attnc_status s = attnc_kernel_load_memory(bytes.data(), bytes.size(), &kernel);
  if (s == ATTNC_ERROR_CORRUPT_KERNEL || s == ATTNC_ERROR_ABI_MISMATCH) {
    why = attnc_last_error();
    return s;
  }
  if (s != ATTNC_OK)
    return s;
  const char *stamp = attnc_kernel_metadata(kernel, kKeyMetadata);
  if (!stamp || keyHash != stamp) {
    why = stamp ? std::string("it holds the kernel of key ") + stamp
                : std::string("it is a kernel file the jit did not publish (no ") + kKeyMetadata + ")";
    attnc_kernel_free(kernel);
    return ATTNC_ERROR_CORRUPT_KERNEL;
  }
  *out = kernel;
  return ATTNC_OK;
}

attnc_status compile(attnc::Frontend &fe, const attnc_jit_options *options, attnc_kernel **out) {
  using namespace attnc;
  if (!out)
    return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_jit: 'out' is null");
  *out = nullptr;
  lastWarning.clear();
  compiler::CompileRequest request;
  if (options) {
    for (int32_t k = 0; k < options->num_defines; ++k) {
      Define d;
      std::string error;
      if (!options->defines || !options->defines[k])
        return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_jit: define " + std::to_string(k) + " is null");
      if (!parseDefine(options->defines[k], d, error))
        return jitFail(ATTNC_ERROR_INVALID_ARGUMENT, error);
      request.defines.push_back(d);
    }
    if (options->pattern)
      request.pattern = options->pattern;
    if (options->backend && *options->backend) {
      std::string b = options->backend;
      auto parsed = codegen::parseBackend(b);
      if (!parsed)
        return jitFail(ATTNC_ERROR_INVALID_ARGUMENT,
                       "unknown backend '" + b + "'; available: fused, halide, sparsifier, dense");
      request.options.backend = *parsed;
    }
  }
  const std::string dir = cacheDir(options);
  // A tile shape or Halide schedule measured by `attnc tune` for this
  // pattern and machine.
  request.tuningDatabase = dir + "/tuning.db";
  compiler::Compilation compilation;
  std::string error;
  if (!compiler::prepare(fe, request, compilation, error)) {
    if (!error.empty())
      return jitFail(ATTNC_ERROR_UNSUPPORTED, error);
    std::string message;
    for (const auto &d : fe.diags().diagnostics())
      message += fe.diags().format(d);
    return jitFail(ATTNC_ERROR_COMPILE, message.empty() ? "the pattern does not check" : message);
  }
  const bool useCache = !(options && options->no_cache);
  const std::string keyHash = support::fnv1aHex(compilation.cacheKey);
  const std::string path = dir + "/" + compilation.pattern->name + "-" + keyHash + ".attnk";
  bool rebuilding = false;
  if (useCache) {
    std::string bytes, readError;
    support::FileIdentity identity;
    int readErrno = 0;
    if (support::readFileBytes(path, bytes, identity, readErrno, readError)) {
      std::string why;
      const attnc_status s = loadEntry(bytes, keyHash, out, why);
      if (s == ATTNC_OK) {
        ++cacheHits;
        return ATTNC_OK;
      }
      if (why.empty())
        return s;
      // The entry is corrupt, foreign or stale: out of the way first, so
      // that a build which fails below leaves no bad entry to trip over.
      std::string ignored;
      support::removeFileIfUnchanged(path, identity, ignored);
      warn("jit cache: evicted '" + path + "' and rebuilt it: " + why);
      rebuilding = true;
    } else if (readErrno != ENOENT && readErrno != ENOTDIR) {
      // (ENOTDIR: the directory is a file, reported when publishing.)
      warn("jit cache: " + readError + "; compiling instead");
    }
  }
  format::KernelFile file;
  if (!compiler::build(fe, compilation, file, error))
    return jitFail(ATTNC_ERROR_COMPILE, error);
  ++cacheMisses;
  if (rebuilding)
    ++cacheRebuilt;
  file.metadata[kKeyMetadata] = keyHash;
  const std::string bytes = format::encodeKernelFile(file);
  // A cache that cannot be written (read-only, missing and uncreatable, a
  // regular file) only costs the next process a compilation: the kernel is
  // loaded from memory either way.
  if (useCache && !(support::makeDirectories(dir, error) && support::writeFileAtomically(path, bytes, error)))
    warn("jit cache: " + error + "; the kernel was compiled in memory only");
  return attnc_kernel_load_memory(bytes.data(), bytes.size(), out);
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

const char *attnc_jit_last_warning(void) { return lastWarning.c_str(); }

void attnc_jit_cache_stats(int64_t *hits, int64_t *misses, int64_t *rebuilt) {
  if (hits)
    *hits = cacheHits;
  if (misses)
    *misses = cacheMisses;
  if (rebuilt)
    *rebuilt = cacheRebuilt;
}

} // extern "C"
