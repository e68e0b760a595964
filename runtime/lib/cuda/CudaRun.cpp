//===- CudaRun.cpp - Running a kernel's pattern on a CUDA GPU -------------===//
#include "CudaRun.h"

#include "../CallInputs.h"
#include "attnc/support/Check.h"
#include "../ScoreProgram.h"
#include "../backends/Backend.h"
#include "CudaArgs.h"
#include "CudaDriver.h"
#include "CudaPlan.h"

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#if ATTNC_RUNTIME_CUDA
// The fatbin nvcc built from AttentionKernels.cu, embedded by CudaFatbin.S.
extern "C" const unsigned char attnc_cuda_fatbin[];
#endif

namespace attnc::rt::cuda {

bool compiledIn() { return ATTNC_RUNTIME_CUDA != 0; }

namespace {

// --- The module of kernels, loaded once per device --------------------------

/// Index of a dtype among the kernels' element types (bf16 0, fp16 1).
int typeIndex(attnc_dtype t) { return t == ATTNC_DTYPE_F16 ? 1 : 0; }
int dpIndex(int dp) { return dp == 64 ? 0 : dp == 128 ? 1 : 2; }

/// The kernels' families (Modifiers::family): their names' infixes.
const char *const kFamilies[3] = {"", "cap_", "alibi_"};

struct Module {
  /// [family][dtype][DP]: the forward and backward kernels of each family (plain, capped, alibi).
  CUfunction fwd[3][2][3] = {}, bwd[3][2][3] = {};
  CUfunction copy = nullptr, delta = nullptr, sinkGrad = nullptr;
  /// The bf16 d <= 64 forward kernel's variants 1-3 ([0] unused: the default).
  CUfunction fwdVariants[4] = {};
  /// Variant 4, the forward on wgmma ([family][bf16 / fp16][DP 64 / 128]): sm_90a code,
  /// run on compute capability 9.0 only (hopper).
  CUfunction fwdWg[3][2][2] = {};
  /// Variant 5, wgmma with 3 key tiles in flight (bf16 / fp16, DP 64).
  CUfunction fwdWg3[2] = {};
  /// Backward variant 1, the backward on wgmma (likewise).
  CUfunction bwdWg[3][2][2] = {};
  bool hopper = false;
  /// ATTNC_CUDA_BWD_VARIANT's variant (-1: unset).
  int envBwdVariant = -1;
  /// ATTNC_CUDA_FWD_VARIANT's variant (-1: unset).
  int envVariant = -1;
  /// This GPU as tuning names it (tuning::gpuId): "NVIDIA_H200@9.0".
  std::string gpu;
  /// The most dynamic shared memory a CTA may have here (bytes): kernels
  /// that need more (the d = 256 backward on compute capability 8.x) are
  /// loaded but not launched (needSmem says so).
  int smemLimit = 0;
  /// attnc's pool for a call's buffers (state, slots, packed copies, the
  /// backward's f32 accumulators), which keeps ATTNC_CUDA_POOL_KEEP_MB of
  /// freed memory across synchronisations; null: the device's default pool.
  CUmemoryPool pool = nullptr;
};

/// The pool of a device's call buffers: freed memory up to `keepBytes`
/// stays mapped (the driver's default pool returns it all to the OS at the
/// next synchronisation, and the next call maps it again: ~100 MB for a
/// backward at n = 16384). Null where the driver makes none.
CUmemoryPool makePool(int device, uint64_t keepBytes) {
  const Driver &d = driver();
  CUmemPoolProps props{};
  props.allocType = 1;    // pinned device memory
  props.locationType = 1; // on a device
  props.locationId = device;
  CUmemoryPool pool = nullptr;
  if (d.cuMemPoolCreate(&pool, &props) != kSuccess)
    return nullptr;
  d.cuMemPoolSetAttribute(pool, kMemPoolReleaseThreshold, &keepBytes);
  return pool;
}

/// ATTNC_CUDA_POOL_KEEP_MB (default 1024), in bytes.
uint64_t poolKeepBytes() {
  const char *env = std::getenv("ATTNC_CUDA_POOL_KEEP_MB");
  if (!env || !*env)
    return uint64_t{1024} << 20;
  char *end = nullptr;
  const unsigned long long mb = std::strtoull(env, &end, 10);
  if (*end != 0 || *env == '-' || mb > (uint64_t{1} << 40))
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, std::string("ATTNC_CUDA_POOL_KEEP_MB must be a number of MB (0: "
                                                             "return freed memory at each synchronisation), not '") +
                                                     env + "'"};
  return uint64_t(mb) << 20;
}

unsigned variantThreads(int variant) { return variant == 3 ? 64 : 128; }

std::atomic<int> forcedVariant{-1}, forcedBwdVariant{-1};

const Module &module(int device) {
  static std::mutex mutex;
  static std::map<int, Module> modules;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = modules.find(device); it != modules.end())
    return it->second;
#if ATTNC_RUNTIME_CUDA
  const Driver &d = driver();
  const DeviceInfo info = deviceInfo(device);
  if (info.major < 8)
    throw RunError{ATTNC_ERROR_UNSUPPORTED, "CUDA device " + std::to_string(device) + " (" + info.name +
                                                ") has compute capability " + std::to_string(info.major) + "." +
                                                std::to_string(info.minor) +
                                                "; attnc's GPU kernels need 8.0 or newer (tensor-core mma.sync "
                                                "on bf16/fp16)"};
  const uint64_t poolKeep = poolKeepBytes(); // (a bad value fails before anything is loaded)
  CUmodule mod;
  if (CUresult r = d.cuModuleLoadData(&mod, attnc_cuda_fatbin); r != kSuccess)
    throw RunError{ATTNC_ERROR_UNSUPPORTED, "the GPU code in libattnc does not load on CUDA device " +
                                                std::to_string(device) + " (" + info.name + ", compute capability " +
                                                std::to_string(info.major) + "." + std::to_string(info.minor) +
                                                "): " + errorText(r)};
  Module m;
  m.smemLimit = info.smemOptIn;
  m.pool = makePool(device, poolKeep);
  auto get = [&](CUfunction &f, const std::string &name, int smem) {
    check(d.cuModuleGetFunction(&f, mod, name.c_str()), "cuModuleGetFunction");
    if (smem > 0 && smem <= m.smemLimit) {
      check(d.cuFuncSetAttribute(f, kFuncMaxDynamicShared, smem), "cuFuncSetAttribute");
      // As much shared memory as the SM has (not L1): more CTAs side by side.
      check(d.cuFuncSetAttribute(f, kFuncPreferredCarveout, 100), "cuFuncSetAttribute");
    }
  };
  const char *types[2] = {"bf16", "f16"};
  const int dps[3] = {64, 128, 256};
  for (int f = 0; f < 3; ++f)
    for (int t = 0; t < 2; ++t)
      for (int x = 0; x < 3; ++x) {
        const std::string suffix = kFamilies[f] + std::string(types[t]) + "_" + std::to_string(dps[x]);
        get(m.fwd[f][t][x], "attnc_fwd_" + suffix, fwdSmemBytes(dps[x]));
        get(m.bwd[f][t][x], "attnc_bwd_" + suffix, bwdSmemBytes(dps[x]));
      }
  if (const char *variant = std::getenv("ATTNC_CUDA_FWD_VARIANT"); variant && *variant) {
    const std::string v = variant;
    if (v.size() != 1 || v[0] < '0' || v[0] > '0' + kLastForwardVariant)
      throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "ATTNC_CUDA_FWD_VARIANT must be 0-" +
                                                       std::to_string(kLastForwardVariant) + ", not '" + v + "'"};
    m.envVariant = v[0] - '0';
  }
  for (int v = 1; v <= 3; ++v)
    get(m.fwdVariants[v], "attnc_fwd_bf16_64_v" + std::to_string(v), fwdSmemBytes(64));
  if (const char *variant = std::getenv("ATTNC_CUDA_BWD_VARIANT"); variant && *variant) {
    const std::string v = variant;
    if (v != "0" && v != "1")
      throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "ATTNC_CUDA_BWD_VARIANT must be 0 or 1, not '" + v + "'"};
    m.envBwdVariant = v[0] - '0';
  }
  m.hopper = info.major == 9 && info.minor == 0;
  for (int f = 0; f < 3; ++f)
    for (int t = 0; t < 2; ++t)
      for (int x = 0; x < 2; ++x) {
        const std::string suffix = kFamilies[f] + std::string(types[t]) + "_" + std::to_string(dps[x]);
        get(m.fwdWg[f][t][x], "attnc_fwd_wg_" + suffix, fwdSmemBytes(dps[x]));
        get(m.bwdWg[f][t][x], "attnc_bwd_wg_" + suffix, bwdSmemBytes(dps[x]));
      }
  for (int t = 0; t < 2; ++t)
    get(m.fwdWg3[t], std::string("attnc_fwd_wg3_") + types[t] + "_64", fwdSmemBytes(64, 3));
  m.gpu = info.name;
  for (char &c : m.gpu) // (tuning::gpuId's spelling)
    if (c == ' ' || c == ';' || c == ':' || c == '=' || c == '@')
      c = '_';
  m.gpu += "@" + std::to_string(info.major) + "." + std::to_string(info.minor);
  get(m.copy, "attnc_copy", 0);
  get(m.delta, "attnc_delta", 0);
  get(m.sinkGrad, "attnc_sink_grad", 0);
  return modules.emplace(device, m).first->second;
