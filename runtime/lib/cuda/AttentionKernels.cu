//===- AttentionKernels.cu - The plan's tables on tensor cores ------------===//
//
// The CUDA kernels of attnc's cuda target (docs/cuda.md). They are generic
// over the pattern: the pattern enters as the tables CudaPlan.h builds from
// the plan, per n, on the host. Compiled ahead of time by nvcc into a fatbin
// (sm_80 and sm_90a code, compute_80 PTX) that libattnc embeds and loads
// through the driver API (CudaDriver.h), so the library links no CUDA.
//
// Forward: one CTA (4 warps, 16 query rows each) per item of 64 rows; its
// compacted keys arrive in tiles of 64, gathered row by row with cp.async
// into swizzled shared memory (two stages: the next tile loads while this
// one computes); S = Q K^T and O += P V on mma.sync m16n8k16 (bf16 or fp16
// in, f32 accumulation), an online softmax in registers, the per-key row
// masks applied only on tiles the plan marks partial.
//
// Backward (FlashAttention-2's order, on the transposed plan): one CTA per
// group of up to 64 keys (16 per warp) and key/value head; it walks the
// rows that have its keys in tiles of 64 (every query head of its group),
// recomputes P^T from Q, K and the forward's log-sum-exp, keeps dK and dV in
// registers, and adds each tile's dQ to an f32 buffer with atomics (vector
// atomics on sm_90). Its dK and dV are added to f32 accumulators, also
// atomically, once at the end. The next row tile's Q, dO (cp.async) and row
// data load while this one computes.
//
// Score modifiers: the capped kernels (attnc_fwd_cap_*, attnc_bwd_cap_*)
// apply a soft cap c tanh(b s) to the scores in registers (and, backward,
// its derivative to dS); the alibi kernels add slope[h] sgn (j - i) to them
// (and, backward, sum dS sgn (j - i) per head: the slopes' gradient); a
// sink logit per head is folded into each row's O and log-sum-exp as the
// forward writes them, and attnc_sink_grad gives its gradient from the
// log-sum-exp and rowsum(dO * O).
//
// Data layout the kernels take (CudaRun.cpp packs anything else): rows of
// d elements contiguous, 16-byte aligned, d a multiple of 8; the head
// dimension is padded to DP = 64, 128 or 256 in shared memory (zeros).
//
//===----------------------------------------------------------------------===//
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "CudaArgs.h"

using namespace attnc::rt::cuda;

namespace {

constexpr int kRows = 64;
constexpr int kKeys = 64;
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

/// The score modifier compiled into a kernel (FwdArgs / BwdArgs carry its
/// constants): none, a soft cap c tanh(b s), or a linear distance bias per
/// head s + slope[h] sgn (j - i) (ALiBi's).
enum Mod { kPlain = 0, kCap = 1, kAlibi = 2 };

} // namespace

namespace {

// --- PTX wrappers -----------------------------------------------------------

__device__ __forceinline__ uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cpAsync16(void *dst, const void *src, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smemAddr(dst)), "l"(src),
               "r"(fill ? 16 : 0));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix4(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldmatrix4T(uint32_t (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}

template <class T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
  static __device__ __forceinline__ __nv_bfloat16 from(float x) { return __float2bfloat16_rn(x); }
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ uint32_t pack(float x, float y) {
    __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<uint32_t *>(&v);
  }
  static __device__ __forceinline__ float load(const __half *p) { return __half2float(*p); }
  static __device__ __forceinline__ __half from(float x) { return __float2half_rn(x); }
};

// --- Hopper's warpgroup MMA (sm_90a) ----------------------------------------
//
// wgmma: the 4 warps of a warpgroup issue one 64 x N x 16 product together,
// asynchronously; B (and here Q, as A of S = Q K^T) is read from shared
// memory through a descriptor, P (as A of O += P V) from registers, D stays
// in registers in mma.sync's C-fragment order (warp w: rows 16 w ..).

// (The operands' layout and descriptors: wgSwizzled, wgDescriptor in CudaArgs.h.)
__device__ __forceinline__ void wgFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgCommit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgWait() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/// cp.async's writes (the generic proxy) made visible to wgmma's reads (the async proxy).
__device__ __forceinline__ void fenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/// Registers an asynchronous wgmma reads or writes: no instruction that
/// uses them moves across this point (before the fence, after the wait).
template <int N> __device__ __forceinline__ void pinRegs(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(r[i][0]), "+f"(r[i][1]), "+f"(r[i][2]), "+f"(r[i][3])::"memory");
}
template <int N> __device__ __forceinline__ void pinRegs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+r"(r[i][0]), "+r"(r[i][1]), "+r"(r[i][2]), "+r"(r[i][3])::"memory");
}

template <class T> struct Wgmma;
// The accumulators as operands: 8 rows of d[.][4] from r (%0.. in the asm).
#define ATTNC_WG_ACC8(d, r)                                                   \
  "+f"(d[r + 0][0]), "+f"(d[r + 0][1]), "+f"(d[r + 0][2]), "+f"(d[r + 0][3]), \
  "+f"(d[r + 1][0]), "+f"(d[r + 1][1]), "+f"(d[r + 1][2]), "+f"(d[r + 1][3]), \
  "+f"(d[r + 2][0]), "+f"(d[r + 2][1]), "+f"(d[r + 2][2]), "+f"(d[r + 2][3]), \
  "+f"(d[r + 3][0]), "+f"(d[r + 3][1]), "+f"(d[r + 3][2]), "+f"(d[r + 3][3]), \
  "+f"(d[r + 4][0]), "+f"(d[r + 4][1]), "+f"(d[r + 4][2]), "+f"(d[r + 4][3]), \
  "+f"(d[r + 5][0]), "+f"(d[r + 5][1]), "+f"(d[r + 5][2]), "+f"(d[r + 5][3]), \
  "+f"(d[r + 6][0]), "+f"(d[r + 6][1]), "+f"(d[r + 6][2]), "+f"(d[r + 6][3]), \
  "+f"(d[r + 7][0]), "+f"(d[r + 7][1]), "+f"(d[r + 7][2]), "+f"(d[r + 7][3])
