//===- Backend.h - What the runtime asks of a backend ---------------------===//
//
// A loaded kernel holds one Backend object, made by the registry
// (Registry.cpp) from the kernel file's "backend" metadata. The C ABI layer
// (Runtime.cpp) owns everything backends share: argument checks, packing
// strided or bf16 slices into contiguous f32 and back, the per-n cache and
// the thread pool. A backend says only:
//
//   prepare     what calls at sequence length n need (row blocks, a CSR),
//               built once per (n, variant) and kept by the kernel;
//   runSlice    how it computes one (batch, head) slice from them;
//   threading   whether slices run side by side (each with its own
//               scratch) or one after another with every thread inside.
//
// A new backend is one file defining a factory, plus one line in the
// registry's table. Backends report failures by throwing RunError.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"
#include "attnc/format/KernelFile.h"
#include "attnc/plan/PatternIR.h"
#include "attnc/plan/Plan.h"
#include "attnc/plan/Score.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnc::rt {

/// A failure with the status code the C ABI returns for it.
struct RunError {
  attnc_status status;
  std::string message;
};

/// What every backend is made from: the decoded kernel file and its
/// pattern's canonical IR (rebuilt from the file's IR text).
struct LoadedKernel {
  const format::KernelFile &file;
  const ir::PatternIR &ir;
};

/// A backend's state for one sequence length, shared by concurrent calls.
struct LengthState {
  virtual ~LengthState() = default;
  /// What it holds in memory, for the kernel's cache budget.
  virtual size_t bytes() const { return 0; }
};

/// A worker's scratch, reused across the slices and calls it runs.
struct Scratch {
  virtual ~Scratch() = default;
};

/// One (batch, head) slice, contiguous row-major f32: k and v [n, d]; q and
/// o [n - firstRow, d], the queries at positions firstRow .. n - 1.
struct Slice {
  const float *q, *k, *v;
  float *o;
  int64_t n, d;
  int64_t set; ///< the head's distinct set (index into ir.heads)
  float scale;
  float *lse = nullptr; ///< n - firstRow floats: each row's log-sum-exp (-inf when empty), when not null
  /// Positions before the first query: 0 unless the backend takes row
  /// ranges (Backend::takesRowRange); the runtime pads the others' slices.
  int64_t firstRow = 0;
  /// Rows [0, skipRows) and [endRows, n) are zero rows the runtime padded
  /// the queries with (fewer queries than keys, not a row range): their
  /// outputs are dropped, so a backend may leave them uncomputed.
  int64_t skipRows = 0;
  int64_t endRows = std::numeric_limits<int64_t>::max();
  /// bf16 inputs left as bf16, contiguous row-major [n, d], when the backend
  /// takes them (Backend::takesBf16, or takesBf16Rows for a row range); q,
  /// k and v are null then.
  const uint16_t *qb = nullptr, *kb = nullptr, *vb = nullptr;
  /// A pattern that reads data: the arrays this slice binds (CallInputs),
  /// else null.
  const InputArrays *inputs = nullptr;
  /// The query head (a score modifier's h) and the call's float inputs
  /// (indexed like the pattern's inputs; null when it has none).
  int64_t head = 0;
  const std::vector<FloatInput> *floats = nullptr;
  /// Keys held at positions (attnc_call::key_positions; null: the keys are
  /// positions 0 .. n - 1): heldCount ascending positions below n, k and v
  /// heldCount rows, and the queries positions [firstRow, endRows), q, o
  /// and lse endRows - firstRow rows. Only backends that take row ranges
  /// get such slices.
  const int64_t *heldKeys = nullptr;
  int64_t heldCount = 0;
};

/// One slice of a backward pass: the forward's inputs, O, dO and lse in;
/// dQ, dK, dV out. Contiguous row-major f32: k, v, dk, dv [n, d]; q, o, dO,
/// dq [n - firstRow, d] and lse n - firstRow floats, the queries at
/// positions firstRow .. n - 1.
struct GradSlice {
  const float *q, *k, *v, *o, *dO, *lse;
  float *dq, *dk, *dv;
  int64_t n, d;
  int64_t set;
  float scale;
  /// Positions before the first query: 0 unless the backend takes row
  /// ranges (Backend::takesRowRange), as in Slice. With 0, dq, dk and dv
  /// are overwritten; with firstRow > 0 dq is overwritten and dk and dv are
  /// added to (the runtime clears them once per key/value head, and the
  /// group's query heads sum into them in place).
  int64_t firstRow = 0;
  /// Rows [0, skipRows) and [endRows, n) are zero rows the runtime padded
  /// the queries with (q, o, dO and lse 0): they add nothing to dK or dV and
  /// their dQ is dropped, so a backend may leave them uncomputed.
  int64_t skipRows = 0;
  int64_t endRows = std::numeric_limits<int64_t>::max();
  /// bf16 keys and values left as bf16, [n, d], in a row-range slice of a
  /// backend that takes them (Backend::takesBf16Rows); k and v are null
  /// then. q, o and dO arrive widened to f32: they are only the query rows.
  const uint16_t *kb = nullptr, *vb = nullptr;
  /// As Slice::inputs, head and floats.
  const InputArrays *inputs = nullptr;
  int64_t head = 0;
  const std::vector<FloatInput> *floats = nullptr;
  /// A score modifier's float-input gradients are added here (floatOffsets
  /// of `floats`), when not null.
  double *inputGrad = nullptr;
};