#else
  (void)device;
  throw RunError{ATTNC_ERROR_UNSUPPORTED, "this libattnc was built without the GPU code (nvcc was not found when "
                                          "it was built: configure with -DATTNC_WITH_CUDA=ON and CUDA's nvcc)"};
#endif
}

void launch(CUfunction f, unsigned gx, unsigned gy, unsigned threads, unsigned smem, CUstream stream, void *arg) {
  void *params[] = {arg};
  check(driver().cuLaunchKernel(f, gx, gy, 1, threads, 1, 1, smem, stream, params, nullptr), "cuLaunchKernel");
}

/// Device memory for one call, freed in stream order when it goes.
class DeviceBuffer {
public:
  DeviceBuffer(const Module &m, size_t bytes, CUstream stream) : stream_(stream) {
    if (bytes && m.pool)
      check(driver().cuMemAllocFromPoolAsync(&ptr_, bytes, m.pool, stream), "cuMemAllocFromPoolAsync");
    else if (bytes)
      check(driver().cuMemAllocAsync(&ptr_, bytes, stream), "cuMemAllocAsync");
  }
  ~DeviceBuffer() {
    if (ptr_)
      driver().cuMemFreeAsync(ptr_, stream_);
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  template <class T> T *get() const { return reinterpret_cast<T *>(ptr_); }
  void zero(size_t bytes) const { check(driver().cuMemsetD8Async(ptr_, 0, bytes, stream_), "cuMemsetD8Async"); }
  void fill32(uint32_t value, size_t count) const {
    check(driver().cuMemsetD32Async(ptr_, value, count, stream_), "cuMemsetD32Async");
  }

private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
};

// --- Checks -----------------------------------------------------------------

/// Throws unless `t`'s memory is GPU memory of `device`.
void checkOnDevice(const attnc_tensor &t, const char *name, int device) {
  if (t.shape[0] == 0 || t.shape[1] == 0 || t.shape[2] == 0 || t.shape[3] == 0)
    return;
  const Driver &d = driver();
  const auto ptr = reinterpret_cast<CUdeviceptr>(t.data);
  unsigned type = 0;
  if (d.cuPointerGetAttribute(&type, kPointerMemoryType, ptr) != kSuccess || type == kMemoryTypeHost)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT,
                   std::string("tensor '") + name + "' is not CUDA device memory (a CPU pointer?) but the call runs "
                   "on CUDA device " + std::to_string(device) + "; pass tensors of that device, or run on the CPU"};
  int ordinal = -1;
  if (d.cuPointerGetAttribute(&ordinal, kPointerDeviceOrdinal, ptr) == kSuccess && ordinal != device)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, std::string("tensor '") + name + "' is memory of CUDA device " +
                                                     std::to_string(ordinal) + " but the call runs on device " +
                                                     std::to_string(device)};
}

/// The call's stream, checked to be a stream of `context` (device.index's).
/// It asks the driver for the stream's context, not for its state: a
/// query (cuStreamQuery) would end a CUDA graph capture on the stream.
CUstream checkedStream(const attnc_device &device, CUcontext context) {
  auto stream = static_cast<CUstream>(device.stream);
  if (!stream)
    return stream;
  CUcontext owner = nullptr;
  if (const CUresult r = driver().cuStreamGetCtx(stream, &owner); r != kSuccess)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "the stream " + std::to_string(reinterpret_cast<uintptr_t>(stream)) +
                                                     " is not a usable CUDA stream of device " +
                                                     std::to_string(device.index) + ": " + errorText(r)};
  if (owner != context)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT,
                   "the stream " + std::to_string(reinterpret_cast<uintptr_t>(stream)) +
                       " belongs to another CUDA context than device " + std::to_string(device.index) +
                       "'s primary context (a stream of another device?); pass a stream of that device"};
  return stream;
}