#define ATTNC_WG_REGS32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ATTNC_WG_REGS64 ATTNC_WG_REGS32 ", " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
// ss64<0>: S (+)= Q K^T, both K-major in shared memory; ss64<1>: both
// MN-major (transposed: the backward's dQ = dS K from dS^T and K); rs64 / rs128:
// O (+)= P V, P from registers, V MN-major in shared memory. scaleD 0: D = A B.
#define ATTNC_WGMMA(TYPE, TY)                                                                                 \
  template <> struct Wgmma<TYPE> {                                                                            \
  template <int MN>                                                                                           \
  static __device__ __forceinline__ void ss64(float (&d)[8][4], uint64_t descA, uint64_t descB, int scaleD) { \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" ATTNC_WG_REGS32                 \
                 "}, %32, %33, p, 1, 1, %35, %35;\n}\n"                                                       \
                 : ATTNC_WG_ACC8(d, 0)                                                                        \
                 : "l"(descA), "l"(descB), "r"(scaleD), "n"(MN));                                             \
  }                                                                                                           \
  static __device__ __forceinline__ void rs64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t descB,       \
                                               int scaleD) {                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                 \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" ATTNC_WG_REGS32                 \
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                             \
                 : ATTNC_WG_ACC8(d, 0)                                                                        \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(scaleD));                      \
  }                                                                                                           \
  static __device__ __forceinline__ void rs128(float (&d)[16][4], const uint32_t (&a)[4], uint64_t descB,     \
                                                int scaleD) {                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                 \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" ATTNC_WG_REGS64                \
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                             \
                 : ATTNC_WG_ACC8(d, 0), ATTNC_WG_ACC8(d, 8)                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(descB), "r"(scaleD));                      \
  }                                                                                                           \
  };
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // (only the sm_90a pass knows wgmma)
ATTNC_WGMMA(__nv_bfloat16, "bf16")
ATTNC_WGMMA(__half, "f16")
#endif
#undef ATTNC_WGMMA
#undef ATTNC_WG_REGS64
#undef ATTNC_WG_REGS32
#undef ATTNC_WG_ACC8

// --- Shared-memory tiles ----------------------------------------------------

/// Element offset of (row, 16-byte chunk) in a tile with DP columns: the
/// chunk is XOR-swizzled by the row, so that ldmatrix's 8 rows at one
/// column hit 8 different bank groups.
template <int DP> __device__ __forceinline__ int swz(int row, int chunk) {
  return row * DP + ((chunk ^ (row & 7)) << 3);
}

/// Gathers 64 rows of DP columns (the first d real) into a tile: row r
/// from base + rowOffset(r), or zeros where rowOffset(r) < 0. WG: in the
/// layout wgmma reads (wgSwizzled; for DP = 64 it is swz<64>), else in
/// ldmatrix's (swz).
template <int DP, int NT = kThreads, bool WG = false, class T, class RowOffset>
__device__ __forceinline__ void gatherTile(T *tile, const T *base, int d, RowOffset rowOffset) {
  constexpr int kChunks = DP / 8;
#pragma unroll 4
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += NT) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t off = rowOffset(r);
    const bool real = off >= 0 && c * 8 < d;
    cpAsync16(tile + (WG ? wgSwizzled(r, c) : swz<DP>(r, c)), real ? base + off + c * 8 : base, real);
  }
}

/// The query row at sequence position `pos`: the call's queries are the
/// positions first .. first + nq - 1 (nk - nq .. for attnc_run_forward;
/// attnc_run_forward_at's first_query). -1 where it is not one.
__device__ __forceinline__ int queryRow(int pos, int first, int nq) {
  return pos >= first && pos < first + nq ? pos - first : -1;
}

/// tanh(x) as 1 - 2 / (e^2x + 1), on exp2's approximation: absolute error
/// about 1e-7, exactly +-1 where e^2x overflows or underflows.
__device__ __forceinline__ float capTanh(float x) {
  return 1.f - __fdividef(2.f, exp2f(x * (2.f * kLog2e)) + 1.f);
}

/// log(e^x + e^y) for a row's log-sum-exp x (-inf: nothing yet) and y > -inf.
__device__ __forceinline__ float logAddExp(float x, float y) {
  return x == -INFINITY ? y : fmaxf(x, y) + log1pf(__expf(-fabsf(x - y)));
}

__device__ __forceinline__ float warpMax4(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float warpSum4(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// --- Forward ----------------------------------------------------------------

/// The online-softmax state of this thread's rows of an item (z = 2 mt + x:
/// row warpRow + 16 mt + gq + 8 x, its O in acc[mt][.][2 x ..]): empty, or
/// what an earlier launch of the plan's pieces left (readsState).
template <int DP, int MT>
__device__ __forceinline__ void startRows(const FwdArgs &a, const FwdItem &item, int warpRow, int lane,
                                          float (&acc)[MT][DP / 8][4], float (&mrow)[2 * MT],
                                          float (&lrow)[2 * MT], int (&rowPos)[2 * MT], bool (&rowReal)[2 * MT]) {
  const int bh = blockIdx.y, gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < DP / 8; ++j)
      acc[mt][j][0] = acc[mt][j][1] = acc[mt][j][2] = acc[mt][j][3] = 0.f;
#pragma unroll
  for (int z = 0; z < 2 * MT; ++z) {
    const int r = warpRow + 16 * (z >> 1) + gq + 8 * (z & 1);
    mrow[z] = -INFINITY;
    lrow[z] = 0.f;
    rowPos[z] = item.row0 + r * item.rowStride;
    rowReal[z] = r < item.rows && queryRow(rowPos[z], a.first, a.nq) >= 0;
  }
  if (a.readsState) {
#pragma unroll
    for (int z = 0; z < 2 * MT; ++z) {
      if (!rowReal[z])
        continue;
      const size_t at = size_t(bh) * a.nk + rowPos[z];
      const float l0 = a.stateLse[at];
      if (l0 == -INFINITY)
        continue;
      mrow[z] = l0 * kLog2e;
      lrow[z] = tq == 0 ? 1.f : 0.f; // one share of the row's sum per 4 threads
      const float *so = a.stateO + at * DP;
#pragma unroll
      for (int j = 0; j < DP / 8; ++j) {
        const float2 o2 = *reinterpret_cast<const float2 *>(so + j * 8 + 2 * tq);
        acc[z >> 1][j][2 * (z & 1)] = o2.x;
        acc[z >> 1][j][2 * (z & 1) + 1] = o2.y;
      }
    }
  }

}

/// Normalises this thread's rows and writes them: a chunk's partial result
/// to its slot; else merged with the item's chunks, to the state the next
/// launch reads (writesState) or to O and the log-sum-exp.
template <class T, int DP, int MT>
__device__ __forceinline__ void finishRows(const FwdArgs &a, const FwdItem &item, int warpRow, int lane,
                                           float (&acc)[MT][DP / 8][4], float (&mrow)[2 * MT],
                                           float (&lrow)[2 * MT], int (&rowPos)[2 * MT], bool (&rowReal)[2 * MT]) {
  using M = Mma<T>;
  const int gq = lane >> 2, tq = lane & 3, b = blockIdx.y / a.heads, h = blockIdx.y % a.heads, bh = blockIdx.y;
#pragma unroll
  for (int z = 0; z < 2 * MT; ++z) {
    const int mt = z >> 1, x = z & 1;
    const float l = warpSum4(lrow[z]);
    if (!rowReal[z])
      continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    float lse = l > 0.f ? (mrow[z] + log2f(l)) / kLog2e : -INFINITY;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j)
      acc[mt][j][2 * x] *= inv, acc[mt][j][2 * x + 1] *= inv;
    const int r = warpRow + 16 * mt + gq + 8 * x;
    if (a.writesSlots) { // a chunk of a long item: its partial result
      const size_t at = (size_t(item.slot) * gridDim.y + bh) * kRows + r;
#pragma unroll
      for (int j = 0; j < DP / 8; ++j)
        *reinterpret_cast<float2 *>(a.slotO + at * DP + j * 8 + 2 * tq) =
            make_float2(acc[mt][j][2 * x], acc[mt][j][2 * x + 1]);
      if (tq == 0)
        a.slotLse[at] = lse;
      continue;
    }
    // The item's other chunks: the log-sum-exp merge of disjoint key sets.
    for (int sl = item.mergeBegin; sl < item.mergeBegin + item.mergeCount; ++sl) {
      const size_t at = (size_t(sl) * gridDim.y + bh) * kRows + r;
      const float other = a.slotLse[at];
      if (other == -INFINITY)
        continue;
      const float both = logAddExp(lse, other);
      const float wMine = lse == -INFINITY ? 0.f : __expf(lse - both), wOther = __expf(other - both);
      const float *so = a.slotO + at * DP;
#pragma unroll
      for (int j = 0; j < DP / 8; ++j) {
        const float2 o2 = *reinterpret_cast<const float2 *>(so + j * 8 + 2 * tq);
        acc[mt][j][2 * x] = acc[mt][j][2 * x] * wMine + o2.x * wOther;
        acc[mt][j][2 * x + 1] = acc[mt][j][2 * x + 1] * wMine + o2.y * wOther;
      }
      lse = both;
    }
    if (a.writesState) {
      const size_t at = size_t(bh) * a.nk + rowPos[z];
      float *so = a.stateO + at * DP;
#pragma unroll
      for (int j = 0; j < DP / 8; ++j)
        *reinterpret_cast<float2 *>(so + j * 8 + 2 * tq) = make_float2(acc[mt][j][2 * x], acc[mt][j][2 * x + 1]);
      if (tq == 0)
        a.stateLse[at] = lse;
      continue;
    }
    if (a.sink) { // exp(z) joins the row's denominator: O scaled by e^(lse - lse')
      const float z = a.sink[h];
      if (z != -INFINITY) {
        const float both = logAddExp(lse, z), w = lse == -INFINITY ? 0.f : __expf(lse - both);
#pragma unroll
        for (int j = 0; j < DP / 8; ++j)
          acc[mt][j][2 * x] *= w, acc[mt][j][2 * x + 1] *= w;
        lse = both;
      }
    }
    const int qrow = rowPos[z] - a.first;
    T *o = static_cast<T *>(a.o) + b * a.osb + h * a.osh + int64_t(qrow) * a.osn;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      if (col < a.d)
        *reinterpret_cast<uint32_t *>(o + col) = M::pack(acc[mt][j][2 * x], acc[mt][j][2 * x + 1]);
    }
    if (a.lse && tq == 0)
      a.lse[b * a.lsb + h * a.lsh + int64_t(qrow) * a.lsn] = lse;
  }
}

