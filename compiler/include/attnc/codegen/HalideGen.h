//===- HalideGen.h - Halide 14 code for the plan's row blocks -------------===//
//
// The "halide" backend: the compiler emits, as a Halide algorithm, the
// attention of one plan piece over its row blocks, applies one of attnc's
// parametrised schedule templates, and compiles it ahead of time into the
// kernel file. Per row block b (of any piece, strategy and residue class):
//
//   Qs(r, d)  = Q(d, query(r)) * scale           query(r) = base(b) + r * stride(b)
//   S(r, k)   = sum_d Qs(r, d) * K(d, key(k))     key(k): the block's gathered keys
//   Sm(r, k)  = mask(r, k) ? S(r, k) : lowest     mask: the plan's row bits of key k
//   m(r)      = max_k Sm;  P = exp(Sm - m);  l(r) = sum_k P
//   out(c, r) = c < d ? sum_k P * V(c, key(k)) / l : m + log(l)   (log-sum-exp)
//
// The reductions over k run over the block's own key chunks only
// (RDom::where on the chunk count), so a block costs its keys, not the
// longest block's. The mask comes from the plan's exact per-key row bits,
// not from the pattern's predicate: every generator (random blocks, lists,
// generic predicates) is exact the same way, and the code does not depend
// on the pattern, so one compiled schedule serves every pattern. The
// runtime merges the pieces' rows by their log-sum-exp column.
//
// Nothing here exposes Halide: it is linked into the compiler only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnc::halide {

/// A schedule template's parameters (what `attnc tune --backend halide`
/// searches). The defaults are the fastest measured on fixed (n = 16384).
struct Schedule {
  int rows = 64;           ///< R: rows per block (16, 32 or 64)
  int keyChunk = 24;       ///< keys per chunk: the padding granule of a block's key list
  int scoreRowVectors = 4; ///< S register tile: 16-row vectors (16 * this divides R)
  int scoreKeys = 6;       ///< S register tile: keys (divides keyChunk)
  int outRows = 6;         ///< P V register tile: rows (d in 16-lane vectors)
};

/// An empty string, or why `s` is not a valid schedule.
std::string validate(const Schedule &s);

/// "r64-k24-s4x6-o6": the schedule in kernel metadata and reports.
std::string scheduleName(const Schedule &s);
/// The inverse of scheduleName; false on a malformed name.
bool parseScheduleName(const std::string &name, Schedule &out);

/// Head dimensions with their own fully unrolled code; any other d runs a
/// generic function (d as a run-time value, 16-lane vectors with a tail).
const std::vector<int> &specialisedDims();

/// The entry point of the code for head dimension d (0: the generic one).
std::string entryName(int d);

/// Identifies this code generator's build (cache keys of compiled schedules
/// and of halide kernels change whenever it is rebuilt).
const char *generatorStamp();

/// The Halide target halide kernels are compiled for: the CPU this process
/// runs on, read from its features by attnc (LLVM 14's `host` detection
/// misreads newer CPUs), or the one $ATTNC_HALIDE_TARGET names (a name of
/// cpuTargets(), `attnc compile --cpu-target`): AVX-512 (Skylake's subset),
/// AVX2 + FMA, SSE4.1, or baseline x86-64. Fixed for the process at the
/// first call. An unknown name in the variable falls back to the host's.
const char *targetString();

/// The names ATTNC_HALIDE_TARGET and --cpu-target take, with their Halide
/// target strings: host, x86-64-avx512, x86-64-avx2, x86-64-sse41, x86-64.
const std::vector<std::pair<std::string, std::string>> &cpuTargets();

/// The Halide target string of a name of cpuTargets() ("" when unknown;
/// "host": this CPU's).
std::string cpuTarget(const std::string &name);

/// Compiles every entry point of schedule `s` into ELF objects (the Halide
/// runtime in the first). Returns false and sets `error`.
bool compileObjects(const Schedule &s, std::vector<std::string> &objects, std::string &error);

/// Halide's lowered statement (loop nests after scheduling) of the entry
/// point for head dimension d: `attnc emit --stage halide`.
bool loweredStatement(const Schedule &s, int d, std::string &text, std::string &error);

} // namespace attnc::halide
