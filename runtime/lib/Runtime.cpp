//===- Runtime.cpp - The attnc C ABI: load, validate, run -----------------===//
//
// A kernel file carries its pattern's canonical IR as text; loading reads it
// back (no front end, no MLIR) and makes the backend the file names
// (backends/Registry.cpp). This file owns what every backend shares:
// argument checks (shapes, sizes that overflow, overlaps, varlen offsets),
// the call's sequences (a batch element, or a varlen sequence) and their
// slices, packing strided or bf16 slices into contiguous f32 and back,
// padding queries that are fewer than the keys for backends that compute
// whole squares, the key/value head of each query head (grouped-query
// attention, and the sum of dK, dV over a group), the per-n cache of what
// the backend prepares, and spreading the slices over the shared thread
// pool (support/ThreadPool.h).
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "attnc/attnc.hpp"

#include "attnc/format/KernelFile.h"
#include "attnc/plan/IrText.h"
#include "attnc/plan/RowEvaluator.h"
#include "attnc/runtime/Internal.h"
#include "attnc/support/Check.h"
#include "attnc/support/Files.h"
#include "attnc/support/ThreadPool.h"

#include "CallInputs.h"
#include "FusedExecutor.h"
#include "backends/Backend.h"
#include "cuda/CudaDriver.h"
#include "cuda/CudaRun.h"

#include <algorithm>
#include <cstddef>
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

  /// The cuda target's state (GPU plan, tables per device and n), made at
  /// the first call on a GPU.
  mutable std::mutex cudaMutex;
  mutable std::unique_ptr<attnc::rt::cuda::Engine> cudaEngine;
  /// The forward variants `attnc tune --target cuda` recorded (metadata cuda_tuned).
  std::string tunedForGpu() const {
    auto it = file.metadata.find("cuda_tuned");
    return it == file.metadata.end() ? std::string() : it->second;
  }
  attnc::rt::cuda::Engine &cuda() const {
    std::lock_guard<std::mutex> lock(cudaMutex);
    if (!cudaEngine)
      cudaEngine = std::make_unique<attnc::rt::cuda::Engine>(ir, headToSet, tunedForGpu());
    return *cudaEngine;
  }

  /// What the backend prepared per (n, variant), most recent first.
  struct Prepared {
    int64_t n;
    const void *variant;
    std::shared_ptr<const attnc::rt::LengthState> state;
  };
  std::mutex cacheMutex;
  std::list<Prepared> cache;
  /// A varlen batch prepares one state per distinct length: enough entries
  /// for a batch of typical lengths, within a memory budget.
  static constexpr size_t kCacheEntries = 64;
  static constexpr size_t kCacheBytes = size_t{256} << 20;

  /// The backend's state for `pass` at length n and head dimension d,
  /// prepared on first use. Throws RunError.
  std::shared_ptr<const attnc::rt::LengthState> prepared(int64_t n, int64_t d, attnc::rt::Pass pass, int threads) {
    const void *variant = backend->variant(d, pass);
    std::lock_guard<std::mutex> lock(cacheMutex);
    for (auto it = cache.begin(); it != cache.end(); ++it)
      if (it->n == n && it->variant == variant) {
        cache.splice(cache.begin(), cache, it);
        return cache.front().state;
      }
    cache.push_front({n, variant, backend->prepare(n, d, pass, threads)});
    size_t bytes = 0;
    for (const Prepared &p : cache)
      bytes += p.state->bytes();
    while (cache.size() > 1 && (cache.size() > kCacheEntries || bytes > kCacheBytes)) {
      bytes -= cache.back().state->bytes();
      cache.pop_back();
    }
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

size_t elementBytes(attnc_dtype dtype) {
  return dtype == ATTNC_DTYPE_I64 ? 8 : dtype == ATTNC_DTYPE_F32 || dtype == ATTNC_DTYPE_I32 ? 4 : 2;
}

bool isEmpty(const attnc_tensor &t) {
  return t.shape[0] == 0 || t.shape[1] == 0 || t.shape[2] == 0 || t.shape[3] == 0;
}

std::string shapeText(const int64_t shape[4]) {
  std::ostringstream m;
  m << "[" << shape[0] << ", " << shape[1] << ", " << shape[2] << ", " << shape[3] << "]";
  return m.str();
}

/// The bytes from a non-empty view's first element to past its last, or
/// false when that (or the address it ends at) overflows.
bool spanBytes(const attnc_tensor &t, uint64_t &bytes) {
  int64_t last = 0;
  for (int a = 0; a < 4; ++a) {
    int64_t step;
    if (__builtin_mul_overflow(t.shape[a] - 1, t.strides[a], &step) || __builtin_add_overflow(last, step, &last))
      return false;
  }
  uint64_t elements = static_cast<uint64_t>(last) + 1;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(elementBytes(t.dtype)), &bytes))
    return false;
  return reinterpret_cast<uintptr_t>(t.data) <= UINTPTR_MAX - bytes;
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
    if (__builtin_mul_overflow(strides[k], shape[k], &span))
      span = INT64_MAX; // past every address: any further dimension overlaps
  }
  return true;
}

/// Whether two validated views share a byte (empty views share none).
bool rangesMeet(const attnc_tensor &a, const attnc_tensor &b) {
  uint64_t aBytes, bBytes;
  if (isEmpty(a) || isEmpty(b) || !spanBytes(a, aBytes) || !spanBytes(b, bBytes))
    return false;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + bBytes && b0 < a0 + aBytes;
}

/// Which shape a tensor argument has: Q's [B, Hq, nq, d] or K's [B, Hkv, nk, d].
enum class Role { Query, KeyValue };

/// One tensor argument of a call and its name in messages.
struct Arg {
  const attnc_tensor *t;
  const char *name;
  Role role;
};

/// The sizes of a validated call.
struct Shape {
  int64_t batch = 0, hq = 0, hkv = 0, nq = 0, nk = 0, d = 0;
  int64_t group() const { return hq / hkv; }
  /// No output element: nothing to compute (every check but sizes skipped).
  bool empty() const { return batch == 0 || hq == 0 || nq == 0; }
};

/// Checks the tensors of a call: `inputs` share one dtype; Query tensors
/// have q's shape, KeyValue tensors k's; `outputs` do not overlap
/// themselves, (with `disjointOutputs`) one another or any input. `varlen`
/// calls check nq <= nk per sequence instead (sequences()).
attnc_status validate(const attnc_kernel &kernel, const std::vector<Arg> &inputs, const std::vector<Arg> &outputs,
                      bool disjointOutputs, bool varlen, Shape &shape, bool gpu = false) {
  std::vector<Arg> all = inputs;
  all.insert(all.end(), outputs.begin(), outputs.end());
  auto named = [](const Arg &x) { return std::string("tensor '") + x.name + "'"; };
  for (const Arg &x : all) {
    if (!x.t)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, named(x) + " is null");
    if (!(gpu && x.t->dtype == ATTNC_DTYPE_F16) && x.t->dtype != ATTNC_DTYPE_F32 && x.t->dtype != ATTNC_DTYPE_BF16)
      return fail(ATTNC_ERROR_DTYPE, named(x) + " has dtype " + std::to_string(x.t->dtype) +
                                         "; kernels take f32 (" + std::to_string(ATTNC_DTYPE_F32) +
                                         ") or bf16 (" + std::to_string(ATTNC_DTYPE_BF16) + ")" +
                                         (x.t->dtype == ATTNC_DTYPE_F16 ? ", and fp16 on CUDA devices" : ""));
    for (int a = 0; a < 4; ++a)
      if (x.t->shape[a] < 0)
        return fail(ATTNC_ERROR_SHAPE, named(x) + " has shape " + shapeText(x.t->shape) + "; sizes must not be negative");
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
  const Arg *q = nullptr, *k = nullptr;
  for (const Arg &x : inputs) {
    const Arg *&slot = x.role == Role::Query ? q : k;
    if (!slot)
      slot = &x;
  }
  const int64_t *qs = q->t->shape, *ks = k->t->shape;
  if (ks[0] != qs[0] || ks[3] != qs[3])
    return fail(ATTNC_ERROR_SHAPE, std::string("tensor '") + k->name + "' has shape " + shapeText(ks) + " but '" +
                                       q->name + "' has " + shapeText(qs) +
                                       "; they must agree in batch (dimension 0) and d (dimension 3)");
  for (const Arg &x : all) {
    const Arg &like = *(x.role == Role::Query ? q : k);
    for (int a = 0; a < 4; ++a)
      if (x.t->shape[a] != like.t->shape[a])
        return fail(ATTNC_ERROR_SHAPE, named(x) + " has shape " + shapeText(x.t->shape) + " but '" + like.name +
                                           "' has " + shapeText(like.t->shape));
  }
  shape = {qs[0], qs[1], ks[1], qs[2], ks[2], qs[3]};
  for (const Arg &x : all) {
    if (isEmpty(*x.t))
      continue; // never read or written: any pointer and strides
    if (!x.t->data)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, named(x) + " has a null data pointer");
    for (int a = 0; a < 4; ++a)
      if (x.t->strides[a] < 1)
        return fail(ATTNC_ERROR_STRIDE, named(x) + " has stride " + std::to_string(x.t->strides[a]) +
                                            " in dimension " + std::to_string(a) + "; strides must be positive");
    uint64_t bytes;
    if (!spanBytes(*x.t, bytes))
      return fail(ATTNC_ERROR_SHAPE, named(x) + " of shape " + shapeText(x.t->shape) + " with strides " +
                                         shapeText(x.t->strides) + " reaches past the end of the address space");
  }
  if (!shape.empty()) {
    if (shape.d < 1)
      return fail(ATTNC_ERROR_SHAPE, "the head dimension d (dimension 3) is 0; attention needs d >= 1");
    if (shape.hkv < 1 || shape.hq % shape.hkv != 0)
      return fail(ATTNC_ERROR_SHAPE, std::string("'") + q->name + "' has " + std::to_string(shape.hq) +
                                         " heads and '" + k->name + "' " + std::to_string(shape.hkv) +
                                         "; the query heads must be a multiple of the key/value heads (each "
                                         "group of query heads shares one)");
    if (!varlen && shape.nq > shape.nk)
      return fail(ATTNC_ERROR_SHAPE, std::string("'") + q->name + "' has " + std::to_string(shape.nq) +
                                         " rows but '" + k->name + "' " + std::to_string(shape.nk) +
                                         "; the queries are the last nq of the nk key positions, so nq <= nk");
    if (kernel.ir.headsDeclared && shape.hq != kernel.ir.numHeads)
      return fail(ATTNC_ERROR_SHAPE, std::string("'") + q->name + "' has " + std::to_string(shape.hq) +
                                         " heads but pattern '" + kernel.ir.name + "' has " +
                                         std::to_string(kernel.ir.numHeads));
  }
  for (const Arg &x : outputs)
    if (!isEmpty(*x.t) && !nonOverlapping(x.t->shape, x.t->strides))
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