template <class T, int DP> struct FwdSmem {
  static constexpr int kTile = kRows * DP;
};

/// The forward of one item. MT: 16-row m-tiles per warp (4 / MT warps);
/// two m-tiles share each K and V fragment loaded from shared memory, so
/// d = 64 runs 2 warps of 32 rows (half the shared-memory reads per flop).
/// WG (sm_90a, MT = 1, DP 64 or 128): the 4 warps are one warpgroup and the
/// products run on wgmma (Q and K, V read from shared memory by the tensor
/// cores, no ldmatrix), every 16-key group of a tile computed. ST: key
/// tiles in flight (ST - 1 load while one computes). MOD: the score
/// modifier (Mod; FwdArgs' capIn, capOutLog2, slope, slopeLog2).
template <class T, int DP, int MT, bool SKIP = true, bool WG = false, int ST = 2, int MOD = kPlain>
__device__ __forceinline__ void forward(const FwdArgs &a) {
  constexpr bool CAP = MOD == kCap, ALIBI = MOD == kAlibi;
  static_assert(!WG || (MT == 1 && (DP == 64 || DP == 128)), "wgmma: one warpgroup, DP 64 or 128");
  using M = Mma<T>;
  constexpr int NT = kThreads / MT; // threads
  constexpr int kTile = FwdSmem<T, DP>::kTile;
  extern __shared__ __align__(128) unsigned char smemRaw[];
  // wgmma's swizzle is of address bits: its tiles start at 1024-byte
  // boundaries (fwdSmemBytes leaves the room).
  T *qs = reinterpret_cast<T *>(WG ? smemRaw + ((1024 - (smemAddr(smemRaw) & 1023)) & 1023) : smemRaw);
  T *ks = qs + kTile;      // [ST][64][DP]
  T *vs = ks + ST * kTile; // [ST][64][DP]
  uint64_t *ms = reinterpret_cast<uint64_t *>(vs + ST * kTile); // [ST][64]

  const FwdItem item = a.items[a.itemBegin + blockIdx.x];
  const int bh = blockIdx.y, b = bh / a.heads, h = bh % a.heads;
  if (a.setOfHead && a.setOfHead[h] != a.set)
    return;
  if (item.row0 + (item.rows - 1) * item.rowStride < a.first || item.row0 >= a.first + a.nq)
    return; // every row is a position outside the queries
  const int g = h / a.ratio;
  const float slopeLog2 = ALIBI ? a.slope[h] * a.slopeLog2 : 0.f; // the bias per unit of j - i, base 2
  const T *q = static_cast<const T *>(a.q) + b * a.qsb + h * a.qsh;
  const T *k = static_cast<const T *>(a.k) + b * a.ksb + g * a.ksh;
  const T *v = static_cast<const T *>(a.v) + b * a.vsb + g * a.vsh;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int warpRow = warp * 16 * MT; // this warp's first row

  gatherTile<DP, NT, WG>(qs, q, a.d, [&](int r) -> int64_t {
    const int pos = item.row0 + r * item.rowStride;
    const int row = queryRow(pos, a.first, a.nq);
    return r < item.rows && row >= 0 ? row * a.qsn : -1;
  });
  const int32_t *keys = a.keys + item.keyBegin;
  const uint64_t *masks = a.masks + item.keyBegin;
  // WG: a thread gathers the same 16-byte chunk of its rows tid / kChunks +
  // i * (NT / kChunks) of every tile; their keys are loaded into registers a
  // tile ahead (fetchKeys), so that no gather waits for its key list.
  constexpr int kChunks = DP / 8, kMine = WG ? kRows * kChunks / NT : 1;
  static_assert(!WG || NT % kChunks == 0, "each thread one chunk of rows a fixed stride apart");
  int32_t nextKeys[kMine];
  auto fetchKeys = [&](int tile) {
#pragma unroll
    for (int i = 0; i < kMine; ++i)
      nextKeys[i] = tile < item.numTiles ? keys[tile * kKeys + tid / kChunks + i * (NT / kChunks)] : 0;
  };
  auto loadTile = [&](int tile, int stage) {
    if constexpr (WG) {
      const int c = tid % kChunks;
      const bool real = c * 8 < a.d;
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        const int at = stage * kTile + wgSwizzled(tid / kChunks + i * (NT / kChunks), c);
        cpAsync16(ks + at, real ? k + int64_t(nextKeys[i]) * a.ksn + c * 8 : k, real);
        cpAsync16(vs + at, real ? v + int64_t(nextKeys[i]) * a.vsn + c * 8 : v, real);
      }
    } else {
      const int32_t *tk = keys + tile * kKeys;
      gatherTile<DP, NT>(ks + stage * kTile, k, a.d, [&](int r) -> int64_t { return tk[r] * a.ksn; });
      gatherTile<DP, NT>(vs + stage * kTile, v, a.d, [&](int r) -> int64_t { return tk[r] * a.vsn; });
    }
    if (tid < kKeys * 8 / 16)
      cpAsync16(ms + stage * kKeys + tid * 2, masks + tile * kKeys + tid * 2, true);
  };
  if (WG)
    fetchKeys(0);
  for (int p = 0; p < ST - 1; ++p) { // (Q goes with the first group)
    if (p < item.numTiles)
      loadTile(p, p);
    cpAsyncCommit();
    if (WG)
      fetchKeys(p + 1);
  }

  const int gq = lane >> 2, tq = lane & 3;
  float acc[MT][DP / 8][4], mrow[2 * MT], lrow[2 * MT];
  int rowPos[2 * MT];
  bool rowReal[2 * MT];
  startRows<DP, MT>(a, item, warpRow, lane, acc, mrow, lrow, rowPos, rowReal);
  uint32_t qf[MT][DP / 16][4];
  for (int tile = 0; tile < item.numTiles; ++tile) {
    const int stage = int(unsigned(tile) % ST);
    if (tile + ST - 1 < item.numTiles)
      loadTile(tile + ST - 1, int(unsigned(tile + ST - 1) % ST));
    cpAsyncCommit();
    if (WG)
      fetchKeys(tile + ST);
    cpAsyncWait<ST - 1>();
    if (WG)
      fenceProxyAsync();
    __syncthreads();
    if (!WG && tile == 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk)
          ldmatrix4(qf[mt][kk], qs + swz<DP>(warpRow + 16 * mt + (lane & 15), kk * 2 + (lane >> 4)));
    }
    const T *kt = ks + stage * kTile;
    const T *vt = vs + stage * kTile;
    const bool full = a.full[(item.keyBegin >> 6) + tile] != 0;
    const uint64_t *mt64 = ms + stage * kKeys;
    // On a partial tile, the 16-key groups with a key for this warp's rows
    // (bit jj: keys 16 jj ..): the others' products are skipped (a band's
    // diagonal tile, a residue class's triangle).
    uint32_t live = 0xF;
    if (SKIP && !WG && !full) {
      constexpr uint64_t kWarpRows = MT == 1 ? 0xFFFFull : 0xFFFFFFFFull;
      bool any = false;
      if (lane < 16)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          any = any || ((mt64[lane * 4 + e] >> warpRow) & kWarpRows) != 0;
      const uint32_t quads = __ballot_sync(0xffffffffu, any); // bit x: keys 4x .. 4x + 3
      live = 0;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj)
        live |= ((quads >> (4 * jj)) & 0xFu) ? 1u << jj : 0u;
    }
    float s[MT][8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
    if constexpr (WG) {
      // S = Q K^T, 16 columns of d a step.
      const uint32_t qa = smemAddr(qs), ka = smemAddr(kt);
      wgFence();
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk)
        Wgmma<T>::template ss64<0>(s[0], wgDescriptor(qa + wgKStep(kk), 16), wgDescriptor(ka + wgKStep(kk), 16),
                                   kk > 0);
      wgCommit();
      wgWait();
      pinRegs(s[0]);
    } else {
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        if (!((live >> jj) & 1))
          continue;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
          uint32_t bf[4];
          ldmatrix4(bf, kt + swz<DP>(jj * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            M::run(s[mt][2 * jj], qf[mt][kk], bf[0], bf[1]);
            M::run(s[mt][2 * jj + 1], qf[mt][kk], bf[2], bf[3]);
          }
        }
      }
    }
    if constexpr (CAP) // S becomes tanh(b s): the logit is c times it
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[mt][j][e] = capTanh(s[mt][j][e] * a.capIn);
    float tileMax[2 * MT];
