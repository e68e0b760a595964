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
// K and V may have fewer heads than Q (grouped-query attention) and more rows
// (the queries are the last positions of the keys); --cu-seqlens packs a
// variable-length batch. Before anything large is allocated, the bytes the
// run needs are estimated and checked against the memory available (or
// --max-memory).
//
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "CallData.h"
#include "CudaBench.h"
#include "Npy.h"
#include "ScoreReference.h"

#include "attnc/attnc.h"
#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"
#include "attnc/codegen/CodeGen.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/plan/Csr.h"
#include "attnc/plan/RowEvaluator.h"
#include "attnc/reference/Reference.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
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
  int64_t kvHeads = 0, keys = 0; ///< --random's K, V: [B, kvHeads, keys, d] (0: H, n)
  std::string cuSeqlens, cuSeqlensK; ///< a varlen run's offsets (empty: a dense batch)
  std::optional<uint64_t> maxMemory;
  uint64_t seed = 0;
  bool seedGiven = false;
  std::string grad, dq, dk, dv; ///< grad: a dO file, or kRandomGrad
  std::string backend = "fused";
  int threads = 0;
  bool check = false;
  std::string target = "cpu";
  int device = 0;
  bool threadsGiven = false;
  std::vector<std::string> inputs; ///< --input NAME=FILE.npy: a pattern's data
};

/// `--grad random`: dO drawn like --random's inputs.
constexpr const char *kRandomGrad = "random";

/// Parses --random's "B,H,n,d": four integers, each at least 1. Returns the
/// reason when it is not. (How large a shape may be is the memory
/// estimate's question, asked before anything is drawn.)
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
  for (int a = 0; a < 4; ++a) {
    const std::string &field = fields[a];
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec != std::errc() || ptr != field.data() + field.size())
      return std::string(kNames[a]) + " must be a positive integer, got '" + field + "' in '" + spec + "'";
    if (value < 1)
      return std::string(kNames[a]) + " must be at least 1, got " + field + " in '" + spec + "'";
    shape[a] = value;
  }
  return {};
}

/// Parses a --cu-seqlens list: int32 offsets (the ABI's), starting at 0,
/// never decreasing. Returns the reason when it is not one.
std::string parseCuSeqlens(const std::string &spec, std::vector<int64_t> &offsets) {
  if (std::string error = parseIntList(spec, "the offsets", 0, std::numeric_limits<int32_t>::max(), offsets);
      !error.empty())
    return error;
  if (offsets[0] != 0)
    return "the first offset must be 0, got " + std::to_string(offsets[0]) + " in '" + spec +
           "' (sequence s is rows [offset s, offset s + 1))";
  for (size_t s = 1; s < offsets.size(); ++s)
    if (offsets[s] < offsets[s - 1])
      return "offsets must not decrease, but " + std::to_string(offsets[s]) + " follows " +
             std::to_string(offsets[s - 1]) + " in '" + spec + "'";
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
/// On a GPU, float32 inputs run on bf16 tensor cores (8 bits of mantissa,
/// float32 accumulation): --check's tolerance for the gradients there.
constexpr double kGpuGradTolerance = 3e-2;

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

/// One sequence of a run: batch element b, its queries at rows [q0, q0 + nq)
/// of Q and its keys at rows [k0, k0 + nk) of K and V, the queries being
/// the last nq of the nk positions.
struct Seq {
  int64_t b, q0, nq, k0, nk;
};

/// The shapes of a run: Q (and O, dO, dQ) [B, Hq, nq, d], K and V (and dK,
/// dV) [B, Hkv, nk, d]; a varlen run has B = 1 and its offsets.
struct RunShape {
  std::array<int64_t, 4> q{}, kv{};
  std::vector<Seq> seqs;
  std::vector<int32_t> cuQ, cuK; ///< empty without --cu-seqlens
  int64_t group() const { return q[1] / kv[1]; }
};

/// The pattern a kernel was built from, rebuilt from its embedded source and
/// parameters.
struct ReferencePattern {
  Frontend frontend;
  ir::PatternIR ir;
  /// The set (an index into ir.heads) that query head h runs: its own when
  /// the pattern declares heads, else the one set.
  size_t setOf(int64_t h) const {
    for (size_t k = 0; ir.headsDeclared && k < ir.heads.size(); ++k)
      if (std::find(ir.heads[k].heads.begin(), ir.heads[k].heads.end(), h) != ir.heads[k].heads.end())
        return k;
    return 0;
  }
};

/// Fills `out`; prints the error and returns false when the embedded pattern
/// does not check.
bool rebuildPattern(const attnc_kernel *kernel, const std::string &origin, ReferencePattern &out) {
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
  return true;
}

/// The CSR of `set` at length n with only rows firstRow .. n - 1 filled (a
/// sequence's queries; the rows before them stay empty, so a decoding step
/// on a long cache costs its one row, not the n x n pattern). Returns false
/// with `error` set when 32-bit positions cannot index it.
bool referenceCsr(const ir::SetRef &set, int64_t n, int64_t firstRow, ir::Csr &out, std::string &error) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (n > kMax) {
    error = "--check: the reference indexes keys with 32-bit positions, and " + std::to_string(n) +
            " keys are more than 2^31 - 1";
    return false;
  }
  out = ir::Csr{};
  out.n = n;
  out.pos.assign(static_cast<size_t>(n + 1), 0);
  const ir::RowEvaluator rows(set, n);
  IntervalSet keys;
  int64_t nnz = 0;
  for (int64_t i = firstRow; i < n; ++i) {
    rows.row(i, 0, n, keys);
    for (const Interval &x : keys) {
      nnz += x.size();
      if (nnz > kMax) {
        error = "--check: the reference's rows have more than 2^31 - 1 pairs at n = " + std::to_string(n) +
                "; 32-bit positions cannot index them";
        return false;
      }
      for (int64_t j = x.lo; j < x.hi; ++j)
        out.crd.push_back(static_cast<int32_t>(j));
    }
    out.pos[static_cast<size_t>(i + 1)] = static_cast<int32_t>(nnz);
  }
  return true;
}

