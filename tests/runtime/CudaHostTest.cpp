//===- CudaHostTest.cpp - The cuda target's host side, on a fake driver ---===//
//
// No GPU: libattnc opens libattnc_fake_cuda.so as its driver
// (ATTNC_CUDA_DRIVER; FakeCudaDriver.h), whose devices are a compute
// capability 9.0, an 8.0 and an 8.6 GPU and whose launches are recorded,
// not run. What the host side does before a kernel runs is checked here on
// every machine: the launches of a call are the plan's tables' launches, in
// order, with the kernel of the device, dtype and head dimension, and their
// arguments (the tables on the device byte for byte equal to the host's,
// the tensors' addresses and strides, the state and slot buffers); tables
// are uploaded once per length and nothing is compiled; inputs the kernels
// cannot read in place are packed first and O written through a copy; CPU
// memory, another device's memory, unknown streams and devices are errors
// that launch nothing; kernels needing more shared memory than the GPU
// allows are refused, saying so. The kernels' arithmetic is CudaKernel*'s
// (CudaKernelTest.cpp, on a GPU).
//
//===----------------------------------------------------------------------===//
#include "FakeCudaDriver.h"
#include "TestSupport.h"
#include "cuda/CudaArgs.h"
#include "cuda/CudaPlan.h"

#include "attnc/plan/Inputs.h"
#include "attnc/plan/Plan.h"

#include "attnc/attnc.h"
#include "attnc/runtime/Internal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace attnc::test {
namespace {

using rt::cuda::BwdArgs;
using rt::cuda::FwdArgs;
using rt::cuda::SetTables;
using rt::cuda::View;

// Every GPU call of this process goes to the fake driver: set before
// libattnc opens one (at its first GPU call).
const bool kFakeDriver = [] {
  setenv("ATTNC_CUDA_DRIVER", ATTNC_FAKE_CUDA_PATH, 1);
  setenv("ATTNC_FAKE_CUDA_DEVICES", "9.0,8.0,8.6", 1);
  setenv("ATTNC_CUDA_POOL_KEEP_MB", "512", 1);
  unsetenv("ATTNC_CUDA_FWD_VARIANT");
  unsetenv("ATTNC_CUDA_BWD_VARIANT");
  return true;
}();

/// Memory of a fake device, freed with the object.
class DeviceMemory {
public:
  DeviceMemory(int device, size_t bytes) : p_(attnc_fake_cuda_alloc(device, bytes)) {}
  ~DeviceMemory() { attnc_fake_cuda_free(p_); }
  DeviceMemory(const DeviceMemory &) = delete;
  DeviceMemory &operator=(const DeviceMemory &) = delete;
  void *get() const { return p_; }

private:
  void *p_;
};

size_t bytesOf(attnc_dtype t) { return t == ATTNC_DTYPE_F32 ? 4 : 2; }

attnc_tensor contiguousTensor(void *data, attnc_dtype dtype, int64_t b, int64_t h, int64_t n, int64_t d) {
  attnc_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.shape[0] = b, t.shape[1] = h, t.shape[2] = n, t.shape[3] = d;
  t.strides[3] = 1, t.strides[2] = d, t.strides[1] = n * d, t.strides[0] = h * n * d;
  return t;
}

/// The tensors of a forward and a backward call, in memory of `device`.
struct Call {
  int64_t batch, hq, hkv, nq, nk, d;
  attnc_dtype dtype;
  std::vector<std::unique_ptr<DeviceMemory>> memory;
  attnc_tensor q{}, k{}, v{}, o{}, lse{}, dO{}, dq{}, dk{}, dv{};

