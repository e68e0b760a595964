/*===- attnc.h - The attnc runtime C ABI ----------------------------------===*
 *
 * Load a compiled attention kernel (a file written by `attnc compile` or by
 * the JIT), inspect its metadata and run it on Q, K, V of shape
 * [batch, heads, n, d] with explicit strides, writing O of the same shape:
 *
 *   O[b, h, i, :] = sum_{j in S_h(i)} softmax_j(scale * Q[b,h,i,:] . K[b,h,j,:]) V[b,h,j,:]
 *
 * where S_h(i) is the key set of query i in head h for the sequence length n
 * of the call, and scale = 1/sqrt(d) unless the options say otherwise. A row
 * whose key set is empty produces zeros. n is a run-time argument: one
 * kernel serves every sequence length.
 *
 * Every function returns a status code; on failure attnc_last_error() gives
 * a message for the calling thread. Nothing here aborts the process.
 *
 * Training: attnc_run_forward also writes each row's log-sum-exp, which
 * attnc_run_backward takes with dO to compute dQ, dK and dV.
 *
 * ABI versioning: ATTNC_ABI_VERSION changes when this header changes; a
 * kernel file records the ABI it was built for and attnc_kernel_load takes
 * files of this version and of every older one it still implements
 * (ATTNC_OLDEST_ABI_VERSION), refusing others (ATTNC_ERROR_ABI_MISMATCH).
 * Version 2 added attnc_run_forward and attnc_run_backward; every version-1
 * call and kernel file works unchanged.
 *
 *===----------------------------------------------------------------------===*/
#ifndef ATTNC_ATTNC_H
#define ATTNC_ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_ABI_VERSION 2
#define ATTNC_OLDEST_ABI_VERSION 1

#if defined(__GNUC__)
#define ATTNC_API __attribute__((visibility("default")))
#else
#define ATTNC_API
#endif

typedef enum attnc_status {
  ATTNC_OK = 0,
  ATTNC_ERROR_INVALID_ARGUMENT = 1, /**< a null pointer, n = 0, a bad option */
  ATTNC_ERROR_IO = 2,               /**< a file cannot be read or written */
  ATTNC_ERROR_CORRUPT_KERNEL = 3,   /**< not a kernel file, truncated, bad checksum */
  ATTNC_ERROR_ABI_MISMATCH = 4,     /**< built for another ATTNC_ABI_VERSION */
  ATTNC_ERROR_SHAPE = 5,            /**< shapes of Q, K, V, O disagree or fit no head count */
  ATTNC_ERROR_DTYPE = 6,            /**< a dtype the kernel was not built for */
  ATTNC_ERROR_STRIDE = 7,           /**< a stride that is not positive or overlaps */
  ATTNC_ERROR_COMPILE = 8,          /**< the JIT could not compile the pattern */
  ATTNC_ERROR_UNSUPPORTED = 9,      /**< e.g. a target this machine cannot run */
  ATTNC_ERROR_OUT_OF_MEMORY = 10,
  ATTNC_ERROR_INTERNAL = 11         /**< a bug in attnc */
} attnc_status;

typedef enum attnc_dtype {
  ATTNC_DTYPE_F32 = 0,
  ATTNC_DTYPE_BF16 = 1, /**< bfloat16 (uint16_t elements): computed and accumulated in f32 */
  ATTNC_DTYPE_F16 = 2   /**< reserved */
} attnc_dtype;

/** A strided 4-D view [batch, heads, n, d]. Strides are in elements. */
typedef struct attnc_tensor {
  void *data;
  attnc_dtype dtype;
  int64_t shape[4];
  int64_t strides[4];
} attnc_tensor;

typedef struct attnc_run_options {
  /** Softmax scale; 0 means 1/sqrt(d). */
  float scale;
  /** Worker threads; 0 means $ATTNC_NUM_THREADS or every core. */
  int32_t num_threads;
} attnc_run_options;

typedef struct attnc_kernel attnc_kernel;

/** Loads a kernel file. On success *out owns the kernel. */
ATTNC_API attnc_status attnc_kernel_load(const char *path, attnc_kernel **out);

