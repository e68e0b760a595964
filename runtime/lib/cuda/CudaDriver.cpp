//===- CudaDriver.cpp - The CUDA driver API, opened at first use ----------===//
#include "CudaDriver.h"

#include "../backends/Backend.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>

namespace attnc::rt::cuda {

namespace {

struct Opened {
  Driver api{};
  std::string error; ///< why there is no driver ("" when there is)
};

template <class F> bool find(void *lib, const char *name, F &slot) {
  slot = reinterpret_cast<F>(dlsym(lib, name));
  return slot != nullptr;
}

Opened open() {
  Opened o;
  // ATTNC_CUDA_DRIVER names another library (tests point it at a missing
  // file to take the no-driver path on a machine that has one).
  const char *env = std::getenv("ATTNC_CUDA_DRIVER");
  const char *path = env && *env ? env : "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = dlerror();
    o.error = std::string("no CUDA driver: ") + path + " cannot be opened (" + (why ? why : "unknown") +
              "); the cuda target needs an NVIDIA GPU and its driver";
    return o;
  }
  Driver &d = o.api;
  const bool all =
      find(lib, "cuInit", d.cuInit) &&
      find(lib, "cuDeviceGetCount", d.cuDeviceGetCount) && find(lib, "cuDeviceGet", d.cuDeviceGet) &&
      find(lib, "cuDeviceGetName", d.cuDeviceGetName) && find(lib, "cuDeviceGetAttribute", d.cuDeviceGetAttribute) &&
      find(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain) &&
      find(lib, "cuCtxPushCurrent_v2", d.cuCtxPushCurrent) && find(lib, "cuCtxPopCurrent_v2", d.cuCtxPopCurrent) &&
      find(lib, "cuModuleLoadData", d.cuModuleLoadData) && find(lib, "cuModuleGetFunction", d.cuModuleGetFunction) &&
      find(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute) && find(lib, "cuLaunchKernel", d.cuLaunchKernel) &&
      find(lib, "cuMemAlloc_v2", d.cuMemAlloc) && find(lib, "cuMemFree_v2", d.cuMemFree) &&
      find(lib, "cuMemAllocAsync", d.cuMemAllocAsync) && find(lib, "cuMemFreeAsync", d.cuMemFreeAsync) &&
      find(lib, "cuMemPoolCreate", d.cuMemPoolCreate) && find(lib, "cuMemPoolSetAttribute", d.cuMemPoolSetAttribute) &&
      find(lib, "cuMemAllocFromPoolAsync", d.cuMemAllocFromPoolAsync) &&
      find(lib, "cuMemcpyHtoD_v2", d.cuMemcpyHtoD) && find(lib, "cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync) &&
      find(lib, "cuMemsetD8Async", d.cuMemsetD8Async) &&
      find(lib, "cuMemsetD32Async", d.cuMemsetD32Async) &&
      find(lib, "cuStreamGetCtx", d.cuStreamGetCtx) && find(lib, "cuStreamSynchronize", d.cuStreamSynchronize) &&
      find(lib, "cuPointerGetAttribute", d.cuPointerGetAttribute) &&
      find(lib, "cuGetErrorString", d.cuGetErrorString) && find(lib, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH) &&
      find(lib, "cuEventCreate", d.cuEventCreate) && find(lib, "cuEventRecord", d.cuEventRecord) &&
      find(lib, "cuEventSynchronize", d.cuEventSynchronize) &&
      find(lib, "cuEventElapsedTime", d.cuEventElapsedTime) && find(lib, "cuEventDestroy_v2", d.cuEventDestroy);
  if (!all) {
    o.error = std::string("the CUDA driver ") + path +
              " lacks functions attnc needs (CUDA 11.2 or newer: cuMemAllocAsync); update the NVIDIA driver";
    return o;
  }
  if (CUresult r = d.cuInit(0); r != kSuccess) {
    const char *text = nullptr;
    d.cuGetErrorString(r, &text);
    o.error = std::string("the CUDA driver did not start (cuInit: ") + (text ? text : std::to_string(r)) +
              "): no usable NVIDIA GPU";
    return o;
  }
  int count = 0;
  if (d.cuDeviceGetCount(&count) != kSuccess || count == 0)
    o.error = "the CUDA driver sees no GPU";
  return o;
}

} // namespace

const Driver &driver() {
  static const Opened opened = open();
  if (!opened.error.empty())
    throw RunError{ATTNC_ERROR_UNSUPPORTED, opened.error};
  return opened.api;
}

std::string errorText(CUresult r) {
  const char *text = nullptr;
  driver().cuGetErrorString(r, &text);
  return "CUDA error " + std::to_string(r) + (text ? std::string(": ") + text : std::string());
}

void check(CUresult r, const char *what) {
  if (r == kSuccess)
    return;
  // Out of device memory is the caller's to handle; anything else is a
  // failure of the call, reported with the driver's words.
  const attnc_status status = r == 2 /*CUDA_ERROR_OUT_OF_MEMORY*/ ? ATTNC_ERROR_OUT_OF_MEMORY : ATTNC_ERROR_INTERNAL;
  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED / _INVALIDATED: what a first call does is not capturable.
  const char *capture = r == 900 || r == 901 ? " (under CUDA graph capture: the first call at a length uploads its "
                                               "tables, and the first call on a device loads the GPU code, neither "
                                               "capturable; run one call at each length before capturing)"
                                             : "";
  throw RunError{status, std::string(what) + " failed: " + errorText(r) + capture};
}

ScopedContext::ScopedContext(int index) {
  const Driver &d = driver();
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (index < 0 || index >= count)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "CUDA device " + std::to_string(index) + " does not exist (this "
                                                 "machine has " + std::to_string(count) + ")"};
  // Primary contexts are retained once per device for the process.
  static std::mutex mutex;
  static CUcontext contexts[64] = {};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (index >= 64)
      throw RunError{ATTNC_ERROR_UNSUPPORTED, "attnc handles CUDA devices 0-63"};
    if (!contexts[index]) {
      CUdevice dev;
      check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
      check(d.cuDevicePrimaryCtxRetain(&contexts[index], dev), "cuDevicePrimaryCtxRetain");
    }
    ctx_ = contexts[index];
  }
  check(d.cuCtxPushCurrent(ctx_), "cuCtxPushCurrent");
  pushed_ = true;
}