int paddedDim(int64_t d) {
  if (d > 256)
    throw RunError{ATTNC_ERROR_SHAPE, "the head dimension d = " + std::to_string(d) +
                                          " is above 256, the most the GPU kernels take"};
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

View viewOf(const attnc_tensor &t, int64_t cols) {
  View v{};
  v.data = t.data;
  v.dtype = static_cast<int32_t>(t.dtype);
  v.cols = static_cast<int32_t>(cols);
  for (int a = 0; a < 3; ++a)
    v.shape[a] = t.shape[a];
  for (int a = 0; a < 4; ++a)
    v.strides[a] = t.strides[a];
  return v;
}

/// A contiguous [B, H, rows, cols] view of `data` with `dtype`.
View contiguous(void *data, attnc_dtype dtype, int64_t B, int64_t H, int64_t rows, int64_t cols) {
  View v{};
  v.data = data;
  v.dtype = static_cast<int32_t>(dtype);
  v.cols = static_cast<int32_t>(cols);
  v.shape[0] = B, v.shape[1] = H, v.shape[2] = rows;
  v.strides[3] = 1, v.strides[2] = cols, v.strides[1] = rows * cols, v.strides[0] = H * rows * cols;
  return v;
}

/// A float input of `rows` entries along its first axis (a sink's [heads])
/// as a [1, 1, rows, 1] view.
View entriesOf(const attnc_tensor &t, int64_t rows) {
  View v{};
  v.data = t.data;
  v.dtype = static_cast<int32_t>(t.dtype);
  v.cols = 1;
  v.shape[0] = 1, v.shape[1] = 1, v.shape[2] = rows;
  v.strides[2] = t.strides[0], v.strides[3] = 1;
  return v;
}

/// Grid dimensions y (heads) and z (batch) of the element-wise kernels.
void checkGridHeads(int64_t heads, int64_t batch) {
  if (heads > 65535 || batch > 65535)
    throw RunError{ATTNC_ERROR_UNSUPPORTED, "more than 65535 heads or batch elements in one GPU call"};
}

void copy(const Module &m, CUstream stream, const View &src, const View &dst, int64_t padCols) {
  const int64_t slice = src.shape[2] * padCols;
  if (slice == 0 || src.shape[0] == 0 || src.shape[1] == 0)
    return;
  if (slice >= (int64_t{1} << 32))
    throw RunError{ATTNC_ERROR_UNSUPPORTED, "a (batch, head) slice of more than 2^32 elements on the GPU"};
  checkGridHeads(src.shape[1], src.shape[0]);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((slice + 255) / 256, 4096));
  View s = src, d = dst;
  int32_t pad = static_cast<int32_t>(padCols);
  void *params[] = {&s, &d, &pad};
  check(driver().cuLaunchKernel(m.copy, blocks, unsigned(src.shape[1]), unsigned(src.shape[0]), 256, 1, 1, 0, stream,
                                params, nullptr),
        "cuLaunchKernel");
}

/// A per-head float input ([heads], f32 or bf16, any stride: a sink's logits, ALiBi's slopes) as
/// f32 [heads] in a buffer of the call.
std::unique_ptr<DeviceBuffer> headValues(const Module &m, CUstream stream, const attnc_tensor &t, int64_t heads) {
  auto out = std::make_unique<DeviceBuffer>(m, size_t(heads) * 4, stream);
  copy(m, stream, entriesOf(t, heads), contiguous(out->get<void>(), ATTNC_DTYPE_F32, 1, 1, heads, 1), 1);
  return out;
}

/// f32 [heads] sums, zeroed, for a per-head input's gradient (then writeHeadGrad).
std::unique_ptr<DeviceBuffer> headSums(const Module &m, CUstream stream, int64_t heads) {
  auto out = std::make_unique<DeviceBuffer>(m, size_t(heads) * 4, stream);
  out->zero(size_t(heads) * 4);
  return out;
}

/// Copies the sums to the gradient's tensor (f32 [heads], any stride).
void writeHeadGrad(const Module &m, CUstream stream, const DeviceBuffer &sums, const attnc_tensor &t, int64_t heads) {
  copy(m, stream, contiguous(sums.get<void>(), ATTNC_DTYPE_F32, 1, 1, heads, 1), entriesOf(t, heads), 1);
}

/// An input the kernels read in place (dtype `type`, rows of d contiguous
/// elements 16-byte aligned, d a multiple of 8), or a packed copy of it.
struct Operand {
  const void *data = nullptr;
  int64_t sb = 0, sh = 0, sn = 0;
  std::unique_ptr<DeviceBuffer> packed;
};

bool readableInPlace(const attnc_tensor &t, attnc_dtype type) {
  const auto addr = reinterpret_cast<uintptr_t>(t.data);
  return t.dtype == type && t.strides[3] == 1 && t.shape[3] % 8 == 0 && addr % 16 == 0 &&
         (t.shape[0] == 1 || t.strides[0] % 8 == 0) && (t.shape[1] == 1 || t.strides[1] % 8 == 0) &&
         t.strides[2] % 8 == 0;
}

Operand operand(const Module &m, CUstream stream, const attnc_tensor &t, attnc_dtype type) {
  Operand op;
  if (readableInPlace(t, type)) {
    op.data = t.data;
    op.sb = t.strides[0], op.sh = t.strides[1], op.sn = t.strides[2];
    return op;
  }
  const int64_t cols = (t.shape[3] + 7) / 8 * 8;
  const size_t bytes = size_t(t.shape[0] * t.shape[1] * t.shape[2] * cols) * 2;
  op.packed = std::make_unique<DeviceBuffer>(m, bytes, stream);
  const View dst = contiguous(op.packed->get<void>(), type, t.shape[0], t.shape[1], t.shape[2], cols);
  copy(m, stream, viewOf(t, t.shape[3]), dst, cols);
  op.data = dst.data;
  op.sb = dst.strides[0], op.sh = dst.strides[1], op.sn = dst.strides[2];
  return op;
}

/// The element type the kernels compute in: the inputs' own (bf16, fp16),
/// or bf16 for f32 inputs (converted once as they are packed).
attnc_dtype computeType(attnc_dtype inputs) { return inputs == ATTNC_DTYPE_F16 ? ATTNC_DTYPE_F16 : ATTNC_DTYPE_BF16; }

template <class T> const T *deviceCopy(const std::vector<T> &host, std::vector<CUdeviceptr> &owned) {
  if (host.empty())
    return nullptr;
  CUdeviceptr p;
  check(driver().cuMemAlloc(&p, host.size() * sizeof(T)), "cuMemAlloc");
  owned.push_back(p);
  check(driver().cuMemcpyHtoD(p, host.data(), host.size() * sizeof(T)), "cuMemcpyHtoD");
  return reinterpret_cast<const T *>(p);
}

/// What a forward and a backward call check and pick first: every tensor on
/// the device, the stream, the padded head dimension, the kernels of the
/// device and the type they compute in.
struct Started {
  CUstream stream;
  int dp;
  const Module &module;
  attnc_dtype type;
};

