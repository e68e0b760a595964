//===- DataPatternBench.cpp - Patterns that read the data, timed ----------===//
//
// The patterns of patterns/ that read data (lsh, nsa, topk, document), run
// through attnc_forward / attnc_backward with NEW data at every call (the
// planning from the data is inside the time, as it is in training), on the
// fused backend and on the dense masked baseline of the same kernel code,
// f32, [batch, heads, n, d]. Reports the median time, effective GFLOP/s
// (4 * nnz * d * batch * heads / forward time; 14 * nnz * d * ... / forward
// + backward time), nnz counted exactly from each call's data, and the
// share of the FMA peak of the instruction set that ran, measured in the
// same process (tools/attnc/Peak.h).
//
//   attnc_bench_data [--n 16384] [--d 64] [--heads 8] [--threads 2] [--repeat 5]
//                    [--patterns lsh,nsa,topk,document] [--dense-max-n 16384]
//                    [--forward-only] [--json]
//
// Data per call: lsh: two rounds of 64 uniform buckets per position and
// head (what Reformer's hash of random vectors gives); nsa: 8 distinct
// blocks of 64 per query block among the blocks up to it (B = 64, w = 64);
// topk: 64 distinct tokens up to each query (w = 64); document: packed
// documents of 512 to 4096 tokens.
//
//===----------------------------------------------------------------------===//
#include "Peak.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"
#include "attnc/support/AlignedVector.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

struct Options {
  int64_t n = 16384, d = 64, heads = 8, batch = 1, denseMaxN = 16384;
  int threads = 2, repeat = 5;
  std::string patterns = "lsh,nsa,topk,document";
  bool json = false;        ///< one JSON document instead of the markdown table
  bool forwardOnly = false; ///< no backward calls (a profile of the forward alone)
};

/// One call's inputs: int32 arrays [batch, heads, D1, D2] and the pairs they make.
struct Data {
  std::vector<std::string> names;
  std::vector<std::vector<int32_t>> values;
  std::vector<std::array<int64_t, 4>> shapes;
  int64_t nnz = 0; ///< pairs over every slice
  std::vector<attnc_input> views() {
    std::vector<attnc_input> out;
    for (size_t x = 0; x < names.size(); ++x) {
      attnc_input in{};
      in.name = names[x].c_str();
      in.values.data = values[x].data();
      in.values.dtype = ATTNC_DTYPE_I32;
      int64_t stride = 1;
      for (int a = 3; a >= 0; --a) {
        in.values.shape[a] = shapes[x][a];
        in.values.strides[a] = stride;
        stride *= shapes[x][a];
      }
      out.push_back(in);
    }
    return out;
  }
};

/// k distinct values of [0, limit), sorted (all of them when limit <= k; -1 pads).
void distinct(std::mt19937_64 &rng, int64_t limit, int64_t k, int32_t *out) {
  std::vector<int32_t> picked;
  if (limit <= k) {
    for (int64_t x = 0; x < limit; ++x)
      picked.push_back(static_cast<int32_t>(x));
  } else {
    while (static_cast<int64_t>(picked.size()) < k) {
      const auto x = static_cast<int32_t>(rng() % static_cast<uint64_t>(limit));
      if (std::find(picked.begin(), picked.end(), x) == picked.end())
        picked.push_back(x);
    }
  }
  std::sort(picked.begin(), picked.end());
  for (int64_t c = 0; c < k; ++c)
    out[c] = c < static_cast<int64_t>(picked.size()) ? picked[static_cast<size_t>(c)] : -1;
}

/// Pairs of the causal union of two rounds' classes, per slice: for each
/// row, the earlier-or-equal keys sharing either bucket, each once.
int64_t lshPairs(const int32_t *b0, const int32_t *b1, int64_t n, int64_t buckets) {
  // count[x][y]: earlier positions with bucket x in round 0 and y in round 1.
  std::vector<int64_t> r0(static_cast<size_t>(buckets)), r1(static_cast<size_t>(buckets)),
      both(static_cast<size_t>(buckets * buckets));
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto x = static_cast<size_t>(b0[i]), y = static_cast<size_t>(b1[i]);
    ++r0[x];
    ++r1[y];
    ++both[x * static_cast<size_t>(buckets) + y];
    total += r0[x] + r1[y] - both[x * static_cast<size_t>(buckets) + y];
  }
  return total;
}

