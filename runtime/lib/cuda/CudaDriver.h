//===- CudaDriver.h - The CUDA driver API, opened at first use ------------===//
//
// libattnc links no CUDA library: the first GPU call opens libcuda.so.1
// with dlopen and looks up the few driver functions the cuda target needs.
// Where there is no driver (or no GPU) every GPU call fails with
// ATTNC_ERROR_UNSUPPORTED saying what is missing; the CPU paths never touch
// this file. The types are the driver API's, declared here so that the
// runtime builds without the CUDA headers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace attnc::rt::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUmemoryPool = struct CUmemPoolHandle_st *;

/// CUmemPoolProps (cuda.h, v1).
struct CUmemPoolProps {
  int allocType;   ///< CU_MEM_ALLOCATION_TYPE_PINNED (1)
  int handleTypes; ///< CU_MEM_HANDLE_TYPE_NONE (0)
  int locationType, locationId; ///< CU_MEM_LOCATION_TYPE_DEVICE (1), the device ordinal
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps as cuda.h lays it out");

/// The driver functions attnc calls (names as libcuda exports them).
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext *);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuStreamGetCtx)(CUstream, CUcontext *);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuPointerGetAttribute)(void *, int, CUdeviceptr);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  // For attnc's own tools (attnc_internal_cuda_*: `attnc bench --target cuda`).
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
};

// The enum values attnc uses (cuda.h).
inline constexpr CUresult kSuccess = 0;
inline constexpr int kAttrComputeMajor = 75, kAttrComputeMinor = 76, kAttrSmemOptIn = 97;
inline constexpr int kFuncMaxDynamicShared = 8, kFuncPreferredCarveout = 9;
inline constexpr int kPointerMemoryType = 2, kPointerDeviceOrdinal = 9;
inline constexpr int kMemoryTypeHost = 1, kMemoryTypeDevice = 2, kMemoryTypeUnified = 4;
inline constexpr int kMemPoolReleaseThreshold = 4; ///< CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (cuuint64_t)

/// The driver, opened and initialised once; throws RunError
/// (ATTNC_ERROR_UNSUPPORTED) saying why there is none.
const Driver &driver();

/// Throws RunError with `what` and the driver's message when r fails.
void check(CUresult r, const char *what);

/// "CUDA_ERROR_...: message" of a driver result.
std::string errorText(CUresult r);

/// The context of device `index` (its primary context, as PyTorch uses)
/// current on this thread for the object's lifetime.
class ScopedContext {
public:
  explicit ScopedContext(int index);
  ~ScopedContext();
  ScopedContext(const ScopedContext &) = delete;
  ScopedContext &operator=(const ScopedContext &) = delete;
  CUcontext get() const { return ctx_; }

private:
  CUcontext ctx_ = nullptr;
  bool pushed_ = false;
};

/// A GPU's name and compute capability ("NVIDIA H100 80GB HBM3", 9, 0), and
/// the most shared memory a CTA may opt into there (227 KB on 9.0, 163 KB on
/// 8.0, 99 KB on 8.6 and 8.9).
struct DeviceInfo {
  std::string name;
  int major = 0, minor = 0;
  int smemOptIn = 0;
};
DeviceInfo deviceInfo(int index);

// GPU memory and timing for attnc's own tools (Internal.h's
// attnc_internal_cuda_*). Each makes device `index`'s context current and
// throws RunError on failure.
void *deviceAlloc(int index, size_t bytes);
void deviceFree(int index, void *ptr);
void deviceCopy(int index, void *dst, const void *src, size_t bytes, bool toDevice);
/// Zeros rows [row0, row0 + rows) of every [b, h] slice of device tensor
/// `t`, on `stream` of device `index` (its context current).
void zeroRows(int index, void *stream, const attnc_tensor &t, int64_t row0, int64_t rows);
/// Records an event on the legacy default stream of device `index`.
CUevent recordEvent(int index);
/// Waits for `end` and returns the milliseconds from `start` to it; destroys both.
float elapsedMs(int index, CUevent start, CUevent end);

} // namespace attnc::rt::cuda
