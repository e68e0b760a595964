//===- ScoreProgram.h - A score or sink expression as vector code ---------===//
//
// A pattern's `score EXPR` (and `sink EXPR`) is compiled, once per slice
// (its head h, length n and float inputs known), into straight-line code
// over lanes: each lane one (query, key) pair of a tile (a row, for a sink).
// Compiling folds everything that is uniform over the slice (h, n,
// parameters, reads like slope[h] with constant indices) into constants,
// shares common subexpressions and, for the backward pass, appends the
// derivatives: by s (the chain rule's dS) and by every input entry the
// expression reads (the float inputs' gradients). The tile kernels run the
// code on a whole tile's lanes at a time (runScoreLanes, compiled per
// instruction set with the tile kernels): no per-pair dispatch, no libm
// call per element (tanh, exp and log are polynomials with bounded error).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"
#include "attnc/plan/Score.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnc::rt {

struct ScoreCode {
  enum Kind : uint8_t {
    Add, Sub, Mul, Div, Neg, Abs, Min, Max, Tanh, Exp, Log, Floor, IDiv, Mod, Where,
    Lt, Le, Gt, Ge, Eq, Ne, And, Or, Not, Read,
    Lookup, ///< tables[read][a + offset]: a subexpression of the distance i - j, tabulated (a = i - j, also
            ///< rowPos - keyPos of ScoreLanes where those are set)
    Rel,    ///< i - j (a = +1) or j - i (a = -1) from ScoreLanes' row and key positions
    Fma,    ///< a * b + c
    CapTanh, ///< c * tanh(b * a) (b, c constants: soft-capping's cap * tanh(s / cap))
  };
  struct Instr {
    Kind kind;
    int16_t out, a = -1, b = -1, c = -1; ///< slots (Read: a, b, c its indices)
    int16_t read = -1;                   ///< Read: index into reads
    int16_t guard = -1;                  ///< Read: the slot of the condition it is evaluated under (-1: always)
  };
  /// An input an instruction gathers from.
  struct ReadOf {
    int64_t input = -1;
    const float *values = nullptr;
    std::vector<int64_t> dims;
  };
  /// An entry of a float input the backward pass differentiates by: at a
  /// fixed place (`flat` >= 0: slope[h]), or where Read `read` reads it.
  struct Grad {
    int64_t input = -1;
    int64_t flat = -1;
    int16_t read = -1;
    int16_t deriv = -1; ///< slot of d(value) / d(that entry)
  };

  static constexpr int kMaxLanes = 256; ///< lanes per run: few runs per tile, slots still in L1
  static constexpr int16_t kS = 0, kI = 1, kJ = 2, kFirstConst = 3;

  std::vector<Instr> code;
  std::vector<float> consts; ///< slots kFirstConst ..
  std::vector<ReadOf> reads;
  std::vector<Grad> grads;   ///< backward only
  /// Lookup's tables: entry t is the value at distance i - j = t - (n - 1).
  std::vector<std::vector<float>> tables;
  /// Backward: a table that reads float inputs (T5's rel[h, bucket(j - i)])
  /// has no reads left in the code, so its gradient goes by distance: each
  /// lane adds d(value)/d(entry) (slot `deriv`) times its weight at
  /// grad[at + (i - j) + n - 1] (the distance in slot `index`), and
  /// foldTableGrads turns those 2n - 1 sums into the inputs' gradients once
  /// per slice, through `sub` (the table's own code, with its derivatives).
  struct TableGrad {
    int16_t table = -1, index = -1, deriv = -1;
    int64_t at = 0;
    std::shared_ptr<const ScoreCode> sub;
  };
  std::vector<TableGrad> tableGrads;
  /// Per table, the distances at which it reads outside an input (empty:
  /// none), and its own code: a live pair at such a distance runs that code
  /// on its own lane, which throws the read's InputError naming the pair.
  std::vector<std::vector<uint8_t>> tableBad;
  std::vector<std::shared_ptr<const ScoreCode>> tableCode;
  /// Per table with such distances: the first and last good entry, and
  /// whether bad ones lie between them too (else a distance is good exactly
  /// inside [first, last]: one compare per key of a row block).
  struct Good {
    int32_t first = 0, second = 0;
    bool holes = false;
  };
  std::vector<Good> tableGood;
  /// Whether the backward pass has input gradients to sum (accumulateScoreGrads).
  bool hasInputGrads() const { return !grads.empty() || !tableGrads.empty(); }
  /// Whether the kernels must say which lanes are pairs (ScoreLanes::live):
  /// reads, or tables with distances outside an input.
  bool checksLanes() const {
    if (!reads.empty())
      return true;
    for (const auto &bad : tableBad)
      if (!bad.empty())
        return true;
    return false;
  }
  int numSlots = kFirstConst;
  int16_t value = kS;        ///< slot of the expression's value
  int16_t dValue = -1;       ///< backward: slot of d(value) / ds
  bool usesI = false, usesJ = false; ///< the i and j slots (not Rel's positions)
  bool usesRel = false;               ///< ScoreLanes' rowPos and keyPos
  bool valueLast = false;             ///< the last instruction computes the value (ScoreLanes::out may take it)
  /// The score is soft-capping alone, capPost * tanh(capPre * s) (Gemma 2's cap * tanh(s / cap)): the
  /// tile kernels apply it (and, backward, its derivative capPre * capPost * (1 - tanh^2)) to the scores
  /// in registers instead of running the code, which stays for the row-by-row paths.
  bool inlineCap = false;
  float capPre = 0, capPost = 0;
  /// The score is s plus a table of the distance i - j alone (T5's rel[h, bucket(i - j)] or ALiBi's
  /// slope[h] * (j - i) once tabulated): table `inlineBias` (-1: not this form), added to the scores in registers; backward,
  /// each pair's dS' is added to the table's sums by distance at `biasGradAt` (-1: none asked for).
  int16_t inlineBias = -1;
  int64_t biasGradAt = -1;
  /// The table is X * (i - j) or X * (j - i) with X free of the distance (ALiBi's slope[h] * (j - i)):
  /// every derivative of it is linear in the distance, so its sums by distance fold to the same
  /// gradients as their first moment, sum(dS' * (i - j)), alone at distance 1 (the tile kernels sum
  /// it in registers).
  bool biasLinear = false;
  /// The input names, for messages.
  std::vector<std::string> names;
  /// Unique per compiled code: scratch whose constant slots were filled for
  /// this id need no refill (an address could be reused by the next slice's).
  uint64_t id = 0;
};

