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
static_assert(ATTNC_OLDEST_ABI_VERSION == attnc::format::kOldestAbiVersion, "attnc.h and the kernel format disagree");

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

size_t elementBytes(attnc_dtype dtype) { return dtype == ATTNC_DTYPE_F32 ? 4 : 2; }

/// The bytes [first, last] a view can touch.
std::pair<uintptr_t, uintptr_t> byteRange(const attnc_tensor &t) {
  int64_t last = 0;
  for (int a = 0; a < 4; ++a)
    last += (t.shape[a] - 1) * t.strides[a];
  const uintptr_t first = reinterpret_cast<uintptr_t>(t.data);
  return {first, first + static_cast<uintptr_t>(last + 1) * elementBytes(t.dtype) - 1};
}

bool rangesMeet(const attnc_tensor &a, const attnc_tensor &b) {
  auto [a0, a1] = byteRange(a);
  auto [b0, b1] = byteRange(b);
  return a0 <= b1 && b0 <= a1;
}

/// One tensor argument of a call and its name in messages.
struct Arg {
  const attnc_tensor *t;
  const char *name;
};

/// Checks the [B, H, n, d] tensors of a call: `inputs` share one dtype,
/// every tensor has the shape of the first input, `outputs` do not overlap
/// themselves, (with `disjointOutputs`) one another or any input.
attnc_status validate(const attnc_kernel &kernel, const std::vector<Arg> &inputs, const std::vector<Arg> &outputs,
                      bool disjointOutputs) {
  std::vector<Arg> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto named = [](const Arg &x) { return std::string("tensor '") + x.name + "'"; };
  for (const Arg &x : all) {
    if (!x.t)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, named(x) + " is null");
    if (!x.t->data)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, named(x) + " has a null data pointer");
    if (x.t->dtype != ATTNC_DTYPE_F32 && x.t->dtype != ATTNC_DTYPE_BF16)
      return fail(ATTNC_ERROR_DTYPE, named(x) + " has dtype " + std::to_string(x.t->dtype) +
                                         "; kernels take f32 (" + std::to_string(ATTNC_DTYPE_F32) +
                                         ") or bf16 (" + std::to_string(ATTNC_DTYPE_BF16) + ")");
  }
  const Arg &first = inputs.front();
  std::string sharing;
  for (const Arg &x : inputs)
    sharing += (sharing.empty() ? "" : x.name == inputs.back().name ? " and " : ", ") + std::string(x.name);
  for (const Arg &x : inputs)
    if (x.t->dtype != first.t->dtype)
      return fail(ATTNC_ERROR_DTYPE, named(x) + " has dtype " + std::to_string(x.t->dtype) + " but '" +
                                         first.name + "' has " + std::to_string(first.t->dtype) + "; " +
                                         sharing + " must share one dtype");
  const int64_t *s = first.t->shape;
  for (const Arg &x : all)
    for (int a = 0; a < 4; ++a)
      if (x.t->shape[a] != s[a]) {
        std::ostringstream m;
        m << named(x) << " has shape [" << x.t->shape[0] << ", " << x.t->shape[1] << ", " << x.t->shape[2]
          << ", " << x.t->shape[3] << "] but '" << first.name << "' has [" << s[0] << ", " << s[1] << ", "
          << s[2] << ", " << s[3] << "]";
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
  for (const Arg &x : all)
    for (int a = 0; a < 4; ++a)
      if (x.t->strides[a] < 1)
        return fail(ATTNC_ERROR_STRIDE, named(x) + " has stride " + std::to_string(x.t->strides[a]) +
                                            " in dimension " + std::to_string(a) + "; strides must be positive");
  for (const Arg &x : outputs)
    if (!nonOverlapping(x.t->shape, x.t->strides))
      return fail(ATTNC_ERROR_STRIDE, std::string("the strides of '") + x.name + "' make distinct elements overlap");
  if (disjointOutputs)
    for (size_t o = 0; o < outputs.size(); ++o) {
      // Every input, and the outputs before this one.
      for (size_t x = 0; x < inputs.size() + o; ++x)
        if (rangesMeet(*outputs[o].t, *all[x].t))
          return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("tensor '") + outputs[o].name +
                                                        "' overlaps the memory of '" + all[x].name +
                                                        "'; each gradient needs memory of its own");
    }
  return ATTNC_OK;
}

