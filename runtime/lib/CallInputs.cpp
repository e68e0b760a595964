//===- CallInputs.cpp - A call's data for a pattern that reads it ---------===//
#include "CallInputs.h"

#include "backends/Backend.h"

#include "attnc/plan/Generators.h"
#include "attnc/support/ThreadPool.h"

#include <cstring>
#include <map>
#include <string>

namespace attnc::rt {

namespace {

[[noreturn]] void bad(const std::string &message) { throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, message}; }

std::string names(const ir::PatternIR &ir) {
  std::string out;
  for (size_t k = 0; k < ir.inputs.size(); ++k)
    out += (k ? ", '" : "'") + ir.inputs[k].name + "'";
  return out;
}

/// How the pattern reads each input: as equality classes, and the smallest
/// key block a selection reads it with (0: none).
struct Uses {
  std::vector<bool> classes;
  std::vector<int64_t> keyBlock;
};

void collectUses(const ir::SetNode &s, Uses &uses) {
  const auto index = static_cast<size_t>(s.input);
  if (s.kind == ir::Gen::Class)
    uses.classes[index] = true;
  if (s.kind == ir::Gen::Select)
    uses.keyBlock[index] = uses.keyBlock[index] ? std::min(uses.keyBlock[index], s.keyBlock) : s.keyBlock;
  for (const ir::SetRef &c : s.children)
    collectUses(*c, uses);
}

int64_t entry(const attnc_tensor &t, int64_t b, int64_t h, int64_t r, int64_t c) {
  const int64_t at = b * t.strides[0] + h * t.strides[1] + r * t.strides[2] + c * t.strides[3];
  if (t.dtype == ATTNC_DTYPE_I32)
    return static_cast<const int32_t *>(t.data)[at];
  return static_cast<const int64_t *>(t.data)[at];
}

} // namespace

std::vector<int64_t> checkFloatInput(const InputDecl &decl, const attnc_tensor &t, int64_t n, int64_t heads) {
  const std::string name = "input '" + decl.name + "'";
  if (t.dtype != ATTNC_DTYPE_F32 && t.dtype != ATTNC_DTYPE_BF16)
    throw RunError{ATTNC_ERROR_DTYPE, name + " is a float input (score / sink): its dtype must be f32 (" +
                                          std::to_string(ATTNC_DTYPE_F32) + ") or bf16 (" +
                                          std::to_string(ATTNC_DTYPE_BF16) + "), not " + std::to_string(t.dtype)};
  const size_t rank = decl.rank();
  std::vector<int64_t> dims;
  std::string want = "[", got = "[";
  bool fits = true;
  for (size_t a = 0; a < 4; ++a) {
    const int64_t dim = a < rank ? inputDim(decl, a, n, heads) : 1;
    if (a < rank)
      dims.push_back(dim);
    fits = fits && t.shape[a] == dim;
    want.append(a ? ", " : "").append(std::to_string(dim));
    got.append(a ? ", " : "").append(std::to_string(t.shape[a]));
  }
  if (!fits)
    throw RunError{ATTNC_ERROR_SHAPE, name + " has shape " + got + "]; at n = " + std::to_string(n) + " with " +
                                          std::to_string(heads) + " query heads it must be " + want +
                                          "] (its declared dimensions, then 1s)"};
  int64_t total = 1;
  for (int64_t dim : dims)
    total *= dim;
  if (!t.data && total > 0)
    bad(name + " has no data");
  for (int a = 0; a < 4; ++a)
    if (t.strides[a] < 0 || (t.strides[a] == 0 && t.shape[a] > 1))
      throw RunError{ATTNC_ERROR_STRIDE, name + " has stride " + std::to_string(t.strides[a]) + " on axis " +
                                             std::to_string(a)};
  return dims;
}

namespace {

/// Float input `decl` given as `t` (checkFloatInput), copied to contiguous f32.
void readFloat(const InputDecl &decl, const attnc_tensor &t, int64_t n, int64_t heads, std::vector<float> &values,
               FloatInput &out) {
  std::vector<int64_t> dims = checkFloatInput(decl, t, n, heads);
  int64_t total = 1;
  for (int64_t dim : dims)
    total *= dim;
  values.resize(static_cast<size_t>(total));
  int64_t e = 0;
  for (int64_t a = 0; a < t.shape[0]; ++a)
    for (int64_t b = 0; b < t.shape[1]; ++b)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        for (int64_t d = 0; d < t.shape[3]; ++d, ++e) {
          const int64_t at = a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + d * t.strides[3];
          if (t.dtype == ATTNC_DTYPE_F32) {
            values[static_cast<size_t>(e)] = static_cast<const float *>(t.data)[at];
          } else {
            const uint32_t bits = uint32_t{static_cast<const uint16_t *>(t.data)[at]} << 16;
            std::memcpy(&values[static_cast<size_t>(e)], &bits, 4);
          }
        }
  out.values = values.data();
  out.dims = std::move(dims);
}

} // namespace

