//===- SparsifierBackend.cpp - Native code from MLIR's sparsifier ---------===//
//
// Backend "sparsifier" (the reference backend): the kernel file carries a
// shared object with one entry point per distinct head set,
// `attnc_head_<k>(const attnc_head_args *)` (format/KernelAbi.h), compiled
// from sparse_tensor MLIR. Per n, each set's connectivity is a CSR; a worker
// keeps the score values and row scratch the code writes into. A pattern that
// reads data has its CSR assembled per slice, from the call's arrays (the
// code is the same: it reads whatever CSR it is given).
//
//===----------------------------------------------------------------------===//
#include "Backend.h"

#include "attnc/format/KernelAbi.h"
#include "attnc/plan/Csr.h"

#include <algorithm>

namespace attnc::rt {

namespace {

struct CsrState : LengthState {
  std::vector<ir::Csr> sets;
};

struct SparsifierWorker : Scratch {
  std::vector<float> values, rows;
  ir::Csr csr; ///< a slice's own rows, for a pattern that reads data
};

class SparsifierBackend final : public Backend {
public:
  explicit SparsifierBackend(const LoadedKernel &kernel) : ir_(kernel.ir), code_(kernel.file) {
    for (size_t k = 0; k < ir_.heads.size(); ++k)
      entries_.push_back(reinterpret_cast<attnc_head_fn>(code_.symbol("attnc_head_" + std::to_string(k))));
  }

  std::shared_ptr<const LengthState> prepare(int64_t n, int64_t d, Pass, int threads) const override {
    auto state = std::make_shared<CsrState>();
    if (ir_.readsData()) // each slice's CSR comes from its data
      return state;
    for (const auto &head : ir_.heads) {
      ir::Csr csr;
      std::string error;
      if (!ir::buildCsr(head.set, n, csr, error))
        throw RunError{ATTNC_ERROR_SHAPE, error};
      state->sets.push_back(std::move(csr));
    }
    return state;
  }

  const char *name() const override { return "sparsifier"; }

  std::unique_ptr<Scratch> newScratch() const override { return std::make_unique<SparsifierWorker>(); }

  void runSlice(const LengthState &state, const Slice &s, Scratch &scratch, int threads) const override {
    auto &w = static_cast<SparsifierWorker &>(scratch);
    if (s.inputs) {
      std::string error;
      if (!ir::buildCsr(ir::bindSet(ir_.heads[static_cast<size_t>(s.set)].set, *s.inputs), s.n, w.csr, error))
        throw RunError{ATTNC_ERROR_SHAPE, error};
    }
    const ir::Csr &csr = s.inputs ? w.csr : static_cast<const CsrState &>(state).sets[static_cast<size_t>(s.set)];
    w.values.resize(static_cast<size_t>(std::max<int64_t>(1, csr.nnz())));
    w.rows.resize(static_cast<size_t>(3 * s.n));
    attnc_head_args args{s.q, s.k, s.v, s.o, s.n, s.d, csr.pos.data(), csr.crd.data(), csr.nnz(),
                         w.values.data(), w.rows.data(), s.scale};
    entries_[static_cast<size_t>(s.set)](&args);
  }

private:
  const ir::PatternIR &ir_; ///< owned by the kernel, which outlives its backend
  NativeCode code_;
  std::vector<attnc_head_fn> entries_;
};

} // namespace

std::unique_ptr<Backend> makeSparsifierBackend(const LoadedKernel &kernel) {
  return std::make_unique<SparsifierBackend>(kernel);
}

} // namespace attnc::rt