Data makeData(const std::string &pattern, const Options &o, std::mt19937_64 &rng) {
  Data data;
  const int64_t n = o.n, slices = o.batch * o.heads;
  if (pattern == "lsh") {
    constexpr int64_t kBuckets = 64;
    for (const char *name : {"b0", "b1"}) {
      data.names.push_back(name);
      data.shapes.push_back({o.batch, o.heads, n, 1});
      std::vector<int32_t> v(static_cast<size_t>(slices * n));
      for (int32_t &x : v)
        x = static_cast<int32_t>(rng() % kBuckets);
      data.values.push_back(std::move(v));
    }
    for (int64_t s = 0; s < slices; ++s)
      data.nnz += lshPairs(data.values[0].data() + s * n, data.values[1].data() + s * n, n, kBuckets);
  } else if (pattern == "nsa") {
    constexpr int64_t B = 64, k = 8, w = 64;
    const int64_t blocks = (n + B - 1) / B;
    data.names.push_back("sel");
    data.shapes.push_back({o.batch, o.heads, blocks, k});
    std::vector<int32_t> v(static_cast<size_t>(slices * blocks * k));
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t r = 0; r < blocks; ++r) {
        int32_t *row = v.data() + (s * blocks + r) * k;
        distinct(rng, r + 1, k, row);
        // Pairs of the rows of this query block: the window, and the selected keys outside it.
        for (int64_t i = r * B; i < std::min(n, (r + 1) * B); ++i) {
          int64_t pairs = std::min(w, i + 1);
          for (int64_t c = 0; c < k; ++c)
            if (row[c] >= 0)
              for (int64_t j = row[c] * B; j < std::min((row[c] + 1) * B, i + 1); ++j)
                pairs += i - j >= w;
          data.nnz += pairs;
        }
      }
    data.values.push_back(std::move(v));
  } else if (pattern == "topk") {
    constexpr int64_t k = 64, w = 64;
    data.names.push_back("top");
    data.shapes.push_back({o.batch, o.heads, n, k});
    std::vector<int32_t> v(static_cast<size_t>(slices * n * k));
    for (int64_t s = 0; s < slices; ++s)
      for (int64_t i = 0; i < n; ++i) {
        int32_t *row = v.data() + (s * n + i) * k;
        distinct(rng, i + 1, k, row);
        int64_t pairs = std::min(w, i + 1);
        for (int64_t c = 0; c < k; ++c)
          pairs += row[c] >= 0 && i - row[c] >= w;
        data.nnz += pairs;
      }
    data.values.push_back(std::move(v));
  } else if (pattern == "document") {
    data.names.push_back("doc");
    data.shapes.push_back({o.batch, 1, n, 1});
    std::vector<int32_t> v(static_cast<size_t>(o.batch * n));
    for (int64_t b = 0; b < o.batch; ++b) {
      int64_t start = 0, id = 0;
      while (start < n) {
        const int64_t len = std::min(n - start, 512 + static_cast<int64_t>(rng() % 3585));
        for (int64_t i = start; i < start + len; ++i)
          v[static_cast<size_t>(b * n + i)] = static_cast<int32_t>(id);
        data.nnz += len * (len + 1) / 2 * o.heads;
        start += len;
        ++id;
      }
    }
    data.values.push_back(std::move(v));
  }
  return data;
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timing {
  double forwardMs = 0, stepMs = 0, forwardGflops = 0, stepGflops = 0;
};