enum class Threading {
  Slices,  ///< slices side by side; a slice gets threads of its own only when there are fewer slices than threads
  Inside,  ///< one slice at a time, every thread inside it (the backend runs its own parallel loops)
};

/// The pass a prepared state is for: a backend may run the backward pass
/// on other tiles than the forward.
enum class Pass { Forward, Backward };

class Backend {
public:
  virtual ~Backend() = default;

  /// The name kernel files give it ("fused").
  virtual const char *name() const = 0;

  /// Whether runSlice fills Slice::lse.
  virtual bool writesLse() const { return false; }
  /// Whether runBackwardSlice is implemented.
  virtual bool hasBackward() const { return false; }
  /// Whether runSlice computes on bf16 inputs directly (Slice::qb, kb, vb)
  /// for head dimension d on this CPU; otherwise they are widened to f32.
  virtual bool takesBf16(int64_t d) const { return false; }
  /// Whether runSlice computes `rows` queries at the end of n positions
  /// itself (Slice::firstRow = n - rows), then with no per-n state, and so
  /// does runBackwardSlice (GradSlice::firstRow) when hasBackward().
  /// Otherwise the runtime gives it n rows, the first n - rows of them
  /// zero, and drops those (in the backward pass zero rows of Q, O and dO
  /// add nothing to dK and dV).
  virtual bool takesRowRange(int64_t rows, int64_t n) const { return false; }
  /// Whether such a row-range slice takes bf16 inputs as they are
  /// (Slice::qb, kb, vb; GradSlice::kb, vb) on any CPU.
  virtual bool takesBf16Rows() const { return false; }

  /// Identifies what a pass with head dimension d runs on (e.g. a plan tuned
  /// for d, or the backward's own): prepared states are cached per
  /// (n, variant(d, pass)), so passes that run on the same share one.
  virtual const void *variant(int64_t d, Pass pass) const { return nullptr; }

  /// What the pass at length n with head dimension d needs; `threads` may
  /// build it in parallel.
  virtual std::shared_ptr<const LengthState> prepare(int64_t n, int64_t d, Pass pass, int threads) const = 0;

  virtual std::unique_ptr<Scratch> newScratch() const = 0;

  virtual Threading threading() const { return Threading::Slices; }

  /// Called once per run before its slices, with the run's thread count.
  virtual void beginRun(int threads) const {}

  /// Computes one slice; `threads` > 1 lets it split the slice.
  virtual void runSlice(const LengthState &state, const Slice &slice, Scratch &scratch,
                        int threads) const = 0;

  /// Computes one slice's gradients (backends with hasBackward()).
  virtual void runBackwardSlice(const LengthState &state, const GradSlice &slice, Scratch &scratch,
                                int threads) const {
    throw RunError{ATTNC_ERROR_UNSUPPORTED, std::string("the ") + name() + " backend has no backward pass"};
  }
};

/// The backend a kernel file names, its code loaded. Throws RunError (an
/// unknown name, a backend this runtime was built without, bad code).
std::unique_ptr<Backend> makeBackend(const LoadedKernel &kernel);

// Shared by the backends' files.

/// A forward plan and, where the kernel's grad_tile_rows differ from its
/// rows, the backward pass's: the same pieces on blocks of those rows
/// (plan::gradTileRows).
struct PassPlans {
  plan::Plan forward;
  std::optional<plan::Plan> backward;
  const plan::Plan &of(Pass pass) const { return pass == Pass::Backward && backward ? *backward : forward; }
};

/// The plans of a plan-driven kernel (fused, dense, halide) from its pattern
/// and tile metadata, and those of the shapes tuned per d (`tuned_tiles`).
/// Throws RunError on bad metadata.
struct KernelPlans {
  PassPlans base;
  std::vector<std::pair<int64_t, PassPlans>> tuned;
  /// The plans a call with head dimension d runs: d's tuned shape if any.
  const PassPlans &forDim(int64_t d) const {
    for (const auto &[tunedD, p] : tuned)
      if (tunedD == d)
        return p;
    return base;
  }
};
KernelPlans kernelPlans(const LoadedKernel &kernel);

/// The kernel file's native code, loaded from an anonymous memory file
/// (nothing is written to disk) and closed with the object.
class NativeCode {
public:
  /// Throws RunError when the file has no code or it cannot be loaded.
  explicit NativeCode(const format::KernelFile &file);
  ~NativeCode();
  NativeCode(const NativeCode &) = delete;
  NativeCode &operator=(const NativeCode &) = delete;
  void *handle() const { return library_; }
  /// The address of `name`, or throws RunError (corrupt kernel).
  void *symbol(const std::string &name) const;

private:
  void *library_ = nullptr;
  int memfd_ = -1;
};

/// The longest sequence the row-block backends take (32-bit key positions).
void checkKeysFit32Bits(int64_t n);

} // namespace attnc::rt
