//===- CmdTune.cpp - attnc tune: measure tile shapes, keep the best -------===//
//
// Candidates are the fused plan's tile shapes (rows x keys). One pass over
// each one's blocks at the requested n gives its exact tile counts; a cost
// model (pairs computed, tiles, blocks) ranks them and the best few are
// measured on this machine, always together with the default. The fastest
// measured shape is recorded in the tuning database, where compile and the
// JIT find it.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Measure.h"

#include "attnc/attnc.h"
#include "attnc/compiler/Analysis.h"
#include "attnc/compiler/KernelBuilder.h"
#include "attnc/compiler/Plan.h"
#include "attnc/compiler/Tuning.h"
#include "attnc/runtime/KernelFile.h"

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
};

struct Candidate {
  plan::PlanOptions options;
  double model = 0;
  double ms = 0;
  bool measured = false;
};

int runTune(const TuneOptions &opts) {
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  const Pattern &p = *lp->pattern;
  const int64_t heads = p.headsDeclared ? p.numHeads() : opts.heads;

  std::vector<Candidate> candidates;
  for (int64_t rows : {16, 32, 64})
    for (int64_t cols : {16, 24, 32, 48, 64, 128}) {
      Candidate c;
      c.options.tileRows = rows;
      c.options.tileCols = cols;
      plan::Plan plan = plan::buildPlan(lp->ir, c.options);
      // Model, in vector-lane operations: a block fills 1, 2 or 4 vectors of
      // 16 row lanes (up to 16, 32 or 64 rows), so a tile costs lanes x keys
      // x d for Q K^T and as much for P V (one vector of rows leaves Q K^T
      // bound by its key broadcasts: ~1.3x; four load fewer Q^T vectors per
      // key), plus its softmax update; a row block costs its Q transposes.
      const int vectors = c.options.tileRows <= 16 ? 1 : c.options.tileRows <= 32 ? 2 : 4;
      const double lanes = 16.0 * vectors;
      const double perLane = vectors == 1 ? 1.3 : vectors == 2 ? 1.0 : 0.95;
      for (const plan::HeadStats &h : plan::planStats(plan, opts.n))
        for (const plan::PieceStats &st : h.pieces)
          c.model += 2.0 * lanes * perLane * double(st.executed) / double(c.options.tileRows) *
                         double(opts.d) +
                     lanes * 40.0 * double(st.tiles) + double(st.blocks) * 2.0 * double(opts.d) * lanes;
      candidates.push_back(c);
    }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate &a, const Candidate &b) { return a.model < b.model; });
  plan::PlanOptions defaults;
  for (size_t k = 0; k < candidates.size(); ++k)
    candidates[k].measured = static_cast<int>(k) < opts.measure ||
                             (candidates[k].options.tileRows == defaults.tileRows &&
                              candidates[k].options.tileCols == defaults.tileCols);

  RandomInputs inputs(opts.batch, heads, opts.n, opts.d, 3);
  attnc_run_options ro{0.0f, opts.threads};

  int64_t nnz = 0;
  for (const auto &h : lp->ir.heads)
    nnz += ir::analyzeRows(h.set, opts.n).nnz * static_cast<int64_t>(p.headsDeclared ? h.heads.size() : heads);
  double flops = 4.0 * double(nnz) * double(opts.d) * double(opts.batch);

  int total = static_cast<int>(std::count_if(candidates.begin(), candidates.end(),
                                             [](const Candidate &c) { return c.measured; }));
  int done = 0;
  std::string tmp = "/tmp/attnc-tune-" + std::to_string(getpid()) + ".attnk";
  for (Candidate &c : candidates) {
    if (!c.measured)
      continue;
    codegen::CodeGenOptions cg;
    cg.planOptions = c.options;
    std::string bytes, error;
    attnc_kernel *kernel = nullptr;
    if (!codegen::buildKernelFile(*lp->frontend, p, cg, bytes, error) ||
        !rt::writeFileAtomically(tmp, bytes, error) || attnc_kernel_load(tmp.c_str(), &kernel) != ATTNC_OK) {
      std::cerr << "attnc: internal error: cannot build a candidate: " << error << attnc_last_error() << "\n";
      unlink(tmp.c_str());
      return kExitInternal;
    }
    unlink(tmp.c_str());
    c.ms = medianRunMs(kernel, inputs, ro, opts.repeat, error);
    attnc_kernel_free(kernel);
    if (c.ms < 0) {
      std::cerr << "attnc: error: " << error << "\n";
      return kExitUserError;
    }
    std::fprintf(stderr, "[%d/%d] tiles %3lldx%-3lld  %8.2f ms  %7.1f GFLOP/s\n", ++done, total,
                 (long long)c.options.tileRows, (long long)c.options.tileCols, c.ms,
                 flops / (c.ms * 1e6));
  }
  const Candidate *best = nullptr, *def = nullptr;
  for (const Candidate &c : candidates) {
    if (!c.measured)
      continue;
    if (!best || c.ms < best->ms)
      best = &c;
    if (c.options.tileRows == defaults.tileRows && c.options.tileCols == defaults.tileCols)
      def = &c;
  }
  tuning::Entry entry;
  entry.key = tuning::tuningKey(lp->frontend->sourceText(), p,
                                codegen::hostTarget() + codegen::hostFeatureString());
  entry.d = opts.d;
  entry.options = best->options;
  entry.gflops = flops / (best->ms * 1e6);
  std::string error;
  if (!tuning::record(tuning::databasePath(), entry, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  std::printf("best tiles %lldx%lld: %.2f ms, %.1f GFLOP/s (default %lldx%lld: %.2f ms, %.2fx)\n",
              (long long)best->options.tileRows, (long long)best->options.tileCols, best->ms,
              entry.gflops, (long long)defaults.tileRows, (long long)defaults.tileCols, def->ms,
              def->ms / best->ms);
  std::printf("recorded in %s; attnc compile and the JIT use it for this pattern\n",
              tuning::databasePath().c_str());
  return kExitOk;
}
} // namespace

void setupTune(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<TuneOptions>();
  CLI::App *cmd = app.add_subcommand(
      "tune", "Measure the fused backend's tile shapes on this machine and record the fastest");
  addPatternOptions(*cmd, opts->pattern);
  cmd->add_option("--n", opts->n, "Sequence length to tune for")->required()->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--d", opts->d, "Head dimension")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--batch", opts->batch, "Batch size")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--heads", opts->heads, "Heads (a pattern that declares its heads uses its own count)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  cmd->add_option("--measure", opts->measure,
                  "How many of the cost model's best candidates to measure (the default shape is "
                  "always measured too)")
      ->capture_default_str()
      ->check(CLI::Range(1, 8));
  cmd->add_option("--repeat", opts->repeat, "Timed runs per candidate (median)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  cmd->footer(examplesFooter({"attnc tune patterns/fixed.attn --n 16384 --d 64",
                              "attnc tune patterns/strided.attn --n 4096 --d 128 --measure 5"}));
  cmd->callback([opts, &exitCode] { exitCode = runTune(*opts); });
}

} // namespace attnc::tool
