//===- Measure.h - Timing kernels on random inputs (bench and tune) -------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/support/AlignedVector.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace attnc::tool {

/// Normal(0, 1) Q, K, V and an output buffer of shape [batch, heads, n, d],
/// float32 or (`dtype` bf16) rounded to bfloat16.
struct RandomInputs {
  RandomInputs(int64_t batch, int64_t heads, int64_t n, int64_t d, uint32_t seed,
               attnc_dtype dtype = ATTNC_DTYPE_F32);
  /// Q and O of `qShape` [B, Hq, nq, d], K and V of `kvShape` [B, Hkv, nk,
  /// d] (grouped-query heads, fewer queries than keys); the same draws as
  /// the constructor above when the shapes are equal.
  RandomInputs(const std::array<int64_t, 4> &qShape, const std::array<int64_t, 4> &kvShape, uint32_t seed,
               attnc_dtype dtype = ATTNC_DTYPE_F32);
  RandomInputs(const RandomInputs &) = delete; // `varlen` points into it
  RandomInputs &operator=(const RandomInputs &) = delete;
  /// Makes every run a variable-length batch (attnc_run_varlen) of
  /// sequences of these lengths, each its own queries and keys; their sum
  /// must be the tensors' n, and the batch 1.
  void setVarlen(const std::vector<int64_t> &lengths);
  /// Draws the float inputs of `kernel`'s pattern (a score modifier's
  /// `input NAME : float[DIMS]`, at these shapes: normal with standard
  /// deviation 0.5, the same for every kernel of one pattern) that every
  /// run then passes (attnc_forward), and buffers for their gradients that
  /// the backward writes (attnc_call::d_inputs), as a training step has
  /// them computed. Int inputs are not drawn (bench and tune refuse
  /// patterns that read data). Call it for each kernel before its runs.
  void setFloatInputs(const attnc_kernel *kernel);
  support::AlignedVector<float> q, k, v, o;
  support::AlignedVector<uint16_t> qb, kb, vb, ob; ///< the bf16 tensors' elements
  attnc_tensor tq, tk, tv, to;
  std::vector<int32_t> cuSeqlens;  ///< setVarlen's offsets
  const attnc_varlen *varlen = nullptr; ///< null: a dense batch
  std::vector<std::string> inputNames;        ///< setFloatInputs' inputs
  std::vector<std::vector<float>> inputValues, inputGrads;
  std::vector<attnc_input> inputs, dInputs;   ///< empty: none

private:
  attnc_varlen varlenArgs{};
};

/// One warm-up run (it builds the plan or CSR for n; its time goes to
/// `firstMs` when given), then `repeat` timed runs; returns the median in
/// milliseconds (0 when `repeat` is 0: the warm-up alone), or a negative
/// value with `error` set when a run fails.
double medianRunMs(const attnc_kernel *kernel, RandomInputs &in, const attnc_run_options &options,
                   int repeat, std::string &error, double *firstMs = nullptr);

/// The time of one run in milliseconds (after a warm-up; a failing run was
/// caught by it).
double timeOneRunMs(const attnc_kernel *kernel, RandomInputs &in, const attnc_run_options &options);

/// What a training step adds to `in` (same shapes and dtype): Normal(0, 1)
/// dO, the log-sum-exp (f32 [batch, heads, nq, 1]) and dQ (Q's shape), dK,
/// dV (K's shape) buffers.
struct BackwardBuffers {
  BackwardBuffers(const RandomInputs &in, uint32_t seed);
  std::vector<float> dO, lse, dq, dk, dv;
  std::vector<uint16_t> dOb, dqb, dkb, dvb; ///< the bf16 tensors' elements
  attnc_tensor tdO, tlse, tdq, tdk, tdv;
};

/// Medians of a training step's two calls, in milliseconds.
struct StepTimes {
  double forwardMs = 0;  ///< attnc_run_forward, writing O and the log-sum-exp
  double backwardMs = 0; ///< attnc_run_backward on that O and log-sum-exp
};

/// One warm-up step (forward with lse, then backward), then `repeat` timed
/// steps, each call timed on its own; the medians go to `out`. Returns
/// ATTNC_OK, or the status of the first failing call with `error` set to its
/// message (ATTNC_ERROR_UNSUPPORTED: the backend has no backward pass).
attnc_status medianStepMs(const attnc_kernel *kernel, RandomInputs &in, BackwardBuffers &grad,
                          const attnc_run_options &options, int repeat, StepTimes &out, std::string &error);

} // namespace attnc::tool