/// What --check's reference holds at once, in bytes: for the sequence that
/// needs the most, each head set's CSR (an offset per key position, a key
/// per pair of the computed rows), a head's O and dQ, and a key/value
/// head's dK and dV (in double, and in float to compare).
int64_t referenceBytes(const ReferencePattern &pattern, const RunShape &shape, bool grad,
                       const CallData *data = nullptr) {
  const int64_t d = shape.q[3];
  int64_t most = 0, lastNq = -1, lastNk = -1, lastBytes = 0;
  for (const Seq &s : shape.seqs) {
    if (s.nq != lastNq || s.nk != lastNk) {
      lastBytes = 0;
      for (const auto &head : pattern.ir.heads) // (a pattern that reads data: as the first slice's)
        lastBytes += 4 * (s.nk + 1 + countRowPairs(data ? ir::bindSet(head.set, data->slice(0, 0)) : head.set, s.nk,
                                                   s.nk - s.nq));
      lastBytes += 4 * s.nq * d * (grad ? 2 : 1) + (grad ? 20 * s.nk * d : 0);
      lastNq = s.nq;
      lastNk = s.nk;
    }
    most = std::max(most, lastBytes);
  }
  return most;
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

/// The arrays of a run, C-ordered: Q, O, dO, dQ of RunShape::q, K, V, dK,
/// dV of RunShape::kv.
struct RunArrays {
  const NpyArray &q, &k, &v, &o;
  const NpyArray *dO, *dq, *dk, *dv; ///< null without --grad
};

/// --check: O, and with --grad dQ, dK and dV, against the double-precision
/// reference, sequence by sequence and head by head: query head h reads
/// key/value head h / group, its queries are the last nq of the sequence's
/// nk positions, and dK, dV sum over the group's query heads. Prints one line
/// per array; the gradients fail (exit 1) past kGradTolerance.
int checkAgainstReference(const ReferencePattern &pattern, const RunShape &shape, const RunArrays &a,
                          double gradTolerance = kGradTolerance, const CallData *data = nullptr) {
  const int64_t hq = shape.q[1], hkv = shape.kv[1], d = shape.q[3], group = shape.group();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const bool grad = a.dO != nullptr;
  // A score modifier: the rows of ScoreReference.h, with the call's float inputs.
  const bool scoredRows = pattern.ir.score || pattern.ir.sink;
  const bool setsReadData = data && pattern.ir.readsData(); // (float inputs alone leave the sets known)
  const std::vector<FloatInput> floats = data ? data->floatInputs() : std::vector<FloatInput>{};
  const std::vector<std::string> inputNames = pattern.ir.inputNames();
  auto scoring = [&](int64_t h, int64_t nk) {
    return ScoreContext{pattern.ir.score.get(), pattern.ir.sink.get(), &floats, &inputNames, h, nk};
  };
  Deviation out, dev[3];
  std::vector<float> refO, refDq, refKv;
  std::vector<double> refDk, refDv;
  std::vector<ir::Csr> csrs(pattern.ir.heads.size());
  int64_t builtNq = -1, builtNk = -1;
  std::string error;
  for (const Seq &s : shape.seqs) {
    if (s.nk == 0)
      continue;
    // A dense batch's elements share one length: their CSRs are built once.
    if (!setsReadData && (s.nq != builtNq || s.nk != builtNk)) {
      for (size_t set = 0; set < csrs.size(); ++set)
        if (!referenceCsr(pattern.ir.heads[set].set, s.nk, s.nk - s.nq, csrs[set], error)) {
          std::cerr << "attnc: error: " << error << "\n";
          return kExitUserError;
        }
      builtNq = s.nq;
      builtNk = s.nk;
    }
    const int64_t firstRow = s.nk - s.nq;
    auto qAt = [&](int64_t h) { return static_cast<size_t>(((s.b * hq + h) * shape.q[2] + s.q0) * d); };
    auto kAt = [&](int64_t g) { return static_cast<size_t>(((s.b * hkv + g) * shape.kv[2] + s.k0) * d); };
    refO.resize(static_cast<size_t>(s.nq * d));
    // A pattern that reads data has its rows from each slice's arrays.
    std::vector<ir::Csr> sliceCsrs(setsReadData ? static_cast<size_t>(hq) : 0);
    for (int64_t h = 0; setsReadData && h < hq; ++h)
      if (!referenceCsr(ir::bindSet(pattern.ir.heads[pattern.setOf(h)].set, data->slice(s.b, h)), s.nk, firstRow,
                        sliceCsrs[static_cast<size_t>(h)], error)) {
        std::cerr << "attnc: error: " << error << "\n";
        return kExitUserError;
      }
    auto csrOf = [&](int64_t h) -> const ir::Csr & {
      return setsReadData ? sliceCsrs[static_cast<size_t>(h)] : csrs[pattern.setOf(h)];
    };
    for (int64_t h = 0; h < hq; ++h) {
      const size_t kv = kAt(h / group);
      if (scoredRows)
        scoredAttentionRows(csrOf(h), firstRow, a.q.data.data() + qAt(h), a.k.data.data() + kv,
                            a.v.data.data() + kv, refO.data(), d, scale, scoring(h, s.nk));
      else
        referenceAttentionRows(csrOf(h), firstRow, a.q.data.data() + qAt(h), a.k.data.data() + kv,
                               a.v.data.data() + kv, refO.data(), d, scale);
      out.add(refO.data(), a.o.data.data() + qAt(h), s.nq * d);
    }
    if (!grad)
      continue;
    refDq.resize(static_cast<size_t>(s.nq * d));
    refKv.resize(static_cast<size_t>(s.nk * d));
    for (int64_t g = 0; g < hkv; ++g) {
      const size_t kv = kAt(g);
      refDk.assign(static_cast<size_t>(s.nk * d), 0.0);
      refDv.assign(static_cast<size_t>(s.nk * d), 0.0);
      for (int64_t h = g * group; h < (g + 1) * group; ++h) {
        if (scoredRows)
          scoredBackwardRows(csrOf(h), firstRow, a.q.data.data() + qAt(h), a.k.data.data() + kv,
                             a.v.data.data() + kv, a.dO->data.data() + qAt(h), refDq.data(), refDk.data(),
                             refDv.data(), d, scale, scoring(h, s.nk));
        else
          referenceBackwardRows(csrOf(h), firstRow, a.q.data.data() + qAt(h), a.k.data.data() + kv,
                                a.v.data.data() + kv, a.dO->data.data() + qAt(h), refDq.data(), refDk.data(),
                                refDv.data(), d, scale);
        dev[0].add(refDq.data(), a.dq->data.data() + qAt(h), s.nq * d);
      }
      for (auto [sum, got, deviation] : {std::tuple{&refDk, a.dk, &dev[1]}, {&refDv, a.dv, &dev[2]}}) {
        std::transform(sum->begin(), sum->end(), refKv.begin(), [](double x) { return static_cast<float>(x); });
        deviation->add(refKv.data(), got->data.data() + kv, s.nk * d);
      }
    }
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
    const double tolerance = gradTolerance * std::max(1.0, dev[g].maxRef);
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
                    names[g], dev[g].maxErr, tolerance, gradTolerance);
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

/// Prints `message` as an error and returns `code`.
int fail(int code, const std::string &message) {
  std::cerr << "attnc: error: " << message << "\n";
  return code;
}

/// The two offset lists of a varlen run agree: as many entries, and no
/// sequence with more queries than keys. A usage error (exit 2) otherwise.
int checkSequences(const std::vector<int64_t> &cuQ, const std::vector<int64_t> &cuK) {
  if (cuQ.size() != cuK.size())
    return fail(kExitUsage, "--cu-seqlens has " + std::to_string(cuQ.size()) + " offsets but --cu-seqlens-k " +
                                std::to_string(cuK.size()) + "; both give one more offset than there are sequences");
  for (size_t s = 0; s + 1 < cuQ.size(); ++s) {
    const int64_t nq = cuQ[s + 1] - cuQ[s], nk = cuK[s + 1] - cuK[s];
    if (nq > nk)
      return fail(kExitUsage, "sequence " + std::to_string(s) + " has " + std::to_string(nq) +
                                  " queries (--cu-seqlens) but " + std::to_string(nk) +
                                  " keys (--cu-seqlens-k); the queries are the last nq of the nk key positions, so "
                                  "nq <= nk");
  }
  return kExitOk;
}

/// --random's shapes with --kv-heads and --keys (and a varlen run's total
/// lengths); a usage error (exit 2) when the flags disagree.
int randomShape(const RunOptions &opts, const std::vector<int64_t> &cuQ, const std::vector<int64_t> &cuK,
                RunShape &shape) {
  std::array<int64_t, 4> dims{};
  ATTNC_CHECK(parseRandomShape(opts.random, dims).empty(), "--random was validated when parsed");
  const int64_t hkv = opts.kvHeads ? opts.kvHeads : dims[1];
  if (dims[1] % hkv != 0)
    return fail(kExitUsage, "--kv-heads " + std::to_string(hkv) + " does not divide the " + std::to_string(dims[1]) +
                                " query heads of --random; query head h reads key/value head h / (H / HKV), so H "
                                "must be a multiple of HKV");
  int64_t nk = opts.keys ? opts.keys : dims[2];
  if (!cuQ.empty()) {
    if (dims[0] != 1)
      return fail(kExitUsage, "--cu-seqlens packs sequences along n of one batch element, but --random has batch " +
                                  std::to_string(dims[0]) + "; give --random 1,H,n,d");
    if (dims[2] != cuQ.back())
      return fail(kExitUsage, "--random has n = " + std::to_string(dims[2]) + " but --cu-seqlens ends at " +
                                  std::to_string(cuQ.back()) + "; its last offset is the queries' total length");
    if (opts.keys && opts.keys != cuK.back())
      return fail(kExitUsage, "--keys is " + std::to_string(opts.keys) + " but --cu-seqlens-k ends at " +
                                  std::to_string(cuK.back()) + "; leave --keys out, it is the keys' total length");
    nk = cuK.back();
  } else if (nk < dims[2]) {
    return fail(kExitUsage, "--keys " + std::to_string(nk) + " is fewer than the " + std::to_string(dims[2]) +
                                " queries of --random; the queries are the last n of the NK key positions, so "
                                "NK >= n");
  }
  shape.q = dims;
  shape.kv = {dims[0], hkv, nk, dims[3]};
  return kExitOk;
}

/// The shapes of arrays read from files: [n, d] (one batch element, one
/// head) or [batch, heads, n, d], K and V alike, differing from Q only in
/// their heads (a divisor of Q's) and length (at least Q's, unless a varlen
/// run's offsets say otherwise). A user error (exit 1) otherwise.
int fileShape(const NpyArray &q, const NpyArray &k, const NpyArray &v, bool varlen, RunShape &shape) {
  if (k.shape != v.shape)
    return fail(kExitUserError, "K and V must have the same shape, got K " + shapeText(k.shape) + " and V " +
                                    shapeText(v.shape));
  if (q.shape.size() != 2 && q.shape.size() != 4)
    return fail(kExitUserError, "inputs must be [n, d] or [batch, heads, n, d], got " +
                                    std::to_string(q.shape.size()) + " dimensions");
  if (k.shape.size() != q.shape.size())
    return fail(kExitUserError, "Q " + shapeText(q.shape) + " and K " + shapeText(k.shape) +
                                    " must have the same number of dimensions");
  auto four = [](const std::vector<int64_t> &s) {
    return s.size() == 4 ? std::array<int64_t, 4>{s[0], s[1], s[2], s[3]} : std::array<int64_t, 4>{1, 1, s[0], s[1]};
  };
  shape.q = four(q.shape);
  shape.kv = four(k.shape);
  const std::string both = "Q " + shapeText(q.shape) + " and K, V " + shapeText(k.shape);
  const std::string rule = "; K and V may differ from Q only in their heads (a divisor of Q's) and length";
  if (shape.q[0] != shape.kv[0])
    return fail(kExitUserError, both + " differ in the batch" + rule);
  if (shape.q[3] != shape.kv[3])
    return fail(kExitUserError, both + " differ in the head dimension d" + rule);
  if (shape.kv[1] == 0 || shape.q[1] % shape.kv[1] != 0)
    return fail(kExitUserError, both + ": K and V's " + std::to_string(shape.kv[1]) + " heads do not divide Q's " +
                                    std::to_string(shape.q[1]) +
                                    "; query head h reads key/value head h / (Hq / Hkv)");
  if (!varlen && shape.kv[2] < shape.q[2])
    return fail(kExitUserError, both + ": K and V have " + std::to_string(shape.kv[2]) + " rows but Q has " +
                                    std::to_string(shape.q[2]) +
                                    "; the queries are the last nq of the nk key positions, so nq <= nk");
  return kExitOk;
}

/// A varlen run's offsets against its tensors (exit `code` when they
/// disagree), then the sequences of the run.
int buildSequences(const std::vector<int64_t> &cuQ, const std::vector<int64_t> &cuK, int code, RunShape &shape) {
  if (cuQ.empty()) {
    for (int64_t b = 0; b < shape.q[0]; ++b)
      shape.seqs.push_back({b, 0, shape.q[2], 0, shape.kv[2]});
    return kExitOk;
  }
  if (shape.q[0] != 1)
    return fail(code, "--cu-seqlens packs sequences along n of one batch element, but Q has batch " +
                          std::to_string(shape.q[0]));
  if (cuQ.back() != shape.q[2])
    return fail(code, "--cu-seqlens ends at " + std::to_string(cuQ.back()) + " but Q has " +
                          std::to_string(shape.q[2]) + " rows; its last offset is the queries' total length");
  if (cuK.back() != shape.kv[2])
    return fail(code, "--cu-seqlens-k (by default --cu-seqlens) ends at " + std::to_string(cuK.back()) +
                          " but K and V have " + std::to_string(shape.kv[2]) +
                          " rows; its last offset is the keys' total length");
  for (size_t s = 0; s + 1 < cuQ.size(); ++s) {
    shape.seqs.push_back({0, cuQ[s], cuQ[s + 1] - cuQ[s], cuK[s], cuK[s + 1] - cuK[s]});
    shape.cuQ.push_back(static_cast<int32_t>(cuQ[s]));
    shape.cuK.push_back(static_cast<int32_t>(cuK[s]));
  }
  shape.cuQ.push_back(static_cast<int32_t>(cuQ.back()));
  shape.cuK.push_back(static_cast<int32_t>(cuK.back()));
  return kExitOk;
}

/// Reads --q, --k, --v (and a --grad file) once their bytes fit: each
/// file is held whole while it is parsed, so the largest counts twice.
int readInputs(const RunOptions &opts, NpyArray &q, NpyArray &k, NpyArray &v, NpyArray &dO) {
  std::vector<std::pair<const std::string *, NpyArray *>> files = {{&opts.q, &q}, {&opts.k, &k}, {&opts.v, &v}};
  if (!opts.grad.empty() && opts.grad != kRandomGrad)
    files.push_back({&opts.grad, &dO});
  MemoryEstimate estimate;
  int64_t largest = 0;
  for (const auto &[path, array] : files) {
    std::error_code ec;
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(*path, ec));
    if (ec)
      continue; // readNpy says why
    estimate.addBytes("the input files", size);
    largest = std::max(largest, size);
  }
  estimate.addBytes("a file's bytes while it is parsed", largest);
  if (int code = checkMemory(estimate, opts.maxMemory); code != kExitOk)
    return code;
  std::string error;
  for (const auto &[path, array] : files)
    if (!readNpy(*path, *array, error))
      return fail(kExitUserError, error);
  return kExitOk;
}

/// Everything a run allocates besides the inputs read from files (counted
/// again here, as they stay held): the random inputs, O, dO, the gradients,
/// the log-sum-exp, and one output's .npy bytes while it is written.
MemoryEstimate runEstimate(const RunOptions &opts, const RunShape &shape) {
  const std::vector<int64_t> qShape(shape.q.begin(), shape.q.end()), kvShape(shape.kv.begin(), shape.kv.end());
  const bool grad = !opts.grad.empty();
  MemoryEstimate estimate;
  estimate.add("Q, K, V", qShape, 4);
  estimate.add("Q, K, V", kvShape, 4, 2);
  estimate.add("O", qShape, 4);
  if (grad) {
    estimate.add("dO", qShape, 4);
    estimate.add("dQ, dK, dV", qShape, 4);
    estimate.add("dQ, dK, dV", kvShape, 4, 2);
    estimate.add("the log-sum-exp", {shape.q[0], shape.q[1], shape.q[2]}, 4);
  }
  if (!opts.output.empty() || grad) {
    MemoryEstimate qBytes, kvBytes;
    qBytes.add("O", qShape, 4);
    kvBytes.add("dK", kvShape, 4);
    estimate.addBytes("an output's .npy bytes while it is written",
                      grad ? std::max(qBytes.total(), kvBytes.total()) : qBytes.total());
  }
  return estimate;
}

int runRun(const RunOptions &opts) {
  if (int code = checkInputFlags(opts); code != kExitOk)
    return code;
  if (opts.target == "cuda") {
    if (!opts.cuSeqlens.empty())
      return fail(kExitUsage, "--cu-seqlens: variable-length batches do not run on the GPU yet");
    if (opts.threadsGiven)
      return fail(kExitUsage, "--threads sets CPU worker threads; it does not apply to --target cuda");
    if (opts.backend != "fused")
      return fail(kExitUsage, "--target cuda runs the fused backend's plan on the GPU; --backend must be fused");
  }
  const bool random = !opts.random.empty(), grad = !opts.grad.empty(), varlen = !opts.cuSeqlens.empty();
  std::vector<int64_t> cuQ, cuK;
  if (varlen) {
    ATTNC_CHECK(parseCuSeqlens(opts.cuSeqlens, cuQ).empty(), "--cu-seqlens was validated when parsed");
    ATTNC_CHECK(parseCuSeqlens(opts.cuSeqlensK.empty() ? opts.cuSeqlens : opts.cuSeqlensK, cuK).empty(),
                "--cu-seqlens-k was validated when parsed");
    if (int code = checkSequences(cuQ, cuK); code != kExitOk)
      return code;
  }
  NpyArray q, k, v, dO;
  RunShape shape;
  if (random) {
    if (int code = randomShape(opts, cuQ, cuK, shape); code != kExitOk)
      return code;
  } else {
    if (int code = readInputs(opts, q, k, v, dO); code != kExitOk)
      return code;
    if (int code = fileShape(q, k, v, varlen, shape); code != kExitOk)
      return code;
  }
  // Flags that disagree with each other are usage errors; with files whose
  // shapes they do not fit.
  if (int code = buildSequences(cuQ, cuK, random ? kExitUsage : kExitUserError, shape); code != kExitOk)
    return code;
  const std::vector<int64_t> qShape = random ? std::vector<int64_t>(shape.q.begin(), shape.q.end()) : q.shape;
  const std::vector<int64_t> kvShape = random ? std::vector<int64_t>(shape.kv.begin(), shape.kv.end()) : k.shape;
  if (grad && opts.grad != kRandomGrad && dO.shape != qShape)
    return fail(kExitUserError, "--grad " + opts.grad + " has shape " + shapeText(dO.shape) + " but O has " +
                                    shapeText(qShape) +
                                    "; dO (the loss's gradient with respect to O) must have O's shape");
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
            std::filesystem::path(outputs[b].second).lexically_normal())
          return fail(kExitUsage, outputs[a].first + " and " + outputs[b].first + " would both be written to '" +
                                      outputs[a].second + "'; give them files of their own");
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
    if (!opts.defines.empty() || !opts.pattern.empty())
      return fail(kExitUsage, "-D and --pattern apply to .attn files; a kernel file has its parameters built in");
    status = attnc_kernel_load(opts.input.c_str(), &raw);
  }
  if (status != ATTNC_OK)
    return runtimeFailure(status);
  std::unique_ptr<attnc_kernel, void (*)(attnc_kernel *)> kernel(raw, attnc_kernel_free);
  if (qShape.size() == 2 && attnc_kernel_num_heads(raw) > 1)
    return fail(kExitUserError, "inputs are [n, d] but the pattern has " +
                                    std::to_string(attnc_kernel_num_heads(raw)) +
                                    " heads; pass [batch, heads, n, d] arrays");

  // A pattern that reads data: its inputs, from files or drawn.
  std::vector<InputFile> inputFiles;
  for (const std::string &text : opts.inputs) {
    inputFiles.emplace_back();
    parseInputFlag(text, inputFiles.back());
  }
  CallData data;
  // (A float input's dimensions may use the query heads: `float[heads]`.)
  const std::vector<InputSpec> specs = kernelInputs(raw, shape.kv[2], shape.q[1]);
  if (specs.empty() && !inputFiles.empty())
    return fail(kExitUserError, "--input " + inputFiles.front().name + ": pattern '" +
                                    attnc_kernel_metadata(raw, "pattern") + "' declares no input");
  if (!specs.empty()) {
    const bool onlyFloats =
        std::all_of(specs.begin(), specs.end(), [](const InputSpec &s) { return s.isFloat; });
    const std::string what = onlyFloats ? "patterns with float inputs" : "patterns that read data";
    if (varlen)
      return fail(kExitUsage, "--cu-seqlens: " + what + " take one sequence per batch entry for now");
    if (!loadCallData(specs, inputFiles, shape.q[0], shape.q[1], random, opts.seed, data))
      return kExitUserError;
  }
  const std::vector<attnc_input> inputViews = data.views();

  // What the run allocates, before it does; the reference's share needs its
  // rows counted, which only a run that fits is worth.
  MemoryEstimate estimate = runEstimate(opts, shape);
  if (int code = checkMemory(estimate, opts.maxMemory); code != kExitOk)
    return code;
  ReferencePattern pattern;
  if (opts.check) {
    if (!rebuildPattern(raw, opts.input, pattern))
      return kExitUserError;
    estimate.addBytes("the reference (--check)", referenceBytes(pattern, shape, grad, data.empty() ? nullptr : &data));
    if (int code = checkMemory(estimate, opts.maxMemory); code != kExitOk)
      return code;
  }

  if (random) {
    q = randomArray(qShape, opts.seed, 0);
    k = randomArray(kvShape, opts.seed, 1);
    v = randomArray(kvShape, opts.seed, 2);
  }
  if (opts.grad == kRandomGrad)
    dO = randomArray(qShape, opts.seed, 3);
  NpyArray o{qShape, std::vector<float>(q.data.size())};
  attnc_tensor tq = tensorView(q.data.data(), shape.q), tk = tensorView(k.data.data(), shape.kv),
               tv = tensorView(v.data.data(), shape.kv), to = tensorView(o.data.data(), shape.q);
  attnc_run_options ro{0.0f, opts.threads};
  const attnc_varlen lengths{shape.cuQ.data(), shape.cuK.data(), static_cast<int64_t>(shape.seqs.size())};
  // A training step keeps each row's log-sum-exp for the backward.
  std::vector<float> lse(grad ? static_cast<size_t>(shape.q[0] * shape.q[1] * shape.q[2]) : 0);
  attnc_tensor tl = tensorView(lse.data(), {shape.q[0], shape.q[1], shape.q[2], 1});
  NpyArray dq{qShape, std::vector<float>(grad ? q.data.size() : 0)};
  NpyArray dk{kvShape, std::vector<float>(grad ? k.data.size() : 0)}, dv = dk;
  attnc_tensor tdO = tensorView(grad ? dO.data.data() : nullptr, shape.q), tdq = tensorView(dq.data.data(), shape.q),
               tdk = tensorView(dk.data.data(), shape.kv), tdv = tensorView(dv.data.data(), shape.kv);
  double ms = 0, backwardMs = 0;
  const bool gpu = opts.target == "cuda";
  if (gpu) {
    CudaRunArrays arrays{tq, tk, tv, to, grad ? &tdO : nullptr, &tdq, &tdk, &tdv, inputViews};
    std::string error;
    if (cudaRun(raw, opts.device, arrays, ms, backwardMs, error) != ATTNC_OK)
      return fail(kExitUserError, "--target cuda: " + error);
  } else {
    // Each call timed on its own.
    auto timed = [](double &elapsed, auto &&call) {
      const auto start = std::chrono::steady_clock::now();
      const attnc_status s = call();
      elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return s;
    };
    // One call description for every kind of run (attnc_forward / attnc_backward).
    attnc_call call;
    attnc_call_init(&call);
    call.q = &tq;
    call.k = &tk;
    call.v = &tv;
    call.o = &to;
    call.lse = grad ? &tl : nullptr;
    call.varlen = varlen ? &lengths : nullptr;
    call.inputs = inputViews.data();
    call.num_inputs = static_cast<int64_t>(inputViews.size());
    call.options = &ro;
    status = timed(ms, [&] { return attnc_forward(raw, &call); });
    if (status == ATTNC_OK && grad) {
      call.d_o = &tdO;
      call.d_q = &tdq;
      call.d_k = &tdk;
      call.d_v = &tdv;
      status = timed(backwardMs, [&] { return attnc_backward(raw, &call); });
    }
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
  std::string error;
  for (const auto &[path, array] : writes)
    if (!writeNpy(path, *array, error))
      return fail(kExitUserError, error);
  const std::string seed = " (seed " + std::to_string(opts.seed) + ")";
  const std::string randomDO = opts.grad == kRandomGrad ? " on a random dO" + seed : "";
  const std::vector<int64_t> q4(shape.q.begin(), shape.q.end()), kv4(shape.kv.begin(), shape.kv.end());
  std::string shapes = q4 == kv4 ? shapeText(q4) : "Q " + shapeText(q4) + ", K and V " + shapeText(kv4);
  if (varlen)
    shapes += " as " + std::to_string(shape.seqs.size()) + " sequence" + (shape.seqs.size() == 1 ? "" : "s");
  const std::string where = gpu ? " on CUDA device " + std::to_string(opts.device) : "";
  std::printf("ran pattern '%s' on %s%s%s%s in %.3f ms\n", attnc_kernel_metadata(raw, "pattern"),
              random ? "random " : "", shapes.c_str(), random ? seed.c_str() : "", where.c_str(), ms);
  if (grad)
    std::printf("backward%s in %.3f ms: wrote dQ to %s, dK to %s, dV to %s\n", randomDO.c_str(), backwardMs,
                writes[writes.size() - 3].first.c_str(), writes[writes.size() - 2].first.c_str(),
                writes[writes.size() - 1].first.c_str());
  if (!opts.check)
    return kExitOk;
  return checkAgainstReference(pattern, shape,
                               {q, k, v, o, grad ? &dO : nullptr, grad ? &dq : nullptr, grad ? &dk : nullptr,
                                grad ? &dv : nullptr},
                               gpu ? kGpuGradTolerance : kGradTolerance, data.empty() ? nullptr : &data);
}