int64_t inputIdLimit(const ir::PatternIR &ir, size_t index, int64_t n) {
  Uses uses{std::vector<bool>(ir.inputs.size(), false), std::vector<int64_t>(ir.inputs.size(), 0)};
  for (const ir::PatternIR::Head &h : ir.heads)
    collectUses(*h.set, uses);
  const int64_t B = uses.keyBlock.at(index);
  return B ? (n + B - 1) / B : 0;
}

void checkInputsGiven(const ir::PatternIR &ir, int64_t count) {
  if (count < 0)
    bad("num_inputs is " + std::to_string(count));
  if (!ir.inputs.empty() && count == 0)
    throw RunError{ATTNC_ERROR_INVALID_ARGUMENT, "pattern '" + ir.name + "' reads the input" +
                                                     (ir.inputs.size() > 1 ? "s " : " ") + names(ir) +
                                                     ", given with every call (attnc_forward / attnc_backward "
                                                     "with attnc_call::inputs)"};
  if (ir.inputs.empty() && count > 0)
    bad("pattern '" + ir.name + "' declares no input, but the call gives " + std::to_string(count));
}

std::vector<const attnc_input *> matchInputs(const ir::PatternIR &ir, const attnc_input *inputs, int64_t count) {
  if (!inputs && count > 0)
    bad("attnc_call::inputs is null but num_inputs is " + std::to_string(count));
  // Match names both ways: every declared input once, nothing else.
  std::vector<const attnc_input *> given(ir.inputs.size(), nullptr);
  for (int64_t k = 0; k < count; ++k) {
    const attnc_input &in = inputs[k];
    if (!in.name)
      bad("input " + std::to_string(k) + " of the call has no name");
    size_t x = 0;
    while (x < ir.inputs.size() && ir.inputs[x].name != in.name)
      ++x;
    if (x == ir.inputs.size())
      bad(std::string("pattern '") + ir.name + "' has no input '" + in.name + "' (it declares " + names(ir) + ")");
    if (given[x])
      bad(std::string("input '") + in.name + "' is given twice");
    given[x] = &in;
  }
  for (size_t x = 0; x < given.size(); ++x)
    if (!given[x])
      bad("input '" + ir.inputs[x].name + "' of pattern '" + ir.name + "' is missing from the call");
  return given;
}

