//===- Internal.h - Runtime hooks for attnc's own libraries ---------------===//
//
// Not part of the public ABI: used by libattnc_jit so that its failures are
// reported through the same attnc_last_error() as the runtime's, and by the
// attnc tool for GPU memory and timing (`attnc bench --target cuda`) through
// the driver the runtime opens. These may change in any release.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"

#ifdef __cplusplus
extern "C" {
#endif

ATTNC_API void attnc_internal_set_last_error(const char *message);

/*
 * CUDA device `device`: memory, copies and event timing on its legacy default
 * stream (where attnc_run_forward_on queues a call whose attnc_device has a
 * null stream). Each returns ATTNC_OK or a status with attnc_last_error()
 * saying why: this libattnc built without the cuda target, no driver, no such
 * device (ATTNC_ERROR_UNSUPPORTED / INVALID_ARGUMENT), out of device memory.
 */
ATTNC_API attnc_status attnc_internal_cuda_alloc(int32_t device, size_t bytes, void **ptr);
ATTNC_API attnc_status attnc_internal_cuda_free(int32_t device, void *ptr);
/** to_device 1: host `src` to device `dst`; 0: device `src` to host `dst`. */
ATTNC_API attnc_status attnc_internal_cuda_copy(int32_t device, void *dst, const void *src, size_t bytes,
                                                int32_t to_device);
/**
 * With *timer null: records a start event and returns it in *timer. With a
 * timer from that call: records an end event, waits for it, writes the
 * milliseconds between the two to *ms and frees the timer.
 */
ATTNC_API attnc_status attnc_internal_cuda_timer(int32_t device, void **timer, float *ms);
/**
 * Forces the GPU forward kernel's variant in every later call of this
 * process: 0 the default, 1-3 the others of bf16 at d <= 64, 4 the wgmma
 * kernel (bf16 and fp16 at d <= 128), 5 the wgmma kernel with 3 key tiles in
 * flight (d <= 64; above, 4's) — 4 and 5 on compute capability 9.0 only: a
 * call elsewhere is ATTNC_ERROR_UNSUPPORTED — as ATTNC_CUDA_FWD_VARIANT names
 * them; -1 none forced (a kernel's cuda_tuned metadata, or the environment,
 * decides). `attnc tune --target cuda` measures each with it.
 * ATTNC_ERROR_INVALID_ARGUMENT outside -1..5.
 */
ATTNC_API attnc_status attnc_internal_cuda_forward_variant(int32_t variant);
/**
 * Forces the GPU backward's variant in every later call of this process: 0
 * the default, 1 the wgmma kernel (bf16 and fp16 at d <= 128, compute
 * capability 9.0 only: a call elsewhere is ATTNC_ERROR_UNSUPPORTED), as
 * ATTNC_CUDA_BWD_VARIANT names them; -1 none forced (the environment
 * decides). ATTNC_ERROR_INVALID_ARGUMENT outside -1..1.
 */
ATTNC_API attnc_status attnc_internal_cuda_backward_variant(int32_t variant);
/** The device's name (NUL-terminated, at most size - 1 bytes) and compute capability. */
ATTNC_API attnc_status attnc_internal_cuda_device(int32_t device, char *name, size_t size, int32_t *major,
                                                  int32_t *minor);

#ifdef __cplusplus
}
#endif