  Call(int device, attnc_dtype type, int64_t b, int64_t hq_, int64_t hkv_, int64_t nq_, int64_t nk_, int64_t d_)
      : batch(b), hq(hq_), hkv(hkv_), nq(nq_), nk(nk_), d(d_), dtype(type) {
    auto make = [&](attnc_dtype t, int64_t heads, int64_t n, int64_t cols) {
      memory.push_back(std::make_unique<DeviceMemory>(device, size_t(b * heads * n * cols) * bytesOf(t)));
      return contiguousTensor(memory.back()->get(), t, b, heads, n, cols);
    };
    q = make(type, hq, nq, d), k = make(type, hkv, nk, d), v = make(type, hkv, nk, d);
    o = make(type, hq, nq, d), lse = make(ATTNC_DTYPE_F32, hq, nq, 1), dO = make(type, hq, nq, d);
    dq = make(type, hq, nq, d), dk = make(type, hkv, nk, d), dv = make(type, hkv, nk, d);
  }
  attnc_status forward(const attnc_device &dev) {
    return attnc_run_forward_on(kernel, &dev, &q, &k, &v, &o, &lse, nullptr);
  }
  attnc_status backward(const attnc_device &dev) {
    return attnc_run_backward_on(kernel, &dev, &q, &k, &v, &o, &dO, &lse, &dq, &dk, &dv, nullptr);
  }
  const attnc_kernel *kernel = nullptr;
};

std::vector<attnc_fake_launch> launches() {
  std::vector<attnc_fake_launch> all;
  for (int i = 0; i < attnc_fake_cuda_launch_count(); ++i)
    all.push_back(*attnc_fake_cuda_launch(i));
  return all;
}

template <class T> T argsOf(const attnc_fake_launch &l) {
  T a;
  std::memcpy(&a, l.args, sizeof a);
  return a;
}

/// The two Views of an attnc_copy / attnc_delta launch.
std::pair<View, View> viewsOf(const attnc_fake_launch &l) {
  View src, dst;
  std::memcpy(&src, l.args, sizeof src);
  std::memcpy(&dst, l.args + sizeof src, sizeof dst);
  return {src, dst};
}

/// Whether `device` holds `host`'s bytes at `ptr` (null for an empty table);
/// `retired`: in memory the call has freed in stream order since (a call's
/// own buffers, which the fake keeps until its reset).
template <class T>
::testing::AssertionResult holds(const void *ptr, const std::vector<T> &host, const char *what, bool retired = false) {
  if (host.empty())
    return ptr == nullptr ? ::testing::AssertionSuccess()
                          : ::testing::AssertionFailure() << what << ": a table where the host has none";
  const size_t bytes = host.size() * sizeof(T);
  if (!(retired ? attnc_fake_cuda_was_device(ptr, bytes) : attnc_fake_cuda_is_device(ptr, bytes)))
    return ::testing::AssertionFailure() << what << ": not " << bytes << " bytes of device memory";
  if (std::memcmp(ptr, host.data(), bytes) != 0)
    return ::testing::AssertionFailure() << what << ": the device's table differs from the host's";
  return ::testing::AssertionSuccess();
}

// --- What a launch's CTAs may touch, all in memory the call had on the device ---------

size_t elementBytes(int32_t dtype) { return dtype == ATTNC_DTYPE_F32 ? 4 : 2; }

/// Elements from a strided tensor's first to its last (batch, heads, rows of `cols`), or 0 if empty.
size_t extent(int64_t batch, int64_t heads, int64_t rows, int64_t cols, int64_t sb, int64_t sh, int64_t sn,
              int64_t sc = 1) {
  if (batch <= 0 || heads <= 0 || rows <= 0 || cols <= 0)
    return 0;
  return size_t((batch - 1) * sb + (heads - 1) * sh + (rows - 1) * sn + (cols - 1) * sc + 1);
}

#define ATTNC_IN_BOUNDS(ptr, bytes, what)                                                                       \
  do {                                                                                                          \
    if ((bytes) > 0 && !attnc_fake_cuda_was_device((ptr), (bytes)))                                            \
      return ::testing::AssertionFailure() << l.name << ": " << what << " (" << (bytes) << " bytes at " << (ptr) \
                                           << ") is not inside one of the call's device allocations";            \
  } while (0)

/// A forward launch: its items, their keys, masks and full flags, the slots
/// and state they use, and the rows of Q, K, V, O and lse (dp: the padded d).
::testing::AssertionResult forwardInBounds(const attnc_fake_launch &l, const std::vector<SetTables> &tables,
                                           const Call &c, int dp) {
  const auto a = argsOf<FwdArgs>(l);
  const SetTables &t = tables[size_t(a.set)];
  const size_t bh = l.grid[1];
  ATTNC_IN_BOUNDS(a.items + a.itemBegin, l.grid[0] * sizeof(rt::cuda::FwdItem), "items");
  for (unsigned x = 0; x < l.grid[0]; ++x) {
    const rt::cuda::FwdItem &it = t.fwdItems[size_t(a.itemBegin) + x];
    const size_t entries = size_t(it.numTiles) * 64;
    ATTNC_IN_BOUNDS(a.keys + it.keyBegin, entries * 4, "an item's keys");
    ATTNC_IN_BOUNDS(a.masks + it.keyBegin, entries * 8, "an item's masks");
    ATTNC_IN_BOUNDS(a.full + it.keyBegin / 64, size_t(it.numTiles), "an item's full flags");
    if (it.row0 < 0 || it.row0 + int64_t(it.rows - 1) * it.rowStride >= a.nk)
      return ::testing::AssertionFailure() << l.name << ": an item's rows leave the sequence";
    const size_t slot = bh * 64 * size_t(dp);
    if (a.writesSlots) {
      ATTNC_IN_BOUNDS(a.slotO + size_t(it.slot) * slot, slot * 4, "a chunk's slot");
      ATTNC_IN_BOUNDS(a.slotLse + size_t(it.slot) * bh * 64, bh * 64 * 4, "a chunk's slot lse");
    }
    for (int sl = it.mergeBegin; sl < it.mergeBegin + it.mergeCount; ++sl) {
      ATTNC_IN_BOUNDS(a.slotO + size_t(sl) * slot, slot * 4, "a merged slot");
      ATTNC_IN_BOUNDS(a.slotLse + size_t(sl) * bh * 64, bh * 64 * 4, "a merged slot's lse");
    }
  }
  if (a.readsState || a.writesState) {
    ATTNC_IN_BOUNDS(a.stateO, bh * size_t(a.nk) * size_t(dp) * 4, "the state");
    ATTNC_IN_BOUNDS(a.stateLse, bh * size_t(a.nk) * 4, "the state's lse");
  }
  const int64_t batch = int64_t(bh) / a.heads, kvHeads = a.heads / a.ratio;
  const size_t es = elementBytes(c.dtype == ATTNC_DTYPE_F16 ? ATTNC_DTYPE_F16 : ATTNC_DTYPE_BF16);
  ATTNC_IN_BOUNDS(a.q, extent(batch, a.heads, a.nq, a.d, a.qsb, a.qsh, a.qsn) * es, "Q");
  ATTNC_IN_BOUNDS(a.k, extent(batch, kvHeads, a.nk, a.d, a.ksb, a.ksh, a.ksn) * es, "K");
  ATTNC_IN_BOUNDS(a.v, extent(batch, kvHeads, a.nk, a.d, a.vsb, a.vsh, a.vsn) * es, "V");
  ATTNC_IN_BOUNDS(a.o, extent(batch, a.heads, a.nq, a.d, a.osb, a.osh, a.osn) * es, "O");
  if (a.lse)
    ATTNC_IN_BOUNDS(a.lse, extent(batch, a.heads, a.nq, 1, a.lsb, a.lsh, a.lsn) * 4, "lse");
  return ::testing::AssertionSuccess();
}

/// A backward launch: its items, their keys, rows, masks and full flags, the
/// f32 accumulators and delta, and the rows of Q, K, V, dO and lse.
::testing::AssertionResult backwardInBounds(const attnc_fake_launch &l, const std::vector<SetTables> &tables,
                                            int dp) {
  const auto a = argsOf<BwdArgs>(l);
  const SetTables &t = tables[size_t(a.set)];
  ATTNC_IN_BOUNDS(a.items + a.itemBegin, l.grid[0] * sizeof(rt::cuda::BwdItem), "items");
  for (unsigned x = 0; x < l.grid[0]; ++x) {
    const rt::cuda::BwdItem &it = t.bwdItems[size_t(a.itemBegin) + x];
    const size_t rows = size_t(it.numTiles) * 64;
    ATTNC_IN_BOUNDS(a.keys + it.keyBegin, size_t(64) * 4, "an item's keys");
    ATTNC_IN_BOUNDS(a.rows + it.rowBegin, rows * 4, "an item's rows");
    ATTNC_IN_BOUNDS(a.masks + it.rowBegin, rows * 8, "an item's masks");
    ATTNC_IN_BOUNDS(a.full + it.rowBegin / 64, size_t(it.numTiles), "an item's full flags");
  }
  const int64_t batch = int64_t(l.grid[1]) / (a.heads / a.ratio), kvHeads = a.heads / a.ratio;
  const size_t qRows = size_t(batch * a.heads * a.nq), kRows = size_t(batch * kvHeads * a.nk);
  ATTNC_IN_BOUNDS(a.dq, qRows * size_t(dp) * 4, "dQ's accumulator");
  ATTNC_IN_BOUNDS(a.dk, kRows * size_t(dp) * 4, "dK's accumulator");
  ATTNC_IN_BOUNDS(a.dv, kRows * size_t(dp) * 4, "dV's accumulator");
  ATTNC_IN_BOUNDS(a.delta, qRows * 4, "delta");
  ATTNC_IN_BOUNDS(a.q, extent(batch, a.heads, a.nq, a.d, a.qsb, a.qsh, a.qsn) * 2, "Q");
  ATTNC_IN_BOUNDS(a.k, extent(batch, kvHeads, a.nk, a.d, a.ksb, a.ksh, a.ksn) * 2, "K");
  ATTNC_IN_BOUNDS(a.v, extent(batch, kvHeads, a.nk, a.d, a.vsb, a.vsh, a.vsn) * 2, "V");
  ATTNC_IN_BOUNDS(a.dO, extent(batch, a.heads, a.nq, a.d, a.gsb, a.gsh, a.gsn) * 2, "dO");
  ATTNC_IN_BOUNDS(a.lse, extent(batch, a.heads, a.nq, 1, a.lsb, a.lsh, a.lsn) * 4, "lse");
  return ::testing::AssertionSuccess();
}

/// attnc_copy (src -> dst, padCols columns) and attnc_delta (dO, O -> delta).
::testing::AssertionResult elementwiseInBounds(const attnc_fake_launch &l) {
  const auto [src, dst] = viewsOf(l);
  auto bytes = [](const View &v, int64_t cols) {
    return extent(v.shape[0], v.shape[1], v.shape[2], cols, v.strides[0], v.strides[1], v.strides[2],
                  v.strides[3]) *
           elementBytes(v.dtype);
  };
  if (std::string(l.name) == "attnc_copy") {
    int32_t pad = 0;
    std::memcpy(&pad, l.args + 2 * sizeof(View), sizeof pad);
    View written = dst;
    for (int x = 0; x < 3; ++x)
      written.shape[x] = src.shape[x];
    ATTNC_IN_BOUNDS(src.data, bytes(src, std::min<int64_t>(src.cols, pad)), "the copy's source");
    ATTNC_IN_BOUNDS(dst.data, bytes(written, std::min<int64_t>(std::max(src.cols, dst.cols), pad)),
                    "the copy's destination");
  } else {
    float *delta = nullptr;
    std::memcpy(&delta, l.args + 2 * sizeof(View), sizeof delta);
    ATTNC_IN_BOUNDS(src.data, bytes(src, src.cols), "dO");
    ATTNC_IN_BOUNDS(dst.data, bytes(dst, src.cols), "O");
    ATTNC_IN_BOUNDS(delta, size_t(src.shape[0] * src.shape[1] * src.shape[2]) * 4, "delta");
  }
  return ::testing::AssertionSuccess();
}

/// Every launch recorded since the reset, in bounds.
void expectLaunchesInBounds(const std::vector<SetTables> &tables, const Call &c, int dp) {
  for (const attnc_fake_launch &l : launches()) {
    const std::string name = l.name;
    if (name.rfind("attnc_fwd", 0) == 0)
      EXPECT_TRUE(forwardInBounds(l, tables, c, dp));
    else if (name.rfind("attnc_bwd", 0) == 0)
      EXPECT_TRUE(backwardInBounds(l, tables, dp));
    else
      EXPECT_TRUE(elementwiseInBounds(l));
  }
}

KernelPtr kernelOf(const std::string &file, const std::vector<std::string> &defines) {
  std::string error;
  KernelPtr k = jitCompile(file.c_str(), nullptr, defines, "fused", jitCacheDir(), error);
  EXPECT_TRUE(k) << error;
  return k;
}

struct HostCase {
  const char *label;
  const char *file;
  std::vector<std::string> defines;
  int64_t n;
  int64_t hq, hkv; ///< a multi-head pattern: its heads
};

void PrintTo(const HostCase &c, std::ostream *os) { *os << c.label; }

const HostCase kHostCases[] = {
    {"FixedDefaults", "fixed", {}, 4097, 4, 2},
    {"StridedDefaults", "strided", {}, 4097, 4, 2},
    {"StridedSmall", "strided", {"l=8"}, 100, 2, 1},
    {"LocalDefaults", "local", {}, 1000, 2, 2},
    {"LongformerDefaults", "longformer", {}, 4097, 2, 2},
    {"BigbirdDefaults", "bigbird", {}, 4097, 4, 1},
    {"FixedMultihead", "fixed_multihead", {"l=8", "c=2"}, 1000, 2, 2},
    {"OneRow", "local", {"w=3"}, 1, 1, 1},
};

/// A library pattern's kernel and its tables at the case's length, built here.
class CudaHost : public ::testing::TestWithParam<HostCase> {
protected:
  void SetUp() override {
    const HostCase &hc = GetParam();
    kernel_ = kernelOf(hc.file, hc.defines);
    ASSERT_TRUE(kernel_);
    tables_ = rt::cuda::buildTables(rt::cuda::gpuPlan(patternIr(hc.file, hc.defines)), hc.n);
  }
  /// The case's tensors (`batch` of them, bf16, d = 64) on device 0, the counts reset.
  std::unique_ptr<Call> prepare(int64_t batch) {
    const HostCase &hc = GetParam();
    auto c = std::make_unique<Call>(0, ATTNC_DTYPE_BF16, batch, hc.hq, hc.hkv, hc.n, hc.n, 64);
    c->kernel = kernel_.get();
    attnc_fake_cuda_reset();
    return c;
  }
  KernelPtr kernel_{nullptr, attnc_kernel_free};
  std::vector<SetTables> tables_;
  attnc_device dev_{ATTNC_DEVICE_CUDA, 0, attnc_fake_cuda_stream(0)};
};

/// Checks the forward launches from `at` on against the tables: the kernel,
/// grid, block, shared memory and stream, and each argument.
void expectForwardLaunches(const std::vector<attnc_fake_launch> &got, size_t &at, const std::vector<SetTables> &tables,
                           const Call &c, const char *kernel, unsigned threads, unsigned smem, void *stream) {
  const float *stateO = nullptr;
  int32_t slots = 0; // (one slot buffer for the call, as large as the largest set needs)
  for (const SetTables &t : tables)
    slots = std::max(slots, t.slots);
  for (size_t s = 0; s < tables.size(); ++s)
    for (const rt::cuda::Launch &l : tables[s].fwdLaunches) {
      if (l.itemCount == 0)
        continue;
      ASSERT_LT(at, got.size()) << "fewer launches than the tables have";
      const attnc_fake_launch &g = got[at++];
      SCOPED_TRACE("launch " + std::to_string(at - 1) + " (" + g.name + ")");
      EXPECT_STREQ(g.name, kernel);
      EXPECT_EQ(g.grid[0], unsigned(l.itemCount));
      EXPECT_EQ(g.grid[1], unsigned(c.batch * c.hq));
      EXPECT_EQ(g.grid[2], 1u);
      EXPECT_EQ(g.block[0], threads);
      EXPECT_EQ(g.smem, smem);
      EXPECT_EQ(g.stream, stream);
      ASSERT_EQ(g.argBytes, sizeof(FwdArgs));
      const auto a = argsOf<FwdArgs>(g);
      EXPECT_EQ(a.set, int32_t(s));
      EXPECT_EQ(a.itemBegin, l.itemBegin);
      EXPECT_EQ(bool(a.readsState), l.readsState);
      EXPECT_EQ(bool(a.writesState), l.writesState);
      EXPECT_EQ(bool(a.writesSlots), l.writesSlots);
      EXPECT_TRUE(holds(a.items, tables[s].fwdItems, "items"));
      EXPECT_TRUE(holds(a.keys, tables[s].fwdKeys, "keys"));
      EXPECT_TRUE(holds(a.masks, tables[s].fwdMasks, "masks"));
      EXPECT_TRUE(holds(a.full, tables[s].fwdFull, "full"));
      EXPECT_EQ(a.heads, int32_t(c.hq));
      EXPECT_EQ(a.ratio, int32_t(c.hq / c.hkv));
      EXPECT_EQ(a.d, int32_t(c.d));
      EXPECT_EQ(a.nq, int32_t(c.nq));
      EXPECT_EQ(a.nk, int32_t(c.nk));
      EXPECT_EQ(a.first, int32_t(c.nk - c.nq));
      EXPECT_FLOAT_EQ(a.scaleLog2, float(1.0 / std::sqrt(double(c.d)) * 1.4426950408889634));
      EXPECT_EQ(a.lse, c.lse.data);
      EXPECT_EQ(a.lsn, 1);
      if (l.readsState || l.writesState) {
        ASSERT_NE(a.stateO, nullptr);
        ASSERT_NE(a.stateLse, nullptr);
        if (stateO) { // one state for the whole call
          EXPECT_EQ(a.stateO, stateO);
        }
        stateO = a.stateO;
      }
      EXPECT_EQ(a.slotO != nullptr, slots > 0);
      EXPECT_EQ(a.slotLse != nullptr, slots > 0);
    }
}

TEST_P(CudaHost, ForwardLaunchesAreTheTablesLaunches) {
  std::unique_ptr<Call> call = prepare(2);
  Call &c = *call;
  ASSERT_EQ(c.forward(dev_), ATTNC_OK) << attnc_last_error();
  const std::vector<attnc_fake_launch> first = launches();
  size_t at = 0;
  expectForwardLaunches(first, at, tables_, c, "attnc_fwd_wg_bf16_64", 128, rt::cuda::fwdSmemBytes(64), dev_.stream);
  EXPECT_EQ(at, first.size()) << "launches beyond the tables_'";
  for (const attnc_fake_launch &l : first) {
    const auto a = argsOf<FwdArgs>(l); // read in place: contiguous bf16 rows
    EXPECT_EQ(a.q, c.q.data);
    EXPECT_EQ(a.k, c.k.data);
    EXPECT_EQ(a.v, c.v.data);
    EXPECT_EQ(a.o, c.o.data);
    EXPECT_EQ(a.qsn, 64);
    EXPECT_EQ(a.qsh, c.nq * 64);
    EXPECT_EQ(a.ksh, c.nk * 64);
    EXPECT_EQ(a.ksb, c.hkv * c.nk * 64);
  }
  expectLaunchesInBounds(tables_, c, 64);
  attnc_fake_counts n = attnc_fake_cuda_counts();
  EXPECT_EQ(n.asyncAllocs, 0) << "a call's buffers come from attnc's pool";
  EXPECT_EQ(n.poolAllocs, n.asyncFrees) << "a call's buffers outlive it";
  EXPECT_GT(n.copiesToDevice, 0) << "the tables_ of a new length are uploaded";

  // The same call again: the same launches, and nothing uploaded or loaded.
  attnc_fake_cuda_reset();
  ASSERT_EQ(c.forward(dev_), ATTNC_OK) << attnc_last_error();
  n = attnc_fake_cuda_counts();
  EXPECT_EQ(n.copiesToDevice, 0);
  EXPECT_EQ(n.allocs, 0);
  EXPECT_EQ(n.moduleLoads, 0);
  const std::vector<attnc_fake_launch> second = launches();
  ASSERT_EQ(second.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_STREQ(second[i].name, first[i].name);
    const auto a = argsOf<FwdArgs>(first[i]), b = argsOf<FwdArgs>(second[i]);
    EXPECT_EQ(b.items, a.items);
    EXPECT_EQ(b.keys, a.keys);
    EXPECT_EQ(b.itemBegin, a.itemBegin);
  }
}

TEST_P(CudaHost, BackwardLaunchesAreTheTablesLaunches) {
  std::unique_ptr<Call> call = prepare(1);
  Call &c = *call;
  ASSERT_EQ(c.backward(dev_), ATTNC_OK) << attnc_last_error();
  const std::vector<attnc_fake_launch> got = launches();
  ASSERT_GE(got.size(), 4u);
  // rowsum(dO o O) first, over every query row of every head.
  EXPECT_STREQ(got[0].name, "attnc_delta");
  EXPECT_EQ(got[0].grid[0], unsigned((c.nq + 7) / 8));
  EXPECT_EQ(got[0].grid[1], unsigned(c.hq));
  EXPECT_EQ(got[0].grid[2], unsigned(c.batch));
  EXPECT_EQ(viewsOf(got[0]).first.data, c.dO.data);
  EXPECT_EQ(viewsOf(got[0]).second.data, c.o.data);
  float *delta = nullptr;
  std::memcpy(&delta, got[0].args + 2 * sizeof(View), sizeof delta);
  size_t at = 1;
  for (size_t s = 0; s < tables_.size(); ++s)
    for (const rt::cuda::Launch &l : tables_[s].bwdLaunches) {
      if (l.itemCount == 0)
        continue;
      ASSERT_LT(at, got.size());
      const attnc_fake_launch &g = got[at++];
      SCOPED_TRACE("launch " + std::to_string(at - 1) + " (" + g.name + ")");
      EXPECT_STREQ(g.name, "attnc_bwd_wg_bf16_64");
      EXPECT_EQ(g.grid[0], unsigned(l.itemCount));
      EXPECT_EQ(g.grid[1], unsigned(c.batch * c.hkv)); // a CTA per key group and key/value head
      EXPECT_EQ(g.block[0], 128u);
      EXPECT_EQ(g.smem, unsigned(rt::cuda::bwdSmemBytes(64)));
      EXPECT_EQ(g.stream, dev_.stream);
      ASSERT_EQ(g.argBytes, sizeof(BwdArgs));
      const auto a = argsOf<BwdArgs>(g);
      EXPECT_EQ(a.set, int32_t(s));
      EXPECT_EQ(a.itemBegin, l.itemBegin);
      EXPECT_TRUE(holds(a.items, tables_[s].bwdItems, "items"));
      EXPECT_TRUE(holds(a.keys, tables_[s].bwdKeys, "keys"));
      EXPECT_TRUE(holds(a.rows, tables_[s].bwdRows, "rows"));
      EXPECT_TRUE(holds(a.masks, tables_[s].bwdMasks, "masks"));
      EXPECT_TRUE(holds(a.full, tables_[s].bwdFull, "full"));
      EXPECT_EQ(a.q, c.q.data);
      EXPECT_EQ(a.dO, c.dO.data);
      EXPECT_EQ(a.lse, c.lse.data);
      EXPECT_EQ(a.delta, delta);
      EXPECT_EQ(a.ratio, int32_t(c.hq / c.hkv));
      EXPECT_FLOAT_EQ(a.scale, float(1.0 / std::sqrt(64.0)));
    }
  // The f32 accumulators converted into dQ, dK, dV last.
  ASSERT_EQ(got.size(), at + 3);
  const void *grads[3] = {c.dq.data, c.dk.data, c.dv.data};
  for (int g = 0; g < 3; ++g) {
    EXPECT_STREQ(got[at + g].name, "attnc_copy");
    const auto [src, dst] = viewsOf(got[at + g]);
    EXPECT_EQ(src.dtype, int32_t(ATTNC_DTYPE_F32));
    EXPECT_EQ(dst.data, grads[g]);
    EXPECT_EQ(dst.cols, 64);
  }
  expectLaunchesInBounds(tables_, c, 64);
  const attnc_fake_counts n = attnc_fake_cuda_counts();
  EXPECT_EQ(n.memsets, 3) << "the dQ, dK, dV accumulators zeroed, and nothing else";
  EXPECT_EQ(n.poolAllocs, 4); // delta and the f32 accumulators of dQ, dK, dV
  EXPECT_EQ(n.asyncAllocs, 0);
  EXPECT_EQ(n.poolAllocs, n.asyncFrees);
  // One pool per device, keeping ATTNC_CUDA_POOL_KEEP_MB of freed memory mapped across synchronisations.
  EXPECT_EQ(attnc_fake_cuda_pools(0), 1);
  EXPECT_EQ(attnc_fake_cuda_pool_threshold(0), 512ull << 20);
}

INSTANTIATE_TEST_SUITE_P(Library, CudaHost, ::testing::ValuesIn(kHostCases),
                         [](const ::testing::TestParamInfo<HostCase> &i) { return std::string(i.param.label); });

// --- The kernel of a device, dtype, head dimension and variant ------------------

struct Choice {
  int device;
  attnc_dtype dtype;
  int64_t d;
  int forced;         ///< attnc_internal_cuda_forward_variant / _backward_variant (-1: none)
  bool backward;
  const char *kernel; ///< null: ATTNC_ERROR_UNSUPPORTED, with `why` in the message
  const char *why;
};

/// Runs `ch`'s pass of `c` on its device with its variant forced (none
/// after it), the fake's log cleared first. A choice without a kernel must
/// be refused with its reason, launching nothing: `refused` says whether it
/// was (and then there is nothing more to check).
attnc_status runChoice(Call &c, const Choice &ch, bool &refused) {
  const attnc_device dev{ATTNC_DEVICE_CUDA, ch.device, nullptr};
  EXPECT_EQ(ch.backward ? attnc_internal_cuda_backward_variant(ch.forced)
                        : attnc_internal_cuda_forward_variant(ch.forced),
            ATTNC_OK);
  attnc_fake_cuda_reset();
  const attnc_status st = ch.backward ? c.backward(dev) : c.forward(dev);
  const std::string error = st == ATTNC_OK ? "" : attnc_last_error();
  attnc_internal_cuda_forward_variant(-1);
  attnc_internal_cuda_backward_variant(-1);
  refused = !ch.kernel;
  if (refused) {
    EXPECT_EQ(st, ATTNC_ERROR_UNSUPPORTED);
    EXPECT_NE(error.find(ch.why), std::string::npos) << error;
    EXPECT_EQ(attnc_fake_cuda_launch_count(), 0) << "a refused call launched something";
  } else {
    EXPECT_EQ(st, ATTNC_OK) << error;
  }
  return st;
}

TEST(CudaHostKernels, ByDeviceDtypeHeadDimensionAndVariant) {
  KernelPtr kernel = kernelOf("local", {"w=8"});
  ASSERT_TRUE(kernel);
  const Choice choices[] = {
      // Compute capability 9.0: wgmma up to d = 128.
      {0, ATTNC_DTYPE_BF16, 64, -1, false, "attnc_fwd_wg_bf16_64", nullptr},
      {0, ATTNC_DTYPE_F16, 80, -1, false, "attnc_fwd_wg_f16_128", nullptr},
      {0, ATTNC_DTYPE_BF16, 200, -1, false, "attnc_fwd_bf16_256", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, 0, false, "attnc_fwd_bf16_64", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, 3, false, "attnc_fwd_bf16_64_v3", nullptr},
      {0, ATTNC_DTYPE_F16, 64, 2, false, "attnc_fwd_f16_64", nullptr}, // (variants 1-3: bf16 only)
      {0, ATTNC_DTYPE_BF16, 64, 5, false, "attnc_fwd_wg3_bf16_64", nullptr},
      {0, ATTNC_DTYPE_BF16, 128, 5, false, "attnc_fwd_wg_bf16_128", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, -1, true, "attnc_bwd_wg_bf16_64", nullptr},
      {0, ATTNC_DTYPE_F16, 128, -1, true, "attnc_bwd_wg_f16_128", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, 0, true, "attnc_bwd_bf16_64", nullptr},
      {0, ATTNC_DTYPE_BF16, 256, -1, true, "attnc_bwd_bf16_256", nullptr},
      // 8.0 (an A100): mma.sync; 163 KB of shared memory: the d = 256 backward (203 KB) does not fit.
      {1, ATTNC_DTYPE_BF16, 64, -1, false, "attnc_fwd_bf16_64", nullptr},
      {1, ATTNC_DTYPE_BF16, 256, -1, false, "attnc_fwd_bf16_256", nullptr},
      {1, ATTNC_DTYPE_BF16, 128, -1, true, "attnc_bwd_bf16_128", nullptr},
      {1, ATTNC_DTYPE_BF16, 64, 4, false, nullptr, "compute capability 9.0"},
      {1, ATTNC_DTYPE_BF16, 64, 1, true, nullptr, "compute capability 9.0"},
      {1, ATTNC_DTYPE_BF16, 256, -1, true, nullptr, "allows 163 KB"},
      // 8.6: 99 KB.
      {2, ATTNC_DTYPE_F16, 128, -1, false, "attnc_fwd_f16_128", nullptr},
      {2, ATTNC_DTYPE_BF16, 64, -1, true, "attnc_bwd_bf16_64", nullptr},
      {2, ATTNC_DTYPE_BF16, 256, -1, false, nullptr, "allows 99 KB"},
      {2, ATTNC_DTYPE_BF16, 128, -1, true, nullptr, "allows 99 KB"},
  };
  for (const Choice &ch : choices) {
    SCOPED_TRACE("device " + std::to_string(ch.device) + ", d = " + std::to_string(ch.d) + ", variant " +
                 std::to_string(ch.forced) + (ch.backward ? ", backward" : ", forward"));
    Call c(ch.device, ch.dtype, 1, 1, 1, 100, 100, ch.d);
    c.kernel = kernel.get();
    bool refused = false;
    if (runChoice(c, ch, refused) != ATTNC_OK || refused)
      continue;
    bool found = false;
    for (const attnc_fake_launch &l : launches())
      if (std::string(l.name).rfind(ch.backward ? "attnc_bwd" : "attnc_fwd", 0) == 0) {
        EXPECT_STREQ(l.name, ch.kernel);
        found = true;
        if (!ch.backward) {
          EXPECT_EQ(argsOf<FwdArgs>(l).d, int32_t(ch.d));
          EXPECT_EQ(l.block[0], std::string(ch.kernel).find("_v3") != std::string::npos ? 64u : 128u);
          const bool stages3 = std::string(ch.kernel).find("wg3") != std::string::npos;
          const int dp = ch.d <= 64 ? 64 : ch.d <= 128 ? 128 : 256;
          EXPECT_EQ(l.smem, unsigned(rt::cuda::fwdSmemBytes(dp, stages3 ? 3 : 2)));
        }
      }
    EXPECT_TRUE(found) << "no " << (ch.backward ? "backward" : "forward") << " kernel launched";
  }
}

// --- Inputs the kernels cannot read in place ------------------------------------

TEST(CudaHostPacking, UnalignedF32AndOddInputsArePackedAndOWrittenThroughACopy) {
  KernelPtr kernel = kernelOf("local", {"w=8"});
  ASSERT_TRUE(kernel);
  const std::vector<SetTables> tables = rt::cuda::buildTables(rt::cuda::gpuPlan(patternIr("local", {"w=8"})), 50);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  // A forward of `c`: its launches, each in bounds.
  auto run = [&](Call &c) {
    c.kernel = kernel.get();
    attnc_fake_cuda_reset();
    EXPECT_EQ(c.forward(dev), ATTNC_OK) << attnc_last_error();
    expectLaunchesInBounds(tables, c, 64);
    return launches();
  };
  {
    // q 2 bytes off a 16-byte boundary: copied to an aligned buffer first; k, v, O in place.
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 64);
    DeviceMemory shifted(0, 50 * 64 * 2 + 16);
    c.q.data = static_cast<char *>(shifted.get()) + 2;
    const auto got = run(c);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_STREQ(got[0].name, "attnc_copy");
    EXPECT_STREQ(got[1].name, "attnc_fwd_wg_bf16_64");
    const auto [src, dst] = viewsOf(got[0]);
    const auto a = argsOf<FwdArgs>(got[1]);
    EXPECT_EQ(src.data, c.q.data);
    EXPECT_EQ(a.q, dst.data);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.q) % 16, 0u);
    EXPECT_EQ(a.k, c.k.data);
    EXPECT_EQ(a.o, c.o.data);
  }
  {
    // f32 tensors: q, k, v rounded to bf16 copies, O through a bf16 buffer copied back.
    Call c(0, ATTNC_DTYPE_F32, 1, 2, 2, 50, 50, 64);
    const auto got = run(c);
    ASSERT_EQ(got.size(), 5u);
    const void *inputs[3] = {c.q.data, c.k.data, c.v.data};
    for (int i = 0; i < 3; ++i) {
      EXPECT_STREQ(got[i].name, "attnc_copy");
      EXPECT_EQ(viewsOf(got[i]).first.data, inputs[i]);
      EXPECT_EQ(viewsOf(got[i]).second.dtype, int32_t(ATTNC_DTYPE_BF16));
    }
    EXPECT_STREQ(got[3].name, "attnc_fwd_wg_bf16_64");
    const auto a = argsOf<FwdArgs>(got[3]);
    EXPECT_EQ(a.q, viewsOf(got[0]).second.data);
    EXPECT_EQ(a.v, viewsOf(got[2]).second.data);
    EXPECT_STREQ(got[4].name, "attnc_copy");
    EXPECT_EQ(viewsOf(got[4]).first.data, a.o);
    EXPECT_EQ(viewsOf(got[4]).second.data, c.o.data);
    EXPECT_EQ(viewsOf(got[4]).second.dtype, int32_t(ATTNC_DTYPE_F32));
  }
  {
    // [B, n, H, d] memory viewed as [B, H, n, d] (PyTorch's layout): read in place.
    Call c(0, ATTNC_DTYPE_BF16, 1, 4, 4, 50, 50, 64);
    for (attnc_tensor *t : {&c.q, &c.k, &c.v, &c.o})
      t->strides[2] = 4 * 64, t->strides[1] = 64, t->strides[0] = 50 * 4 * 64;
    const auto got = run(c);
    ASSERT_EQ(got.size(), 1u);
    const auto a = argsOf<FwdArgs>(got[0]);
    EXPECT_EQ(a.q, c.q.data);
    EXPECT_EQ(a.qsn, 4 * 64);
    EXPECT_EQ(a.qsh, 64);
    EXPECT_EQ(a.osn, 4 * 64);
  }
  {
    // d = 33: rows not a multiple of 8 elements, packed to 40 columns; O (odd rows) through a copy.
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 33);
    const auto got = run(c);
    ASSERT_EQ(got.size(), 5u);
    EXPECT_EQ(viewsOf(got[0]).second.cols, 40);
    EXPECT_STREQ(got[3].name, "attnc_fwd_wg_bf16_64");
    EXPECT_NE(argsOf<FwdArgs>(got[3]).o, c.o.data);
    EXPECT_EQ(viewsOf(got[4]).second.data, c.o.data);
    EXPECT_EQ(viewsOf(got[4]).second.cols, 33);
  }
}

