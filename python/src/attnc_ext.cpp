//===- attnc_ext.cpp - attnc._attnc: the nanobind extension ---------------===//
//
// A thin layer over the C ABI (attnc.h: load, and attnc_forward and
// attnc_backward for every call: dense, varlen, at an offset, on a GPU, with
// a pattern's inputs),
// the JIT (attnc_jit.h) and the compiler's analyses (analysis/Report.h,
// analysis/Picture.h). It converts arrays, which arrive through DLPack (or the
// buffer protocol; torch tensors through the converter attnc.torch passes)
// as nb::ndarray views with any strides and are never copied, and forwards;
// every policy the user sees (defaults, dtype and device checks, messages, the
// torch integration) lives in the pure-Python package around it. A failing
// status becomes attnc.AttncError carrying the status and the runtime's
// message (for a pattern that does not check, the clang-style diagnostics).
// The GIL is released while attnc computes.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"

#include "attnc/analysis/Picture.h"
#include "attnc/analysis/Report.h"
#include "attnc/analysis/Shards.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

/// A failed attnc call: becomes attnc.AttncError(message, status, name).
struct StatusError {
  attnc_status status;
  std::string message;
};

void check(attnc_status status) {
  if (status != ATTNC_OK)
    throw StatusError{status, attnc_last_error()};
}

/// Owns a loaded kernel.
struct Kernel {
  explicit Kernel(attnc_kernel *handle) : handle(handle) {}
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;
  ~Kernel() { attnc_kernel_free(handle); }
  attnc_kernel *handle;
};

/// When the last run_* call on this thread entered and left the C ABI, in
/// nanoseconds of CLOCK_MONOTONIC (Python's time.monotonic_ns):
/// bench/python_overhead.py splits a Python call's wall time with it into the
/// layers before the kernel, the kernel, and the layers after it, free of the
/// kernel's own noise.
thread_local std::pair<int64_t, int64_t> lastCall{0, 0};

int64_t monotonicNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

/// Runs `call` (the C ABI, the GIL released) and records when.
template <typename Call> attnc_status timedCall(Call &&call) {
  nb::gil_scoped_release release;
  const int64_t start = monotonicNs();
  const attnc_status status = call();
  lastCall = {start, monotonicNs()};
  return status;
}

using InArray = nb::ndarray<nb::ro, nb::device::cpu>;
using OutArray = nb::ndarray<nb::device::cpu>;
/// FlashAttention's cu_seqlens: int32, one dimension, read where it lies.
using Offsets = nb::ndarray<const int32_t, nb::ndim<1>, nb::device::cpu, nb::c_contig>;
using Positions = nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu, nb::c_contig>;

constexpr uint8_t kFloatCode = static_cast<uint8_t>(nb::dlpack::dtype_code::Float);
constexpr uint8_t kBfloatCode = static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat);

template <typename Array> attnc_dtype dtypeOf(const Array &a, const char *name) {
  const nb::dlpack::dtype t = a.dtype();
  if (t.lanes == 1 && t.bits == 32 && t.code == kFloatCode)
    return ATTNC_DTYPE_F32;
  if (t.lanes == 1 && t.bits == 16 && t.code == kBfloatCode)
    return ATTNC_DTYPE_BF16;
  if (t.lanes == 1 && t.bits == 16 && t.code == kFloatCode)
    return ATTNC_DTYPE_F16; // (CUDA devices only: the runtime says so for the CPU)
  throw nb::type_error((std::string("attnc: '") + name + "' must be float32, bfloat16 or (on a GPU) float16").c_str());
}

/// The [B, H, n, d] view of a 4-D array (strides in elements). A dimension
/// of extent 1 is never stepped over, so whatever stride the producer gave
/// it (0 is common) is replaced by 1, which the runtime accepts.
template <typename Array> attnc_tensor view4(const Array &a, const char *name) {
  if (a.ndim() != 4)
    throw StatusError{ATTNC_ERROR_SHAPE, std::string("tensor '") + name + "' has " +
                                             std::to_string(a.ndim()) + " dimensions; attnc takes [batch, heads, n, d]"};
  attnc_tensor t{};
  t.data = const_cast<void *>(static_cast<const void *>(a.data()));
  t.dtype = dtypeOf(a, name);
  for (int k = 0; k < 4; ++k) {
    t.shape[k] = static_cast<int64_t>(a.shape(k));
    t.strides[k] = t.shape[k] == 1 ? 1 : a.stride(k);
  }
  return t;
}

/// The log-sum-exp: an f32 [B, H, n] array, passed as [B, H, n, 1].
template <typename Array> attnc_tensor viewLse(const Array &a) {
  if (a.ndim() != 3)
    throw StatusError{ATTNC_ERROR_SHAPE, "tensor 'lse' has " + std::to_string(a.ndim()) +
                                             " dimensions; the log-sum-exp is [batch, heads, n]"};
  attnc_tensor t{};
  t.data = const_cast<void *>(static_cast<const void *>(a.data()));
  t.dtype = dtypeOf(a, "lse");
  for (int k = 0; k < 3; ++k) {
    t.shape[k] = static_cast<int64_t>(a.shape(k));
    t.strides[k] = t.shape[k] == 1 ? 1 : a.stride(k);
  }
  t.shape[3] = 1;
  t.strides[3] = 1;
  return t;
}

attnc_run_options runOptions(float scale, int32_t numThreads) {
  attnc_run_options options{};
  options.scale = scale;
  options.num_threads = numThreads;
  return options;
}

/// An array argument: a DLPack capsule, anything nanobind imports (numpy arrays,
/// objects with __dlpack__), or, when `toDlpack` is given, an object it turns
/// into a capsule. attnc.torch passes torch._C._to_dlpack (C code), which
/// spares each tensor torch.Tensor.__dlpack__ (Python code that checks its
/// arguments, what nanobind would call) and a call from Python of its own.
template <typename Array> Array arrayOf(nb::handle x, nb::handle toDlpack, const char *name) {
  nb::object source = toDlpack.is_none() ? nb::borrow(x) : toDlpack(x);
  Array out;
  if (!nb::try_cast(source, out))
    throw nb::type_error((std::string("attnc: '") + name + "' is not an array attnc can read in place (a CPU "
                                                            "array or tensor with DLPack support)")
                             .c_str());
  return out;
}