/// lse: f32 [B, Hq, nq, 1] with positive strides (its last is not read).
attnc_status validateLse(const attnc_tensor *lse, const attnc_tensor &q) {
  if (lse->dtype != ATTNC_DTYPE_F32)
    return fail(ATTNC_ERROR_DTYPE, "tensor 'lse' has dtype " + std::to_string(lse->dtype) +
                                       "; the log-sum-exp is f32 (" + std::to_string(ATTNC_DTYPE_F32) + ")");
  for (int a = 0; a < 3; ++a)
    if (lse->shape[a] != q.shape[a] || lse->shape[3] != 1)
      return fail(ATTNC_ERROR_SHAPE, "tensor 'lse' has shape " + shapeText(lse->shape) + " but must be [" +
                                         std::to_string(q.shape[0]) + ", " + std::to_string(q.shape[1]) + ", " +
                                         std::to_string(q.shape[2]) + ", 1] (batch, heads, n of 'q')");
  if (isEmpty(*lse))
    return ATTNC_OK;
  if (!lse->data)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'lse' has a null data pointer");
  for (int a = 0; a < 3; ++a)
    if (lse->strides[a] < 1)
      return fail(ATTNC_ERROR_STRIDE, "tensor 'lse' has stride " + std::to_string(lse->strides[a]) +
                                          " in dimension " + std::to_string(a) + "; strides must be positive");
  attnc_tensor rows = *lse;
  rows.strides[3] = 1;
  uint64_t bytes;
  if (!spanBytes(rows, bytes))
    return fail(ATTNC_ERROR_SHAPE, "tensor 'lse' of shape " + shapeText(lse->shape) + " with strides " +
                                       shapeText(lse->strides) + " reaches past the end of the address space");
  return ATTNC_OK;
}

/// One sequence of a call: batch element b's query rows [q0, q0 + nq) and
/// key rows [k0, k0 + nk): a batch element of a dense call, or one
/// sequence of a varlen call (b = 0).
struct Seq {
  int64_t b, q0, nq, k0, nk;
  /// The first query's position among the nk keys: nk - nq (bottom-right
  /// aligned) unless a call names another (attnc_run_forward_at).
  int64_t first = -1;
  int64_t firstQuery() const { return first >= 0 ? first : nk - nq; }
  /// Keys held at positions (attnc_call::key_positions): nk ascending
  /// positions, the pattern's length `length` (first is then set); null:
  /// the keys are positions 0 .. nk - 1.
  const int64_t *held = nullptr;
  int64_t length = 0;
};

/// Reads and checks one cu_seqlens array: `count` + 1 offsets from 0 up to `rows`.
attnc_status readOffsets(const int32_t *cu, int64_t count, int64_t rows, const char *name, const char *tensor,
                         std::vector<int64_t> &out) {
  out.resize(static_cast<size_t>(count + 1));
  for (int64_t s = 0; s <= count; ++s) {
    out[static_cast<size_t>(s)] = cu[s];
    if (s == 0 && cu[0] != 0)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string(name) + "[0] is " + std::to_string(cu[0]) + "; it must be 0");
    if (s > 0 && cu[s] < cu[s - 1])
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string(name) + " decreases at " + std::to_string(s) + ": " +
                                                    std::to_string(cu[s - 1]) + " then " + std::to_string(cu[s]));
  }
  if (out.back() != rows)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string(name) + " ends at " + std::to_string(out.back()) +
                                                  " but '" + tensor + "' has " + std::to_string(rows) + " rows");
  return ATTNC_OK;
}

/// The sequences of a validated call.
attnc_status sequences(const Shape &shape, const attnc_varlen *varlen, std::vector<Seq> &out,
                       int64_t firstQuery = -1) {
  out.clear();
  if (!varlen) {
    for (int64_t b = 0; b < shape.batch; ++b)
      out.push_back({b, 0, shape.nq, 0, shape.nk, firstQuery});
    return ATTNC_OK;
  }
  if (varlen->num_seqs < 0)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "varlen num_seqs is " + std::to_string(varlen->num_seqs) +
                                                  "; it must not be negative");
  if (!varlen->cu_seqlens_q)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "varlen cu_seqlens_q is null");
  if (shape.batch != 1)
    return fail(ATTNC_ERROR_SHAPE, "a varlen call packs its sequences along n, so the batch (dimension 0) must be "
                                   "1, got " + std::to_string(shape.batch));
  if (!varlen->cu_seqlens_k && shape.nk != shape.nq)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                "varlen cu_seqlens_k is null, so keys take the queries' offsets, but 'k' has " +
                    std::to_string(shape.nk) + " rows and 'q' " + std::to_string(shape.nq) + "; pass cu_seqlens_k");
  std::vector<int64_t> cq, ck;
  if (attnc_status s = readOffsets(varlen->cu_seqlens_q, varlen->num_seqs, shape.nq, "cu_seqlens_q", "q", cq);
      s != ATTNC_OK)
    return s;
  if (attnc_status s = readOffsets(varlen->cu_seqlens_k ? varlen->cu_seqlens_k : varlen->cu_seqlens_q,
                                   varlen->num_seqs, shape.nk, "cu_seqlens_k", "k", ck);
      s != ATTNC_OK)
    return s;
  for (int64_t s = 0; s < varlen->num_seqs; ++s) {
    const size_t at = static_cast<size_t>(s);
    const int64_t nq = cq[at + 1] - cq[at], nk = ck[at + 1] - ck[at];
    if (nq > nk)
      return fail(ATTNC_ERROR_SHAPE, "sequence " + std::to_string(s) + " has " + std::to_string(nq) + " queries but " +
                                         std::to_string(nk) + " keys; the queries are the last nq of the nk key "
                                         "positions, so nq <= nk");
    out.push_back({0, cq[at], nq, ck[at], nk});
  }
  return ATTNC_OK;
}

/// What a packed input buffer holds, so that a key/value slice that a
/// group of query heads shares is packed once per worker and call.
struct Packed {
  const attnc_tensor *t = nullptr;
  int64_t b = -1, h = -1, row0 = -1, rows = -1, pad = -1, tail = -1;
  bool operator==(const Packed &o) const {
    return t == o.t && b == o.b && h == o.h && row0 == o.row0 && rows == o.rows && pad == o.pad && tail == o.tail;
  }
};

/// Element offset of row `row` of slice (b, h).
int64_t rowOffset(const attnc_tensor &t, int64_t b, int64_t h, int64_t row) {
  return b * t.strides[0] + h * t.strides[1] + row * t.strides[2];
}

/// Whether rows [row0, row0 + rows) of a slice are one contiguous [rows, d] block.
bool contiguousRows(const attnc_tensor &t, int64_t rows) {
  return t.strides[3] == 1 && (rows == 1 || t.strides[2] == t.shape[3]);
}

template <typename T> constexpr attnc_dtype kNative = std::is_same_v<T, float> ? ATTNC_DTYPE_F32 : ATTNC_DTYPE_BF16;

/// Rows [row0, row0 + rows) of slice (b, h) of `t`, after `pad` rows of
/// zeros, as contiguous [pad + rows, d] elements of T: float (f32, or bf16
/// widened: backends compute and accumulate in f32) or uint16_t (bf16 as it
/// is, for backends that take it). The tensor's own memory when it already
/// has that layout, else packed into `scratch` unless `memo` says it holds
/// these rows already.
template <typename T>
const T *inputRows(const attnc_tensor &t, int64_t b, int64_t h, int64_t row0, int64_t rows, int64_t pad,
                   std::vector<T> &scratch, Packed &memo, int64_t tail = 0) {
  const int64_t d = t.shape[3], off = rowOffset(t, b, h, row0);
  if (pad == 0 && tail == 0 && t.dtype == kNative<T> && contiguousRows(t, rows))
    return static_cast<const T *>(t.data) + off;
  const Packed key{&t, b, h, row0, rows, pad, tail};
  if (memo == key)
    return scratch.data();
  // The zero rows around the data: already there when the last rows packed
  // here had the same place in it (the next head of a call, say: the
  // padding of a call of few queries is most of the scratch).
  const size_t size = static_cast<size_t>((pad + rows + tail) * d);
  if (memo.rows != rows || memo.pad != pad || memo.tail != tail || scratch.size() != size)
    scratch.assign(size, T{});
  memo = key;
  auto pack = [&](const auto *data, auto convert) {
    for (int64_t i = 0; i < rows; ++i) {
      const auto *row = data + off + i * t.strides[2];
      T *dst = scratch.data() + (pad + i) * d;
      if (t.strides[3] == 1) // contiguous rows: a loop the compiler vectorises
        for (int64_t c = 0; c < d; ++c)
          dst[c] = convert(row[c]);
      else
        for (int64_t c = 0; c < d; ++c)
          dst[c] = convert(row[c * t.strides[3]]);
    }
  };
  if constexpr (std::is_same_v<T, float>) {
    if (t.dtype == ATTNC_DTYPE_BF16)
      pack(static_cast<const uint16_t *>(t.data), attnc::bf16ToFloat);
    else
      pack(static_cast<const float *>(t.data), [](float x) { return x; });
  } else {
    pack(static_cast<const uint16_t *>(t.data), [](uint16_t x) { return x; });
  }
  return scratch.data();
}