// --- Errors that launch nothing ------------------------------------------------------

TEST(CudaHostErrors, WrongMemoryStreamsAndDevicesLaunchNothing) {
  KernelPtr kernel = kernelOf("local", {"w=8"});
  ASSERT_TRUE(kernel);
  auto expectError = [&](Call &c, const attnc_device &dev, attnc_status want, const std::string &words) {
    attnc_fake_cuda_reset();
    EXPECT_EQ(c.forward(dev), want);
    EXPECT_NE(std::string(attnc_last_error()).find(words), std::string::npos) << attnc_last_error();
    EXPECT_EQ(c.backward(dev), want);
    EXPECT_NE(std::string(attnc_last_error()).find(words), std::string::npos) << attnc_last_error();
    EXPECT_EQ(attnc_fake_cuda_launch_count(), 0);
  };
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 64);
    c.kernel = kernel.get();
    std::vector<uint16_t> host(50 * 64);
    c.k.data = host.data();
    expectError(c, dev, ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'k' is not CUDA device memory");
  }
  {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 64);
    c.kernel = kernel.get();
    DeviceMemory other(1, 50 * 64 * 2);
    c.v.data = other.get();
    expectError(c, dev, ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'v' is memory of CUDA device 1");
  }
  {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 64);
    c.kernel = kernel.get();
    int notAStream = 0;
    attnc_device bad{ATTNC_DEVICE_CUDA, 0, &notAStream};
    expectError(c, bad, ATTNC_ERROR_INVALID_ARGUMENT, "is not a usable CUDA stream of device 0");
  }
  {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 64);
    c.kernel = kernel.get();
    attnc_device crossed{ATTNC_DEVICE_CUDA, 0, attnc_fake_cuda_stream(1)};
    expectError(c, crossed, ATTNC_ERROR_INVALID_ARGUMENT, "belongs to another CUDA context than device 0's");
  }
  {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 50, 50, 64);
    c.kernel = kernel.get();
    attnc_device missing{ATTNC_DEVICE_CUDA, 3, nullptr};
    expectError(c, missing, ATTNC_ERROR_INVALID_ARGUMENT, "CUDA device 3 does not exist (this machine has 3)");
    EXPECT_EQ(attnc_device_check(&missing), ATTNC_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(attnc_device_check(&dev), ATTNC_OK) << attnc_last_error();
  }
}

