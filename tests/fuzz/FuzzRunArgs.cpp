//===- FuzzRunArgs.cpp - The C ABI's argument checks ----------------------===//
//
// attnc_run, attnc_run_forward and attnc_run_backward on kernels compiled once
// (fused backend, in memory: a pattern with a declared head count and one
// without), with shapes, strides, dtypes and pointers decoded from the input.
//
// The decoder keeps every call memory-safe for a runtime that honours its
// contract (attnc.h), so that a sanitizer report is the runtime's fault:
//  - A tensor whose elements all lie within kMaxSpan elements gets a buffer
//    of exactly the extent its shape and strides reach, negative strides
//    included (the pointer then points inside it).
//  - A tensor whose extent overflows int64 (a negative dimension, products
//    or spans past 2^63) gets a pointer to a 16-element buffer: attnc.h says
//    such sizes are ATTNC_ERROR_SHAPE, so nothing may be read from it.
//  - A valid tensor too large to allocate gets a null pointer, which the
//    runtime must refuse unless the call is empty.
// Any tensor may also be given a null pointer on purpose.
//
//===----------------------------------------------------------------------===//
#include "FuzzInput.h"
#include "FuzzKernels.h"

#include "attnc/attnc.h"
#include "attnc/compiler/Compile.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using attnc::fuzz::ByteReader;

/// The largest extent, in elements, a tensor's buffer gets.
constexpr int64_t kMaxSpan = 1 << 12;

const attnc_kernel *kernel(unsigned which) {
  static attnc_kernel *const kAnyHeads = attnc::fuzz::compileFusedKernel(
      "pattern p { param w = 3 attend { j : i - w <= j && j <= i } | { 0 } }");
  static attnc_kernel *const kTwoHeads = attnc::fuzz::compileFusedKernel(
      "pattern q { heads 2 head 0 attends { j : j <= i } head 1 attends { j : j % 2 == 0 } }");
  return which == 0 ? kAnyHeads : which == 1 ? kTwoHeads : nullptr;
}

/// Values that sit on the edges of the checks: zero, negative, powers of two
/// around 2^31, 2^32 and 2^62, and square roots of 2^63 whose products
/// overflow.
constexpr int64_t kEdges[] = {0,
                              -1,
                              -2,
                              std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(),
                              int64_t(1) << 31,
                              (int64_t(1) << 31) - 1,
                              int64_t(1) << 32,
                              int64_t(1) << 40,
                              int64_t(1) << 61,
                              int64_t(1) << 62,
                              3037000500, // ceil(sqrt(2^63))
                              2097152,    // 2^21: four of them overflow
                              std::numeric_limits<int64_t>::max() / 2 + 1,
                              std::numeric_limits<int64_t>::max() / 4 + 1};

/// A dimension or stride: mostly small, sometimes an edge, rarely raw bytes.
int64_t drawValue(ByteReader &in, int64_t smallMax) {
  uint8_t selector = in.byte();
  if (selector < 200)
    return selector % (smallMax + 1);
  if (selector < 250)
    return kEdges[in.pick(std::size(kEdges))];
  return in.integer<int64_t>();
}

struct Dims {
  int64_t batch, hq, hkv, nq, nk, d;
};

enum class Role { Query, KeyValue, Lse };

/// One tensor argument and the buffer behind it.
struct Arg {
  attnc_tensor tensor{};
  std::vector<unsigned char> storage;
  bool present = true; ///< false: pass a null attnc_tensor pointer
};

/// The lowest and highest element offsets a view reaches; false when it
/// reaches none (a zero dimension) or the offsets overflow int64.
bool extent(const attnc_tensor &t, int64_t rank, __int128 &lo, __int128 &hi, bool &empty) {
  lo = hi = 0;
  empty = false;
  for (int64_t k = 0; k < rank; ++k) {
    if (t.shape[k] < 0)
      return false;
    if (t.shape[k] == 0)
      empty = true;
  }
  if (empty)
    return true;
  constexpr __int128 kMax = std::numeric_limits<int64_t>::max();
  for (int64_t k = 0; k < rank; ++k) {
    // Each term within +-2^126 and checked before the next: no __int128 overflow.
    __int128 reach = __int128(t.shape[k] - 1) * t.strides[k];
    (reach < 0 ? lo : hi) += reach;
    if (lo < -kMax || hi > kMax)
      return false;
  }
  return true;
}