/// Median forward and forward + backward times, new data for every call.
bool timeKernel(const attnc_kernel *kernel, const std::string &pattern, const Options &o, Timing &out) {
  const size_t size = static_cast<size_t>(o.batch * o.heads * o.n * o.d);
  // (64-byte aligned, as a framework's tensors are: docs/benchmarks.md, "On an AVX2-only CPU")
  attnc::support::AlignedVector<float> q(size), k(size), v(size), dO(size), attn(size), dq(size), dk(size), dv(size),
      lse(static_cast<size_t>(o.batch * o.heads * o.n));
  std::mt19937 frng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto *t : {&q, &k, &v, &dO})
    for (float &x : *t)
      x = normal(frng);
  auto view = [&](auto &t, int64_t last) {
    attnc_tensor x{};
    x.data = t.data();
    x.dtype = ATTNC_DTYPE_F32;
    const int64_t shape[4] = {o.batch, o.heads, o.n, last};
    int64_t stride = 1;
    for (int a = 3; a >= 0; --a) {
      x.shape[a] = shape[a];
      x.strides[a] = stride;
      stride *= shape[a];
    }
    return x;
  };
  attnc_tensor tq = view(q, o.d), tk = view(k, o.d), tv = view(v, o.d), to = view(attn, o.d), tl = view(lse, 1),
               tdo = view(dO, o.d), tdq = view(dq, o.d), tdk = view(dk, o.d), tdv = view(dv, o.d);
  attnc_run_options ro{0.0f, o.threads};
  std::mt19937_64 rng(11);
  std::vector<double> fwd, step, fwdFlops, stepFlops;
  for (int r = 0; r <= o.repeat; ++r) { // the first call warms up
    Data data = makeData(pattern, o, rng);
    std::vector<attnc_input> inputs = data.views();
    attnc_call call;
    attnc_call_init(&call);
    call.q = &tq;
    call.k = &tk;
    call.v = &tv;
    call.o = &to;
    call.lse = &tl;
    call.inputs = inputs.data();
    call.num_inputs = static_cast<int64_t>(inputs.size());
    call.options = &ro;
    const auto t0 = std::chrono::steady_clock::now();
    if (attnc_forward(kernel, &call) != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_data: %s: %s\n", pattern.c_str(), attnc_last_error());
      return false;
    }
    const auto t1 = std::chrono::steady_clock::now();
    if (o.forwardOnly) {
      if (r > 0) {
        const double f = std::chrono::duration<double, std::milli>(t1 - t0).count();
        fwd.push_back(f);
        fwdFlops.push_back(4.0 * double(data.nnz) * double(o.d) / (f * 1e6));
      }
      continue;
    }
    call.d_o = &tdo;
    call.d_q = &tdq;
    call.d_k = &tdk;
    call.d_v = &tdv;
    if (attnc_backward(kernel, &call) != ATTNC_OK) {
      std::fprintf(stderr, "attnc_bench_data: %s (backward): %s\n", pattern.c_str(), attnc_last_error());
      return false;
    }
    const auto t2 = std::chrono::steady_clock::now();
    if (r == 0)
      continue;
    const double f = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double s = std::chrono::duration<double, std::milli>(t2 - t0).count();
    fwd.push_back(f);
    step.push_back(s);
    fwdFlops.push_back(4.0 * double(data.nnz) * double(o.d) / (f * 1e6));
    stepFlops.push_back(14.0 * double(data.nnz) * double(o.d) / (s * 1e6));
  }
  out = {medianOf(fwd), o.forwardOnly ? 0.0 : medianOf(step), medianOf(fwdFlops),
         o.forwardOnly ? 0.0 : medianOf(stepFlops)};
  return true;
}

constexpr const char *kUsage =
    "usage: attnc_bench_data [--n 16384] [--d 64] [--heads 8] [--batch 1] [--threads 2] [--repeat 5]\n"
    "                        [--patterns lsh,nsa,topk,document] [--dense-max-n 16384] [--forward-only] [--json]\n"
    "Times the patterns of patterns/ that read data (new data at every call, planning inside the time) on the\n"
    "fused backend and the dense masked baseline (only up to --dense-max-n; 0: never), forward and forward +\n"
    "backward (--forward-only: the forward alone, for a profile), f32 [batch, heads, n, d]: median ms,\n"
    "effective GFLOP/s and the share of the FMA peak measured in the same run, as a markdown table (--json: one\n"
    "JSON document). The data each pattern gets: the comment at the top of bench/DataPatternBench.cpp.\n";