Started start(const attnc_device &device, const ScopedContext &context, const Dims &dims,
              std::initializer_list<std::pair<const attnc_tensor *, const char *>> tensors) {
  const CUstream stream = checkedStream(device, context.get());
  for (const auto &[t, name] : tensors)
    if (t)
      checkOnDevice(*t, name, device.index);
  const int dp = paddedDim(dims.d);
  if (dims.batch * dims.hq > 65535)
    throw RunError{ATTNC_ERROR_UNSUPPORTED, "batch x heads above 65535 on the GPU"};
  return {stream, dp, module(device.index), computeType(tensors.begin()->first->dtype)};
}

/// Q, K and V of a kernel's argument (FwdArgs, BwdArgs) as the kernels read them.
template <class Args> void setInputs(Args &a, const Operand &q, const Operand &k, const Operand &v) {
  a.q = q.data, a.k = k.data, a.v = v.data;
  a.qsb = q.sb, a.qsh = q.sh, a.qsn = q.sn;
  a.ksb = k.sb, a.ksh = k.sh, a.ksn = k.sn;
  a.vsb = v.sb, a.vsh = v.sh, a.vsn = v.sn;
}

/// `p` (the kernels' 16-bit elements) at batch entry b, head x, of element strides sb, sx.
template <class V> V *sliceAt(V *p, int64_t b, int64_t x, int64_t sb, int64_t sx) {
  using Byte = std::conditional_t<std::is_const_v<V>, const char, char>;
  return static_cast<Byte *>(p) + 2 * (b * sb + x * sx);
}

/// Q, K and V of a kernel's argument moved to one slice: batch entry b, query head h (key/value head g).
template <class Args> void sliceInputs(Args &one, const Args &a, int64_t b, int64_t h, int64_t g) {
  one.q = sliceAt(a.q, b, h, a.qsb, a.qsh);
  one.k = sliceAt(a.k, b, g, a.ksb, a.ksh);
  one.v = sliceAt(a.v, b, g, a.vsb, a.vsh);
}

/// Throws unless a CTA of `smem` bytes of shared memory fits this module's GPU.
void needSmem(const Module &m, int device, unsigned smem, const char *what, int dp) {
  if (smem <= static_cast<unsigned>(m.smemLimit))
    return;
  throw RunError{ATTNC_ERROR_UNSUPPORTED,
                 std::string("the GPU ") + what + " at d = " + std::to_string(dp) + " needs " +
                     std::to_string(smem / 1024) + " KB of shared memory per CTA; CUDA device " +
                     std::to_string(device) + " (" + m.gpu + ") allows " + std::to_string(m.smemLimit / 1024) +
                     " KB: run smaller head dimensions there, or this call on the CPU"};
}

/// Throws unless this module's GPU runs the wgmma kernels (`what` names the one asked for).
void needHopper(const Module &m, int device, const std::string &what) {
  if (!m.hopper)
    throw RunError{ATTNC_ERROR_UNSUPPORTED, what + " runs on wgmma, compute capability 9.0 (H100, H200) only; CUDA "
                                                  "device " + std::to_string(device) + " is " + m.gpu};
}

} // namespace

void checkDevice(int index) {
  if (!compiledIn())
    module(index); // says so
  ScopedContext ctx(index);
  module(index);
}

// --- Tables on the device -----------------------------------------------------

struct Engine::DeviceTables {
  struct Set {
    SetTables host; ///< launches and item counts (the arrays are on the device)
    const FwdItem *fwdItems = nullptr;
    const int32_t *fwdKeys = nullptr;
    const uint64_t *fwdMasks = nullptr;
    const uint8_t *fwdFull = nullptr;
    const BwdItem *bwdItems = nullptr;
    const int32_t *bwdKeys = nullptr, *bwdRows = nullptr;
    const uint64_t *bwdMasks = nullptr;
    const uint8_t *bwdFull = nullptr;
  };
  std::vector<Set> sets;
  const int32_t *setOfHead = nullptr; ///< null when the kernel has one set
  std::vector<CUdeviceptr> owned;
  int device = 0;
  /// `host`'s arrays copied to the device by `copy` (deviceCopy into `owned`, or a call's buffers);
  /// what the launches need stays on the host.
  template <class Copy> static Set upload(SetTables host, Copy &&copy) {
    Set s;
    s.fwdItems = copy(host.fwdItems);
    s.fwdKeys = copy(host.fwdKeys);
    s.fwdMasks = copy(host.fwdMasks);
    s.fwdFull = copy(host.fwdFull);
    s.bwdItems = copy(host.bwdItems);
    s.bwdKeys = copy(host.bwdKeys);
    s.bwdRows = copy(host.bwdRows);
    s.bwdMasks = copy(host.bwdMasks);
    s.bwdFull = copy(host.bwdFull);
    host.fwdKeys = {}, host.fwdMasks = {}, host.fwdFull = {}, host.bwdKeys = {}, host.bwdRows = {};
    host.bwdMasks = {}, host.bwdFull = {};
    s.host = std::move(host);
    return s;
  }
  /// A pattern that reads data: the (batch, head) slices of a call that run each set (slices whose
  /// inputs are the same arrays share one: broadcast inputs build their tables once).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> slicesOfSet;
  ~DeviceTables() {
    try {
      ScopedContext ctx(device);
      for (CUdeviceptr p : owned)
        driver().cuMemFree(p);
    } catch (const RunError &) {
    }
  }
};

void forceBackwardVariant(int variant) {
  if (variant < -1 || variant > 1)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "a backward variant is 0 or 1 (or -1: none forced), not " +
                                                     std::to_string(variant)};
  forcedBwdVariant.store(variant);
}

void forceForwardVariant(int variant) {
  if (variant < -1 || variant > kLastForwardVariant)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "a forward variant is 0-" + std::to_string(kLastForwardVariant) +
                                                     " (or -1: none forced), not " + std::to_string(variant)};
  forcedVariant.store(variant);
}

namespace {

/// The per-head input read as `NAME[h]` by `e` (a float input of rank 1), or none.
HeadInput perHead(const ScoreExpr &e, const ir::PatternIR &ir) {
  HeadInput in;
  if (e.op == ScoreOp::Input && e.args.size() == 1 && e.args[0]->op == ScoreOp::H &&
      ir.inputs.at(static_cast<size_t>(e.input)).rank() == 1) {
    in.input = e.input;
    in.name = ir.inputs[static_cast<size_t>(e.input)].name;
    in.grad = "d_" + in.name;
  }
  return in;
}

/// ALiBi's score, s + z[h] * (j - i) in any order of the operands (or s - z[h] * (i - j), or with i - j:
/// sign -1), as its per-head input and sign; none for any other score.
std::pair<HeadInput, float> alibiOf(const ScoreExpr &e, const ir::PatternIR &ir) {
  if ((e.op != ScoreOp::Add && e.op != ScoreOp::Sub) || e.args.size() != 2)
    return {};
  const bool sFirst = e.args[0]->op == ScoreOp::S;
  if (!sFirst && (e.op == ScoreOp::Sub || e.args[1]->op != ScoreOp::S))
    return {};
  const ScoreExpr &bias = *e.args[sFirst ? 1 : 0];
  if (bias.op != ScoreOp::Mul || bias.args.size() != 2)
    return {};
  for (int r = 0; r < 2; ++r) {
    const HeadInput in = perHead(*bias.args[r], ir);
    const ScoreExpr &d = *bias.args[1 - r];
    if (!in || d.op != ScoreOp::Sub || d.args.size() != 2)
      continue;
    const ScoreOp a = d.args[0]->op, b = d.args[1]->op;
    const float sign = a == ScoreOp::J && b == ScoreOp::I ? 1.f : a == ScoreOp::I && b == ScoreOp::J ? -1.f : 0.f;
    if (sign != 0)
      return {in, e.op == ScoreOp::Sub ? -sign : sign};
  }
  return {};
}

} // namespace

