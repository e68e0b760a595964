//===- CmdBench.cpp - attnc bench: backends side by side in one run -------===//
//
// For each backend: compile through the JIT (cached), run once to warm up
// (the sparsifier's CSR for n is built then), then time `--repeat` runs and
// report the median. Effective GFLOP/s = 4 * nnz * d * batch * heads / time,
// where nnz counts the pattern's pairs per head (the useful work); executed /
// useful is what the backend computes over what the pattern needs.
//
// --backward also times a training step per backend, forward with the
// log-sum-exp then backward, the same way: backward GFLOP/s = 10 * nnz * d *
// batch * heads / backward time (its five products: Q K^T recomputed, dO V^T,
// dV, dQ, dK). --peak measures the machine's FMA peak first (Peak.h) and gives
// each rate as a share of it; without a pattern file, the peak is all it
// prints.
//
// --kv-heads gives K and V fewer heads than Q, --queries fewer rows (the last
// positions of the --n keys, a decoding step when 1), --varlen a packed
// batch of sequences; nnz then counts the pairs of the rows computed. A
// --queries run also reports the bytes of the key/value rows those rows name
// and a memcpy of as many bytes timed in the same process: a decoding step
// is memory-bound, and that copy is its yardstick.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Measure.h"
#include "Peak.h"

#include "attnc/attnc.h"
#include "attnc/attnc_jit.h"
#include "attnc/codegen/CodeGen.h"
#include "attnc/compiler/Compile.h"
#include "attnc/analysis/Analysis.h"
#include "attnc/plan/Plan.h"
#include "attnc/support/ThreadPool.h"
#include "attnc/tuning/Tuning.h"

#include "CudaBench.h"

#include <algorithm>
#include <cmath>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