/// Reads the flags into `o`; false (after a message) on a bad one; `help`: --help was printed.
bool parse(int argc, char **argv, Options &o, bool &help) {
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      help = true;
      return true;
    }
    auto value = [&]() -> const char * { return a + 1 < argc ? argv[++a] : nullptr; };
    const char *v = flag == "--json" || flag == "--forward-only" ? "" : value();
    if (!v) {
      std::fprintf(stderr, "attnc_bench_data: %s needs a value\n", flag.c_str());
      return false;
    }
    if (flag == "--n") o.n = std::atoll(v);
    else if (flag == "--d") o.d = std::atoll(v);
    else if (flag == "--heads") o.heads = std::atoll(v);
    else if (flag == "--batch") o.batch = std::atoll(v);
    else if (flag == "--threads") o.threads = std::atoi(v);
    else if (flag == "--repeat") o.repeat = std::atoi(v);
    else if (flag == "--patterns") o.patterns = v;
    else if (flag == "--dense-max-n") o.denseMaxN = std::atoll(v);
    else if (flag == "--json") o.json = true;
    else if (flag == "--forward-only") o.forwardOnly = true;
    else {
      std::fprintf(stderr, "attnc_bench_data: unknown flag %s\n%s", flag.c_str(), kUsage);
      return false;
    }
  }
  if (o.n < 1 || o.d < 1 || o.heads < 1 || o.batch < 1 || o.threads < 1 || o.repeat < 1) {
    std::fprintf(stderr, "attnc_bench_data: --n, --d, --heads, --batch, --threads, --repeat must be >= 1\n");
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
  // The peak: the higher of two readings before the rows (one taken while
  // the machine's clock or neighbours hold it back would flatter the
  // shares), and one after them, printed for comparison.
  attnc::tool::Peak peak = attnc::tool::measurePeak(o.threads);
  if (const attnc::tool::Peak again = attnc::tool::measurePeak(o.threads); again.gflops > peak.gflops)
    peak = again;
  if (o.json) {
    std::printf("{\"n\": %lld, \"d\": %lld, \"batch\": %lld, \"heads\": %lld, \"threads\": %d, \"repeat\": %d, "
                "\"forward_only\": %s, \"peak_gflops\": %.1f, \"peak_isa\": \"%s\", \"kernels\": \"%s\", \"rows\": [",
                (long long)o.n, (long long)o.d, (long long)o.batch, (long long)o.heads, o.threads, o.repeat,
                o.forwardOnly ? "true" : "false", peak.gflops, peak.isa.c_str(), attnc_cpu_isa());
  } else {
    std::printf("# attnc_bench_data: n=%lld d=%lld batch=%lld heads=%lld f32, %d threads, median of %d calls, new "
                "data each call\n# FMA peak: %.1f GFLOP/s (%s, %d threads, measured in this run); kernels: %s\n",
                (long long)o.n, (long long)o.d, (long long)o.batch, (long long)o.heads, o.threads, o.repeat,
                peak.gflops, peak.isa.c_str(), peak.threads, attnc_cpu_isa());
    std::printf("| pattern | backend | fwd ms | fwd GFLOP/s | fwd %% peak | fwd+bwd ms | fwd+bwd GFLOP/s | fwd+bwd %% "
                "peak |\n|---|---|---|---|---|---|---|---|\n");
  }
  bool firstRow = true;
  size_t start = 0;
  while (start <= o.patterns.size()) {
    const size_t comma = o.patterns.find(',', start);
    const std::string name = o.patterns.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? o.patterns.size() + 1 : comma + 1;
    const std::string file = std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn";
    for (const char *backend : {"fused", "dense"}) {
      if (std::strcmp(backend, "dense") == 0 && o.n > o.denseMaxN)
        continue;
      attnc_kernel *kernel = nullptr;
      attnc_jit_options jo{};
      jo.backend = backend;
      if (attnc_jit_compile_file(file.c_str(), &jo, &kernel) != ATTNC_OK) {
        std::fprintf(stderr, "attnc_bench_data: %s: %s\n", file.c_str(), attnc_last_error());
        return 1;
      }
      std::unique_ptr<attnc_kernel, void (*)(attnc_kernel *)> owned(kernel, attnc_kernel_free);
      Timing t;
      if (!timeKernel(kernel, name, o, t))
        return 1;
      const double fwdShare = t.forwardGflops / peak.gflops, stepShare = t.stepGflops / peak.gflops;
      if (o.json) {
        std::printf("%s\n  {\"pattern\": \"%s\", \"backend\": \"%s\", \"fwd_ms\": %.3f, \"fwd_gflops\": %.2f, "
                    "\"fwd_peak_share\": %.4f",
                    firstRow ? "" : ",", name.c_str(), backend, t.forwardMs, t.forwardGflops, fwdShare);
        if (!o.forwardOnly)
          std::printf(", \"step_ms\": %.3f, \"step_gflops\": %.2f, \"step_peak_share\": %.4f", t.stepMs,
                      t.stepGflops, stepShare);
        std::printf("}");
      } else if (o.forwardOnly) {
        std::printf("| %s | %s | %.2f | %.1f | %.0f%% | — | — | — |\n", name.c_str(), backend, t.forwardMs,
                    t.forwardGflops, 100 * fwdShare);
      } else {
        std::printf("| %s | %s | %.2f | %.1f | %.0f%% | %.2f | %.1f | %.0f%% |\n", name.c_str(), backend, t.forwardMs,
                    t.forwardGflops, 100 * fwdShare, t.stepMs, t.stepGflops, 100 * stepShare);
      }
      firstRow = false;
      std::fflush(stdout);
    }
  }
  const attnc::tool::Peak after = attnc::tool::measurePeak(o.threads);
  if (o.json)
    std::printf("\n], \"peak_gflops_after\": %.1f}\n", after.gflops);
  else
    std::printf("# FMA peak measured again after the rows: %.1f GFLOP/s (the shares above use %.1f)\n", after.gflops,
                peak.gflops);
  return 0;
}
