// jit_fixed.cpp - a host program that JIT-compiles the Sparse Transformer's
// "fixed" pattern with attnc, runs it, and checks it against a plain
// reference written from the paper's formula.
//
//   ./build/examples/jit_fixed [patterns/fixed.attn] [n] [d] [heads] [fused|halide|sparsifier|dense]
//
// Uses only the public headers attnc/attnc_jit.h and attnc/attnc.hpp.
#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

// The seed's definition, merged head: j <= i and (j / l == i / l or j % l >= l - c).
bool fixedAttends(int64_t i, int64_t j, int64_t l, int64_t c) {
  return j <= i && (j / l == i / l || j % l >= l - c);
}

// One [n, d] slice, double accumulation, numerically stable softmax.
void reference(const float *q, const float *k, const float *v, float *o, int64_t n, int64_t d,
               int64_t l, int64_t c) {
  std::vector<double> s(n), acc(d);
  for (int64_t i = 0; i < n; ++i) {
    double best = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      if (!fixedAttends(i, j, l, c))
        continue;
      double dot = 0;
      for (int64_t x = 0; x < d; ++x)
        dot += double(q[i * d + x]) * double(k[j * d + x]);
      s[j] = dot / std::sqrt(double(d));
      best = std::max(best, s[j]);
    }
    double sum = 0;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t j = 0; j <= i; ++j) {
      if (!fixedAttends(i, j, l, c))
        continue;
      double w = std::exp(s[j] - best);
      sum += w;
      for (int64_t x = 0; x < d; ++x)
        acc[x] += w * double(v[j * d + x]);
    }
    for (int64_t x = 0; x < d; ++x)
      o[i * d + x] = float(acc[x] / sum);
  }
}

} // namespace

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "patterns/fixed.attn";
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 4096;
  const int64_t d = argc > 3 ? std::atoll(argv[3]) : 64;
  const int64_t heads = argc > 4 ? std::atoll(argv[4]) : 8;
  const char *backend = argc > 5 ? argv[5] : "fused";
  const int64_t l = 128, c = 8; // the library file's defaults, passed explicitly below
  const char *defines[] = {"l=128", "c=8"};

  auto t0 = std::chrono::steady_clock::now();
  attnc_jit_options options{defines, 2, nullptr, nullptr, 0, backend};
  attnc_kernel *raw = nullptr;
  if (attnc_jit_compile_file(path, &options, &raw) != ATTNC_OK) {
    std::fprintf(stderr, "jit_fixed: %s\n", attnc_last_error());
    return 1;
  }
  attnc::Kernel kernel(raw);
  auto t1 = std::chrono::steady_clock::now();

  size_t count = size_t(heads * n * d);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> q(count), k(count), v(count), o(count);
  for (size_t x = 0; x < count; ++x) {
    q[x] = normal(rng);
    k[x] = normal(rng);
    v[x] = normal(rng);
  }
  try {
    kernel.run(q.data(), k.data(), v.data(), o.data(), {1, heads, n, d}); // warm-up
    auto t2 = std::chrono::steady_clock::now();
    kernel.run(q.data(), k.data(), v.data(), o.data(), {1, heads, n, d});
    auto t3 = std::chrono::steady_clock::now();

    double maxErr = 0;
    int64_t nnz = 0;
    std::vector<float> ref(size_t(n * d));
    for (int64_t h = 0; h < heads; ++h) {
      size_t off = size_t(h * n * d);
      reference(&q[off], &k[off], &v[off], ref.data(), n, d, l, c);
      for (int64_t x = 0; x < n * d; ++x)
        maxErr = std::max(maxErr, double(std::fabs(ref[x] - o[off + x])));
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j <= i; ++j)
        nnz += fixedAttends(i, j, l, c);
    double ms = std::chrono::duration<double, std::milli>(t3 - t2).count();
    double jitMs = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::printf("pattern %s (%s), backend %s\n", kernel.metadata("pattern").c_str(),
                kernel.metadata("params").c_str(), kernel.metadata("backend").c_str());
    std::printf("JIT compile or cache load: %.1f ms\n", jitMs);
    std::printf("run [1, %lld, %lld, %lld]: %.2f ms, %.1f effective GFLOP/s (4*nnz*d*heads/time, nnz=%lld)\n",
                (long long)heads, (long long)n, (long long)d, ms, 4.0 * nnz * d * heads / (ms * 1e6),
                (long long)nnz);
    std::printf("max abs error vs reference: %.3g %s\n", maxErr, maxErr <= 1e-4 ? "(ok)" : "(FAILED)");
    return maxErr <= 1e-4 ? 0 : 1;
  } catch (const attnc::Error &e) {
    std::fprintf(stderr, "jit_fixed: %s\n", e.what());
    return 1;
  }
}