// --- CUDA graphs -------------------------------------------------------------------

TEST(CudaHostCapture, CallsAtAWarmLengthAreCapturable) {
  // Under capture (torch.cuda.graph, torch.compile's "reduce-overhead") a call must neither query nor
  // synchronise the stream, nor allocate outside stream order: once its length has run (tables uploaded,
  // code loaded), a forward and a backward are captured whole, strided's state and the packing included.
  for (const char *file : {"local", "strided"}) {
    SCOPED_TRACE(file);
    KernelPtr kernel = kernelOf(file, {});
    ASSERT_TRUE(kernel);
    void *stream = attnc_fake_cuda_stream(0);
    attnc_device dev{ATTNC_DEVICE_CUDA, 0, stream};
    Call c(0, ATTNC_DTYPE_F32, 1, 2, 2, 300, 300, 64); // (f32: packed copies on the stream)
    c.kernel = kernel.get();
    ASSERT_EQ(c.forward(dev), ATTNC_OK) << attnc_last_error();
    ASSERT_EQ(c.backward(dev), ATTNC_OK) << attnc_last_error();
    attnc_fake_cuda_reset();
    attnc_fake_cuda_capture(stream, 1);
    EXPECT_EQ(c.forward(dev), ATTNC_OK) << attnc_last_error();
    EXPECT_EQ(c.backward(dev), ATTNC_OK) << attnc_last_error();
    EXPECT_EQ(attnc_fake_cuda_capture(stream, 0), 1) << "a call invalidated the capture";
    EXPECT_GT(attnc_fake_cuda_launch_count(), 0);
    // A length not run before uploads its tables: not capturable, and said so.
    Call fresh(0, ATTNC_DTYPE_BF16, 1, 2, 2, 301, 301, 64);
    fresh.kernel = kernel.get();
    attnc_fake_cuda_capture(stream, 1);
    EXPECT_NE(fresh.forward(dev), ATTNC_OK);
    EXPECT_NE(std::string(attnc_last_error()).find("capturing"), std::string::npos) << attnc_last_error();
    EXPECT_EQ(attnc_fake_cuda_capture(stream, 0), 0);
  }
}

