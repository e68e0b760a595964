//===- CmdRun.cpp - attnc run ---------------------------------------------===//
//
// Runs a kernel file (or a pattern file, compiled through the JIT cache) on
// Q, K, V read from .npy files and writes O. With --check it also computes
// the double-precision reference and prints the largest absolute error.
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "Npy.h"

#include "attnc/attnc.h"
#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"
#include "attnc/codegen/CodeGen.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/plan/Csr.h"
#include "attnc/reference/Reference.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace attnc::tool {

namespace {
struct RunOptions {
  std::string input;
  std::vector<std::string> defines;
  std::string pattern;
  std::string q, k, v, output;
  std::string backend = "fused";
  int threads = 0;
  bool check = false;
};

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int runRun(const RunOptions &opts) {
  NpyArray q, k, v;
  std::string error;
  for (auto [path, array] : {std::pair{&opts.q, &q}, {&opts.k, &k}, {&opts.v, &v}})
    if (!readNpy(*path, *array, error)) {
      std::cerr << "attnc: error: " << error << "\n";
      return kExitUserError;
    }
  if (q.shape != k.shape || q.shape != v.shape) {
    std::cerr << "attnc: error: Q, K and V must have the same shape\n";
    return kExitUserError;
  }
  if (q.shape.size() != 2 && q.shape.size() != 4) {
    std::cerr << "attnc: error: inputs must be [n, d] or [batch, heads, n, d], got "
              << q.shape.size() << " dimensions\n";
    return kExitUserError;
  }

  attnc_kernel *raw = nullptr;
  attnc_status status;
  if (endsWith(opts.input, ".attn")) {
    std::vector<const char *> defs;
    for (const std::string &d : opts.defines)
      defs.push_back(d.c_str());
    attnc_jit_options jo{defs.data(), static_cast<int32_t>(defs.size()),
                         opts.pattern.empty() ? nullptr : opts.pattern.c_str(), nullptr, 0,
                         opts.backend.c_str()};
    status = attnc_jit_compile_file(opts.input.c_str(), &jo, &raw);
  } else {
    if (!opts.defines.empty() || !opts.pattern.empty()) {
      std::cerr << "attnc: error: -D and --pattern apply to .attn files; a kernel file has its "
                   "parameters built in\n";
      return kExitUsage;
    }
    status = attnc_kernel_load(opts.input.c_str(), &raw);
  }
  if (status != ATTNC_OK) {
    std::cerr << "attnc: error: " << attnc_last_error() << "\n";
    return status == ATTNC_ERROR_INTERNAL ? kExitInternal : kExitUserError;
  }
  std::unique_ptr<attnc_kernel, void (*)(attnc_kernel *)> kernel(raw, attnc_kernel_free);

  std::array<int64_t, 4> shape = q.shape.size() == 4
                                     ? std::array<int64_t, 4>{q.shape[0], q.shape[1], q.shape[2], q.shape[3]}
                                     : std::array<int64_t, 4>{1, 1, q.shape[0], q.shape[1]};
  if (q.shape.size() == 2 && attnc_kernel_num_heads(raw) > 1) {
    std::cerr << "attnc: error: inputs are [n, d] but the pattern has "
              << attnc_kernel_num_heads(raw) << " heads; pass [batch, heads, n, d] arrays\n";
    return kExitUserError;
  }
  NpyArray o{q.shape, std::vector<float>(q.data.size())};
  auto view = [&](NpyArray &a) { return tensorView(a.data.data(), shape); };
  attnc_tensor tq = view(q), tk = view(k), tv = view(v), to = view(o);
  attnc_run_options ro{0.0f, opts.threads};
  auto start = std::chrono::steady_clock::now();
  status = attnc_run(raw, &tq, &tk, &tv, &to, &ro);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (status != ATTNC_OK) {
    std::cerr << "attnc: error: " << attnc_last_error() << "\n";
    return status == ATTNC_ERROR_INTERNAL ? kExitInternal : kExitUserError;
  }
  if (!opts.output.empty() && !writeNpy(opts.output, o, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  std::printf("ran pattern '%s' on [%lld, %lld, %lld, %lld] in %.3f ms\n",
              attnc_kernel_metadata(raw, "pattern"), static_cast<long long>(shape[0]),
              static_cast<long long>(shape[1]), static_cast<long long>(shape[2]),
              static_cast<long long>(shape[3]), ms);
  if (opts.check) {
    // Rebuild the pattern from the kernel's own metadata and source.
    Frontend fe;
    SemaOptions sema;
    if (!parseDefineList(attnc_kernel_metadata(raw, "params"), sema.defines, error)) {
      std::cerr << "attnc: error: the kernel's parameters: " << error << "\n";
      return kExitUserError;
    }
    fe.parseString(opts.input, attnc_kernel_metadata(raw, "source"));
    fe.analyze(sema);
    const Pattern *p = fe.select(attnc_kernel_metadata(raw, "pattern"));
    if (!p) {
      printDiagnostics(fe);
      std::cerr << "attnc: error: the kernel's embedded pattern does not check\n";
      return kExitUserError;
    }
    ir::PatternIR ir = ir::canonicalizePattern(*p);
    int64_t n = shape[2], d = shape[3];
    double maxErr = 0;
    int64_t nonFinite = 0;
    std::vector<float> ref(static_cast<size_t>(n * d));
    for (const auto &head : ir.heads) {
      ir::Csr csr;
      if (!ir::buildCsr(head.set, n, csr, error)) {
        std::cerr << "attnc: error: " << error << "\n";
        return kExitUserError;
      }
      for (int64_t b = 0; b < shape[0]; ++b)
        for (int64_t h : head.heads) {
          int64_t off = (b * shape[1] + h) * n * d;
          referenceAttention(csr, q.data.data() + off, k.data.data() + off, v.data.data() + off,
                             ref.data(), d, 1.0 / std::sqrt(static_cast<double>(d)));
          for (int64_t x = 0; x < n * d; ++x) {
            if (!std::isfinite(o.data[off + x])) {
              ++nonFinite;
              continue;
            }
            maxErr = std::max(maxErr, static_cast<double>(std::fabs(ref[x] - o.data[off + x])));
          }
        }
    }
    std::printf("max abs error vs double-precision reference: %.3g", maxErr);
    if (nonFinite)
      std::printf(" over the finite outputs; %lld outputs are NaN or infinite (a score overflowed "
                  "float32, or an input is not finite)",
                  static_cast<long long>(nonFinite));
    std::printf("\n");
  }
  return kExitOk;
}
} // namespace

void setupRun(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Run a kernel file (or a .attn pattern, JIT-compiled and cached) on .npy inputs");
  cmd->add_option("kernel", opts->input, "A kernel file from attnc compile, or a .attn file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-D,--define", opts->defines, "Parameter override for a .attn input")
      ->type_name("NAME=INT");
  cmd->add_option("--pattern", opts->pattern, "Which pattern of a .attn input");
  cmd->add_option("--q", opts->q, "Queries: float32 .npy, [n, d] or [batch, heads, n, d]")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--k", opts->k, "Keys, same shape")->required()->check(CLI::ExistingFile);
  cmd->add_option("--v", opts->v, "Values, same shape")->required()->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", opts->output, "Where to write O (.npy, same shape)");
  cmd->add_option("--backend", opts->backend,
                  "For a .attn input: fused, halide, sparsifier or dense (a kernel file has its "
                  "backend built in)")
      ->capture_default_str()
      ->check(CLI::IsMember(codegen::backendNames()));
  cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  cmd->add_flag("--check", opts->check,
                "Compare with a double-precision reference and print the max abs error");
  cmd->footer(examplesFooter(
      {"attnc run fixed.attnk --q q.npy --k k.npy --v v.npy -o o.npy",
       "attnc run patterns/strided.attn -D l=64 --q q.npy --k k.npy --v v.npy -o o.npy --check"}));
  cmd->callback([opts, &exitCode] { exitCode = runRun(*opts); });
}

} // namespace attnc::tool