/// Fills `slots` for `code` unless `filledFor` says they hold its constants.
void bindScoreSlots(const ScoreCode &code, std::vector<float> &slots, uint64_t &filledFor);

/// Where each float input's entries start in one flat array of them all
/// (int inputs take none); returns the total.
int64_t floatOffsets(const std::vector<FloatInput> &inputs, std::vector<int64_t> &offsets);

/// Compiles `expr` for head h at length n (reads bound to `inputs`, indexed
/// like the pattern's declarations). With `backward`, the derivatives too.
/// With a `tables` runner (scoreRunner()), integer subexpressions of the
/// distance i - j alone are tabulated over the 2n - 1 distances, computed by
/// it (worth it when the call computes many more pairs than that: not for a
/// few decoding rows). Reads at constant places outside an input throw
/// InputError.
using ScoreRunner = void (*)(const struct ScoreCode &, const struct ScoreLanes &);
ScoreCode compileScore(const ScoreExpr &expr, const ir::PatternIR &ir, int64_t h, int64_t n,
                       const std::vector<FloatInput> &inputs, bool backward, ScoreRunner tables = nullptr);

/// A readable listing of the compiled code (`attnc emit`).
std::string scoreListing(const ScoreCode &code);

/// What one run of a ScoreCode works on: `slots` holds numSlots x kMaxLanes
/// floats (slot k's lanes at k * kMaxLanes); the caller fills the s, i and j
/// slots' first `lanes` lanes (i and j as floats, when used) and, where
/// reads must be checked, `live` (nonzero: a pair of the pattern; reads of
/// other lanes are clamped, never checked). Constant slots are filled by
/// prepareScoreSlots once per code.
struct ScoreLanes {
  float *slots;
  int lanes;
  const uint8_t *live = nullptr;
  /// Where not null, the s lanes are read from here (not the s slot).
  const float *s = nullptr;
  /// For Rel: lane l is row l % width (position rowPos[l % width]) of key
  /// l / width (position keyPos[l / width]).
  const float *rowPos = nullptr, *keyPos = nullptr;
  int width = 1;
  /// Where not null and the code's valueLast, the value goes here (not to
  /// its slot); it may be `s` itself.
  float *out = nullptr;
  /// Where not null, a read outside its input sets its lane's byte here
  /// (and reads 0) instead of throwing, live or not: tabulating a table.
  uint8_t *outside = nullptr;
  /// Slot k's lanes, as the code reads them.
  const float *slot(int16_t k) const { return k == ScoreCode::kS && s ? s : slots + k * ScoreCode::kMaxLanes; }
};

/// Fills the constant slots of `slots` (sized for code).
void prepareScoreSlots(const ScoreCode &code, std::vector<float> &slots);

/// Runs the code on the lanes (the best instruction set of this CPU, as
/// the tile kernels choose it). A live lane reading outside an input
/// throws InputError naming it.
ScoreRunner scoreRunner();

/// Throws the InputError of a read outside input `read` of `code` at index
/// values idx (and the pair's i, j when known: -1 otherwise).
[[noreturn]] void throwScoreRead(const ScoreCode &code, int read, const int64_t *idx, int64_t i, int64_t j);

/// Adds sum over lanes of weight[l] * d(value)/d(entry) into grad (the
/// float inputs' entries, flat, each input at offsets[input]) for every
/// Grad of the code, and into its tables' per-distance sums (TableGrad::at,
/// past the inputs' entries); lanes with weight 0 add nothing.
void accumulateScoreGrads(const ScoreCode &code, const ScoreLanes &lanes, const float *weight,
                          const std::vector<int64_t> &offsets, double *grad);

/// How many doubles the gradient sums of `code` take: the float inputs'
/// entries (floatOffsets), then each TableGrad's 2n - 1 distances.
int64_t scoreGradSize(const ScoreCode &code, const std::vector<FloatInput> &inputs);

/// Adds the tables' per-distance sums in grad into the float inputs'
/// entries of grad (once per slice, after every pair has added its share),
/// running each table's code on the distances with `runner`.
void foldTableGrads(const ScoreCode &code, const std::vector<int64_t> &offsets, double *grad, ScoreRunner runner);

} // namespace attnc::rt
