//===- CallData.h - The data a pattern that reads some is run with --------===//
//
// `--input NAME=FILE.npy` for attnc run, analyze and show, matched to the
// pattern's `input` declarations by name. An int input (`input NAME :
// int[DIMS]`, read by the sets) is an int32 or int64 array of shape DIMS
// (every sequence and head shares it), [B, DIMS] (one per batch entry) or
// [B, H, DIMS] (one per batch entry and query head). A float input (`input
// NAME : float[DIMS]`, read by `score` and `sink`) is a float32 or float64
// array (read as float32) of exactly DIMS at the call's length and query
// heads: the whole call shares it. attnc run --random draws the inputs it is
// not given from its seed. Float inputs never change which pairs a pattern
// attends, so analyze and show neither need nor read them.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/plan/Inputs.h"
#include "attnc/plan/PatternIR.h"
#include "attnc/plan/Score.h"

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

/// What a declaration asks of its array at a length (and, for a float
/// input, a head count).
struct InputSpec {
  std::string name;
  int rank = 1;
  int64_t rows = 0, cols = 1; ///< an int input's dimensions (cols = 1 for a 1-D one)
  int64_t idLimit = 0; ///< > 0: entries are ids in [-1, idLimit) (a selection's)
  bool isFloat = false; ///< `input NAME : float[DIMS]`: read by score / sink
  std::vector<int64_t> dims; ///< the declared dimensions (rank of them), int and float inputs alike
};

/// The declarations of a kernel's pattern at key length n and `heads` query
/// heads (attnc_kernel_input_info).
std::vector<InputSpec> kernelInputs(const attnc_kernel *kernel, int64_t n, int64_t heads = 1);
/// The same from a pattern's IR.
std::vector<InputSpec> patternInputs(const ir::PatternIR &ir, int64_t n, int64_t heads = 1);

/// The arrays of one call: an int input's [B', H', rows, cols] with B' in
/// {1, B}, H' in {1, H}; a float input's declared dimensions.
struct CallData {
  std::vector<InputSpec> specs;
  std::vector<std::vector<int64_t>> values; ///< int inputs (empty for a float one)
  std::vector<std::vector<float>> reals;    ///< float inputs (empty for an int one, or one not read)
  std::vector<std::array<int64_t, 4>> shapes;
  bool empty() const { return specs.empty(); }
  /// The ABI's views of the arrays (valid while this lives).
  std::vector<attnc_input> views() const;
  /// Slice (b, h)'s arrays for the pattern IR's evaluators (classes indexed;
  /// float inputs, which no set reads, unbound).
  InputArrays slice(int64_t b, int64_t h) const;
  /// The float inputs for plan/Score.h's evalScore, indexed like the specs
  /// (int inputs' entries empty).
  std::vector<FloatInput> floatInputs() const;
};

/// Reads each --input file for `specs`, or, with `drawMissing`, draws the
/// inputs not given from `seed` (1-D int inputs: values in [0, 64), as
/// buckets or documents; ids: uniform in [0, idLimit); float inputs: normal
/// with standard deviation 0.5). A leading batch or head dimension of an int
/// input must be 1 or `batch` / `heads` (-1: any); a float input has exactly
/// its dimensions. With `skipFloats` (analyze, show) float inputs are neither
/// read nor needed. Prints the error and returns false on a missing,
/// unknown, unreadable or misshapen input.
bool loadCallData(const std::vector<InputSpec> &specs, const std::vector<InputFile> &files, int64_t batch,
                  int64_t heads, bool drawMissing, uint64_t seed, CallData &out, bool skipFloats = false);

/// attnc analyze and show: binds each head set of `ir` to --input's arrays
/// (batch entry 0, the set's first head), so that every analysis counts
/// that data (`bound`: whether it read data and was given it). Float inputs
/// do not change the sets: files given for them are noted and not read.
/// Prints the error and returns false when the files do not fit.
bool bindPatternData(ir::PatternIR &ir, const std::vector<std::string> &inputFlags, int64_t n, bool &bound);

} // namespace attnc::tool