/// Rows [row0, row0 + rows) of slice (b, h) of an output, when it is
/// contiguous f32 that a backend can write in place; else null.
float *directRows(const attnc_tensor &t, int64_t b, int64_t h, int64_t row0, int64_t rows) {
  if (t.dtype != ATTNC_DTYPE_F32 || !contiguousRows(t, rows))
    return nullptr;
  return static_cast<float *>(t.data) + rowOffset(t, b, h, row0);
}

/// Writes finished contiguous f32 rows `src` ([rows, d]) into rows
/// [row0, row0 + rows) of slice (b, h) of `t` (its strides, its dtype:
/// bf16 rounded to nearest even).
void outputRows(const attnc_tensor &t, int64_t b, int64_t h, int64_t row0, int64_t rows, const float *src) {
  const int64_t d = t.shape[3], off = rowOffset(t, b, h, row0);
  auto unpack = [&](auto *data, auto narrow) {
    for (int64_t i = 0; i < rows; ++i) {
      auto *row = data + off + i * t.strides[2];
      const float *from = src + i * d;
      if (t.strides[3] == 1)
        for (int64_t c = 0; c < d; ++c)
          row[c] = narrow(from[c]);
      else
        for (int64_t c = 0; c < d; ++c)
          row[c * t.strides[3]] = narrow(from[c]);
    }
  };
  if (t.dtype == ATTNC_DTYPE_BF16)
    unpack(static_cast<uint16_t *>(t.data), attnc::floatToBf16);
  else
    unpack(static_cast<float *>(t.data), [](float x) { return x; });
}

/// Row `row` of slice (b, h) of an lse tensor ([B, H, n, 1] f32).
float &lseAt(const attnc_tensor &lse, int64_t b, int64_t h, int64_t row) {
  return static_cast<float *>(lse.data)[b * lse.strides[0] + h * lse.strides[1] + row * lse.strides[2]];
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
  } catch (const attnc::InputError &e) { // data a pattern reads out of its input's range
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, e.what());
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
  Shape shape;
  float scale;
  int threadsPerSlice;
  int64_t set(int64_t h) const {
    return kernel.ir.headsDeclared ? kernel.headToSet[static_cast<size_t>(h)] : 0;
  }
  /// Whether the backend computes sequence `s`'s queries itself, without
  /// the zero rows before them (and without a per-n state), in either pass.
  bool rowRange(const Seq &s) const {
    if (s.held)
      return true;
    return s.nq < s.nk && s.firstQuery() + s.nq == s.nk && backend.takesRowRange(s.nq, s.nk);
  }
};

/// A slice worker's packing buffers: rows packed or padded for a backend,
/// outputs and sums it writes before they are copied out.
struct PackBuffers {
  std::vector<float> in[5], out[3], sum[2], lse;
  std::vector<uint16_t> inBf16[3];

  size_t bytes() const {
    size_t b = lse.capacity() * sizeof(float);
    auto add = [&b](const auto &buffers) {
      for (const auto &x : buffers)
        b += x.capacity() * sizeof(x[0]);
    };
    add(in);
    add(out);
    add(sum);
    add(inBf16);
    return b;
  }
};

/// Packing buffers kept from one call to the next, up to kKeptBytes in all.
/// A call of few queries against many keys packs n rows per slice (the
/// padding around its queries): megabytes that, freshly allocated, cost a
/// page fault per 4 KiB on every call (a tenth of such a call's time,
/// measured at n = 65,536 with half the queries).
class PackPool {
public:
  static constexpr size_t kKeptBytes = size_t{512} << 20;

  PackBuffers take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (kept_.empty())
      return {};
    PackBuffers out = std::move(kept_.back());
    kept_.pop_back();
    bytes_ -= out.bytes();
    return out;
  }

  void give(PackBuffers &&buffers) {
    const size_t b = buffers.bytes();
    std::lock_guard<std::mutex> lock(mutex_);
    if (b == 0 || bytes_ + b > kKeptBytes)
      return; // (freed by the caller's destructor)
    bytes_ += b;
    kept_.push_back(std::move(buffers));
  }

private:
  std::mutex mutex_;
  std::vector<PackBuffers> kept_;
  size_t bytes_ = 0;
};

PackPool &packPool() {
  static PackPool pool;
  return pool;
}

/// One thread's share of a call: the backend's scratch, the packing buffers
/// (from the pool, and back to it), and what they hold now.
struct SliceWorker : PackBuffers {
  SliceWorker() : PackBuffers(packPool().take()) {}
  ~SliceWorker() { packPool().give(std::move(static_cast<PackBuffers &>(*this))); }
  SliceWorker(const SliceWorker &) = delete;
  SliceWorker &operator=(const SliceWorker &) = delete;

  std::unique_ptr<attnc::rt::Scratch> scratch;
  Packed packed[5], packedBf16[3];
  std::vector<double> inputGrad; ///< a backward slice's float-input gradients
};

/// What a row-range slice runs on: the backend prepares nothing per n for it.
const attnc::rt::LengthState &noState() {
  static const attnc::rt::LengthState state;
  return state;
}

/// The softmax scale of a call: the options', or 1/sqrt(d).
float callScale(const attnc_run_options *options, int64_t d) {
  return options && options->scale != 0.0f ? options->scale : 1.0f / std::sqrt(static_cast<float>(d));
}

/// Runs `pass`'s body(worker, call, sequence, head, state) for every
/// sequence of the call with queries and every head (of Hq for the forward,
/// of Hkv for the backward, which runs a group's query heads in one task),
/// on the state the backend prepared for the pass and length: slices
/// side by side on the shared pool, longest sequences first, each splitting
/// its own work when there are fewer slices than threads, or one at a time
/// with every thread inside (Threading::Inside).
template <typename Body>
void runSlices(const attnc_kernel &kernel, attnc::rt::Pass pass, const Shape &shape, const std::vector<Seq> &seqs,
               const attnc_run_options *options, Body &&body) {
  const attnc::rt::Backend &backend = *kernel.backend;
  const int64_t heads = pass == attnc::rt::Pass::Forward ? shape.hq : shape.hkv;
  int threads = attnc::support::resolveThreads(options ? options->num_threads : 0);
  const float scale = callScale(options, shape.d);
  std::vector<size_t> order;
  for (size_t s = 0; s < seqs.size(); ++s)
    if (seqs[s].nq > 0)
      order.push_back(s);
  if (order.empty())
    return;
  // A decoding step over a cache that holds few keys: waking another thread
  // costs more than the work (measured: 4 heads of one query over 609 keys
  // at d = 32 took 43 us on one thread, 71 us on two).
  constexpr int64_t kSerialWork = int64_t{1} << 20; // multiply-adds
  int64_t work = 0;
  for (size_t s : order)
    work = seqs[s].held ? work + seqs[s].nq * seqs[s].nk * heads * shape.d : kSerialWork;
  if (work < kSerialWork)
    threads = 1;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return seqs[a].nk > seqs[b].nk; });
  const int64_t tasks = static_cast<int64_t>(order.size()) * heads;
  const bool inside = backend.threading() == attnc::rt::Threading::Inside;
  const int sliceThreads = inside ? 1 : static_cast<int>(std::min<int64_t>(threads, tasks));
  const Call call{kernel, backend, shape, scale, inside ? threads : std::max(1, threads / sliceThreads)};
  // One state per distinct length, prepared before the slices run.
  std::vector<std::shared_ptr<const attnc::rt::LengthState>> states(seqs.size());
  for (size_t s : order) {
    if (call.rowRange(seqs[s]))
      continue;
    for (size_t t : order)
      if (states[t] && seqs[t].nk == seqs[s].nk) {
        states[s] = states[t];
        break;
      }
    if (!states[s])
      states[s] = const_cast<attnc_kernel &>(kernel).prepared(seqs[s].nk, shape.d, pass, threads);
  }
  backend.beginRun(threads);
  std::vector<SliceWorker> workers(static_cast<size_t>(sliceThreads));
  attnc::support::parallelFor(tasks, sliceThreads, [&](int w, int64_t t) {
    SliceWorker &ws = workers[static_cast<size_t>(w)];
    if (!ws.scratch)
      ws.scratch = backend.newScratch();
    const size_t s = order[static_cast<size_t>(t / heads)];
    body(ws, call, seqs[s], t % heads, states[s] ? *states[s] : noState());
  });
}