void makeArg(ByteReader &in, Arg &arg, Role role, const Dims &dims, attnc_dtype callDtype) {
  attnc_tensor &t = arg.tensor;
  int64_t heads = role == Role::KeyValue ? dims.hkv : dims.hq;
  int64_t rows = role == Role::KeyValue ? dims.nk : dims.nq;
  int64_t cols = role == Role::Lse ? 1 : dims.d;
  int64_t shape[4] = {dims.batch, heads, rows, cols};
  // Mostly the call's shape; sometimes one dimension disagrees.
  if (in.pick(8) == 0)
    shape[in.pick(4)] = drawValue(in, 9);
  std::copy(shape, shape + 4, t.shape);
  t.dtype = role == Role::Lse ? ATTNC_DTYPE_F32 : callDtype;
  // Any dtype the enum can hold, 3 being none of its names; a value past
  // its range would be undefined behaviour in the caller already.
  if (in.pick(16) == 0)
    t.dtype = static_cast<attnc_dtype>(in.pick(4));
  // Strides: contiguous, padded, or drawn one by one. Those computed from
  // huge shapes saturate at INT64_MAX, one more value the checks must refuse.
  auto next = [](int64_t stride, int64_t dim, int64_t pad) {
    int64_t out;
    if (__builtin_mul_overflow(stride, std::max<int64_t>(dim, 1), &out) ||
        __builtin_add_overflow(out, pad, &out))
      return std::numeric_limits<int64_t>::max();
    return out;
  };
  switch (in.pick(4)) {
  case 0:
  case 1: {
    int64_t stride = 1;
    for (int k = 3; k >= 0; --k) {
      t.strides[k] = stride;
      stride = next(stride, t.shape[k], 0);
    }
    break;
  }
  case 2: {
    int64_t stride = 1;
    for (int k = 3; k >= 0; --k) {
      t.strides[k] = stride;
      stride = next(stride, t.shape[k], in.pick(3));
    }
    break;
  }
  default:
    for (int k = 0; k < 4; ++k)
      t.strides[k] = in.pick(4) == 0 ? -(drawValue(in, 8) & std::numeric_limits<int64_t>::max())
                                     : drawValue(in, 40);
  }
  uint8_t pointer = in.byte();
  arg.present = pointer != 255;
  size_t elementBytes = t.dtype == ATTNC_DTYPE_BF16 || t.dtype == ATTNC_DTYPE_F16 ? 2 : 4;
  __int128 lo, hi;
  bool empty;
  if (pointer == 254) {
    t.data = nullptr;
  } else if (!extent(t, 4, lo, hi, empty)) {
    arg.storage.assign(16 * elementBytes, 0);
    t.data = arg.storage.data();
  } else if (empty) {
    // No element is reachable: a small buffer (or null, which is allowed).
    arg.storage.assign(elementBytes, 0);
    t.data = pointer % 2 ? arg.storage.data() : nullptr;
  } else if (hi - lo + 1 <= kMaxSpan) {
    arg.storage.assign(static_cast<size_t>(hi - lo + 1) * elementBytes, 0);
    t.data = arg.storage.data() + static_cast<size_t>(-lo) * elementBytes;
  } else {
    t.data = nullptr;
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ByteReader in(data, size);
  const attnc_kernel *k = kernel(in.pick(8) == 7 ? 2 : in.pick(2));
  unsigned call = in.pick(3);
  Dims dims;
  dims.batch = drawValue(in, 3);
  dims.hq = drawValue(in, 4);
  dims.hkv = in.pick(2) ? dims.hq : drawValue(in, 4);
  dims.nq = drawValue(in, 12);
  dims.nk = in.pick(2) ? dims.nq : drawValue(in, 12);
  dims.d = drawValue(in, 8);
  attnc_dtype dtype = in.pick(2) ? ATTNC_DTYPE_F32 : ATTNC_DTYPE_BF16;

  attnc_run_options options{in.pick(4) == 0 ? in.real() : 0.0f, in.pick(2) ? 1 : 3};
  const attnc_run_options *opts = in.pick(8) == 0 ? nullptr : &options;

  // q k v o lse dO dQ dK dV, in the order the calls take them.
  static constexpr Role kRoles[] = {Role::Query, Role::KeyValue, Role::KeyValue,
                                    Role::Query, Role::Lse,      Role::Query,
                                    Role::Query, Role::KeyValue, Role::KeyValue};
  Arg args[9];
  const int used = call == 0 ? 4 : call == 1 ? 5 : 9;
  for (int a = 0; a < used; ++a)
    makeArg(in, args[a], kRoles[a], dims, dtype);
  auto ptr = [&](int a) { return args[a].present ? &args[a].tensor : nullptr; };

  attnc_status status;
  switch (call) {
  case 0:
    status = attnc_run(k, ptr(0), ptr(1), ptr(2), ptr(3), opts);
    break;
  case 1:
    status = attnc_run_forward(k, ptr(0), ptr(1), ptr(2), ptr(3), ptr(4), opts);
    break;
  default:
    status = attnc_run_backward(k, ptr(0), ptr(1), ptr(2), ptr(3), ptr(5), ptr(4), ptr(6), ptr(7),
                                ptr(8), opts);
  }
  // For checking what a seed decodes to: ATTNC_FUZZ_VERBOSE=1 prints each outcome.
  static const bool kVerbose = std::getenv("ATTNC_FUZZ_VERBOSE") != nullptr;
  if (kVerbose)
    std::fprintf(stderr, "call %u [%lld %lld %lld %lld %lld %lld]: %s %s\n", call,
                 (long long)dims.batch, (long long)dims.hq, (long long)dims.hkv, (long long)dims.nq,
                 (long long)dims.nk, (long long)dims.d, attnc_status_name(status),
                 status == ATTNC_OK ? "" : attnc_last_error());
  return 0;
}