// --- Lengths: tables once per length, nothing compiled -----------------------------

TEST(CudaHostLengths, TablesOncePerLengthNothingCompiled) {
  KernelPtr kernel = kernelOf("local", {"w=8"});
  ASSERT_TRUE(kernel);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  auto callAt = [&](int64_t n) {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, n, n, 64);
    c.kernel = kernel.get();
    attnc_fake_cuda_reset();
    EXPECT_EQ(c.forward(dev), ATTNC_OK) << attnc_last_error();
    return attnc_fake_cuda_counts();
  };
  callAt(100); // (loads the module, if no test of this process has)
  EXPECT_EQ(callAt(100).copiesToDevice, 0);
  const attnc_fake_counts second = callAt(200);
  EXPECT_GT(second.copiesToDevice, 0);
  EXPECT_EQ(second.moduleLoads, 0) << "a new length loaded (compiled) code";
  EXPECT_EQ(callAt(100).copiesToDevice, 0);
  // The tables of the 16 lengths used most recently are kept: 100, called between 17 new lengths, stays;
  // 200, not called again, is freed and built again at its next call.
  long frees = 0;
  for (int64_t n = 300; n < 317; ++n) {
    frees += callAt(n).frees;
    EXPECT_EQ(callAt(100).copiesToDevice, 0) << "evicted while in use, at n = " << n;
  }
  EXPECT_GT(frees, 0);
  EXPECT_GT(callAt(200).copiesToDevice, 0);
}

// --- Threads -----------------------------------------------------------------------

TEST(CudaHostThreads, CallsFromManyThreadsAtManyLengths) {
  // One kernel called from 4 threads at once on two devices: first at 8 lengths (16 device-length pairs, all
  // kept), where each forward launch must read its own length's tables (equal to those built here); then at
  // 24 (tables evicted and rebuilt while other threads run), where no call may fail. The TSan build runs it too.
  KernelPtr kernel = kernelOf("strided", {"l=8"});
  ASSERT_TRUE(kernel);
  const plan::Plan plan = rt::cuda::gpuPlan(patternIr("strided", {"l=8"}));
  std::vector<std::vector<SetTables>> expected;
  for (int64_t n = 40; n < 64; ++n)
    expected.push_back(rt::cuda::buildTables(plan, n));
  for (const int lengths : {8, 24}) {
    SCOPED_TRACE(std::to_string(lengths) + " lengths");
    std::atomic<int> failures{0};
    auto worker = [&](int t) {
      const int device = t % 2;
      for (int i = 0; i < 48; ++i) {
        const int64_t n = 40 + (t * 7 + i * 5) % lengths;
        Call c(device, ATTNC_DTYPE_BF16, 1, 1, 1, n, n, 64);
        c.kernel = kernel.get();
        attnc_device dev{ATTNC_DEVICE_CUDA, device, nullptr};
        if (c.forward(dev) != ATTNC_OK || c.backward(dev) != ATTNC_OK)
          ++failures;
      }
    };
    attnc_fake_cuda_reset();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back(worker, t);
    for (std::thread &t : threads)
      t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(attnc_fake_cuda_launch_count(), int(attnc_fake_cuda_counts().launches));
    if (lengths > 8)
      continue; // (evicted tables are freed: their launches' contents cannot be read back)
    int mismatches = 0, forwards = 0;
    for (const attnc_fake_launch &l : launches())
      if (std::string(l.name).rfind("attnc_fwd", 0) == 0) {
        const auto a = argsOf<FwdArgs>(l);
        const SetTables &t = expected[size_t(a.nk - 40)][size_t(a.set)];
        mismatches += !holds(a.items, t.fwdItems, "items") || !holds(a.keys, t.fwdKeys, "keys");
        ++forwards;
      }
    EXPECT_EQ(mismatches, 0);
    EXPECT_GE(forwards, 4 * 48);
  }
}

// --- Queries at an offset and varlen batches ------------------------------------

TEST(CudaHostCalls, QueriesAtAnOffsetAndVarlenSequences) {
  KernelPtr kernel = kernelOf("local", {"w=8"});
  ASSERT_TRUE(kernel);
  attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  {
    Call c(0, ATTNC_DTYPE_BF16, 1, 1, 1, 100, 300, 64);
    c.kernel = kernel.get();
    attnc_fake_cuda_reset();
    ASSERT_EQ(attnc_run_forward_at_on(kernel.get(), &dev, 50, &c.q, &c.k, &c.v, &c.o, &c.lse, nullptr), ATTNC_OK)
        << attnc_last_error();
    for (const attnc_fake_launch &l : launches()) {
      const auto a = argsOf<FwdArgs>(l);
      EXPECT_EQ(a.first, 50);
      EXPECT_EQ(a.nq, 100);
      EXPECT_EQ(a.nk, 300);
    }
    EXPECT_EQ(attnc_run_forward_at_on(kernel.get(), &dev, 201, &c.q, &c.k, &c.v, &c.o, &c.lse, nullptr),
              ATTNC_ERROR_SHAPE);
  }
  {
    // Two sequences of 30 and 70 rows in one [1, H, 100, d] batch: a call of its own each.
    Call c(0, ATTNC_DTYPE_BF16, 1, 2, 2, 100, 100, 64);
    c.kernel = kernel.get();
    const int32_t cu[] = {0, 30, 100};
    attnc_varlen varlen{cu, cu, 2};
    attnc_fake_cuda_reset();
    ASSERT_EQ(attnc_run_varlen_on(kernel.get(), &dev, &c.q, &c.k, &c.v, &c.o, &c.lse, &varlen, nullptr), ATTNC_OK)
        << attnc_last_error();
    const auto got = launches();
    ASSERT_FALSE(got.empty());
    std::vector<int32_t> lengths;
    for (const attnc_fake_launch &l : got) {
      const auto a = argsOf<FwdArgs>(l);
      if (lengths.empty() || lengths.back() != a.nk)
        lengths.push_back(a.nk);
      const int64_t row0 = a.nk == 30 ? 0 : 30;
      EXPECT_EQ(a.q, static_cast<char *>(c.q.data) + row0 * 64 * 2);
      EXPECT_EQ(a.lse, static_cast<float *>(c.lse.data) + row0);
      EXPECT_EQ(a.qsh, 100 * 64); // the batch's strides
    }
    EXPECT_EQ(lengths, (std::vector<int32_t>{30, 70}));
  }
  {
    // The backward of 3 sequences, the middle one with 20 keys and no query: its dK, dV rows are zeroed (a
    // memset per head of each), the others run as calls of their own.
    Call c(0, ATTNC_DTYPE_BF16, 1, 2, 2, 100, 120, 64);
    c.kernel = kernel.get();
    const int32_t cuQ[] = {0, 30, 30, 100}, cuK[] = {0, 30, 50, 120};
    attnc_varlen varlen{cuQ, cuK, 3};
    attnc_fake_cuda_reset();
    ASSERT_EQ(attnc_run_backward_varlen_on(kernel.get(), &dev, &c.q, &c.k, &c.v, &c.o, &c.dO, &c.lse, &c.dq, &c.dk,
                                           &c.dv, &varlen, nullptr),
              ATTNC_OK)
        << attnc_last_error();
    const attnc_fake_counts n = attnc_fake_cuda_counts();
    EXPECT_EQ(n.memsets, 2 * 3 + 2 * 2); // accumulators of the 2 calls, and dK, dV of the middle one's 2 heads
    int deltas = 0;
    for (const attnc_fake_launch &l : launches())
      deltas += std::string(l.name) == "attnc_delta";
    EXPECT_EQ(deltas, 2);
  }
}

// --- Score modifiers: soft caps and sinks ----------------------------------------

KernelPtr kernelFromSource(const char *source) {
  std::string error;
  KernelPtr k = jitCompile(nullptr, source, {}, "fused", jitCacheDir(), error);
  EXPECT_TRUE(k) << error;
  return k;
}

/// The launches named `name`.
std::vector<attnc_fake_launch> launchesOf(const char *name) {
  std::vector<attnc_fake_launch> out;
  for (const attnc_fake_launch &l : launches())
    if (std::string(l.name) == name)
      out.push_back(l);
  return out;
}