/// The forward pass of a validated call.
void forward(const attnc_kernel &kernel, const Shape &shape, const std::vector<Seq> &seqs, const attnc_tensor &q,
             const attnc_tensor &k, const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor *lse,
             const attnc::rt::CallInputs &inputs, const attnc_run_options *options) {
  runSlices(kernel, attnc::rt::Pass::Forward, shape, seqs, options,
            [&](SliceWorker &ws, const Call &c, const Seq &s, int64_t h, const attnc::rt::LengthState &state) {
              const int64_t d = c.shape.d, g = h / c.shape.group();
              const bool rowRange = c.rowRange(s);
              // Backends that compute whole squares get the queries between
              // zero rows (before them, and after them up to nk when a call
              // puts them earlier), and their output for those is dropped.
              const int64_t pad = rowRange ? 0 : s.firstQuery(), tail = rowRange ? 0 : s.nk - pad - s.nq,
                            rows = pad + s.nq + tail;
              attnc::rt::Slice slice{nullptr, nullptr, nullptr, nullptr, s.held ? s.length : s.nk, d, c.set(h),
                                     c.scale};
              slice.firstRow = s.held ? s.firstQuery() : rowRange ? s.nk - s.nq : 0;
              slice.skipRows = pad;
              slice.endRows = s.held ? s.firstQuery() + s.nq : rowRange ? s.nk : pad + s.nq; // (no padding)
              slice.heldKeys = s.held;
              slice.heldCount = s.held ? s.nk : 0;
              slice.inputs = inputs.slice(s.b, h);
              slice.head = h;
              slice.floats = inputs.floats().empty() ? nullptr : &inputs.floats();
              const bool bf16 = q.dtype == ATTNC_DTYPE_BF16 &&
                                (rowRange ? c.backend.takesBf16Rows() : c.backend.takesBf16(d));
              if (bf16) {
                slice.qb = inputRows(q, s.b, h, s.q0, s.nq, pad, ws.inBf16[0], ws.packedBf16[0], tail);
                slice.kb = inputRows(k, s.b, g, s.k0, s.nk, 0, ws.inBf16[1], ws.packedBf16[1]);
                slice.vb = inputRows(v, s.b, g, s.k0, s.nk, 0, ws.inBf16[2], ws.packedBf16[2]);
              } else {
                slice.q = inputRows(q, s.b, h, s.q0, s.nq, pad, ws.in[0], ws.packed[0], tail);
                slice.k = inputRows(k, s.b, g, s.k0, s.nk, 0, ws.in[1], ws.packed[1]);
                slice.v = inputRows(v, s.b, g, s.k0, s.nk, 0, ws.in[2], ws.packed[2]);
              }
              float *direct = pad == 0 && tail == 0 ? directRows(o, s.b, h, s.q0, s.nq) : nullptr;
              if (!direct) // (every backend writes each row it computes; the others are not read back)
                ws.out[0].resize(static_cast<size_t>(rows * d));
              slice.o = direct ? direct : ws.out[0].data();
              if (lse) {
                ws.lse.resize(static_cast<size_t>(rows));
                slice.lse = ws.lse.data();
              }
              c.backend.runSlice(state, slice, *ws.scratch, c.threadsPerSlice);
              if (!direct)
                outputRows(o, s.b, h, s.q0, s.nq, ws.out[0].data() + pad * d);
              if (lse)
                for (int64_t i = 0; i < s.nq; ++i)
                  lseAt(*lse, s.b, h, s.q0 + i) = ws.lse[static_cast<size_t>(pad + i)];
            });
}

/// The backward pass of a validated call. A task is one key/value head:
/// its group's query heads run one after another, dK and dV summed over
/// them. A few queries at the end of many keys run on their own where the
/// backend takes row ranges (Call::rowRange): the backend adds their dK and
/// dV into the group's sums, cleared once here. Otherwise query rows fewer
/// than the keys are padded with zero rows (q, o, dO and lse 0), which add
/// exactly nothing: their dP and delta are 0.
void backward(const attnc_kernel &kernel, const Shape &shape, const std::vector<Seq> &seqs,
              const attnc_tensor &q, const attnc_tensor &k, const attnc_tensor &v, const attnc_tensor &o,
              const attnc_tensor &dO, const attnc_tensor &lse, const attnc_tensor &dq, const attnc_tensor &dk,
              const attnc_tensor &dv, const attnc::rt::CallInputs &inputs, const attnc_run_options *options,
              std::vector<double> *inputGrad) {
  std::mutex gradLock; // (slices add their float-input gradients into *inputGrad under it)
  runSlices(kernel, attnc::rt::Pass::Backward, shape, seqs, options,
            [&](SliceWorker &ws, const Call &c, const Seq &s, int64_t g, const attnc::rt::LengthState &state) {
              const int64_t d = c.shape.d, n = s.nk, group = c.shape.group();
              const bool rowRange = c.rowRange(s);
              const int64_t pad = rowRange ? 0 : s.firstQuery(), tail = rowRange ? 0 : s.nk - pad - s.nq,
                            rows = pad + s.nq + tail;
              const size_t size = static_cast<size_t>(n * d);
              // A row-range slice reads bf16 keys and values as they are,
              // only the rows its queries name.
              const bool bf16 = rowRange && k.dtype == ATTNC_DTYPE_BF16 && c.backend.takesBf16Rows();
              const float *kIn = bf16 ? nullptr : inputRows(k, s.b, g, s.k0, n, 0, ws.in[1], ws.packed[1]);
              const float *vIn = bf16 ? nullptr : inputRows(v, s.b, g, s.k0, n, 0, ws.in[2], ws.packed[2]);
              const uint16_t *kbIn = bf16 ? inputRows(k, s.b, g, s.k0, n, 0, ws.inBf16[1], ws.packedBf16[1]) : nullptr;
              const uint16_t *vbIn = bf16 ? inputRows(v, s.b, g, s.k0, n, 0, ws.inBf16[2], ws.packedBf16[2]) : nullptr;
              // dK and dV of the group: in place when that is possible and
              // one query head writes them or a row range adds to them, else
              // summed in `ws.sum`.
              const bool inPlace = group == 1 || rowRange;
              float *dkOut = inPlace ? directRows(dk, s.b, g, s.k0, n) : nullptr;
              float *dvOut = inPlace ? directRows(dv, s.b, g, s.k0, n) : nullptr;
              float *dkSum = dkOut ? dkOut : (ws.sum[0].resize(size), ws.sum[0].data());
              float *dvSum = dvOut ? dvOut : (ws.sum[1].resize(size), ws.sum[1].data());
              if (rowRange) {
                std::fill(dkSum, dkSum + size, 0.0f);
                std::fill(dvSum, dvSum + size, 0.0f);
              }
              ws.lse.resize(static_cast<size_t>(rows));
              for (int64_t u = 0; u < group; ++u) {
                const int64_t h = g * group + u;
                std::fill(ws.lse.begin(), ws.lse.end(), 0.0f);
                for (int64_t i = 0; i < s.nq; ++i)
                  ws.lse[static_cast<size_t>(pad + i)] = lseAt(lse, s.b, h, s.q0 + i);
                float *dqOut = pad == 0 && tail == 0 ? directRows(dq, s.b, h, s.q0, s.nq) : nullptr;
                if (!dqOut)
                  ws.out[0].resize(static_cast<size_t>(rows * d));
                // The padded path overwrites its dK and dV: a group's later
                // heads write theirs apart and add them.
                const bool apart = u > 0 && !rowRange;
                if (apart) {
                  ws.out[1].resize(size);
                  ws.out[2].resize(size);
                }
                attnc::rt::GradSlice slice{inputRows(q, s.b, h, s.q0, s.nq, pad, ws.in[0], ws.packed[0], tail),
                                           kIn,
                                           vIn,
                                           inputRows(o, s.b, h, s.q0, s.nq, pad, ws.in[3], ws.packed[3], tail),
                                           inputRows(dO, s.b, h, s.q0, s.nq, pad, ws.in[4], ws.packed[4], tail),
                                           ws.lse.data(),
                                           dqOut ? dqOut : ws.out[0].data(),
                                           apart ? ws.out[1].data() : dkSum,
                                           apart ? ws.out[2].data() : dvSum,
                                           n,
                                           d,
                                           c.set(h),
                                           c.scale};
                slice.firstRow = rowRange ? s.nk - s.nq : 0;
                slice.skipRows = pad;
                slice.endRows = rowRange ? s.nk : pad + s.nq; // (a row range has no padding)
                slice.kb = kbIn;
                slice.vb = vbIn;
                slice.inputs = inputs.slice(s.b, h);
                slice.head = h;
                slice.floats = inputs.floats().empty() ? nullptr : &inputs.floats();
                if (inputGrad) {
                  ws.inputGrad.assign(inputGrad->size(), 0.0);
                  slice.inputGrad = ws.inputGrad.data();
                }
                c.backend.runBackwardSlice(state, slice, *ws.scratch, c.threadsPerSlice);
                if (inputGrad) {
                  std::lock_guard<std::mutex> lock(gradLock);
                  for (size_t e = 0; e < inputGrad->size(); ++e)
                    (*inputGrad)[e] += ws.inputGrad[e];
                }
                if (apart)
                  for (size_t x = 0; x < size; ++x) {
                    dkSum[x] += ws.out[1][x];
                    dvSum[x] += ws.out[2][x];
                  }
                if (!dqOut)
                  outputRows(dq, s.b, h, s.q0, s.nq, ws.out[0].data() + pad * d);
              }
              if (!dkOut)
                outputRows(dk, s.b, g, s.k0, n, dkSum);
              if (!dvOut)
                outputRows(dv, s.b, g, s.k0, n, dvSum);
            });
}