CallInputs::CallInputs(const ir::PatternIR &ir, const attnc_input *inputs, int64_t count, int64_t batch,
                       int64_t heads, int64_t n, int threads)
    : heads_(heads) {
  checkInputsGiven(ir, count);
  if (count == 0)
    return;
  const std::vector<const attnc_input *> given = matchInputs(ir, inputs, count);

  Uses uses{std::vector<bool>(ir.inputs.size(), false), std::vector<int64_t>(ir.inputs.size(), 0)};
  for (const ir::PatternIR::Head &h : ir.heads)
    collectUses(*h.set, uses);

  // Shapes and dtypes, then one array per distinct (batch, head) entry.
  struct Source {
    const attnc_tensor *t;
    int64_t rows, cols;
    size_t first; ///< index of its first array in `arrays`
  };
  std::vector<Source> sources;
  std::vector<std::shared_ptr<InputArray>> arrays;
  std::vector<std::pair<size_t, std::pair<int64_t, int64_t>>> jobs; ///< (input, (b, h))
  floats_.assign(ir.inputs.size(), FloatInput{});
  floatValues_.assign(ir.inputs.size(), {});
  for (size_t x = 0; x < given.size(); ++x) {
    const InputDecl &decl = ir.inputs[x];
    const attnc_tensor &t = given[x]->values;
    const std::string name = "input '" + decl.name + "'";
    if (decl.isFloat) {
      readFloat(decl, t, n, heads, floatValues_[x], floats_[x]);
      sources.push_back({nullptr, 0, 0, arrays.size()});
      continue;
    }
    if (t.dtype != ATTNC_DTYPE_I32 && t.dtype != ATTNC_DTYPE_I64)
      throw RunError{ATTNC_ERROR_DTYPE, name + " has dtype " + std::to_string(t.dtype) + "; inputs are int32 (" +
                                            std::to_string(ATTNC_DTYPE_I32) + ") or int64 (" +
                                            std::to_string(ATTNC_DTYPE_I64) + ")"};
    const int64_t rows = inputDim(decl, 0, n), cols = decl.rank() == 2 ? inputDim(decl, 1, n) : 1;
    const std::string want = "[" + std::string(batch > 1 ? "1 or " + std::to_string(batch) : "1") + ", " +
                             (heads > 1 ? "1 or " + std::to_string(heads) : "1") + ", " + std::to_string(rows) +
                             ", " + std::to_string(cols) + "]";
    const bool fits = (t.shape[0] == 1 || t.shape[0] == batch) && (t.shape[1] == 1 || t.shape[1] == heads) &&
                      t.shape[2] == rows && t.shape[3] == cols;
    if (!fits)
      throw RunError{ATTNC_ERROR_SHAPE, name + " has shape [" + std::to_string(t.shape[0]) + ", " +
                                            std::to_string(t.shape[1]) + ", " + std::to_string(t.shape[2]) + ", " +
                                            std::to_string(t.shape[3]) + "]; at n = " + std::to_string(n) +
                                            " it must be " + want + " ([batch, heads, dims])"};
    if (!t.data && rows * cols > 0)
      bad(name + " has no data");
    for (int a = 0; a < 4; ++a)
      if (t.strides[a] < 0 || (t.strides[a] == 0 && t.shape[a] > 1))
        throw RunError{ATTNC_ERROR_STRIDE, name + " has stride " + std::to_string(t.strides[a]) + " on axis " +
                                               std::to_string(a)};
    sources.push_back({&t, rows, cols, arrays.size()});
    for (int64_t b = 0; b < t.shape[0]; ++b)
      for (int64_t h = 0; h < t.shape[1]; ++h) {
        jobs.push_back({x, {b, h}});
        arrays.push_back(std::make_shared<InputArray>());
      }
  }

  // Copy, check ranges and index classes: every array of every input in parallel.
  support::parallelFor(static_cast<int64_t>(jobs.size()), threads, [&](int, int64_t job) {
    const auto &[x, bh] = jobs[static_cast<size_t>(job)];
    const Source &src = sources[x];
    const InputDecl &decl = ir.inputs[x];
    InputArray &a = *arrays[static_cast<size_t>(job)];
    a.name = decl.name;
    a.rank = static_cast<int>(decl.rank());
    a.bound = true;
    a.rows = src.rows;
    a.cols = decl.rank() == 2 ? src.cols : 1;
    a.values.resize(static_cast<size_t>(src.rows * src.cols));
    // A selection's ids name key blocks (or tokens): -1 or a block below n.
    const int64_t B = uses.keyBlock[x], limit = B ? (n + B - 1) / B : 0;
    for (int64_t r = 0; r < src.rows; ++r)
      for (int64_t c = 0; c < src.cols; ++c) {
        const int64_t v = entry(*src.t, bh.first, bh.second, r, c);
        if (B && (v < -1 || v >= limit))
          bad("input '" + decl.name + "' holds " + std::to_string(v) + " at [" + std::to_string(bh.first) + ", " +
              std::to_string(bh.second) + ", " + std::to_string(r) + ", " + std::to_string(c) + "]; its entries name " +
              (B == 1 ? "keys" : "key blocks of " + std::to_string(B)) + ", so at n = " + std::to_string(n) +
              " each must lie in [0, " + std::to_string(limit) + ") or be -1 (none)");
        a.values[static_cast<size_t>(r * src.cols + c)] = v;
      }
    if (uses.classes[x])
      a.indexClasses();
  });

  slices_.resize(static_cast<size_t>(batch * heads));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      InputArrays &slice = slices_[static_cast<size_t>(b * heads + h)];
      for (size_t x = 0; x < sources.size(); ++x) {
        const Source &src = sources[x];
        if (!src.t) { // (a float input: read by the score, not by the sets)
          slice.push_back(unboundInput(ir.inputs[x]));
          continue;
        }
        const int64_t bi = src.t->shape[0] == 1 ? 0 : b, hi = src.t->shape[1] == 1 ? 0 : h;
        slice.push_back(arrays[src.first + static_cast<size_t>(bi * src.t->shape[1] + hi)]);
      }
    }
}

} // namespace attnc::rt
