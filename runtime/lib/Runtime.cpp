//===- Runtime.cpp - The attnc C ABI: load, validate, run -----------------===//
//
// A kernel file carries its pattern's source and parameters; loading rebuilds
// the canonical IR with the front end (no MLIR involved) so that what the
// kernels need for a sequence length — the fused plan's tiles, or the CSR for
// the sparsifier's native code — is built on first use and cached. Native
// code is loaded from an anonymous memory file, so nothing is written to
// disk. Runs split batch x heads over worker threads.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "attnc/attnc.hpp"

#include "attnc/format/KernelAbi.h"
#include "attnc/format/KernelFile.h"
#include "attnc/plan/Csr.h"
#include "attnc/plan/IrText.h"
#include "attnc/plan/Plan.h"
#include "attnc/runtime/Internal.h"
#include "attnc/support/Check.h"

#include "FusedExecutor.h"
#include "HalideExecutor.h"
#include "attnc/support/Files.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>
#include <vector>

static_assert(ATTNC_ABI_VERSION == attnc::format::kAbiVersion, "attnc.h and the kernel format disagree");

namespace {

thread_local std::string lastError;

attnc_status fail(attnc_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

/// What the kernels keep per n: the CSR of every distinct head set
/// (sparsifier backend) or the fused plan's row blocks, when they fit
/// fusedCacheBytes() (otherwise the executor generates them as it runs).
struct Structure {
  int64_t n = 0;
  const attnc::plan::Plan *plan = nullptr; ///< the plan its fused row blocks are of
  std::vector<attnc::ir::Csr> sets;
  std::vector<attnc::plan::HeadShapes> blocks; ///< empty: generated as it runs
  std::vector<std::vector<attnc::rt::HalideBlocks>> halideBlocks; ///< [set][piece]
};

/// Per n and kernel, the fused row blocks kept: 64 MiB (fixed, l=128, c=8,
/// needs ~35 MB at n = 131,072), or $ATTNC_FUSED_CACHE_MB.
size_t fusedCacheBytes() {
  static const size_t bytes = [] {
    const char *env = std::getenv("ATTNC_FUSED_CACHE_MB");
    return (env && *env ? static_cast<size_t>(std::strtoull(env, nullptr, 10)) : size_t{64}) << 20;
  }();
  return bytes;
}

} // namespace

struct attnc_kernel {
  attnc::format::KernelFile file;
  attnc::ir::PatternIR ir;
  std::vector<int64_t> headToSet; ///< head index -> distinct set index
  std::vector<attnc_head_fn> entries;
  bool fused = false; ///< plan-driven tile kernels (backends "fused" and "dense")
  bool dense = false; ///< the dense masked baseline
  bool halide = false; ///< Halide code in the file, reading the plan's row blocks
  attnc::rt::HalideCode halideCode;
  attnc::plan::Plan plan;
  /// Fused: plans of the tile shapes tuned per head dimension (tuned_tiles).
  std::vector<std::pair<int64_t, attnc::plan::Plan>> tunedPlans;
  void *library = nullptr;
  int memfd = -1;

  std::mutex cacheMutex;
  std::list<std::shared_ptr<const Structure>> cache; ///< most recent first
  static constexpr size_t kCacheEntries = 8;

  ~attnc_kernel() {
    if (library)
      dlclose(library);
    if (memfd >= 0)
      close(memfd);
  }

  /// The plan a call with head dimension d runs: d's tuned shape if any.
  const attnc::plan::Plan &planFor(int64_t d) const {
    for (const auto &[tunedD, p] : tunedPlans)
      if (tunedD == d)
        return p;
    return plan;
  }