TEST(CudaHostModifiers, SoftCapsRunTheCappedKernelsWithTheirConstants) {
  KernelPtr capped = kernelOf("capped_fixed", {"l=16", "c=4"}); // 20 * tanh(s / 20)
  KernelPtr plain = kernelOf("fixed", {"l=16", "c=4"});
  ASSERT_TRUE(capped && plain);
  const Choice choices[] = {
      {0, ATTNC_DTYPE_BF16, 64, -1, false, "attnc_fwd_wg_cap_bf16_64", nullptr},
      {0, ATTNC_DTYPE_F16, 128, -1, false, "attnc_fwd_wg_cap_f16_128", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, 0, false, "attnc_fwd_cap_bf16_64", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, 3, false, "attnc_fwd_cap_bf16_64", nullptr}, // (1-3: variant 0's when capped)
      {0, ATTNC_DTYPE_BF16, 64, 5, false, "attnc_fwd_wg_cap_bf16_64", nullptr}, // (5: 4's)
      {0, ATTNC_DTYPE_BF16, 200, -1, false, "attnc_fwd_cap_bf16_256", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, -1, true, "attnc_bwd_wg_cap_bf16_64", nullptr},
      {0, ATTNC_DTYPE_BF16, 64, 0, true, "attnc_bwd_cap_bf16_64", nullptr},
      {1, ATTNC_DTYPE_F16, 128, -1, false, "attnc_fwd_cap_f16_128", nullptr},
      {1, ATTNC_DTYPE_BF16, 128, -1, true, "attnc_bwd_cap_bf16_128", nullptr},
      {1, ATTNC_DTYPE_BF16, 64, 4, false, nullptr, "compute capability 9.0"},
  };
  for (const Choice &ch : choices)
    for (const attnc_kernel *kernel : {capped.get(), plain.get()}) {
      const bool cap = kernel == capped.get();
      SCOPED_TRACE(std::string(cap ? "capped" : "plain") + ", device " + std::to_string(ch.device) + ", d = " +
                   std::to_string(ch.d) + ", variant " + std::to_string(ch.forced) +
                   (ch.backward ? ", backward" : ", forward"));
      Call c(ch.device, ch.dtype, 1, 2, 2, 100, 100, ch.d);
      c.kernel = kernel;
      bool refused = false;
      if (runChoice(c, ch, refused) != ATTNC_OK || refused)
        continue;
      const float scale = float(1.0 / std::sqrt(double(ch.d)));
      int found = 0;
      for (const attnc_fake_launch &l : launches()) {
        const std::string name = l.name;
        if (name.rfind(ch.backward ? "attnc_bwd" : "attnc_fwd", 0) != 0)
          continue;
        ++found;
        EXPECT_EQ(name.find("_cap_") != std::string::npos, cap) << name;
        if (cap) {
          EXPECT_EQ(name, ch.kernel);
        }
        if (ch.backward) {
          const auto a = argsOf<BwdArgs>(l);
          EXPECT_FLOAT_EQ(a.capIn, cap ? 0.05f * scale : 0.f);
          EXPECT_FLOAT_EQ(a.capOutLog2, cap ? float(20 * 1.4426950408889634) : 0.f);
          EXPECT_FLOAT_EQ(a.capGrad, cap ? 1.f : 0.f); // (1 / 20 * 20)
        } else {
          const auto a = argsOf<FwdArgs>(l);
          EXPECT_FLOAT_EQ(a.capIn, cap ? 0.05f * scale : 0.f);
          EXPECT_FLOAT_EQ(a.capOutLog2, cap ? float(20 * 1.4426950408889634) : 0.f);
          EXPECT_EQ(a.sink, nullptr);
        }
      }
      EXPECT_GT(found, 0) << "no kernel launched";
    }
}

/// The tensors of a call (2 x 4 heads, 2 key/value heads, n = 100, d = 64) with one per-head float
/// input `name` (a sink's logits, ALiBi's slopes) and its gradient, on `device`.
struct SinkCall : Call {
  DeviceMemory z, dz;
  attnc_tensor tz{}, tdz{};
  attnc_input input{}, grad{};
  SinkCall(int device, attnc_dtype zType, int64_t zStride, const char *name = "z")
      : Call(device, ATTNC_DTYPE_BF16, 2, 4, 2, 100, 100, 64),
        z(device, size_t(4 * zStride) * (zType == ATTNC_DTYPE_F32 ? 4 : 2)), dz(device, 4 * 4) {
    tz.data = z.get(), tz.dtype = zType;
    tz.shape[0] = 4, tz.shape[1] = tz.shape[2] = tz.shape[3] = 1;
    tz.strides[0] = zStride, tz.strides[1] = tz.strides[2] = tz.strides[3] = 1;
    tdz = tz;
    tdz.data = dz.get(), tdz.dtype = ATTNC_DTYPE_F32, tdz.strides[0] = 1;
    input = {name, tz};
    grad = {name, tdz};
  }
  attnc_status forwardWith(const attnc_device &dev, const attnc_input *in, int64_t count) {
    attnc_call call;
    attnc_call_init(&call);
    call.q = &q, call.k = &k, call.v = &v, call.o = &o, call.lse = &lse, call.device = &dev;
    call.inputs = in, call.num_inputs = count;
    return attnc_forward(kernel, &call);
  }
  attnc_status backwardWith(const attnc_device &dev, const attnc_input *grads, int64_t count) {
    attnc_call call;
    attnc_call_init(&call);
    call.q = &q, call.k = &k, call.v = &v, call.o = &o, call.lse = &lse, call.d_o = &dO;
    call.d_q = &dq, call.d_k = &dk, call.d_v = &dv, call.device = &dev;
    call.inputs = &input, call.num_inputs = 1, call.d_inputs = grads, call.num_d_inputs = count;
    return attnc_backward(kernel, &call);
  }
};

TEST(CudaHostModifiers, SinksAreCopiedFoldedIntoTheForwardAndDifferentiated) {
  KernelPtr kernel = kernelOf("sink_window", {"w=16"});
  ASSERT_TRUE(kernel);
  for (const auto &[zType, zStride] : {std::pair{ATTNC_DTYPE_F32, int64_t{1}}, {ATTNC_DTYPE_BF16, int64_t{3}}}) {
    SCOPED_TRACE(std::string("sink logits ") + (zType == ATTNC_DTYPE_F32 ? "f32" : "bf16") + ", stride " +
                 std::to_string(zStride));
    SinkCall c(0, zType, zStride);
    c.kernel = kernel.get();
    const attnc_device dev{ATTNC_DEVICE_CUDA, 0, attnc_fake_cuda_stream(0)};
    attnc_fake_cuda_reset();
    ASSERT_EQ(c.forwardWith(dev, &c.input, 1), ATTNC_OK) << attnc_last_error();
    // The logits, copied to f32 [heads] first, are what every forward launch folds in.
    const std::vector<attnc_fake_launch> all = launches();
    ASSERT_GE(all.size(), 2u);
    ASSERT_STREQ(all[0].name, "attnc_copy");
    const auto [src, dst] = viewsOf(all[0]);
    EXPECT_EQ(src.data, c.z.get());
    EXPECT_EQ(src.dtype, int32_t(zType));
    EXPECT_EQ(src.shape[2], 4);
    EXPECT_EQ(src.strides[2], zStride);
    EXPECT_EQ(src.cols, 1);
    EXPECT_EQ(dst.dtype, int32_t(ATTNC_DTYPE_F32));
    EXPECT_EQ(dst.strides[2], 1);
    EXPECT_TRUE(attnc_fake_cuda_was_device(dst.data, 4 * 4));
    int forwards = 0;
    for (size_t i = 1; i < all.size(); ++i) {
      ASSERT_STREQ(all[i].name, "attnc_fwd_wg_bf16_64");
      EXPECT_EQ(argsOf<FwdArgs>(all[i]).sink, dst.data);
      EXPECT_EQ(all[i].stream, dev.stream);
      ++forwards;
    }
    EXPECT_GT(forwards, 0);

    // Backward with the sink's gradient: -sum e^(z - lse) delta per head, from the forward's lse and
    // attnc_delta's rows, into an f32 buffer copied to d_z.
    attnc_fake_cuda_reset();
    ASSERT_EQ(c.backwardWith(dev, &c.grad, 1), ATTNC_OK) << attnc_last_error();
    const std::vector<attnc_fake_launch> deltas = launchesOf("attnc_delta"), grads = launchesOf("attnc_sink_grad");
    ASSERT_EQ(deltas.size(), 1u);
    ASSERT_EQ(grads.size(), 1u);
    const attnc_fake_launch &g = grads[0];
    EXPECT_EQ(g.grid[0], 1u); // (100 rows, 256 a block)
    EXPECT_EQ(g.grid[1], 4u);
    EXPECT_EQ(g.grid[2], 2u);
    EXPECT_EQ(g.block[0], 256u);
    ASSERT_EQ(g.argBytes, sizeof(View) + 3 * sizeof(float *));
    View lse;
    float *delta, *zF32, *sums, *deltaOut;
    std::memcpy(&lse, g.args, sizeof lse);
    std::memcpy(&delta, g.args + sizeof(View), sizeof delta);
    std::memcpy(&zF32, g.args + sizeof(View) + sizeof delta, sizeof zF32);
    std::memcpy(&sums, g.args + sizeof(View) + 2 * sizeof delta, sizeof sums);
    std::memcpy(&deltaOut, deltas[0].args + 2 * sizeof(View), sizeof deltaOut);
    EXPECT_EQ(lse.data, c.lse.data);
    EXPECT_EQ(lse.shape[0], 2);
    EXPECT_EQ(lse.shape[1], 4);
    EXPECT_EQ(lse.shape[2], 100);
    EXPECT_EQ(lse.strides[2], 1);
    EXPECT_EQ(lse.strides[1], 100);
    EXPECT_EQ(delta, deltaOut);
    EXPECT_TRUE(attnc_fake_cuda_was_device(sums, 4 * 4));
    // The logits' f32 copy feeds it; the sums are zeroed before it and copied to d_z after it.
    bool logitsCopied = false, gradCopied = false;
    for (const attnc_fake_launch &l : launches()) {
      if (std::string(l.name) != "attnc_copy")
        continue;
      const auto [from, to] = viewsOf(l);
      logitsCopied = logitsCopied || (from.data == c.z.get() && to.data == zF32);
      if (from.data == sums) {
        gradCopied = true;
        EXPECT_EQ(to.data, c.dz.get());
        EXPECT_EQ(to.dtype, int32_t(ATTNC_DTYPE_F32));
        EXPECT_EQ(to.shape[2], 4);
        EXPECT_EQ(to.strides[2], 1);
      }
    }
    EXPECT_TRUE(logitsCopied);
    EXPECT_TRUE(gradCopied);
    EXPECT_EQ(launches().back().name, std::string("attnc_copy")) << "d_z is written last";

    // Without d_inputs: no gradient kernel.
    attnc_fake_cuda_reset();
    ASSERT_EQ(c.backwardWith(dev, nullptr, 0), ATTNC_OK) << attnc_last_error();
    EXPECT_TRUE(launchesOf("attnc_sink_grad").empty());
  }
}