#pragma unroll
    for (int z = 0; z < 2 * MT; ++z)
      tileMax[z] = -INFINITY;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int z = 2 * mt + (e >> 1), col = j * 8 + 2 * tq + (e & 1);
          float val = s[mt][j][e] * (CAP ? a.capOutLog2 : a.scaleLog2);
          if constexpr (ALIBI)
            val += slopeLog2 * float(keys[tile * kKeys + col] - rowPos[z]);
          if (!full && !((mt64[col] >> (warpRow + 16 * mt + gq + 8 * (e >> 1))) & 1))
            val = -INFINITY;
          s[mt][j][e] = val;
          tileMax[z] = fmaxf(tileMax[z], val);
        }
    float alpha[2 * MT], mUse[2 * MT];
#pragma unroll
    for (int z = 0; z < 2 * MT; ++z) {
      const float mNew = fmaxf(mrow[z], warpMax4(tileMax[z]));
      mUse[z] = mNew == -INFINITY ? 0.f : mNew;
      alpha[z] = exp2f(mrow[z] - mUse[z]);
      mrow[z] = mNew;
      lrow[z] *= alpha[z];
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < DP / 8; ++j) {
        acc[mt][j][0] *= alpha[2 * mt];
        acc[mt][j][1] *= alpha[2 * mt];
        acc[mt][j][2] *= alpha[2 * mt + 1];
        acc[mt][j][3] *= alpha[2 * mt + 1];
      }
    uint32_t pf[MT][4][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = exp2f(s[mt][j][0] - mUse[2 * mt]), p1 = exp2f(s[mt][j][1] - mUse[2 * mt]);
        const float p2 = exp2f(s[mt][j][2] - mUse[2 * mt + 1]), p3 = exp2f(s[mt][j][3] - mUse[2 * mt + 1]);
        lrow[2 * mt] += p0 + p1;
        lrow[2 * mt + 1] += p2 + p3;
        pf[mt][j >> 1][(j & 1) * 2] = M::pack(p0, p1);
        pf[mt][j >> 1][(j & 1) * 2 + 1] = M::pack(p2, p3);
      }
    if constexpr (WG) {
      // O += P V, 16 keys a step; V read transposed (MN-major).
      const uint32_t va = smemAddr(vt);
      pinRegs(acc[0]);
      pinRegs(pf[0]);
      wgFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t desc = wgDescriptor(va + wgVStep(kk), kWgVLeading);
        if constexpr (DP == 64)
          Wgmma<T>::rs64(acc[0], pf[0][kk], desc, 1);
        else
          Wgmma<T>::rs128(acc[0], pf[0][kk], desc, 1);
      }
      wgCommit();
      wgWait();
      pinRegs(acc[0]);
    } else {
#pragma unroll
      for (int dd = 0; dd < DP / 16; ++dd)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          if (!((live >> kk) & 1))
            continue; // P is 0 there
          uint32_t bf[4];
          ldmatrix4T(bf, vt + swz<DP>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dd * 2 + (lane >> 4)));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            M::run(acc[mt][2 * dd], pf[mt][kk], bf[0], bf[1]);
            M::run(acc[mt][2 * dd + 1], pf[mt][kk], bf[2], bf[3]);
          }
        }
    }
    __syncthreads(); // this stage is loaded again, ST tiles on, from the next iteration
  }
  cpAsyncWait<0>();
  finishRows<T, DP, MT>(a, item, warpRow, lane, acc, mrow, lrow, rowPos, rowReal);
}

// --- Backward ---------------------------------------------------------------

template <class T, int DP> struct BwdSmem {
  static constexpr int kTile = kRows * DP;
};

/// dQ += v at p (two adjacent floats), as one vector atomic where the GPU has it.
__device__ __forceinline__ void addPair(float *p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2 *>(p), make_float2(x, y));
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}

