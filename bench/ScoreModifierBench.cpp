//===- ScoreModifierBench.cpp - What a score modifier costs, timed --------===//
//
// Each score modifier of issue 41's patterns next to the same pattern
// without it, in one process: ALiBi on a 96-key window, Gemma-2-style
// soft-capping on Sparse Transformer *fixed*, a sink on a 128-key window and
// a T5 relative-bias table on a 128-key window. f32 [1, heads, n, d] through
// attnc_forward / attnc_backward (float inputs' gradients asked for), fused
// backend. Reports the median times, the modifier's cost over its base,
// effective GFLOP/s (4 nnz d heads / forward; 14 nnz d heads / forward +
// backward; nnz counted in closed form) and the share of the FMA peak
// measured in the same run (tools/attnc/Peak.h).
//
//   attnc_bench_scores [--n 16384] [--d 64] [--heads 8] [--threads 2] [--repeat 5]
//                      [--cases alibi_local,capped_fixed,sink_window,t5_bias]
//
//===----------------------------------------------------------------------===//
#include "Peak.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"
#include "attnc/support/AlignedVector.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

struct Options {
  int64_t n = 16384, d = 64, heads = 8;
  int threads = 2, repeat = 5;
  std::string cases; ///< empty: all
};

/// A modifier and its base: sources, the float inputs' shapes and values,
/// and the keys of row i (both have the same set).
struct Case {
  const char *name, *modified, *base;
  std::function<int64_t(int64_t i)> keys;
  struct Input {
    const char *name;
    std::vector<int64_t> dims; ///< over heads
    float scale;
  };
  std::vector<Input> inputs;
};

std::vector<Case> cases() {
  return {
      {"alibi_local",
       R"(pattern alibi_local { param w = 96  input slope : float[heads]  causal
  attend { j : i - j < w }  score s + slope[h] * (j - i) })",
       R"(pattern local { param w = 96  causal  attend { j : i - j < w } })",
       [](int64_t i) { return std::min<int64_t>(96, i + 1); },
       {{"slope", {-1}, 0.1f}}},
      {"capped_fixed",
       R"(pattern capped_fixed { param l = 64  param c = 8  param cap = 20  causal
  attend { j : j / l == i / l } | { j : j % l >= l - c }  score cap * tanh(s / cap) })",
       R"(pattern fixed { param l = 64  param c = 8  causal
  attend { j : j / l == i / l } | { j : j % l >= l - c } })",
       [](int64_t i) { return i % 64 + 1 + (i / 64) * 8; },
       {}},
      {"sink_window",
       R"(pattern sink_window { param w = 128  input z : float[heads]  causal
  attend { j : i - j < w }  sink z[h] })",
       R"(pattern window { param w = 128  causal  attend { j : i - j < w } })",
       [](int64_t i) { return std::min<int64_t>(128, i + 1); },
       {{"z", {-1}, 1.0f}}},
      {"t5_bias",
       R"(pattern t5_bias { param w = 128  input rel : float[heads, 32]  causal
  attend { j : i - j < w }
  score s + rel[h, where(i - j < 16, i - j, min(16 + floor(log((i - j) / 16.0) / log(8.0) * 16), 31))] })",
       R"(pattern window { param w = 128  causal  attend { j : i - j < w } })",
       [](int64_t i) { return std::min<int64_t>(128, i + 1); },
       {{"rel", {-1, 32}, 0.5f}}},
  };
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename Floats> // (std::vector<float> or an AlignedVector)
attnc_tensor tensorOf(Floats &t, std::vector<int64_t> shape) {
  attnc_tensor x{};
  x.data = t.data();
  x.dtype = ATTNC_DTYPE_F32;
  shape.resize(4, 1);
  int64_t stride = 1;
  for (int a = 3; a >= 0; --a) {
    x.shape[a] = shape[static_cast<size_t>(a)];
    x.strides[a] = stride;
    stride *= shape[static_cast<size_t>(a)];
  }
  return x;
}

struct Timing {
  double forwardMs = 0, stepMs = 0;
};