/// runRun, with an allocation that fails despite the estimate (another
/// process took the memory meanwhile) reported as the user error it is.
int runRunChecked(const RunOptions &opts) {
  try {
    return runRun(opts);
  } catch (const std::bad_alloc &) {
    return fail(kExitUserError, "out of memory while allocating the run's arrays; give a smaller shape");
  }
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
  CLI::Option *k = cmd->add_option("--k", opts->k,
                                   "Keys: Q's shape, or fewer heads (a divisor of Q's: grouped-query attention) "
                                   "and more rows (the queries are the last positions of the keys)")
                       ->check(CLI::ExistingFile);
  CLI::Option *v = cmd->add_option("--v", opts->v, "Values, K's shape")->check(CLI::ExistingFile);
  CLI::Option *random = cmd->add_option("--random", opts->random,
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
  cmd->add_option("--kv-heads", opts->kvHeads,
                  "With --random: K and V have HKV heads (default H; H must be a multiple of HKV): query head h "
                  "reads key/value head h / (H / HKV)")
      ->type_name("HKV")
      ->check(CLI::PositiveNumber)
      ->needs(random);
  cmd->add_option("--keys", opts->keys,
                  "With --random: K and V have NK rows (default n; NK >= n): the n queries are the last n of the NK "
                  "key positions, as in a decoding step with a key/value cache")
      ->type_name("NK")
      ->check(CLI::PositiveNumber)
      ->needs(random);
  auto offsets = [](std::string &spec) {
    std::vector<int64_t> list;
    return parseCuSeqlens(spec, list);
  };
  CLI::Option *cuSeqlens =
      cmd->add_option("--cu-seqlens", opts->cuSeqlens,
                      "A variable-length batch: sequence s is rows [o_s, o_s+1) of Q (tensors of batch 1, the "
                      "last offset their n); each attends within itself under the pattern at its own length")
          ->type_name("0,O1,O2,...")
          ->check(CLI::Validator(offsets, ""));
  cmd->add_option("--cu-seqlens-k", opts->cuSeqlensK,
                  "The keys' offsets of a variable-length batch, as many as --cu-seqlens (default: the same); a "
                  "sequence's queries are the last of its keys")
      ->type_name("0,O1,O2,...")
      ->check(CLI::Validator(offsets, ""))
      ->needs(cuSeqlens);
  addMaxMemoryOption(*cmd, opts->maxMemory);
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
  CLI::Option *threadsOption = cmd->add_option("--threads", opts->threads, "Worker threads (default: every core)");
  addTargetOptions(*cmd, opts->target, opts->device,
                  "cpu, or cuda: run on an NVIDIA GPU (compute capability 8.0 or newer; the float32 arrays on "
                  "bf16 tensor cores, so --check's gradient tolerance is 3e-2 there); not with --cu-seqlens");
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
  cmd->add_option("--input", opts->inputs,
                  "An input the pattern declares. Int inputs (`input NAME : int[DIMS]`, data the sets read): an "
                  "int32 or int64 .npy of shape DIMS, [B, DIMS] or [B, H, DIMS]. Float inputs (`input NAME : "
                  "float[DIMS]`, read by score / sink): a float32 or float64 .npy (read as float32) of exactly "
                  "DIMS at this n and H. With --random, inputs not given are drawn from --seed (int: values in "
                  "[0, 64), or valid block/token ids; float: normal, standard deviation 0.5)")
      ->type_name("NAME=FILE.npy")
      ->check(CLI::Validator(
          [](std::string &text) {
            InputFile f;
            return parseInputFlag(text, f);
          },
          ""));
  cmd->add_flag("--check", opts->check,
                "Compare with a double-precision reference and print the max abs error (with --grad also of "
                "dQ, dK, dV, which fail past 1e-4 x their largest magnitude)");
  cmd->footer(examplesFooter(
      {"attnc run fixed.attnk --q q.npy --k k.npy --v v.npy -o o.npy",
       "attnc run patterns/strided.attn -D l=64 --q q.npy --k k.npy --v v.npy -o o.npy --check",
       "attnc run patterns/fixed.attn --q q.npy --k k.npy --v v.npy -o o.npy --grad do.npy --check",
       "attnc run patterns/fixed.attn --random 1,8,1024,64 --check",
       "attnc run patterns/strided.attn --random 2,4,512,64 --seed 7 --grad random --check -o o.npy",
       "attnc run patterns/fixed.attn --random 1,32,1024,128 --kv-heads 8 --check",
       "attnc run patterns/causal.attn --random 1,8,1,64 --keys 32768 --check",
       "attnc run patterns/local.attn --random 1,8,4096,64 --cu-seqlens 0,512,1536,4096 --grad random --check",
       "attnc run patterns/lsh.attn --random 1,8,4096,64 --grad random --check",
       "attnc run patterns/document.attn --q q.npy --k k.npy --v v.npy --input doc=doc.npy -o o.npy",
       "attnc run patterns/alibi_local.attn --random 1,8,4096,64 --input slope=slope.npy --grad random --check"}));
  cmd->callback([opts, seed, threadsOption, &exitCode] {
    opts->seedGiven = seed->count() > 0;
    opts->threadsGiven = threadsOption->count() > 0;
    exitCode = runRunChecked(*opts);
  });
}

} // namespace attnc::tool