/// The backward of one key group. WG (sm_90a, DP 64 or 128): its five
/// products on wgmma, the warpgroup's 64 keys as M: S^T = K Q^T and dP^T =
/// V dO^T from shared memory, dV += P^T dO and dK += dS^T Q with P^T and dS^T
/// from registers, dQ = dS K from dS^T and K in shared memory (both read
/// transposed), 64 columns of dQ at a time. MOD: the score modifier (Mod):
/// a soft cap (BwdArgs' capIn, capOutLog2, capGrad: dS through the cap's
/// derivative) or a distance bias (slope, slopeSign; its gradient summed
/// into dSlope).
template <class T, int DP, bool WG = false, int MOD = kPlain>
__device__ __forceinline__ void backward(const BwdArgs &a) {
  constexpr bool CAP = MOD == kCap, ALIBI = MOD == kAlibi;
  static_assert(!WG || DP == 64 || DP == 128, "wgmma: DP 64 or 128");
  using M = Mma<T>;
  constexpr int kTile = BwdSmem<T, DP>::kTile;
  extern __shared__ __align__(128) unsigned char smemRaw[];
  // (wgmma's tiles start at 1024-byte boundaries: bwdSmemBytes leaves the room.)
  T *ks = reinterpret_cast<T *>(WG ? smemRaw + ((1024 - (smemAddr(smemRaw) & 1023)) & 1023) : smemRaw);
  T *vs = ks + kTile;
  T *qs = vs + kTile;       // [2][64][DP]
  T *dos = qs + 2 * kTile;  // [2][64][DP]
  T *dss = dos + 2 * kTile; // dS^T [64 keys][64 rows], swizzled (8 chunks a row)
  uint64_t *rmaskS = reinterpret_cast<uint64_t *>(dss + kKeys * kRows); // [2][64]
  float *rlseS = reinterpret_cast<float *>(rmaskS + 2 * kRows);         // [2][64]
  float *rdeltaS = rlseS + 2 * kRows;                                   // [2][64]
  int32_t *rqS = reinterpret_cast<int32_t *>(rdeltaS + 2 * kRows);      // [2][64]: query row, or -1

  const BwdItem item = a.items[a.itemBegin + blockIdx.x];
  const int kvHeads = a.heads / a.ratio;
  const int bg = blockIdx.y, b = bg / kvHeads, g = bg % kvHeads;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int gq = lane >> 2, tq = lane & 3;
  const int32_t *keys = a.keys + item.keyBegin;
  const T *k = static_cast<const T *>(a.k) + b * a.ksb + g * a.ksh;
  const T *v = static_cast<const T *>(a.v) + b * a.vsb + g * a.vsh;
  gatherTile<DP, kThreads, WG>(ks, k, a.d, [&](int r) -> int64_t { return r < item.numKeys ? keys[r] * a.ksn : -1; });
  gatherTile<DP, kThreads, WG>(vs, v, a.d, [&](int r) -> int64_t { return r < item.numKeys ? keys[r] * a.vsn : -1; });

  // The query heads of this key/value head that run this set.
  int heads = 0;
  for (int h = g * a.ratio; h < (g + 1) * a.ratio; ++h)
    heads += !a.setOfHead || a.setOfHead[h] == a.set;
  auto headAt = [&](int x) {
    for (int h = g * a.ratio;; ++h)
      if ((!a.setOfHead || a.setOfHead[h] == a.set) && x-- == 0)
        return h;
  };
  const int steps = heads * item.numTiles; // (head, row tile) pairs, in order
  // WG: a thread gathers the same 16-byte chunk of its rows tid / kChunks +
  // i * (128 / kChunks) of every row tile; their query rows (-1: none) are
  // loaded into registers a step ahead (fetchRows), so that no gather waits
  // for its row list.
  constexpr int kChunks = DP / 8, kMine = WG ? kRows * kChunks / kThreads : 1;
  static_assert(!WG || kThreads % kChunks == 0, "each thread one chunk of rows a fixed stride apart");
  int32_t nextRows[kMine];
  auto fetchRows = [&](int step) {
    const int e0 = item.rowBegin + (step % item.numTiles) * kRows;
#pragma unroll
    for (int i = 0; i < kMine; ++i) {
      const int e = e0 + tid / kChunks + i * (kThreads / kChunks);
      nextRows[i] = step < steps && a.masks[e] != 0 ? queryRow(a.rows[e], a.first, a.nq) : -1;
    }
  };
  // Step s: its rows' Q and dO gathered into stage s & 1 (cp.async).
  auto issue = [&](int step, int stage) {
    const int h = headAt(step / item.numTiles), e0 = item.rowBegin + (step % item.numTiles) * kRows;
    if constexpr (WG) {
      const T *q = static_cast<const T *>(a.q) + b * a.qsb + h * a.qsh;
      const T *dO = static_cast<const T *>(a.dO) + b * a.gsb + h * a.gsh;
      const int c = tid % kChunks;
#pragma unroll
      for (int i = 0; i < kMine; ++i) {
        const int at = stage * kTile + wgSwizzled(tid / kChunks + i * (kThreads / kChunks), c);
        const bool real = nextRows[i] >= 0 && c * 8 < a.d;
        cpAsync16(qs + at, real ? q + int64_t(nextRows[i]) * a.qsn + c * 8 : q, real);
        cpAsync16(dos + at, real ? dO + int64_t(nextRows[i]) * a.gsn + c * 8 : dO, real);
      }
    } else {
      auto rowOf = [&](int r, int64_t stride) -> int64_t {
        const int row = queryRow(a.rows[e0 + r], a.first, a.nq);
        return a.masks[e0 + r] != 0 && row >= 0 ? row * stride : -1;
      };
      gatherTile<DP>(qs + stage * kTile, static_cast<const T *>(a.q) + b * a.qsb + h * a.qsh, a.d,
                     [&](int r) { return rowOf(r, a.qsn); });
      gatherTile<DP>(dos + stage * kTile, static_cast<const T *>(a.dO) + b * a.gsb + h * a.gsh, a.d,
                     [&](int r) { return rowOf(r, a.gsn); });
    }
  };
  // Step s's row data (threads 0-63, one row each): loaded a step ahead,
  // stored to shared memory when the step before it is done with the stage.
  struct RowInfo {
    int32_t q;
    uint64_t mask;
    float lse, delta;
  };
  auto fetch = [&](int step) {
    const int h = headAt(step / item.numTiles), e = item.rowBegin + (step % item.numTiles) * kRows + tid;
    const int row = queryRow(a.rows[e], a.first, a.nq);
    const uint64_t m = a.masks[e];
    RowInfo info{-1, 0, 0.f, 0.f};
    if (m != 0 && row >= 0) {
      info.q = row;
      info.mask = m;
      info.lse = a.lse[b * a.lsb + h * a.lsh + int64_t(info.q) * a.lsn];
      if constexpr (ALIBI) // the row's share of its biases (the key's is added in registers)
        info.lse += a.slope[h] * a.slopeSign * float(row + a.first - keys[0]);
      info.delta = a.delta[size_t(b * a.heads + h) * a.nq + info.q];
    }
    return info;
  };
  auto store = [&](const RowInfo &info, int stage) {
    rqS[stage * kRows + tid] = info.q;
    rmaskS[stage * kRows + tid] = info.mask;
    rlseS[stage * kRows + tid] = info.lse;
    rdeltaS[stage * kRows + tid] = info.delta;
  };
  if (steps > 0) {
    if (WG)
      fetchRows(0);
    issue(0, 0);
    if (tid < kRows)
      store(fetch(0), 0);
    if (WG)
      fetchRows(1);
  }
  cpAsyncCommit();

  // ALIBI: the positions of this thread's two keys (rows gq and gq + 8 of its warp's 16), from the
  // group's first key: small numbers, whose differences from the rows' (fetch) f32 keeps exact.
  int keyPos[2] = {0, 0};
  if constexpr (ALIBI)
#pragma unroll
    for (int x = 0; x < 2; ++x)
      keyPos[x] = warp * 16 + gq + 8 * x < item.numKeys ? keys[warp * 16 + gq + 8 * x] - keys[0] : 0;

  float dk[DP / 8][4], dv[DP / 8][4];
#pragma unroll
  for (int j = 0; j < DP / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dk[j][e] = dv[j][e] = 0.f;

  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const bool more = step + 1 < steps;
    if (more)
      issue(step + 1, stage ^ 1);
    cpAsyncCommit();
    if (WG && more)
      fetchRows(step + 2);
    cpAsyncWait<1>();
    if (WG)
      fenceProxyAsync();
    __syncthreads();
    const T *qt = qs + stage * kTile, *dot = dos + stage * kTile;
    const uint64_t *rmask = rmaskS + stage * kRows;
    const float *rlse = rlseS + stage * kRows, *rdelta = rdeltaS + stage * kRows;
    const int32_t *rq = rqS + stage * kRows;
    const int hq = headAt(step / item.numTiles), bh = b * a.heads + hq;

    // S^T and dP^T for this warp's 16 keys x 64 rows.
    float st[8][4], dpt[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        st[j][e] = dpt[j][e] = 0.f;
    if constexpr (WG) {
      const uint32_t ka = smemAddr(ks), va = smemAddr(vs), qa = smemAddr(qt), da = smemAddr(dot);
      wgFence();
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk) {
        const uint32_t at = wgKStep(kk);
        Wgmma<T>::template ss64<0>(st, wgDescriptor(ka + at, 16), wgDescriptor(qa + at, 16), kk > 0);
        Wgmma<T>::template ss64<0>(dpt, wgDescriptor(va + at, 16), wgDescriptor(da + at, 16), kk > 0);
      }
      wgCommit();
      wgWait();
      pinRegs(st);
      pinRegs(dpt);
    } else {
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk) {
        uint32_t kf[4], vf[4];
        ldmatrix4(kf, ks + swz<DP>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));
        ldmatrix4(vf, vs + swz<DP>(warp * 16 + (lane & 15), kk * 2 + (lane >> 4)));
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          uint32_t bf[4];
          const int row = jj * 16 + (lane & 7) + ((lane >> 4) << 3), chunk = kk * 2 + ((lane >> 3) & 1);
          ldmatrix4(bf, qt + swz<DP>(row, chunk));
          M::run(st[2 * jj], kf, bf[0], bf[1]);
          M::run(st[2 * jj + 1], kf, bf[2], bf[3]);
          ldmatrix4(bf, dot + swz<DP>(row, chunk));
          M::run(dpt[2 * jj], vf, bf[0], bf[1]);
          M::run(dpt[2 * jj + 1], vf, bf[2], bf[3]);
        }
      }
    }
    const bool full = a.full[(item.rowBegin >> 6) + step % item.numTiles] != 0;
    if constexpr (CAP) // S^T becomes tanh(b s): the logit is c times it
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st[j][e] = capTanh(st[j][e] * a.capIn);
    // ALIBI: the bias slope sgn (j - i) of key j and row i is this thread's keyBias minus the row's
    // share, which the row's log-sum-exp in shared memory already holds (fetch).
    float keyBias[2] = {0.f, 0.f};
    if constexpr (ALIBI)
