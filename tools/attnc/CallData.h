//===- CallData.h - The data a pattern that reads some is run with --------===//
//
// `--input NAME=FILE.npy` for attnc run, analyze and show: int32 or int64
// arrays matched to the pattern's `input` declarations by name, each of
// shape DIMS (every sequence and head shares it), [B, DIMS] (one per batch
// entry) or [B, H, DIMS] (one per batch entry and query head). attnc run
// --random draws the inputs it is not given from its seed.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/plan/Inputs.h"
#include "attnc/plan/PatternIR.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace attnc::tool {

/// One `--input NAME=FILE.npy`.
struct InputFile {
  std::string name, path;
};

/// Parses "NAME=FILE"; returns why not (empty when it is one).
std::string parseInputFlag(const std::string &text, InputFile &out);

/// What a declaration asks of its array at a length.
struct InputSpec {
  std::string name;
  int rank = 1;
  int64_t rows = 0, cols = 1;
  int64_t idLimit = 0; ///< > 0: entries are ids in [-1, idLimit) (a selection's)
};

/// The declarations of a kernel's pattern at key length n (attnc_kernel_input).
std::vector<InputSpec> kernelInputs(const attnc_kernel *kernel, int64_t n);
/// The same from a pattern's IR.
std::vector<InputSpec> patternInputs(const ir::PatternIR &ir, int64_t n);

/// The arrays of one call, [B', H', rows, cols] with B' in {1, B}, H' in {1, H}.
struct CallData {
  std::vector<InputSpec> specs;
  std::vector<std::vector<int64_t>> values;
  std::vector<std::array<int64_t, 4>> shapes;
  bool empty() const { return specs.empty(); }
  /// The ABI's views of the arrays (valid while this lives).
  std::vector<attnc_input> views() const;
  /// Slice (b, h)'s arrays for the pattern IR's evaluators (classes indexed).
  InputArrays slice(int64_t b, int64_t h) const;
};

/// Reads each --input file for `specs`, or, with `drawMissing`, draws the
/// inputs not given from `seed` (1-D: values in [0, 64), as buckets or
/// documents; ids: uniform in [0, idLimit)). A leading batch or head
/// dimension must be 1 or `batch` / `heads` (-1: any). Prints the error and
/// returns false on a missing, unknown, unreadable or misshapen input.
bool loadCallData(const std::vector<InputSpec> &specs, const std::vector<InputFile> &files, int64_t batch,
                  int64_t heads, bool drawMissing, uint64_t seed, CallData &out);

/// attnc analyze and show: binds each head set of `ir` to --input's arrays
/// (batch entry 0, the set's first head), so that every analysis counts
/// that data (`bound`: whether it read data and was given it). Prints the
/// error and returns false when the files do not fit.
bool bindPatternData(ir::PatternIR &ir, const std::vector<std::string> &inputFlags, int64_t n, bool &bound);

} // namespace attnc::tool