/// lse: f32 [B, H, n, 1] with positive strides (its last is not read).
attnc_status validateLse(const attnc_tensor *lse, const attnc_tensor &q) {
  if (!lse->data)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'lse' has a null data pointer");
  if (lse->dtype != ATTNC_DTYPE_F32)
    return fail(ATTNC_ERROR_DTYPE, "tensor 'lse' has dtype " + std::to_string(lse->dtype) +
                                       "; the log-sum-exp is f32 (" + std::to_string(ATTNC_DTYPE_F32) + ")");
  for (int a = 0; a < 3; ++a)
    if (lse->shape[a] != q.shape[a] || lse->shape[3] != 1) {
      std::ostringstream m;
      m << "tensor 'lse' has shape [" << lse->shape[0] << ", " << lse->shape[1] << ", " << lse->shape[2] << ", "
        << lse->shape[3] << "] but must be [" << q.shape[0] << ", " << q.shape[1] << ", " << q.shape[2]
        << ", 1] (batch, heads, n of 'q')";
      return fail(ATTNC_ERROR_SHAPE, m.str());
    }
  for (int a = 0; a < 3; ++a)
    if (lse->strides[a] < 1)
      return fail(ATTNC_ERROR_STRIDE, "tensor 'lse' has stride " + std::to_string(lse->strides[a]) +
                                          " in dimension " + std::to_string(a) + "; strides must be positive");
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
    if (kernel->file.abiVersion < ATTNC_OLDEST_ABI_VERSION || kernel->file.abiVersion > ATTNC_ABI_VERSION)
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

/// Runs `body` and turns what it throws into a status.
template <typename Body> attnc_status guarded(Body &&body) {
  try {
    body();
    return ATTNC_OK;
  } catch (const attnc::rt::RunError &e) {
    return fail(e.status, e.message);
  } catch (const std::bad_alloc &) {
    return fail(ATTNC_ERROR_OUT_OF_MEMORY, "out of memory while running a kernel");
  } catch (const attnc::InternalError &e) {
    return fail(ATTNC_ERROR_INTERNAL, e.message);
  } catch (const std::exception &e) {
    return fail(ATTNC_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  }
}

/// What every slice of one call shares.
struct Call {
  const attnc_kernel &kernel;
  const attnc::rt::Backend &backend;
  const attnc::rt::LengthState &state;
  int64_t n, d;
  float scale;
  int threadsPerSlice;
  int64_t set(int64_t h) const {
    return kernel.ir.headsDeclared ? kernel.headToSet[static_cast<size_t>(h)] : 0;
  }
};

/// A slice worker's scratch: the backend's, and packed inputs and outputs.
struct SliceWorker {
  std::unique_ptr<attnc::rt::Scratch> scratch;
  std::vector<float> in[5], out[3], lse;
};

/// Runs body(worker, call, b, h) for every (batch, head) slice of a call
/// shaped like `q`: slices side by side on the shared pool, each splitting
/// its own work when there are fewer slices than threads, or one at a time
/// with every thread inside (Threading::Inside).
template <typename Body>
void runSlices(const attnc_kernel &kernel, const attnc_tensor &q, const attnc_run_options *options, Body &&body) {
  const int64_t batch = q.shape[0], heads = q.shape[1], n = q.shape[2], d = q.shape[3];
  const attnc::rt::Backend &backend = *kernel.backend;
  const int threads = attnc::support::resolveThreads(options ? options->num_threads : 0);
  auto state = const_cast<attnc_kernel &>(kernel).prepared(n, d, threads);
  const float scale = options && options->scale != 0.0f ? options->scale : 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t tasks = batch * heads;
  const bool inside = backend.threading() == attnc::rt::Threading::Inside;
  const int sliceThreads = inside ? 1 : static_cast<int>(std::min<int64_t>(threads, tasks));
  const Call call{kernel, backend, *state, n, d, scale, inside ? threads : std::max(1, threads / sliceThreads)};
  backend.beginRun(threads);
  std::vector<SliceWorker> workers(static_cast<size_t>(sliceThreads));
  attnc::support::parallelFor(tasks, sliceThreads, [&](int w, int64_t t) {
    SliceWorker &ws = workers[static_cast<size_t>(w)];
    if (!ws.scratch)
      ws.scratch = backend.newScratch();
    body(ws, call, t / heads, t % heads);
  });
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
  return attnc_run_forward(kernel, q, k, v, o, nullptr, options);
}

attnc_status attnc_run_forward(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                               const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                               const attnc_run_options *options) {
  if (!kernel)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run: kernel is null");
  if (attnc_status s = validate(*kernel, {{q, "q"}, {k, "k"}, {v, "v"}}, {{o, "o"}}, false); s != ATTNC_OK)
    return s;
  if (lse) {
    if (attnc_status s = validateLse(lse, *q); s != ATTNC_OK)
      return s;
    for (const auto &[t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}, {static_cast<const attnc_tensor *>(o), "o"}})
      if (rangesMeet(*lse, *t))
        return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                    std::string("tensor 'lse' overlaps the memory of '") + name + "'; it needs memory of its own");
    if (!kernel->backend->writesLse())
      return fail(ATTNC_ERROR_UNSUPPORTED, std::string("the ") + kernel->backend->name() +
                                               " backend does not give the rows' log-sum-exp (the backward "
                                               "pass needs it): compile the pattern with --backend fused");
  }
  return guarded([&] {
    const bool outDirect = o->dtype == ATTNC_DTYPE_F32 && contiguousSlice(*o);
    runSlices(*kernel, *q, options, [&](SliceWorker &ws, const Call &c, int64_t b, int64_t h) {
      // The output slice is written in place when it is contiguous f32.
      if (!outDirect)
        ws.out[0].assign(static_cast<size_t>(c.n * c.d), 0.0f);
      attnc::rt::Slice slice{inputSlice(*q, b, h, ws.in[0]),
                             inputSlice(*k, b, h, ws.in[1]),
                             inputSlice(*v, b, h, ws.in[2]),
                             outDirect ? static_cast<float *>(o->data) + sliceOffset(*o, b, h) : ws.out[0].data(),
                             c.n,
                             c.d,
                             c.set(h),
                             c.scale};
      if (lse) {
        ws.lse.resize(static_cast<size_t>(c.n));
        slice.lse = ws.lse.data();
      }
      c.backend.runSlice(c.state, slice, *ws.scratch, c.threadsPerSlice);
      if (!outDirect)
        outputSlice(*o, b, h, ws.out[0]);
      if (lse) {
        float *row = static_cast<float *>(lse->data) + b * lse->strides[0] + h * lse->strides[1];
        for (int64_t i = 0; i < c.n; ++i)
          row[i * lse->strides[2]] = ws.lse[static_cast<size_t>(i)];
      }
    });
  });
}

