/*===- attnc_jit.h - Compile patterns from a host program -----------------===*
 *
 * Compiles a pattern file or string in-process and returns a runnable kernel
 * (see attnc.h). Artifacts are cached on disk, keyed by a hash of the source,
 * the parameters, the options, the compiler version and the host CPU; the
 * sequence length is NOT part of the key (kernels take n at run time).
 * Cache directory: options->cache_dir, else $ATTNC_CACHE_DIR, else
 * ~/.cache/attnc. An entry is a kernel file (checksummed, versioned) that
 * also records its key. Writes are atomic (a temporary file in the cache
 * directory, fsync, rename), so processes compiling the same pattern at
 * once all succeed and none ever reads a partly written entry. An entry
 * that is truncated, corrupt, another key's, or of a format or ABI this
 * runtime refuses is removed and rebuilt; a cache directory that is missing
 * and cannot be created, read-only or a regular file makes the kernel be
 * compiled in memory. Neither is an error: attnc_jit_last_warning says
 * what happened. Link with libattnc_jit (which links MLIR/LLVM).
 *
 *===----------------------------------------------------------------------===*/
#ifndef ATTNC_ATTNC_JIT_H
#define ATTNC_ATTNC_JIT_H

#include "attnc/attnc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attnc_jit_options {
  /** "name=value" parameter overrides, like -D on the command line. */
  const char *const *defines;
  int32_t num_defines;
  /** Which pattern of the source (null: the first). */
  const char *pattern;
  /** Cache directory (null: $ATTNC_CACHE_DIR or ~/.cache/attnc). */
  const char *cache_dir;
  /** Non-zero: neither read nor write the cache. */
  int32_t no_cache;
  /** "fused" (null: the default), "halide" (the plan's row blocks as Halide 14
   *  code for this CPU: AVX-512, AVX2 + FMA or SSE4.1), "sparsifier" (MLIR's sparse-tensor path) or "dense" (the
   *  dense masked baseline, for comparisons). */
  const char *backend;
} attnc_jit_options;

/** Compiles (or fetches from the cache) the pattern in file `path`. */
ATTNC_API attnc_status attnc_jit_compile_file(const char *path, const attnc_jit_options *options,
                                              attnc_kernel **out);

/** Same for source text; `name` is used in diagnostics (may be null). */
ATTNC_API attnc_status attnc_jit_compile_string(const char *source, const char *name,
                                                const attnc_jit_options *options,
                                                attnc_kernel **out);

/**
 * Why the calling thread's last attnc_jit_compile_* rebuilt a cache entry
 * or did not publish to the cache, one line per event ("jit cache: ...");
 * "" when neither happened. The string lives until the thread's next
 * compile.
 */
ATTNC_API const char *attnc_jit_last_warning(void);

/** Process-wide counters: cache hits, misses (compilations), rebuilt
 *  entries (truncated, corrupt, foreign or stale ones: each is also a miss). */
ATTNC_API void attnc_jit_cache_stats(int64_t *hits, int64_t *misses, int64_t *rebuilt);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNC_ATTNC_JIT_H */
