//===- CmdRun.cpp - attnc run ---------------------------------------------===//
//
// Runs a kernel file (or a pattern file, compiled through the JIT cache) on
// Q, K, V read from .npy files, or drawn from a seed (--random B,H,n,d), and
// writes O. With --grad dO.npy (or --grad random) it runs the training step
// instead: the forward with the log-sum-exp, then the backward, and writes dQ,
// dK, dV too. With --check it also computes the double-precision reference
// and prints the largest absolute error of O (and of each gradient, which must
// lie within a tolerance).
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

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <tuple>

namespace attnc::tool {

namespace {
struct RunOptions {
  std::string input;
  std::vector<std::string> defines;
  std::string pattern;
  std::string q, k, v, output;
  std::string random; ///< --random B,H,n,d: Q, K, V drawn from `seed` instead of read
  uint64_t seed = 0;
  bool seedGiven = false;
  std::string grad, dq, dk, dv; ///< grad: a dO file, or kRandomGrad
  std::string backend = "fused";
  int threads = 0;
  bool check = false;
};

/// `--grad random`: dO drawn like --random's inputs.
constexpr const char *kRandomGrad = "random";

/// --random makes at most this many elements per tensor (4 GiB of f32).
constexpr int64_t kMaxRandomElements = int64_t(1) << 30;

/// Parses --random's "B,H,n,d": four integers, each at least 1, whose product
/// is at most kMaxRandomElements. Returns the reason when it is not.
std::string parseRandomShape(const std::string &spec, std::array<int64_t, 4> &shape) {
  static const char *const kNames[4] = {"the batch B", "the heads H", "the length n", "the head dimension d"};
  std::vector<std::string> fields;
  for (size_t start = 0;;) {
    size_t comma = spec.find(',', start);
    fields.push_back(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (fields.size() != 4)
    return "expected four numbers B,H,n,d (batch, heads, length, head dimension), e.g. 1,8,1024,64; got " +
           std::to_string(fields.size()) + " in '" + spec + "'";
  int64_t elements = 1;
  for (int a = 0; a < 4; ++a) {
    const std::string &field = fields[a];
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec != std::errc() || ptr != field.data() + field.size())
      return std::string(kNames[a]) + " must be a positive integer, got '" + field + "' in '" + spec + "'";
    if (value < 1)
      return std::string(kNames[a]) + " must be at least 1, got " + field + " in '" + spec + "'";
    if (value > kMaxRandomElements / elements)
      return "'" + spec + "' makes more than 2^30 elements per tensor";
    elements *= value;
    shape[a] = value;
  }
  return {};
}

/// Checks --seed: an integer in [0, 2^64). Returns the reason when it is not
/// (CLI11 would wrap -1 around).
std::string checkSeed(const std::string &value) {
  uint64_t seed = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), seed);
  if (ec == std::errc() && ptr == value.data() + value.size())
    return {};
  return "expected an integer in [0, 2^64), got '" + value + "'";
}

/// One f32 array of `shape` drawn from stream `stream` of `seed`: splitmix64
/// started at state 4 * seed + stream, each element k / 2^23 - 1 for the top
/// 24 bits k of one output, so uniform on [-1, 1) in steps of 2^-23 and the
/// same on every platform. Q, K, V and dO are streams 0 to 3.
NpyArray randomArray(const std::vector<int64_t> &shape, uint64_t seed, uint64_t stream) {
  size_t count = 1;
  for (int64_t s : shape)
    count *= static_cast<size_t>(s);
  NpyArray a{shape, std::vector<float>(count)};
  uint64_t state = seed * 4 + stream;
  for (float &x : a.data) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    x = static_cast<float>(static_cast<double>(z >> 40) * 0x1p-23 - 1.0);
  }
  return a;
}

/// A gradient's largest error may be this much of its largest reference
/// magnitude (at least 1): the forward's 1e-4 on unit-sized outputs, scaled
/// for dK and dV, which sum over every query that attends a key.
constexpr double kGradTolerance = 1e-4;

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::ostringstream os;
  os << "[";
  for (size_t a = 0; a < shape.size(); ++a)
    os << (a ? ", " : "") << shape[a];
  os << "]";
  return os.str();
}