/// Whether `device` names a GPU (false: the CPU); fails on a device type
/// this runtime does not know.
attnc_status onGpu(const attnc_device *device, bool &gpu) {
  gpu = device && device->type == ATTNC_DEVICE_CUDA;
  if (device && !gpu && device->type != ATTNC_DEVICE_CPU)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "device type " + std::to_string(device->type) +
                                                  " is not ATTNC_DEVICE_CPU (0) or ATTNC_DEVICE_CUDA (1)");
  if (gpu && device->index < 0)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "CUDA device index " + std::to_string(device->index) + " is negative");
  return ATTNC_OK;
}

/// A call on a GPU; `first`: its queries' first position (-1: nk - nq).
attnc::rt::cuda::Dims dimsOf(const Shape &s, int64_t first = -1) {
  return {s.batch, s.hq, s.hkv, s.nq, s.nk, s.d, first};
}

/// One sequence of a varlen batch as a call of its own (batch 1).
attnc::rt::cuda::Dims seqDims(const Shape &shape, const Seq &s) { return {1, shape.hq, shape.hkv, s.nq, s.nk, shape.d}; }

/// Rows [row0, row0 + rows) of every slice of `t`: a view of the same memory.
attnc_tensor rowsOf(const attnc_tensor &t, int64_t row0, int64_t rows) {
  attnc_tensor out = t;
  out.data = static_cast<char *>(t.data) + row0 * t.strides[2] * static_cast<int64_t>(elementBytes(t.dtype));
  out.shape[2] = rows;
  return out;
}

/// The queries' first position of an attnc_run_*_at call: in [0, nk - nq].
attnc_status checkFirstQuery(int64_t firstQuery, const Shape &shape) {
  if (firstQuery < 0 || firstQuery > shape.nk - shape.nq)
    return fail(ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(firstQuery) + ": the " +
                                       std::to_string(shape.nq) + " queries must sit inside the " +
                                       std::to_string(shape.nk) + " key positions, so it must lie in [0, " +
                                       std::to_string(shape.nk - shape.nq) + "]");
  return ATTNC_OK;
}

/// Refuses what a pattern that reads data cannot do yet, and a call whose
/// inputs do not match the pattern's use of data (none given, or some given
/// to a pattern without inputs).
attnc_status checkDataCall(const attnc_kernel &kernel, int64_t numInputs, bool gpu, bool varlen) {
  if (attnc_status s = guarded([&] { attnc::rt::checkInputsGiven(kernel.ir, numInputs); }); s != ATTNC_OK)
    return s;
  if (gpu && (kernel.ir.score || kernel.ir.sink || kernel.ir.hasFloatInputs())) {
    if (attnc_status s = guarded([&] { attnc::rt::cuda::gpuModifiers(kernel.ir); }); s != ATTNC_OK)
      return s;
    if (varlen && kernel.ir.hasFloatInputs())
      return fail(ATTNC_ERROR_UNSUPPORTED, "pattern '" + kernel.ir.name +
                                               "' has float inputs, which varlen calls on the GPU do not take yet: "
                                               "call each sequence on its own, or the batch on CPU tensors");
  }
  if (!kernel.ir.readsData())
    return ATTNC_OK;
  if (varlen)
    return fail(ATTNC_ERROR_UNSUPPORTED, "pattern '" + kernel.ir.name +
                                             "' reads data (its inputs), which varlen calls do not take yet: call "
                                             "each sequence with its own inputs");
  return ATTNC_OK;
}

/// The call's inputs, checked and copied per slice (none for a pattern
/// that reads no data). Throws RunError.
attnc::rt::CallInputs callInputs(const attnc_kernel &kernel, const Shape &shape, const attnc_input *inputs,
                                 int64_t numInputs, const attnc_run_options *options, int64_t length = -1) {
  if (kernel.ir.inputs.empty())
    return {};
  return attnc::rt::CallInputs(kernel.ir, inputs, numInputs, shape.batch, shape.hq, length >= 0 ? length : shape.nk,
                               attnc::support::resolveThreads(options ? options->num_threads : 0));
}

/// A GPU call's float inputs, checked where they are (CallInputs reads
/// host memory: these live on the device, which Engine checks): the
/// modifiers' per-head values, and (backward) where their gradients go from
/// `gradOut` (checkInputGrads'); `dims` each float input's dimensions
/// (empty for int inputs). Throws RunError.
attnc::rt::cuda::HeadTensors gpuFloatInputs(const attnc_kernel &kernel, const Shape &shape, const attnc_input *inputs,
                                            int64_t numInputs, std::vector<std::vector<int64_t>> &dims) {
  dims.assign(kernel.ir.inputs.size(), {});
  attnc::rt::cuda::HeadTensors out;
  if (kernel.ir.inputs.empty())
    return out;
  const std::vector<const attnc_input *> given = attnc::rt::matchInputs(kernel.ir, inputs, numInputs);
  for (size_t x = 0; x < given.size(); ++x)
    if (kernel.ir.inputs[x].isFloat)
      dims[x] = attnc::rt::checkFloatInput(kernel.ir.inputs[x], given[x]->values, shape.nk, shape.hq);
  const attnc::rt::cuda::Modifiers &mods = kernel.cuda().modifiers();
  if (mods.slope)
    out.slope = &given[static_cast<size_t>(mods.slope.input)]->values;
  if (mods.sink)
    out.sink = &given[static_cast<size_t>(mods.sink.input)]->values;
  return out;
}

/// Checks a call's key_positions (attnc_call, ABI 10) and sets `firstQuery`
/// to the queries' first position and `length` to the pattern's: the
/// positions are nk ascending values >= 0; the queries sit at [firstQuery,
/// firstQuery + nq), by default ending at the last key; length covers both.
attnc_status checkKeyPositions(const attnc_kernel &kernel, const int64_t *positions, const Shape &shape, bool gpu,
                               bool varlen, int64_t &firstQuery, int64_t &length) {
  const std::string what = "a call with key_positions (keys a cache kept at their positions)";
  if (gpu)
    return fail(ATTNC_ERROR_UNSUPPORTED, what + " runs on the CPU only: the CUDA kernels take keys at positions 0 .. "
                                                "nk - 1");
  if (varlen)
    return fail(ATTNC_ERROR_UNSUPPORTED, what + " cannot be a varlen call: call each sequence with its positions");
  if (kernel.ir.readsData())
    return fail(ATTNC_ERROR_UNSUPPORTED, what + " cannot run pattern '" + kernel.ir.name +
                                             "', which reads data: its inputs are indexed by position 0 .. n - 1");
  if (!kernel.backend->takesRowRange(1, std::numeric_limits<int64_t>::max()))
    return fail(ATTNC_ERROR_UNSUPPORTED, what + " runs on the fused backend's rows, and this kernel's backend is " +
                                             kernel.backend->name() + ": compile it with --backend fused");
  for (int64_t x = 0; x < shape.nk; ++x) {
    if (positions[x] < 0 || positions[x] > (int64_t{1} << 40))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "key_positions[" + std::to_string(x) + "] is " +
                                                    std::to_string(positions[x]) + "; positions lie in [0, 2^40]");
    if (x > 0 && positions[x] <= positions[x - 1])
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  "key_positions must ascend strictly, but entry " + std::to_string(x) + " is " +
                      std::to_string(positions[x]) + " after " + std::to_string(positions[x - 1]));
  }
  if (firstQuery < 0) {
    firstQuery = shape.nk ? positions[shape.nk - 1] + 1 - shape.nq : 0; // (no keys: nq is 0 too)
    if (firstQuery < 0)
      return fail(ATTNC_ERROR_SHAPE, "the " + std::to_string(shape.nq) + " queries end at the last key position " +
                                         std::to_string(positions[shape.nk - 1]) + ", so they would start before 0");
  }
  length = std::max(firstQuery + shape.nq, shape.nk ? positions[shape.nk - 1] + 1 : 0);
  return ATTNC_OK;
}

