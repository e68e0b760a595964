//===- Measure.cpp - Timing kernels on random inputs (bench and tune) -----===//
#include "Measure.h"

#include "attnc/attnc.hpp"

#include <algorithm>
#include <chrono>
#include <random>

namespace attnc::tool {

RandomInputs::RandomInputs(int64_t batch, int64_t heads, int64_t n, int64_t d, uint32_t seed,
                           attnc_dtype dtype)
    : RandomInputs({batch, heads, n, d}, {batch, heads, n, d}, seed, dtype) {}

RandomInputs::RandomInputs(const std::array<int64_t, 4> &qShape, const std::array<int64_t, 4> &kvShape,
                           uint32_t seed, attnc_dtype dtype) {
  const size_t qCount = static_cast<size_t>(qShape[0] * qShape[1] * qShape[2] * qShape[3]);
  const size_t kvCount = static_cast<size_t>(kvShape[0] * kvShape[1] * kvShape[2] * kvShape[3]);
  q.resize(qCount);
  k.resize(kvCount);
  v.resize(kvCount);
  o.assign(qCount, 0.0f);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  // Interleaved, so that equal shapes draw what they always drew.
  for (size_t x = 0; x < std::max(qCount, kvCount); ++x) {
    if (x < qCount)
      q[x] = normal(rng);
    if (x < kvCount) {
      k[x] = normal(rng);
      v[x] = normal(rng);
    }
  }
  if (dtype == ATTNC_DTYPE_BF16) {
    auto narrow = [](const support::AlignedVector<float> &x, support::AlignedVector<uint16_t> &out) {
      out.resize(x.size());
      std::transform(x.begin(), x.end(), out.begin(), floatToBf16);
    };
    narrow(q, qb);
    narrow(k, kb);
    narrow(v, vb);
    narrow(o, ob);
    tq = tensorView(qb.data(), qShape, dtype);
    tk = tensorView(kb.data(), kvShape, dtype);
    tv = tensorView(vb.data(), kvShape, dtype);
    to = tensorView(ob.data(), qShape, dtype);
    return;
  }
  tq = tensorView(q.data(), qShape);
  tk = tensorView(k.data(), kvShape);
  tv = tensorView(v.data(), kvShape);
  to = tensorView(o.data(), qShape);
}

void RandomInputs::setVarlen(const std::vector<int64_t> &lengths) {
  cuSeqlens.assign(1, 0);
  for (int64_t length : lengths)
    cuSeqlens.push_back(static_cast<int32_t>(cuSeqlens.back() + length));
  varlenArgs = {cuSeqlens.data(), cuSeqlens.data(), static_cast<int64_t>(lengths.size())};
  varlen = &varlenArgs;
}

void RandomInputs::setFloatInputs(const attnc_kernel *kernel) {
  inputNames.clear();
  inputValues.clear();
  inputGrads.clear();
  inputs.clear();
  dInputs.clear();
  std::vector<std::array<int64_t, 4>> shapes;
  std::mt19937 rng(0xf1a7);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (int64_t x = 0; x < attnc_kernel_num_inputs(kernel); ++x) {
    attnc_input_info info{};
    info.size = sizeof info;
    if (attnc_kernel_input_info(kernel, x, std::max<int64_t>(tk.shape[2], 1), std::max<int64_t>(tq.shape[1], 1),
                                &info) != ATTNC_OK ||
        !info.is_float)
      continue;
    // The declared dimensions, then 1s.
    shapes.push_back({info.dims[0], info.rank >= 2 ? info.dims[1] : 1, info.rank >= 3 ? info.dims[2] : 1, 1});
    inputNames.push_back(info.name);
    inputValues.emplace_back(static_cast<size_t>(shapes.back()[0] * shapes.back()[1] * shapes.back()[2]));
    for (float &value : inputValues.back())
      value = normal(rng);
    inputGrads.emplace_back(inputValues.back().size(), 0.0f);
  }
  // (Views once the vectors no longer move.)
  for (size_t x = 0; x < inputNames.size(); ++x) {
    inputs.push_back({inputNames[x].c_str(), tensorView(inputValues[x].data(), shapes[x])});
    dInputs.push_back({inputNames[x].c_str(), tensorView(inputGrads[x].data(), shapes[x])});
  }
}

namespace {
/// One forward call on `in`, dense or varlen as `in` says, with its float
/// inputs when it has some.
attnc_status runForward(const attnc_kernel *kernel, RandomInputs &in, attnc_tensor *lse,
                        const attnc_run_options &options) {
  if (!in.inputs.empty()) {
    attnc_call call;
    attnc_call_init(&call);
    call.q = &in.tq;
    call.k = &in.tk;
    call.v = &in.tv;
    call.o = &in.to;
    call.lse = lse;
    call.varlen = in.varlen;
    call.inputs = in.inputs.data();
    call.num_inputs = static_cast<int64_t>(in.inputs.size());
    call.options = &options;
    return attnc_forward(kernel, &call);
  }
  if (in.varlen)
    return attnc_run_varlen(kernel, &in.tq, &in.tk, &in.tv, &in.to, lse, in.varlen, &options);
  return lse ? attnc_run_forward(kernel, &in.tq, &in.tk, &in.tv, &in.to, lse, &options)
             : attnc_run(kernel, &in.tq, &in.tk, &in.tv, &in.to, &options);
}
} // namespace

double medianRunMs(const attnc_kernel *kernel, RandomInputs &in, const attnc_run_options &options,
                   int repeat, std::string &error, double *firstMs) {
  auto start = std::chrono::steady_clock::now();
  if (runForward(kernel, in, nullptr, options) != ATTNC_OK) {
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
  runForward(kernel, in, nullptr, options);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

BackwardBuffers::BackwardBuffers(const RandomInputs &in, uint32_t seed) {
  const std::array<int64_t, 4> shape{in.tq.shape[0], in.tq.shape[1], in.tq.shape[2], in.tq.shape[3]};
  const std::array<int64_t, 4> kvShape{in.tk.shape[0], in.tk.shape[1], in.tk.shape[2], in.tk.shape[3]};
  const size_t count = in.q.size(), kvCount = in.k.size();
  dO.resize(count);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  for (float &x : dO)
    x = normal(rng);
  lse.assign(static_cast<size_t>(shape[0] * shape[1] * shape[2]), 0.0f);
  tlse = tensorView(lse.data(), {shape[0], shape[1], shape[2], 1});
  dq.assign(count, 0.0f);
  dk.assign(kvCount, 0.0f);
  dv.assign(kvCount, 0.0f);
  if (in.tq.dtype == ATTNC_DTYPE_BF16) {
    dOb.resize(count);
    std::transform(dO.begin(), dO.end(), dOb.begin(), floatToBf16);
    dqb.assign(count, 0);
    dkb.assign(kvCount, 0);
    dvb.assign(kvCount, 0);
    tdO = tensorView(dOb.data(), shape, ATTNC_DTYPE_BF16);
    tdq = tensorView(dqb.data(), shape, ATTNC_DTYPE_BF16);
    tdk = tensorView(dkb.data(), kvShape, ATTNC_DTYPE_BF16);
    tdv = tensorView(dvb.data(), kvShape, ATTNC_DTYPE_BF16);
    return;
  }
  tdO = tensorView(dO.data(), shape);
  tdq = tensorView(dq.data(), shape);
  tdk = tensorView(dk.data(), kvShape);
  tdv = tensorView(dv.data(), kvShape);
}

attnc_status medianStepMs(const attnc_kernel *kernel, RandomInputs &in, BackwardBuffers &grad,
                          const attnc_run_options &options, int repeat, StepTimes &out, std::string &error) {
  std::vector<double> forward, backward;
  // Round 0 is the warm-up: it builds what the backward needs at this n.
  for (int r = 0; r <= repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    attnc_status status = runForward(kernel, in, &grad.tlse, options);
    auto t1 = std::chrono::steady_clock::now();
    if (status == ATTNC_OK && !in.inputs.empty()) {
      // With the float inputs, whose gradients the backward writes too.
      attnc_call call;
      attnc_call_init(&call);
      call.q = &in.tq;
      call.k = &in.tk;
      call.v = &in.tv;
      call.o = &in.to;
      call.lse = &grad.tlse;
      call.d_o = &grad.tdO;
      call.d_q = &grad.tdq;
      call.d_k = &grad.tdk;
      call.d_v = &grad.tdv;
      call.varlen = in.varlen;
      call.inputs = in.inputs.data();
      call.num_inputs = static_cast<int64_t>(in.inputs.size());
      call.d_inputs = in.dInputs.data();
      call.num_d_inputs = static_cast<int64_t>(in.dInputs.size());
      call.options = &options;
      status = attnc_backward(kernel, &call);
    } else if (status == ATTNC_OK && in.varlen)
      status = attnc_run_backward_varlen(kernel, &in.tq, &in.tk, &in.tv, &in.to, &grad.tdO, &grad.tlse, &grad.tdq,
                                         &grad.tdk, &grad.tdv, in.varlen, &options);
    else if (status == ATTNC_OK)
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
