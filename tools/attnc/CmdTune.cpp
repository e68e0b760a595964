//===- CmdTune.cpp - attnc tune: measure tile shapes, keep the best -------===//
//
// Candidates are the fused plan's tile shapes (rows x keys), or with
// --backend halide the Halide schedule template's parameters (rows per
// block, key chunk, register tiles). One pass over each one's blocks at the
// requested n gives its exact tile counts; a cost model (pairs computed,
// tiles, blocks) ranks them and the best few are measured on this machine,
// always together with the default, in interleaved rounds. The fastest
// measured one is recorded in the tuning database, where compile and the JIT
// find it, unless it is within 2% of the default (then the default is).
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "CudaBench.h"
#include "Measure.h"

#include "attnc/attnc.h"
#include "attnc/runtime/Internal.h"
#include "attnc/analysis/Analysis.h"
#include "attnc/codegen/HalideGen.h"
#include "attnc/compiler/Compile.h"
#include "attnc/plan/Plan.h"
#include "attnc/tuning/Tuning.h"
#include "attnc/format/KernelFile.h"
#include "attnc/support/Files.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <unistd.h>

namespace attnc::tool {

namespace {
struct TuneOptions {
  PatternOptions pattern;
  int64_t n = 0, d = 64, batch = 1, heads = 8;
  int threads = 0;
  int measure = 3;
  int repeat = 3;
  std::string backend = "fused";
  std::string target = "cpu";
  int device = 0;
  bool threadsGiven = false, backendGiven = false;
};

struct Candidate {
  plan::PlanOptions options;
  halide::Schedule schedule; ///< --backend halide
  std::string label;
  bool isDefault = false;
  double model = 0;
  double ms = 0;
  bool measured = false;
};

std::vector<Candidate> fusedCandidates(const ir::PatternIR &ir, const TuneOptions &opts) {
  std::vector<Candidate> candidates;
  const plan::PlanOptions defaults = plan::resolveOptions(ir, {});
  for (int64_t rows : {16, 32, 64})
    for (int64_t cols : {16, 24, 32, 48, 64, 128}) {
      Candidate c;
      c.options.tileRows = rows;
      c.options.tileCols = cols;
      c.label = "tiles " + std::to_string(rows) + "x" + std::to_string(cols);
      c.isDefault = rows == defaults.tileRows && cols == defaults.tileCols;
      plan::Plan plan = plan::buildPlan(ir, c.options);
      // Model, in vector-lane operations: a block fills 1, 2 or 4 vectors of
      // 16 row lanes (up to 16, 32 or 64 rows), so a tile costs lanes x keys
      // x d for Q K^T and as much for P V (one vector of rows leaves Q K^T
      // bound by its key broadcasts: ~1.3x; four load fewer Q^T vectors per
      // key), plus its softmax update; a row block costs its Q transposes.
      const int vectors = rows <= 16 ? 1 : rows <= 32 ? 2 : 4;
      const double lanes = 16.0 * vectors;
      const double perLane = vectors == 1 ? 1.3 : vectors == 2 ? 1.0 : 0.95;
      for (const plan::HeadStats &h : plan::planStats(plan, opts.n))
        for (const plan::PieceStats &st : h.pieces)
          c.model += 2.0 * lanes * perLane * double(st.executed) / double(rows) * double(opts.d) +
                     lanes * 40.0 * double(st.tiles) + double(st.blocks) * 2.0 * double(opts.d) * lanes;
      candidates.push_back(c);
    }
  return candidates;
}

std::vector<Candidate> halideCandidates(const ir::PatternIR &ir, const TuneOptions &opts) {
  // Register tiles that fill the 32 AVX-512 registers: (row vectors x keys)
  // score accumulators, and P V tiles of 4 or 6 rows.
  const std::vector<halide::Schedule> shapes = {
      {64, 24, 4, 6, 6}, {64, 16, 4, 4, 4}, {64, 32, 4, 4, 6}, {64, 24, 2, 12, 6}, {32, 16, 2, 8, 4},
      {32, 24, 2, 12, 6}, {32, 32, 2, 8, 6}, {32, 24, 2, 8, 4}, {16, 16, 1, 16, 4}, {16, 32, 1, 16, 6}};
  const halide::Schedule defaults;
  std::vector<Candidate> candidates;
  for (const halide::Schedule &s : shapes) {
    Candidate c;
    c.schedule = s;
    c.options.tileRows = s.rows;
    c.options.tileCols = s.keyChunk;
    c.label = "schedule " + halide::scheduleName(s);
    c.isDefault = halide::scheduleName(s) == halide::scheduleName(defaults);
    // Model: pairs computed (padded blocks), slower per pair with fewer row
    // vectors per score tile (each key's broadcast serves fewer rows), plus
    // a per-block cost (its scratch, Q and the row statistics).
    const double perPair = s.scoreRowVectors >= 4 ? 1.0 : s.scoreRowVectors == 2 ? 1.08 : 1.3;
    for (const plan::HeadStats &h : plan::planStats(plan::buildPlan(ir, c.options), opts.n))
      for (const plan::PieceStats &st : h.pieces)
        c.model += perPair * double(st.executed) * double(opts.d) * 4.0 +
                   double(st.blocks) * double(s.rows) * double(opts.d) * 8.0;
    candidates.push_back(c);
  }
  return candidates;
}

/// attnc tune --target cuda: the GPU forward kernel's variants (bf16; d <=
/// 64: 0-3, and on compute capability 9.0 the wgmma ones, 4 up to d = 128
/// and 5 up to d = 64) timed with CUDA events on one GPU; the fastest is
/// recorded for that GPU (tuning::gpuId) unless the default is within the
/// margin.
int runCudaTune(const TuneOptions &opts, const LoadedPattern &lp, int64_t heads, double flops) {
  char name[256] = {};
  int32_t major = 0, minor = 0;
  if (attnc_internal_cuda_device(static_cast<int32_t>(opts.device), name, sizeof name, &major, &minor) != ATTNC_OK) {
    std::cerr << "attnc: error: --target cuda: " << attnc_last_error() << "\n";
    return kExitUserError;
  }
  std::vector<int> variants;
  for (int v = 0; v <= 3 && (v == 0 || opts.d <= 64); ++v)
    variants.push_back(v);
  if (major == 9 && minor == 0) { // wgmma: sm_90a code
    variants.push_back(4);
    if (opts.d <= 64)
      variants.push_back(5);
  }
  if (variants.size() == 1) {
    std::cerr << "attnc: error: --target cuda: at d = " << opts.d << " the GPU kernels have variants to choose from "
              << "on compute capability 9.0 only (the wgmma kernel); " << name << " is " << major << "." << minor
              << ": nothing to tune\n";
    return kExitUserError;
  }
  attnc_kernel *kernel = jitFused(opts.pattern);
  if (!kernel)
    return kExitUserError;
  CudaBenchRequest request;
  request.kernel = kernel;
  request.qShape = request.kvShape = {opts.batch, heads, opts.n, opts.d};
  request.dtype = ATTNC_DTYPE_BF16;
  request.device = opts.device;
  request.repeat = opts.repeat;
  // Variant 0 is the default; each is measured after its own warm-up.
  static const char *const kLabels[6] = {"default (4 warps of 16 rows)", "variant 1 (more registers)",
                                         "variant 2 (no warp skipping)", "variant 3 (2 warps of 32 rows)",
                                         "variant 4 (wgmma, one warpgroup)", "variant 5 (wgmma, 3 tiles in flight)"};
  double ms[6] = {};
  CudaBenchResult r;
  for (size_t i = 0; i < variants.size(); ++i) {
    const int v = variants[i];
    std::string error;
    attnc_status status = attnc_internal_cuda_forward_variant(v);
    if (status == ATTNC_OK)
      status = cudaBench(request, r, error);
    else
      error = attnc_last_error();
    if (status != ATTNC_OK) {
      attnc_internal_cuda_forward_variant(-1);
      attnc_kernel_free(kernel);
      std::cerr << "attnc: error: --target cuda: " << error << "\n";
      return kExitUserError;
    }
    ms[v] = r.forwardMs;
    std::fprintf(stderr, "[%zu/%zu] timed %s\n", i + 1, variants.size(), kLabels[v]);
  }
  attnc_internal_cuda_forward_variant(-1);
  attnc_kernel_free(kernel);
  constexpr double kMargin = 0.02;
  int best = 0;
  for (const int v : variants) {
    std::printf("%-34s %8.3f ms  %7.1f TFLOP/s\n", kLabels[v], ms[v], flops / (ms[v] * 1e9));
    if (ms[v] < ms[best])
      best = v;
  }
  const bool keptDefault = best != 0 && ms[best] > ms[0] * (1.0 - kMargin);
  if (keptDefault)
    best = 0;
  tuning::Entry entry;
  entry.key = tuning::tuningKey(lp.frontend->sourceText(), *lp.pattern, "cuda");
  entry.d = opts.d;
  entry.options.tileRows = entry.options.tileCols = 64; // (the GPU kernels' tiles)
  entry.gflops = flops / (ms[best] * 1e6);
  entry.backend = "cuda";
  entry.gpu = tuning::gpuId(r.deviceName, r.major, r.minor);
  entry.dtype = "bf16";
  entry.variant = best;
  std::string error;
  if (!tuning::record(tuning::databasePath(), entry, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  std::printf("best on %s: %s, %.3f ms, %.1f TFLOP/s%s\n", r.deviceName.c_str(), kLabels[best], ms[best],
              flops / (ms[best] * 1e9),
              keptDefault ? " (no variant was 2% faster than the default)" : "");
  std::printf("recorded in %s for %s; attnc compile and the JIT put it in the kernel (metadata cuda_tuned) and "
              "the runtime runs it on that GPU at d = %lld\n",
              tuning::databasePath().c_str(), entry.gpu.c_str(), static_cast<long long>(opts.d));
  return kExitOk;
}

int runTune(const TuneOptions &opts) {
  if (opts.target == "cuda") {
    std::string why;
    if (opts.backendGiven && opts.backend != "fused")
      why = "--target cuda tunes the fused plan's GPU kernels; --backend must be fused (or left out)";
    else if (opts.threadsGiven)
      why = "--threads sets CPU worker threads; it does not apply to --target cuda";
    else if (opts.d > 128)
      why = "the GPU kernels have variants to choose from for bf16 at d <= 128 only; at d = " +
            std::to_string(opts.d) + " there is one kernel and nothing to tune";
    if (!why.empty()) {
      std::cerr << "attnc: error: " << why << "\n";
      return kExitUsage;
    }
  }
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  const Pattern &p = *lp->pattern;
  if (lp->ir.readsData()) {
    std::cerr << "attnc: error: attnc tune: pattern '" << p.name
              << "' reads data; its tiles are planned from each call's data; attnc tune does not search them yet (the fused backend's defaults run it: bench/DataPatternBench.cpp times them)\n";
    return kExitUserError;
  }
  const int64_t heads = p.headsDeclared ? p.numHeads() : opts.heads;
  // The useful work of one forward call: every head's pairs.
  int64_t nnz = 0;
  for (const auto &h : lp->ir.heads)
    nnz += ir::analyzeRows(h.set, opts.n).nnz * static_cast<int64_t>(p.headsDeclared ? h.heads.size() : heads);
  const double flops = 4.0 * double(nnz) * double(opts.d) * double(opts.batch);
  if (opts.target == "cuda")
    return runCudaTune(opts, *lp, heads, flops);

  const bool useHalide = opts.backend == "halide";
  std::vector<Candidate> candidates = useHalide ? halideCandidates(lp->ir, opts) : fusedCandidates(lp->ir, opts);
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate &a, const Candidate &b) { return a.model < b.model; });
  for (size_t k = 0; k < candidates.size(); ++k)
    candidates[k].measured = static_cast<int>(k) < opts.measure || candidates[k].isDefault;

  RandomInputs inputs(opts.batch, heads, opts.n, opts.d, 3);
  attnc_run_options ro{0.0f, opts.threads};

  // Build and warm every measured candidate, then time them in rounds, one
  // run of each per round (in a rotating order), so that the machine's drift
  // over the minutes of a tuning run reaches every candidate alike.
  std::vector<Candidate *> measured;
  for (Candidate &c : candidates)
    if (c.measured)
      measured.push_back(&c);
  const int total = static_cast<int>(measured.size());
  std::vector<attnc_kernel *> kernels;
  auto freeKernels = [&] {
    for (attnc_kernel *k : kernels)
      attnc_kernel_free(k);
  };
  std::string tmp = "/tmp/attnc-tune-" + std::to_string(getpid()) + ".attnk";
  for (Candidate *c : measured) {
    codegen::CodeGenOptions cg;
    cg.backend = useHalide ? codegen::Backend::Halide : codegen::Backend::Fused;
    cg.planOptions = c->options;
    cg.halideSchedule = c->schedule;
    std::string bytes, error;
    attnc_kernel *kernel = nullptr;
    if (!codegen::buildKernelFile(*lp->frontend, p, cg, bytes, error) ||
        !support::writeFileAtomically(tmp, bytes, error) || attnc_kernel_load(tmp.c_str(), &kernel) != ATTNC_OK) {
      std::cerr << "attnc: internal error: cannot build a candidate: " << error << attnc_last_error() << "\n";
      unlink(tmp.c_str());
      freeKernels();
      return kExitInternal;
    }
    unlink(tmp.c_str());
    kernels.push_back(kernel);
    if (kernels.size() == 1)
      inputs.setFloatInputs(kernel); // (a score modifier's inputs, drawn: the same for every candidate)
    // The first run at n builds the plan's blocks (or Halide's key lists).
    if (medianRunMs(kernel, inputs, ro, 0, error) < 0) {
      std::cerr << "attnc: error: " << error << "\n";
      freeKernels();
      return kExitUserError;
    }
    std::fprintf(stderr, "[%d/%d] built and warmed %s\n", static_cast<int>(kernels.size()), total,
                 c->label.c_str());
  }
  std::vector<std::vector<double>> times(measured.size());
  for (int round = 0; round < opts.repeat; ++round) {
    for (size_t k = 0; k < measured.size(); ++k) {
      const size_t at = (k + static_cast<size_t>(round)) % measured.size();
      times[at].push_back(timeOneRunMs(kernels[at], inputs, ro));
    }
    std::fprintf(stderr, "round %d/%d timed\n", round + 1, opts.repeat);
  }
  freeKernels();
  for (size_t k = 0; k < measured.size(); ++k) {
    std::sort(times[k].begin(), times[k].end());
    measured[k]->ms = times[k][times[k].size() / 2];
    std::printf("%-34s %8.2f ms  %7.1f GFLOP/s\n", measured[k]->label.c_str(), measured[k]->ms,
                 flops / (measured[k]->ms * 1e6));
  }
  // The default stays unless a candidate beats it by more than the spread
  // of repeated runs on a quiet machine.
  constexpr double kMargin = 0.02;
  const Candidate *best = nullptr, *def = nullptr;
  for (const Candidate *c : measured) {
    if (!best || c->ms < best->ms)
      best = c;
    if (c->isDefault)
      def = c;
  }
  const bool keptDefault = best != def && best->ms > def->ms * (1.0 - kMargin);
  if (keptDefault)
    best = def;
  tuning::Entry entry;
  entry.key = tuning::tuningKey(lp->frontend->sourceText(), p,
                                codegen::hostTarget() + codegen::hostFeatureString());
  entry.d = opts.d;
  entry.options = best->options;
  entry.gflops = flops / (best->ms * 1e6);
  entry.backend = opts.backend;
  if (useHalide)
    entry.schedule = halide::scheduleName(best->schedule);
  std::string error;
  if (!tuning::record(tuning::databasePath(), entry, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  if (keptDefault)
    std::printf("best %s: %.2f ms, %.1f GFLOP/s (no candidate was %.0f%% faster than the default)\n",
                best->label.c_str(), best->ms, entry.gflops, kMargin * 100);
  else
    std::printf("best %s: %.2f ms, %.1f GFLOP/s (default %s: %.2f ms, %.2fx)\n", best->label.c_str(),
                best->ms, entry.gflops, def->label.c_str(), def->ms, def->ms / best->ms);
  if (opts.backend == "fused")
    std::printf("recorded in %s; attnc compile and the JIT use it for this pattern at d = %lld (--backend fused)\n",
                tuning::databasePath().c_str(), static_cast<long long>(opts.d));
  else
    std::printf("recorded in %s; attnc compile and the JIT use it for this pattern (--backend %s)\n",
                tuning::databasePath().c_str(), opts.backend.c_str());
  return kExitOk;
}
} // namespace

void setupTune(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<TuneOptions>();
  CLI::App *cmd = app.add_subcommand(
      "tune", "Measure the fused backend's tile shapes (or the halide backend's schedules) on "
              "this machine and record the fastest");
  addPatternOptions(*cmd, opts->pattern);
  cmd->add_option("--n", opts->n, "Sequence length to tune for")->required()->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--d", opts->d, "Head dimension")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--batch", opts->batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--heads", opts->heads, "Heads (a pattern that declares its heads uses its own count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--backend", opts->backend,
                  "fused: tile shapes (rows x keys); halide: Halide schedules (rows per block, key "
                  "chunk, register tiles; each candidate compiles in a few seconds)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fused", "halide"}));
  CLI::Option *threadsOption = cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  addTargetOptions(*cmd, opts->target, opts->device,
                  "cpu, or cuda: time the GPU forward kernel's variants (bf16, d <= 128; wgmma on compute capability 9.0) on --device with CUDA "
                  "events and record the fastest for that GPU; compile and the JIT put it in the kernel "
                  "(metadata cuda_tuned) and the runtime uses it on that GPU");
  cmd->add_option("--measure", opts->measure,
                  "How many of the cost model's best candidates to measure (the default shape is "
                  "always measured too)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  cmd->add_option("--repeat", opts->repeat, "Timed runs per candidate (median), in rounds that run every candidate once")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->footer(examplesFooter({"attnc tune patterns/fixed.attn --n 16384 --d 64",
                              "attnc tune patterns/strided.attn --n 4096 --d 128 --measure 5",
                              "attnc tune patterns/strided.attn --n 16384 --backend halide",
                              "attnc tune patterns/fixed.attn --n 16384 --d 64 --target cuda"}));
  cmd->callback([opts, threadsOption, &exitCode] {
    opts->threadsGiven = threadsOption->count() > 0;
    opts->backendGiven = opts->backend != "fused";
    exitCode = runTune(*opts);
  });
}

} // namespace attnc::tool
