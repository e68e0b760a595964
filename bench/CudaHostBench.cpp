//===- CudaHostBench.cpp - What a GPU call costs the host -----------------===//
//
// The cuda target's host side alone: each call's checks, table lookup,
// buffers and launches, with libattnc's driver being the fake one of the
// tests (tests/runtime/FakeCudaDriver.h: host memory, launches recorded, no
// GPU), whose functions cost next to nothing. So the time is attnc's own per
// call (the time inside the fake's functions is taken off), to which a real
// driver adds its calls' (counted here per call: launches, pointer queries,
// allocations in stream order, memsets). On a GPU
// a call whose kernels take less than that is bound by the host.
//
//   attnc_bench_cuda_host [--n 16384] [--d 64] [--heads 8] [--repeat 2000]
//
// One row per library pattern (bench/peers.py's parameters), forward (with
// the log-sum-exp) and backward, microseconds per call: the median of
// --repeat calls after a warm-up.
//
//===----------------------------------------------------------------------===//
#include "../tests/runtime/FakeCudaDriver.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Pattern {
  const char *name;
  std::vector<const char *> defines;
};

attnc_tensor deviceTensor(attnc_dtype dtype, int64_t heads, int64_t n, int64_t d) {
  const size_t bytes = size_t(heads * n * d) * (dtype == ATTNC_DTYPE_F32 ? 4 : 2);
  attnc_tensor t{};
  t.data = attnc_fake_cuda_alloc(0, bytes);
  t.dtype = dtype;
  t.shape[0] = 1, t.shape[1] = heads, t.shape[2] = n, t.shape[3] = d;
  t.strides[3] = 1, t.strides[2] = d, t.strides[1] = n * d, t.strides[0] = heads * n * d;
  return t;
}

/// Median microseconds of `repeat` calls of `call` (which must succeed),
/// less the time spent in the fake driver's functions.
template <class Call> double medianUs(int repeat, Call &&call) {
  std::vector<double> us;
  for (int i = 0; i < repeat; ++i) {
    const long long fake0 = attnc_fake_cuda_counts().nanoseconds;
    const auto t0 = std::chrono::steady_clock::now();
    if (call() != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_cuda_host: %s\n", attnc_last_error());
      std::exit(1);
    }
    const double total = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    us.push_back(total - double(attnc_fake_cuda_counts().nanoseconds - fake0) / 1000.0);
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = 16384, d = 64, heads = 8;
  int repeat = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long value = std::atoll(argv[i + 1]);
    if (flag == "--n")
      n = value;
    else if (flag == "--d")
      d = value;
    else if (flag == "--heads")
      heads = value;
    else if (flag == "--repeat")
      repeat = static_cast<int>(value);
    else {
      std::fprintf(stderr, "usage: attnc_bench_cuda_host [--n N] [--d D] [--heads H] [--repeat R]\n");
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || n < 1 || d < 1 || heads < 1 || repeat < 1) {
    std::fprintf(stderr, "usage: attnc_bench_cuda_host [--n N] [--d D] [--heads H] [--repeat R] (all positive)\n");
    return 2;
  }
  setenv("ATTNC_CUDA_DRIVER", ATTNC_FAKE_CUDA_PATH, 1);
  setenv("ATTNC_FAKE_CUDA_NO_DATA", "1", 1);
  const Pattern patterns[] = {{"fixed", {"l=128", "c=8"}},       {"strided", {"l=128"}},
                              {"local", {"w=512"}},              {"longformer", {"w=256", "g=4"}},
                              {"bigbird", {"b=64", "g=2", "r=3", "seed=1234"}}};
  std::printf("host side of a cuda-target call (fake driver, device of compute capability 9.0), bf16, batch 1, "
              "%lld heads, n = %lld, d = %lld; median of %d calls, microseconds\n\n",
              static_cast<long long>(heads), static_cast<long long>(n), static_cast<long long>(d), repeat);
  std::printf("| pattern | fwd us | launches | pointer queries | stream allocs | memsets | bwd us | launches | "
              "pointer queries | stream allocs | memsets |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  attnc_tensor q = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d), k = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d),
               v = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d), o = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d),
               dO = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d), dq = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d),
               dk = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d), dv = deviceTensor(ATTNC_DTYPE_BF16, heads, n, d),
               lse = deviceTensor(ATTNC_DTYPE_F32, heads, n, 1);
  const attnc_device dev{ATTNC_DEVICE_CUDA, 0, attnc_fake_cuda_stream(0)};
  for (const Pattern &p : patterns) {
    const std::string file = std::string(ATTNC_SOURCE_DIR) + "/patterns/" + p.name + ".attn";
    attnc_jit_options jo{p.defines.data(), static_cast<int32_t>(p.defines.size()), nullptr, nullptr, 0, "fused"};
    attnc_kernel *kernel = nullptr;
    if (attnc_jit_compile_file(file.c_str(), &jo, &kernel) != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_cuda_host: %s\n", attnc_last_error());
      return 1;
    }
    auto forward = [&] { return attnc_run_forward_on(kernel, &dev, &q, &k, &v, &o, &lse, nullptr); };
    auto backward = [&] {
      return attnc_run_backward_on(kernel, &dev, &q, &k, &v, &o, &dO, &lse, &dq, &dk, &dv, nullptr);
    };
    forward(); // (builds and uploads the tables)
    backward();
    auto perCall = [&](auto &&call, double &us, attnc_fake_counts &counts) {
      us = medianUs(repeat, call);
      attnc_fake_cuda_reset();
      call();
      counts = attnc_fake_cuda_counts();
    };
    double fwdUs = 0, bwdUs = 0;
    attnc_fake_counts f{}, b{};
    perCall(forward, fwdUs, f);
    perCall(backward, bwdUs, b);
    std::printf("| %s | %.1f | %ld | %ld | %ld | %ld | %.1f | %ld | %ld | %ld | %ld |\n", p.name, fwdUs, f.launches,
                f.pointerQueries, f.asyncAllocs + f.poolAllocs, f.memsets, bwdUs, b.launches, b.pointerQueries,
                b.asyncAllocs + b.poolAllocs, b.memsets);
    attnc_kernel_free(kernel);
  }
  return 0;
}
