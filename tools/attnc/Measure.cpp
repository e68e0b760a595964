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

BackwardBuffers::BackwardBuffers(const RandomInputs &in, uint32_t seed) {
  const std::array<int64_t, 4> shape{in.tq.shape[0], in.tq.shape[1], in.tq.shape[2], in.tq.shape[3]};
  const size_t count = in.q.size();
  dO.resize(count);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (float &x : dO)
    x = normal(rng);
  lse.assign(static_cast<size_t>(shape[0] * shape[1] * shape[2]), 0.0f);
  tlse = tensorView(lse.data(), {shape[0], shape[1], shape[2], 1});
  dq.assign(count, 0.0f);
  dk.assign(count, 0.0f);
  dv.assign(count, 0.0f);
  if (in.tq.dtype == ATTNC_DTYPE_BF16) {
    dOb.resize(count);
    std::transform(dO.begin(), dO.end(), dOb.begin(), floatToBf16);
    dqb.assign(count, 0);
    dkb.assign(count, 0);
    dvb.assign(count, 0);
    tdO = tensorView(dOb.data(), shape, ATTNC_DTYPE_BF16);
    tdq = tensorView(dqb.data(), shape, ATTNC_DTYPE_BF16);
    tdk = tensorView(dkb.data(), shape, ATTNC_DTYPE_BF16);
    tdv = tensorView(dvb.data(), shape, ATTNC_DTYPE_BF16);
    return;
  }
  tdO = tensorView(dO.data(), shape);
  tdq = tensorView(dq.data(), shape);
  tdk = tensorView(dk.data(), shape);
  tdv = tensorView(dv.data(), shape);
}

attnc_status medianStepMs(const attnc_kernel *kernel, RandomInputs &in, BackwardBuffers &grad,
                          const attnc_run_options &options, int repeat, StepTimes &out, std::string &error) {
  std::vector<double> forward, backward;
  // Round 0 is the warm-up: it builds what the backward needs at this n.
  for (int r = 0; r <= repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    attnc_status status = attnc_run_forward(kernel, &in.tq, &in.tk, &in.tv, &in.to, &grad.tlse, &options);
    auto t1 = std::chrono::steady_clock::now();
    if (status == ATTNC_OK)
      status = attnc_run_backward(kernel, &in.tq, &in.tk, &in.tv, &in.to, &grad.tdO, &grad.tlse, &grad.tdq,
                                  &grad.tdk, &grad.tdv, &options);
    auto t2 = std::chrono::steady_clock::now();
    if (status != ATTNC_OK) {
      error = attnc_last_error();
      return status;
    }
    if (r == 0)
      continue;
    forward.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    backward.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  auto median = [](std::vector<double> &times) {
    std::sort(times.begin(), times.end());
    return times.empty() ? 0.0 : times[times.size() / 2];
  };
  out.forwardMs = median(forward);
  out.backwardMs = median(backward);
  return ATTNC_OK;
}

} // namespace attnc::tool