/**
 * Loads a kernel from the bytes of a kernel file in memory (what
 * attnc_kernel_load reads from disk; the JIT hands its kernels over this
 * way). The bytes are copied: the caller may free them on return.
 */
ATTNC_API attnc_status attnc_kernel_load_memory(const void *bytes, size_t size, attnc_kernel **out);

/** Frees a kernel (null is allowed). */
ATTNC_API void attnc_kernel_free(attnc_kernel *kernel);

/**
 * A metadata value of a loaded kernel, or null when the key is unknown.
 * Keys: "pattern", "params" ("l=128,c=8"), "heads", "dtype", "target",
 * "backend", "abi_version", "source_hash", "compiler_version", and
 * "source" (the pattern's source text). The string
 * lives as long as the kernel.
 */
ATTNC_API const char *attnc_kernel_metadata(const attnc_kernel *kernel, const char *key);

/**
 * Number of heads the pattern declares (`heads H` or `head K attends`):
 * tensors must then have shape[1] == H. 0 when the pattern declares none: its
 * one set then applies to every head, whatever shape[1] is.
 */
ATTNC_API int64_t attnc_kernel_num_heads(const attnc_kernel *kernel);

/**
 * Runs the kernel: O = attention(Q, K, V). All four tensors must have the same
 * shape [B, H, n, d] with B >= 1, H == attnc_kernel_num_heads (any H >= 1 when
 * that is 0), n >= 1,
 * d >= 1, positive strides, and dtype f32 or bf16: q, k and v share one, o
 * may be either (bf16 output is rounded to nearest even). `options` may be null.
 */
ATTNC_API attnc_status attnc_run(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                       const attnc_tensor *v, attnc_tensor *o, const attnc_run_options *options);

/**
 * attnc_run that also writes each row's log-sum-exp of its scaled scores,
 * lse[b, h, i] = log(sum_{j in S_h(i)} exp(scale * Q[b,h,i,:] . K[b,h,j,:])),
 * as attnc_run_backward needs it: an f32 tensor of shape [B, H, n, 1] (any
 * positive strides; its last stride is not read) that overlaps none of the
 * other tensors (ATTNC_ERROR_INVALID_ARGUMENT). A row with no keys gets
 * -inf (and zeros in O). lse may be null (then this is attnc_run). Backends
 * without it (sparsifier) return ATTNC_ERROR_UNSUPPORTED.
 */
ATTNC_API attnc_status attnc_run_forward(const attnc_kernel *kernel, const attnc_tensor *q,
                                         const attnc_tensor *k, const attnc_tensor *v, attnc_tensor *o,
                                         attnc_tensor *lse, const attnc_run_options *options);

/**
 * The gradients of L = sum(O * dO) with respect to Q, K and V, where O =
 * attention(Q, K, V) as attnc_run computes it with the same options (scale):
 *
 *   P = softmax rows of scale Q K^T over each row's keys (recomputed from lse)
 *   dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),
 *   dQ = scale dS K,   dK = scale dS^T Q.
 *
 * q, k, v, o, d_o, d_q, d_k, d_v: shape [B, H, n, d] as for attnc_run (f32
 * or bf16; the inputs q, k, v, o, d_o share one dtype; the gradients may be
 * either); lse: f32 [B, H, n, 1] from attnc_run_forward. d_q, d_k and d_v
 * are overwritten and must not overlap the inputs (lse included) or each other. A row with
 * no keys gives zero dQ; a key that no row attends gets zero dK and dV.
 * Backends without a backward pass (sparsifier, halide) return
 * ATTNC_ERROR_UNSUPPORTED.
 */
ATTNC_API attnc_status attnc_run_backward(const attnc_kernel *kernel, const attnc_tensor *q,
                                          const attnc_tensor *k, const attnc_tensor *v,
                                          const attnc_tensor *o, const attnc_tensor *d_o,
                                          const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k,
                                          attnc_tensor *d_v, const attnc_run_options *options);

/** The message of the last failure on this thread ("" if none). */
ATTNC_API const char *attnc_last_error(void);

/** A short name of a status code: "ATTNC_ERROR_SHAPE". */
ATTNC_API const char *attnc_status_name(attnc_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNC_ATTNC_H */
