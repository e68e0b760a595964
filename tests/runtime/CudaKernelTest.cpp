//===- CudaKernelTest.cpp - The cuda target against the reference ---------===//
//
// CudaErrors run everywhere: without a GPU (or driver) every GPU call must
// fail with ATTNC_ERROR_UNSUPPORTED saying what is missing; with one, CPU
// memory in a GPU call, a device that does not exist and unknown device
// types are clear errors. CudaKernel cases need a GPU and are skipped, with
// the runtime's reason, where there is none: the forward (O and the
// log-sum-exp) and the backward (dQ, dK, dV) of every library pattern on
// ragged lengths, several head dimensions, bf16 / fp16 / f32, GQA, fewer
// queries than keys, strided views and rows with one key or none, against
// the double-precision reference of TestSupport (the brute-force oracle's
// mask, softmax in double) on the very values the GPU reads.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/attnc.hpp"
#include "attnc/runtime/Internal.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace attnc::test {
namespace {

bool gpuPresent(std::string &why) {
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  if (attnc_device_check(&dev) == ATTNC_OK)
    return true;
  why = attnc_last_error();
  return false;
}

#define ATTNC_REQUIRE_GPU()                                                                                 \
  do {                                                                                                      \
    std::string why;                                                                                        \
    if (!gpuPresent(why))                                                                                   \
      GTEST_SKIP() << "no GPU on this machine: " << why;                                                    \
  } while (0)

KernelPtr kernelOf(const char *file, const char *source, const std::vector<std::string> &defines) {
  std::string error;
  KernelPtr k = jitCompile(file, source, defines, "fused", jitCacheDir(), error);
  EXPECT_TRUE(k) << error;
  return k;
}

attnc_tensor tensor(void *data, attnc_dtype dtype, std::initializer_list<int64_t> shape) {
  attnc_tensor t{};
  t.data = data;
  t.dtype = dtype;
  int a = 0;
  for (int64_t s : shape)
    t.shape[a++] = s;
  t.strides[3] = 1;
  for (int x = 2; x >= 0; --x)
    t.strides[x] = t.strides[x + 1] * t.shape[x + 1];
  return t;
}

// --- Errors, everywhere -------------------------------------------------------

TEST(CudaErrors, WithoutAGpuEveryCallSaysWhy) {
  std::string why;
  if (gpuPresent(why))
    GTEST_SKIP() << "this machine has a GPU (CudaErrors.CpuMemoryInAGpuCall covers it)";
  KernelPtr k = kernelOf("local", nullptr, {"w=3"});
  ASSERT_TRUE(k);
  std::vector<float> q(1 * 1 * 8 * 16, 0.5f), o(q.size());
  attnc_tensor tq = view(q, 1, 1, 8, 16), to = view(o, 1, 1, 8, 16);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  EXPECT_EQ(attnc_run_forward_on(k.get(), &dev, &tq, &tq, &tq, &to, nullptr, nullptr), ATTNC_ERROR_UNSUPPORTED);
  const std::string message = attnc_last_error();
  EXPECT_FALSE(message.empty());
  EXPECT_TRUE(message.find("driver") != std::string::npos || message.find("GPU") != std::string::npos ||
              message.find("nvcc") != std::string::npos)
      << message;
  EXPECT_EQ(attnc_device_check(&dev), ATTNC_ERROR_UNSUPPORTED);
  // The CPU is unaffected, through the same call.
  attnc_device cpu{ATTNC_DEVICE_CPU, 0, nullptr};
  EXPECT_EQ(attnc_run_forward_on(k.get(), &cpu, &tq, &tq, &tq, &to, nullptr, nullptr), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(attnc_device_check(&cpu), ATTNC_OK);
}

TEST(CudaErrors, UnknownDevicesAndFp16OnTheCpu) {
  KernelPtr k = kernelOf("local", nullptr, {"w=3"});
  ASSERT_TRUE(k);
  std::vector<float> q(8 * 16, 0.5f), o(q.size());
  attnc_tensor tq = view(q, 1, 1, 8, 16), to = view(o, 1, 1, 8, 16);
  attnc_device odd{static_cast<attnc_device_type>(7), 0, nullptr};
  EXPECT_EQ(attnc_run_forward_on(k.get(), &odd, &tq, &tq, &tq, &to, nullptr, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("device type 7"), std::string::npos) << attnc_last_error();
  attnc_device negative{ATTNC_DEVICE_CUDA, -1, nullptr};
  EXPECT_EQ(attnc_device_check(&negative), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_device_check(nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  std::vector<uint16_t> half(8 * 16, 0x3c00);
  attnc_tensor th = tensor(half.data(), ATTNC_DTYPE_F16, {1, 1, 8, 16});
  EXPECT_EQ(attnc_run_forward_on(k.get(), nullptr, &th, &th, &th, &to, nullptr, nullptr), ATTNC_ERROR_DTYPE);
  EXPECT_NE(std::string(attnc_last_error()).find("fp16 on CUDA"), std::string::npos) << attnc_last_error();
}

TEST(CudaErrors, CpuMemoryInAGpuCall) {
  ATTNC_REQUIRE_GPU();
  KernelPtr k = kernelOf("local", nullptr, {"w=3"});
  ASSERT_TRUE(k);
  std::vector<float> q(8 * 16, 0.5f), o(q.size());
  attnc_tensor tq = view(q, 1, 1, 8, 16), to = view(o, 1, 1, 8, 16);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  EXPECT_EQ(attnc_run_forward_on(k.get(), &dev, &tq, &tq, &tq, &to, nullptr, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("not CUDA device memory"), std::string::npos) << attnc_last_error();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  attnc_device missing{ATTNC_DEVICE_CUDA, count, nullptr};
  EXPECT_EQ(attnc_device_check(&missing), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("does not exist"), std::string::npos) << attnc_last_error();
}

// --- attnc::floatToF16 (attnc.hpp; `attnc bench --target cuda --dtype f16`'s inputs) against CUDA's own
// host conversion, bit for bit: a sweep of every float exponent, ties, the subnormal and overflow edges.

TEST(Fp16, FloatToF16EqualsCudasRoundToNearestEven) {
  auto cudaBits = [](float f) {
    const __half h = __float2half_rn(f);
    __half_raw raw = static_cast<__half_raw>(h);
    return static_cast<uint16_t>(raw.x);
  };
  std::vector<uint32_t> bits;
  for (uint64_t x = 0; x <= 0xffffffffull; x += 65521) // every exponent, many mantissas, both signs
    bits.push_back(static_cast<uint32_t>(x));
  for (uint32_t edge : {0x00000000u, 0x80000000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x33800000u, 0x337fffffu,
                        0x387fc000u, 0x387fe000u, 0x387fffffu, 0x38800000u, 0x3f800000u, 0x3f801000u, 0x3f803000u,
                        0x3f800fffu, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477fffffu, 0x7f7fffffu, 0x7f800000u,
                        0xff800000u, 0x00000001u, 0x807fffffu})
    bits.push_back(edge);
  for (uint32_t x : bits) {
    float f;
    std::memcpy(&f, &x, sizeof f);
    const uint16_t got = floatToF16(f), want = cudaBits(f);
    if (std::isnan(f)) {
      EXPECT_EQ(got & 0x7c00u, 0x7c00u) << std::hex << x;
      EXPECT_NE(got & 0x3ffu, 0u) << std::hex << x;
      continue;
    }
    ASSERT_EQ(got, want) << "float bits 0x" << std::hex << x << " (" << f << ")";
  }
}

// --- The tool's GPU memory and timing (Internal.h: `attnc bench --target cuda`) ---

TEST(CudaTools, WithoutAGpuTheySayWhy) {
  std::string why;
  if (gpuPresent(why))
    GTEST_SKIP() << "this machine has a GPU (CudaTools.MemoryCopiesAndEventsOnAGpu covers it)";
  void *ptr = reinterpret_cast<void *>(1);
  EXPECT_EQ(attnc_internal_cuda_alloc(0, 64, &ptr), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_EQ(ptr, nullptr);
  EXPECT_EQ(std::string(attnc_last_error()), why);
  void *timer = nullptr;
  EXPECT_EQ(attnc_internal_cuda_timer(0, &timer, nullptr), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_EQ(timer, nullptr);
  char name[64];
  EXPECT_EQ(attnc_internal_cuda_device(0, name, sizeof name, nullptr, nullptr), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_EQ(attnc_internal_cuda_free(0, nullptr), ATTNC_OK); // nothing to free
  EXPECT_EQ(attnc_internal_cuda_alloc(0, 64, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_internal_cuda_timer(0, nullptr, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_internal_cuda_copy(0, nullptr, name, 8, 1), ATTNC_ERROR_INVALID_ARGUMENT);
}

/// Forcing a kernel variant (what attnc tune and the benchmarks do): the
/// known ones are accepted anywhere (a call says later whether its GPU runs
/// them), others are errors naming the range.
TEST(CudaTools, VariantsOutsideTheirRangeAreErrors) {
  for (const int32_t v : {-1, 0, 1, 2, 3, 4, 5})
    EXPECT_EQ(attnc_internal_cuda_forward_variant(v), ATTNC_OK) << v;
  for (const int32_t v : {-2, 6, 99}) {
    EXPECT_EQ(attnc_internal_cuda_forward_variant(v), ATTNC_ERROR_INVALID_ARGUMENT) << v;
    EXPECT_NE(std::string(attnc_last_error()).find("0-5"), std::string::npos) << attnc_last_error();
  }
  for (const int32_t v : {-1, 0, 1})
    EXPECT_EQ(attnc_internal_cuda_backward_variant(v), ATTNC_OK) << v;
  for (const int32_t v : {-2, 2}) {
    EXPECT_EQ(attnc_internal_cuda_backward_variant(v), ATTNC_ERROR_INVALID_ARGUMENT) << v;
    EXPECT_NE(std::string(attnc_last_error()).find("0 or 1"), std::string::npos) << attnc_last_error();
  }
  EXPECT_EQ(attnc_internal_cuda_forward_variant(-1), ATTNC_OK);
  EXPECT_EQ(attnc_internal_cuda_backward_variant(-1), ATTNC_OK);
}

TEST(CudaTools, MemoryCopiesAndEventsOnAGpu) {
  ATTNC_REQUIRE_GPU();
  char name[256];
  int32_t major = 0, minor = -1;
  ASSERT_EQ(attnc_internal_cuda_device(0, name, sizeof name, &major, &minor), ATTNC_OK) << attnc_last_error();
  EXPECT_GT(std::strlen(name), 0u);
  EXPECT_GE(major, 5);
  EXPECT_GE(minor, 0);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  void *none = nullptr;
  EXPECT_EQ(attnc_internal_cuda_alloc(count, 64, &none), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("does not exist"), std::string::npos) << attnc_last_error();

  // A forward call on memory from the tool's functions, timed by its events,
  // against the same call on the CPU.
  KernelPtr k = kernelOf("local", nullptr, {"w=5"});
  ASSERT_TRUE(k);
  const int64_t n = 100, d = 64, count4 = 2 * n * d;
  std::vector<float> q(count4), kk(count4), v(count4), o(count4), back(count4, -1.0f);
  for (int64_t x = 0; x < count4; ++x) {
    q[static_cast<size_t>(x)] = std::sin(0.37f * static_cast<float>(x));
    kk[static_cast<size_t>(x)] = std::cos(0.11f * static_cast<float>(x));
    v[static_cast<size_t>(x)] = std::sin(0.05f * static_cast<float>(x) + 1.0f);
  }
  const size_t bytes = static_cast<size_t>(count4) * sizeof(float);
  void *dq = nullptr, *dk = nullptr, *dv = nullptr, *dout = nullptr;
  for (void **p : {&dq, &dk, &dv, &dout})
    ASSERT_EQ(attnc_internal_cuda_alloc(0, bytes, p), ATTNC_OK) << attnc_last_error();
  ASSERT_EQ(attnc_internal_cuda_copy(0, dq, q.data(), bytes, 1), ATTNC_OK);
  ASSERT_EQ(attnc_internal_cuda_copy(0, dk, kk.data(), bytes, 1), ATTNC_OK);
  ASSERT_EQ(attnc_internal_cuda_copy(0, dv, v.data(), bytes, 1), ATTNC_OK);
  // A round trip is exact.
  ASSERT_EQ(attnc_internal_cuda_copy(0, back.data(), dq, bytes, 0), ATTNC_OK);
  EXPECT_EQ(back, q);
  attnc_tensor tq = tensor(dq, ATTNC_DTYPE_F32, {1, 2, n, d}), tk = tensor(dk, ATTNC_DTYPE_F32, {1, 2, n, d}),
               tv = tensor(dv, ATTNC_DTYPE_F32, {1, 2, n, d}), to = tensor(dout, ATTNC_DTYPE_F32, {1, 2, n, d});
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  void *timer = nullptr;
  ASSERT_EQ(attnc_internal_cuda_timer(0, &timer, nullptr), ATTNC_OK) << attnc_last_error();
  ASSERT_NE(timer, nullptr);
  ASSERT_EQ(attnc_run_forward_on(k.get(), &dev, &tq, &tk, &tv, &to, nullptr, nullptr), ATTNC_OK) << attnc_last_error();
  float ms = -1;
  ASSERT_EQ(attnc_internal_cuda_timer(0, &timer, &ms), ATTNC_OK) << attnc_last_error();
  EXPECT_EQ(timer, nullptr);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  ASSERT_EQ(attnc_internal_cuda_copy(0, back.data(), dout, bytes, 0), ATTNC_OK);
  attnc_tensor hq = view(q, 1, 2, n, d), hk = view(kk, 1, 2, n, d), hv = view(v, 1, 2, n, d), ho = view(o, 1, 2, n, d);
  ASSERT_EQ(attnc_run_forward_on(k.get(), nullptr, &hq, &hk, &hv, &ho, nullptr, nullptr), ATTNC_OK);
  for (size_t x = 0; x < o.size(); ++x)
    ASSERT_NEAR(back[x], o[x], 2e-2) << x; // (f32 runs on bf16 tensor cores)
  for (void *p : {dq, dk, dv, dout})
    EXPECT_EQ(attnc_internal_cuda_free(0, p), ATTNC_OK);
}

// --- Numerics on a GPU ----------------------------------------------------------

struct GpuCase {
  std::string label;
  const char *file;       ///< library pattern, or null for `source`
  const char *source;
  std::vector<std::string> defines;
  int64_t batch, hq, hkv, nq, nk, d;
  attnc_dtype dtype;
  float inputScale = 1.0f;
  bool strided = false; ///< q, k, v, o as views of [batch, n, heads, d] memory (heads inner)
  /// The forward variant forced (attnc_internal_cuda_forward_variant), -1 none;
  /// 0 forces the backward's variant 0 too (the mma.sync kernels, on any GPU),
  /// 4 (wgmma) the backward's wgmma variant (1).
  int variant = -1;
};

void PrintTo(const GpuCase &c, std::ostream *os) { *os << c.label; }

const char *kGaps = "pattern gaps { attend { j : j < i && i % 3 != 0 } | { j : i % 3 == 1 && j == i } }";

std::vector<GpuCase> gpuCases() {
  struct P {
    const char *name, *file, *source;
    std::vector<std::string> defines;
    int64_t heads;
  };
  const std::vector<P> patterns = {
      {"fixed", "fixed", nullptr, {"l=16", "c=4"}, 2},
      {"strided", "strided", nullptr, {"l=8"}, 2},
      {"local", "local", nullptr, {"w=5"}, 2},
      {"longformer", "longformer", nullptr, {"w=4", "g=2"}, 2},
      {"bigbird", "bigbird", nullptr, {"b=8", "g=1", "r=2"}, 2},
      {"causal", "causal", nullptr, {}, 2},
      {"fixed_multihead", "fixed_multihead", nullptr, {"l=8", "c=2"}, 2},
      {"gaps", nullptr, kGaps, {}, 2}, // rows with no key and with one
  };
  const int64_t ns[] = {1, 7, 100, 1000};
  const int64_t ds[] = {16, 64, 80, 128};
  const attnc_dtype types[] = {ATTNC_DTYPE_BF16, ATTNC_DTYPE_F16, ATTNC_DTYPE_F32};
  const char *typeNames[] = {"f32", "bf16", "f16"};
  std::vector<GpuCase> out;
  for (size_t p = 0; p < patterns.size(); ++p)
    for (size_t x = 0; x < 4; ++x) {
      const P &pat = patterns[p];
      GpuCase c{"", pat.file, pat.source, pat.defines, 1, pat.heads, pat.heads, ns[x], ns[x], ds[(p + x) % 4],
                types[(p + 2 * x) % 3]};
      c.label = std::string(pat.name) + "_n" + std::to_string(c.nq) + "_d" + std::to_string(c.d) + "_" +
                typeNames[c.dtype];
      out.push_back(c);
    }
  auto add = [&](GpuCase c) { out.push_back(std::move(c)); };
  add({"fixed_defaults_n4097_d64_bf16", "fixed", nullptr, {}, 1, 1, 1, 4097, 4097, 64, ATTNC_DTYPE_BF16});
  add({"longformer_chunks_n4097_d64_bf16", "longformer", nullptr, {"w=4", "g=2"}, 1, 1, 1, 4097, 4097, 64,
       ATTNC_DTYPE_BF16});
  add({"strided_defaults_n1000_d128_bf16", "strided", nullptr, {}, 1, 1, 1, 1000, 1000, 128, ATTNC_DTYPE_BF16});
  add({"bigbird_defaults_n1000_d64_f16", "bigbird", nullptr, {}, 1, 1, 1, 1000, 1000, 64, ATTNC_DTYPE_F16});
  add({"gqa_local_h4_kv2_n300_d64_bf16", "local", nullptr, {"w=5"}, 2, 4, 2, 300, 300, 64, ATTNC_DTYPE_BF16});
  add({"mqa_fixed_h4_kv1_n200_d128_f16", "fixed", nullptr, {"l=16", "c=4"}, 1, 4, 1, 200, 200, 128,
       ATTNC_DTYPE_F16});
  add({"decode_causal_nq37_nk300_d64_bf16", "causal", nullptr, {}, 1, 2, 2, 37, 300, 64, ATTNC_DTYPE_BF16});
  add({"decode_strided_nq1_nk129_d64_bf16", "strided", nullptr, {"l=8"}, 1, 2, 2, 1, 129, 64, ATTNC_DTYPE_BF16});
  add({"d256_local_n150_bf16", "local", nullptr, {"w=9"}, 1, 1, 1, 150, 150, 256, ATTNC_DTYPE_BF16});
  add({"d33_fixed_n150_f32", "fixed", nullptr, {"l=16", "c=4"}, 1, 2, 2, 150, 150, 33, ATTNC_DTYPE_F32});
  add({"d200_bigbird_n130_f16", "bigbird", nullptr, {"b=8", "g=1", "r=2"}, 1, 1, 1, 130, 130, 200, ATTNC_DTYPE_F16});
  GpuCase extreme{"extreme_local_n200_d64_f16", "local", nullptr, {"w=20"}, 1, 2, 2, 200, 200, 64, ATTNC_DTYPE_F16};
  extreme.inputScale = 12.0f; // scores up to ~1000: the softmax's max subtraction must hold
  add(extreme);
  GpuCase strided{"strided_views_fixed_n300_d64_bf16", "fixed", nullptr, {"l=16", "c=4"}, 2, 4, 4, 300, 300, 64,
                  ATTNC_DTYPE_BF16};
  strided.strided = true;
  add(strided);
  GpuCase stridedF16 = strided;
  stridedF16.label = "strided_views_local_n100_d40_f16", stridedF16.file = "local", stridedF16.defines = {"w=5"};
  stridedF16.nq = stridedF16.nk = 100, stridedF16.d = 40, stridedF16.dtype = ATTNC_DTYPE_F16;
  add(stridedF16);
  return out;
}

/// Rounds to what the GPU reads (bf16 for f32 inputs too: documented).
float roundAs(float x, attnc_dtype t) {
  if (t == ATTNC_DTYPE_F16)
    return __half2float(__float2half_rn(x));
  return fromBf16(toBf16(x));
}

/// A host array as the device holds it: f32, bf16 or fp16 elements.
std::vector<unsigned char> encode(const std::vector<float> &x, attnc_dtype t) {
  std::vector<unsigned char> out(x.size() * (t == ATTNC_DTYPE_F32 ? 4 : 2));
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == ATTNC_DTYPE_F32) {
      std::memcpy(out.data() + 4 * i, &x[i], 4);
    } else {
      const uint16_t h = t == ATTNC_DTYPE_BF16 ? toBf16(x[i]) : [&] {
        __half v = __float2half_rn(x[i]);
        uint16_t u;
        std::memcpy(&u, &v, 2);
        return u;
      }();
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<float> decode(const std::vector<unsigned char> &bytes, attnc_dtype t) {
  std::vector<float> out(bytes.size() / (t == ATTNC_DTYPE_F32 ? 4 : 2));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == ATTNC_DTYPE_F32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      if (t == ATTNC_DTYPE_BF16) {
        out[i] = fromBf16(h);
      } else {
        __half_raw raw;
        raw.x = h;
        out[i] = __half2float(__half(raw));
      }
    }
  }
  return out;
}

struct Device {
  void *p = nullptr;
  size_t bytes = 0;
  explicit Device(size_t n) : bytes(n) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 16)), cudaSuccess); }
  ~Device() { cudaFree(p); }
  void put(const std::vector<unsigned char> &h) { ASSERT_EQ(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess); }
  std::vector<unsigned char> get() const {
    std::vector<unsigned char> h(bytes);
    EXPECT_EQ(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

/// [batch, heads, n, d] as a tensor over contiguous memory, or (strided) over
/// [batch, n, heads, d] memory as frameworks' transposed views are.
attnc_tensor gpuTensor(void *data, attnc_dtype t, int64_t b, int64_t h, int64_t n, int64_t d, bool strided) {
  attnc_tensor x = tensor(data, t, {b, h, n, d});
  if (strided) {
    x.strides[3] = 1;
    x.strides[1] = d;
    x.strides[2] = h * d;
    x.strides[0] = n * h * d;
  }
  return x;
}

/// Host data in [b, h, n, d] order to the memory order of gpuTensor
/// (`back`: from it).
std::vector<float> relayout(const std::vector<float> &x, int64_t b, int64_t h, int64_t n, int64_t d, bool strided,
                            bool back) {
  if (!strided)
    return x;
  std::vector<float> out(x.size());
  for (int64_t bb = 0; bb < b; ++bb)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < d; ++c) {
          const size_t bhnd = size_t(((bb * h + hh) * n + r) * d + c), bnhd = size_t(((bb * n + r) * h + hh) * d + c);
          out[back ? bhnd : bnhd] = x[back ? bnhd : bhnd];
        }
  return out;
}
std::vector<float> toLayout(const std::vector<float> &x, int64_t b, int64_t h, int64_t n, int64_t d, bool strided) {
  return relayout(x, b, h, n, d, strided, false);
}
std::vector<float> fromLayout(const std::vector<float> &x, int64_t b, int64_t h, int64_t n, int64_t d, bool strided) {
  return relayout(x, b, h, n, d, strided, true);
}

/// Largest |got - want| over the largest |want| (0 when both are 0).
double relativeError(const std::vector<float> &got, const std::vector<double> &want, size_t &worst) {
  double maxWant = 0, maxErr = 0;
  worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    maxWant = std::max(maxWant, std::abs(want[i]));
    const double e = std::isfinite(got[i]) ? std::abs(double(got[i]) - want[i]) : INFINITY;
    if (e > maxErr)
      maxErr = e, worst = i;
  }
  // (a floor for gradients that are 0 in exact arithmetic, as a one-key
  // row's dQ: rounding leaves ~1e-8 there)
  return maxErr / std::max(maxWant, 1e-3);
}

class CudaKernel : public ::testing::TestWithParam<GpuCase> {};

TEST_P(CudaKernel, ForwardAndBackwardMatchTheReference) {
  ATTNC_REQUIRE_GPU();
  const GpuCase &c = GetParam();
  KernelPtr kernel = kernelOf(c.file, c.source, c.defines);
  ASSERT_TRUE(kernel);
  const int64_t B = c.batch, H = c.hq, G = c.hkv, nq = c.nq, nk = c.nk, d = c.d, ratio = H / G;
  // Inputs rounded to what the GPU computes on.
  const attnc_dtype type = c.dtype;
  auto rnd = [&](std::vector<float> x) {
    for (float &v : x)
      v = roundAs(v, type);
    return x;
  };
  std::vector<float> q = rnd(randomFloats(size_t(B * H * nq * d), 11, c.inputScale));
  std::vector<float> k = rnd(randomFloats(size_t(B * G * nk * d), 12, c.inputScale));
  std::vector<float> v = rnd(randomFloats(size_t(B * G * nk * d), 13, 1.0f));
  std::vector<float> dO = rnd(randomFloats(size_t(B * H * nq * d), 14, 1.0f));

  // The reference on nk query positions per head (the first nk - nq rows
  // zero, dO zero there: they add nothing to dK, dV), K and V per query head.
  std::vector<float> qFull(size_t(B * H * nk * d), 0.f), dOFull(qFull.size(), 0.f), kExp(qFull.size()),
      vExp(qFull.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < nq; ++r)
        for (int64_t x = 0; x < d; ++x) {
          qFull[size_t(((b * H + h) * nk + nk - nq + r) * d + x)] = q[size_t(((b * H + h) * nq + r) * d + x)];
          dOFull[size_t(((b * H + h) * nk + nk - nq + r) * d + x)] = dO[size_t(((b * H + h) * nq + r) * d + x)];
        }
      for (int64_t r = 0; r < nk; ++r)
        for (int64_t x = 0; x < d; ++x) {
          kExp[size_t(((b * H + h) * nk + r) * d + x)] = k[size_t(((b * G + h / ratio) * nk + r) * d + x)];
          vExp[size_t(((b * H + h) * nk + r) * d + x)] = v[size_t(((b * G + h / ratio) * nk + r) * d + x)];
        }
    }
  const GradientReference ref =
      c.file ? gradientsFromOracle(patternPath(c.file), c.defines, qFull, kExp, vExp, dOFull, B, H, nk, d)
             : gradientsFromSource(c.source, c.defines, qFull, kExp, vExp, dOFull, B, H, nk, d);
  std::vector<double> oRef(q.size()), dqRef(q.size()), dkRef(k.size(), 0.0), dvRef(v.size(), 0.0),
      lseRef(size_t(B * H * nq));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t r = 0; r < nq; ++r) {
        lseRef[size_t((b * H + h) * nq + r)] = ref.lse[size_t((b * H + h) * nk + nk - nq + r)];
        for (int64_t x = 0; x < d; ++x) {
          oRef[size_t(((b * H + h) * nq + r) * d + x)] = ref.o[size_t(((b * H + h) * nk + nk - nq + r) * d + x)];
          dqRef[size_t(((b * H + h) * nq + r) * d + x)] = ref.dq[size_t(((b * H + h) * nk + nk - nq + r) * d + x)];
        }
      }
      for (int64_t r = 0; r < nk; ++r)
        for (int64_t x = 0; x < d; ++x) {
          dkRef[size_t(((b * G + h / ratio) * nk + r) * d + x)] += ref.dk[size_t(((b * H + h) * nk + r) * d + x)];
          dvRef[size_t(((b * G + h / ratio) * nk + r) * d + x)] += ref.dv[size_t(((b * H + h) * nk + r) * d + x)];
        }
    }

  const size_t es = type == ATTNC_DTYPE_F32 ? 4 : 2;
  Device dq_(q.size() * es), dk_(k.size() * es), dv_(v.size() * es), ddO(dO.size() * es), dO_(q.size() * es),
      dlse(size_t(B * H * nq) * 4), gq(q.size() * es), gk(k.size() * es), gv(v.size() * es);
  dq_.put(encode(toLayout(q, B, H, nq, d, c.strided), type));
  dk_.put(encode(toLayout(k, B, G, nk, d, c.strided), type));
  dv_.put(encode(toLayout(v, B, G, nk, d, c.strided), type));
  ddO.put(encode(toLayout(dO, B, H, nq, d, c.strided), type));
  attnc_tensor tq = gpuTensor(dq_.p, type, B, H, nq, d, c.strided), tk = gpuTensor(dk_.p, type, B, G, nk, d, c.strided),
               tv = gpuTensor(dv_.p, type, B, G, nk, d, c.strided), to = gpuTensor(dO_.p, type, B, H, nq, d, c.strided),
               tdO = gpuTensor(ddO.p, type, B, H, nq, d, c.strided);
  attnc_tensor tlse = tensor(dlse.p, ATTNC_DTYPE_F32, {B, H, nq, 1});
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, stream};
  if (c.variant >= 0) {
    char name[256];
    int32_t major = 0, minor = 0;
    ASSERT_EQ(attnc_internal_cuda_device(0, name, sizeof name, &major, &minor), ATTNC_OK);
    ASSERT_EQ(attnc_internal_cuda_forward_variant(c.variant), ATTNC_OK);
    const attnc_status st = attnc_run_forward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tlse, nullptr);
    const std::string error = st == ATTNC_OK ? "" : attnc_last_error();
    ASSERT_EQ(attnc_internal_cuda_forward_variant(-1), ATTNC_OK);
    if (c.variant >= 4 && !(major == 9 && minor == 0)) { // wgmma: sm_90a code only
      EXPECT_EQ(st, ATTNC_ERROR_UNSUPPORTED);
      EXPECT_NE(error.find("compute capability 9.0"), std::string::npos) << error;
      ASSERT_EQ(attnc_run_forward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tlse, nullptr), ATTNC_OK);
      ASSERT_EQ(attnc_internal_cuda_backward_variant(1), ATTNC_OK);
      attnc_tensor tgq = gpuTensor(gq.p, type, B, H, nq, d, c.strided),
                   tgk = gpuTensor(gk.p, type, B, G, nk, d, c.strided),
                   tgv = gpuTensor(gv.p, type, B, G, nk, d, c.strided);
      EXPECT_EQ(attnc_run_backward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tdO, &tlse, &tgq, &tgk, &tgv, nullptr),
                ATTNC_ERROR_UNSUPPORTED);
      EXPECT_NE(std::string(attnc_last_error()).find("compute capability 9.0"), std::string::npos);
      ASSERT_EQ(attnc_internal_cuda_backward_variant(-1), ATTNC_OK);
      cudaStreamDestroy(stream);
      return;
    }
    ASSERT_EQ(st, ATTNC_OK) << error;
  } else {
    ASSERT_EQ(attnc_run_forward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tlse, nullptr), ATTNC_OK)
        << attnc_last_error();
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  // Tolerances: bf16 keeps 8 bits of mantissa, fp16 11 (P and dS are
  // rounded to the input type for the tensor cores; outputs are rounded).
  const double tol = type == ATTNC_DTYPE_F16 ? 4e-3 : 2.5e-2;
  size_t worst;
  const std::vector<float> o = fromLayout(decode(dO_.get(), type), B, H, nq, d, c.strided);
  const double eo = relativeError(o, oRef, worst);
  EXPECT_LE(eo, tol) << "O at " << worst << ": " << o[worst] << " vs " << oRef[worst];
  std::vector<unsigned char> lseBytes = dlse.get();
  std::vector<float> lse(lseRef.size());
  std::memcpy(lse.data(), lseBytes.data(), lse.size() * 4);
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lseRef[i])) {
      EXPECT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "row " << i << " has no key: lse " << lse[i];
      continue;
    }
    ASSERT_NEAR(lse[i], lseRef[i], 2e-3 * (1 + std::abs(lseRef[i])) + (c.inputScale > 1 ? 0.5 : 0)) << "lse row " << i;
  }

  attnc_tensor tgq = gpuTensor(gq.p, type, B, H, nq, d, c.strided), tgk = gpuTensor(gk.p, type, B, G, nk, d, c.strided),
               tgv = gpuTensor(gv.p, type, B, G, nk, d, c.strided);
  ASSERT_EQ(attnc_internal_cuda_backward_variant(c.variant == 4 ? 1 : c.variant == 0 ? 0 : -1), ATTNC_OK);
  const attnc_status bst =
      attnc_run_backward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tdO, &tlse, &tgq, &tgk, &tgv, nullptr);
  const std::string berror = bst == ATTNC_OK ? "" : attnc_last_error();
  ASSERT_EQ(attnc_internal_cuda_backward_variant(-1), ATTNC_OK);
  ASSERT_EQ(bst, ATTNC_OK) << berror;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  const double gtol = type == ATTNC_DTYPE_F16 ? 1e-2 : 4e-2;
  const std::vector<float> gotQ = fromLayout(decode(gq.get(), type), B, H, nq, d, c.strided);
  const std::vector<float> gotK = fromLayout(decode(gk.get(), type), B, G, nk, d, c.strided);
  const std::vector<float> gotV = fromLayout(decode(gv.get(), type), B, G, nk, d, c.strided);
  EXPECT_LE(relativeError(gotQ, dqRef, worst), gtol) << "dQ at " << worst << ": " << gotQ[worst] << " vs " << dqRef[worst];
  EXPECT_LE(relativeError(gotK, dkRef, worst), gtol) << "dK at " << worst << ": " << gotK[worst] << " vs " << dkRef[worst];
  EXPECT_LE(relativeError(gotV, dvRef, worst), gtol) << "dV at " << worst << ": " << gotV[worst] << " vs " << dvRef[worst];
  // Rows without keys: zero O and dQ exactly; keys no row reaches: zero dK, dV.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < nq; ++r)
        if (std::isinf(lseRef[size_t((b * H + h) * nq + r)]))
          for (int64_t x = 0; x < d; ++x) {
            ASSERT_EQ(o[size_t(((b * H + h) * nq + r) * d + x)], 0.f) << "empty row " << r;
            ASSERT_EQ(gotQ[size_t(((b * H + h) * nq + r) * d + x)], 0.f) << "empty row " << r;
          }
}