template <typename Array>
std::optional<Array> optionalArrayOf(nb::handle x, nb::handle toDlpack, const char *name) {
  if (x.is_none())
    return std::nullopt;
  return arrayOf<Array>(x, toDlpack, name);
}

/// The varlen description of a call: cu_seqlens_k absent means the keys
/// take the queries' offsets (attnc_varlen's null).
attnc_varlen varlenOf(const Offsets &cuQ, const std::optional<Offsets> &cuK) {
  if (cuQ.shape(0) == 0)
    throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, "cu_seqlens_q is empty; it holds num_seqs + 1 offsets from 0"};
  if (cuK && cuK->shape(0) != cuQ.shape(0))
    throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, "cu_seqlens_k has " + std::to_string(cuK->shape(0)) +
                                                        " entries but cu_seqlens_q " +
                                                        std::to_string(cuQ.shape(0)) + "; both are num_seqs + 1"};
  attnc_varlen varlen{};
  varlen.cu_seqlens_q = cuQ.data();
  varlen.cu_seqlens_k = cuK ? cuK->data() : nullptr;
  varlen.num_seqs = static_cast<int64_t>(cuQ.shape(0)) - 1;
  return varlen;
}

/// A pattern's inputs for one call (or, with OutArray, the gradients of its
/// float inputs): the attnc_input entries and the names and arrays they
/// point into (kept alive for the call).
template <class Array> struct CallInputs {
  std::vector<std::string> names;
  std::vector<Array> arrays;
  std::vector<attnc_input> entries;
};

/// The 4-D view of an input: an int input (int32 or int64) as [B, H, D1,
/// D2], a float input (float32 or bfloat16; ABI 9) as its declared
/// dimensions followed by 1s; attnc's Python layer shapes both. Strides as
/// in view4.
template <class Array> attnc_tensor inputView(const Array &a, const std::string &name) {
  if (a.ndim() != 4)
    throw StatusError{ATTNC_ERROR_SHAPE, "input '" + name + "' has " + std::to_string(a.ndim()) +
                                             " dimensions; the extension takes 4 ([batch, heads, D1, D2] for an "
                                             "int input, the dimensions then 1s for a float input)"};
  const nb::dlpack::dtype t = a.dtype();
  attnc_tensor out{};
  if (t.lanes == 1 && t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int) && (t.bits == 32 || t.bits == 64))
    out.dtype = t.bits == 32 ? ATTNC_DTYPE_I32 : ATTNC_DTYPE_I64;
  else if (t.lanes == 1 && t.bits == 32 && t.code == kFloatCode)
    out.dtype = ATTNC_DTYPE_F32;
  else if (t.lanes == 1 && t.bits == 16 && t.code == kBfloatCode)
    out.dtype = ATTNC_DTYPE_BF16;
  else
    throw StatusError{ATTNC_ERROR_DTYPE, "input '" + name + "' is not int32, int64, float32 or bfloat16"};
  out.data = const_cast<void *>(static_cast<const void *>(a.data()));
  for (int k = 0; k < 4; ++k) {
    out.shape[k] = static_cast<int64_t>(a.shape(k));
    out.strides[k] = out.shape[k] == 1 ? 1 : a.stride(k);
  }
  return out;
}

/// The inputs of a call from a sequence of (name, array) pairs (None: none).
template <class Array> std::unique_ptr<CallInputs<Array>> callInputsOf(nb::handle pairs, nb::handle toDlpack) {
  auto out = std::make_unique<CallInputs<Array>>();
  if (pairs.is_none())
    return out;
  for (nb::handle item : pairs) {
    nb::tuple pair = nb::cast<nb::tuple>(item);
    if (pair.size() != 2)
      throw nb::type_error("attnc: an input is a (name, array) pair");
    out->names.push_back(nb::cast<std::string>(pair[0]));
    out->arrays.push_back(arrayOf<Array>(pair[1], toDlpack, out->names.back().c_str()));
  }
  // (Filled once the names no longer move.)
  for (size_t x = 0; x < out->names.size(); ++x)
    out->entries.push_back({out->names[x].c_str(), inputView(out->arrays[x], out->names[x])});
  return out;
}

using InInputs = CallInputs<InArray>;
using OutInputs = CallInputs<OutArray>;

/// attnc_forward on `device` (null: the CPU) over a varlen batch when `varlen`
/// is given, with the queries at `firstQuery` when it is >= 0, and the
/// pattern's `inputs` when given. In, Out: the arrays' nanobind types (CPU or
/// CUDA).
template <class In, class Out>
void forward(const Kernel &kernel, const In &q, const In &k, const In &v, const Out &o, const std::optional<Out> &lse,
             const attnc_varlen *varlen, float scale, int32_t numThreads, const attnc_device *device = nullptr,
             int64_t firstQuery = -1, const std::vector<attnc_input> *inputs = nullptr,
             const int64_t *keyPositions = nullptr) {
  const attnc_tensor tq = view4(q, "q"), tk = view4(k, "k"), tv = view4(v, "v");
  attnc_tensor to = view4(o, "o");
  std::optional<attnc_tensor> tl;
  if (lse)
    tl = viewLse(*lse);
  const attnc_run_options options = runOptions(scale, numThreads);
  attnc_call call;
  attnc_call_init(&call);
  call.q = &tq;
  call.k = &tk;
  call.v = &tv;
  call.o = &to;
  call.lse = tl ? &*tl : nullptr;
  call.device = device;
  call.first_query = firstQuery >= 0 ? firstQuery : ATTNC_LAST_QUERIES;
  call.varlen = varlen;
  if (inputs && !inputs->empty()) {
    call.inputs = inputs->data();
    call.num_inputs = static_cast<int64_t>(inputs->size());
  }
  call.options = &options;
  call.key_positions = keyPositions;
  check(timedCall([&] { return attnc_forward(kernel.handle, &call); }));
}

