//===- KernelAbi.h - The contract between the runtime and generated code --===//
//
// Every kernel shared object exports, for each distinct head set k of its
// pattern (in Pattern::distinctHeads order), a function
//
//   void attnc_head_<k>(const attnc_head_args *args);
//
// that computes one (batch, head) slice: O = softmax(scale * Q K^T masked by
// the CSR) V for contiguous row-major Q, K, V, O of shape [n, d]. `values`
// (nnz floats) and `rows` (3 n floats) are scratch with any contents on
// entry; the kernel initialises what it uses and allocates nothing. Rows with
// no keys get zeros.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attnc_head_args {
  const float *q;
  const float *k;
  const float *v;
  float *o;
  int64_t n;
  int64_t d;
  const int32_t *pos; /* n + 1 */
  const int32_t *crd; /* nnz */
  int64_t nnz;
  float *values;      /* nnz floats of scratch */
  float *rows;        /* 3 * n floats of scratch */
  float scale;
} attnc_head_args;

typedef void (*attnc_head_fn)(const attnc_head_args *args);

/* The halide backend's shared objects (compiler/include/attnc/compiler/HalideGen.h)
 * export instead, with Halide's calling convention (halide_buffer_t *, scalars):
 *
 *   attnc_halide_d<D>(q, k, v, blocks, keys, masks, n, max_chunks, scale, out)
 *       for each D in ATTNC_HALIDE_DIMS, code specialised for head dimension D;
 *   attnc_halide_any(q, k, v, blocks, keys, masks, n, max_chunks, scale, d, out)
 *       for any other d;
 *
 * and the Halide runtime (halide_set_num_threads, halide_set_error_handler). */
#define ATTNC_HALIDE_DIMS {32, 64, 128}

#ifdef __cplusplus
}
#endif