#pragma unroll
      for (int x = 0; x < 2; ++x)
        keyBias[x] = a.slope[hq] * a.slopeSign * float(keyPos[x]);
    uint32_t pf[4][4], dsf[4][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float p[4], ds[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp * 16 + gq + 8 * (e >> 1), col = j * 8 + 2 * tq + (e & 1);
        const bool on = full ? rq[col] >= 0 : ((rmask[col] >> key) & 1) != 0;
        if constexpr (CAP) {
          const float t = st[j][e];
          p[e] = on ? exp2f(a.capOutLog2 * t - rlse[col] * kLog2e) : 0.f;
          ds[e] = p[e] * (dpt[j][e] - rdelta[col]) * (a.capGrad * (1.f - t * t));
        } else if constexpr (ALIBI) {
          p[e] = on ? exp2f((st[j][e] * a.scale + keyBias[e >> 1] - rlse[col]) * kLog2e) : 0.f;
          ds[e] = p[e] * (dpt[j][e] - rdelta[col]);
        } else {
          p[e] = on ? exp2f(st[j][e] * a.scaleLog2 - rlse[col] * kLog2e) : 0.f;
          ds[e] = p[e] * (dpt[j][e] - rdelta[col]);
        }
      }
      pf[j >> 1][(j & 1) * 2] = M::pack(p[0], p[1]);
      pf[j >> 1][(j & 1) * 2 + 1] = M::pack(p[2], p[3]);
      dsf[j >> 1][(j & 1) * 2] = M::pack(ds[0], ds[1]);
      dsf[j >> 1][(j & 1) * 2 + 1] = M::pack(ds[2], ds[3]);
      // dS^T to shared memory for dQ: rows key, columns query row.
      const int key0 = warp * 16 + gq, col = j * 8 + 2 * tq;
      *reinterpret_cast<uint32_t *>(dss + key0 * kRows + (((col >> 3) ^ (key0 & 7)) << 3) + (col & 7)) =
          dsf[j >> 1][(j & 1) * 2];
      *reinterpret_cast<uint32_t *>(dss + (key0 + 8) * kRows + (((col >> 3) ^ ((key0 + 8) & 7)) << 3) +
                                    (col & 7)) = dsf[j >> 1][(j & 1) * 2 + 1];
    }
    // dV += P^T dO, dK += dS^T Q (the 64 rows are the reduction).
    if constexpr (WG) {
      const uint32_t qa = smemAddr(qt), da = smemAddr(dot);
      pinRegs(dv);
      pinRegs(dk);
      pinRegs(pf);
      pinRegs(dsf);
      wgFence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t dDesc = wgDescriptor(da + wgVStep(kk), kWgVLeading),
                       qDesc = wgDescriptor(qa + wgVStep(kk), kWgVLeading);
        if constexpr (DP == 64) {
          Wgmma<T>::rs64(dv, pf[kk], dDesc, 1);
          Wgmma<T>::rs64(dk, dsf[kk], qDesc, 1);
        } else {
          Wgmma<T>::rs128(dv, pf[kk], dDesc, 1);
          Wgmma<T>::rs128(dk, dsf[kk], qDesc, 1);
        }
      }
      wgCommit();
      wgWait();
      pinRegs(dv);
      pinRegs(dk);
      fenceProxyAsync(); // dS^T, written above, is read by the tensor cores next
    } else {
#pragma unroll
      for (int dd = 0; dd < DP / 16; ++dd)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t bf[4];
          const int row = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), chunk = dd * 2 + (lane >> 4);
          ldmatrix4T(bf, dot + swz<DP>(row, chunk));
          M::run(dv[2 * dd], pf[kk], bf[0], bf[1]);
          M::run(dv[2 * dd + 1], pf[kk], bf[2], bf[3]);
          ldmatrix4T(bf, qt + swz<DP>(row, chunk));
          M::run(dk[2 * dd], dsf[kk], bf[0], bf[1]);
          M::run(dk[2 * dd + 1], dsf[kk], bf[2], bf[3]);
        }
    }
    // The next step's row data, in flight while dQ is computed.
    RowInfo next{};
    if (more && tid < kRows)
      next = fetch(step + 1);
    __syncthreads();
    if (ALIBI && a.dSlope) {
      // The head's slope gradient, sum dS sgn (j - i), from dS^T in shared memory (out of the
      // registers' way): each thread 32 rows of one key, then one atomic per warp.
      const int u = tid >> 1, r0 = (tid & 1) * 32;
      float g = 0.f;
      if (u < item.numKeys) {
        const int kp = keys[u] - a.first;
        for (int r = r0; r < r0 + 32; ++r)
          if (rq[r] >= 0)
            g += static_cast<float>(dss[u * kRows + (((r >> 3) ^ (u & 7)) << 3) + (r & 7)]) * float(kp - rq[r]);
      }
      for (int sh = 16; sh > 0; sh >>= 1)
        g += __shfl_xor_sync(0xffffffffu, g, sh);
      if (lane == 0 && g != 0.f)
        atomicAdd(a.dSlope + hq, g * a.slopeSign);
    }
    // dQ = scale dS K for this warp's 16 rows, 16 columns at a time.
    const int r0 = warp * 16 + gq;
    float *dq0 = rq[r0] >= 0 ? a.dq + (size_t(bh) * a.nq + rq[r0]) * DP : nullptr;
    float *dq1 = rq[r0 + 8] >= 0 ? a.dq + (size_t(bh) * a.nq + rq[r0 + 8]) * DP : nullptr;
    // This thread's two pairs of dQ at column `col` (rows r0, r0 + 8): a C fragment's quad.
    auto addDq = [&](int col, const float (&c)[4]) {
      if (dq0 && col < a.d)
        addPair(dq0 + col, c[0] * a.scale, c[1] * a.scale);
      if (dq1 && col < a.d)
        addPair(dq1 + col, c[2] * a.scale, c[3] * a.scale);
    };
    if constexpr (WG) {
      // 64 columns at a time: A = dS (rows x keys) read from dS^T, B = K,
      // both transposed; 16 keys a step.
      const uint32_t sa = smemAddr(dss), ka = smemAddr(ks);
#pragma unroll
      for (int half = 0; half < DP / 64; ++half) {
        float c[8][4];
        wgFence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          Wgmma<T>::template ss64<1>(c, wgDescriptor(sa + wgVStep(kk), kWgVLeading),
                          wgDescriptor(ka + half * kWgVLeading + wgVStep(kk), kWgVLeading), kk > 0);
        wgCommit();
        wgWait();
        pinRegs(c);
#pragma unroll
        for (int j = 0; j < 8; ++j)
          addDq(half * 64 + j * 8 + 2 * tq, c[j]);
      }
    } else {
      uint32_t af[4][4];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int key = kk * 16 + (lane & 7) + ((lane >> 4) << 3), chunk = warp * 2 + ((lane >> 3) & 1);
        ldmatrix4T(af[kk], dss + key * kRows + ((chunk ^ (key & 7)) << 3));
      }