/// attnc_backward: the gradients of forward()'s call, with the same arguments.
template <class In, class Out>
void backward(const Kernel &kernel, const In &q, const In &k, const In &v, const In &o, const In &dO, const In &lse,
              const Out &dq, const Out &dk, const Out &dv, const attnc_varlen *varlen, float scale, int32_t numThreads,
              const attnc_device *device = nullptr, int64_t firstQuery = -1,
              const std::vector<attnc_input> *inputs = nullptr, const std::vector<attnc_input> *dInputs = nullptr) {
  const attnc_tensor tq = view4(q, "q"), tk = view4(k, "k"), tv = view4(v, "v"), tdo = view4(dO, "d_o");
  attnc_tensor to = view4(o, "o"), tl = viewLse(lse);
  attnc_tensor tdq = view4(dq, "d_q"), tdk = view4(dk, "d_k"), tdv = view4(dv, "d_v");
  const attnc_run_options options = runOptions(scale, numThreads);
  attnc_call call;
  attnc_call_init(&call);
  call.q = &tq;
  call.k = &tk;
  call.v = &tv;
  call.o = &to;
  call.lse = &tl;
  call.d_o = &tdo;
  call.d_q = &tdq;
  call.d_k = &tdk;
  call.d_v = &tdv;
  call.device = device;
  call.first_query = firstQuery >= 0 ? firstQuery : ATTNC_LAST_QUERIES;
  call.varlen = varlen;
  if (inputs && !inputs->empty()) {
    call.inputs = inputs->data();
    call.num_inputs = static_cast<int64_t>(inputs->size());
  }
  if (dInputs && !dInputs->empty()) {
    call.d_inputs = dInputs->data();
    call.num_d_inputs = static_cast<int64_t>(dInputs->size());
  }
  call.options = &options;
  check(timedCall([&] { return attnc_backward(kernel.handle, &call); }));
}

void runForward(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                float scale, int32_t numThreads, nb::handle toDlpack) {
  forward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
          arrayOf<InArray>(v, toDlpack, "v"), arrayOf<OutArray>(o, toDlpack, "o"),
          optionalArrayOf<OutArray>(lse, toDlpack, "lse"), nullptr, scale, numThreads);
}

void runBackward(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle dO,
                 nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, float scale, int32_t numThreads,
                 nb::handle toDlpack) {
  backward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
           arrayOf<InArray>(v, toDlpack, "v"), arrayOf<InArray>(o, toDlpack, "o"),
           arrayOf<InArray>(dO, toDlpack, "d_o"), arrayOf<InArray>(lse, toDlpack, "lse"),
           arrayOf<OutArray>(dq, toDlpack, "d_q"), arrayOf<OutArray>(dk, toDlpack, "d_k"),
           arrayOf<OutArray>(dv, toDlpack, "d_v"), nullptr, scale, numThreads);
}

/// attnc_forward with the pattern's inputs: (name, array) pairs, int32 or
/// int64 arrays of shape [B, H, D1, D2] for int inputs, float32 or bfloat16
/// arrays of the declared dimensions then 1s for float inputs (attnc's
/// Python layer checks and shapes them; the runtime checks them again, and
/// their values).
void forwardInputs(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                   nb::handle inputs, float scale, int32_t numThreads, nb::handle toDlpack) {
  const std::unique_ptr<InInputs> data = callInputsOf<InArray>(inputs, toDlpack);
  forward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
          arrayOf<InArray>(v, toDlpack, "v"), arrayOf<OutArray>(o, toDlpack, "o"),
          optionalArrayOf<OutArray>(lse, toDlpack, "lse"), nullptr, scale, numThreads, nullptr, -1, &data->entries);
}

/// attnc_backward with the pattern's inputs (as forwardInputs takes them)
/// and the gradients of float inputs to write, `dInputs` (None or (name,
/// float32 array of the input's 4-D shape) pairs: attnc_call::d_inputs).
void backwardInputs(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle dO,
                    nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle inputs,
                    nb::handle dInputs, float scale, int32_t numThreads, nb::handle toDlpack) {
  const std::unique_ptr<InInputs> data = callInputsOf<InArray>(inputs, toDlpack);
  const std::unique_ptr<OutInputs> grads = callInputsOf<OutArray>(dInputs, toDlpack);
  backward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
           arrayOf<InArray>(v, toDlpack, "v"), arrayOf<InArray>(o, toDlpack, "o"),
           arrayOf<InArray>(dO, toDlpack, "d_o"), arrayOf<InArray>(lse, toDlpack, "lse"),
           arrayOf<OutArray>(dq, toDlpack, "d_q"), arrayOf<OutArray>(dk, toDlpack, "d_k"),
           arrayOf<OutArray>(dv, toDlpack, "d_v"), nullptr, scale, numThreads, nullptr, -1, &data->entries,
           &grads->entries);
}

/// attnc_forward over keys held at positions (attnc_call::key_positions,
/// ABI 10): int64 [nk] ascending; the queries at first_query (-1: ending at
/// the last key's position); the pattern's inputs as forwardInputs takes
/// them (None: none).
void forwardHeld(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                 nb::handle inputs, nb::handle positions, int64_t firstQuery, float scale, int32_t numThreads,
                 nb::handle toDlpack) {
  const Positions at = arrayOf<Positions>(positions, toDlpack, "key_positions");
  const InArray tk = arrayOf<InArray>(k, toDlpack, "k");
  if (tk.ndim() == 4 && static_cast<int64_t>(at.shape(0)) != static_cast<int64_t>(tk.shape(2)))
    throw StatusError{ATTNC_ERROR_SHAPE, "key_positions has " + std::to_string(at.shape(0)) +
                                             " entries but 'k' has " + std::to_string(tk.shape(2)) +
                                             " key rows; give one position per key"};
  const std::unique_ptr<InInputs> data = inputs.is_none() ? nullptr : callInputsOf<InArray>(inputs, toDlpack);
  forward(kernel, arrayOf<InArray>(q, toDlpack, "q"), tk, arrayOf<InArray>(v, toDlpack, "v"),
          arrayOf<OutArray>(o, toDlpack, "o"), optionalArrayOf<OutArray>(lse, toDlpack, "lse"), nullptr, scale,
          numThreads, nullptr, firstQuery, data ? &data->entries : nullptr, at.data());
}