/// Prints the runtime's message for a failed call; its exit code.
int runtimeFailure(attnc_status status) {
  std::cerr << "attnc: error: " << attnc_last_error() << "\n";
  return status == ATTNC_ERROR_INTERNAL ? kExitInternal : kExitUserError;
}

/// Where --grad writes gradient `name` ("dq", "dk", "dv"): its flag, else
/// the -o path with ".NAME.npy" for its extension (O.npy -> O.dq.npy), else
/// NAME.npy in the current directory.
std::string gradientPath(const RunOptions &opts, const std::string &given, const std::string &name) {
  if (!given.empty())
    return given;
  if (opts.output.empty())
    return name + ".npy";
  return std::filesystem::path(opts.output).replace_extension("." + name + ".npy").string();
}

/// The pattern a kernel was built from, rebuilt from its embedded source and
/// parameters, and the CSR of each distinct head set at length n.
struct ReferencePattern {
  Frontend frontend;
  ir::PatternIR ir;
  std::vector<ir::Csr> csrs;
  /// The set (an index into `csrs`) that tensor head h runs: its own when the
  /// pattern declares heads, else the one set.
  size_t setOf(int64_t h) const {
    for (size_t k = 0; ir.headsDeclared && k < ir.heads.size(); ++k)
      if (std::find(ir.heads[k].heads.begin(), ir.heads[k].heads.end(), h) != ir.heads[k].heads.end())
        return k;
    return 0;
  }
};

/// Fills `out`; prints the error and returns false when the embedded pattern
/// does not check.
bool rebuildPattern(const attnc_kernel *kernel, const std::string &origin, int64_t n, ReferencePattern &out) {
  std::string error;
  SemaOptions sema;
  if (!parseDefineList(attnc_kernel_metadata(kernel, "params"), sema.defines, error)) {
    std::cerr << "attnc: error: the kernel's parameters: " << error << "\n";
    return false;
  }
  out.frontend.parseString(origin, attnc_kernel_metadata(kernel, "source"));
  out.frontend.analyze(sema);
  const Pattern *p = out.frontend.select(attnc_kernel_metadata(kernel, "pattern"));
  if (!p) {
    printDiagnostics(out.frontend);
    std::cerr << "attnc: error: the kernel's embedded pattern does not check\n";
    return false;
  }
  out.ir = ir::canonicalizePattern(*p);
  out.csrs.resize(out.ir.heads.size());
  for (size_t k = 0; k < out.ir.heads.size(); ++k)
    if (!ir::buildCsr(out.ir.heads[k].set, n, out.csrs[k], error)) {
      std::cerr << "attnc: error: " << error << "\n";
      return false;
    }
  return true;
}

/// How far a kernel's output is from the reference: the largest absolute
/// difference over its finite elements, the largest reference magnitude, and
/// how many elements are NaN or infinite.
struct Deviation {
  double maxErr = 0, maxRef = 0;
  int64_t nonFinite = 0;
  void add(const float *ref, const float *got, int64_t count) {
    for (int64_t x = 0; x < count; ++x) {
      maxRef = std::max(maxRef, static_cast<double>(std::fabs(ref[x])));
      if (!std::isfinite(got[x]))
        ++nonFinite;
      else
        maxErr = std::max(maxErr, static_cast<double>(std::fabs(ref[x] - got[x])));
    }
  }
};

/// The arrays of a run, [B, H, n, d] (or [n, d]) and C-ordered.
struct RunArrays {
  std::array<int64_t, 4> shape;
  const NpyArray &q, &k, &v, &o;
  const NpyArray *dO, *dq, *dk, *dv; ///< null without --grad
};