/// gpuCases() up to head dimension `maxD` with `variant` forced, labels prefixed.
std::vector<GpuCase> casesWith(int variant, int64_t maxD, const std::string &prefix) {
  std::vector<GpuCase> out;
  for (GpuCase c : gpuCases())
    if (c.d <= maxD) {
      c.variant = variant;
      c.label = prefix + c.label;
      out.push_back(std::move(c));
    }
  return out;
}
auto caseLabel = [](const auto &info) { return info.param.label; };

// The mma.sync kernels (variant 0, forward and backward), which compute
// capability 9.0 does not run by default.
INSTANTIATE_TEST_SUITE_P(Library, CudaKernel, ::testing::ValuesIn(casesWith(0, 256, "")), caseLabel);
// The forward and the backward on wgmma (forward variant 4, backward variant
// 1: d <= 128, every dtype; f32 runs as bf16), on compute capability 9.0;
// elsewhere the calls must say why they cannot run.
INSTANTIATE_TEST_SUITE_P(Wgmma, CudaKernel, ::testing::ValuesIn(casesWith(4, 128, "wgmma_")), caseLabel);
// The forward with 3 key tiles in flight (variant 5, d <= 64), the backward
// the GPU's default.
INSTANTIATE_TEST_SUITE_P(Wgmma3, CudaKernel, ::testing::ValuesIn(casesWith(5, 64, "wgmma3_")), caseLabel);