/// attnc_kernel_last_readers at n: int64 [n], each key position's last query (-1: none).
nb::ndarray<nb::numpy, int64_t, nb::ndim<1>> lastReaders(const Kernel &kernel, int64_t n) {
  if (n < 1 || n > (int64_t{1} << 31))
    throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, "n is " + std::to_string(n) + "; it must lie in [1, 2^31]"};
  auto *last = new int64_t[static_cast<size_t>(n)];
  nb::capsule owner(last, [](void *p) noexcept { delete[] static_cast<int64_t *>(p); });
  check(attnc_kernel_last_readers(kernel.handle, n, last));
  return nb::ndarray<nb::numpy, int64_t, nb::ndim<1>>(last, {static_cast<size_t>(n)}, owner);
}

/// Input `index` of the kernel's pattern at key length n: (name, rank, D1,
/// D2, id limit), as attnc_kernel_input gives them.
nb::tuple kernelInput(const Kernel &kernel, int64_t index, int64_t n) {
  const char *name = nullptr;
  int32_t rank = 0;
  int64_t dims[2] = {0, 0}, limit = 0;
  check(attnc_kernel_input(kernel.handle, index, n, &name, &rank, dims, &limit));
  return nb::make_tuple(std::string(name), rank, dims[0], dims[1], limit);
}

/// Input `index` of the kernel's pattern at key length n and `heads` query
/// heads, int or float (attnc_kernel_input_info, ABI 9): (name, rank,
/// is_float, (D0, D1, D2), id limit).
nb::tuple kernelInputInfo(const Kernel &kernel, int64_t index, int64_t n, int64_t heads) {
  attnc_input_info info{};
  info.size = sizeof info;
  check(attnc_kernel_input_info(kernel.handle, index, n, heads, &info));
  return nb::make_tuple(std::string(info.name ? info.name : ""), info.rank, info.is_float != 0,
                        nb::make_tuple(info.dims[0], info.dims[1], info.dims[2]), info.id_limit);
}

void runForwardAt(const Kernel &kernel, int64_t firstQuery, nb::handle q, nb::handle k, nb::handle v, nb::handle o,
                  nb::handle lse, float scale, int32_t numThreads, nb::handle toDlpack) {
  if (firstQuery < 0)
    throw StatusError{ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(firstQuery) + "; it must be >= 0"};
  forward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
          arrayOf<InArray>(v, toDlpack, "v"), arrayOf<OutArray>(o, toDlpack, "o"),
          optionalArrayOf<OutArray>(lse, toDlpack, "lse"), nullptr, scale, numThreads, nullptr, firstQuery);
}

void runBackwardAt(const Kernel &kernel, int64_t firstQuery, nb::handle q, nb::handle k, nb::handle v, nb::handle o,
                   nb::handle dO, nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, float scale,
                   int32_t numThreads, nb::handle toDlpack) {
  if (firstQuery < 0)
    throw StatusError{ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(firstQuery) + "; it must be >= 0"};
  backward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
           arrayOf<InArray>(v, toDlpack, "v"), arrayOf<InArray>(o, toDlpack, "o"),
           arrayOf<InArray>(dO, toDlpack, "d_o"), arrayOf<InArray>(lse, toDlpack, "lse"),
           arrayOf<OutArray>(dq, toDlpack, "d_q"), arrayOf<OutArray>(dk, toDlpack, "d_k"),
           arrayOf<OutArray>(dv, toDlpack, "d_v"), nullptr, scale, numThreads, nullptr, firstQuery);
}

void runVarlen(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
               nb::handle cuQ, nb::handle cuK, float scale, int32_t numThreads, nb::handle toDlpack) {
  const Offsets offsetsQ = arrayOf<Offsets>(cuQ, toDlpack, "cu_seqlens_q");
  const std::optional<Offsets> offsetsK = optionalArrayOf<Offsets>(cuK, toDlpack, "cu_seqlens_k");
  const attnc_varlen varlen = varlenOf(offsetsQ, offsetsK);
  forward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
          arrayOf<InArray>(v, toDlpack, "v"), arrayOf<OutArray>(o, toDlpack, "o"),
          optionalArrayOf<OutArray>(lse, toDlpack, "lse"), &varlen, scale, numThreads);
}

void runBackwardVarlen(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle dO,
                       nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle cuQ, nb::handle cuK,
                       float scale, int32_t numThreads, nb::handle toDlpack) {
  const Offsets offsetsQ = arrayOf<Offsets>(cuQ, toDlpack, "cu_seqlens_q");
  const std::optional<Offsets> offsetsK = optionalArrayOf<Offsets>(cuK, toDlpack, "cu_seqlens_k");
  const attnc_varlen varlen = varlenOf(offsetsQ, offsetsK);
  backward(kernel, arrayOf<InArray>(q, toDlpack, "q"), arrayOf<InArray>(k, toDlpack, "k"),
           arrayOf<InArray>(v, toDlpack, "v"), arrayOf<InArray>(o, toDlpack, "o"),
           arrayOf<InArray>(dO, toDlpack, "d_o"), arrayOf<InArray>(lse, toDlpack, "lse"),
           arrayOf<OutArray>(dq, toDlpack, "d_q"), arrayOf<OutArray>(dk, toDlpack, "d_k"),
           arrayOf<OutArray>(dv, toDlpack, "d_v"), &varlen, scale, numThreads);
}

// ---- CUDA tensors (attnc_run_forward_on / attnc_run_backward_on) ----------

using GpuIn = nb::ndarray<nb::ro, nb::device::cuda>;
using GpuOut = nb::ndarray<nb::device::cuda>;

/// The call's device: CUDA device `index` and `stream` (a cudaStream_t as an
/// integer, 0 for the legacy default stream).
attnc_device cudaDevice(int32_t index, uintptr_t stream) {
  attnc_device dev{};
  dev.type = ATTNC_DEVICE_CUDA;
  dev.index = index;
  dev.stream = reinterpret_cast<void *>(stream);
  return dev;
}

