//===- FusedBf16Bench.cpp - The fused kernel on f32 and on bf16 inputs ----===//
//
// Times runFusedHead (f32) and runFusedHeadBf16 on the same plan and the same
// bf16-representable random inputs, heads side by side on the threads as
// the runtime runs slices (`attnc bench`'s defaults: 8 heads, every core),
// and reports each one's median time and effective GFLOP/s (4 nnz d /
// time), interleaving the two so that a shared machine's load hits both.
// Then checks both outputs of head 0 against attention in double on the
// same values (O(nnz d)). The kernels are called directly, without the
// runtime's packing; `attnc bench --dtype bf16` measures the runtime's way.
//
//   attnc_bench_fused_bf16 patterns/fixed.attn --n 16384 --d 64 [--heads 8]
//       [--threads 2] [--repeat 9] [-D name=value ...]
//
//===----------------------------------------------------------------------===//
#include "FusedExecutor.h"

#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "attnc/plan/Csr.h"
#include "attnc/plan/Plan.h"
#include "attnc/reference/Reference.h"
#include "attnc/support/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

using namespace attnc;

namespace {

struct Options {
  std::string file;
  std::vector<Define> defines;
  int64_t n = 0, d = 64, heads = 8;
  int threads = 0, repeat = 9;
};

int usage(const char *why) {
  std::fprintf(stderr,
               "error: %s\nusage: attnc_bench_fused_bf16 FILE.attn --n N [--d D] [--heads H] [--threads T] "
               "[--repeat R] [-D name=value ...]\n",
               why);
  return 2;
}

float widen(uint16_t x) {
  const uint32_t u = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: attnc_bench_fused_bf16 FILE.attn --n N [--d D] [--heads H] [--threads T] [--repeat R] "
                  "[-D name=value ...]\n(the comment at the top of bench/FusedBf16Bench.cpp says what it times)\n");
      return 0;
    }
    auto value = [&]() -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
    const char *v = nullptr;
    if (a == "--n" || a == "--d" || a == "--heads" || a == "--threads" || a == "--repeat" || a == "-D") {
      if (!(v = value()))
        return usage(("'" + a + "' needs a value").c_str());
    }
    if (a == "--n")
      opt.n = std::atoll(v);
    else if (a == "--d")
      opt.d = std::atoll(v);
    else if (a == "--heads")
      opt.heads = std::atoll(v);
    else if (a == "--threads")
      opt.threads = std::atoi(v);
    else if (a == "--repeat")
      opt.repeat = std::atoi(v);
    else if (a == "-D") {
      Define def;
      std::string error;
      if (!parseDefine(v, def, error))
        return usage(error.c_str());
      opt.defines.push_back(def);
    } else if (!a.empty() && a[0] != '-' && opt.file.empty())
      opt.file = a;
    else
      return usage(("unknown argument '" + a + "'").c_str());
  }
  if (opt.file.empty() || opt.n < 1 || opt.d < 1 || opt.heads < 1 || opt.repeat < 1)
    return usage("a pattern file, --n >= 1, --d >= 1, --heads >= 1 and --repeat >= 1 are required");
  Frontend fe;
  if (!fe.parseFile(opt.file) || !fe.analyze({opt.defines})) {
    fe.diags().print(std::cerr);
    return 1;
  }
  const ir::PatternIR ir = ir::canonicalizePattern(fe.patterns().front());
  const plan::Plan plan = plan::buildPlan(ir, plan::resolveOptions(ir, {}));
  const int64_t n = opt.n, d = opt.d, heads = opt.heads;
  const int threads = support::resolveThreads(opt.threads);
  std::vector<plan::HeadShapes> shapes;
  plan::buildShapes(plan, n, false, size_t{64} << 20, shapes, threads); // the runtime's default budget

  // Head h runs the pattern's set h mod (number of sets).
  const int64_t sets = static_cast<int64_t>(ir.heads.size());
  const size_t slice = static_cast<size_t>(n * d), all = slice * static_cast<size_t>(heads);
  std::vector<uint16_t> qb(all), kb(all), vb(all);
  std::vector<float> qf(all), kf(all), vf(all), o(all);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (auto [b, f] : {std::pair{&qb, &qf}, std::pair{&kb, &kf}, std::pair{&vb, &vf}})
    for (size_t i = 0; i < all; ++i) {
      float x = unit(rng);
      uint32_t u;
      std::memcpy(&u, &x, sizeof u);
      (*b)[i] = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      (*f)[i] = widen((*b)[i]);
    }
  int64_t nnz = 0;
  const std::vector<plan::HeadStats> stats = plan::planStats(plan, n);
  for (int64_t h = 0; h < heads; ++h)
    nnz += stats[static_cast<size_t>(h % sets)].useful;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));

  std::vector<rt::FusedScratch> scratch(static_cast<size_t>(threads));
  // One forward over every head: heads side by side, one per thread.
  auto run = [&](bool bf16) {
    support::parallelFor(heads, threads, [&](int worker, int64_t h) {
      const size_t set = static_cast<size_t>(h % sets), at = static_cast<size_t>(h) * slice;
      rt::FusedScratch &s = scratch[static_cast<size_t>(worker)];
      if (bf16)
        rt::runFusedHeadBf16(plan, set, false, shapes.empty() ? nullptr : &shapes[set], n, d, qb.data() + at,
                             kb.data() + at, vb.data() + at, o.data() + at, scale, s, 1);
      else
        rt::runFusedHead(plan, set, false, shapes.empty() ? nullptr : &shapes[set], n, d, qf.data() + at,
                         kf.data() + at, vf.data() + at, o.data() + at, scale, s, 1);
    });
  };
  run(false);
  run(true);
  std::vector<double> f32Times, bf16Times;
  for (int r = 0; r < opt.repeat; ++r) {
    double t0 = seconds();
    run(false);
    f32Times.push_back(seconds() - t0);
    t0 = seconds();
    run(true);
    bf16Times.push_back(seconds() - t0);
  }
  const double f32 = median(f32Times), bf = median(bf16Times);
  const double flops = 4.0 * static_cast<double>(nnz) * static_cast<double>(d);
  std::printf("%s n=%lld d=%lld heads=%lld threads=%d tiles=%lldx%lld repeat=%d\n", opt.file.c_str(),
              static_cast<long long>(n), static_cast<long long>(d), static_cast<long long>(heads), threads,
              static_cast<long long>(plan.options.tileRows), static_cast<long long>(plan.options.tileCols),
              opt.repeat);
  std::printf("  f32   %9.3f ms  %7.1f GFLOP/s\n", f32 * 1e3, flops / f32 * 1e-9);
  std::printf("  bf16  %9.3f ms  %7.1f GFLOP/s   %.2fx f32\n", bf * 1e3, flops / bf * 1e-9, f32 / bf);

  // Head 0 of both kernels against double precision on the same values.
  ir::Csr csr;
  std::string error;
  if (!ir::buildCsr(ir.heads[0].set, n, csr, error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  std::vector<float> ref(slice), out32(slice), out16(slice);
  referenceAttention(csr, qf.data(), kf.data(), vf.data(), ref.data(), d, scale);
  rt::FusedScratch s;
  rt::runFusedHead(plan, 0, false, nullptr, n, d, qf.data(), kf.data(), vf.data(), out32.data(), scale, s, threads);
  rt::runFusedHeadBf16(plan, 0, false, nullptr, n, d, qb.data(), kb.data(), vb.data(), out16.data(), scale, s,
                       threads);
  double err32 = 0, err16 = 0;
  for (size_t i = 0; i < slice; ++i) {
    err32 = std::max(err32, double(std::fabs(out32[i] - ref[i])));
    err16 = std::max(err16, double(std::fabs(out16[i] - ref[i])));
  }
  std::printf("  max |O - O_double| (values in [-1, 1]): f32 %.3g, bf16 %.3g\n", err32, err16);
  return 0;
}