/// --check: O, and with --grad dQ, dK and dV, against the double-precision
/// reference on every (batch, head) slice. Prints one line per array; the
/// gradients fail (exit 1) past kGradTolerance.
int checkAgainstReference(const attnc_kernel *kernel, const std::string &origin, const RunArrays &a) {
  const int64_t n = a.shape[2], d = a.shape[3];
  ReferencePattern pattern;
  if (!rebuildPattern(kernel, origin, n, pattern))
    return kExitUserError;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool grad = a.dO != nullptr;
  Deviation out, dev[3];
  std::vector<float> ref(static_cast<size_t>(n * d)), refGrad[3];
  if (grad)
    for (std::vector<float> &g : refGrad)
      g.resize(static_cast<size_t>(n * d));
  for (int64_t b = 0; b < a.shape[0]; ++b)
    for (int64_t h = 0; h < a.shape[1]; ++h) {
      const ir::Csr &csr = pattern.csrs[pattern.setOf(h)];
      const int64_t off = (b * a.shape[1] + h) * n * d;
      referenceAttention(csr, a.q.data.data() + off, a.k.data.data() + off, a.v.data.data() + off, ref.data(), d,
                         scale);
      out.add(ref.data(), a.o.data.data() + off, n * d);
      if (!grad)
        continue;
      referenceBackward(csr, a.q.data.data() + off, a.k.data.data() + off, a.v.data.data() + off,
                        a.dO->data.data() + off, refGrad[0].data(), refGrad[1].data(), refGrad[2].data(), d,
                        scale);
      const NpyArray *got[3] = {a.dq, a.dk, a.dv};
      for (int g = 0; g < 3; ++g)
        dev[g].add(refGrad[g].data(), got[g]->data.data() + off, n * d);
    }
  std::printf("max abs error vs double-precision reference: %.3g", out.maxErr);
  if (out.nonFinite)
    std::printf(" over the finite outputs; %lld outputs are NaN or infinite (a score overflowed "
                "float32, or an input is not finite)",
                static_cast<long long>(out.nonFinite));
  std::printf("\n");
  if (!grad)
    return kExitOk;
  int exitCode = kExitOk;
  const char *names[3] = {"dQ", "dK", "dV"};
  for (int g = 0; g < 3; ++g) {
    const double tolerance = kGradTolerance * std::max(1.0, dev[g].maxRef);
    std::printf("max abs error of %s vs double-precision reference: %.3g (tolerance %.3g)\n", names[g],
                dev[g].maxErr, tolerance);
    if (dev[g].nonFinite) {
      std::cerr << "attnc: error: " << dev[g].nonFinite << " elements of " << names[g]
                << " are NaN or infinite (a score overflowed float32, or an input is not finite)\n";
      exitCode = kExitUserError;
    } else if (!(dev[g].maxErr <= tolerance)) {
      char message[160];
      std::snprintf(message, sizeof message,
                    "%s is off the double-precision reference by %.3g, past the tolerance %.3g "
                    "(%g x its largest magnitude, at least 1)",
                    names[g], dev[g].maxErr, tolerance, kGradTolerance);
      std::cerr << "attnc: error: " << message << "\n";
      exitCode = kExitUserError;
    }
  }
  return exitCode;
}

/// Q, K and V come from three files or from --random, and --seed needs
/// something random to seed; a usage error (exit 2) otherwise.
int checkInputFlags(const RunOptions &opts) {
  const bool random = !opts.random.empty();
  std::vector<std::string> missing;
  for (auto [flag, path] : {std::pair{"--q", &opts.q}, {"--k", &opts.k}, {"--v", &opts.v}})
    if (path->empty())
      missing.push_back(flag);
  if (!random && missing.size() == 3) {
    std::cerr << "attnc: error: no inputs: give --q Q.npy --k K.npy --v V.npy, or --random B,H,n,d\n";
    return kExitUsage;
  }
  if (!random && !missing.empty()) {
    std::cerr << "attnc: error: --q, --k and --v come together; missing " << missing[0]
              << (missing.size() > 1 ? " and " + missing[1] : std::string()) << "\n";
    return kExitUsage;
  }
  if (opts.seedGiven && !random && opts.grad != kRandomGrad) {
    std::cerr << "attnc: error: --seed seeds --random and --grad random; give one of them, or leave --seed out\n";
    return kExitUsage;
  }
  return kExitOk;
}