void runForwardCuda(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                    float scale, int32_t device, uintptr_t stream, nb::handle toDlpack) {
  const attnc_device dev = cudaDevice(device, stream);
  forward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"), arrayOf<GpuIn>(v, toDlpack, "v"),
          arrayOf<GpuOut>(o, toDlpack, "o"), optionalArrayOf<GpuOut>(lse, toDlpack, "lse"), nullptr, scale, 0, &dev);
}

void runBackwardCuda(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle dO,
                     nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, float scale, int32_t device,
                     uintptr_t stream, nb::handle toDlpack) {
  const attnc_device dev = cudaDevice(device, stream);
  backward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"),
           arrayOf<GpuIn>(v, toDlpack, "v"), arrayOf<GpuIn>(o, toDlpack, "o"), arrayOf<GpuIn>(dO, toDlpack, "d_o"),
           arrayOf<GpuIn>(lse, toDlpack, "lse"), arrayOf<GpuOut>(dq, toDlpack, "d_q"),
           arrayOf<GpuOut>(dk, toDlpack, "d_k"), arrayOf<GpuOut>(dv, toDlpack, "d_v"), nullptr, scale, 0, &dev);
}

/// forwardInputs on a CUDA device: the inputs (a sink's logits) are CUDA
/// arrays too.
void forwardInputsCuda(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                       nb::handle inputs, float scale, int32_t device, uintptr_t stream, nb::handle toDlpack) {
  const attnc_device dev = cudaDevice(device, stream);
  const auto data = callInputsOf<GpuIn>(inputs, toDlpack);
  forward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"), arrayOf<GpuIn>(v, toDlpack, "v"),
          arrayOf<GpuOut>(o, toDlpack, "o"), optionalArrayOf<GpuOut>(lse, toDlpack, "lse"), nullptr, scale, 0, &dev,
          -1, &data->entries);
}

/// backwardInputs on a CUDA device.
void backwardInputsCuda(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle dO,
                        nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle inputs,
                        nb::handle dInputs, float scale, int32_t device, uintptr_t stream, nb::handle toDlpack) {
  const attnc_device dev = cudaDevice(device, stream);
  const auto data = callInputsOf<GpuIn>(inputs, toDlpack);
  const auto grads = callInputsOf<GpuOut>(dInputs, toDlpack);
  backward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"),
           arrayOf<GpuIn>(v, toDlpack, "v"), arrayOf<GpuIn>(o, toDlpack, "o"), arrayOf<GpuIn>(dO, toDlpack, "d_o"),
           arrayOf<GpuIn>(lse, toDlpack, "lse"), arrayOf<GpuOut>(dq, toDlpack, "d_q"),
           arrayOf<GpuOut>(dk, toDlpack, "d_k"), arrayOf<GpuOut>(dv, toDlpack, "d_v"), nullptr, scale, 0, &dev, -1,
           &data->entries, &grads->entries);
}

void runForwardAtCuda(const Kernel &kernel, int64_t firstQuery, nb::handle q, nb::handle k, nb::handle v,
                      nb::handle o, nb::handle lse, float scale, int32_t device, uintptr_t stream,
                      nb::handle toDlpack) {
  if (firstQuery < 0)
    throw StatusError{ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(firstQuery) + "; it must be >= 0"};
  const attnc_device dev = cudaDevice(device, stream);
  forward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"), arrayOf<GpuIn>(v, toDlpack, "v"),
          arrayOf<GpuOut>(o, toDlpack, "o"), optionalArrayOf<GpuOut>(lse, toDlpack, "lse"), nullptr, scale, 0, &dev,
          firstQuery);
}

void runBackwardAtCuda(const Kernel &kernel, int64_t firstQuery, nb::handle q, nb::handle k, nb::handle v,
                       nb::handle o, nb::handle dO, nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv,
                       float scale, int32_t device, uintptr_t stream, nb::handle toDlpack) {
  if (firstQuery < 0)
    throw StatusError{ATTNC_ERROR_SHAPE, "first_query is " + std::to_string(firstQuery) + "; it must be >= 0"};
  const attnc_device dev = cudaDevice(device, stream);
  backward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"),
           arrayOf<GpuIn>(v, toDlpack, "v"), arrayOf<GpuIn>(o, toDlpack, "o"), arrayOf<GpuIn>(dO, toDlpack, "d_o"),
           arrayOf<GpuIn>(lse, toDlpack, "lse"), arrayOf<GpuOut>(dq, toDlpack, "d_q"),
           arrayOf<GpuOut>(dk, toDlpack, "d_k"), arrayOf<GpuOut>(dv, toDlpack, "d_v"), nullptr, scale, 0, &dev,
           firstQuery);
}

void runVarlenCuda(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o, nb::handle lse,
                   nb::handle cuQ, nb::handle cuK, float scale, int32_t device, uintptr_t stream, nb::handle toDlpack) {
  const Offsets offsetsQ = arrayOf<Offsets>(cuQ, toDlpack, "cu_seqlens_q");
  const std::optional<Offsets> offsetsK = optionalArrayOf<Offsets>(cuK, toDlpack, "cu_seqlens_k");
  const attnc_varlen varlen = varlenOf(offsetsQ, offsetsK);
  const attnc_device dev = cudaDevice(device, stream);
  forward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"), arrayOf<GpuIn>(v, toDlpack, "v"),
          arrayOf<GpuOut>(o, toDlpack, "o"), optionalArrayOf<GpuOut>(lse, toDlpack, "lse"), &varlen, scale, 0, &dev);
}

void runBackwardVarlenCuda(const Kernel &kernel, nb::handle q, nb::handle k, nb::handle v, nb::handle o,
                           nb::handle dO, nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv, nb::handle cuQ,
                           nb::handle cuK, float scale, int32_t device, uintptr_t stream, nb::handle toDlpack) {
  const Offsets offsetsQ = arrayOf<Offsets>(cuQ, toDlpack, "cu_seqlens_q");
  const std::optional<Offsets> offsetsK = optionalArrayOf<Offsets>(cuK, toDlpack, "cu_seqlens_k");
  const attnc_varlen varlen = varlenOf(offsetsQ, offsetsK);
  const attnc_device dev = cudaDevice(device, stream);
  backward(kernel, arrayOf<GpuIn>(q, toDlpack, "q"), arrayOf<GpuIn>(k, toDlpack, "k"),
           arrayOf<GpuIn>(v, toDlpack, "v"), arrayOf<GpuIn>(o, toDlpack, "o"), arrayOf<GpuIn>(dO, toDlpack, "d_o"),
           arrayOf<GpuIn>(lse, toDlpack, "lse"), arrayOf<GpuOut>(dq, toDlpack, "d_q"),
           arrayOf<GpuOut>(dk, toDlpack, "d_k"), arrayOf<GpuOut>(dv, toDlpack, "d_v"), &varlen, scale, 0, &dev);
}