/// attnc_run_forward, attnc_run_varlen and their _on and _at forms.
attnc_status runForward(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                        const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse, const attnc_varlen *varlen,
                        const attnc_run_options *options, const attnc_device *device = nullptr,
                        int64_t firstQuery = -1, const attnc_input *inputs = nullptr, int64_t numInputs = 0,
                        const int64_t *keyPositions = nullptr) {
  if (!kernel)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run: kernel is null");
  bool gpu = false;
  if (attnc_status s = onGpu(device, gpu); s != ATTNC_OK)
    return s;
  if (attnc_status s = checkDataCall(*kernel, numInputs, gpu, varlen != nullptr); s != ATTNC_OK)
    return s;
  Shape shape;
  if (attnc_status s = validate(*kernel, {{q, "q", Role::Query}, {k, "k", Role::KeyValue}, {v, "v", Role::KeyValue}},
                                {{o, "o", Role::Query}}, false, varlen != nullptr, shape, gpu);
      s != ATTNC_OK)
    return s;
  if (lse) {
    if (attnc_status s = validateLse(lse, *q); s != ATTNC_OK)
      return s;
    for (const auto &[t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}, {static_cast<const attnc_tensor *>(o), "o"}})
      if (rangesMeet(*lse, *t))
        return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                    std::string("tensor 'lse' overlaps the memory of '") + name + "'; it needs memory of its own");
    if (!gpu && !kernel->backend->writesLse())
      return fail(ATTNC_ERROR_UNSUPPORTED, std::string("the ") + kernel->backend->name() +
                                               " backend does not give the rows' log-sum-exp (the backward "
                                               "pass needs it): compile the pattern with --backend fused");
  }
  int64_t length = -1;
  if (keyPositions) {
    if (attnc_status s = checkKeyPositions(*kernel, keyPositions, shape, gpu, varlen != nullptr, firstQuery, length);
        s != ATTNC_OK)
      return s;
  } else if (firstQuery >= 0) {
    if (attnc_status s = checkFirstQuery(firstQuery, shape); s != ATTNC_OK)
      return s;
  }
  if (shape.empty())
    return ATTNC_OK;
  if (gpu && !varlen)
    return guarded([&] {
      std::vector<std::vector<int64_t>> dims;
      const attnc::rt::cuda::HeadTensors floats = gpuFloatInputs(*kernel, shape, inputs, numInputs, dims);
      std::vector<std::vector<unsigned char>> storage;
      attnc::rt::CallInputs data;
      if (kernel->ir.readsData()) // (each slice's tables from its data: the inputs read on the host)
        data = callInputs(*kernel, shape, attnc::rt::cuda::hostCopies(*device, inputs, numInputs, storage).data(),
                          numInputs, options);
      kernel->cuda().forward(*device, dimsOf(shape, firstQuery), *q, *k, *v, *o, lse, callScale(options, shape.d),
                             floats, kernel->ir.readsData() ? &data : nullptr);
    });
  std::vector<Seq> seqs;
  if (attnc_status s = sequences(shape, varlen, seqs, firstQuery); s != ATTNC_OK)
    return s;
  for (Seq &s : seqs)
    if (keyPositions) {
      s.held = keyPositions;
      s.length = length;
    }
  attnc::rt::CallInputs data;
  if (attnc_status s = guarded([&] { data = callInputs(*kernel, shape, inputs, numInputs, options, length); });
      s != ATTNC_OK)
    return s;
  if (gpu) // a varlen batch: each sequence a call of its own on the device
    return guarded([&] {
      for (const Seq &s : seqs)
        if (s.nq > 0) {
          const attnc_tensor sq = rowsOf(*q, s.q0, s.nq), sk = rowsOf(*k, s.k0, s.nk), sv = rowsOf(*v, s.k0, s.nk),
                             so = rowsOf(*o, s.q0, s.nq);
          const attnc_tensor sl = lse ? rowsOf(*lse, s.q0, s.nq) : attnc_tensor{};
          kernel->cuda().forward(*device, seqDims(shape, s), sq, sk, sv, so, lse ? &sl : nullptr,
                                 callScale(options, shape.d));
        }
    });
  return guarded([&] { forward(*kernel, shape, seqs, *q, *k, *v, *o, lse, data, options); });
}

/// The call's float-input gradients (attnc_call::d_inputs) matched to the
/// pattern's float inputs: f32 tensors of their shapes. gradOut[x] is where
/// input x's goes (null: not asked for).
attnc_status checkInputGrads(const attnc_kernel &kernel, const std::vector<std::vector<int64_t>> &floatDims,
                             const attnc_input *grads, int64_t count, std::vector<const attnc_tensor *> &gradOut) {
  const attnc::ir::PatternIR &ir = kernel.ir;
  gradOut.assign(ir.inputs.size(), nullptr);
  if (count < 0 || (count > 0 && !grads))
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_call::d_inputs is null or num_d_inputs (" +
                                                  std::to_string(count) + ") is negative");
  for (int64_t g = 0; g < count; ++g) {
    const attnc_input &in = grads[g];
    if (!in.name)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, "d_inputs[" + std::to_string(g) + "] has no name");
    size_t x = 0;
    while (x < ir.inputs.size() && ir.inputs[x].name != in.name)
      ++x;
    if (x == ir.inputs.size() || !ir.inputs[x].isFloat)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                  std::string("d_inputs names '") + in.name + "', which is not a float input of pattern '" + ir.name +
                      "': only float inputs (read by score / sink) have gradients");
    if (gradOut[x])
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("d_inputs names '") + in.name + "' twice");
    const attnc_tensor &t = in.values;
    const std::vector<int64_t> &dims = floatDims[x];
    if (t.dtype != ATTNC_DTYPE_F32)
      return fail(ATTNC_ERROR_DTYPE, std::string("the gradient of '") + in.name + "' must be f32");
    std::string want;
    bool fits = true;
    int64_t total = 1;
    for (size_t a = 0; a < 4; ++a) {
      const int64_t dim = a < dims.size() ? dims[a] : 1;
      total *= dim;
      fits = fits && t.shape[a] == dim;
      want.append(a ? ", " : "[").append(std::to_string(dim));
      if (t.strides[a] < 0 || (t.strides[a] == 0 && t.shape[a] > 1))
        return fail(ATTNC_ERROR_STRIDE, std::string("the gradient of '") + in.name + "' has stride " +
                                            std::to_string(t.strides[a]) + " on axis " + std::to_string(a));
    }
    if (!fits)
      return fail(ATTNC_ERROR_SHAPE, std::string("the gradient of '") + in.name + "' must have the input's shape " +
                                         want + "]");
    if (!t.data && total > 0)
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("the gradient of '") + in.name + "' has no data");
    gradOut[x] = &t;
  }
  return ATTNC_OK;
}

/// Writes a float input's gradient sums into its (checked) tensor.
void writeInputGrad(const attnc_tensor &t, const double *sums) {
  int64_t e = 0;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d, ++e)
          static_cast<float *>(t.data)[a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3]] =
              static_cast<float>(sums[e]);
}