Modifiers gpuModifiers(const ir::PatternIR &ir) {
  Modifiers m;
  auto refuse = [&](const std::string &why) {
    throw RunError{ATTNC_ERROR_UNSUPPORTED, "pattern '" + ir.name + "' " + why + ": run it on CPU tensors"};
  };
  if (ir.score) {
    const ScoreExpr &e = *ir.score;
    std::tie(m.slope, m.slopeSign) = alibiOf(e, ir);
    bool plain = true; // (a soft cap of s by constants reads nothing else)
    for (ScoreOp op : {ScoreOp::Input, ScoreOp::I, ScoreOp::J, ScoreOp::H, ScoreOp::N})
      plain = plain && !mentions(e, op);
    const ScoreCode code = plain ? compileScore(e, ir, 0, 1, {}, false) : ScoreCode{};
    if (!code.inlineCap && !m.slope)
      refuse("has a score that the CUDA kernels do not run yet (they run a soft cap alone, `score c * tanh(s / c)` "
             "with a constant c, as Gemma 2's, and ALiBi's `score s + z[h] * (j - i)` with `input z : "
             "float[heads]`; relative biases and other scores run on the CPU)");
    m.capPre = code.capPre, m.capPost = code.capPost;
  }
  if (ir.sink) {
    m.sink = perHead(*ir.sink, ir);
    if (!m.sink)
      refuse("has a sink that the CUDA kernels do not run yet (they run a float input's entry per query head, "
             "`sink z[h]` with `input z : float[heads]`, as gpt-oss's)");
  }
  for (size_t x = 0; x < ir.inputs.size(); ++x)
    if (ir.inputs[x].isFloat && static_cast<int64_t>(x) != m.sink.input && static_cast<int64_t>(x) != m.slope.input)
      refuse("declares float input '" + ir.inputs[x].name + "', which the CUDA kernels do not take (they take "
             "ALiBi's slopes and a sink's logits, one per query head)");
  if (m.sink && m.sink.input == m.slope.input)
    refuse("reads float input '" + m.sink.name + "' as both its slopes and its sink, which the CUDA kernels do "
           "not take (give two inputs)");
  return m;
}

Engine::Engine(const ir::PatternIR &ir, std::vector<int64_t> headToSet, const std::string &cudaTuned)
    : plan_(cuda::gpuPlan(ir)), headToSet_(std::move(headToSet)), tuned_(parseCudaTuned(cudaTuned)) {
  try {
    modifiers_ = gpuModifiers(ir);
  } catch (const RunError &e) {
    unsupported_ = e.message;
  }
}

Engine::~Engine() = default;

std::shared_ptr<const Engine::DeviceTables> Engine::tables(int device, int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = tables_.find({device, n}); it != tables_.end()) {
    it->second.used = ++uses_;
    return it->second.tables;
  }
  checkKeysFit32Bits(n);
  auto t = std::make_shared<DeviceTables>();
  t->device = device;
  for (SetTables &host : buildTables(plan_, n))
    t->sets.push_back(DeviceTables::upload(std::move(host), [&](const auto &v) { return deviceCopy(v, t->owned); }));
  if (t->sets.size() > 1) {
    std::vector<int32_t> heads(headToSet_.begin(), headToSet_.end());
    t->setOfHead = deviceCopy(heads, t->owned);
  }
  // Tables kept per kernel: those of the 16 (device, length) pairs used most recently.
  if (tables_.size() >= 16)
    tables_.erase(std::min_element(tables_.begin(), tables_.end(), [](const auto &a, const auto &b) {
      return a.second.used < b.second.used;
    }));
  tables_[{device, n}] = {t, ++uses_};
  return t;
}

std::vector<attnc_input> hostCopies(const attnc_device &device, const attnc_input *inputs, int64_t count,
                                    std::vector<std::vector<unsigned char>> &storage) {
  ScopedContext ctx(device.index);
  const CUstream stream = checkedStream(device, ctx.get());
  std::vector<attnc_input> out;
  bool synced = false;
  storage.assign(static_cast<size_t>(std::max<int64_t>(count, 0)), {});
  for (int64_t x = 0; x < count; ++x) {
    const attnc_input &in = inputs[x];
    attnc_input host = in;
    const attnc_tensor &t = in.values;
    const std::string name = in.name ? in.name : "input " + std::to_string(x);
    // Its extent: the last element's offset + 1 (none when a dimension is 0).
    int64_t extent = 1;
    for (int a = 0; a < 4; ++a) {
      if (t.shape[a] < 0 || t.strides[a] < 0)
        throw RunError{ATTNC_ERROR_STRIDE, "input '" + name + "' has a negative shape or stride"};
      if (t.shape[a] == 0)
        extent = 0;
    }
    for (int a = 0; a < 4 && extent > 0; ++a) {
      if (t.strides[a] > (int64_t{1} << 40) || t.shape[a] > (int64_t{1} << 40))
        throw RunError{ATTNC_ERROR_SHAPE, "input '" + name + "' spans more than 2^40 elements"};
      extent += (t.shape[a] - 1) * t.strides[a];
    }
    const size_t element = t.dtype == ATTNC_DTYPE_I64 ? 8 : t.dtype == ATTNC_DTYPE_BF16 || t.dtype == ATTNC_DTYPE_F16 ? 2 : 4;
    if (extent > (int64_t{1} << 34))
      throw RunError{ATTNC_ERROR_SHAPE, "input '" + name + "' spans more than 2^34 elements"};
    if (extent > 0) {
      checkOnDevice(t, name.c_str(), device.index);
      if (!synced) { // (once: the inputs are read after the stream's work so far)
        const CUresult r = driver().cuStreamSynchronize(stream);
        if (r == 900 || r == 901) // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED / _INVALIDATED
          throw RunError{ATTNC_ERROR_UNSUPPORTED, "a pattern that reads data reads its inputs on the host at each "
                                                  "call (it waits for the stream), which a CUDA graph capture does "
                                                  "not allow: run such calls outside the capture"};
        check(r, "cuStreamSynchronize");
      }
      synced = true;
      storage[size_t(x)].resize(size_t(extent) * element);
      check(driver().cuMemcpyDtoH(storage[size_t(x)].data(), reinterpret_cast<CUdeviceptr>(t.data),
                                  storage[size_t(x)].size()),
            "cuMemcpyDtoH");
      host.values.data = storage[size_t(x)].data();
    }
    out.push_back(host);
  }
  return out;
}

