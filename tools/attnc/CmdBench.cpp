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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>

namespace attnc::tool {

namespace {
struct BenchOptions {
  PatternOptions pattern;
  int64_t n = 0, d = 64, batch = 1, heads = 8;
  std::vector<std::string> backends = {"fused", "halide", "sparsifier", "dense"};
  int threads = 0;
  int repeat = 5;
  std::string dtype = "f32";
  bool json = false;
  bool backward = false;
  bool peak = false;
  bool backendsGiven = false;
};

struct Row {
  std::string backend;
  double ms = 0, gflops = 0, waste = 1;
  double firstMs = 0; ///< the first run at this n: it also builds the per-n structure
  bool ok = false;
  std::string error;
  // --backward: a training step's medians (when bwdOk), else why it did not run.
  double fwdLseMs = 0, bwdMs = 0, bwdGflops = 0;
  bool bwdOk = false, bwdUnsupported = false;
  std::string bwdError;
};

/// "290.0 GFLOP/s (avx512f FMA loops, 16 lanes, 2 threads)".
std::string peakText(const Peak &peak) {
  char text[128];
  std::snprintf(text, sizeof text, "%.1f GFLOP/s (%s FMA loops, %d lanes, %d thread%s)", peak.gflops,
                peak.isa.c_str(), peak.lanes, peak.threads, peak.threads == 1 ? "" : "s");
  return text;
}

/// --peak without a pattern file: the peak alone.
int printPeak(const Peak &peak, bool json) {
  if (json)
    std::printf("{\"peak_gflops\": %.1f, \"peak_isa\": %s, \"peak_threads\": %d}\n", peak.gflops,
                jsonString(peak.isa).c_str(), peak.threads);
  else
    std::printf("peak: %s\n", peakText(peak).c_str());
  return kExitOk;
}

int runBench(const BenchOptions &opts) {
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
  int64_t heads = p.headsDeclared ? p.numHeads() : opts.heads;
  if (p.headsDeclared && opts.heads != 8 && opts.heads != heads) {
    std::cerr << "attnc: error: pattern '" << p.name << "' declares " << heads
              << " heads; --heads " << opts.heads << " does not match\n";
    return kExitUsage;
  }
  // Useful work: nnz per head, summed over the heads that run.
  std::vector<int64_t> setNnz;
  for (const auto &h : lp->ir.heads)
    setNnz.push_back(ir::analyzeRows(h.set, opts.n).nnz);
  int64_t nnzAllHeads = 0;
  for (int64_t h = 0; h < heads; ++h) {
    size_t set = 0;
    for (size_t k = 0; k < lp->ir.heads.size(); ++k)
      for (int64_t hh : lp->ir.heads[k].heads)
        if (p.headsDeclared && hh == h)
          set = k;
    nnzAllHeads += setNnz[set];
  }
  double usefulFlops = 4.0 * double(nnzAllHeads) * double(opts.d) * double(opts.batch);
  double backwardFlops = 2.5 * usefulFlops; // 10 * nnz * d * batch * heads

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
  plan::buildShapes(plan, opts.n, false, SIZE_MAX, shapes);
  auto t2 = std::chrono::steady_clock::now();
  shapes.clear(); // freeing them is not part of the cost
  const double planMs = std::chrono::duration<double, std::milli>(t1 - t0).count();
  const double blocksMs = std::chrono::duration<double, std::milli>(t2 - t1).count();
  const std::vector<plan::HeadStats> fusedStats = plan::planStats(plan, opts.n);
  int64_t blockBytes = 0;
  for (const plan::HeadStats &h : fusedStats)
    for (const plan::PieceStats &st : h.pieces)
      blockBytes += st.bytes;

  RandomInputs inputs(opts.batch, heads, opts.n, opts.d, 1,
                      opts.dtype == "bf16" ? ATTNC_DTYPE_BF16 : ATTNC_DTYPE_F32);
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
  if (!opts.backendsGiven && opts.n > 32768) {
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
    if (backend == "fused" || backend == "halide")
      row.waste = plan::executedOverUseful(plan::planStats(plan::buildPlan(lp->ir, tiles), opts.n));
    else if (backend == "dense")
      row.waste = plan::executedOverUseful(plan::denseStats(plan, opts.n));
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
       << ", \"n\": " << opts.n << ", \"d\": " << opts.d
       << ", \"batch\": " << opts.batch << ", \"heads\": " << heads << ", \"nnz_per_head\": "
       << nnzAllHeads / heads << ", \"plan_build_ms\": " << planMs
       << ", \"block_generation_ms\": " << blocksMs << ", \"block_bytes\": " << blockBytes;
    if (peak)
      os << ", \"peak_gflops\": " << peak->gflops << ", \"peak_isa\": " << jsonString(peak->isa)
         << ", \"peak_threads\": " << peak->threads;
    os << ", \"results\": [";
    for (size_t k = 0; k < rows.size(); ++k) {
      const Row &r = rows[k];
      os << (k ? ", " : "") << "{\"backend\": " << jsonString(r.backend);
      if (!r.ok) {
        os << ", \"error\": " << jsonString(r.error) << "}";
        continue;
      }
      os << ", \"ms\": " << r.ms << ", \"gflops\": " << r.gflops << ", \"executed_over_useful\": " << r.waste
         << ", \"first_run_ms\": " << r.firstMs;
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
  std::printf("%s  n=%lld d=%lld batch=%lld heads=%lld %s  nnz/head=%lld (%.2f%% of n^2)  median of %d\n",
              p.name.c_str(), (long long)opts.n, (long long)opts.d, (long long)opts.batch,
              (long long)heads, opts.dtype.c_str(), (long long)(nnzAllHeads / heads),
              100.0 * double(nnzAllHeads / heads) / (double(opts.n) * double(opts.n)), opts.repeat);
  std::printf("  fused plan: built in %.3f ms; its row blocks at this n: %.2f ms to generate, "
              "%.1f MB\n",
              planMs, blocksMs, double(blockBytes) / 1e6);
  if (peak)
    std::printf("  peak: %s\n", peakText(*peak).c_str());
  std::printf("  %-12s %10s %12s %16s %12s %14s%s\n", "backend", "ms", "eff GFLOP/s", "executed/useful",
              "time/fused", "first run ms", peak ? "   % peak" : "");
  for (const Row &r : rows) {
    if (!r.ok) {
      std::printf("  %-12s failed: %s\n", r.backend.c_str(), r.error.c_str());
      continue;
    }
    std::printf("  %-12s %10.2f %12.1f %16.2f %12.2f %14.2f", r.backend.c_str(), r.ms, r.gflops, r.waste,
                fusedMs > 0 ? r.ms / fusedMs : 0.0, r.firstMs);
    if (peak)
      std::printf(" %8.1f", 100.0 * r.gflops / peak->gflops);
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
  CLI::Option *nOption = cmd->add_option("--n", opts->n, "Sequence length (required with a pattern file)")
                             ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--d", opts->d, "Head dimension")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--batch", opts->batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--heads", opts->heads,
                  "Heads (a pattern that declares its heads uses its own count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI::Option *backendOption =
      cmd->add_option("--backend", opts->backends,
                      "Backends to compare: fused, halide, sparsifier, dense (by default those "
                      "built into this attnc; dense is skipped above n = 32768 unless named here)")
          ->delimiter(',')
          ->capture_default_str()
          ->check(CLI::IsMember(codegen::backendNames()));
  cmd->add_option("--dtype", opts->dtype,
                  "Element type of Q, K, V and O: f32, or bf16 (computed and accumulated in f32, "
                  "the output rounded to nearest even)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  cmd->add_option("--repeat", opts->repeat, "Timed runs per backend (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_flag("--json", opts->json, "Print one JSON object");
  cmd->add_flag("--backward", opts->backward,
                "Also time a training step: forward with the log-sum-exp, then dQ, dK, dV (eff GFLOP/s = "
                "10*nnz*d/time); backends without a backward say n/a");
  cmd->add_flag("--peak", opts->peak,
                "Measure this machine's FMA peak on --threads threads (AVX-512, else AVX2+FMA) and give each "
                "GFLOP/s as a share of it; without a pattern file, print the peak alone");
  cmd->footer(examplesFooter({"attnc bench patterns/fixed.attn --n 16384 --d 64",
                              "attnc bench patterns/strided.attn --n 4096 --backend fused,dense --json",
                              "attnc bench patterns/fixed.attn --n 4096 --d 64 --backward --peak",
                              "attnc bench --peak --threads 2"}));
  cmd->callback([opts, backendOption, nOption, &exitCode] {
    if (opts->pattern.file.empty() && !opts->peak)
      throw CLI::RequiredError("file");
    if (!opts->pattern.file.empty() && nOption->count() == 0)
      throw CLI::RequiredError("--n");
    opts->backendsGiven = backendOption->count() > 0;
    exitCode = runBench(*opts);
  });
}

} // namespace attnc::tool