#pragma unroll
      for (int dd = 0; dd < DP / 16; ++dd) {
        float c[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          uint32_t bf[4];
          ldmatrix4T(bf, ks + swz<DP>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dd * 2 + (lane >> 4)));
          M::run(c[0], af[kk], bf[0], bf[1]);
          M::run(c[1], af[kk], bf[2], bf[3]);
        }
#pragma unroll
        for (int n = 0; n < 2; ++n)
          addDq(dd * 16 + n * 8 + 2 * tq, c[n]);
      }
    }
    if (more && tid < kRows)
      store(next, stage ^ 1);
    __syncthreads(); // this stage's Q, dO, dS^T and row data are loaded again
  }
  cpAsyncWait<0>();
  // This warp's keys: add dK, dV to the accumulators (atomically: a key's
  // other pieces, and a long group's other chunks, add to them too).
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int u = warp * 16 + gq + 8 * x;
    if (u >= item.numKeys || steps == 0)
      continue;
    const size_t at = (size_t(b) * kvHeads + g) * a.nk + keys[u];
    float *dkr = a.dk + at * DP, *dvr = a.dv + at * DP;
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
      const int col = j * 8 + 2 * tq;
      if (col < a.d) {
        addPair(dkr + col, dk[j][2 * x] * a.scale, dk[j][2 * x + 1] * a.scale);
        addPair(dvr + col, dv[j][2 * x], dv[j][2 * x + 1]);
      }
    }
  }
}

// --- Element-wise helpers ---------------------------------------------------

__device__ __forceinline__ float toFloat(const void *p, int dtype, int64_t i) {
  switch (dtype) {
  case 0: return static_cast<const float *>(p)[i];
  case 1: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  default: return __half2float(static_cast<const __half *>(p)[i]);
  }
}
__device__ __forceinline__ void storeAs(void *p, int dtype, int64_t i, float x) {
  switch (dtype) {
  case 0: static_cast<float *>(p)[i] = x; break;
  case 1: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(x); break;
  default: static_cast<__half *>(p)[i] = __float2half_rn(x); break;
  }
}

} // namespace

