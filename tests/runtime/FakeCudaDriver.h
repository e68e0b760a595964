//===- FakeCudaDriver.h - A CUDA driver without a GPU, for host tests -----===//
//
// libattnc_fake_cuda.so exports the driver functions libattnc opens
// (CudaDriver.cpp) and runs them on the host: "device memory" is host
// memory it allocated and tracks, a launch is recorded (kernel, grid, block,
// shared memory, stream, a copy of its arguments) and computes nothing. It
// enforces the rules of the real driver that the host side could break:
// pointer attributes of memory it did not allocate, memsets and copies past
// an allocation's end, launches beyond the dimension limits or the kernel's
// dynamic shared memory, unknown streams. Point ATTNC_CUDA_DRIVER at it and
// the cuda target's host side (checks, tables, launches, packing) runs and
// is inspected here, with no GPU (CudaHostTest.cpp, bench/CudaHostBench.cpp).
//
// ATTNC_FAKE_CUDA_DEVICES lists the devices' compute capabilities
// ("9.0,8.0", the default: device 0 a Hopper, device 1 an Ampere). A stream
// is one of attnc_fake_cuda_stream's; a capture is modelled (below).
// ATTNC_FAKE_CUDA_NO_DATA=1 skips the memsets' writes (a benchmark's
// gigabytes of zeros would be the fake's time, not attnc's);
// ATTNC_FAKE_CUDA_NO_POOLS=1 makes no memory pool (as a driver without them).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stddef.h>
#include <stdint.h>

extern "C" {

/// One recorded cuLaunchKernel.
struct attnc_fake_launch {
  char name[64];
  unsigned grid[3], block[3], smem;
  void *stream;
  /// The kernel's parameters as the launch passed them, packed one after
  /// another (FwdArgs / BwdArgs; View, View, int32 for attnc_copy; View,
  /// View, float * for attnc_delta).
  unsigned char args[512];
  size_t argBytes;
};

/// What the host side asked of the driver since the last reset.
struct attnc_fake_counts {
  long moduleLoads, allocs, frees, asyncAllocs, poolAllocs, asyncFrees, copiesToDevice, memsets, pointerQueries, launches;
  long copiesToHost, syncs; ///< cuMemcpyDtoH, cuStreamSynchronize
  /// Time spent inside the fake's driver functions (a benchmark of the
  /// host side takes it off: it is not attnc's).
  long long nanoseconds;
};

/// Clears the launch log and the counts (allocations stay).
void attnc_fake_cuda_reset(void);
attnc_fake_counts attnc_fake_cuda_counts(void);
int attnc_fake_cuda_launch_count(void);
/// The i-th launch since the reset (null outside the log).
const attnc_fake_launch *attnc_fake_cuda_launch(int i);
/// A stream of `device`'s context (cuStreamGetCtx gives that context).
void *attnc_fake_cuda_stream(int device);
/// Starts (1) or ends (0) a CUDA graph capture on `stream`, as
/// cuStreamBeginCapture in the global mode would: while it lasts, what the
/// real driver forbids (a query of the stream, synchronous allocations,
/// frees and copies, work on the legacy default stream) fails with
/// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture.
/// Ending returns whether the capture was still valid.
int attnc_fake_cuda_capture(void *stream, int on);
/// Device memory of `device` (what cuMemAlloc would give on it), and its release.
void *attnc_fake_cuda_alloc(int device, size_t bytes);
void attnc_fake_cuda_free(void *ptr);
/// Whether [ptr, ptr + bytes) lies inside one live allocation.
int attnc_fake_cuda_is_device(const void *ptr, size_t bytes);
/// The same, or inside one freed in stream order since the last reset (a
/// call's buffers, gone when it returns, are kept until then).
int attnc_fake_cuda_was_device(const void *ptr, size_t bytes);
/// Pools made on `device` (cuMemPoolCreate), and the release threshold set
/// on the last of them (0 where none was set).
int attnc_fake_cuda_pools(int device);
unsigned long long attnc_fake_cuda_pool_threshold(int device);
}