// Lengths changing between calls of one kernel, and back to one seen before
// (its tables come from the per-(GPU, n) cache): each call right.
TEST(CudaKernelLengths, ManyLengthsOneKernel) {
  ATTNC_REQUIRE_GPU();
  KernelPtr kernel = kernelOf("strided", nullptr, {"l=8"});
  ASSERT_TRUE(kernel);
  for (int64_t n : {64, 65, 33, 64}) {
    const int64_t d = 64;
    std::vector<float> q = randomFloats(size_t(n * d), 5, 1.f);
    for (float &x : q)
      x = roundAs(x, ATTNC_DTYPE_BF16);
    const std::vector<float> ref = referenceFromOracle(patternPath("strided"), {"l=8"}, q, q, q, 1, 1, n, d);
    Device dq(q.size() * 2), dout(q.size() * 2);
    dq.put(encode(q, ATTNC_DTYPE_BF16));
    attnc_tensor tq = tensor(dq.p, ATTNC_DTYPE_BF16, {1, 1, n, d}), to = tensor(dout.p, ATTNC_DTYPE_BF16, {1, 1, n, d});
    attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
    ASSERT_EQ(attnc_run_forward_on(kernel.get(), &dev, &tq, &tq, &tq, &to, nullptr, nullptr), ATTNC_OK)
        << attnc_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> o = decode(dout.get(), ATTNC_DTYPE_BF16);
    std::vector<double> want(ref.begin(), ref.end());
    size_t worst;
    EXPECT_LE(relativeError(o, want, worst), 2.5e-2) << "n=" << n;
  }
}


