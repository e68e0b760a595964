//===- Measure.cpp - Timing kernels on random inputs (bench and tune) -----===//
#include "Measure.h"

#include "attnc/attnc.hpp"

#include <algorithm>
#include <chrono>
#include <random>

namespace attnc::tool {

RandomInputs::RandomInputs(int64_t batch, int64_t heads, int64_t n, int64_t d, uint32_t seed,
                           attnc_dtype dtype) {
  size_t count = static_cast<size_t>(batch * heads * n * d);
  q.resize(count);
  k.resize(count);
  v.resize(count);
  o.assign(count, 0.0f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (size_t x = 0; x < count; ++x) {
    q[x] = normal(rng);
    k[x] = normal(rng);
    v[x] = normal(rng);
  }
  std::array<int64_t, 4> shape{batch, heads, n, d};
  if (dtype == ATTNC_DTYPE_BF16) {
    auto narrow = [](const std::vector<float> &x, std::vector<uint16_t> &out) {
      out.resize(x.size());
      std::transform(x.begin(), x.end(), out.begin(), floatToBf16);
    };
    narrow(q, qb);
    narrow(k, kb);
    narrow(v, vb);
    narrow(o, ob);
    tq = tensorView(qb.data(), shape, dtype);
    tk = tensorView(kb.data(), shape, dtype);
    tv = tensorView(vb.data(), shape, dtype);
    to = tensorView(ob.data(), shape, dtype);
    return;
  }
  tq = tensorView(q.data(), shape);
  tk = tensorView(k.data(), shape);
  tv = tensorView(v.data(), shape);
  to = tensorView(o.data(), shape);
}

double medianRunMs(const attnc_kernel *kernel, RandomInputs &in, const attnc_run_options &options,
                   int repeat, std::string &error, double *firstMs) {
  auto start = std::chrono::steady_clock::now();
  if (attnc_run(kernel, &in.tq, &in.tk, &in.tv, &in.to, &options) != ATTNC_OK) {
    error = attnc_last_error();
    return -1;
  }
  if (firstMs)
    *firstMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (repeat <= 0)
    return 0;
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r)
    times.push_back(timeOneRunMs(kernel, in, options));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double timeOneRunMs(const attnc_kernel *kernel, RandomInputs &in, const attnc_run_options &options) {
  auto t0 = std::chrono::steady_clock::now();
  attnc_run(kernel, &in.tq, &in.tk, &in.tv, &in.to, &options);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace attnc::tool