ScopedContext::~ScopedContext() {
  if (pushed_) {
    CUcontext popped;
    driver().cuCtxPopCurrent(&popped);
  }
}

DeviceInfo deviceInfo(int index) {
  const Driver &d = driver();
  CUdevice dev;
  check(d.cuDeviceGet(&dev, index), "cuDeviceGet");
  DeviceInfo info;
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  info.name = name;
  check(d.cuDeviceGetAttribute(&info.major, kAttrComputeMajor, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&info.minor, kAttrComputeMinor, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&info.smemOptIn, kAttrSmemOptIn, dev), "cuDeviceGetAttribute");
  return info;
}

void *deviceAlloc(int index, size_t bytes) {
  ScopedContext ctx(index);
  CUdeviceptr p = 0;
  check(driver().cuMemAlloc(&p, bytes ? bytes : 1), "cuMemAlloc");
  return reinterpret_cast<void *>(static_cast<uintptr_t>(p));
}

void deviceFree(int index, void *ptr) {
  ScopedContext ctx(index);
  check(driver().cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr))), "cuMemFree");
}

void deviceCopy(int index, void *dst, const void *src, size_t bytes, bool toDevice) {
  ScopedContext ctx(index);
  if (toDevice)
    check(driver().cuMemcpyHtoD(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(dst)), src, bytes),
          "cuMemcpyHtoD");
  else
    check(driver().cuMemcpyDtoH(dst, static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(src)), bytes),
          "cuMemcpyDtoH");
}

void zeroRows(int index, void *stream, const attnc_tensor &t, int64_t row0, int64_t rows) {
  ScopedContext ctx(index);
  const size_t element = t.dtype == ATTNC_DTYPE_F32 ? 4 : 2;
  const int64_t d = t.shape[3];
  // One memset per slice when its rows are contiguous, else one per row (per element when d is strided).
  const bool rowsTogether = t.strides[3] == 1 && (rows == 1 || t.strides[2] == d);
  const bool rowTogether = t.strides[3] == 1 || d == 1;
  auto zero = [&](int64_t offset, size_t bytes) {
    const CUdeviceptr p = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(t.data)) +
                          static_cast<CUdeviceptr>(offset) * element;
    check(driver().cuMemsetD8Async(p, 0, bytes, static_cast<CUstream>(stream)), "cuMemsetD8Async");
  };
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h) {
      const int64_t base = b * t.strides[0] + h * t.strides[1] + row0 * t.strides[2];
      if (rowsTogether) {
        zero(base, static_cast<size_t>(rows * d) * element);
        continue;
      }
      for (int64_t i = 0; i < rows; ++i) {
        if (rowTogether) {
          zero(base + i * t.strides[2], static_cast<size_t>(d) * element);
          continue;
        }
        for (int64_t c = 0; c < d; ++c)
          zero(base + i * t.strides[2] + c * t.strides[3], element);
      }
    }
}

CUevent recordEvent(int index) {
  ScopedContext ctx(index);
  CUevent e = nullptr;
  check(driver().cuEventCreate(&e, 0), "cuEventCreate");
  if (CUresult r = driver().cuEventRecord(e, nullptr); r != kSuccess) {
    driver().cuEventDestroy(e);
    check(r, "cuEventRecord");
  }
  return e;
}

float elapsedMs(int index, CUevent start, CUevent end) {
  ScopedContext ctx(index);
  const Driver &d = driver();
  float ms = 0;
  CUresult r = d.cuEventSynchronize(end);
  if (r == kSuccess)
    r = d.cuEventElapsedTime(&ms, start, end);
  d.cuEventDestroy(start);
  d.cuEventDestroy(end);
  check(r, "cuEventElapsedTime");
  return ms;
}

} // namespace attnc::rt::cuda
