/*===- attnc.h - The attnc runtime C ABI ----------------------------------===*
 *
 * Load a compiled attention kernel (a file written by `attnc compile` or by
 * the JIT), inspect its metadata and run it on Q of shape [batch, Hq, nq, d]
 * and K, V of shape [batch, Hkv, nk, d] with explicit strides, writing O of
 * Q's shape:
 *
 *   O[b, h, r, :] = sum_{j in S_h(p)} softmax_j(scale * Q[b,h,r,:] . K[b,g,j,:]) V[b,g,j,:]
 *
 * where S_h(p) is the key set of position p in head h for the sequence
 * length nk of the call, and scale = 1/sqrt(d) unless the options say
 * otherwise. n is a run-time argument: one kernel serves every length.
 *
 * Shapes (ABI 3):
 *  - Grouped-query attention: Hq is a multiple of Hkv and query head h reads
 *    key/value head g = h / (Hq / Hkv) (Hkv = 1: multi-query). A per-head
 *    pattern's heads are the query heads. K and V are read in place, never
 *    copied per query head.
 *  - Fewer queries than keys (nq <= nk): the queries are the LAST nq
 *    positions of the nk keys, p = r + nk - nq (bottom-right alignment, as
 *    in a decoding step with a key/value cache), so a causal pattern is right
 *    for a cache step unchanged. nq > nk is ATTNC_ERROR_SHAPE.
 *  - Variable-length batches: attnc_run_varlen below.
 *  - Empty calls: batch, Hq, nq or nk of 0 is no work and returns ATTNC_OK
 *    (data pointers of empty tensors may be null); a row whose key set is
 *    empty produces zeros. d = 0 is ATTNC_ERROR_SHAPE.
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
 * Version 2 added attnc_run_forward and attnc_run_backward; version 3 the
 * shapes above (K, V with fewer heads or more rows than Q, empty calls) and
 * the varlen calls; version 4 the devices (attnc_device: CUDA GPUs and
 * their streams, fp16 on them) and the calls that take one; version 5
 * attnc_cpu_isa and the calls with queries at any offset
 * (attnc_run_forward_at, attnc_run_backward_at); version 6 the varlen calls
 * on a device (attnc_run_varlen_on, attnc_run_backward_varlen_on); version 7
 * the calls with queries at an offset on a device (attnc_run_forward_at_on,
 * attnc_run_backward_at_on); version 8 the one call description
 * (attnc_call, attnc_call_init, attnc_forward, attnc_backward), the integer
 * dtypes and the named inputs of patterns that read data (attnc_input);
 * version 9 score modifiers: float inputs, their gradients
 * (attnc_call::d_inputs), attnc_kernel_input_info and attnc_kernel_modifiers;
 * version 10 keys held at positions (attnc_call::key_positions: a cache
 * that dropped keys) and attnc_kernel_last_readers.
 * Every older call and kernel file works unchanged: the attnc_run_* calls
 * are wrappers of attnc_forward and attnc_backward.
 *
 *===----------------------------------------------------------------------===*/
#ifndef ATTNC_ATTNC_H
#define ATTNC_ATTNC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTNC_ABI_VERSION 10
#define ATTNC_OLDEST_ABI_VERSION 1

#if defined(__GNUC__)
#define ATTNC_API __attribute__((visibility("default")))
#else
#define ATTNC_API
#endif