attnc_status attnc_run_backward(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                                const attnc_tensor *v, const attnc_tensor *o, const attnc_tensor *d_o,
                                const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                                const attnc_run_options *options) {
  if (!kernel)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run_backward: kernel is null");
  if (!lse)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'lse' is null (attnc_run_forward writes it)");
  if (attnc_status s = validate(*kernel, {{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {d_o, "d_o"}},
                                {{d_q, "d_q"}, {d_k, "d_k"}, {d_v, "d_v"}}, true);
      s != ATTNC_OK)
    return s;
  if (attnc_status s = validateLse(lse, *q); s != ATTNC_OK)
    return s;
  for (const auto &[grad, name] : {std::pair{d_q, "d_q"}, {d_k, "d_k"}, {d_v, "d_v"}})
    if (rangesMeet(*grad, *lse))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("tensor '") + name +
                                                    "' overlaps the memory of 'lse'; each gradient needs memory of its own");
  if (!kernel->backend->hasBackward())
    return fail(ATTNC_ERROR_UNSUPPORTED, std::string("the ") + kernel->backend->name() +
                                             " backend computes the forward pass only; compile the pattern "
                                             "with --backend fused (or dense) for gradients");
  return guarded([&] {
    attnc_tensor *grads[3] = {d_q, d_k, d_v};
    bool direct[3];
    for (int g = 0; g < 3; ++g)
      direct[g] = grads[g]->dtype == ATTNC_DTYPE_F32 && contiguousSlice(*grads[g]);
    runSlices(*kernel, *q, options, [&](SliceWorker &ws, const Call &c, int64_t b, int64_t h) {
      float *out[3];
      for (int g = 0; g < 3; ++g) {
        if (!direct[g])
          ws.out[g].resize(static_cast<size_t>(c.n * c.d));
        out[g] = direct[g] ? static_cast<float *>(grads[g]->data) + sliceOffset(*grads[g], b, h) : ws.out[g].data();
      }
      ws.lse.resize(static_cast<size_t>(c.n));
      const float *row = static_cast<const float *>(lse->data) + b * lse->strides[0] + h * lse->strides[1];
      for (int64_t i = 0; i < c.n; ++i)
        ws.lse[static_cast<size_t>(i)] = row[i * lse->strides[2]];
      attnc::rt::GradSlice slice{inputSlice(*q, b, h, ws.in[0]),
                                 inputSlice(*k, b, h, ws.in[1]),
                                 inputSlice(*v, b, h, ws.in[2]),
                                 inputSlice(*o, b, h, ws.in[3]),
                                 inputSlice(*d_o, b, h, ws.in[4]),
                                 ws.lse.data(),
                                 out[0],
                                 out[1],
                                 out[2],
                                 c.n,
                                 c.d,
                                 c.set(h),
                                 c.scale};
      c.backend.runBackwardSlice(c.state, slice, *ws.scratch, c.threadsPerSlice);
      for (int g = 0; g < 3; ++g)
        if (!direct[g])
          outputSlice(*grads[g], b, h, ws.out[g]);
    });
  });
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