/// "" when CUDA device `index` can run attnc's kernels, else why not.
std::string cudaUnavailable(int32_t index) {
  const attnc_device dev = cudaDevice(index, 0);
  return attnc_device_check(&dev) == ATTNC_OK ? std::string() : std::string(attnc_last_error());
}

std::unique_ptr<Kernel> compile(const std::string &source, const std::string &name,
                                const std::vector<std::string> &defines, const std::string &pattern,
                                const std::string &backend, const std::string &cacheDir, bool noCache) {
  std::vector<const char *> defineText;
  for (const std::string &d : defines)
    defineText.push_back(d.c_str());
  attnc_jit_options options{};
  options.defines = defineText.data();
  options.num_defines = static_cast<int32_t>(defineText.size());
  options.pattern = pattern.empty() ? nullptr : pattern.c_str();
  options.cache_dir = cacheDir.empty() ? nullptr : cacheDir.c_str();
  options.no_cache = noCache ? 1 : 0;
  options.backend = backend.c_str();
  attnc_kernel *handle = nullptr;
  attnc_status status;
  {
    nb::gil_scoped_release release;
    status = attnc_jit_compile_string(source.c_str(), name.c_str(), &options, &handle);
  }
  check(status);
  return std::make_unique<Kernel>(handle);
}

/// A pattern parsed, checked and canonicalised, as `attnc analyze` and
/// `attnc show` load it; its warnings, formatted.
struct Loaded {
  attnc::Frontend frontend;
  const attnc::Pattern *pattern = nullptr;
  attnc::ir::PatternIR ir;
  std::string warnings;
};

std::unique_ptr<Loaded> load(const std::string &source, const std::string &name,
                             const std::vector<std::string> &defines, const std::string &pattern) {
  auto out = std::make_unique<Loaded>();
  attnc::SemaOptions sema;
  for (const std::string &text : defines) {
    attnc::Define d;
    std::string error;
    if (!attnc::parseDefine(text, d, error))
      throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, error};
    sema.defines.push_back(d);
  }
  attnc::Frontend &fe = out->frontend;
  const bool ok = fe.parseString(name, source) && fe.analyze(sema);
  if (ok)
    out->pattern = fe.select(pattern);
  std::string diagnostics;
  for (const auto &d : fe.diags().diagnostics())
    diagnostics += fe.diags().format(d);
  if (!ok || !out->pattern)
    throw StatusError{ATTNC_ERROR_COMPILE, diagnostics.empty() ? "the pattern does not check" : diagnostics};
  out->warnings = std::move(diagnostics);
  out->ir = attnc::ir::canonicalizePattern(*out->pattern);
  return out;
}

std::pair<std::string, std::string> analyze(const std::string &source, const std::string &name,
                                            const std::vector<std::string> &defines, const std::string &pattern,
                                            int64_t n, int64_t queries, int64_t block, int64_t blockCols,
                                            bool connectivity, int ranks, int64_t headDim, int64_t kvHeads,
                                            int64_t elementBytes) {
  std::unique_ptr<Loaded> loaded = load(source, name, defines, pattern);
  attnc::ir::ReportOptions options;
  options.n = n;
  options.queries = queries;
  options.blockRows = block;
  options.blockCols = blockCols;
  options.connectivity = connectivity;
  options.ranks = ranks;
  options.headDim = headDim;
  options.kvHeads = kvHeads;
  options.elementBytes = elementBytes;
  std::string json;
  {
    nb::gil_scoped_release release;
    json = attnc::ir::reportJson(loaded->ir, attnc::ir::analyzePattern(loaded->ir, options));
  }
  return {json, loaded->warnings};
}

/// attnc::ir::shardContext for attnc.distributed.shard: per rank its ranges,
/// pairs per head, rows received forward and returned backward, and the keys
/// its queries read (intervals); the layout's name; the warnings.
nb::tuple shard(const std::string &source, const std::string &name, const std::vector<std::string> &defines,
                const std::string &pattern, int64_t n, int ranks) {
  std::unique_ptr<Loaded> loaded = load(source, name, defines, pattern);
  attnc::ir::ShardPlan plan;
  {
    nb::gil_scoped_release release;
    plan = attnc::ir::shardContext(loaded->ir, n, ranks);
  }
  std::vector<std::vector<std::pair<int64_t, int64_t>>> reads;
  for (const attnc::IntervalSet &set : plan.reads) {
    reads.emplace_back();
    for (const attnc::Interval &iv : set)
      reads.back().push_back({iv.lo, iv.hi});
  }
  return nb::make_tuple(plan.ranges, plan.pairs, plan.recvRows, plan.returnRows, reads, plan.layout,
                        loaded->warnings);
}