/// One kernel with its tensors and float inputs, called one step at a time.
class Runner {
public:
  Runner(const char *source, const Case &c, bool withInputs, const Options &o) : c_(c), o_(o) {
    attnc_kernel *kernel = nullptr;
    attnc_jit_options jo{};
    jo.backend = "fused";
    if (attnc_jit_compile_string(source, c.name, &jo, &kernel) != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_scores: %s: %s\n", c.name, attnc_last_error());
      return;
    }
    kernel_.reset(kernel);
    const size_t size = static_cast<size_t>(o.heads * o.n * o.d);
    for (auto *t : {&q_, &k_, &v_, &dO_, &o__, &dq_, &dk_, &dv_})
      t->resize(size);
    lse_.resize(static_cast<size_t>(o.heads * o.n));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto *t : {&q_, &k_, &v_, &dO_})
      for (float &x : *t)
        x = normal(rng);
    if (withInputs) {
      values_.reserve(c.inputs.size());
      grads_.reserve(c.inputs.size());
      for (const Case::Input &in : c.inputs) {
        std::vector<int64_t> dims = in.dims;
        int64_t total = 1;
        for (int64_t &x : dims)
          total *= (x = x < 0 ? o.heads : x);
        values_.emplace_back(static_cast<size_t>(total));
        for (float &x : values_.back())
          x = in.scale * normal(rng);
        grads_.emplace_back(static_cast<size_t>(total));
        inputs_.push_back({in.name, tensorOf(values_.back(), dims)});
        dInputs_.push_back({in.name, tensorOf(grads_.back(), dims)});
      }
    }
  }
  bool ok() const { return kernel_ != nullptr; }

  /// One forward and one backward call: their times (ms) into `out`.
  bool step(Timing &out) {
    const std::vector<int64_t> qkv{1, o_.heads, o_.n, o_.d}, rows{1, o_.heads, o_.n, 1};
    attnc_tensor tq = tensorOf(q_, qkv), tk = tensorOf(k_, qkv), tv = tensorOf(v_, qkv), to = tensorOf(o__, qkv),
                 tl = tensorOf(lse_, rows), tdo = tensorOf(dO_, qkv), tdq = tensorOf(dq_, qkv),
                 tdk = tensorOf(dk_, qkv), tdv = tensorOf(dv_, qkv);
    attnc_run_options ro{0.0f, o_.threads};
    attnc_call call;
    attnc_call_init(&call);
    call.q = &tq;
    call.k = &tk;
    call.v = &tv;
    call.o = &to;
    call.lse = &tl;
    call.inputs = inputs_.data();
    call.num_inputs = static_cast<int64_t>(inputs_.size());
    call.options = &ro;
    const auto t0 = std::chrono::steady_clock::now();
    if (attnc_forward(kernel_.get(), &call) != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_scores: %s: %s\n", c_.name, attnc_last_error());
      return false;
    }
    const auto t1 = std::chrono::steady_clock::now();
    call.d_o = &tdo;
    call.d_q = &tdq;
    call.d_k = &tdk;
    call.d_v = &tdv;
    call.d_inputs = dInputs_.data();
    call.num_d_inputs = static_cast<int64_t>(dInputs_.size());
    if (attnc_backward(kernel_.get(), &call) != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_scores: %s (backward): %s\n", c_.name, attnc_last_error());
      return false;
    }
    const auto t2 = std::chrono::steady_clock::now();
    out = {std::chrono::duration<double, std::milli>(t1 - t0).count(),
           std::chrono::duration<double, std::milli>(t2 - t0).count()};
    return true;
  }

private:
  const Case &c_;
  const Options &o_;
  std::unique_ptr<attnc_kernel, void (*)(attnc_kernel *)> kernel_{nullptr, attnc_kernel_free};
  attnc::support::AlignedVector<float> q_, k_, v_, dO_, o__, lse_, dq_, dk_, dv_; // (64-byte aligned, as a framework's tensors)
  std::vector<std::vector<float>> values_, grads_;
  std::vector<attnc_input> inputs_, dInputs_;
};

/// Medians of `repeat` steps of the base and the modified kernel, taken in
/// turns (a slow spell of the machine then falls on both), after one each
/// to warm up.
bool timePair(const Case &c, const Options &o, Timing &base, Timing &mod) {
  Runner b(c.base, c, false, o), m(c.modified, c, true, o);
  if (!b.ok() || !m.ok())
    return false;
  std::vector<double> bf, bs, mf, ms;
  for (int r = 0; r <= o.repeat; ++r) {
    Timing tb, tm;
    if (!b.step(tb) || !m.step(tm))
      return false;
    if (r == 0)
      continue;
    bf.push_back(tb.forwardMs);
    bs.push_back(tb.stepMs);
    mf.push_back(tm.forwardMs);
    ms.push_back(tm.stepMs);
  }
  base = {medianOf(bf), medianOf(bs)};
  mod = {medianOf(mf), medianOf(ms)};
  return true;
}