namespace {

/// The tables of a call of a pattern that reads data (not cached: in `buffers`, the call's, copied on
/// its stream): one set per distinct (head set, inputs) of its slices, with the slices that run it.
std::shared_ptr<const Engine::DeviceTables> dataTables(const plan::Plan &plan_, const std::vector<int64_t> &headToSet_,
                                                       int device, const Dims &dims, const CallInputs &data,
                                                       const Module &module, CUstream stream,
                                                       std::vector<std::unique_ptr<DeviceBuffer>> &buffers) {
  using DeviceTables = Engine::DeviceTables;
  checkKeysFit32Bits(dims.nk);
  auto t = std::make_shared<DeviceTables>();
  t->device = device;
  // Each table in a buffer of the call (freed in stream order when it returns), copied on its stream.
  auto toDevice = [&](const auto &v) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    if (v.empty())
      return static_cast<const T *>(nullptr);
    buffers.push_back(std::make_unique<DeviceBuffer>(module, v.size() * sizeof(T), stream));
    check(driver().cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(buffers.back()->get<void>()), v.data(),
                                     v.size() * sizeof(T), stream),
          "cuMemcpyHtoDAsync");
    return static_cast<const T *>(buffers.back()->get<T>());
  };
  std::map<std::pair<int64_t, std::vector<const void *>>, size_t> sets; // (head set, arrays) -> its set in t
  for (int64_t b = 0; b < dims.batch; ++b)
    for (int64_t h = 0; h < dims.hq; ++h) {
      const InputArrays *arrays = data.slice(b, h);
      ATTNC_CHECK(arrays, "a call of a pattern that reads data has its inputs");
      const int64_t set = plan_.heads.size() == 1 ? 0 : headToSet_.at(static_cast<size_t>(h));
      std::vector<const void *> key;
      for (const auto &a : *arrays)
        key.push_back(a.get());
      auto [it, fresh] = sets.try_emplace({set, key}, t->sets.size());
      if (fresh) {
        const plan::Plan bound = plan::bindPlan(plan_, static_cast<size_t>(set), *arrays);
        t->sets.push_back(DeviceTables::upload(buildSetTables(bound, static_cast<size_t>(set), dims.nk), toDevice));
        t->slicesOfSet.emplace_back();
      }
      t->slicesOfSet[it->second].emplace_back(b, h);
    }
  return t;
}

} // namespace

void Engine::forward(const attnc_device &device, const Dims &dims, const attnc_tensor &q, const attnc_tensor &k,
                     const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor *lse, float scale,
                     const HeadTensors &floats, const CallInputs *data) {
  checkModifiers(floats);
  ScopedContext ctx(device.index);
  const Modifiers &mods = modifiers_;
  const auto [stream, dp, m, type] = start(device, ctx, dims,
                                           {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&o, "o"}, {lse, "lse"},
                                            {floats.slope, mods.slope.name.c_str()},
                                            {floats.sink, mods.sink.name.c_str()}});
  const int family = mods.family();
  CUfunction f = m.fwd[family][typeIndex(type)][dpIndex(dp)];
  unsigned threads = 128;
  // The variant: forced (attnc tune), else ATTNC_CUDA_FWD_VARIANT's, else the one tuned for this GPU,
  // else wgmma's on compute capability 9.0 (1.2-2.4x the mma.sync kernel's speed on an H200) and 0.
  const int forced = forcedVariant.load();
  const char *dtype = type == ATTNC_DTYPE_F16 ? "f16" : "bf16";
  const int variant = forced >= 0         ? forced
                      : m.envVariant >= 0 ? m.envVariant
                                          : tunedVariant(tuned_, m.gpu, dtype, dims.d, m.hopper && dp <= 128 ? 4 : 0);
  unsigned smem = fwdSmemBytes(dp);
  if (variant == 4 || variant == 5) {
    needHopper(m, device.index, "forward variant " + std::to_string(variant));
    if (variant == 5 && dp == 64 && family == 0)
      f = m.fwdWg3[typeIndex(type)], smem = fwdSmemBytes(64, 3);
    else if (dp <= 128) // (5 at d > 64 or with a score: 4's kernel; d > 128: the default kernel)
      f = m.fwdWg[family][typeIndex(type)][dpIndex(dp)];
  } else if (variant > 0 && type == ATTNC_DTYPE_BF16 && dp == 64 && family == 0) { // (with a score: 0's)
    f = m.fwdVariants[variant], threads = variantThreads(variant);
  }
  needSmem(m, device.index, smem, "forward", dp);
  std::vector<std::unique_ptr<DeviceBuffer>> callTables; // (a data call's)
  auto tabs = data ? dataTables(plan_, headToSet_, device.index, dims, *data, m, stream, callTables)
                   : tables(device.index, dims.nk);
  Operand qo = operand(m, stream, q, type), ko = operand(m, stream, k, type), vo = operand(m, stream, v, type);
  // O written in place when it is the compute type with even rows; else
  // through a contiguous copy.
  const auto oaddr = reinterpret_cast<uintptr_t>(o.data);
  const bool oInPlace = o.dtype == type && o.strides[3] == 1 && dims.d % 2 == 0 && oaddr % 4 == 0 &&
                        o.strides[2] % 2 == 0 && (o.shape[1] == 1 || o.strides[1] % 2 == 0) &&
                        (o.shape[0] == 1 || o.strides[0] % 2 == 0);
  const int64_t ocols = (dims.d + 1) / 2 * 2;
  std::unique_ptr<DeviceBuffer> oTemp;
  View oView{};
  if (!oInPlace) {
    oTemp = std::make_unique<DeviceBuffer>(m, size_t(dims.batch * dims.hq * dims.nq * ocols) * 2, stream);
    oView = contiguous(oTemp->get<void>(), type, dims.batch, dims.hq, dims.nq, ocols);
  }
  std::unique_ptr<DeviceBuffer> stateO, stateLse, slotO, slotLse;
  int32_t slots = 0;
  for (const auto &set : tabs->sets)
    slots = std::max(slots, set.host.slots);
  if (slots > 0) {
    const size_t rows = size_t(slots) * size_t(dims.batch * dims.hq) * kTileRows;
    slotO = std::make_unique<DeviceBuffer>(m, rows * dp * 4, stream);
    slotLse = std::make_unique<DeviceBuffer>(m, rows * 4, stream);
  }
  FwdArgs a{};
  a.slotO = slotO ? slotO->get<float>() : nullptr;
  a.slotLse = slotLse ? slotLse->get<float>() : nullptr;
  setInputs(a, qo, ko, vo);
  if (oInPlace)
    a.o = o.data, a.osb = o.strides[0], a.osh = o.strides[1], a.osn = o.strides[2];
  else
    a.o = oView.data, a.osb = oView.strides[0], a.osh = oView.strides[1], a.osn = oView.strides[2];
  if (lse)
    a.lse = static_cast<float *>(lse->data), a.lsb = lse->strides[0], a.lsh = lse->strides[1],
    a.lsn = lse->strides[2];
  a.heads = static_cast<int32_t>(dims.hq);
  a.ratio = static_cast<int32_t>(dims.hq / dims.hkv);
  a.d = static_cast<int32_t>(dims.d);
  a.nq = static_cast<int32_t>(dims.nq);
  a.nk = static_cast<int32_t>(dims.nk);
  a.first = static_cast<int32_t>(dims.first >= 0 ? dims.first : dims.nk - dims.nq);
  a.scaleLog2 = scale * 1.4426950408889634f;
  a.capIn = mods.capPre * scale, a.capOutLog2 = mods.capPost * 1.4426950408889634f;
  // The slopes and the sink's logits, one per query head, as f32 (whatever the inputs' dtypes and strides).
  std::unique_ptr<DeviceBuffer> slopeF32, sinkF32;
  if (floats.slope) {
    slopeF32 = headValues(m, stream, *floats.slope, dims.hq);
    a.slope = slopeF32->get<float>(), a.slopeLog2 = mods.slopeSign * 1.4426950408889634f;
  }
  if (floats.sink) {
    sinkF32 = headValues(m, stream, *floats.sink, dims.hq);
    a.sink = sinkF32->get<float>();
  }
  a.setOfHead = tabs->setOfHead;
  // Each set's launches over `slices` (batch x heads of them, or one slice of a pattern that reads data).
  auto runSet = [&](const DeviceTables::Set &set, FwdArgs &args, int64_t slices) {
    if (set.host.needsState()) {
      const size_t rows = size_t(slices * dims.nk);
      const bool fresh = !stateO;
      if (fresh) {
        stateO = std::make_unique<DeviceBuffer>(m, rows * dp * 4, stream);
        stateLse = std::make_unique<DeviceBuffer>(m, rows * 4, stream);
      }
      if (fresh || data) // (each slice of a data call starts from an empty state)
        stateLse->fill32(0xff800000u, rows); // -inf: no piece has written the row
    }
    args.items = set.fwdItems, args.keys = set.fwdKeys, args.masks = set.fwdMasks, args.full = set.fwdFull;
    args.stateO = stateO ? stateO->get<float>() : nullptr;
    args.stateLse = stateLse ? stateLse->get<float>() : nullptr;
    for (const Launch &l : set.host.fwdLaunches) {
      if (l.itemCount == 0)
        continue;
      args.itemBegin = l.itemBegin;
      args.readsState = l.readsState, args.writesState = l.writesState, args.writesSlots = l.writesSlots;
      launch(f, unsigned(l.itemCount), unsigned(slices), threads, smem, stream, &args);
    }
  };
  for (size_t s = 0; s < tabs->sets.size(); ++s) {
    if (!data) {
      a.set = static_cast<int32_t>(s);
      runSet(tabs->sets[s], a, dims.batch * dims.hq);
      continue;
    }
    // A data call: each slice alone (grid y = 1), its tensors' rows from its (batch, head).
    for (const auto &[b, h] : tabs->slicesOfSet[s]) {
      FwdArgs one = a;
      const int64_t g = h / (dims.hq / dims.hkv);
      sliceInputs(one, a, b, h, g);
      one.o = sliceAt(a.o, b, h, a.osb, a.osh);
      if (a.lse)
        one.lse = a.lse + b * a.lsb + h * a.lsh;
      one.heads = 1, one.ratio = 1, one.set = 0, one.setOfHead = nullptr;
      if (a.sink)
        one.sink = a.sink + h;
      if (a.slope)
        one.slope = a.slope + h;
      runSet(tabs->sets[s], one, 1);
    }
  }
  if (!oInPlace)
    copy(m, stream, oView, viewOf(o, dims.d), dims.d);
}