// A forward and a backward captured into a CUDA graph (global capture mode,
// what torch.cuda.graph uses) after a call at their length, the graph
// replayed on new inputs: the same O, bit for bit, and the same gradients
// (within the atomics' order) as eager calls. strided runs its state
// buffers, local one launch.
TEST(CudaKernel, CapturedCallsReplayAsEagerOnes) {
  ATTNC_REQUIRE_GPU();
  for (const auto &[file, defines] :
       std::vector<std::pair<const char *, std::vector<std::string>>>{{"strided", {"l=8"}}, {"local", {"w=20"}}}) {
    SCOPED_TRACE(file);
    KernelPtr kernel = kernelOf(file, nullptr, defines);
    ASSERT_TRUE(kernel);
    const int64_t h = 2, n = 300, d = 64;
    const size_t bytes = size_t(h * n * d) * 2;
    Device q(bytes), k(bytes), v(bytes), o(bytes), lse(size_t(h * n) * 4), dO(bytes), dq(bytes), dk(bytes), dv(bytes);
    auto fill = [&](Device &x, uint32_t seed) {
      x.put(encode(randomFloats(size_t(h * n * d), seed, 1.f), ATTNC_DTYPE_BF16));
    };
    fill(q, 1), fill(k, 2), fill(v, 3), fill(dO, 4);
    const attnc_tensor tq = tensor(q.p, ATTNC_DTYPE_BF16, {1, h, n, d}),
                       tk = tensor(k.p, ATTNC_DTYPE_BF16, {1, h, n, d}),
                       tv = tensor(v.p, ATTNC_DTYPE_BF16, {1, h, n, d}),
                       tdo = tensor(dO.p, ATTNC_DTYPE_BF16, {1, h, n, d});
    attnc_tensor to = tensor(o.p, ATTNC_DTYPE_BF16, {1, h, n, d}), tl = tensor(lse.p, ATTNC_DTYPE_F32, {1, h, n, 1}),
                 tdq = tensor(dq.p, ATTNC_DTYPE_BF16, {1, h, n, d}), tdk = tensor(dk.p, ATTNC_DTYPE_BF16, {1, h, n, d}),
                 tdv = tensor(dv.p, ATTNC_DTYPE_BF16, {1, h, n, d});
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    attnc_device dev{ATTNC_DEVICE_CUDA, 0, stream};
    auto step = [&] {
      EXPECT_EQ(attnc_run_forward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK)
          << attnc_last_error();
      EXPECT_EQ(attnc_run_backward_on(kernel.get(), &dev, &tq, &tk, &tv, &to, &tdo, &tl, &tdq, &tdk, &tdv, nullptr),
                ATTNC_OK)
          << attnc_last_error();
    };
    step(); // the warm-up at this length
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    step();
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess) << "a call invalidated the capture";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    fill(q, 5), fill(v, 6);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const std::vector<unsigned char> replayO = o.get();
    const std::vector<float> replayDq = decode(dq.get(), ATTNC_DTYPE_BF16);
    step();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(replayO, o.get()) << "the replay's O differs from an eager call's";
    const std::vector<float> eagerDq = decode(dq.get(), ATTNC_DTYPE_BF16);
    size_t worst;
    EXPECT_LE(relativeError(replayDq, std::vector<double>(eagerDq.begin(), eagerDq.end()), worst), 1e-2);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// --- Queries at an offset on a device (ABI 7) -------------------------------------

TEST(CudaErrors, QueriesAtAnOffsetOnADeviceWithoutAGpu) {
  std::string why;
  if (gpuPresent(why))
    GTEST_SKIP() << "this machine has a GPU (CudaKernel.QueriesAtAnOffsetMatchTheWholeCall covers it)";
  KernelPtr k = kernelOf("fixed", nullptr, {"l=8", "c=2"});
  ASSERT_TRUE(k);
  const int64_t nq = 9, nk = 30, d = 16;
  std::vector<float> q(size_t(2 * nq * d)), kv(size_t(2 * nk * d)), o(q.size()), o2(q.size()), lse(size_t(2 * nq)),
      lse2(lse.size());
  for (size_t x = 0; x < q.size(); ++x)
    q[x] = std::sin(0.3f * static_cast<float>(x));
  for (size_t x = 0; x < kv.size(); ++x)
    kv[x] = std::cos(0.7f * static_cast<float>(x));
  attnc_tensor tq = view(q, 1, 2, nq, d), tk = view(kv, 1, 2, nk, d), to = view(o, 1, 2, nq, d),
               to2 = view(o2, 1, 2, nq, d), tl = view(lse, 1, 2, nq, 1), tl2 = view(lse2, 1, 2, nq, 1);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  EXPECT_EQ(attnc_run_forward_at_on(k.get(), &dev, 4, &tq, &tk, &tk, &to, &tl, nullptr), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_EQ(std::string(attnc_last_error()), why);
  std::vector<float> dq(q.size()), dk(kv.size()), dv(kv.size());
  attnc_tensor tdq = view(dq, 1, 2, nq, d), tdk = view(dk, 1, 2, nk, d), tdv = view(dv, 1, 2, nk, d);
  EXPECT_EQ(attnc_run_backward_at_on(k.get(), &dev, 4, &tq, &tk, &tk, &to, &to, &tl, &tdq, &tdk, &tdv, nullptr),
            ATTNC_ERROR_UNSUPPORTED);
  // first_query outside 0 .. nk - nq: a shape error on the CPU.
  for (const int64_t bad : {int64_t{-1}, nk - nq + 1}) {
    EXPECT_EQ(attnc_run_forward_at_on(k.get(), nullptr, bad, &tq, &tk, &tk, &to, &tl, nullptr), ATTNC_ERROR_SHAPE)
        << bad;
    EXPECT_NE(std::string(attnc_last_error()).find("first_query"), std::string::npos) << attnc_last_error();
  }
  // On the CPU (a null device) it is attnc_run_forward_at.
  ASSERT_EQ(attnc_run_forward_at_on(k.get(), nullptr, 4, &tq, &tk, &tk, &to, &tl, nullptr), ATTNC_OK)
      << attnc_last_error();
  ASSERT_EQ(attnc_run_forward_at(k.get(), 4, &tq, &tk, &tk, &to2, &tl2, nullptr), ATTNC_OK);
  EXPECT_EQ(o, o2);
  EXPECT_EQ(lse, lse2);
}

/// A sequence's queries cut into ranges, each run with
/// attnc_run_forward_at_on / attnc_run_backward_at_on (what a rank runs in
/// context parallelism), against one call over all of them on the same GPU:
/// O and lse equal (the same tiles, in the same order), dQ within f32
/// rounding, and the ranges' dK, dV summing to the whole call's.
TEST(CudaKernel, QueriesAtAnOffsetMatchTheWholeCall) {
  ATTNC_REQUIRE_GPU();
  const std::vector<std::pair<const char *, std::vector<std::string>>> patterns = {
      {"fixed", {"l=16", "c=4"}}, {"strided", {"l=8"}}, {"local", {"w=20"}}, {"longformer", {"w=8", "g=2"}},
      {"bigbird", {"b=8", "g=1", "r=2"}}, {"causal", {}}};
  const int64_t h = 2, n = 301, d = 64;
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 1}, {1, 100}, {100, 230}, {230, 301}};
  std::vector<float> q(size_t(h * n * d)), kk(q.size()), v(q.size()), dO(q.size());
  for (size_t x = 0; x < q.size(); ++x) {
    q[x] = std::sin(0.61f * static_cast<float>(x));
    kk[x] = std::cos(0.37f * static_cast<float>(x) + 0.5f);
    v[x] = std::sin(0.13f * static_cast<float>(x) + 1.0f);
    dO[x] = std::cos(0.23f * static_cast<float>(x));
  }
  const size_t bytes = q.size() * sizeof(float);
  auto up = [&](const std::vector<float> &x) {
    auto dev = std::make_unique<Device>(bytes);
    EXPECT_EQ(cudaMemcpy(dev->p, x.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return dev;
  };
  auto down = [](const Device &x) {
    std::vector<float> out(x.bytes / sizeof(float));
    EXPECT_EQ(cudaMemcpy(out.data(), x.p, x.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  };
  auto gq = up(q), gk = up(kk), gv = up(v), gdo = up(dO);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  // Rows [r0, r1) of every head of a [1, h, n, d] (or lse [1, h, n, 1]) buffer.
  auto rows = [&](void *p, int64_t r0, int64_t r1, int64_t cols) {
    attnc_tensor t = tensor(static_cast<float *>(p) + r0 * cols, ATTNC_DTYPE_F32, {1, h, r1 - r0, cols});
    t.strides[1] = n * cols;
    return t;
  };
  for (const auto &[pattern, defines] : patterns) {
    SCOPED_TRACE(pattern);
    KernelPtr k = kernelOf(pattern, nullptr, defines);
    ASSERT_TRUE(k);
    // The whole call.
    Device o(bytes), lse(size_t(h * n) * 4), dq(bytes), dk(bytes), dv(bytes);
    attnc_tensor tq = rows(gq->p, 0, n, d), tk = rows(gk->p, 0, n, d), tv = rows(gv->p, 0, n, d),
                 tdo = rows(gdo->p, 0, n, d), to = rows(o.p, 0, n, d), tl = rows(lse.p, 0, n, 1),
                 tdq = rows(dq.p, 0, n, d), tdk = rows(dk.p, 0, n, d), tdv = rows(dv.p, 0, n, d);
    ASSERT_EQ(attnc_run_forward_on(k.get(), &dev, &tq, &tk, &tv, &to, &tl, nullptr), ATTNC_OK) << attnc_last_error();
    ASSERT_EQ(attnc_run_backward_on(k.get(), &dev, &tq, &tk, &tv, &to, &tdo, &tl, &tdq, &tdk, &tdv, nullptr), ATTNC_OK)
        << attnc_last_error();
    // The ranges: O, lse and dQ into their rows of buffers of n rows (which
    // start as garbage), each range's dK and dV into buffers of their own.
    Device ro(bytes), rl(size_t(h * n) * 4), rdq(bytes);
    for (Device *x : {&ro, &rl, &rdq})
      ASSERT_EQ(cudaMemset(x->p, 0x7f, x->bytes), cudaSuccess);
    std::vector<double> dkSum(q.size(), 0.0), dvSum(q.size(), 0.0);
    for (const auto &[r0, r1] : ranges) {
      Device pdk(bytes), pdv(bytes);
      attnc_tensor sq = rows(gq->p, r0, r1, d), sdo = rows(gdo->p, r0, r1, d), so = rows(ro.p, r0, r1, d),
                   sl = rows(rl.p, r0, r1, 1), sdq = rows(rdq.p, r0, r1, d), sdk = rows(pdk.p, 0, n, d),
                   sdv = rows(pdv.p, 0, n, d);
      ASSERT_EQ(attnc_run_forward_at_on(k.get(), &dev, r0, &sq, &tk, &tv, &so, &sl, nullptr), ATTNC_OK)
          << attnc_last_error();
      ASSERT_EQ(attnc_run_backward_at_on(k.get(), &dev, r0, &sq, &tk, &tv, &so, &sdo, &sl, &sdq, &sdk, &sdv, nullptr),
                ATTNC_OK)
          << attnc_last_error();
      const std::vector<float> a = down(pdk), b = down(pdv);
      for (size_t x = 0; x < a.size(); ++x)
        dkSum[x] += a[x], dvSum[x] += b[x];
    }
    EXPECT_EQ(down(ro), down(o)) << "O";
    EXPECT_EQ(down(rl), down(lse)) << "lse";
    size_t worst;
    const std::vector<float> wantDq = down(dq), wantDk = down(dk), wantDv = down(dv);
    EXPECT_LE(relativeError(down(rdq), std::vector<double>(wantDq.begin(), wantDq.end()), worst), 1e-5)
        << "dQ " << worst;
    std::vector<float> gotDk(dkSum.begin(), dkSum.end()), gotDv(dvSum.begin(), dvSum.end());
    EXPECT_LE(relativeError(gotDk, std::vector<double>(wantDk.begin(), wantDk.end()), worst), 1e-5) << "dK " << worst;
    EXPECT_LE(relativeError(gotDv, std::vector<double>(wantDv.begin(), wantDv.end()), worst), 1e-5) << "dV " << worst;
  }
}

// --- Variable-length batches on a device (ABI 6) ------------------------------------

/// A varlen batch of `lengths` (queries, keys) per sequence: offsets and sizes.
struct VarlenCase {
  std::vector<std::pair<int32_t, int32_t>> lengths;
  std::vector<int32_t> cuQ{0}, cuK{0};
  explicit VarlenCase(std::vector<std::pair<int32_t, int32_t>> l) : lengths(std::move(l)) {
    for (const auto &[nq, nk] : lengths) {
      cuQ.push_back(cuQ.back() + nq);
      cuK.push_back(cuK.back() + nk);
    }
  }
  attnc_varlen args() const { return {cuQ.data(), cuK.data(), static_cast<int64_t>(lengths.size())}; }
};

TEST(CudaErrors, VarlenOnADeviceWithoutAGpu) {
  std::string why;
  if (gpuPresent(why))
    GTEST_SKIP() << "this machine has a GPU (CudaKernel.VarlenMatchesTheCpu covers it)";
  KernelPtr k = kernelOf("local", nullptr, {"w=3"});
  ASSERT_TRUE(k);
  const VarlenCase c({{3, 5}, {4, 4}});
  const attnc_varlen vl = c.args();
  std::vector<float> q(2 * 7 * 16, 0.25f), kv(2 * 9 * 16, 0.5f), o(q.size()), o2(q.size());
  attnc_tensor tq = view(q, 1, 2, 7, 16), tk = view(kv, 1, 2, 9, 16), to = view(o, 1, 2, 7, 16),
               to2 = view(o2, 1, 2, 7, 16);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  EXPECT_EQ(attnc_run_varlen_on(k.get(), &dev, &tq, &tk, &tk, &to, nullptr, &vl, nullptr), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_EQ(std::string(attnc_last_error()), why);
  EXPECT_EQ(attnc_run_varlen_on(k.get(), nullptr, &tq, &tk, &tk, &to, nullptr, nullptr, nullptr),
            ATTNC_ERROR_INVALID_ARGUMENT);
  // On the CPU (a null device) it is attnc_run_varlen.
  ASSERT_EQ(attnc_run_varlen_on(k.get(), nullptr, &tq, &tk, &tk, &to, nullptr, &vl, nullptr), ATTNC_OK)
      << attnc_last_error();
  ASSERT_EQ(attnc_run_varlen(k.get(), &tq, &tk, &tk, &to2, nullptr, &vl, nullptr), ATTNC_OK);
  EXPECT_EQ(o, o2);
  std::vector<float> lse(2 * 7), dq(q.size()), dk(kv.size()), dv(kv.size());
  attnc_tensor tl = view(lse, 1, 2, 7, 1), tdq = view(dq, 1, 2, 7, 16), tdk = view(dk, 1, 2, 9, 16),
               tdv = view(dv, 1, 2, 9, 16);
  EXPECT_EQ(attnc_run_backward_varlen_on(k.get(), &dev, &tq, &tk, &tk, &to, &to, &tl, &tdq, &tdk, &tdv, &vl, nullptr),
            ATTNC_ERROR_UNSUPPORTED);
  EXPECT_EQ(attnc_run_backward_varlen_on(k.get(), &dev, &tq, &tk, &tk, &to, &to, &tl, &tdq, &tdk, &tdv, nullptr,
                                         nullptr),
            ATTNC_ERROR_INVALID_ARGUMENT);
}

/// A varlen batch on the GPU (sequences with no keys, keys but no queries,
/// one query, fewer queries than keys, grouped heads) against the same
/// batch on the CPU: O, lse, and the gradients (dK, dV of keys no query
/// reads exactly zero, over memory that held garbage).
/// `count` floats from the device.
std::vector<float> down(const Device &x, size_t count) {
  std::vector<float> h(count);
  EXPECT_EQ(cudaMemcpy(h.data(), x.p, count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

/// Every |got - want| within tol times the largest |want| (at least 1).
void near(const std::vector<float> &got, const std::vector<float> &want, double tol, const char *what) {
  double scale = 1;
  for (float w : want)
    scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t x = 0; x < want.size(); ++x)
    ASSERT_NEAR(got[x], want[x], tol * scale) << what << " at " << x;
}

TEST(CudaKernel, VarlenMatchesTheCpu) {
  ATTNC_REQUIRE_GPU();
  for (const char *pattern : {"local", "fixed", "bigbird"}) {
    SCOPED_TRACE(pattern);
    const std::vector<std::string> defines =
        std::string(pattern) == "local" ? std::vector<std::string>{"w=20"}
        : std::string(pattern) == "fixed" ? std::vector<std::string>{"l=16", "c=4"}
                                          : std::vector<std::string>{"b=8", "g=1", "r=2"};
    KernelPtr k = kernelOf(pattern, nullptr, defines);
    ASSERT_TRUE(k);
    const VarlenCase c({{0, 0}, {0, 37}, {1, 1}, {100, 130}, {65, 65}, {1, 70}});
    const attnc_varlen vl = c.args();
    const int64_t hq = 4, hkv = 2, d = 64, tq = c.cuQ.back(), tk = c.cuK.back();
    std::vector<float> q(static_cast<size_t>(hq * tq * d)), kk(static_cast<size_t>(hkv * tk * d)), v(kk.size()),
        dO(q.size());
    for (size_t x = 0; x < q.size(); ++x) {
      q[x] = std::sin(0.61f * static_cast<float>(x));
      dO[x] = std::cos(0.23f * static_cast<float>(x));
    }
    for (size_t x = 0; x < kk.size(); ++x) {
      kk[x] = std::cos(0.37f * static_cast<float>(x) + 0.5f);
      v[x] = std::sin(0.13f * static_cast<float>(x) + 1.0f);
    }
    // The CPU's answer.
    std::vector<float> o(q.size()), lse(static_cast<size_t>(hq * tq)), dq(q.size()), dk(kk.size()), dv(kk.size());
    attnc_tensor hq_ = view(q, 1, hq, tq, d), hk = view(kk, 1, hkv, tk, d), hv = view(v, 1, hkv, tk, d),
                 ho = view(o, 1, hq, tq, d), hl = view(lse, 1, hq, tq, 1), hdo = view(dO, 1, hq, tq, d),
                 hdq = view(dq, 1, hq, tq, d), hdk = view(dk, 1, hkv, tk, d), hdv = view(dv, 1, hkv, tk, d);
    ASSERT_EQ(attnc_run_varlen(k.get(), &hq_, &hk, &hv, &ho, &hl, &vl, nullptr), ATTNC_OK) << attnc_last_error();
    ASSERT_EQ(attnc_run_backward_varlen(k.get(), &hq_, &hk, &hv, &ho, &hdo, &hl, &hdq, &hdk, &hdv, &vl, nullptr),
              ATTNC_OK)
        << attnc_last_error();
    // The GPU's, on f32 tensors (bf16 tensor cores inside).
    auto bytesOf = [](const std::vector<float> &x) { return x.size() * sizeof(float); };
    auto up = [&](const std::vector<float> &x) {
      auto dev = std::make_unique<Device>(bytesOf(x));
      EXPECT_EQ(cudaMemcpy(dev->p, x.data(), bytesOf(x), cudaMemcpyHostToDevice), cudaSuccess);
      return dev;
    };
    auto gq = up(q), gk = up(kk), gv = up(v), gdo = up(dO);
    Device go(bytesOf(o)), gl(bytesOf(lse)), gdq(bytesOf(dq)), gdk(bytesOf(dk)), gdv(bytesOf(dv));
    for (Device *x : {&go, &gl, &gdq, &gdk, &gdv})
      ASSERT_EQ(cudaMemset(x->p, 0x7f, x->bytes), cudaSuccess); // garbage: every element must be written
    attnc_tensor tq4 = tensor(gq->p, ATTNC_DTYPE_F32, {1, hq, tq, d}), tk4 = tensor(gk->p, ATTNC_DTYPE_F32, {1, hkv, tk, d}),
                 tv4 = tensor(gv->p, ATTNC_DTYPE_F32, {1, hkv, tk, d}), to4 = tensor(go.p, ATTNC_DTYPE_F32, {1, hq, tq, d}),
                 tl4 = tensor(gl.p, ATTNC_DTYPE_F32, {1, hq, tq, 1}), tdo4 = tensor(gdo->p, ATTNC_DTYPE_F32, {1, hq, tq, d}),
                 tdq4 = tensor(gdq.p, ATTNC_DTYPE_F32, {1, hq, tq, d}),
                 tdk4 = tensor(gdk.p, ATTNC_DTYPE_F32, {1, hkv, tk, d}),
                 tdv4 = tensor(gdv.p, ATTNC_DTYPE_F32, {1, hkv, tk, d});
    attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
    ASSERT_EQ(attnc_run_varlen_on(k.get(), &dev, &tq4, &tk4, &tv4, &to4, &tl4, &vl, nullptr), ATTNC_OK)
        << attnc_last_error();
    ASSERT_EQ(attnc_run_backward_varlen_on(k.get(), &dev, &tq4, &tk4, &tv4, &to4, &tdo4, &tl4, &tdq4, &tdk4, &tdv4,
                                           &vl, nullptr),
              ATTNC_OK)
        << attnc_last_error();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    near(down(go, o.size()), o, 2e-2, "O");
    near(down(gl, lse.size()), lse, 2e-2, "lse");
    near(down(gdq, dq.size()), dq, 3e-2, "dQ");
    const std::vector<float> gotDk = down(gdk, dk.size()), gotDv = down(gdv, dv.size());
    near(gotDk, dk, 3e-2, "dK");
    near(gotDv, dv, 3e-2, "dV");
    // Sequence 1 (37 keys, no queries): its dK and dV rows are exactly zero.
    for (int64_t g = 0; g < hkv; ++g)
      for (int64_t row = c.cuK[1]; row < c.cuK[2]; ++row)
        for (int64_t col = 0; col < d; ++col) {
          const size_t x = static_cast<size_t>((g * tk + row) * d + col);
          ASSERT_EQ(gotDk[x], 0.0f) << "dK row " << row;
          ASSERT_EQ(gotDv[x], 0.0f) << "dV row " << row;
        }
  }
}

// --- Score modifiers on a GPU -------------------------------------------------------

/// One call of `k` on the GPU (f32 tensors: bf16 tensor cores inside) and on the CPU, on the same
/// bf16-rounded Q, K, V and dO ([B, H, nq, d], K and V [B, G, nk, d]), with the inputs each gives
/// (`host`, `gpu`: the same values in each's memory) and the float inputs' gradients they ask for,
/// the GPU's kernels forced to `variant` (-1: the defaults): O, lse, dQ, dK and dV compared.
void expectGpuMatchesCpu(const attnc_kernel *k, int64_t B, int64_t H, int64_t G, int64_t nq, int64_t nk, int64_t d,
                         float inputScale, int variant, const std::vector<attnc_input> &hostIn,
                         const std::vector<attnc_input> &hostGrad, const std::vector<attnc_input> &gpuIn,
                         const std::vector<attnc_input> &gpuGrad) {
  auto rounded = [&](size_t count, uint64_t seed, float scale) {
    std::vector<float> x = randomFloats(count, seed, scale);
    for (float &e : x)
      e = fromBf16(toBf16(e));
    return x;
  };
  std::vector<float> q = rounded(size_t(B * H * nq * d), 31, inputScale), kk = rounded(size_t(B * G * nk * d), 32, inputScale),
                     v = rounded(size_t(B * G * nk * d), 33, 1.0f), dO = rounded(size_t(B * H * nq * d), 34, 1.0f);
  // The CPU's answer.
  std::vector<float> o(q.size()), lse(size_t(B * H * nq)), dq(q.size()), dk(kk.size()), dv(kk.size());
  attnc_tensor hq_ = view(q, B, H, nq, d), hk = view(kk, B, G, nk, d), hv = view(v, B, G, nk, d),
               ho = view(o, B, H, nq, d), hl = view(lse, B, H, nq, 1), hdo = view(dO, B, H, nq, d),
               hdq = view(dq, B, H, nq, d), hdk = view(dk, B, G, nk, d), hdv = view(dv, B, G, nk, d);
  attnc_call call;
  attnc_call_init(&call);
  call.q = &hq_, call.k = &hk, call.v = &hv, call.o = &ho, call.lse = &hl;
  call.inputs = hostIn.data(), call.num_inputs = int64_t(hostIn.size());
  ASSERT_EQ(attnc_forward(k, &call), ATTNC_OK) << attnc_last_error();
  call.d_o = &hdo, call.d_q = &hdq, call.d_k = &hdk, call.d_v = &hdv;
  call.d_inputs = hostGrad.data(), call.num_d_inputs = int64_t(hostGrad.size());
  ASSERT_EQ(attnc_backward(k, &call), ATTNC_OK) << attnc_last_error();
  // The GPU's.
  auto up = [&](const std::vector<float> &x) {
    auto dev = std::make_unique<Device>(x.size() * 4);
    EXPECT_EQ(cudaMemcpy(dev->p, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    return dev;
  };
  auto gq = up(q), gk = up(kk), gv = up(v), gdo = up(dO);
  Device go(o.size() * 4), gl(lse.size() * 4), gdq(dq.size() * 4), gdk(dk.size() * 4), gdv(dv.size() * 4);
  for (Device *x : {&go, &gl, &gdq, &gdk, &gdv})
    ASSERT_EQ(cudaMemset(x->p, 0x7f, x->bytes), cudaSuccess); // garbage: every element must be written
  attnc_tensor tq = tensor(gq->p, ATTNC_DTYPE_F32, {B, H, nq, d}), tk = tensor(gk->p, ATTNC_DTYPE_F32, {B, G, nk, d}),
               tv = tensor(gv->p, ATTNC_DTYPE_F32, {B, G, nk, d}), to = tensor(go.p, ATTNC_DTYPE_F32, {B, H, nq, d}),
               tl = tensor(gl.p, ATTNC_DTYPE_F32, {B, H, nq, 1}), tdo = tensor(gdo->p, ATTNC_DTYPE_F32, {B, H, nq, d}),
               tdq = tensor(gdq.p, ATTNC_DTYPE_F32, {B, H, nq, d}), tdk = tensor(gdk.p, ATTNC_DTYPE_F32, {B, G, nk, d}),
               tdv = tensor(gdv.p, ATTNC_DTYPE_F32, {B, G, nk, d});
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  attnc_call gcall;
  attnc_call_init(&gcall);
  gcall.q = &tq, gcall.k = &tk, gcall.v = &tv, gcall.o = &to, gcall.lse = &tl, gcall.device = &dev;
  gcall.inputs = gpuIn.data(), gcall.num_inputs = int64_t(gpuIn.size());
  ASSERT_EQ(attnc_internal_cuda_forward_variant(variant), ATTNC_OK);
  ASSERT_EQ(attnc_internal_cuda_backward_variant(variant), ATTNC_OK);
  const attnc_status fst = attnc_forward(k, &gcall);
  const std::string ferror = fst == ATTNC_OK ? "" : attnc_last_error();
  gcall.d_o = &tdo, gcall.d_q = &tdq, gcall.d_k = &tdk, gcall.d_v = &tdv;
  gcall.d_inputs = gpuGrad.data(), gcall.num_d_inputs = int64_t(gpuGrad.size());
  const attnc_status bst = fst == ATTNC_OK ? attnc_backward(k, &gcall) : fst;
  const std::string berror = bst == ATTNC_OK ? "" : attnc_last_error();
  attnc_internal_cuda_forward_variant(-1);
  attnc_internal_cuda_backward_variant(-1);
  ASSERT_EQ(fst, ATTNC_OK) << ferror;
  ASSERT_EQ(bst, ATTNC_OK) << berror;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  near(down(go, o.size()), o, 2e-2, "O");
  const std::vector<float> gotLse = down(gl, lse.size());
  for (size_t x = 0; x < lse.size(); ++x)
    if (std::isinf(lse[x]))
      ASSERT_TRUE(std::isinf(gotLse[x]) && gotLse[x] < 0) << "row " << x << " has no key";
    else
      ASSERT_NEAR(gotLse[x], lse[x], 2e-2 * (1 + std::abs(lse[x]))) << "lse row " << x;
  near(down(gdq, dq.size()), dq, 3e-2, "dQ");
  near(down(gdk, dk.size()), dk, 3e-2, "dK");
  near(down(gdv, dv.size()), dv, 3e-2, "dV");
}

/// Score modifiers on the GPU against the CPU's fused backend (itself
/// checked against the double-precision definition in ScoreModifierTest) on
/// the same bf16-rounded inputs: a soft cap, ALiBi's slopes, a sink, and
/// combinations, with the kernels of the default variants and the mma.sync
/// ones: O, lse, dQ, dK, dV and the per-head inputs' gradients.
TEST(CudaKernel, ScoreModifiersMatchTheCpu) {
  ATTNC_REQUIRE_GPU();
  struct Case {
    const char *label, *file, *source;
    std::vector<std::string> defines;
    int64_t hq, hkv, nq, nk, d;
    float inputScale;
    attnc_dtype floatType; ///< of the per-head inputs on the device
    int64_t floatStride;
  };
  const char *both = "pattern both { param w = 32  input z : float[heads]  causal  attend { j : i - j < w }  "
                     "score 30 * tanh(s / 30)  sink z[h] }";
  const char *gapsSink = "pattern gaps_sink { input z : float[heads]  attend { j : j < i && i % 3 != 0 } | "
                         "{ j : i % 3 == 1 && j == i }  sink z[h] }";
  const char *alibiSink = "pattern alibi_sink { input slope : float[heads]  input z : float[heads]  "
                          "attend { j : j <= i && i - j < 40 } | { j : j < 4 }  score s - (i - j) * slope[h]  "
                          "sink z[h] }";
  const Case cases[] = {
      {"capped_fixed", "capped_fixed", nullptr, {"l=16", "c=4"}, 2, 2, 300, 300, 64, 3.0f, ATTNC_DTYPE_F32, 1},
      {"capped_fixed_gqa_decode_d128", "capped_fixed", nullptr, {"l=16", "c=4"}, 4, 2, 37, 300, 128, 3.0f,
       ATTNC_DTYPE_F32, 1},
      {"sink_window", "sink_window", nullptr, {"w=16"}, 4, 2, 300, 300, 64, 1.0f, ATTNC_DTYPE_F32, 1},
      {"sink_window_bf16_logits", "sink_window", nullptr, {"w=16"}, 4, 4, 130, 130, 80, 1.0f, ATTNC_DTYPE_BF16, 2},
      {"cap_and_sink", nullptr, both, {}, 2, 1, 200, 200, 64, 3.0f, ATTNC_DTYPE_F32, 1},
      {"sink_rows_without_keys", nullptr, gapsSink, {}, 2, 2, 100, 100, 64, 1.0f, ATTNC_DTYPE_F32, 1},
      {"alibi_local", "alibi_local", nullptr, {"w=20"}, 4, 2, 300, 300, 64, 1.0f, ATTNC_DTYPE_F32, 1},
      {"alibi_local_d128_bf16_slopes_decode", "alibi_local", nullptr, {"w=20"}, 4, 4, 50, 1000, 128, 1.0f,
       ATTNC_DTYPE_BF16, 3},
      {"alibi_global_keys_and_sink", nullptr, alibiSink, {}, 4, 2, 500, 500, 64, 1.0f, ATTNC_DTYPE_F32, 1},
  };
  // Per-head values by input name: sink logits of both signs, ALiBi's geometric slopes.
  auto valuesOf = [](const std::string &name, int64_t heads) {
    std::vector<float> x(static_cast<size_t>(heads));
    for (int64_t h = 0; h < heads; ++h)
      x[size_t(h)] = fromBf16(toBf16(name == "z" ? std::vector<float>{0.5f, 2.5f, -3.0f, 8.0f}[size_t(h % 4)]
                                                 : std::ldexp(1.0f, -int(h + 1))));
    return x;
  };
  for (const Case &c : cases)
    for (int variant : {-1, 0}) {
      SCOPED_TRACE(std::string(c.label) + (variant < 0 ? ", default kernels" : ", mma.sync kernels"));
      KernelPtr k = kernelOf(c.file, c.source, c.defines);
      ASSERT_TRUE(k);
      const int64_t H = c.hq, G = c.hkv, nq = c.nq, nk = c.nk, d = c.d;
      // The per-head inputs: values and gradients on the host (f32, contiguous) and on the device (the
      // case's dtype and stride; gradients f32).
      struct PerHead {
        std::string name;
        std::vector<float> values, grad;
        std::unique_ptr<Device> gpu, gpuGrad;
      };
      std::vector<PerHead> floats(static_cast<size_t>(attnc_kernel_num_inputs(k.get())));
      std::vector<attnc_input> hostIn, hostGrad, gpuIn, gpuGrad;
      for (size_t x = 0; x < floats.size(); ++x) {
        attnc_input_info info{};
        info.size = sizeof info;
        ASSERT_EQ(attnc_kernel_input_info(k.get(), int64_t(x), nk, H, &info), ATTNC_OK);
        PerHead &f = floats[x];
        f.name = info.name;
        f.values = valuesOf(f.name, H);
        f.grad.assign(size_t(H), 0.f);
        std::vector<float> laid(size_t(H * c.floatStride), 0.f);
        for (int64_t h = 0; h < H; ++h)
          laid[size_t(h * c.floatStride)] = f.values[size_t(h)];
        f.gpu = std::make_unique<Device>(laid.size() * (c.floatType == ATTNC_DTYPE_F32 ? 4 : 2));
        f.gpu->put(encode(laid, c.floatType));
        f.gpuGrad = std::make_unique<Device>(size_t(H) * 4);
        ASSERT_EQ(cudaMemset(f.gpuGrad->p, 0x7f, f.gpuGrad->bytes), cudaSuccess);
        attnc_tensor onGpu = tensor(f.gpu->p, c.floatType, {H, 1, 1, 1});
        onGpu.strides[0] = c.floatStride;
        hostIn.push_back({f.name.c_str(), tensor(f.values.data(), ATTNC_DTYPE_F32, {H, 1, 1, 1})});
        hostGrad.push_back({f.name.c_str(), tensor(f.grad.data(), ATTNC_DTYPE_F32, {H, 1, 1, 1})});
        gpuIn.push_back({f.name.c_str(), onGpu});
        gpuGrad.push_back({f.name.c_str(), tensor(f.gpuGrad->p, ATTNC_DTYPE_F32, {H, 1, 1, 1})});
      }
      expectGpuMatchesCpu(k.get(), 1, H, G, nq, nk, d, c.inputScale, variant, hostIn, hostGrad, gpuIn, gpuGrad);
      for (const PerHead &f : floats)
        near(down(*f.gpuGrad, f.grad.size()), f.grad, 3e-2, ("d_" + f.name).c_str());
    }
}

/// Patterns that read data on the GPU (each slice's tables built from its inputs at the call) against the
/// CPU's fused backend on the same bf16-rounded values: LSH's two rounds (inputs per batch entry), documents,
/// selected blocks with -1 entries and selected tokens (shared by the batch), GQA, the default and the
/// mma.sync kernels: O, lse, dQ, dK, dV.
TEST(CudaKernel, DataPatternsMatchTheCpu) {
  ATTNC_REQUIRE_GPU();
  const int64_t B = 2, H = 4, G = 2, n = 300, d = 64;
  struct Case {
    const char *file;
    std::vector<std::string> defines;
    /// (name, batch entries it has, rows, columns, values drawn in [lo, hi])
    std::vector<std::tuple<const char *, int64_t, int64_t, int64_t, int32_t, int32_t>> inputs;
  };
  const Case cases[] = {
      {"lsh", {}, {{"b0", B, n, 1, 0, 7}, {"b1", B, n, 1, 0, 7}}},
      {"document", {}, {{"doc", B, n, 1, 0, 3}}},
      {"nsa", {"B=16", "k=3", "w=8"}, {{"sel", 1, (n + 15) / 16, 3, -1, (n + 15) / 16 - 1}}},
      {"topk", {"k=5", "w=4"}, {{"top", 1, n, 5, -1, n - 1}}},
  };
  std::mt19937 rng(3);
  for (const Case &c : cases)
    for (int variant : {-1, 0}) {
      SCOPED_TRACE(std::string(c.file) + (variant < 0 ? ", default kernels" : ", mma.sync kernels"));
      KernelPtr k = kernelOf(c.file, nullptr, c.defines);
      ASSERT_TRUE(k);
      std::vector<std::vector<int32_t>> values;
      std::vector<std::unique_ptr<Device>> gpuValues;
      std::vector<attnc_input> hostIn, gpuIn;
      for (const auto &[name, batch, rows, cols, lo, hi] : c.inputs) {
        std::uniform_int_distribution<int32_t> pick(lo, hi);
        values.emplace_back(static_cast<size_t>(batch * rows * cols));
        for (int32_t &x : values.back())
          x = pick(rng);
        if (std::string(name) == "doc") // documents as runs of positions
          std::sort(values.back().begin(), values.back().begin() + n), std::sort(values.back().begin() + n, values.back().end());
      }
      for (size_t x = 0; x < values.size(); ++x) {
        const auto &[name, batch, rows, cols, lo, hi] = c.inputs[x];
        gpuValues.push_back(std::make_unique<Device>(values[x].size() * 4));
        ASSERT_EQ(cudaMemcpy(gpuValues.back()->p, values[x].data(), values[x].size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
        hostIn.push_back({name, tensor(values[x].data(), ATTNC_DTYPE_I32, {batch, 1, rows, cols})});
        gpuIn.push_back({name, tensor(gpuValues.back()->p, ATTNC_DTYPE_I32, {batch, 1, rows, cols})});
      }
      expectGpuMatchesCpu(k.get(), B, H, G, n, n, d, 1.0f, variant, hostIn, {}, gpuIn, {});
    }
}

} // namespace
} // namespace attnc::test