namespace attnc::tool {

namespace {
struct BenchOptions {
  PatternOptions pattern;
  int64_t n = 0, d = 64, batch = 1, heads = 8;
  int64_t kvHeads = 0, queries = 0; ///< 0: --heads, --n
  std::string varlen;               ///< --varlen's lengths, as given
  std::optional<uint64_t> maxMemory;
  bool nGiven = false;
  std::vector<std::string> backends = {"fused", "halide", "sparsifier", "dense"};
  int threads = 0;
  int repeat = 5;
  std::string dtype = "f32";
  bool json = false;
  bool backward = false;
  bool peak = false;
  bool backendsGiven = false;
  std::string target = "cpu";
  int device = 0;
  bool dtypeGiven = false, threadsGiven = false;
};

struct Row {
  std::string backend;
  double ms = 0, gflops = 0, waste = 1;
  bool wasteKnown = true; ///< false for --queries: the runtime picks each call's path
  double firstMs = 0; ///< the first run at this n: it also builds the per-n structure
  bool ok = false;
  std::string error;
  // --backward: a training step's medians (when bwdOk), else why it did not run.
  double fwdLseMs = 0, bwdMs = 0, bwdGflops = 0;
  bool bwdOk = false, bwdUnsupported = false;
  std::string bwdError;
};

/// "290.0 GFLOP/s (avx512f FMA loops, 16 lanes, 2 threads)": the loops of
/// the instruction set the CPU kernels run.
std::string peakText(const Peak &peak) {
  char text[128];
  std::snprintf(text, sizeof text, "%.1f GFLOP/s (%s FMA loops, %d lanes, %d thread%s)", peak.gflops,
                peak.isa.c_str(), peak.lanes, peak.threads, peak.threads == 1 ? "" : "s");
  return text;
}

/// --peak without a pattern file: the peak alone.
int printPeak(const Peak &peak, bool json) {
  if (json)
    std::printf("{\"peak_gflops\": %.1f, \"peak_isa\": %s, \"peak_threads\": %d, \"cpu_isa\": %s}\n", peak.gflops,
                jsonString(peak.isa).c_str(), peak.threads, jsonString(attnc_cpu_isa()).c_str());
  else
    std::printf("peak: %s\n", peakText(peak).c_str());
  return kExitOk;
}

/// Parses --varlen: sequence lengths whose sum fits the ABI's int32 offsets.
/// Returns the reason when it is not such a list.
std::string parseLengths(const std::string &spec, std::vector<int64_t> &lengths) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (std::string error = parseIntList(spec, "the lengths", 0, kMax, lengths); !error.empty())
    return error;
  int64_t total = 0;
  for (int64_t l : lengths)
    total += l;
  if (total < 1)
    return "the lengths must add up to at least 1, got '" + spec + "'";
  if (total > kMax)
    return "the lengths add up to " + std::to_string(total) + ", more than the 2^31 - 1 rows int32 offsets reach";
  return {};
}

/// The median time of a memcpy of `bytes` (one warm-up, then `repeat`), in
/// milliseconds: the floor a memory-bound step is held against.
double memcpyMs(int64_t bytes, int repeat) {
  std::vector<char> from(static_cast<size_t>(bytes), 1), to(static_cast<size_t>(bytes), 0);
  std::vector<double> times;
  for (int r = 0; r <= repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    auto t1 = std::chrono::steady_clock::now();
    if (r > 0)
      times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// The arrays a bench allocates: Q, K, V, O (and their bf16 copies), and
/// with --backward dO, the log-sum-exp and the gradients.
MemoryEstimate benchEstimate(const BenchOptions &opts, const std::vector<int64_t> &qShape,
                             const std::vector<int64_t> &kvShape) {
  MemoryEstimate estimate;
  const bool bf16 = opts.dtype == "bf16";
  for (int64_t bytes : {int64_t{4}, int64_t{2}}) {
    if (bytes == 2 && !bf16)
      continue;
    const std::string copy = bytes == 2 ? " (bf16 copies)" : "";
    estimate.add("Q, K, V, O" + copy, qShape, bytes, 2);
    estimate.add("Q, K, V, O" + copy, kvShape, bytes, 2);
    if (opts.backward) {
      estimate.add("dO, dQ, dK, dV" + copy, qShape, bytes, 2);
      estimate.add("dO, dQ, dK, dV" + copy, kvShape, bytes, 2);
    }
  }
  if (opts.backward)
    estimate.add("the log-sum-exp", {qShape[0], qShape[1], qShape[2]}, 4);
  return estimate;
}

/// attnc bench --target cuda: the fused kernel on a GPU, timed with CUDA
/// events (CudaBench.h); the useful work is the CPU table's.
int runCudaBench(const BenchOptions &opts, const std::string &pattern, const std::array<int64_t, 4> &qShape,
                 const std::array<int64_t, 4> &kvShape, int64_t nnzPerHead, double usefulFlops,
                 double backwardFlops) {
  attnc_kernel *kernel = jitFused(opts.pattern);
  if (!kernel)
    return kExitUserError;
  CudaBenchRequest request;
  request.kernel = kernel;
  request.qShape = qShape;
  request.kvShape = kvShape;
  request.dtype = opts.dtype == "f32" ? ATTNC_DTYPE_F32 : opts.dtype == "f16" ? ATTNC_DTYPE_F16 : ATTNC_DTYPE_BF16;
  request.device = opts.device;
  request.repeat = opts.repeat;
  request.backward = opts.backward;
  CudaBenchResult r;
  std::string error;
  const attnc_status status = cudaBench(request, r, error);
  attnc_kernel_free(kernel);
  if (status != ATTNC_OK) {
    std::cerr << "attnc: error: --target cuda: " << error << "\n";
    return kExitUserError;
  }
  // (A time of 0 -- a driver that runs nothing, as the tests' fake one -- has no rate: null in JSON, "-" as text.)
  const double fwdTflops = r.forwardMs > 0 ? usefulFlops / (r.forwardMs * 1e9) : NAN;
  const double bwdTflops = r.backwardMs > 0 ? backwardFlops / (r.backwardMs * 1e9) : NAN;
  auto json = [](double x) {
    std::ostringstream os;
    if (std::isfinite(x))
      os << x;
    else
      os << "null";
    return os.str();
  };
  const std::string cc = std::to_string(r.major) + "." + std::to_string(r.minor);
  if (opts.json) {
    std::ostringstream os;
    os << "{\"pattern\": " << jsonString(pattern) << ", \"target\": \"cuda\", \"device\": {\"index\": " << opts.device
       << ", \"name\": " << jsonString(r.deviceName) << ", \"compute_capability\": " << jsonString(cc)
       << "}, \"dtype\": " << jsonString(opts.dtype) << ", \"n\": " << kvShape[2] << ", \"queries\": " << qShape[2]
       << ", \"d\": " << qShape[3] << ", \"batch\": " << qShape[0] << ", \"heads\": " << qShape[1]
       << ", \"kv_heads\": " << kvShape[1] << ", \"nnz_per_head\": " << nnzPerHead << ", \"repeat\": " << opts.repeat
       << ", \"first_run_ms\": " << r.firstMs << ", \"ms\": " << r.forwardMs << ", \"tflops\": " << json(fwdTflops)
       << ", \"call_ms\": " << r.callMs;
    if (opts.backward)
      os << ", \"fwd_lse_ms\": " << r.forwardLseMs << ", \"bwd_ms\": " << r.backwardMs << ", \"bwd_tflops\": "
         << json(bwdTflops);
    os << "}\n";
    std::cout << os.str();
    return kExitOk;
  }
  std::printf("%s  n=%lld queries=%lld d=%lld batch=%lld heads=%lld kv-heads=%lld %s  nnz/head=%lld  on %s (sm_%d%d, "
              "device %d), CUDA events around 10 queued calls, median of %d\n",
              pattern.c_str(), (long long)kvShape[2], (long long)qShape[2], (long long)qShape[3],
              (long long)qShape[0], (long long)qShape[1], (long long)kvShape[1], opts.dtype.c_str(),
              (long long)nnzPerHead, r.deviceName.c_str(), r.major, r.minor, opts.device, opts.repeat);
  std::printf("  %-12s %10s %14s %14s %14s\n", "backend", "ms", "eff TFLOP/s", "call ms", "first run ms");
  auto text = [](double x, int digits) {
    char buffer[32] = "-";
    if (std::isfinite(x))
      std::snprintf(buffer, sizeof buffer, "%.*f", digits, x);
    return std::string(buffer);
  };
  std::printf("  %-12s %10.3f %14s %14.3f %14.2f\n", "cuda", r.forwardMs, text(fwdTflops, 1).c_str(), r.callMs,
              r.firstMs);
  if (opts.backward) {
    std::printf("  backward: forward with lse, then dQ, dK, dV; eff TFLOP/s = 10*nnz*d/time\n");
    std::printf("  %-12s %10s %10s %12s %10s\n", "backend", "fwd+lse ms", "bwd ms", "bwd TFLOP/s", "bwd/fwd");
    std::printf("  %-12s %10.3f %10.3f %12s %10s\n", "cuda", r.forwardLseMs, r.backwardMs, text(bwdTflops, 1).c_str(),
                text(r.forwardMs > 0 ? r.backwardMs / r.forwardMs : NAN, 2).c_str());
  }
  return kExitOk;
}

/// Why a --target cuda run cannot take these options ("" when it can).
std::string cudaConflict(const BenchOptions &opts) {
  if (opts.peak)
    return "--peak measures the CPU's FMA peak; it does not apply to --target cuda";
  if (!opts.varlen.empty())
    return "--varlen: variable-length batches do not run on the GPU yet";
  if (opts.backendsGiven && (opts.backends.size() != 1 || opts.backends[0] != "fused"))
    return "--target cuda runs the fused backend's plan on the GPU; --backend must be fused (or left out)";
  if (opts.threadsGiven)
    return "--threads sets CPU worker threads; it does not apply to --target cuda";
  return "";
}

int runBench(const BenchOptions &opts) {
  if (opts.target == "cuda") {
    if (std::string why = cudaConflict(opts); !why.empty()) {
      std::cerr << "attnc: error: " << why << "\n";
      return kExitUsage;
    }
  } else if (opts.dtype == "f16") {
    std::cerr << "attnc: error: --dtype f16 runs on the GPU only (--target cuda); the CPU kernels take f32 and "
                 "bf16\n";
    return kExitUsage;
  }
  if (!attnc_cpu_isa()) { // ATTNC_FUSED_ISA names CPU kernels this CPU lacks, or none
    std::cerr << "attnc: error: " << attnc_last_error() << "\n";
    return kExitUserError;
  }
  std::optional<Peak> peak;
  if (opts.peak) {
    // First, before kernels and inputs take the caches and the memory.
    peak = measurePeak(support::resolveThreads(opts.threads));
    if (opts.pattern.file.empty())
      return printPeak(*peak, opts.json);
  }
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  const Pattern &p = *lp->pattern;
  if (lp->ir.readsData()) {
    std::cerr << "attnc: error: attnc bench: pattern '" << p.name
              << "' reads data; its pairs change with every call's data: bench/DataPatternBench.cpp (attnc_bench_data in the build's bench/) times such patterns with new data at every call, against the dense baseline\n";
    return kExitUserError;
  }
  int64_t heads = p.headsDeclared ? p.numHeads() : opts.heads;
  if (p.headsDeclared && opts.heads != 8 && opts.heads != heads) {
    std::cerr << "attnc: error: pattern '" << p.name << "' declares " << heads
              << " heads; --heads " << opts.heads << " does not match\n";
    return kExitUsage;
  }
  const int64_t kvHeads = opts.kvHeads ? opts.kvHeads : heads;
  if (heads % kvHeads != 0) {
    std::cerr << "attnc: error: --kv-heads " << kvHeads << " does not divide the " << heads
              << " query heads; query head h reads key/value head h / (heads / kv-heads), so the heads must be "
                 "a multiple of --kv-heads\n";
    return kExitUsage;
  }
  std::vector<int64_t> lengths; // --varlen's sequences; empty for a dense batch
  int64_t n = opts.n;
  if (!opts.varlen.empty()) {
    ATTNC_CHECK(parseLengths(opts.varlen, lengths).empty(), "--varlen was validated when parsed");
    int64_t total = 0;
    for (int64_t l : lengths)
      total += l;
    if (opts.nGiven && opts.n != total) {
      std::cerr << "attnc: error: --n " << opts.n << " is not the sum of the --varlen lengths, " << total
                << "; leave --n out\n";
      return kExitUsage;
    }
    if (opts.batch != 1) {
      std::cerr << "attnc: error: --varlen packs its sequences into one batch element; --batch " << opts.batch
                << " does not apply\n";
      return kExitUsage;
    }
    n = total;
  }
  const int64_t nq = opts.queries ? opts.queries : n;
  if (nq > n) {
    std::cerr << "attnc: error: --queries " << nq << " is more than the " << n
              << " keys of --n; the queries are the last of the key positions, so --queries <= --n\n";
    return kExitUsage;
  }
  const bool fewerQueries = nq < n || opts.queries > 0;
  const std::vector<int64_t> qShape{opts.batch, heads, nq, opts.d}, kvShape{opts.batch, kvHeads, n, opts.d};
  MemoryEstimate estimate = benchEstimate(opts, qShape, kvShape);
  if (int code = checkMemory(estimate, opts.maxMemory); code != kExitOk)
    return code;

  // Useful work: the pairs of the rows computed (the last nq of each head
  // set at n, or every row of every sequence), summed over the heads that
  // run; a --queries run also keeps each set's keys read.
  std::vector<int64_t> setNnz;
  std::vector<IntervalSet> setKeys(lp->ir.heads.size());
  for (size_t k = 0; k < lp->ir.heads.size(); ++k) {
    const ir::SetRef &set = lp->ir.heads[k].set;
    if (!lengths.empty()) {
      std::map<int64_t, int64_t> atLength; // a repeated length is counted once
      int64_t nnz = 0;
      for (int64_t l : lengths)
        if (l > 0) {
          auto [at, fresh] = atLength.try_emplace(l, 0);
          if (fresh)
            at->second = ir::analyzeRows(set, l).nnz;
          nnz += at->second;
        }
      setNnz.push_back(nnz);
    } else if (fewerQueries) {
      setNnz.push_back(countRowPairs(set, n, n - nq, &setKeys[k]));
    } else {
      setNnz.push_back(ir::analyzeRows(set, n).nnz);
    }
  }
  auto setOfHead = [&](int64_t h) {
    size_t set = 0;
    for (size_t k = 0; k < lp->ir.heads.size(); ++k)
      for (int64_t hh : lp->ir.heads[k].heads)
        if (p.headsDeclared && hh == h)
          set = k;
    return set;
  };
  int64_t nnzAllHeads = 0;
  for (int64_t h = 0; h < heads; ++h)
    nnzAllHeads += setNnz[setOfHead(h)];
  double usefulFlops = 4.0 * double(nnzAllHeads) * double(opts.d) * double(opts.batch);
  double backwardFlops = 2.5 * usefulFlops; // 10 * nnz * d * batch * heads
  // The pairs a dense computation of the same rows would take, for the
  // density the header prints.
  double densePairs = double(nq) * double(n);
  if (!lengths.empty()) {
    densePairs = 0;
    for (int64_t l : lengths)
      densePairs += double(l) * double(l);
  }

  // A --queries run's key/value rows: a key/value head reads the keys of
  // every query head of its group, each row d elements of K and of V.
  int64_t distinctKeys = 0, kvBytes = 0;
  double copyMs = 0;
  if (fewerQueries) {
    const int64_t group = heads / kvHeads;
    for (int64_t g = 0; g < kvHeads; ++g) {
      IntervalSet keys, merged;
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        uniteInto(keys, setKeys[setOfHead(h)], merged);
        keys.swap(merged);
      }
      distinctKeys += cardinality(keys);
    }
    kvBytes = distinctKeys * opts.d * (opts.dtype == "bf16" ? 2 : 4) * 2 * opts.batch;
    estimate.addBytes("the memcpy's source and destination", 2 * kvBytes);
    if (int code = checkMemory(estimate, opts.maxMemory); code != kExitOk)
      return code;
  }

  if (opts.target == "cuda")
    return runCudaBench(opts, p.name, {qShape[0], qShape[1], qShape[2], qShape[3]},
                        {kvShape[0], kvShape[1], kvShape[2], kvShape[3]}, nnzAllHeads / heads, usefulFlops,
                        backwardFlops);

  // The fused backend's per-n cost: the symbolic plan is built once per
  // kernel; its row blocks at n are generated once, on every core, as the
  // runtime does on its first run at n (timed here), and kept when they fit
  // the runtime's cache, else generated again inside each run.
  // (The kernel records its rows per block, picked at compile time.)
  const plan::PlanOptions defaults = plan::resolveOptions(lp->ir, {});
  auto t0 = std::chrono::steady_clock::now();
  plan::Plan plan = plan::buildPlan(lp->ir, defaults);
  std::vector<plan::HeadShapes> shapes; // what the runtime builds on the first run at n
  auto t1 = std::chrono::steady_clock::now();
  const double planMs = std::chrono::duration<double, std::milli>(t1 - t0).count();
  // A varlen run prepares each distinct length once.
  std::vector<int64_t> distinctLengths;
  for (int64_t l : lengths.empty() ? std::vector<int64_t>{n} : lengths)
    if (l > 0 && std::find(distinctLengths.begin(), distinctLengths.end(), l) == distinctLengths.end())
      distinctLengths.push_back(l);
  double blocksMs = 0;
  int64_t blockBytes = 0;
  for (int64_t l : distinctLengths) {
    t1 = std::chrono::steady_clock::now();
    // (What the fused backend does at a new n: a grid pattern's tiled layout, then its blocks.)
    const std::optional<plan::Layout> layout = plan::tiledLayout(plan, l, true);
    plan::buildShapes(layout ? layout->plan : plan, l, false, SIZE_MAX, shapes);
    auto t2 = std::chrono::steady_clock::now();
    shapes.clear(); // freeing them is not part of the cost
    blocksMs += std::chrono::duration<double, std::milli>(t2 - t1).count();
    for (const plan::HeadStats &h : plan::planStats(layout ? layout->plan : plan, l))
      for (const plan::PieceStats &st : h.pieces)
        blockBytes += st.bytes;
  }
  if (fewerQueries)
    copyMs = memcpyMs(kvBytes, opts.repeat);

  RandomInputs inputs({qShape[0], qShape[1], qShape[2], qShape[3]}, {kvShape[0], kvShape[1], kvShape[2], kvShape[3]},
                      1, opts.dtype == "bf16" ? ATTNC_DTYPE_BF16 : ATTNC_DTYPE_F32);
  if (!lengths.empty())
    inputs.setVarlen(lengths);
  attnc_run_options ro{0.0f, opts.threads};
  std::optional<BackwardBuffers> grad;
  if (opts.backward)
    grad.emplace(inputs, 2);

  std::vector<const char *> defs;
  for (const std::string &d : opts.pattern.defines)
    defs.push_back(d.c_str());
  std::vector<std::string> backends = opts.backends;
  if (!opts.backendsGiven) {
    // By default, the backends this attnc was built with.
    backends.erase(std::remove_if(backends.begin(), backends.end(),
                                  [](const std::string &b) {
                                    return !compiler::backendUnavailable(*codegen::parseBackend(b)).empty();
                                  }),
                   backends.end());
  }
  const int64_t longest = lengths.empty() ? n : *std::max_element(lengths.begin(), lengths.end());
  if (!opts.backendsGiven && longest > 32768) {
    // The dense baseline computes n^2 pairs per head: minutes at this size.
    backends.erase(std::remove(backends.begin(), backends.end(), "dense"), backends.end());
    std::cerr << "note: the dense baseline is skipped above n = 32768 unless --backend names it\n";
  }
  std::vector<Row> rows;
  for (const std::string &backend : backends) {
    Row row;
    row.backend = backend;
    attnc_jit_options jo{defs.data(), static_cast<int32_t>(defs.size()),
                         opts.pattern.pattern.empty() ? nullptr : opts.pattern.pattern.c_str(),
                         nullptr, 0, backend.c_str()};
    attnc_kernel *kernel = nullptr;
    if (attnc_jit_compile_file(opts.pattern.file.c_str(), &jo, &kernel) != ATTNC_OK) {
      row.error = attnc_last_error();
      rows.push_back(row);
      continue;
    }
    inputs.setFloatInputs(kernel); // (a score modifier's inputs, drawn)
    row.ms = medianRunMs(kernel, inputs, ro, opts.repeat, row.error, &row.firstMs);
    if (grad && row.ms >= 0) {
      StepTimes step;
      attnc_status status = medianStepMs(kernel, inputs, *grad, ro, opts.repeat, step, row.bwdError);
      row.bwdOk = status == ATTNC_OK;
      row.bwdUnsupported = status == ATTNC_ERROR_UNSUPPORTED;
      row.fwdLseMs = step.forwardMs;
      row.bwdMs = step.backwardMs;
      row.bwdGflops = row.bwdOk ? backwardFlops / (row.bwdMs * 1e6) : 0;
    }
    // The tiles the kernel was built with (a tuned shape or schedule).
    plan::PlanOptions tiles;
    if (const char *r = attnc_kernel_metadata(kernel, "tile_rows"))
      tiles.tileRows = std::atoll(r);
    if (const char *c = attnc_kernel_metadata(kernel, "tile_cols"))
      tiles.tileCols = std::atoll(c);
    tuning::TunedTiles tuned; // the runtime runs this d on its tuned shape
    if (const char *t = attnc_kernel_metadata(kernel, "tuned_tiles"); t && tuning::parseTunedTiles(t, tuned))
      for (const auto &[d, shape] : tuned)
        if (d == opts.d)
          tiles = shape;
    attnc_kernel_free(kernel);
    if (row.ms < 0) {
      rows.push_back(row);
      continue;
    }
    row.gflops = usefulFlops / (row.ms * 1e6);
    // A varlen batch runs each sequence at its own length: the work adds up.
    // With fewer queries than keys, whether a backend computes those rows
    // alone or the whole square is the runtime's choice per call.
    row.wasteKnown = !fewerQueries;
    const bool planned = backend == "fused" || backend == "halide";
    if (row.wasteKnown && (planned || backend == "dense")) {
      const plan::Plan tiled = planned ? plan::buildPlan(lp->ir, tiles) : plan::Plan{};
      double useful = 0, executed = 0;
      for (int64_t l : lengths.empty() ? std::vector<int64_t>{n} : lengths) {
        if (l <= 0)
          continue;
        // The fused backend runs a grid pattern in its tiled layout (the same pairs).
        const std::optional<plan::Layout> layout =
            backend == "fused" ? plan::tiledLayout(tiled, l, true) : std::optional<plan::Layout>{};
        for (const plan::HeadStats &h : layout    ? plan::planStats(layout->plan, l)
                                        : planned ? plan::planStats(tiled, l)
                                                  : plan::denseStats(plan, l)) {
          useful += double(h.useful);
          executed += double(h.executed);
        }
      }
      row.waste = useful > 0 ? executed / useful : 1.0;
    }
    row.ok = true;
    rows.push_back(row);
  }

  double fusedMs = 0;
  for (const Row &r : rows)
    if (r.ok && r.backend == "fused")
      fusedMs = r.ms;
  if (opts.json) {
    std::ostringstream os;
    os << "{\"pattern\": " << jsonString(p.name) << ", \"dtype\": " << jsonString(opts.dtype)
       << ", \"n\": " << n << ", \"d\": " << opts.d
       << ", \"batch\": " << opts.batch << ", \"heads\": " << heads << ", \"nnz_per_head\": "
       << nnzAllHeads / heads << ", \"plan_build_ms\": " << planMs
       << ", \"block_generation_ms\": " << blocksMs << ", \"block_bytes\": " << blockBytes;
    // The shapes' keys appear only with the options that make them.
    if (opts.kvHeads)
      os << ", \"kv_heads\": " << kvHeads;
    if (!lengths.empty()) {
      os << ", \"varlen\": [";
      for (size_t k = 0; k < lengths.size(); ++k)
        os << (k ? ", " : "") << lengths[k];
      os << "]";
    }
    if (fewerQueries)
      os << ", \"queries\": " << nq << ", \"distinct_keys\": " << distinctKeys << ", \"kv_bytes\": " << kvBytes
         << ", \"memcpy_ms\": " << copyMs;
    if (peak)
      os << ", \"cpu_isa\": " << jsonString(attnc_cpu_isa()) << ", \"peak_gflops\": " << peak->gflops << ", \"peak_isa\": " << jsonString(peak->isa)
         << ", \"peak_threads\": " << peak->threads;
    os << ", \"results\": [";
    for (size_t k = 0; k < rows.size(); ++k) {
      const Row &r = rows[k];
      os << (k ? ", " : "") << "{\"backend\": " << jsonString(r.backend);
      if (!r.ok) {
        os << ", \"error\": " << jsonString(r.error) << "}";
        continue;
      }
      os << ", \"ms\": " << r.ms << ", \"gflops\": " << r.gflops;
      if (r.wasteKnown)
        os << ", \"executed_over_useful\": " << r.waste;
      os << ", \"first_run_ms\": " << r.firstMs;
      if (fewerQueries)
        os << ", \"over_memcpy\": " << (copyMs > 0 ? r.ms / copyMs : 0.0);
      if (peak)
        os << ", \"fwd_share\": " << r.gflops / peak->gflops;
      if (opts.backward && r.bwdOk) {
        os << ", \"fwd_lse_ms\": " << r.fwdLseMs << ", \"bwd_ms\": " << r.bwdMs << ", \"bwd_gflops\": " << r.bwdGflops
           << ", \"bwd_over_fwd\": " << r.bwdMs / r.ms;
        if (peak)
          os << ", \"bwd_share\": " << r.bwdGflops / peak->gflops;
      } else if (opts.backward) {
        os << ", \"bwd_error\": " << jsonString(r.bwdError) << (r.bwdUnsupported ? ", \"bwd_unsupported\": true" : "");
      }
      os << "}";
    }
    os << "]}\n";
    std::cout << os.str();
    return kExitOk;
  }
  std::string shapeLine = "n=" + std::to_string(n);
  if (!lengths.empty())
    shapeLine += " (" + std::to_string(lengths.size()) + " sequences)";
  if (fewerQueries)
    shapeLine += " queries=" + std::to_string(nq);
  shapeLine += " d=" + std::to_string(opts.d) + " batch=" + std::to_string(opts.batch) +
               " heads=" + std::to_string(heads);
  if (opts.kvHeads)
    shapeLine += " kv-heads=" + std::to_string(kvHeads);
  const char *square = !lengths.empty() ? "sum of lengths^2" : fewerQueries ? "queries*n" : "n^2";
  std::printf("%s  %s %s  nnz/head=%lld (%.2f%% of %s)  median of %d\n", p.name.c_str(), shapeLine.c_str(),
              opts.dtype.c_str(), (long long)(nnzAllHeads / heads),
              100.0 * double(nnzAllHeads / heads) / densePairs, square, opts.repeat);
  std::printf("  fused plan: built in %.3f ms; its row blocks at %s: %.2f ms to generate, "
              "%.1f MB; CPU kernels: %s\n",
              planMs, lengths.empty() ? "this n" : "these lengths", blocksMs, double(blockBytes) / 1e6,
              attnc_cpu_isa());
  if (fewerQueries)
    std::printf("  key/value rows the queries name: %lld per key/value head on average, %.2f MB of K and V; a "
                "memcpy of as many bytes: %.3f ms\n",
                (long long)(distinctKeys / kvHeads), double(kvBytes) / 1e6, copyMs);
  if (peak)
    std::printf("  peak: %s\n", peakText(*peak).c_str());
  std::printf("  %-12s %10s %12s %16s %12s %14s%s%s\n", "backend", "ms", "eff GFLOP/s", "executed/useful",
              "time/fused", "first run ms", peak ? "   % peak" : "", fewerQueries ? "  time/memcpy" : "");
  for (const Row &r : rows) {
    if (!r.ok) {
      std::printf("  %-12s failed: %s\n", r.backend.c_str(), r.error.c_str());
      continue;
    }
    std::printf("  %-12s %10.2f %12.1f", r.backend.c_str(), r.ms, r.gflops);
    if (r.wasteKnown)
      std::printf(" %16.2f", r.waste);
    else
      std::printf(" %16s", "-");
    std::printf(" %12.2f %14.2f", fusedMs > 0 ? r.ms / fusedMs : 0.0, r.firstMs);
    if (peak)
      std::printf(" %8.1f", 100.0 * r.gflops / peak->gflops);
    if (fewerQueries) // no keys named: nothing to copy, no ratio
      std::printf(" %12.2f", copyMs > 0 ? r.ms / copyMs : 0.0);
    std::printf("\n");
  }
  if (!opts.backward)
    return kExitOk;
  std::printf("  backward: forward with lse, then dQ, dK, dV; eff GFLOP/s = 10*nnz*d/time; median of %d\n",
              opts.repeat);
  std::printf("  %-12s %10s %10s %12s %10s%s\n", "backend", "fwd+lse ms", "bwd ms", "bwd GFLOP/s", "bwd/fwd",
              peak ? "   % peak" : "");
  for (const Row &r : rows) {
    if (!r.ok)
      continue;
    if (r.bwdUnsupported)
      std::printf("  %-12s n/a (forward only)\n", r.backend.c_str());
    else if (!r.bwdOk)
      std::printf("  %-12s failed: %s\n", r.backend.c_str(), r.bwdError.c_str());
    else {
      std::printf("  %-12s %10.2f %10.2f %12.1f %10.2f", r.backend.c_str(), r.fwdLseMs, r.bwdMs, r.bwdGflops,
                  r.bwdMs / r.ms);
      if (peak)
        std::printf(" %8.1f", 100.0 * r.bwdGflops / peak->gflops);
      std::printf("\n");
    }
  }
  return kExitOk;
}
} // namespace

void setupBench(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<BenchOptions>();
  CLI::App *cmd = app.add_subcommand(
      "bench", "Time backends side by side on random inputs: median ms, effective GFLOP/s "
               "(4*nnz*d/time) and executed/useful work");
  addPatternOptions(*cmd, opts->pattern);
  // FILE and --n are required unless --peak asks for the peak alone (checked in the callback).
  cmd->get_option("file")->required(false)->description("The pattern file (.attn); only --peak runs without one");
  CLI::Option *nOption =
      cmd->add_option("--n", opts->n, "Sequence length: the keys' (required with a pattern file, unless --varlen)")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--d", opts->d, "Head dimension")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--batch", opts->batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--heads", opts->heads,
                  "Heads (a pattern that declares its heads uses its own count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--kv-heads", opts->kvHeads,
                  "Key/value heads (default: --heads, which must be a multiple of it): grouped-query attention, "
                  "query head h reading key/value head h / (heads / kv-heads)")
      ->type_name("HKV")
      ->check(CLI::PositiveNumber);
  CLI::Option *queriesOption =
      cmd->add_option("--queries", opts->queries,
                      "Query rows (default: --n): the last NQ positions of the --n keys (1: a decoding step); also "
                      "reports the bytes of the key/value rows they name and a memcpy of as many")
          ->type_name("NQ")
          ->check(CLI::PositiveNumber);
  cmd->add_option("--varlen", opts->varlen,
                  "A variable-length batch: sequences of these lengths packed along n (batch 1), each attending "
                  "within itself; --n is their sum (leave it out)")
      ->type_name("L1,L2,...")
      ->check(CLI::Validator(
          [](std::string &spec) {
            std::vector<int64_t> lengths;
            return parseLengths(spec, lengths);
          },
          ""))
      ->excludes(queriesOption);
  addMaxMemoryOption(*cmd, opts->maxMemory);
  CLI::Option *backendOption =
      cmd->add_option("--backend", opts->backends,
                      "Backends to compare: fused, halide, sparsifier, dense (by default those "
                      "built into this attnc; dense is skipped above n = 32768 unless named here)")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::IsMember(codegen::backendNames()));
  CLI::Option *dtypeOption =
      cmd->add_option("--dtype", opts->dtype,
                      "Element type of Q, K, V and O: f32, or bf16 (computed and accumulated in f32, the output "
                      "rounded to nearest even); with --target cuda also f16, and bf16 is the default there")
          ->capture_default_str()
          ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  CLI::Option *threadsOption = cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  addTargetOptions(*cmd, opts->target, opts->device,
                  "cpu (the backends on this machine's cores) or cuda (the fused plan's tensor-core kernels on an "
                  "NVIDIA GPU of compute capability 8.0 or newer, timed with CUDA events; --backward too, not "
                  "--varlen; without a GPU or driver attnc says why and exits 1)");
  cmd->add_option("--repeat", opts->repeat, "Timed runs per backend (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", opts->json, "Print one JSON object");
  cmd->add_flag("--backward", opts->backward,
                "Also time a training step: forward with the log-sum-exp, then dQ, dK, dV (eff GFLOP/s = "
                "10*nnz*d/time); backends without a backward say n/a");
  cmd->add_flag("--peak", opts->peak,
                "Measure this machine's FMA peak on --threads threads in the instruction set the CPU kernels run "
                "(AVX-512, AVX2+FMA or 128-bit vectors: ATTNC_FUSED_ISA=avx512|avx2|portable forces one) and give "
                "each GFLOP/s as a share of it; without a pattern file, print the peak alone");
  cmd->footer(examplesFooter(
      {"attnc bench patterns/fixed.attn --n 16384 --d 64",
       "ATTNC_FUSED_ISA=avx2 attnc bench patterns/local.attn --n 16384 --threads 2 --peak --backend fused",
       "attnc bench patterns/strided.attn --n 4096 --backend fused,dense --json",
       "attnc bench patterns/fixed.attn --n 4096 --d 64 --backward --peak", "attnc bench --peak --threads 2",
       "attnc bench patterns/fixed.attn --n 16384 --d 128 --heads 32 --kv-heads 8 --backend fused",
       "attnc bench patterns/fixed.attn --n 32768 --queries 1 --d 64 --backend fused",
       "attnc bench patterns/local.attn --varlen 512,4096,1024,2560 --d 64 --backend fused",
       "attnc bench patterns/fixed.attn --n 16384 --d 64 --target cuda --backward"}));
  cmd->callback([opts, backendOption, nOption, dtypeOption, threadsOption, &exitCode] {
    if (opts->pattern.file.empty() && !opts->peak)
      throw CLI::RequiredError("file");
    opts->nGiven = nOption->count() > 0;
    if (!opts->pattern.file.empty() && !opts->nGiven && opts->varlen.empty())
      throw CLI::RequiredError("--n");
    opts->backendsGiven = backendOption->count() > 0;
    opts->dtypeGiven = dtypeOption->count() > 0;
    opts->threadsGiven = threadsOption->count() > 0;
    if (opts->target == "cuda" && !opts->dtypeGiven)
      opts->dtype = "bf16";
    try {
      exitCode = runBench(*opts);
    } catch (const std::bad_alloc &) {
      // The estimate fitted, but the memory went elsewhere meanwhile.
      std::cerr << "attnc: error: out of memory while allocating the benchmark's arrays; give a smaller shape\n";
      exitCode = kExitUserError;
    }
  });
}

} // namespace attnc::tool