TEST(CudaHostModifiers, AlibiSlopesRunTheAlibiKernelsAndGetTheirGradient) {
  // ALiBi as written four ways (the sign of j - i in the kernels' arguments), and a plain pattern.
  const std::pair<const char *, float> forms[] = {
      {"score s + slope[h] * (j - i)", 1.f},
      {"score (i - j) * slope[h] + s", -1.f},
      {"score s - slope[h] * (i - j)", 1.f},
      {"score s - (j - i) * slope[h]", -1.f},
  };
  for (const auto &[score, sign] : forms) {
    SCOPED_TRACE(score);
    const std::string source =
        std::string("pattern alibi { param w = 16  input slope : float[heads]  causal  attend { j : i - j < w }  ") +
        score + " }";
    KernelPtr kernel = kernelFromSource(source.c_str());
    ASSERT_TRUE(kernel);
    SinkCall c(0, ATTNC_DTYPE_BF16, 2, "slope");
    c.kernel = kernel.get();
    const attnc_device dev{ATTNC_DEVICE_CUDA, 0, attnc_fake_cuda_stream(0)};
    attnc_fake_cuda_reset();
    ASSERT_EQ(c.forwardWith(dev, &c.input, 1), ATTNC_OK) << attnc_last_error();
    std::vector<attnc_fake_launch> all = launches();
    ASSERT_GE(all.size(), 2u);
    ASSERT_STREQ(all[0].name, "attnc_copy"); // the slopes, to f32
    const View slopes = viewsOf(all[0]).second;
    EXPECT_EQ(viewsOf(all[0]).first.data, c.z.get());
    EXPECT_EQ(viewsOf(all[0]).first.strides[2], 2);
    for (size_t i = 1; i < all.size(); ++i) {
      ASSERT_STREQ(all[i].name, "attnc_fwd_wg_alibi_bf16_64");
      const auto a = argsOf<FwdArgs>(all[i]);
      EXPECT_EQ(a.slope, slopes.data);
      EXPECT_FLOAT_EQ(a.slopeLog2, sign * 1.4426950408889634f);
      EXPECT_EQ(a.sink, nullptr);
    }
    // Backward, the slopes' gradient asked for: sums zeroed, added to by the kernels, copied to d_slope last.
    for (const int variant : {-1, 0}) {
      ASSERT_EQ(attnc_internal_cuda_backward_variant(variant), ATTNC_OK);
      attnc_fake_cuda_reset();
      const attnc_status st = c.backwardWith(dev, &c.grad, 1);
      attnc_internal_cuda_backward_variant(-1);
      ASSERT_EQ(st, ATTNC_OK) << attnc_last_error();
      all = launches();
      float *sums = nullptr;
      int kernels = 0;
      for (const attnc_fake_launch &l : all)
        if (std::string(l.name).rfind("attnc_bwd", 0) == 0) {
          EXPECT_STREQ(l.name, variant < 0 ? "attnc_bwd_wg_alibi_bf16_64" : "attnc_bwd_alibi_bf16_64");
          const auto a = argsOf<BwdArgs>(l);
          EXPECT_NE(a.slope, nullptr);
          EXPECT_FLOAT_EQ(a.slopeSign, sign);
          ASSERT_NE(a.dSlope, nullptr);
          EXPECT_TRUE(sums == nullptr || sums == a.dSlope) << "one sum per head for the whole call";
          sums = a.dSlope;
          ++kernels;
        }
      ASSERT_GT(kernels, 0);
      EXPECT_TRUE(attnc_fake_cuda_was_device(sums, 4 * 4));
      const auto [from, to] = viewsOf(all.back());
      EXPECT_STREQ(all.back().name, "attnc_copy");
      EXPECT_EQ(from.data, sums);
      EXPECT_EQ(to.data, c.dz.get());
      EXPECT_TRUE(launchesOf("attnc_sink_grad").empty());
    }
    attnc_fake_cuda_reset();
    ASSERT_EQ(c.backwardWith(dev, nullptr, 0), ATTNC_OK) << attnc_last_error();
    for (const attnc_fake_launch &l : launches())
      if (std::string(l.name).rfind("attnc_bwd", 0) == 0)
        EXPECT_EQ(argsOf<BwdArgs>(l).dSlope, nullptr) << "no gradient asked for, none summed";
  }
}

TEST(CudaHostModifiers, WhatTheKernelsDoNotRunIsRefusedLaunchingNothing) {
  const attnc_device dev{ATTNC_DEVICE_CUDA, 0, nullptr};
  struct Refused {
    const char *source;
    const char *why;
  };
  const Refused refused[] = {
      {"pattern p { input rel : float[heads, 4]  causal  attend { j : i - j < 8 }  "
       "score s + rel[h, min(i - j, 3)] }",
       "soft cap alone"},
      {"pattern p { input slope : float[heads]  causal  attend { j : i - j < 8 }  score s + slope[h] * (j - 1) }",
       "ALiBi"},
      {"pattern p { input slope : float[heads]  causal  attend { j : i - j < 8 }  score s * slope[h] }", "ALiBi"},
      {"pattern p { causal  attend { j : i - j < 8 }  score 20 * tanh(s / 20) + 1 }", "soft cap alone"},
      {"pattern p { causal  attend { j : i - j < 8 }  score where(i - j < 2, 20 * tanh(s / 20), s) }",
       "soft cap alone"},
      {"pattern p { input z : float[heads]  causal  attend { j : i - j < 8 }  sink z[h] * 2 }", "sink z[h]"},
      {"pattern p { causal  attend { j : i - j < 8 }  sink 0.5 }", "sink z[h]"},
      {"pattern p { input z : float[heads, 2]  causal  attend { j : i - j < 8 }  sink z[h, 0] }", "sink z[h]"},
      {"pattern p { input z : float[heads]  input y : float[heads]  causal  attend { j : i - j < 8 }  sink z[h] }",
       "float input 'y'"},
  };
  for (const Refused &r : refused) {
    SCOPED_TRACE(r.source);
    KernelPtr kernel = kernelFromSource(r.source);
    ASSERT_TRUE(kernel);
    SinkCall c(0, ATTNC_DTYPE_F32, 1);
    c.kernel = kernel.get();
    const int64_t count = attnc_kernel_num_inputs(kernel.get());
    DeviceMemory other(0, 4 * 2 * 4);
    attnc_tensor wide = c.tz;
    wide.data = other.get(), wide.shape[1] = 2, wide.strides[0] = 2;
    std::vector<attnc_input> given; // each declared input, of its shape, on the device
    for (int64_t x = 0; x < count; ++x) {
      attnc_input_info info{};
      info.size = sizeof info;
      ASSERT_EQ(attnc_kernel_input_info(kernel.get(), x, 100, 4, &info), ATTNC_OK);
      given.push_back({info.name, info.rank == 2 ? wide : c.tz});
    }
    attnc_fake_cuda_reset();
    EXPECT_EQ(c.forwardWith(dev, given.data(), count), ATTNC_ERROR_UNSUPPORTED);
    const std::string error = attnc_last_error();
    EXPECT_NE(error.find(r.why), std::string::npos) << error;
    EXPECT_NE(error.find("CPU tensors"), std::string::npos) << error;
    EXPECT_EQ(attnc_fake_cuda_launch_count(), 0);
  }

  // A sink the GPU runs, given wrongly.
  KernelPtr kernel = kernelOf("sink_window", {"w=16"});
  ASSERT_TRUE(kernel);
  SinkCall c(0, ATTNC_DTYPE_F32, 1);
  c.kernel = kernel.get();
  float host[4] = {};
  attnc_input onHost{"z", c.tz};
  onHost.values.data = host;
  attnc_input three{"z", c.tz};
  three.values.shape[0] = 3;
  attnc_input wrongName{"zz", c.tz};
  DeviceMemory dz1(1, 16);
  attnc_input gradElsewhere{"z", c.tdz};
  gradElsewhere.values.data = dz1.get();
  struct Bad {
    const char *what;
    std::function<attnc_status()> call;
    attnc_status status;
    const char *why;
  };
  const Bad bad[] = {
      {"logits in CPU memory", [&] { return c.forwardWith(dev, &onHost, 1); }, ATTNC_ERROR_INVALID_ARGUMENT,
       "tensor 'z' is not CUDA device memory"},
      {"3 logits for 4 heads", [&] { return c.forwardWith(dev, &three, 1); }, ATTNC_ERROR_SHAPE, "[4, 1, 1, 1]"},
      {"no logits", [&] { return c.forwardWith(dev, nullptr, 0); }, ATTNC_ERROR_INVALID_ARGUMENT, "reads the input"},
      {"another name", [&] { return c.forwardWith(dev, &wrongName, 1); }, ATTNC_ERROR_INVALID_ARGUMENT,
       "has no input 'zz'"},
      {"the gradient on device 1", [&] { return c.backwardWith(dev, &gradElsewhere, 1); },
       ATTNC_ERROR_INVALID_ARGUMENT, "tensor 'd_z' is memory of CUDA device 1"},
      {"a varlen call", [&] {
         const int32_t cu[] = {0, 40, 100};
         attnc_varlen varlen{cu, cu, 2};
         attnc_call call;
         attnc_call_init(&call);
         attnc_tensor q = c.q, k = c.k, v = c.v, o = c.o;
         for (attnc_tensor *t : {&q, &k, &v, &o})
           t->shape[0] = 1;
         call.q = &q, call.k = &k, call.v = &v, call.o = &o, call.device = &dev, call.varlen = &varlen;
         call.inputs = &c.input, call.num_inputs = 1;
         return attnc_forward(kernel.get(), &call);
       },
       ATTNC_ERROR_UNSUPPORTED, "varlen calls on the GPU"},
  };
  for (const Bad &b : bad) {
    SCOPED_TRACE(b.what);
    attnc_fake_cuda_reset();
    EXPECT_EQ(b.call(), b.status);
    EXPECT_NE(std::string(attnc_last_error()).find(b.why), std::string::npos) << attnc_last_error();
    EXPECT_EQ(attnc_fake_cuda_launch_count(), 0);
  }
}