extern "C" {

// The kernels. SET(SUFFIX, MOD) instantiates one family for both element
// types and every padded head dimension; the score modifier MOD is compiled
// in: attnc_fwd_bf16_64 (none), attnc_fwd_cap_bf16_64 (a soft cap),
// attnc_fwd_alibi_bf16_64 (a linear distance bias per head), ...

// The forward kernels: 4 warps of 16 rows.
// MIN: CTAs per SM the registers are capped for. d = 64: 4 (128 registers,
// no spills; 16 warps an SM): on an H200 at n = 16384 that ran fixed, strided
// and local 13-22% faster than 3 CTAs at 155 registers (docs/benchmarks.md).
#define ATTNC_FORWARD(NAME, T, DP, MIN, MOD)                                                                  \
  __global__ void __launch_bounds__(kThreads, MIN) NAME(const FwdArgs a) {                                    \
    forward<T, DP, 1, true, false, 2, MOD>(a);                                                                \
  }
#define ATTNC_FORWARD_SET(SUFFIX, MOD)                                                                        \
  ATTNC_FORWARD(attnc_fwd##SUFFIX##_bf16_64, __nv_bfloat16, 64, 4, MOD)                                       \
  ATTNC_FORWARD(attnc_fwd##SUFFIX##_bf16_128, __nv_bfloat16, 128, 1, MOD)                                     \
  ATTNC_FORWARD(attnc_fwd##SUFFIX##_bf16_256, __nv_bfloat16, 256, 1, MOD)                                     \
  ATTNC_FORWARD(attnc_fwd##SUFFIX##_f16_64, __half, 64, 4, MOD)                                               \
  ATTNC_FORWARD(attnc_fwd##SUFFIX##_f16_128, __half, 128, 1, MOD)                                             \
  ATTNC_FORWARD(attnc_fwd##SUFFIX##_f16_256, __half, 256, 1, MOD)
ATTNC_FORWARD_SET(, kPlain)
ATTNC_FORWARD_SET(_cap, kCap)
ATTNC_FORWARD_SET(_alibi, kAlibi)
#undef ATTNC_FORWARD_SET
#undef ATTNC_FORWARD

// Variants of the bf16 d = 64 forward that ATTNC_CUDA_FWD_VARIANT=1..3
// runs instead, for benchmarks comparing them on one GPU in one process
// (docs/cuda.md): 1 lets registers grow (3 CTAs an SM), 2 computes every
// 16-key group of a partial tile, 3 gives each of 2 warps 32 rows.
__global__ void __launch_bounds__(kThreads, 1) attnc_fwd_bf16_64_v1(const FwdArgs a) {
  forward<__nv_bfloat16, 64, 1>(a);
}
__global__ void __launch_bounds__(kThreads, 1) attnc_fwd_bf16_64_v2(const FwdArgs a) {
  forward<__nv_bfloat16, 64, 1, false>(a);
}
__global__ void __launch_bounds__(kThreads / 2, 4) attnc_fwd_bf16_64_v3(const FwdArgs a) {
  forward<__nv_bfloat16, 64, 2>(a);
}

// Variant 4: the forward on Hopper's wgmma (sm_90a code only; the runtime
// runs it on compute capability 9.0 alone), bf16 and fp16, DP 64 and 128.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTNC_FORWARD_WG(NAME, T, DP, MIN, MOD)                                                               \
  __global__ void __launch_bounds__(kThreads, MIN) NAME(const FwdArgs a) {                                    \
    forward<T, DP, 1, false, true, 2, MOD>(a);                                                                \
  }
#else
#define ATTNC_FORWARD_WG(NAME, T, DP, MIN, MOD)                                                               \
  __global__ void __launch_bounds__(kThreads, MIN) NAME(const FwdArgs) { __trap(); }
#endif
#define ATTNC_FORWARD_WG_SET(SUFFIX, MOD)                                                                     \
  ATTNC_FORWARD_WG(attnc_fwd_wg##SUFFIX##_bf16_64, __nv_bfloat16, 64, 4, MOD)                                 \
  ATTNC_FORWARD_WG(attnc_fwd_wg##SUFFIX##_bf16_128, __nv_bfloat16, 128, 2, MOD)                               \
  ATTNC_FORWARD_WG(attnc_fwd_wg##SUFFIX##_f16_64, __half, 64, 4, MOD)                                         \
  ATTNC_FORWARD_WG(attnc_fwd_wg##SUFFIX##_f16_128, __half, 128, 2, MOD)
ATTNC_FORWARD_WG_SET(, kPlain)
ATTNC_FORWARD_WG_SET(_cap, kCap)
ATTNC_FORWARD_WG_SET(_alibi, kAlibi)
#undef ATTNC_FORWARD_WG_SET
#undef ATTNC_FORWARD_WG
// Variant 5: the same with 3 key tiles in flight (DP 64; 3 CTAs an SM).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTNC_FORWARD_WG3(NAME, T)                                                                            \
  __global__ void __launch_bounds__(kThreads, 3) NAME(const FwdArgs a) { forward<T, 64, 1, false, true, 3>(a); }
#else
#define ATTNC_FORWARD_WG3(NAME, T)                                                                            \
  __global__ void __launch_bounds__(kThreads, 3) NAME(const FwdArgs) { __trap(); }
#endif
ATTNC_FORWARD_WG3(attnc_fwd_wg3_bf16_64, __nv_bfloat16)
ATTNC_FORWARD_WG3(attnc_fwd_wg3_f16_64, __half)
#undef ATTNC_FORWARD_WG3

#define ATTNC_BACKWARD(NAME, T, DP, MOD)                                                                      \
  __global__ void __launch_bounds__(kThreads) NAME(const BwdArgs a) { backward<T, DP, false, MOD>(a); }
#define ATTNC_BACKWARD_SET(SUFFIX, MOD)                                                                       \
  ATTNC_BACKWARD(attnc_bwd##SUFFIX##_bf16_64, __nv_bfloat16, 64, MOD)                                         \
  ATTNC_BACKWARD(attnc_bwd##SUFFIX##_bf16_128, __nv_bfloat16, 128, MOD)                                       \
  ATTNC_BACKWARD(attnc_bwd##SUFFIX##_bf16_256, __nv_bfloat16, 256, MOD)                                       \
  ATTNC_BACKWARD(attnc_bwd##SUFFIX##_f16_64, __half, 64, MOD)                                                 \
  ATTNC_BACKWARD(attnc_bwd##SUFFIX##_f16_128, __half, 128, MOD)                                               \
  ATTNC_BACKWARD(attnc_bwd##SUFFIX##_f16_256, __half, 256, MOD)
ATTNC_BACKWARD_SET(, kPlain)
ATTNC_BACKWARD_SET(_cap, kCap)
ATTNC_BACKWARD_SET(_alibi, kAlibi)
#undef ATTNC_BACKWARD_SET
#undef ATTNC_BACKWARD

// The backward on wgmma (sm_90a code only, compute capability 9.0), bf16
// and fp16, DP 64 and 128: the runtime runs it for backward variant 1.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTNC_BACKWARD_WG(NAME, T, DP, MOD)                                                                   \
  __global__ void __launch_bounds__(kThreads) NAME(const BwdArgs a) { backward<T, DP, true, MOD>(a); }
#else
#define ATTNC_BACKWARD_WG(NAME, T, DP, MOD)                                                                   \
  __global__ void __launch_bounds__(kThreads) NAME(const BwdArgs) { __trap(); }
#endif
#define ATTNC_BACKWARD_WG_SET(SUFFIX, MOD)                                                                    \
  ATTNC_BACKWARD_WG(attnc_bwd_wg##SUFFIX##_bf16_64, __nv_bfloat16, 64, MOD)                                   \
  ATTNC_BACKWARD_WG(attnc_bwd_wg##SUFFIX##_bf16_128, __nv_bfloat16, 128, MOD)                                 \
  ATTNC_BACKWARD_WG(attnc_bwd_wg##SUFFIX##_f16_64, __half, 64, MOD)                                           \
  ATTNC_BACKWARD_WG(attnc_bwd_wg##SUFFIX##_f16_128, __half, 128, MOD)
ATTNC_BACKWARD_WG_SET(, kPlain)
ATTNC_BACKWARD_WG_SET(_cap, kCap)
ATTNC_BACKWARD_WG_SET(_alibi, kAlibi)
#undef ATTNC_BACKWARD_WG_SET
#undef ATTNC_BACKWARD_WG

/// dst = src element by element (any dtypes, any strides; `cols` per row,
/// and dst's columns cols .. padCols - 1 set to 0): packing a tensor the
/// kernels cannot read in place, unpacking an output, converting the f32
/// accumulators of the backward to the gradients' dtype. Grid: x strides
/// over one (batch, head) slice's rows x padCols elements, y is the head,
/// z the batch element (32-bit index arithmetic inside a slice).
__global__ void attnc_copy(const View src, const View dst, int32_t padCols) {
  const int hh = blockIdx.y, bb = blockIdx.z;
  const char *sBase = static_cast<const char *>(src.data);
  const int64_t sSlice = bb * src.strides[0] + hh * src.strides[1];
  const int64_t dSlice = bb * dst.strides[0] + hh * dst.strides[1];
  const uint32_t total = uint32_t(src.shape[2]) * uint32_t(padCols);
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint32_t r = i / uint32_t(padCols), c = i - r * uint32_t(padCols);
    const int64_t di = dSlice + r * dst.strides[2] + c * dst.strides[3];
    if (int32_t(c) < src.cols)
      storeAs(dst.data, dst.dtype, di, toFloat(sBase, src.dtype, sSlice + r * src.strides[2] + c * src.strides[3]));
    else if (int32_t(c) < dst.cols)
      storeAs(dst.data, dst.dtype, di, 0.f);
  }
}

/// delta[row] = sum_c dO[row, c] O[row, c] in f32, one warp per row. Grid:
/// x over a slice's rows (8 a block of 256 threads), y the head, z the
/// batch element; rows of delta in [batch][heads][n] order.
__global__ void attnc_delta(const View dO, const View o, float *delta) {
  const int hh = blockIdx.y, bb = blockIdx.z, lane = threadIdx.x & 31;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= dO.shape[2])
    return;
  const int64_t gi = bb * dO.strides[0] + hh * dO.strides[1] + r * dO.strides[2];
  const int64_t oi = bb * o.strides[0] + hh * o.strides[1] + r * o.strides[2];
  float sum = 0.f;
  for (int c = lane; c < dO.cols; c += 32)
    sum += toFloat(dO.data, dO.dtype, gi + c * dO.strides[3]) *
           toFloat(o.data, o.dtype, oi + c * o.strides[3]);
  for (int sh = 16; sh > 0; sh >>= 1)
    sum += __shfl_xor_sync(0xffffffffu, sum, sh);
  if (lane == 0)
    delta[(int64_t(bb) * dO.shape[1] + hh) * dO.shape[2] + r] = sum;
}

/// dSink[h] += -sum over rows of e^(z - lse) rowsum(dO * O): a sink z =
/// sink[h] joins each row's softmax without a value row, so d loss / d z is
/// minus its probability times delta. One thread per row, one atomic per
/// warp. Grid: x over a slice's rows (256 a block), y the head, z the batch
/// element; lse as the call gave it (f32 [batch][heads][rows] by strides),
/// delta as attnc_delta wrote it.
__global__ void attnc_sink_grad(const View lse, const float *delta, const float *sink, float *dSink) {
  const int hh = blockIdx.y, bb = blockIdx.z;
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  float g = 0.f;
  if (r < lse.shape[2]) {
    const float l =
        static_cast<const float *>(lse.data)[bb * lse.strides[0] + hh * lse.strides[1] + r * lse.strides[2]];
    const float dl = delta[(int64_t(bb) * lse.shape[1] + hh) * lse.shape[2] + r];
    if (l != -INFINITY)
      g = -__expf(sink[hh] - l) * dl;
  }
  for (int sh = 16; sh > 0; sh >>= 1)
    g += __shfl_xor_sync(0xffffffffu, g, sh);
  if ((threadIdx.x & 31) == 0 && g != 0.f)
    atomicAdd(dSink + hh, g);
}

} // extern "C"