  /// The CSR of every set at length n, or the row blocks of `plan` at n,
  /// built once per n (and plan).
  attnc_status structure(int64_t n, const attnc::plan::Plan &plan, std::shared_ptr<const Structure> &out) {
    std::lock_guard<std::mutex> lock(cacheMutex);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if ((*it)->n == n && (*it)->plan == &plan) {
        cache.splice(cache.begin(), cache, it);
        out = cache.front();
        return ATTNC_OK;
      }
    auto s = std::make_shared<Structure>();
    s->n = n;
    s->plan = &plan;
    if (fused || halide) {
      if (n > std::numeric_limits<int32_t>::max())
        return fail(ATTNC_ERROR_SHAPE, "sequence length " + std::to_string(n) + " does not fit 32-bit keys");
      if (halide)
        s->halideBlocks = attnc::rt::buildHalideBlocks(plan, n);
      else
        attnc::plan::buildShapes(plan, n, dense, fusedCacheBytes(), s->blocks);
    } else {
      for (const auto &head : ir.heads) {
        attnc::ir::Csr csr;
        std::string error;
        if (!attnc::ir::buildCsr(head.set, n, csr, error))
          return fail(ATTNC_ERROR_SHAPE, error);
        s->sets.push_back(std::move(csr));
      }
    }
    cache.push_front(s);
    if (cache.size() > kCacheEntries)
      cache.pop_back();
    out = s;
    return ATTNC_OK;
  }
};

namespace {

attnc_status rebuildPattern(attnc_kernel &kernel) {
  if (kernel.file.ir.empty())
    return fail(ATTNC_ERROR_ABI_MISMATCH,
                "this kernel file (format " + std::to_string(kernel.file.formatVersion) +
                    ") carries no pattern IR, which this runtime builds its plan from; recompile it "
                    "with this attnc (attnc compile)");
  std::string error;
  if (!attnc::ir::readIr(kernel.file.ir, kernel.ir, error))
    return fail(ATTNC_ERROR_CORRUPT_KERNEL, "the kernel's pattern IR is malformed: " + error);
  kernel.headToSet.assign(static_cast<size_t>(kernel.ir.numHeads), 0);
  for (size_t k = 0; k < kernel.ir.heads.size(); ++k)
    for (int64_t h : kernel.ir.heads[k].heads)
      kernel.headToSet[static_cast<size_t>(h)] = static_cast<int64_t>(k);
  return ATTNC_OK;
}

/// The plan of a fused, dense or halide kernel, from its pattern and tiles.
attnc_status buildKernelPlan(attnc_kernel &kernel) {
  attnc::plan::PlanOptions options;
  auto get = [&](const char *key, int64_t fallback) {
    auto it = kernel.file.metadata.find(key);
    return it == kernel.file.metadata.end() ? fallback : std::atoll(it->second.c_str());
  };
  // (Files without them predate tuning and were built for 32 x 32 tiles.)
  options.tileRows = get("tile_rows", 32);
  options.tileCols = get("tile_cols", 32);
  if (options.tileRows < 1 || options.tileRows > 64 || options.tileCols < 1 || options.tileCols > 4096)
    return fail(ATTNC_ERROR_CORRUPT_KERNEL, "kernel metadata has bad tile sizes");
  kernel.plan = attnc::plan::buildPlan(kernel.ir, options);
  if (auto tuned = kernel.file.metadata.find("tuned_tiles"); tuned != kernel.file.metadata.end()) {
    attnc::plan::TunedTiles tiles;
    if (!attnc::plan::parseTunedTiles(tuned->second, tiles))
      return fail(ATTNC_ERROR_CORRUPT_KERNEL, "kernel metadata has bad tuned_tiles '" + tuned->second + "'");
    for (const auto &[d, t] : tiles)
      kernel.tunedPlans.push_back({d, attnc::plan::buildPlan(kernel.ir, t)});
  }
  return ATTNC_OK;
}

attnc_status loadCode(attnc_kernel &kernel) {
  auto backend = kernel.file.metadata.find("backend");
  auto is = [&](const char *name) { return backend != kernel.file.metadata.end() && backend->second == name; };
  kernel.dense = is("dense");
  kernel.fused = kernel.dense || is("fused");
  kernel.halide = is("halide");
  // Tile kernels are part of the runtime; the plan comes from the pattern.
  if (kernel.fused)
    return buildKernelPlan(kernel);
  if (kernel.halide) {
    if (attnc_status s = buildKernelPlan(kernel); s != ATTNC_OK)
      return s;
    // The code was compiled for the schedule's block rows and key chunk.
    auto schedule = kernel.file.metadata.find("halide_schedule");
    int rows = 0, chunk = 0;
    if (schedule == kernel.file.metadata.end() ||
        std::sscanf(schedule->second.c_str(), "r%d-k%d-", &rows, &chunk) != 2 ||
        rows != kernel.plan.options.tileRows || chunk != kernel.plan.options.tileCols)
      return fail(ATTNC_ERROR_CORRUPT_KERNEL,
                  "kernel metadata: the halide schedule does not match tile_rows and tile_cols");
#if defined(__x86_64__)
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("fma");
#else
    const bool avx512 = false; // not even x86-64
#endif
    if (!avx512)
      return fail(ATTNC_ERROR_UNSUPPORTED,
                  "this halide kernel's code is for AVX-512 (Skylake-AVX512 features) and this CPU "
                  "lacks them; compile the pattern with --backend fused");
  }
  const std::string &code = kernel.file.code;
  if (code.empty())
    return fail(ATTNC_ERROR_CORRUPT_KERNEL, "kernel file has no code section");
  kernel.memfd = memfd_create("attnc-kernel", MFD_CLOEXEC);
  if (kernel.memfd < 0)
    return fail(ATTNC_ERROR_IO, std::string("memfd_create failed: ") + std::strerror(errno));
  size_t done = 0;
  while (done < code.size()) {
    ssize_t w = write(kernel.memfd, code.data() + done, code.size() - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return fail(ATTNC_ERROR_IO, std::string("cannot stage kernel code: ") + std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  std::string path = "/proc/self/fd/" + std::to_string(kernel.memfd);
  kernel.library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!kernel.library) {
    const char *why = dlerror();
    return fail(ATTNC_ERROR_CORRUPT_KERNEL,
                std::string("kernel code cannot be loaded: ") + (why ? why : "unknown dlopen error"));
  }
  if (kernel.halide) {
    std::string error;
    if (!kernel.halideCode.load(kernel.library, error))
      return fail(ATTNC_ERROR_CORRUPT_KERNEL, error);
    return ATTNC_OK;
  }
  for (size_t k = 0; k < kernel.ir.heads.size(); ++k) {
    std::string symbol = "attnc_head_" + std::to_string(k);
    void *fn = dlsym(kernel.library, symbol.c_str());
    if (!fn)
      return fail(ATTNC_ERROR_CORRUPT_KERNEL, "kernel code lacks the entry point '" + symbol + "'");
    kernel.entries.push_back(reinterpret_cast<attnc_head_fn>(fn));
  }
  return ATTNC_OK;
}

const char *kTensorNames[] = {"q", "k", "v", "o"};

/// Whether a strided view of `shape` never maps two indices to one element.
bool nonOverlapping(const int64_t shape[4], const int64_t strides[4]) {
  int order[4] = {0, 1, 2, 3};
  std::sort(order, order + 4, [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t span = 1; // elements covered by the faster dimensions
  for (int k : order) {
    if (shape[k] == 1)
      continue;
    if (strides[k] < span)
      return false;
    span = strides[k] * shape[k];
  }
  return true;
}

attnc_status validate(const attnc_kernel &kernel, const attnc_tensor *const t[4]) {
  for (int k = 0; k < 4; ++k) {
    if (!t[k])
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("tensor '") + kTensorNames[k] + "' is null");
    if (!t[k]->data)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  std::string("tensor '") + kTensorNames[k] + "' has a null data pointer");
    if (t[k]->dtype != ATTNC_DTYPE_F32 && t[k]->dtype != ATTNC_DTYPE_BF16)
      return fail(ATTNC_ERROR_DTYPE, std::string("tensor '") + kTensorNames[k] +
                                         "' has dtype " + std::to_string(t[k]->dtype) +
                                         "; kernels take f32 (" + std::to_string(ATTNC_DTYPE_F32) +
                                         ") or bf16 (" + std::to_string(ATTNC_DTYPE_BF16) + ")");
  }
  for (int k = 1; k < 3; ++k)
    if (t[k]->dtype != t[0]->dtype)
      return fail(ATTNC_ERROR_DTYPE, std::string("tensor '") + kTensorNames[k] + "' has dtype " +
                                         std::to_string(t[k]->dtype) + " but 'q' has " +
                                         std::to_string(t[0]->dtype) +
                                         "; q, k and v must share one dtype");
  const int64_t *s = t[0]->shape;
  for (int k = 1; k < 4; ++k)
    for (int a = 0; a < 4; ++a)
      if (t[k]->shape[a] != s[a]) {
        std::ostringstream m;
        m << "tensor '" << kTensorNames[k] << "' has shape [" << t[k]->shape[0] << ", "
          << t[k]->shape[1] << ", " << t[k]->shape[2] << ", " << t[k]->shape[3]
          << "] but 'q' has [" << s[0] << ", " << s[1] << ", " << s[2] << ", " << s[3] << "]";
        return fail(ATTNC_ERROR_SHAPE, m.str());
      }
  if (s[2] == 0)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "sequence length n = 0: nothing to attend");
  if (s[0] < 1 || s[2] < 1 || s[3] < 1)
    return fail(ATTNC_ERROR_SHAPE, "batch, n and d must be at least 1, got batch=" +
                                       std::to_string(s[0]) + " n=" + std::to_string(s[2]) +
                                       " d=" + std::to_string(s[3]));
  if (kernel.ir.headsDeclared && s[1] != kernel.ir.numHeads)
    return fail(ATTNC_ERROR_SHAPE, "tensors have " + std::to_string(s[1]) +
                                       " heads but pattern '" + kernel.ir.name + "' has " +
                                       std::to_string(kernel.ir.numHeads));
  for (int k = 0; k < 4; ++k)
    for (int a = 0; a < 4; ++a)
      if (t[k]->strides[a] < 1)
        return fail(ATTNC_ERROR_STRIDE, std::string("tensor '") + kTensorNames[k] + "' has stride " +
                                            std::to_string(t[k]->strides[a]) + " in dimension " +
                                            std::to_string(a) + "; strides must be positive");
  if (!nonOverlapping(t[3]->shape, t[3]->strides))
    return fail(ATTNC_ERROR_STRIDE, "the strides of 'o' make distinct elements overlap");
  return ATTNC_OK;
}

bool contiguousSlice(const attnc_tensor &t) { return t.strides[3] == 1 && t.strides[2] == t.shape[3]; }

/// Element offset of slice (b, h) of a tensor.
int64_t sliceOffset(const attnc_tensor &t, int64_t b, int64_t h) {
  return b * t.strides[0] + h * t.strides[1];
}

/// Pointer to the [n, d] float32 slice (b, h): the tensor's own memory when
/// it is a contiguous f32 slice, else packed into `scratch` (bf16 widened to
/// f32 on the way: every backend computes and accumulates in f32).
const float *inputSlice(const attnc_tensor &t, int64_t b, int64_t h, std::vector<float> &scratch) {
  const int64_t n = t.shape[2], d = t.shape[3], off = sliceOffset(t, b, h);
  if (t.dtype == ATTNC_DTYPE_F32 && contiguousSlice(t))
    return static_cast<const float *>(t.data) + off;
  scratch.resize(static_cast<size_t>(n * d));
  auto pack = [&](const auto *data, auto widen) {
    for (int64_t i = 0; i < n; ++i) {
      const auto *row = data + off + i * t.strides[2];
      float *dst = scratch.data() + i * d;
      if (t.strides[3] == 1) // contiguous rows: a loop the compiler vectorises
        for (int64_t c = 0; c < d; ++c)
          dst[c] = widen(row[c]);
      else
        for (int64_t c = 0; c < d; ++c)
          dst[c] = widen(row[c * t.strides[3]]);
    }
  };
  if (t.dtype == ATTNC_DTYPE_BF16)
    pack(static_cast<const uint16_t *>(t.data), attnc::bf16ToFloat);
  else
    pack(static_cast<const float *>(t.data), [](float x) { return x; });
  return scratch.data();
}

/// Writes a finished [n, d] float32 slice into slice (b, h) of `t` (its
/// strides, its dtype: bf16 rounded to nearest even).
void outputSlice(const attnc_tensor &t, int64_t b, int64_t h, const std::vector<float> &slice) {
  const int64_t n = t.shape[2], d = t.shape[3], off = sliceOffset(t, b, h);
  auto unpack = [&](auto *data, auto narrow) {
    for (int64_t i = 0; i < n; ++i) {
      auto *row = data + off + i * t.strides[2];
      const float *src = slice.data() + i * d;
      if (t.strides[3] == 1)
        for (int64_t c = 0; c < d; ++c)
          row[c] = narrow(src[c]);
      else
        for (int64_t c = 0; c < d; ++c)
          row[c * t.strides[3]] = narrow(src[c]);
    }
  };
  if (t.dtype == ATTNC_DTYPE_BF16)
    unpack(static_cast<uint16_t *>(t.data), attnc::floatToBf16);
  else
    unpack(static_cast<float *>(t.data), [](float x) { return x; });
}

int threadCount(const attnc_run_options *options, int64_t tasks) {
  int64_t want = options && options->num_threads > 0 ? options->num_threads : 0;
  if (!want) {
    if (const char *env = std::getenv("ATTNC_NUM_THREADS"))
      want = std::atoll(env);
  }
  if (want <= 0)
    want = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::min(want, tasks));
}

} // namespace

namespace {

/// Decodes, checks and loads a kernel file's bytes; `origin` names them in messages.
attnc_status loadKernel(const std::string &bytes, const std::string &origin, attnc_kernel **out) {
  try {
    std::string error;
    auto kernel = std::make_unique<attnc_kernel>();
    if (!attnc::format::decodeKernelFile(bytes, kernel->file, error))
      return fail(ATTNC_ERROR_CORRUPT_KERNEL, origin + ": " + error);
    if (kernel->file.abiVersion != ATTNC_ABI_VERSION)
      return fail(ATTNC_ERROR_ABI_MISMATCH,
                  origin + " was built for ABI version " + std::to_string(kernel->file.abiVersion) +
                      "; this runtime implements " + std::to_string(ATTNC_ABI_VERSION) +
                      "; recompile it with this attnc");
    if (attnc_status s = rebuildPattern(*kernel); s != ATTNC_OK)
      return s;
    if (attnc_status s = loadCode(*kernel); s != ATTNC_OK)
      return s;
    *out = kernel.release();
    return ATTNC_OK;
  } catch (const std::bad_alloc &) {
    return fail(ATTNC_ERROR_OUT_OF_MEMORY, "out of memory while loading a kernel");
  } catch (const attnc::InternalError &e) {
    return fail(ATTNC_ERROR_INTERNAL, e.message);
  } catch (const std::exception &e) {
    return fail(ATTNC_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

} // namespace

extern "C" {

attnc_status attnc_kernel_load(const char *path, attnc_kernel **out) {
  if (!path || !out)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_load: null argument");
  *out = nullptr;
  try {
    std::string bytes, error;
    if (!attnc::support::readFileBytes(path, bytes, error))
      return fail(ATTNC_ERROR_IO, error);
    return loadKernel(bytes, path, out);
  } catch (const std::bad_alloc &) {
    return fail(ATTNC_ERROR_OUT_OF_MEMORY, "out of memory while loading a kernel");
  }
}

attnc_status attnc_kernel_load_memory(const void *bytes, size_t size, attnc_kernel **out) {
  if (!bytes || !out)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_load_memory: null argument");
  *out = nullptr;
  try {
    return loadKernel(std::string(static_cast<const char *>(bytes), size), "kernel in memory", out);
  } catch (const std::bad_alloc &) {
    return fail(ATTNC_ERROR_OUT_OF_MEMORY, "out of memory while loading a kernel");
  }
}

void attnc_kernel_free(attnc_kernel *kernel) { delete kernel; }

const char *attnc_kernel_metadata(const attnc_kernel *kernel, const char *key) {
  if (!kernel || !key)
    return nullptr;
  if (std::strcmp(key, "source") == 0)
    return kernel->file.source.c_str();
  auto it = kernel->file.metadata.find(key);
  return it == kernel->file.metadata.end() ? nullptr : it->second.c_str();
}

int64_t attnc_kernel_num_heads(const attnc_kernel *kernel) {
  return kernel && kernel->ir.headsDeclared ? kernel->ir.numHeads : 0;
}

attnc_status attnc_run(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                       const attnc_tensor *v, attnc_tensor *o, const attnc_run_options *options) {
  if (!kernel)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run: kernel is null");
  const attnc_tensor *all[4] = {q, k, v, o};
  if (attnc_status s = validate(*kernel, all); s != ATTNC_OK)
    return s;
  try {
    const int64_t batch = q->shape[0], heads = q->shape[1], n = q->shape[2], d = q->shape[3];
    const attnc::plan::Plan &plan = kernel->dense ? kernel->plan : kernel->planFor(d);
    std::shared_ptr<const Structure> structure;
    if (attnc_status s = const_cast<attnc_kernel *>(kernel)->structure(n, plan, structure); s != ATTNC_OK)
      return s;
    float scale = options && options->scale != 0.0f ? options->scale
                                                    : 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t tasks = batch * heads;
    std::atomic<int64_t> next{0};
    std::string halideError;
    // With fewer slices than threads, each slice's row blocks are shared.
    const int allThreads = threadCount(options, std::numeric_limits<int32_t>::max());
    const int threadsPerSlice = static_cast<int>(std::max<int64_t>(1, allThreads / tasks));
    auto worker = [&] {
      std::vector<float> qs, ks, vs, os, values, rows;
      attnc::rt::FusedScratch fusedScratch;
      attnc::rt::HalideScratch halideScratch;
      for (int64_t t = next++; t < tasks; t = next++) {
        int64_t b = t / heads, h = t % heads;
        const int64_t set = kernel->ir.headsDeclared ? kernel->headToSet[h] : 0;
        // The output slice is written in place when it is contiguous f32.
        const bool outDirect = o->dtype == ATTNC_DTYPE_F32 && contiguousSlice(*o);
        if (!outDirect)
          os.assign(static_cast<size_t>(n * d), 0.0f);
        float *out = outDirect ? static_cast<float *>(o->data) + sliceOffset(*o, b, h) : os.data();
        if (kernel->fused) {
          attnc::rt::runFusedHead(plan, set, kernel->dense,
                                  structure->blocks.empty() ? nullptr : &structure->blocks[set], n, d,
                                  inputSlice(*q, b, h, qs), inputSlice(*k, b, h, ks),
                                  inputSlice(*v, b, h, vs), out, scale, fusedScratch,
                                  threadsPerSlice);
        } else if (kernel->halide) {
          if (!attnc::rt::runHalideHead(kernel->halideCode, kernel->plan, structure->halideBlocks[set], n, d,
                                        inputSlice(*q, b, h, qs), inputSlice(*k, b, h, ks),
                                        inputSlice(*v, b, h, vs), out, scale, halideScratch,
                                        halideError))
            return;
        } else {
          const attnc::ir::Csr &csr = structure->sets[set];
          values.resize(static_cast<size_t>(std::max<int64_t>(1, csr.nnz())));
          rows.resize(static_cast<size_t>(3 * n));
          attnc_head_args args{inputSlice(*q, b, h, qs), inputSlice(*k, b, h, ks),
                               inputSlice(*v, b, h, vs), out, n, d, csr.pos.data(),
                               csr.crd.data(), csr.nnz(), values.data(), rows.data(), scale};
          kernel->entries[set](&args);
        }
        if (!outDirect)
          outputSlice(*o, b, h, os);
      }
    };
    int threads = threadCount(options, tasks);
    // The halide code runs a slice's row blocks on Halide's own thread pool.
    if (kernel->halide) {
      kernel->halideCode.setNumThreads(threadCount(options, std::numeric_limits<int32_t>::max()));
      threads = 1;
    }
    std::vector<std::thread> pool;
    for (int w = 1; w < threads; ++w)
      pool.emplace_back(worker);
    worker();
    for (std::thread &th : pool)
      th.join();
    if (!halideError.empty())
      return fail(ATTNC_ERROR_INTERNAL, halideError);
    return ATTNC_OK;
  } catch (const std::bad_alloc &) {
    return fail(ATTNC_ERROR_OUT_OF_MEMORY, "out of memory while running a kernel");
  } catch (const std::exception &e) {
    return fail(ATTNC_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

const char *attnc_last_error(void) { return lastError.c_str(); }

void attnc_internal_set_last_error(const char *message) { lastError = message ? message : ""; }

const char *attnc_status_name(attnc_status status) {
  switch (status) {
  case ATTNC_OK: return "ATTNC_OK";
  case ATTNC_ERROR_INVALID_ARGUMENT: return "ATTNC_ERROR_INVALID_ARGUMENT";
  case ATTNC_ERROR_IO: return "ATTNC_ERROR_IO";
  case ATTNC_ERROR_CORRUPT_KERNEL: return "ATTNC_ERROR_CORRUPT_KERNEL";
  case ATTNC_ERROR_ABI_MISMATCH: return "ATTNC_ERROR_ABI_MISMATCH";
  case ATTNC_ERROR_SHAPE: return "ATTNC_ERROR_SHAPE";
  case ATTNC_ERROR_DTYPE: return "ATTNC_ERROR_DTYPE";
  case ATTNC_ERROR_STRIDE: return "ATTNC_ERROR_STRIDE";
  case ATTNC_ERROR_COMPILE: return "ATTNC_ERROR_COMPILE";
  case ATTNC_ERROR_UNSUPPORTED: return "ATTNC_ERROR_UNSUPPORTED";
  case ATTNC_ERROR_OUT_OF_MEMORY: return "ATTNC_ERROR_OUT_OF_MEMORY";
  case ATTNC_ERROR_INTERNAL: return "ATTNC_ERROR_INTERNAL";
  }
  return "ATTNC_ERROR_UNKNOWN";
}

} // extern "C"