// --- Patterns that read data ------------------------------------------------------

/// A 1-D int input of n positions (per batch entry, or shared) in memory of `device`.
struct DeviceInts {
  DeviceMemory memory;
  attnc_tensor t{};
  DeviceInts(int device, const std::vector<int32_t> &values, int64_t batch, int64_t n)
      : memory(device, values.size() * 4) {
    std::memcpy(memory.get(), values.data(), values.size() * 4); // (the fake's device memory is host memory)
    t = contiguousTensor(memory.get(), ATTNC_DTYPE_I32, batch, 1, n, 1);
  }
};

/// The bound input arrays of one batch entry, as the runtime binds them.
std::shared_ptr<const InputArray> boundArray(const std::string &name, const std::vector<int32_t> &values, int64_t b,
                                             int64_t n) {
  auto a = std::make_shared<InputArray>();
  a->name = name, a->rank = 1, a->bound = true, a->rows = n, a->cols = 1;
  for (int64_t i = 0; i < n; ++i)
    a->values.push_back(values[size_t(b * n + i)]);
  a->indexClasses();
  return a;
}

TEST(CudaHostData, EachSliceRunsOnTablesOfItsOwnData) {
  KernelPtr kernel = kernelOf("lsh", {});
  ASSERT_TRUE(kernel);
  const int64_t B = 2, H = 4, G = 2, n = 100, d = 64;
  std::vector<int32_t> b0(static_cast<size_t>(B * n)), b1(static_cast<size_t>(n));
  for (int64_t i = 0; i < B * n; ++i)
    b0[size_t(i)] = int32_t((i * 7) % 5); // per batch entry
  for (int64_t i = 0; i < n; ++i)
    b1[size_t(i)] = int32_t((i * 3) % 11); // one for the whole batch
  DeviceInts d0(0, b0, B, n), d1(0, b1, 1, n);
  Call c(0, ATTNC_DTYPE_BF16, B, H, G, n, n, d);
  c.kernel = kernel.get();
  const attnc_device dev{ATTNC_DEVICE_CUDA, 0, attnc_fake_cuda_stream(0)};
  const attnc_input inputs[] = {{"b0", d0.t}, {"b1", d1.t}};
  attnc_call call;
  attnc_call_init(&call);
  call.q = &c.q, call.k = &c.k, call.v = &c.v, call.o = &c.o, call.lse = &c.lse, call.device = &dev;
  call.inputs = inputs, call.num_inputs = 2;
  attnc_fake_cuda_reset();
  ASSERT_EQ(attnc_forward(kernel.get(), &call), ATTNC_OK) << attnc_last_error();
  attnc_fake_counts counts = attnc_fake_cuda_counts();
  EXPECT_EQ(counts.syncs, 1) << "the stream waited for once, before the inputs are read";
  EXPECT_EQ(counts.copiesToHost, 2);
  // The tables each batch entry's data gives (its heads share them), as the kernels must read them.
  const ir::PatternIR ir = patternIr("lsh", {});
  const plan::Plan symbolic = rt::cuda::gpuPlan(ir);
  std::vector<SetTables> want;
  for (int64_t b = 0; b < B; ++b)
    want.push_back(rt::cuda::buildSetTables(
        plan::bindPlan(symbolic, 0, {boundArray("b0", b0, b, n), boundArray("b1", b1, 0, n)}), 0, n));
  std::vector<attnc_fake_launch> fwd;
  for (const attnc_fake_launch &l : launches())
    if (std::string(l.name).rfind("attnc_fwd", 0) == 0)
      fwd.push_back(l);
  size_t perSlice = 0;
  for (const rt::cuda::Launch &l : want[0].fwdLaunches)
    perSlice += l.itemCount > 0;
  ASSERT_EQ(fwd.size(), size_t(B * H) * perSlice) << "each (batch, head) slice its own launches";
  const FwdArgs first = argsOf<FwdArgs>(fwd[0]);
  for (size_t x = 0; x < fwd.size(); ++x) {
    const int64_t slice = int64_t(x / perSlice), b = slice / H, h = slice % H, g = h / (H / G);
    SCOPED_TRACE("slice " + std::to_string(slice));
    const FwdArgs a = argsOf<FwdArgs>(fwd[x]);
    EXPECT_EQ(fwd[x].grid[1], 1u);
    EXPECT_EQ(a.heads, 1);
    EXPECT_EQ(a.ratio, 1);
    EXPECT_EQ(a.setOfHead, nullptr);
    EXPECT_EQ(a.q, static_cast<const char *>(c.q.data) + 2 * (b * c.q.strides[0] + h * c.q.strides[1]));
    EXPECT_EQ(a.k, static_cast<const char *>(c.k.data) + 2 * (b * c.k.strides[0] + g * c.k.strides[1]));
    EXPECT_EQ(a.v, static_cast<const char *>(c.v.data) + 2 * (b * c.v.strides[0] + g * c.v.strides[1]));
    EXPECT_EQ(a.o, static_cast<char *>(c.o.data) + 2 * (b * c.o.strides[0] + h * c.o.strides[1]));
    EXPECT_EQ(a.lse, static_cast<float *>(c.lse.data) + b * c.lse.strides[0] + h * c.lse.strides[1]);
    EXPECT_TRUE(holds(a.items, want[size_t(b)].fwdItems, "items", true));
    EXPECT_TRUE(holds(a.keys, want[size_t(b)].fwdKeys, "keys", true));
    EXPECT_TRUE(holds(a.masks, want[size_t(b)].fwdMasks, "masks", true));
    EXPECT_TRUE(holds(a.full, want[size_t(b)].fwdFull, "full", true));
    EXPECT_EQ(a.items == first.items, b == 0) << "one upload per batch entry's data";
  }

  // Backward: each slice's rows of every tensor and of the f32 accumulators.
  call.d_o = &c.dO, call.d_q = &c.dq, call.d_k = &c.dk, call.d_v = &c.dv;
  attnc_fake_cuda_reset();
  ASSERT_EQ(attnc_backward(kernel.get(), &call), ATTNC_OK) << attnc_last_error();
  std::vector<BwdArgs> bwd;
  for (const attnc_fake_launch &l : launches())
    if (std::string(l.name).rfind("attnc_bwd", 0) == 0) {
      EXPECT_EQ(l.grid[1], 1u);
      bwd.push_back(argsOf<BwdArgs>(l));
    }
  ASSERT_EQ(bwd.size() % size_t(B * H), 0u);
  const size_t bwdPerSlice = bwd.size() / size_t(B * H);
  for (size_t x = 0; x < bwd.size(); ++x) {
    const int64_t slice = int64_t(x / bwdPerSlice), b = slice / H, h = slice % H, g = h / (H / G);
    SCOPED_TRACE("backward slice " + std::to_string(slice));
    const BwdArgs &a = bwd[x];
    EXPECT_EQ(a.heads, 1);
    EXPECT_EQ(a.q, static_cast<const char *>(c.q.data) + 2 * (b * c.q.strides[0] + h * c.q.strides[1]));
    EXPECT_EQ(a.dO, static_cast<const char *>(c.dO.data) + 2 * (b * c.dO.strides[0] + h * c.dO.strides[1]));
    EXPECT_EQ(a.k, static_cast<const char *>(c.k.data) + 2 * (b * c.k.strides[0] + g * c.k.strides[1]));
    EXPECT_EQ(a.dq, bwd[0].dq + (b * H + h) * n * 64);
    EXPECT_EQ(a.dk, bwd[0].dk + (b * G + g) * n * 64);
    EXPECT_EQ(a.dv, bwd[0].dv + (b * G + g) * n * 64);
    EXPECT_EQ(a.delta, bwd[0].delta + (b * H + h) * n);
    EXPECT_TRUE(holds(a.items, want[size_t(b)].bwdItems, "backward items", true));
    EXPECT_TRUE(holds(a.rows, want[size_t(b)].bwdRows, "backward rows", true));
  }

  // The inputs in CPU memory, and a call under a CUDA graph capture: errors that launch nothing.
  std::vector<int32_t> hostB0 = b0;
  attnc_input onHost[] = {{"b0", d0.t}, {"b1", d1.t}};
  onHost[0].values.data = hostB0.data();
  call.inputs = onHost, call.d_o = nullptr, call.d_q = call.d_k = call.d_v = nullptr;
  attnc_fake_cuda_reset();
  EXPECT_EQ(attnc_forward(kernel.get(), &call), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("'b0' is not CUDA device memory"), std::string::npos)
      << attnc_last_error();
  EXPECT_EQ(attnc_fake_cuda_launch_count(), 0);
  // A negative stride and an extent past 2^34 elements: refused before any copy or launch.
  attnc_input bad[] = {{"b0", d0.t}, {"b1", d1.t}};
  bad[0].values.strides[2] = -1;
  attnc_fake_cuda_reset();
  call.inputs = bad;
  EXPECT_EQ(attnc_forward(kernel.get(), &call), ATTNC_ERROR_STRIDE);
  EXPECT_NE(std::string(attnc_last_error()).find("input 'b0' has a negative shape or stride"), std::string::npos)
      << attnc_last_error();
  bad[0].values.strides[2] = int64_t{1} << 35;
  EXPECT_EQ(attnc_forward(kernel.get(), &call), ATTNC_ERROR_SHAPE);
  EXPECT_NE(std::string(attnc_last_error()).find("input 'b0' spans more than 2^34 elements"), std::string::npos)
      << attnc_last_error();
  EXPECT_EQ(attnc_fake_cuda_counts().copiesToHost, 0);
  EXPECT_EQ(attnc_fake_cuda_launch_count(), 0);
  call.inputs = inputs;
  attnc_fake_cuda_capture(dev.stream, 1);
  EXPECT_EQ(attnc_forward(kernel.get(), &call), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(attnc_last_error()).find("CUDA graph capture"), std::string::npos) << attnc_last_error();
  attnc_fake_cuda_capture(dev.stream, 0);
  EXPECT_EQ(attnc_fake_cuda_launch_count(), 0);
}

} // namespace
} // namespace attnc::test
