//===- Runtime.cpp - The attnc C ABI: load, validate, run -----------------===//
//
// A kernel file carries its pattern's canonical IR as text; loading reads it
// back (no front end, no MLIR) and makes the backend the file names
// (backends/Registry.cpp). This file owns what every backend shares:
// argument checks, packing strided or bf16 slices into contiguous f32 and
// back, the per-n cache of what the backend prepares, and splitting a run's
// batch x heads slices over the shared thread pool (support/ThreadPool.h).
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "attnc/attnc.hpp"

#include "attnc/format/KernelFile.h"
#include "attnc/plan/IrText.h"
#include "attnc/runtime/Internal.h"
#include "attnc/support/Check.h"
#include "attnc/support/Files.h"
#include "attnc/support/ThreadPool.h"

#include "backends/Backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

static_assert(ATTNC_ABI_VERSION == attnc::format::kAbiVersion, "attnc.h and the kernel format disagree");

namespace {

thread_local std::string lastError;

attnc_status fail(attnc_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

} // namespace

struct attnc_kernel {
  attnc::format::KernelFile file;
  attnc::ir::PatternIR ir;
  std::vector<int64_t> headToSet; ///< head index -> distinct set index
  std::unique_ptr<attnc::rt::Backend> backend;

  /// What the backend prepared per (n, variant), most recent first.
  struct Prepared {
    int64_t n;
    const void *variant;
    std::shared_ptr<const attnc::rt::LengthState> state;
  };
  std::mutex cacheMutex;
  std::list<Prepared> cache;
  static constexpr size_t kCacheEntries = 8;

  /// The backend's state for length n and head dimension d, prepared on
  /// first use. Throws RunError.
  std::shared_ptr<const attnc::rt::LengthState> prepared(int64_t n, int64_t d, int threads) {
    const void *variant = backend->variant(d);
    std::lock_guard<std::mutex> lock(cacheMutex);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->n == n && it->variant == variant) {
        cache.splice(cache.begin(), cache, it);
        return cache.front().state;
      }
    cache.push_front({n, variant, backend->prepare(n, d, threads)});
    if (cache.size() > kCacheEntries)
      cache.pop_back();
    return cache.front().state;
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
    kernel->backend = attnc::rt::makeBackend({kernel->file, kernel->ir});
    *out = kernel.release();
    return ATTNC_OK;
  } catch (const attnc::rt::RunError &e) {
    return fail(e.status, origin + ": " + e.message);
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
    const attnc::rt::Backend &backend = *kernel->backend;
    const int threads = attnc::support::resolveThreads(options ? options->num_threads : 0);
    auto state = const_cast<attnc_kernel *>(kernel)->prepared(n, d, threads);
    const float scale = options && options->scale != 0.0f ? options->scale
                                                          : 1.0f / std::sqrt(static_cast<float>(d));
    const int64_t tasks = batch * heads;
    // Slices side by side, each splitting its own work when there are fewer
    // slices than threads; or one at a time with every thread inside.
    const bool inside = backend.threading() == attnc::rt::Threading::Inside;
    const int sliceThreads = inside ? 1 : static_cast<int>(std::min<int64_t>(threads, tasks));
    const int threadsPerSlice = inside ? threads : std::max(1, threads / sliceThreads);
    backend.beginRun(threads);
    struct Worker {
      std::unique_ptr<attnc::rt::Scratch> scratch;
      std::vector<float> q, k, v, o;
    };
    std::vector<Worker> workers(static_cast<size_t>(sliceThreads));
    const bool outDirect = o->dtype == ATTNC_DTYPE_F32 && contiguousSlice(*o);
    attnc::support::parallelFor(tasks, sliceThreads, [&](int w, int64_t t) {
      Worker &ws = workers[static_cast<size_t>(w)];
      if (!ws.scratch)
        ws.scratch = backend.newScratch();
      const int64_t b = t / heads, h = t % heads;
      // The output slice is written in place when it is contiguous f32.
      if (!outDirect)
        ws.o.assign(static_cast<size_t>(n * d), 0.0f);
      attnc::rt::Slice slice{inputSlice(*q, b, h, ws.q),
                             inputSlice(*k, b, h, ws.k),
                             inputSlice(*v, b, h, ws.v),
                             outDirect ? static_cast<float *>(o->data) + sliceOffset(*o, b, h) : ws.o.data(),
                             n,
                             d,
                             kernel->ir.headsDeclared ? kernel->headToSet[static_cast<size_t>(h)] : 0,
                             scale};
      backend.runSlice(*state, slice, *ws.scratch, threadsPerSlice);
      if (!outDirect)
        outputSlice(*o, b, h, ws.o);
    });
    return ATTNC_OK;
  } catch (const attnc::rt::RunError &e) {
    return fail(e.status, e.message);
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
