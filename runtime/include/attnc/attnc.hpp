//===- attnc.hpp - A thin C++ wrapper over the attnc C ABI ----------------===//
//
// Header-only; owns the kernel handle and turns status codes into
// attnc::Error exceptions carrying the code and the message.
//
//   attnc::Kernel kernel = attnc::Kernel::load("fixed.attnk");
//   kernel.run(q, k, v, o, {batch, heads, n, d});   // contiguous float buffers
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attnc {

class Error : public std::runtime_error {
public:
  Error(attnc_status code, const std::string &message)
      : std::runtime_error(std::string(attnc_status_name(code)) + ": " + message), code_(code) {}
  attnc_status code() const { return code_; }

private:
  attnc_status code_;
};

inline void check(attnc_status status) {
  if (status != ATTNC_OK)
    throw Error(status, attnc_last_error());
}

/// bfloat16 values (the upper half of a float32; ATTNC_DTYPE_BF16 tensors
/// hold them as uint16_t): widening is exact, narrowing rounds to nearest,
/// ties to even, and keeps NaN a (quiet) NaN.
inline float bf16ToFloat(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// IEEE half (binary16) values, as ATTNC_DTYPE_F16 tensors on a GPU hold
/// them: rounded to nearest, ties to even; beyond 65504 infinity, below
/// 2^-14 a subnormal (or zero); NaN stays a (quiet) NaN.
inline uint16_t floatToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) // NaN
    return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  if (x >= 0x477ff000u) // rounds beyond 65504 (or is infinite)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (x < 0x38800000u) { // a subnormal: units of 2^-24, the float's mantissa shifted, ties to even
    if (x < 0x33000000u) // below 2^-25: zero
      return static_cast<uint16_t>(sign);
    const uint32_t mantissa = (x & 0x7fffffu) | 0x800000u, shift = 126u - (x >> 23);
    uint32_t units = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    units += rest > half || (rest == half && (units & 1u));
    return static_cast<uint16_t>(sign | units);
  }
  const uint32_t rounded = x + 0xfffu + ((x >> 13) & 1u); // nearest even at bit 13
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

/// A [batch, heads, n, d] view of `data` (float32, or uint16_t bf16 with
/// ATTNC_DTYPE_BF16); contiguous row-major by default.
inline attnc_tensor tensorView(const void *data, std::array<int64_t, 4> shape,
                               attnc_dtype dtype = ATTNC_DTYPE_F32) {
  attnc_tensor t{};
  t.data = const_cast<void *>(data);
  t.dtype = dtype;
  int64_t stride = 1;
  for (int a = 3; a >= 0; --a) {
    t.shape[a] = shape[a];
    t.strides[a] = stride;
    stride *= shape[a];
  }
  return t;
}

/// A pattern input's values as a view: `values` int32 (ATTNC_DTYPE_I32) or
/// int64 (ATTNC_DTYPE_I64), [B, H, D1, D2] (see attnc_input); a float input
/// (or its gradient, attnc_call::d_inputs) f32 or bf16 of its dimensions
/// then 1s: inputView("slope", slope, {heads, 1, 1, 1}, ATTNC_DTYPE_F32).
inline attnc_input inputView(const char *name, const void *values, std::array<int64_t, 4> shape,
                             attnc_dtype dtype = ATTNC_DTYPE_I32) {
  return attnc_input{name, tensorView(values, shape, dtype)};
}

/// A call description (attnc_call) from attnc_call_init: set what the call uses.
inline attnc_call callInit() {
  attnc_call c;
  attnc_call_init(&c);
  return c;
}