std::pair<std::string, std::string> show(const std::string &source, const std::string &name,
                                         const std::vector<std::string> &defines, const std::string &pattern,
                                         int64_t n, int64_t queries, std::optional<int64_t> head, int64_t grid,
                                         int64_t maxSide, const std::string &format, const std::vector<int64_t> &canvas,
                                         const std::vector<int64_t> &tile, std::optional<int64_t> query) {
  std::unique_ptr<Loaded> loaded = load(source, name, defines, pattern);
  const attnc::ir::PatternIR &ir = loaded->ir;
  if (head && (*head < 0 || *head >= ir.numHeads))
    throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT,
                      "head " + std::to_string(*head) + " is out of range; pattern '" + ir.name + "' has " +
                          std::to_string(ir.numHeads) + (ir.numHeads == 1 ? " head" : " heads") + " (0 to " +
                          std::to_string(ir.numHeads - 1) + ")"};
  // A canvas: one query's keys on the grid of an image or a video.
  std::optional<attnc::ir::CanvasShape> shape;
  if (!canvas.empty()) {
    std::string error;
    shape = attnc::ir::canvasShape(canvas, tile, n, error);
    if (!shape)
      throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, error};
    if (queries != n)
      throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT,
                        "queries draws rows of pairs; a canvas picture draws one query's keys (query=)"};
    if (!query)
      query = attnc::ir::canvasCentre(*shape);
    if (*query < 0 || *query >= n)
      throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, "query " + std::to_string(*query) +
                                                          " is not a position of the sequence [0, " +
                                                          std::to_string(n) + ")"};
  } else if (!tile.empty() || query) {
    throw StatusError{ATTNC_ERROR_INVALID_ARGUMENT, "tile= and query= draw on a canvas: give canvas=(H, W) too"};
  }
  std::string text;
  {
    nb::gil_scoped_release release;
    std::vector<attnc::ir::Layer> layers =
        attnc::ir::layersOf(ir, head, attnc::ir::SetNames(loaded->frontend, loaded->pattern->name));
    attnc::ir::Raster raster;
    std::string title;
    if (shape) {
      raster = attnc::ir::rasterizeCanvas(layers, n, *shape, *query);
      layers.push_back({"the query i = " + std::to_string(*query), nullptr});
      title = attnc::ir::pictureTitle(ir, n, head);
    } else {
      raster = attnc::ir::rasterize(layers, n, maxSide, queries);
      title = attnc::ir::pictureTitle(ir, n, head, queries);
    }
    text = format == "ascii" ? attnc::ir::renderAscii(raster, layers, title, /*color=*/false)
                             : attnc::ir::renderSvg(raster, layers, title, grid);
  }
  return {text, loaded->warnings};
}

std::string metadata(const Kernel &kernel, const char *key) {
  const char *value = attnc_kernel_metadata(kernel.handle, key);
  return value ? value : "";
}

} // namespace