void Engine::backward(const attnc_device &device, const Dims &dims, const attnc_tensor &q, const attnc_tensor &k,
                      const attnc_tensor &v, const attnc_tensor &o, const attnc_tensor &dO, const attnc_tensor &lse,
                      const attnc_tensor &dq, const attnc_tensor &dk, const attnc_tensor &dv, float scale,
                      const HeadTensors &floats, const CallInputs *data) {
  checkModifiers(floats);
  ScopedContext ctx(device.index);
  const Modifiers &mods = modifiers_;
  const auto [stream, dp, m, type] =
      start(device, ctx, dims,
            {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&o, "o"}, {&dO, "d_o"}, {&lse, "lse"}, {&dq, "d_q"}, {&dk, "d_k"},
             {&dv, "d_v"}, {floats.slope, mods.slope.name.c_str()}, {floats.slopeGrad, mods.slope.grad.c_str()},
             {floats.sink, mods.sink.name.c_str()}, {floats.sinkGrad, mods.sink.grad.c_str()}});
  const int family = mods.family();
  CUfunction f = m.bwd[family][typeIndex(type)][dpIndex(dp)];
  // The variant: forced (tests, benchmarks), else ATTNC_CUDA_BWD_VARIANT's, else wgmma's (1) on compute
  // capability 9.0 and 0; d > 128 runs the mma.sync kernel.
  const int forced = forcedBwdVariant.load();
  const int variant = forced >= 0 ? forced : m.envBwdVariant >= 0 ? m.envBwdVariant : m.hopper ? 1 : 0;
  if (variant == 1) {
    needHopper(m, device.index, "backward variant 1");
    if (dp <= 128)
      f = m.bwdWg[family][typeIndex(type)][dpIndex(dp)];
  }
  needSmem(m, device.index, bwdSmemBytes(dp), "backward", dp);
  std::vector<std::unique_ptr<DeviceBuffer>> callTables; // (a data call's)
  auto tabs = data ? dataTables(plan_, headToSet_, device.index, dims, *data, m, stream, callTables)
                   : tables(device.index, dims.nk);
  Operand qo = operand(m, stream, q, type), ko = operand(m, stream, k, type), vo = operand(m, stream, v, type);
  Operand go = operand(m, stream, dO, type);
  const size_t qRows = size_t(dims.batch * dims.hq * dims.nq), kRows = size_t(dims.batch * dims.hkv * dims.nk);
  DeviceBuffer delta(m, qRows * 4, stream), dqAcc(m, qRows * dp * 4, stream), dkAcc(m, kRows * dp * 4, stream),
      dvAcc(m, kRows * dp * 4, stream);
  dqAcc.zero(qRows * dp * 4);
  dkAcc.zero(kRows * dp * 4);
  dvAcc.zero(kRows * dp * 4);
  {
    View gv = viewOf(dO, dims.d), ov = viewOf(o, dims.d);
    float *deltaPtr = delta.get<float>();
    void *params[] = {&gv, &ov, &deltaPtr};
    checkGridHeads(dims.hq, dims.batch);
    const unsigned blocks = static_cast<unsigned>((dims.nq + 7) / 8);
    if (blocks)
      check(driver().cuLaunchKernel(m.delta, blocks, unsigned(dims.hq), unsigned(dims.batch), 256, 1, 1, 0, stream,
                                    params, nullptr),
            "cuLaunchKernel");
  }
  BwdArgs a{};
  setInputs(a, qo, ko, vo);
  a.dO = go.data;
  a.gsb = go.sb, a.gsh = go.sh, a.gsn = go.sn;
  a.lse = static_cast<const float *>(lse.data), a.lsb = lse.strides[0], a.lsh = lse.strides[1],
  a.lsn = lse.strides[2];
  a.delta = delta.get<float>();
  a.dq = dqAcc.get<float>(), a.dk = dkAcc.get<float>(), a.dv = dvAcc.get<float>();
  a.heads = static_cast<int32_t>(dims.hq);
  a.ratio = static_cast<int32_t>(dims.hq / dims.hkv);
  a.d = static_cast<int32_t>(dims.d);
  a.nq = static_cast<int32_t>(dims.nq);
  a.nk = static_cast<int32_t>(dims.nk);
  a.first = static_cast<int32_t>(dims.first >= 0 ? dims.first : dims.nk - dims.nq);
  a.scale = scale;
  a.scaleLog2 = scale * 1.4426950408889634f;
  a.capIn = mods.capPre * scale, a.capOutLog2 = mods.capPost * 1.4426950408889634f;
  a.capGrad = mods.capPre * mods.capPost;
  std::unique_ptr<DeviceBuffer> slopeF32, slopeSums;
  if (floats.slope) {
    slopeF32 = headValues(m, stream, *floats.slope, dims.hq);
    a.slope = slopeF32->get<float>(), a.slopeSign = mods.slopeSign;
    if (floats.slopeGrad) {
      slopeSums = headSums(m, stream, dims.hq);
      a.dSlope = slopeSums->get<float>();
    }
  }
  a.setOfHead = tabs->setOfHead;
  // Each set's launches over `slices` (batch x key/value heads, or one slice of a pattern that reads data).
  auto runSet = [&](const DeviceTables::Set &set, BwdArgs &args, int64_t slices) {
    args.items = set.bwdItems, args.keys = set.bwdKeys, args.rows = set.bwdRows, args.masks = set.bwdMasks;
    args.full = set.bwdFull;
    for (const Launch &l : set.host.bwdLaunches) {
      if (l.itemCount == 0)
        continue;
      args.itemBegin = l.itemBegin;
      launch(f, unsigned(l.itemCount), unsigned(slices), 128, bwdSmemBytes(dp), stream, &args);
    }
  };
  for (size_t s = 0; s < tabs->sets.size(); ++s) {
    if (!data) {
      a.set = static_cast<int32_t>(s);
      runSet(tabs->sets[s], a, dims.batch * dims.hkv);
      continue;
    }
    // A data call: each (batch, query head) slice alone, its rows of every tensor and accumulator.
    for (const auto &[b, h] : tabs->slicesOfSet[s]) {
      BwdArgs one = a;
      const int64_t g = h / (dims.hq / dims.hkv), bh = b * dims.hq + h, bg = b * dims.hkv + g;
      sliceInputs(one, a, b, h, g);
      one.dO = sliceAt(a.dO, b, h, a.gsb, a.gsh);
      one.lse = a.lse + b * a.lsb + h * a.lsh;
      one.delta = a.delta + bh * dims.nq;
      one.dq = a.dq + size_t(bh * dims.nq) * dp;
      one.dk = a.dk + size_t(bg * dims.nk) * dp, one.dv = a.dv + size_t(bg * dims.nk) * dp;
      one.heads = 1, one.ratio = 1, one.set = 0, one.setOfHead = nullptr;
      if (a.slope)
        one.slope = a.slope + h;
      if (a.dSlope)
        one.dSlope = a.dSlope + h;
      runSet(tabs->sets[s], one, 1);
    }
  }
  copy(m, stream, contiguous(dqAcc.get<void>(), ATTNC_DTYPE_F32, dims.batch, dims.hq, dims.nq, dp),
       viewOf(dq, dims.d), dims.d);
  View dkSrc = contiguous(dkAcc.get<void>(), ATTNC_DTYPE_F32, dims.batch, dims.hkv, dims.nk, dp);
  View dvSrc = contiguous(dvAcc.get<void>(), ATTNC_DTYPE_F32, dims.batch, dims.hkv, dims.nk, dp);
  dkSrc.cols = dvSrc.cols = static_cast<int32_t>(dims.d);
  copy(m, stream, dkSrc, viewOf(dk, dims.d), dims.d);
  copy(m, stream, dvSrc, viewOf(dv, dims.d), dims.d);
  if (slopeSums)
    writeHeadGrad(m, stream, *slopeSums, *floats.slopeGrad, dims.hq);
  if (floats.sinkGrad) { // -sum over rows of e^(z - lse) delta, per query head
    const std::unique_ptr<DeviceBuffer> sinkF32 = headValues(m, stream, *floats.sink, dims.hq),
                                        sums = headSums(m, stream, dims.hq);
    View lv = viewOf(lse, 1);
    float *deltaPtr = delta.get<float>(), *sinkPtr = sinkF32->get<float>(), *sumsPtr = sums->get<float>();
    void *params[] = {&lv, &deltaPtr, &sinkPtr, &sumsPtr};
    const unsigned blocks = static_cast<unsigned>((dims.nq + 255) / 256);
    if (blocks)
      check(driver().cuLaunchKernel(m.sinkGrad, blocks, unsigned(dims.hq), unsigned(dims.batch), 256, 1, 1, 0, stream,
                                    params, nullptr),
            "cuLaunchKernel");
    writeHeadGrad(m, stream, *sums, *floats.sinkGrad, dims.hq);
  }
}

void Engine::checkModifiers(const HeadTensors &floats) const {
  if (!unsupported_.empty())
    throw RunError{ATTNC_ERROR_UNSUPPORTED, unsupported_};
  for (const auto &[in, values, grad, what] :
       {std::tuple{&modifiers_.slope, floats.slope, floats.slopeGrad, "slopes"},
        {&modifiers_.sink, floats.sink, floats.sinkGrad, "sink logits"}})
    if (bool(*in) != (values != nullptr) || (grad && !values))
      throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, std::string("a GPU call ") +
                                                       (values ? "gave " + std::string(what) + " to a pattern without them"
                                                               : "to a pattern with " + std::string(what) +
                                                                     " gave none")};
}

} // namespace attnc::rt::cuda