class Kernel {
public:
  /// Takes ownership of a handle from the C API (or the JIT).
  explicit Kernel(attnc_kernel *handle = nullptr) : handle_(handle) {}
  Kernel(Kernel &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Kernel &operator=(Kernel &&other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;
  ~Kernel() { attnc_kernel_free(handle_); }

  static Kernel load(const std::string &path) {
    attnc_kernel *handle = nullptr;
    check(attnc_kernel_load(path.c_str(), &handle));
    return Kernel(handle);
  }
  /// From the bytes of a kernel file in memory.
  static Kernel loadMemory(const void *bytes, size_t size) {
    attnc_kernel *handle = nullptr;
    check(attnc_kernel_load_memory(bytes, size, &handle));
    return Kernel(handle);
  }

  /// A metadata value ("" when absent).
  std::string metadata(const char *key) const {
    const char *v = attnc_kernel_metadata(handle_, key);
    return v ? v : "";
  }
  int64_t numHeads() const { return attnc_kernel_num_heads(handle_); }

  void run(const attnc_tensor &q, const attnc_tensor &k, const attnc_tensor &v, attnc_tensor &o,
           const attnc_run_options *options = nullptr) const {
    check(attnc_run(handle_, &q, &k, &v, &o, options));
  }

  /// Contiguous [batch, heads, n, d] buffers.
  void run(const float *q, const float *k, const float *v, float *o,
           std::array<int64_t, 4> shape, const attnc_run_options *options = nullptr) const {
    attnc_tensor tq = tensorView(q, shape), tk = tensorView(k, shape), tv = tensorView(v, shape),
                 to = tensorView(o, shape);
    run(tq, tk, tv, to, options);
  }

  /// O and each row's log-sum-exp (f32 [batch, heads, n, 1]) for runBackward.
  void runForward(const attnc_tensor &q, const attnc_tensor &k, const attnc_tensor &v, attnc_tensor &o,
                  attnc_tensor &lse, const attnc_run_options *options = nullptr) const {
    check(attnc_run_forward(handle_, &q, &k, &v, &o, &lse, options));
  }

  /// dQ, dK, dV of sum(O * dO) (see attnc_run_backward).
  void runBackward(const attnc_tensor &q, const attnc_tensor &k, const attnc_tensor &v, const attnc_tensor &o,
                   const attnc_tensor &dO, const attnc_tensor &lse, attnc_tensor &dq, attnc_tensor &dk,
                   attnc_tensor &dv, const attnc_run_options *options = nullptr) const {
    check(attnc_run_backward(handle_, &q, &k, &v, &o, &dO, &lse, &dq, &dk, &dv, options));
  }

  /// Contiguous [batch, heads, n, d] buffers (lse: [batch, heads, n]).
  void runForward(const float *q, const float *k, const float *v, float *o, float *lse,
                  std::array<int64_t, 4> shape, const attnc_run_options *options = nullptr) const {
    attnc_tensor tq = tensorView(q, shape), tk = tensorView(k, shape), tv = tensorView(v, shape),
                 to = tensorView(o, shape), tl = tensorView(lse, {shape[0], shape[1], shape[2], 1});
    runForward(tq, tk, tv, to, tl, options);
  }
  void runBackward(const float *q, const float *k, const float *v, const float *o, const float *dO,
                   const float *lse, float *dq, float *dk, float *dv, std::array<int64_t, 4> shape,
                   const attnc_run_options *options = nullptr) const {
    attnc_tensor tq = tensorView(q, shape), tk = tensorView(k, shape), tv = tensorView(v, shape),
                 to = tensorView(o, shape), tdo = tensorView(dO, shape),
                 tl = tensorView(lse, {shape[0], shape[1], shape[2], 1}), tdq = tensorView(dq, shape),
                 tdk = tensorView(dk, shape), tdv = tensorView(dv, shape);
    runBackward(tq, tk, tv, to, tdo, tl, tdq, tdk, tdv, options);
  }

  /// The forward pass of a call description (attnc_forward): inputs, devices, offsets, varlen.
  void forward(const attnc_call &call) const { check(attnc_forward(handle_, &call)); }
  /// The backward pass of a call description (attnc_backward).
  void backward(const attnc_call &call) const { check(attnc_backward(handle_, &call)); }
  /// The inputs the pattern declares, int and float (0: none).
  int64_t numInputs() const { return attnc_kernel_num_inputs(handle_); }
  /// Input `index` at key length n with `heads` query heads (ABI 9).
  attnc_input_info inputInfo(int64_t index, int64_t n, int64_t heads = 1) const {
    attnc_input_info info{};
    info.size = sizeof info;
    check(attnc_kernel_input_info(handle_, index, n, heads, &info));
    return info;
  }
  /// ATTNC_MODIFIER_SCORE / ATTNC_MODIFIER_SINK bits of the pattern (ABI 9).
  int32_t modifiers() const { return attnc_kernel_modifiers(handle_); }
  /// Per key position j < n, the last query position that reads it (-1:
  /// none), what a generation cache may drop (attnc_kernel_last_readers, ABI 10).
  std::vector<int64_t> lastReaders(int64_t n) const {
    std::vector<int64_t> last(static_cast<size_t>(n > 0 ? n : 0));
    check(attnc_kernel_last_readers(handle_, n, last.data()));
    return last;
  }

  attnc_kernel *get() const { return handle_; }

private:
  attnc_kernel *handle_;
};

} // namespace attnc