constexpr const char *kUsage =
    "usage: attnc_bench_scores [--n 16384] [--d 64] [--heads 8] [--threads 2] [--repeat 5]\n"
    "                          [--cases alibi_local,capped_fixed,sink_window,t5_bias]\n"
    "Times each score modifier of patterns/ beside the same pattern without it, forward and forward +\n"
    "backward (fused backend, f32 [1, heads, n, d]): median ms, the modifier's cost, effective GFLOP/s and\n"
    "the share of the FMA peak measured in the same run.\n";

/// Reads the flags into `o`; false (after a message) on a bad one; `help`: --help was printed.
bool parse(int argc, char **argv, Options &o, bool &help) {
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      help = true;
      return true;
    }
    const char *v = a + 1 < argc ? argv[++a] : nullptr;
    if (!v) {
      std::fprintf(stderr, "attnc_bench_scores: %s needs a value\n", flag.c_str());
      return false;
    }
    if (flag == "--n") o.n = std::atoll(v);
    else if (flag == "--d") o.d = std::atoll(v);
    else if (flag == "--heads") o.heads = std::atoll(v);
    else if (flag == "--threads") o.threads = std::atoi(v);
    else if (flag == "--repeat") o.repeat = std::atoi(v);
    else if (flag == "--cases") o.cases = std::string(",") + v + ",";
    else {
      std::fprintf(stderr, "attnc_bench_scores: unknown flag %s\n%s", flag.c_str(), kUsage);
      return false;
    }
  }
  if (o.n < 1 || o.d < 1 || o.heads < 1 || o.threads < 1 || o.repeat < 1) {
    std::fprintf(stderr, "attnc_bench_scores: --n, --d, --heads, --threads, --repeat must be >= 1\n");
    return false;
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  bool help = false;
  if (!parse(argc, argv, o, help))
    return 2;
  if (help)
    return 0;
  attnc::tool::Peak peak = attnc::tool::measurePeak(o.threads);
  if (const attnc::tool::Peak again = attnc::tool::measurePeak(o.threads); again.gflops > peak.gflops)
    peak = again;
  std::printf("# attnc_bench_scores: n=%lld d=%lld heads=%lld f32, %d threads, median of %d calls\n"
              "# FMA peak: %.1f GFLOP/s (%s, %d threads, measured in this run); kernels: %s\n",
              (long long)o.n, (long long)o.d, (long long)o.heads, o.threads, o.repeat, peak.gflops,
              peak.isa.c_str(), peak.threads, attnc_cpu_isa());
  std::printf("| modifier | fwd ms (base) | fwd ms | fwd cost | fwd %% peak | fwd+bwd ms (base) | fwd+bwd ms | "
              "fwd+bwd cost | fwd+bwd %% peak |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Case &c : cases()) {
    if (!o.cases.empty() && o.cases.find(std::string(",") + c.name + ",") == std::string::npos)
      continue;
    int64_t nnz = 0;
    for (int64_t i = 0; i < o.n; ++i)
      nnz += c.keys(i);
    const double work = double(nnz) * double(o.d) * double(o.heads);
    Timing base, mod;
    if (!timePair(c, o, base, mod))
      return 1;
    const double fwdShare = 4 * work / (mod.forwardMs * 1e6) / peak.gflops;
    const double stepShare = 14 * work / (mod.stepMs * 1e6) / peak.gflops;
    std::printf("| %s | %.2f | %.2f | %+.1f%% | %.0f%% | %.2f | %.2f | %+.1f%% | %.0f%% |\n", c.name, base.forwardMs,
                mod.forwardMs, 100 * (mod.forwardMs / base.forwardMs - 1), 100 * fwdShare, base.stepMs, mod.stepMs,
                100 * (mod.stepMs / base.stepMs - 1), 100 * stepShare);
    std::fflush(stdout);
  }
  const attnc::tool::Peak after = attnc::tool::measurePeak(o.threads);
  std::printf("# FMA peak measured again after the rows: %.1f GFLOP/s (the shares above use %.1f)\n", after.gflops,
              peak.gflops);
  return 0;
}