NB_MODULE(_attnc, m) {
  m.doc() = "attnc's native layer: the runtime and JIT C ABI and the compiler's analyses (use the attnc package)";
  m.attr("ABI_VERSION") = ATTNC_ABI_VERSION;
  // A kernel that an autograd graph still holds when the interpreter exits
  // (a script's last `o.sum().backward()` at module level) is freed with
  // the process; nanobind's "leaked 1 instances" at exit says nothing a
  // user can act on.
  nb::set_leak_warnings(false);

  nb::register_exception_translator([](const std::exception_ptr &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError &e) {
      nb::object cls = nb::module_::import_("attnc._errors").attr("AttncError");
      nb::object error = cls(e.message, static_cast<int>(e.status), attnc_status_name(e.status));
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });

  nb::class_<Kernel>(m, "KernelHandle", "A loaded kernel (attnc_kernel *); freed with the object")
      .def("metadata", &metadata, "key"_a, "A metadata value, \"\" when the kernel has none")
      .def_prop_ro("num_heads", [](const Kernel &k) { return attnc_kernel_num_heads(k.handle); },
                   "Heads the pattern declares; 0: any")
      .def_prop_ro("address", [](const Kernel &k) { return reinterpret_cast<uintptr_t>(k.handle); },
                   "The attnc_kernel * as an integer (for ctypes callers; valid while this object lives)")
      .def_prop_ro("num_inputs", [](const Kernel &k) { return attnc_kernel_num_inputs(k.handle); },
                   "Inputs the pattern declares (attnc_kernel_num_inputs); 0: it reads no data")
      .def("input", &kernelInput, "index"_a, "n"_a,
           "attnc_kernel_input: (name, rank, D1, D2, id_limit) of input `index` at key length n")
      .def("input_info", &kernelInputInfo, "index"_a, "n"_a, "heads"_a,
           "attnc_kernel_input_info: (name, rank, is_float, (D0, D1, D2), id_limit) of input `index` at key "
           "length n with `heads` query heads")
      .def_prop_ro("modifiers", [](const Kernel &k) { return attnc_kernel_modifiers(k.handle); },
                   "attnc_kernel_modifiers: ATTNC_MODIFIER_SCORE (1) | ATTNC_MODIFIER_SINK (2) bits; 0: none");

  m.def("compile", &compile, "source"_a, "name"_a, "defines"_a, "pattern"_a, "backend"_a, "cache_dir"_a,
        "no_cache"_a, "attnc_jit_compile_string: compile (or fetch from the JIT cache) a pattern");
  m.def("load", [](const std::string &path) {
        attnc_kernel *handle = nullptr;
        check(attnc_kernel_load(path.c_str(), &handle));
        return std::make_unique<Kernel>(handle);
      }, "path"_a, "attnc_kernel_load: a kernel file written by `attnc compile`");
  m.def("run_forward", &runForward, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "scale"_a,
        "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_forward: o (and lse when given) from q, k, v; arrays, capsules, or objects `to_dlpack` "
        "turns into capsules");
  m.def("run_backward", &runBackward, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a, "lse"_a, "d_q"_a,
        "d_k"_a, "d_v"_a, "scale"_a, "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_backward: d_q, d_k, d_v");
  m.def("forward", &forwardInputs, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "inputs"_a, "scale"_a,
        "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_forward with the pattern's inputs, a sequence of (name, array) pairs: int32/int64 [B, H, D1, D2] "
        "for int inputs, float32/bfloat16 [D0, D1, D2, 1] (the dimensions then 1s) for float inputs");
  m.def("backward", &backwardInputs, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a, "lse"_a, "d_q"_a, "d_k"_a,
        "d_v"_a, "inputs"_a, "d_inputs"_a.none(), "scale"_a, "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_backward with the pattern's inputs: d_q, d_k, d_v, and the gradients of the float inputs "
        "named in d_inputs ((name, float32 array) pairs, or None)");
  m.def("forward_held", &forwardHeld, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "inputs"_a.none(),
        "key_positions"_a, "first_query"_a, "scale"_a, "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_forward over keys held at positions (attnc_call::key_positions: int64 [nk], ascending), the "
        "queries at first_query (-1: ending at the last key's position)");
  m.def("last_readers", &lastReaders, "kernel"_a, "n"_a,
        "attnc_kernel_last_readers: per key position below n, the last query position that reads it (-1: none)");
  m.def("run_forward_at", &runForwardAt, "kernel"_a, "first_query"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(),
        "scale"_a, "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_forward_at: the queries at positions [first_query, first_query + nq) of the keys");
  m.def("run_backward_at", &runBackwardAt, "kernel"_a, "first_query"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a,
        "lse"_a, "d_q"_a, "d_k"_a, "d_v"_a, "scale"_a, "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_backward_at: d_q, d_k, d_v of attnc_run_forward_at's queries");
  m.def("run_varlen", &runVarlen, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "cu_seqlens_q"_a,
        "cu_seqlens_k"_a.none(), "scale"_a, "num_threads"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_varlen: o (and lse) of a batch-1 call whose sequences cu_seqlens (int32) delimit");
  m.def("run_backward_varlen", &runBackwardVarlen, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a, "lse"_a,
        "d_q"_a, "d_k"_a, "d_v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a.none(), "scale"_a, "num_threads"_a,
        "to_dlpack"_a.none() = nb::none(), "attnc_run_backward_varlen: d_q, d_k, d_v of a varlen call");
  m.def("run_forward_cuda", &runForwardCuda, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "scale"_a,
        "device"_a, "stream"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_forward_on a CUDA device: o (and lse) from q, k, v, queued on `stream` (a cudaStream_t)");
  m.def("run_backward_cuda", &runBackwardCuda, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a, "lse"_a, "d_q"_a,
        "d_k"_a, "d_v"_a, "scale"_a, "device"_a, "stream"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_backward_on a CUDA device: d_q, d_k, d_v, queued on `stream`");
  m.def("forward_cuda", &forwardInputsCuda, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(), "inputs"_a,
        "scale"_a, "device"_a, "stream"_a, "to_dlpack"_a.none() = nb::none(),
        "forward with the pattern's inputs on a CUDA device (the inputs CUDA arrays too: a sink's logits)");
  m.def("backward_cuda", &backwardInputsCuda, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a, "lse"_a, "d_q"_a,
        "d_k"_a, "d_v"_a, "inputs"_a, "d_inputs"_a.none(), "scale"_a, "device"_a, "stream"_a,
        "to_dlpack"_a.none() = nb::none(), "backward with the pattern's inputs on a CUDA device");
  m.def("run_forward_at_cuda", &runForwardAtCuda, "kernel"_a, "first_query"_a, "q"_a, "k"_a, "v"_a, "o"_a,
        "lse"_a.none(), "scale"_a, "device"_a, "stream"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_forward_at_on a CUDA device: the queries at positions [first_query, first_query + nq)");
  m.def("run_backward_at_cuda", &runBackwardAtCuda, "kernel"_a, "first_query"_a, "q"_a, "k"_a, "v"_a, "o"_a,
        "d_o"_a, "lse"_a, "d_q"_a, "d_k"_a, "d_v"_a, "scale"_a, "device"_a, "stream"_a,
        "to_dlpack"_a.none() = nb::none(), "attnc_run_backward_at_on a CUDA device");
  m.def("run_varlen_cuda", &runVarlenCuda, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "lse"_a.none(),
        "cu_seqlens_q"_a, "cu_seqlens_k"_a.none(), "scale"_a, "device"_a, "stream"_a, "to_dlpack"_a.none() = nb::none(),
        "attnc_run_varlen_on a CUDA device: the tensors there, the offsets (int32) on the host");
  m.def("run_backward_varlen_cuda", &runBackwardVarlenCuda, "kernel"_a, "q"_a, "k"_a, "v"_a, "o"_a, "d_o"_a, "lse"_a,
        "d_q"_a, "d_k"_a, "d_v"_a, "cu_seqlens_q"_a, "cu_seqlens_k"_a.none(), "scale"_a, "device"_a, "stream"_a,
        "to_dlpack"_a.none() = nb::none(), "attnc_run_backward_varlen_on a CUDA device");
  m.def("cpu_isa",
        []() -> nb::object {
          const char *isa = attnc_cpu_isa();
          return isa ? nb::object(nb::str(isa)) : nb::object(nb::none());
        },
        "attnc_cpu_isa: the CPU kernels' instruction set, or None where ATTNC_FUSED_ISA names none this CPU has");
  m.def("last_error", [] { return std::string(attnc_last_error()); }, "attnc_last_error on this thread");
  m.def("cuda_unavailable", &cudaUnavailable, "device"_a,
        "attnc_device_check: \"\" when CUDA device `device` runs attnc's kernels, else the reason");
  m.def("analyze", &analyze, "source"_a, "name"_a, "defines"_a, "pattern"_a, "n"_a, "queries"_a, "block"_a,
        "block_cols"_a, "connectivity"_a, "ranks"_a, "head_dim"_a, "kv_heads"_a, "element_bytes"_a,
        "(the analyze --json object, warnings)");
  m.def("shard", &shard, "source"_a, "name"_a, "defines"_a, "pattern"_a, "n"_a, "ranks"_a,
        "(ranges, pairs, recv_rows, return_rows, reads, layout, warnings): the positions shared out to `ranks` "
        "ranks with equal pairs (analysis/Shards.h)");
  m.def("show", &show, "source"_a, "name"_a, "defines"_a, "pattern"_a, "n"_a, "queries"_a, "head"_a.none(), "grid"_a,
        "max_side"_a, "format"_a, "canvas"_a, "tile"_a, "query"_a.none(), "(the picture as SVG or ASCII text, warnings)");
  m.def("last_call", [] { return lastCall; },
        "(start, end): when the last run_* call on this thread entered and left the C ABI, in ns of "
        "time.monotonic_ns()'s clock (for bench/python_overhead.py)");
  m.def("cache_stats", [] {
        int64_t hits = 0, misses = 0, rebuilt = 0;
        attnc_jit_cache_stats(&hits, &misses, &rebuilt);
        return std::make_tuple(hits, misses, rebuilt);
      }, "The JIT cache's (hits, misses, rebuilt) in this process");
}