/// attnc_run_backward, attnc_run_backward_varlen and their _on and _at forms.
attnc_status runBackward(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                         const attnc_tensor *v, const attnc_tensor *o, const attnc_tensor *d_o,
                         const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                         const attnc_varlen *varlen, const attnc_run_options *options,
                         const attnc_device *device = nullptr, int64_t firstQuery = -1,
                         const attnc_input *inputs = nullptr, int64_t numInputs = 0,
                         const attnc_input *dInputs = nullptr, int64_t numDInputs = 0) {
  if (!kernel)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run_backward: kernel is null");
  bool gpu = false;
  if (attnc_status s = onGpu(device, gpu); s != ATTNC_OK)
    return s;
  if (attnc_status s = checkDataCall(*kernel, numInputs, gpu, varlen != nullptr); s != ATTNC_OK)
    return s;
  if (!lse)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'lse' is null (attnc_run_forward writes it)");
  Shape shape;
  if (attnc_status s = validate(*kernel,
                                {{q, "q", Role::Query},
                                 {k, "k", Role::KeyValue},
                                 {v, "v", Role::KeyValue},
                                 {o, "o", Role::Query},
                                 {d_o, "d_o", Role::Query}},
                                {{d_q, "d_q", Role::Query}, {d_k, "d_k", Role::KeyValue}, {d_v, "d_v", Role::KeyValue}},
                                true, varlen != nullptr, shape, gpu);
      s != ATTNC_OK)
    return s;
  if (attnc_status s = validateLse(lse, *q); s != ATTNC_OK)
    return s;
  if (firstQuery >= 0)
    if (attnc_status s = checkFirstQuery(firstQuery, shape); s != ATTNC_OK)
      return s;
  for (const auto &[grad, name] : {std::pair{d_q, "d_q"}, {d_k, "d_k"}, {d_v, "d_v"}})
    if (rangesMeet(*grad, *lse))
      return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("tensor '") + name +
                                                    "' overlaps the memory of 'lse'; each gradient needs memory of its own");
  if (gpu && !varlen) {
    std::vector<std::vector<int64_t>> dims;
    attnc::rt::cuda::HeadTensors floats;
    if (attnc_status s = guarded([&] { floats = gpuFloatInputs(*kernel, shape, inputs, numInputs, dims); });
        s != ATTNC_OK)
      return s;
    std::vector<const attnc_tensor *> gradOut; // per pattern input: where its gradient goes, else null
    if (attnc_status s = checkInputGrads(*kernel, dims, dInputs, numDInputs, gradOut); s != ATTNC_OK)
      return s;
    const attnc::rt::cuda::Modifiers &mods = kernel->cuda().modifiers();
    if (mods.slope)
      floats.slopeGrad = gradOut[static_cast<size_t>(mods.slope.input)];
    if (mods.sink)
      floats.sinkGrad = gradOut[static_cast<size_t>(mods.sink.input)];
    if (shape.batch == 0 || shape.hkv == 0 || shape.nk == 0 || shape.d == 0) {
      // No pair: the gradients asked for are zeros.
      return guarded([&] {
        for (const attnc_tensor *grad : {floats.slopeGrad, floats.sinkGrad})
          if (grad && grad->shape[0] > 0)
            attnc::rt::cuda::zeroRows(device->index, device->stream, *grad, 0, 1);
      });
    }
    return guarded([&] {
      std::vector<std::vector<unsigned char>> storage;
      attnc::rt::CallInputs data;
      if (kernel->ir.readsData())
        data = callInputs(*kernel, shape, attnc::rt::cuda::hostCopies(*device, inputs, numInputs, storage).data(),
                          numInputs, options);
      kernel->cuda().backward(*device, dimsOf(shape, firstQuery), *q, *k, *v, *o, *d_o, *lse, *d_q, *d_k, *d_v,
                              callScale(options, shape.d), floats, kernel->ir.readsData() ? &data : nullptr);
    });
  }
  if (gpu) { // a varlen batch: each sequence a call of its own on the device
    if (shape.hkv == 0 || shape.nk == 0 || shape.d == 0)
      return ATTNC_OK;
    std::vector<Seq> seqs;
    if (attnc_status s = sequences(shape, varlen, seqs, firstQuery); s != ATTNC_OK)
      return s;
    return guarded([&] {
      for (const Seq &s : seqs) {
        if (s.nk == 0)
          continue;
        if (s.nq == 0 || shape.hq == 0) { // keys that no query reads: zero gradients
          attnc::rt::cuda::zeroRows(device->index, device->stream, *d_k, s.k0, s.nk);
          attnc::rt::cuda::zeroRows(device->index, device->stream, *d_v, s.k0, s.nk);
          continue;
        }
        kernel->cuda().backward(*device, seqDims(shape, s), rowsOf(*q, s.q0, s.nq), rowsOf(*k, s.k0, s.nk),
                                rowsOf(*v, s.k0, s.nk), rowsOf(*o, s.q0, s.nq), rowsOf(*d_o, s.q0, s.nq),
                                rowsOf(*lse, s.q0, s.nq), rowsOf(*d_q, s.q0, s.nq), rowsOf(*d_k, s.k0, s.nk),
                                rowsOf(*d_v, s.k0, s.nk), callScale(options, shape.d));
      }
    });
  }
  if (!kernel->backend->hasBackward())
    return fail(ATTNC_ERROR_UNSUPPORTED, std::string("the ") + kernel->backend->name() +
                                             " backend computes the forward pass only; compile the pattern "
                                             "with --backend fused (or dense) for gradients");
  if (shape.batch == 0 || shape.hkv == 0 || shape.nk == 0 || shape.d == 0) {
    // No pair: the float inputs' gradients asked for are zeros.
    for (int64_t g = 0; dInputs && g < numDInputs; ++g) {
      const attnc_tensor &t = dInputs[g].values;
      bool ok = t.dtype == ATTNC_DTYPE_F32 && t.data;
      for (int a = 0; a < 4; ++a)
        ok = ok && t.shape[a] >= 0 && t.strides[a] >= 0;
      if (!ok)
        return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string("d_inputs[") + std::to_string(g) +
                                                      "] is not an f32 tensor with data and non-negative strides");
      const std::vector<double> zeros(static_cast<size_t>(t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]), 0.0);
      writeInputGrad(t, zeros.data());
    }
    return ATTNC_OK; // no gradient has an element
  }
  std::vector<Seq> seqs;
  if (attnc_status s = sequences(shape, varlen, seqs, firstQuery); s != ATTNC_OK)
    return s;
  attnc::rt::CallInputs data;
  if (attnc_status s = guarded([&] { data = callInputs(*kernel, shape, inputs, numInputs, options); }); s != ATTNC_OK)
    return s;
  std::vector<std::vector<int64_t>> floatDims;
  for (const attnc::FloatInput &f : data.floats())
    floatDims.push_back(f.dims);
  floatDims.resize(kernel->ir.inputs.size());
  std::vector<const attnc_tensor *> gradOut; // per pattern input: where its gradient goes, else null
  if (attnc_status s = checkInputGrads(*kernel, floatDims, dInputs, numDInputs, gradOut); s != ATTNC_OK)
    return s;
  std::vector<double> inputGrad;
  std::vector<int64_t> offsets;
  if (numDInputs > 0)
    inputGrad.assign(static_cast<size_t>(attnc::rt::floatOffsets(data.floats(), offsets)), 0.0);
  return guarded([&] {
    // Keys that no query reaches get zero gradients: sequences without
    // queries run no slice, so their rows are cleared here.
    const std::vector<float> zeros(static_cast<size_t>(shape.d), 0.0f);
    auto clear = [&](int64_t b, int64_t k0, int64_t rows) {
      for (attnc_tensor *grad : {d_k, d_v})
        for (int64_t g = 0; g < shape.hkv; ++g)
          for (int64_t i = 0; i < rows; ++i)
            outputRows(*grad, b, g, k0 + i, 1, zeros.data());
    };
    for (const Seq &s : seqs)
      if (s.nq == 0 || shape.hq == 0)
        clear(s.b, s.k0, s.nk);
    if (!shape.empty())
      backward(*kernel, shape, seqs, *q, *k, *v, *o, *d_o, *lse, *d_q, *d_k, *d_v, data, options,
               numDInputs > 0 ? &inputGrad : nullptr);
    for (size_t x = 0; x < gradOut.size(); ++x)
      if (gradOut[x])
        writeInputGrad(*gradOut[x], inputGrad.data() + offsets[x]);
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
  return runForward(kernel, q, k, v, o, nullptr, nullptr, options);
}

attnc_status attnc_run_forward(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                               const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                               const attnc_run_options *options) {
  return runForward(kernel, q, k, v, o, lse, nullptr, options);
}

attnc_status attnc_run_varlen(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                              const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse, const attnc_varlen *varlen,
                              const attnc_run_options *options) {
  if (!varlen)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run_varlen: varlen is null (attnc_run_forward takes a dense batch)");
  return runForward(kernel, q, k, v, o, lse, varlen, options);
}

attnc_status attnc_run_backward(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                                const attnc_tensor *v, const attnc_tensor *o, const attnc_tensor *d_o,
                                const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                                const attnc_run_options *options) {
  return runBackward(kernel, q, k, v, o, d_o, lse, d_q, d_k, d_v, nullptr, options);
}

attnc_status attnc_run_backward_varlen(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                                       const attnc_tensor *v, const attnc_tensor *o, const attnc_tensor *d_o,
                                       const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k,
                                       attnc_tensor *d_v, const attnc_varlen *varlen,
                                       const attnc_run_options *options) {
  if (!varlen)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                "attnc_run_backward_varlen: varlen is null (attnc_run_backward takes a dense batch)");
  return runBackward(kernel, q, k, v, o, d_o, lse, d_q, d_k, d_v, varlen, options);
}

attnc_status attnc_device_check(const attnc_device *device) {
  if (!device)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_device_check: device is null");
  bool gpu = false;
  if (attnc_status s = onGpu(device, gpu); s != ATTNC_OK || !gpu)
    return s;
  return guarded([&] { attnc::rt::cuda::checkDevice(device->index); });
}

attnc_status attnc_run_forward_on(const attnc_kernel *kernel, const attnc_device *device, const attnc_tensor *q,
                                  const attnc_tensor *k, const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                                  const attnc_run_options *options) {
  return runForward(kernel, q, k, v, o, lse, nullptr, options, device);
}

attnc_status attnc_run_backward_on(const attnc_kernel *kernel, const attnc_device *device, const attnc_tensor *q,
                                   const attnc_tensor *k, const attnc_tensor *v, const attnc_tensor *o,
                                   const attnc_tensor *d_o, const attnc_tensor *lse, attnc_tensor *d_q,
                                   attnc_tensor *d_k, attnc_tensor *d_v, const attnc_run_options *options) {
  return runBackward(kernel, q, k, v, o, d_o, lse, d_q, d_k, d_v, nullptr, options, device);
}

attnc_status attnc_run_varlen_on(const attnc_kernel *kernel, const attnc_device *device, const attnc_tensor *q,
                                 const attnc_tensor *k, const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                                 const attnc_varlen *varlen, const attnc_run_options *options) {
  if (!varlen)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run_varlen_on: varlen is null");
  return runForward(kernel, q, k, v, o, lse, varlen, options, device);
}

attnc_status attnc_run_backward_varlen_on(const attnc_kernel *kernel, const attnc_device *device,
                                          const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                                          const attnc_tensor *o, const attnc_tensor *d_o, const attnc_tensor *lse,
                                          attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                                          const attnc_varlen *varlen, const attnc_run_options *options) {
  if (!varlen)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_run_backward_varlen_on: varlen is null");
  return runBackward(kernel, q, k, v, o, d_o, lse, d_q, d_k, d_v, varlen, options, device);
}

attnc_status attnc_run_forward_at(const attnc_kernel *kernel, int64_t first_query, const attnc_tensor *q,
                                  const attnc_tensor *k, const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                                  const attnc_run_options *options) {
  return attnc_run_forward_at_on(kernel, nullptr, first_query, q, k, v, o, lse, options);
}

attnc_status attnc_run_backward_at(const attnc_kernel *kernel, int64_t first_query, const attnc_tensor *q,
                                   const attnc_tensor *k, const attnc_tensor *v, const attnc_tensor *o,
                                   const attnc_tensor *d_o, const attnc_tensor *lse, attnc_tensor *d_q,
                                   attnc_tensor *d_k, attnc_tensor *d_v, const attnc_run_options *options) {
  return attnc_run_backward_at_on(kernel, nullptr, first_query, q, k, v, o, d_o, lse, d_q, d_k, d_v, options);
}

attnc_status attnc_run_forward_at_on(const attnc_kernel *kernel, const attnc_device *device, int64_t first_query,
                                     const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                                     attnc_tensor *o, attnc_tensor *lse, const attnc_run_options *options) {
  if (first_query < 0)
    return fail(ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(first_query) + "; it must not be negative");
  return runForward(kernel, q, k, v, o, lse, nullptr, options, device, first_query);
}

attnc_status attnc_run_backward_at_on(const attnc_kernel *kernel, const attnc_device *device, int64_t first_query,
                                      const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                                      const attnc_tensor *o, const attnc_tensor *d_o, const attnc_tensor *lse,
                                      attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                                      const attnc_run_options *options) {
  if (first_query < 0)
    return fail(ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(first_query) + "; it must not be negative");
  return runBackward(kernel, q, k, v, o, d_o, lse, d_q, d_k, d_v, nullptr, options, device, first_query);
}

const char *attnc_cpu_isa(void) {
  if (!attnc::rt::fusedIsaError().empty()) {
    lastError = attnc::rt::fusedIsaError();
    return nullptr;
  }
  return attnc::rt::fusedIsa();
}

void attnc_call_init(attnc_call *call) {
  if (!call)
    return;
  *call = attnc_call{};
  call->size = sizeof(attnc_call);
  call->first_query = ATTNC_LAST_QUERIES;
}