int runRun(const RunOptions &opts) {
  NpyArray q, k, v, dO;
  std::string error;
  if (int code = checkInputFlags(opts); code != kExitOk)
    return code;
  const bool random = !opts.random.empty();
  if (random) {
    std::array<int64_t, 4> dims{};
    ATTNC_CHECK(parseRandomShape(opts.random, dims).empty(), "--random was validated when parsed");
    const std::vector<int64_t> shape(dims.begin(), dims.end());
    q = randomArray(shape, opts.seed, 0);
    k = randomArray(shape, opts.seed, 1);
    v = randomArray(shape, opts.seed, 2);
  } else {
    for (auto [path, array] : {std::pair{&opts.q, &q}, {&opts.k, &k}, {&opts.v, &v}})
      if (!readNpy(*path, *array, error)) {
        std::cerr << "attnc: error: " << error << "\n";
        return kExitUserError;
      }
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
  const bool grad = !opts.grad.empty();
  if (opts.grad == kRandomGrad)
    dO = randomArray(q.shape, opts.seed, 3);
  else if (grad && !readNpy(opts.grad, dO, error)) {
    std::cerr << "attnc: error: " << error << "\n";
    return kExitUserError;
  }
  if (grad && dO.shape != q.shape) {
    std::cerr << "attnc: error: --grad " << opts.grad << " has shape " << shapeText(dO.shape) << " but O has "
              << shapeText(q.shape) << "; dO (the loss's gradient with respect to O) must have O's shape\n";
    return kExitUserError;
  }
  if (grad) {
    // Two outputs in one file would leave only the last one written.
    std::vector<std::pair<std::string, std::string>> outputs = {{"dQ", gradientPath(opts, opts.dq, "dq")},
                                                                {"dK", gradientPath(opts, opts.dk, "dk")},
                                                                {"dV", gradientPath(opts, opts.dv, "dv")}};
    if (!opts.output.empty())
      outputs.insert(outputs.begin(), {"O", opts.output});
    for (size_t a = 0; a < outputs.size(); ++a)
      for (size_t b = a + 1; b < outputs.size(); ++b)
        if (std::filesystem::path(outputs[a].second).lexically_normal() ==
            std::filesystem::path(outputs[b].second).lexically_normal()) {
          std::cerr << "attnc: error: " << outputs[a].first << " and " << outputs[b].first
                    << " would both be written to '" << outputs[a].second << "'; give them files of their own\n";
          return kExitUsage;
        }
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
  if (status != ATTNC_OK)
    return runtimeFailure(status);
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
  // A training step keeps each row's log-sum-exp for the backward.
  std::vector<float> lse(grad ? static_cast<size_t>(shape[0] * shape[1] * shape[2]) : 0);
  attnc_tensor tl = tensorView(lse.data(), {shape[0], shape[1], shape[2], 1});
  auto start = std::chrono::steady_clock::now();
  status = grad ? attnc_run_forward(raw, &tq, &tk, &tv, &to, &tl, &ro) : attnc_run(raw, &tq, &tk, &tv, &to, &ro);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (status != ATTNC_OK)
    return runtimeFailure(status);

  NpyArray dq{q.shape, std::vector<float>(grad ? q.data.size() : 0)}, dk = dq, dv = dq;
  double backwardMs = 0;
  if (grad) {
    attnc_tensor tdO = view(dO), tdq = view(dq), tdk = view(dk), tdv = view(dv);
    start = std::chrono::steady_clock::now();
    status = attnc_run_backward(raw, &tq, &tk, &tv, &to, &tdO, &tl, &tdq, &tdk, &tdv, &ro);
    backwardMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (status != ATTNC_OK)
      return runtimeFailure(status);
  }

  std::vector<std::pair<std::string, const NpyArray *>> writes;
  if (!opts.output.empty())
    writes.push_back({opts.output, &o});
  if (grad)
    writes.insert(writes.end(), {{gradientPath(opts, opts.dq, "dq"), &dq},
                                 {gradientPath(opts, opts.dk, "dk"), &dk},
                                 {gradientPath(opts, opts.dv, "dv"), &dv}});
  for (const auto &[path, array] : writes)
    if (!writeNpy(path, *array, error)) {
      std::cerr << "attnc: error: " << error << "\n";
      return kExitUserError;
    }
  const std::string seed = " (seed " + std::to_string(opts.seed) + ")";
  const std::string randomDO = opts.grad == kRandomGrad ? " on a random dO" + seed : "";
  std::printf("ran pattern '%s' on %s[%lld, %lld, %lld, %lld]%s in %.3f ms\n",
              attnc_kernel_metadata(raw, "pattern"), random ? "random " : "", static_cast<long long>(shape[0]),
              static_cast<long long>(shape[1]), static_cast<long long>(shape[2]),
              static_cast<long long>(shape[3]), random ? seed.c_str() : "", ms);
  if (grad)
    std::printf("backward%s in %.3f ms: wrote dQ to %s, dK to %s, dV to %s\n", randomDO.c_str(), backwardMs,
                writes[writes.size() - 3].first.c_str(), writes[writes.size() - 2].first.c_str(),
                writes[writes.size() - 1].first.c_str());
  if (!opts.check)
    return kExitOk;
  return checkAgainstReference(raw, opts.input,
                               {shape, q, k, v, o, grad ? &dO : nullptr, grad ? &dq : nullptr,
                                grad ? &dk : nullptr, grad ? &dv : nullptr});
}
} // namespace

void setupRun(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Run a kernel file (or a .attn pattern, JIT-compiled and cached) on .npy inputs or random ones");
  cmd->add_option("kernel", opts->input, "A kernel file from attnc compile, or a .attn file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-D,--define", opts->defines, "Parameter override for a .attn input")
      ->type_name("NAME=INT");
  cmd->add_option("--pattern", opts->pattern, "Which pattern of a .attn input");
  CLI::Option *q = cmd->add_option("--q", opts->q, "Queries: float32 .npy, [n, d] or [batch, heads, n, d]")
                      ->check(CLI::ExistingFile);
  CLI::Option *k = cmd->add_option("--k", opts->k, "Keys, same shape")->check(CLI::ExistingFile);
  CLI::Option *v = cmd->add_option("--v", opts->v, "Values, same shape")->check(CLI::ExistingFile);
  cmd->add_option("--random", opts->random,
                  "Instead of --q, --k, --v: draw Q, K and V of shape [B, H, n, d], float32, uniform in [-1, 1), "
                  "from --seed")
      ->type_name("B,H,n,d")
      ->check(CLI::Validator(
          [](std::string &spec) {
            std::array<int64_t, 4> shape;
            return parseRandomShape(spec, shape);
          },
          ""))
      ->excludes(q)
      ->excludes(k)
      ->excludes(v);
  CLI::Option *seed = cmd->add_option("--seed", opts->seed,
                                      "Seed of --random and --grad random (default 0): the same seed draws the "
                                      "same arrays, on any machine")
                          ->check(CLI::Validator([](std::string &value) { return checkSeed(value); }, ""));
  cmd->add_option("-o,--output", opts->output, "Where to write O (.npy, same shape)");
  cmd->add_option("--backend", opts->backend,
                  "For a .attn input: fused, halide, sparsifier or dense (a kernel file has its "
                  "backend built in)")
      ->capture_default_str()
      ->check(CLI::IsMember(codegen::backendNames()));
  cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  CLI::Option *gradOption =
      cmd->add_option("--grad", opts->grad,
                      "dO, the loss's gradient with respect to O (.npy, O's shape; 'random': drawn like --random's "
                      "inputs): run the forward with the log-sum-exp, then the backward, and write dQ, dK, dV")
          ->type_name("FILE|random")
          ->check(CLI::Validator(
              [](std::string &value) { return value == kRandomGrad ? std::string() : CLI::ExistingFile(value); },
              ""));
  for (auto [flag, path, name] : {std::tuple{"--dq", &opts->dq, "dQ"}, {"--dk", &opts->dk, "dK"},
                                  {"--dv", &opts->dv, "dV"}}) {
    std::string lower = std::string(flag).substr(2);
    cmd->add_option(flag, *path,
                    std::string("Where --grad writes ") + name + " (default: -o's path with ." + lower +
                        ".npy for its extension, O.npy -> O." + lower + ".npy; without -o, " + lower +
                        ".npy in the current directory)")
        ->needs(gradOption);
  }
  cmd->add_flag("--check", opts->check,
                "Compare with a double-precision reference and print the max abs error (with --grad also of "
                "dQ, dK, dV, which fail past 1e-4 x their largest magnitude)");
  cmd->footer(examplesFooter(
      {"attnc run fixed.attnk --q q.npy --k k.npy --v v.npy -o o.npy",
       "attnc run patterns/strided.attn -D l=64 --q q.npy --k k.npy --v v.npy -o o.npy --check",
       "attnc run patterns/fixed.attn --q q.npy --k k.npy --v v.npy -o o.npy --grad do.npy --check",
       "attnc run patterns/fixed.attn --random 1,8,1024,64 --check",
       "attnc run patterns/strided.attn --random 2,4,512,64 --seed 7 --grad random --check -o o.npy"}));
  cmd->callback([opts, seed, &exitCode] {
    opts->seedGiven = seed->count() > 0;
    exitCode = runRun(*opts);
  });
}

} // namespace attnc::tool