typedef enum attnc_status {
  ATTNC_OK = 0,
  ATTNC_ERROR_INVALID_ARGUMENT = 1, /**< a null pointer, overlapping outputs, bad offsets */
  ATTNC_ERROR_IO = 2,               /**< a file cannot be read or written */
  ATTNC_ERROR_CORRUPT_KERNEL = 3,   /**< not a kernel file, truncated, bad checksum */
  ATTNC_ERROR_ABI_MISMATCH = 4,     /**< built for another ATTNC_ABI_VERSION */
  ATTNC_ERROR_SHAPE = 5,            /**< shapes of Q, K, V, O disagree, fit no head count, overflow */
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
  ATTNC_DTYPE_F16 = 2,  /**< IEEE half (uint16_t elements): on CUDA devices only (ABI 4) */
  ATTNC_DTYPE_I32 = 3,  /**< int32_t: the inputs of patterns that read data (ABI 8) */
  ATTNC_DTYPE_I64 = 4,  /**< int64_t: the same (ABI 8) */
  /** Not a dtype. It widens the enum's range in C++ to every non-negative
      int32, so that the runtime may read and reject any value a C caller
      stores (42 read as an attnc_dtype is undefined behaviour otherwise). */
  ATTNC_DTYPE_MAX_ENUM = 0x7fffffff
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
 * "backend", "abi_version", "source_hash", "compiler_version", "jit_cache_key"
 * (kernels from the JIT's cache), and
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
 * Runs the kernel: O = attention(Q, K, V). q and o have shape [B, Hq, nq, d],
 * k and v [B, Hkv, nk, d] (see the top of this file), with Hq ==
 * attnc_kernel_num_heads (any Hq when that is 0), Hq a multiple of Hkv,
 * nq <= nk, positive strides, and dtype f32 or bf16: q, k and v share one, o
 * may be either (bf16 output is rounded to nearest even). Sizes whose
 * element counts or byte spans overflow are ATTNC_ERROR_SHAPE. `options`
 * may be null.
 */
ATTNC_API attnc_status attnc_run(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                       const attnc_tensor *v, attnc_tensor *o, const attnc_run_options *options);

/**
 * attnc_run that also writes each row's log-sum-exp of its scaled scores,
 * lse[b, h, i] = log(sum_{j in S_h(i)} exp(scale * Q[b,h,i,:] . K[b,h,j,:])),
 * as attnc_run_backward needs it: an f32 tensor of shape [B, H, n, 1] (any
 * positive strides; its last stride is not read) that overlaps none of the
 * other tensors (ATTNC_ERROR_INVALID_ARGUMENT). A row with no keys gets
 * -inf (and zeros in O). Its shape is [B, Hq, nq, 1], Q's rows. lse may be null (then this is attnc_run). Backends
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
 * q, o, d_o, d_q: shape [B, Hq, nq, d]; k, v, d_k, d_v: [B, Hkv, nk, d], as
 * for attnc_run (f32 or bf16; the inputs q, k, v, o, d_o share one dtype;
 * the gradients may be either); lse: f32 [B, Hq, nq, 1] from
 * attnc_run_forward. With Hkv < Hq, d_k and d_v sum over the query heads
 * that share each key/value head. d_q, d_k and d_v
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

/**
 * A variable-length batch (ABI 3): `num_seqs` sequences packed along the n
 * dimension of tensors whose batch is 1. Sequence s has its queries at rows
 * [cu_seqlens_q[s], cu_seqlens_q[s + 1]) of q, o, lse (d_o, d_q) and its
 * keys at rows [cu_seqlens_k[s], cu_seqlens_k[s + 1]) of k, v (d_k, d_v).
 * Each array has num_seqs + 1 entries, starts at 0, never decreases and
 * ends at its tensors' n. cu_seqlens_k may be null: the same offsets as
 * cu_seqlens_q. Each sequence attends within itself under the pattern at
 * its own length (its nq queries bottom-right aligned on its nk keys, nq <=
 * nk); empty sequences are allowed. The layout of FlashAttention's
 * cu_seqlens (int32), so that framework tensors pass as they are.
 */
typedef struct attnc_varlen {
  const int32_t *cu_seqlens_q;
  const int32_t *cu_seqlens_k;
  int64_t num_seqs;
} attnc_varlen;

/** attnc_run_forward over a variable-length batch (lse may be null). */
ATTNC_API attnc_status attnc_run_varlen(const attnc_kernel *kernel, const attnc_tensor *q, const attnc_tensor *k,
                                        const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                                        const attnc_varlen *varlen, const attnc_run_options *options);

/** attnc_run_backward over a variable-length batch. */
ATTNC_API attnc_status attnc_run_backward_varlen(const attnc_kernel *kernel, const attnc_tensor *q,
                                                 const attnc_tensor *k, const attnc_tensor *v,
                                                 const attnc_tensor *o, const attnc_tensor *d_o,
                                                 const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k,
                                                 attnc_tensor *d_v, const attnc_varlen *varlen,
                                                 const attnc_run_options *options);

/**
 * Where a call's tensors live (ABI 4). Every tensor of a call is memory of
 * this one device: the runtime checks each pointer (a CPU pointer in a CUDA
 * call is ATTNC_ERROR_INVALID_ARGUMENT, and so is memory of another GPU).
 */
typedef enum attnc_device_type {
  ATTNC_DEVICE_CPU = 0,
  ATTNC_DEVICE_CUDA = 1, /**< an NVIDIA GPU of compute capability 8.0 or newer */
  ATTNC_DEVICE_TYPE_MAX_ENUM = 0x7fffffff
} attnc_device_type;

typedef struct attnc_device {
  attnc_device_type type;
  /** The CUDA device ordinal (as cudaSetDevice counts them); 0 on the CPU. */
  int32_t index;
  /**
   * The CUstream / cudaStream_t of that device the call is ordered on, or
   * null for the legacy default stream. Calls on a GPU are asynchronous:
   * they return once their work is queued on the stream, as CUDA library
   * calls do, and the caller synchronises with it. Ignored on the CPU.
   */
  void *stream;
} attnc_device;

/**
 * Whether calls on `device` can run here: ATTNC_OK, or
 * ATTNC_ERROR_UNSUPPORTED with attnc_last_error() saying what is missing
 * (no driver, no GPU, a GPU older than compute capability 8.0, a library
 * built without GPU code), or ATTNC_ERROR_INVALID_ARGUMENT (no such device).
 */
ATTNC_API attnc_status attnc_device_check(const attnc_device *device);

/**
 * attnc_run_forward on `device` (null: the CPU). On a CUDA device q, k, v
 * are bf16, fp16 or f32 (f32 is rounded to bf16 for the tensor cores, with
 * f32 accumulation); o any of the three; lse f32 or null; head dimension d
 * at most 256. Any strides; rows of d contiguous elements aligned to 16
 * bytes (d a multiple of 8) are read in place, others are packed first.
 * The device keeps per-length tables from a length's first call on (built
 * once on the host from the plan's closed forms): no code is compiled for
 * any length.
 */
ATTNC_API attnc_status attnc_run_forward_on(const attnc_kernel *kernel, const attnc_device *device,
                                            const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                                            attnc_tensor *o, attnc_tensor *lse, const attnc_run_options *options);

/** attnc_run_backward on `device` (null: the CPU); the dtypes as for attnc_run_forward_on. */
ATTNC_API attnc_status attnc_run_backward_on(const attnc_kernel *kernel, const attnc_device *device,
                                             const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                                             const attnc_tensor *o, const attnc_tensor *d_o, const attnc_tensor *lse,
                                             attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                                             const attnc_run_options *options);

/**
 * attnc_run_varlen on `device` (ABI 6; null: the CPU). On a CUDA device the
 * tensors are as for attnc_run_forward_on and the offsets stay host memory
 * (int32, read before the call returns, as cu_seqlens usually are on the
 * host before a launch); each sequence runs as a call of its own on the
 * device's stream (its tables are per length, shared by the sequences of
 * one length), so a batch pays one launch per sequence.
 */
ATTNC_API attnc_status attnc_run_varlen_on(const attnc_kernel *kernel, const attnc_device *device,
                                           const attnc_tensor *q, const attnc_tensor *k, const attnc_tensor *v,
                                           attnc_tensor *o, attnc_tensor *lse, const attnc_varlen *varlen,
                                           const attnc_run_options *options);

/** attnc_run_backward_varlen on `device` (ABI 6; null: the CPU). */
ATTNC_API attnc_status attnc_run_backward_varlen_on(const attnc_kernel *kernel, const attnc_device *device,
                                                    const attnc_tensor *q, const attnc_tensor *k,
                                                    const attnc_tensor *v, const attnc_tensor *o,
                                                    const attnc_tensor *d_o, const attnc_tensor *lse,
                                                    attnc_tensor *d_q, attnc_tensor *d_k, attnc_tensor *d_v,
                                                    const attnc_varlen *varlen, const attnc_run_options *options);

/**
 * The instruction set of the CPU kernels this process runs (the fused and
 * dense backends): "avx512", "avx2" (with FMA) or "portable" (128-bit
 * vectors: NEON on Arm, SSE2 on x86-64). The best this CPU has, unless
 * ATTNC_FUSED_ISA names one. Where that names kernels this CPU lacks (or no
 * such kernels) this returns null with attnc_last_error() saying why, and
 * the fused and dense backends refuse to load (ATTNC_ERROR_UNSUPPORTED).
 */
ATTNC_API const char *attnc_cpu_isa(void);

/**
 * attnc_run_forward with the nq queries at positions [first_query,
 * first_query + nq) of the nk key positions, not the last nq
 * (attnc_run_forward is first_query = nk - nq). 0 <= first_query <= nk - nq,
 * else ATTNC_ERROR_SHAPE. A part of a sequence's queries (one rank's, in
 * context parallelism) against all of its keys: the pattern is evaluated at
 * the real positions. The CPU backends compute only the rows of the queries
 * (the fused and dense ones skip the others' row blocks).
 */
ATTNC_API attnc_status attnc_run_forward_at(const attnc_kernel *kernel, int64_t first_query, const attnc_tensor *q,
                                            const attnc_tensor *k, const attnc_tensor *v, attnc_tensor *o,
                                            attnc_tensor *lse, const attnc_run_options *options);

/** attnc_run_backward for the queries of attnc_run_forward_at. */
ATTNC_API attnc_status attnc_run_backward_at(const attnc_kernel *kernel, int64_t first_query, const attnc_tensor *q,
                                             const attnc_tensor *k, const attnc_tensor *v, const attnc_tensor *o,
                                             const attnc_tensor *d_o, const attnc_tensor *lse, attnc_tensor *d_q,
                                             attnc_tensor *d_k, attnc_tensor *d_v, const attnc_run_options *options);

/**
 * attnc_run_forward_at on `device` (ABI 7; null: the CPU): a rank's queries
 * on its GPU in context parallelism. The GPU launches the pattern's row
 * blocks of the whole sequence; those without a query of the call end at
 * once.
 */
ATTNC_API attnc_status attnc_run_forward_at_on(const attnc_kernel *kernel, const attnc_device *device,
                                               int64_t first_query, const attnc_tensor *q, const attnc_tensor *k,
                                               const attnc_tensor *v, attnc_tensor *o, attnc_tensor *lse,
                                               const attnc_run_options *options);

/** attnc_run_backward_at on `device` (ABI 7; null: the CPU). */
ATTNC_API attnc_status attnc_run_backward_at_on(const attnc_kernel *kernel, const attnc_device *device,
                                                int64_t first_query, const attnc_tensor *q, const attnc_tensor *k,
                                                const attnc_tensor *v, const attnc_tensor *o, const attnc_tensor *d_o,
                                                const attnc_tensor *lse, attnc_tensor *d_q, attnc_tensor *d_k,
                                                attnc_tensor *d_v, const attnc_run_options *options);

/** The message of the last failure on this thread ("" if none). */
/**
 * One input of a pattern that reads data (`input NAME : int[DIMS]`, ABI 8):
 * its declared name and its values, int32 or int64, as a tensor of shape
 * [B, H, D1, D2] with explicit strides (in elements): B is 1 (every
 * sequence of the batch shares it) or the batch, H is 1 (every head shares
 * it) or the query heads, D1 and D2 are the declaration's dimensions at the
 * call's key length n (D2 = 1 for a 1-D input). Values are checked before
 * anything is computed: a block id that a selection `j / B in sel[...]`
 * reads must lie in [-1, ceil(n / B)) (-1: no block), a token id of
 * `j in top[i]` in [-1, n); a call whose data a pattern would read out of
 * range fails with ATTNC_ERROR_INVALID_ARGUMENT naming the input. On a
 * CUDA device (attnc_call::device) the values are memory of that device,
 * read on the host after the call waits for its stream (such a call cannot
 * be captured into a CUDA graph); float inputs there stay on the device.
 */
typedef struct attnc_input {
  const char *name;
  attnc_tensor values;
} attnc_input;

/*
 * Float inputs (ABI 9): `input NAME : float[DIMS]`, read by a pattern's
 * `score` and `sink` (ALiBi slopes, sink logits, relative-bias tables), are
 * attnc_inputs too: f32 or bf16, shape[0 .. rank) the declaration's
 * dimensions at the call's key length n and query head count (`heads`),
 * shape[rank .. 4) = 1, any strides. The whole call shares them (no batch
 * or head broadcast). Their gradients come back from attnc_backward through
 * attnc_call::d_inputs.
 */


/** attnc_call::first_query when the queries are the last nq of nk positions. */
#define ATTNC_LAST_QUERIES (-1)

/**
 * Everything one call takes (ABI 8): the tensors, where it runs, where its
 * queries sit, varlen offsets and the pattern's inputs. `size` is
 * sizeof(attnc_call) as the caller's header declares it, so that later
 * versions can add fields at the end and still read older callers' calls:
 * start from attnc_call_init, then set what the call uses.
 *
 * Forward (attnc_forward): q, k, v in; o out; lse out when not null.
 * Backward (attnc_backward): q, k, v, o, d_o and lse (the forward's) in;
 * d_q, d_k, d_v out. Tensors a pass does not use must be null.
 */
typedef struct attnc_call {
  size_t size;
  const attnc_tensor *q, *k, *v;
  attnc_tensor *o;   /**< forward: written; backward: read */
  attnc_tensor *lse; /**< forward: written when not null; backward: read */
  const attnc_tensor *d_o;
  attnc_tensor *d_q, *d_k, *d_v;
  /** null: the CPU. */
  const attnc_device *device;
  /** Position of the first query among the keys; ATTNC_LAST_QUERIES: nk - nq. */
  int64_t first_query;
  /** null: one sequence per batch entry. */
  const attnc_varlen *varlen;
  /** The pattern's inputs, each by its declared name (none: null and 0). */
  const attnc_input *inputs;
  int64_t num_inputs;
  /** null: the defaults. */
  const attnc_run_options *options;
  /**
   * Backward (ABI 9): the gradients of float inputs, each named as its
   * input and written (overwritten) as f32 of the input's shape; inputs
   * not named get none. Forward: must be null.
   */
  const attnc_input *d_inputs;
  int64_t num_d_inputs;
  /**
   * Forward, CPU, fused backend (ABI 10): null, or nk strictly ascending
   * positions >= 0, the position of each key row (k and v hold only those
   * keys: a generation cache that dropped the keys no later query reads,
   * see attnc_kernel_last_readers). The queries are then at positions
   * [first_query, first_query + nq), by default (ATTNC_LAST_QUERIES)
   * ending at the last key's position, and the pattern is evaluated at
   * length max(last key position, last query position) + 1. A query whose
   * keys include a position not held fails with
   * ATTNC_ERROR_INVALID_ARGUMENT naming both positions, before any output
   * is written. Not for varlen calls, patterns that read int inputs, the
   * backward pass or CUDA devices (ATTNC_ERROR_UNSUPPORTED).
   */
  const int64_t *key_positions;
} attnc_call;

/** Sets every field to its default (no tensors, the CPU, the last queries, no inputs) and `size`. */
ATTNC_API void attnc_call_init(attnc_call *call);

/** The forward pass of a call: what attnc_run_forward, _varlen, _on and _at do, with inputs. */
ATTNC_API attnc_status attnc_forward(const attnc_kernel *kernel, const attnc_call *call);

/** The backward pass of a call: what attnc_run_backward and its forms do, with inputs. */
ATTNC_API attnc_status attnc_backward(const attnc_kernel *kernel, const attnc_call *call);

/** The number of inputs the kernel's pattern declares (0: it reads no data). */
ATTNC_API int64_t attnc_kernel_num_inputs(const attnc_kernel *kernel);

/**
 * Input `index` of the kernel's pattern: its name, its rank (1 or 2), its
 * dimensions at key length n (dims[1] = 1 for a 1-D input) and, when a
 * selection reads it as block or token ids, the bound on them at n (each
 * id in [-1, *id_limit)); *id_limit is 0 when any integer will do. Any
 * out-pointer may be null. Returns ATTNC_ERROR_INVALID_ARGUMENT for an index
 * out of range or n < 1.
 */
ATTNC_API attnc_status attnc_kernel_input(const attnc_kernel *kernel, int64_t index, int64_t n, const char **name,
                                          int32_t *rank, int64_t dims[2], int64_t *id_limit);

/** What attnc_kernel_input_info reports (ABI 9); set `size` to sizeof(attnc_input_info). */
typedef struct attnc_input_info {
  size_t size;
  const char *name;
  int32_t rank;     /**< 1 or 2 (int inputs), 1 to 3 (float inputs) */
  int32_t is_float; /**< 1: a float input, read by score / sink; 0: an int input, read by the sets */
  int64_t dims[3];  /**< at key length n and `heads` query heads; 1 past the rank */
  int64_t id_limit; /**< as attnc_kernel_input's; 0 for float inputs */
} attnc_input_info;

/**
 * Input `index` of the kernel's pattern, int or float, its dimensions at
 * key length n with `heads` query heads (ABI 9). Returns
 * ATTNC_ERROR_INVALID_ARGUMENT for an index out of range, n < 1, heads < 1
 * or an info whose size is too small.
 */
ATTNC_API attnc_status attnc_kernel_input_info(const attnc_kernel *kernel, int64_t index, int64_t n, int64_t heads,
                                               attnc_input_info *info);

/** Bits of attnc_kernel_modifiers: the pattern has a `score` / a `sink`. */
#define ATTNC_MODIFIER_SCORE 1
#define ATTNC_MODIFIER_SINK 2
/** Which score modifiers the kernel's pattern has (ABI 9): ATTNC_MODIFIER_* bits, 0 for none. */
ATTNC_API int32_t attnc_kernel_modifiers(const attnc_kernel *kernel);

/**
 * Which keys a generation cache may drop (ABI 10): last[j] (n entries) is
 * the last query position i < n whose keys, in any head's set at length n,
 * include position j; -1 when no query reads j. A cache whose next query
 * is at position p < n can drop every key j with last[j] < p: no query from
 * p on reads it (attnc_call::key_positions runs queries over the keys
 * kept). Keys read by the last position, n - 1, may be read past n: ask
 * again with a larger n before generating past it. O(n) memory; time
 * O(n + the rows' intervals that meet keys not yet claimed).
 * ATTNC_ERROR_UNSUPPORTED for a pattern that reads int inputs or whose
 * rows depend on n (a term in n, random blocks); INVALID_ARGUMENT for n
 * outside [1, 2^31] or null pointers.
 */
ATTNC_API attnc_status attnc_kernel_last_readers(const attnc_kernel *kernel, int64_t n, int64_t *last);

ATTNC_API const char *attnc_last_error(void);

/** A short name of a status code: "ATTNC_ERROR_SHAPE". */
ATTNC_API const char *attnc_status_name(attnc_status status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ATTNC_ATTNC_H */