namespace {
/// The caller's call description, checked, as this runtime's struct (a
/// caller built against an older header may pass a shorter one).
attnc_status readCall(const attnc_call *call, const char *entry, attnc_call &out) {
  if (!call)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, std::string(entry) + ": call is null");
  if (call->size < offsetof(attnc_call, options) + sizeof(call->options) || call->size > (size_t{1} << 20))
    return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                std::string(entry) + ": call->size is " + std::to_string(call->size) +
                    "; start from attnc_call_init, which sets it to sizeof(attnc_call) (" +
                    std::to_string(sizeof(attnc_call)) + " in this ABI)");
  out = attnc_call{};
  std::memcpy(&out, call, std::min(call->size, sizeof(attnc_call)));
  if (out.first_query < ATTNC_LAST_QUERIES)
    return fail(ATTNC_ERROR_SHAPE, std::string(entry) + ": first_query is " + std::to_string(out.first_query) +
                                       "; it is a position >= 0, or ATTNC_LAST_QUERIES (-1)");
  if (out.varlen && out.first_query != ATTNC_LAST_QUERIES)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                std::string(entry) + ": a varlen call's queries are the last of each sequence; first_query must be "
                                     "ATTNC_LAST_QUERIES");
  return ATTNC_OK;
}
} // namespace

attnc_status attnc_forward(const attnc_kernel *kernel, const attnc_call *call) {
  attnc_call c;
  if (attnc_status s = readCall(call, "attnc_forward", c); s != ATTNC_OK)
    return s;
  if (c.d_inputs || c.num_d_inputs)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_forward: d_inputs are gradients, which attnc_backward writes; "
                                              "leave them null in a forward call");
  return runForward(kernel, c.q, c.k, c.v, c.o, c.lse, c.varlen, c.options, c.device, c.first_query, c.inputs,
                    c.num_inputs, c.key_positions);
}

attnc_status attnc_backward(const attnc_kernel *kernel, const attnc_call *call) {
  attnc_call c;
  if (attnc_status s = readCall(call, "attnc_backward", c); s != ATTNC_OK)
    return s;
  if (c.key_positions)
    return fail(ATTNC_ERROR_UNSUPPORTED, "attnc_backward: a call with key_positions (keys a generation cache kept) "
                                         "has no backward pass; train on whole sequences");
  return runBackward(kernel, c.q, c.k, c.v, c.o, c.d_o, c.lse, c.d_q, c.d_k, c.d_v, c.varlen, c.options, c.device,
                     c.first_query, c.inputs, c.num_inputs, c.d_inputs, c.num_d_inputs);
}

int64_t attnc_kernel_num_inputs(const attnc_kernel *kernel) {
  return kernel ? static_cast<int64_t>(kernel->ir.inputs.size()) : 0;
}

attnc_status attnc_kernel_input(const attnc_kernel *kernel, int64_t index, int64_t n, const char **name,
                                int32_t *rank, int64_t dims[2], int64_t *id_limit) {
  if (!kernel || index < 0 || index >= static_cast<int64_t>(kernel->ir.inputs.size()))
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_input: no input " + std::to_string(index));
  if (n < 1)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_input: n is " + std::to_string(n) + "; it must be >= 1");
  const attnc::InputDecl &decl = kernel->ir.inputs[static_cast<size_t>(index)];
  if (name)
    *name = decl.name.c_str();
  if (rank)
    *rank = static_cast<int32_t>(decl.rank());
  return guarded([&] {
    if (dims) {
      dims[0] = attnc::inputDim(decl, 0, n);
      dims[1] = decl.rank() == 2 ? attnc::inputDim(decl, 1, n) : 1;
    }
    if (id_limit)
      *id_limit = decl.isFloat ? 0 : attnc::rt::inputIdLimit(kernel->ir, static_cast<size_t>(index), n);
  });
}

attnc_status attnc_kernel_input_info(const attnc_kernel *kernel, int64_t index, int64_t n, int64_t heads,
                                     attnc_input_info *info) {
  if (!kernel || index < 0 || index >= static_cast<int64_t>(kernel->ir.inputs.size()))
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_input_info: no input " + std::to_string(index));
  if (n < 1 || heads < 1)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_input_info: n is " + std::to_string(n) + " and heads " +
                                                  std::to_string(heads) + "; both must be >= 1");
  if (!info || info->size < sizeof(attnc_input_info))
    return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                "attnc_kernel_input_info: info is null or info->size is not sizeof(attnc_input_info) (" +
                    std::to_string(sizeof(attnc_input_info)) + ")");
  const attnc::InputDecl &decl = kernel->ir.inputs[static_cast<size_t>(index)];
  return guarded([&] {
    attnc_input_info out{};
    out.size = sizeof(attnc_input_info);
    out.name = decl.name.c_str();
    out.rank = static_cast<int32_t>(decl.rank());
    out.is_float = decl.isFloat ? 1 : 0;
    for (size_t a = 0; a < 3; ++a)
      out.dims[a] = a < decl.rank() ? attnc::inputDim(decl, a, n, heads) : 1;
    out.id_limit = decl.isFloat ? 0 : attnc::rt::inputIdLimit(kernel->ir, static_cast<size_t>(index), n);
    *info = out;
  });
}

int32_t attnc_kernel_modifiers(const attnc_kernel *kernel) {
  if (!kernel)
    return 0;
  return (kernel->ir.score ? ATTNC_MODIFIER_SCORE : 0) | (kernel->ir.sink ? ATTNC_MODIFIER_SINK : 0);
}

attnc_status attnc_kernel_last_readers(const attnc_kernel *kernel, int64_t n, int64_t *last) {
  if (!kernel || !last)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_kernel_last_readers: kernel or last is null");
  if (n < 1 || n > (int64_t{1} << 31))
    return fail(ATTNC_ERROR_INVALID_ARGUMENT,
                "attnc_kernel_last_readers: n is " + std::to_string(n) + "; it must lie in [1, 2^31]");
  const attnc::ir::PatternIR &ir = kernel->ir;
  if (ir.readsData())
    return fail(ATTNC_ERROR_UNSUPPORTED, "pattern '" + ir.name + "' reads data (its inputs), so which queries read "
                                             "a key is known only with each call's data");
  std::vector<attnc::ir::SetRef> sets;
  for (const auto &head : ir.heads) {
    if (attnc::ir::dependsOnLength(*head.set))
      return fail(ATTNC_ERROR_UNSUPPORTED,
                  "pattern '" + ir.name + "' has rows that depend on the sequence length n (a term in n, or random "
                  "blocks), so a row's keys at one length say nothing of the next: a cache must keep every key");
    sets.push_back(head.set);
  }
  return guarded([&] {
    const std::vector<int64_t> out = attnc::ir::lastReaders(sets, n);
    std::copy(out.begin(), out.end(), last);
  });
}

const char *attnc_last_error(void) { return lastError.c_str(); }

void attnc_internal_set_last_error(const char *message) { lastError = message ? message : ""; }

attnc_status attnc_internal_cuda_alloc(int32_t device, size_t bytes, void **ptr) {
  if (!ptr)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_internal_cuda_alloc: ptr is null");
  *ptr = nullptr;
  return guarded([&] {
    attnc::rt::cuda::checkDevice(device);
    *ptr = attnc::rt::cuda::deviceAlloc(device, bytes);
  });
}

attnc_status attnc_internal_cuda_free(int32_t device, void *ptr) {
  if (!ptr)
    return ATTNC_OK;
  return guarded([&] { attnc::rt::cuda::deviceFree(device, ptr); });
}

attnc_status attnc_internal_cuda_copy(int32_t device, void *dst, const void *src, size_t bytes, int32_t to_device) {
  if ((!dst || !src) && bytes)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_internal_cuda_copy: a null pointer");
  return guarded([&] {
    if (bytes)
      attnc::rt::cuda::deviceCopy(device, dst, src, bytes, to_device != 0);
  });
}

attnc_status attnc_internal_cuda_timer(int32_t device, void **timer, float *ms) {
  if (!timer)
    return fail(ATTNC_ERROR_INVALID_ARGUMENT, "attnc_internal_cuda_timer: timer is null");
  return guarded([&] {
    using attnc::rt::cuda::CUevent;
    if (!*timer) {
      attnc::rt::cuda::checkDevice(device);
      *timer = attnc::rt::cuda::recordEvent(device);
      return;
    }
    CUevent start = static_cast<CUevent>(*timer);
    *timer = nullptr;
    CUevent end = attnc::rt::cuda::recordEvent(device);
    const float elapsed = attnc::rt::cuda::elapsedMs(device, start, end);
    if (ms)
      *ms = elapsed;
  });
}

attnc_status attnc_internal_cuda_forward_variant(int32_t variant) {
  return guarded([&] { attnc::rt::cuda::forceForwardVariant(variant); });
}

attnc_status attnc_internal_cuda_backward_variant(int32_t variant) {
  return guarded([&] { attnc::rt::cuda::forceBackwardVariant(variant); });
}

attnc_status attnc_internal_cuda_device(int32_t device, char *name, size_t size, int32_t *major, int32_t *minor) {
  return guarded([&] {
    attnc::rt::cuda::checkDevice(device);
    const attnc::rt::cuda::DeviceInfo info = attnc::rt::cuda::deviceInfo(device);
    if (name && size) {
      const size_t len = std::min(size - 1, info.name.size());
      std::memcpy(name, info.name.data(), len);
      name[len] = '\0';
    }
    if (major)
      *major = info.major;
    if (minor)
      *minor = info.minor;
  });
}

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
