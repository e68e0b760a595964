//===- Sema.h - From the AST to a resolved, checked Pattern ---------------===//
//
// Expects: a parsed dsl::Module (it may contain parse errors; Sema skips
// nothing but reports only its own errors).
// Guarantees on success: every name is resolved, every expression has the
// type its context needs, parameters are integers that satisfy every
// `require`, every divisor is >= 1 for all i, j in [0, n), n >= 1, the head
// count is >= 1 and every head has exactly one set. The result holds, per
// head, a Set term with h substituted and `causal` already applied. Every
// term nests at most dsl::kMaxExprNesting levels (one more with `causal`)
// and has at most 65,536 nodes with its lets expanded, and no constant
// arithmetic overflows int64: recursive walks of the terms are bounded.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Inputs.h"
#include "attnc/plan/Score.h"
#include "attnc/plan/Term.h"
#include "attnc/dsl/AST.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

/// A `-D name=value` override from the command line or a host program.
struct Define {
  std::string name;
  int64_t value = 0;
};

/// Parses "name=value" (value a decimal integer, optionally negative).
/// Returns false and sets `error` when the text is malformed.
bool parseDefine(const std::string &text, Define &out, std::string &error);
/// Parses "l=128,c=8" (kernel metadata's form; empty is no define).
bool parseDefineList(const std::string &text, std::vector<Define> &out, std::string &error);

struct ParamValue {
  std::string name;
  int64_t value = 0;
  SourceRange decl;         ///< Where the param statement is.
  bool fromDefine = false;  ///< Overridden with -D.
};

/// The checked meaning of one `pattern` block.
struct Pattern {
  std::string name;
  SourceRange loc;
  std::vector<ParamValue> params; ///< In declaration order.
  /// `input NAME : int[DIMS]` and `input NAME : float[DIMS]`, in
  /// declaration order; Op::Input / InputRow terms (int inputs) and
  /// ScoreOp::Input reads (float inputs) name them by their index here.
  std::vector<InputDecl> inputs;
  /// `score EXPR` / `sink EXPR` (Score.h), typed and with constants folded;
  /// null when the pattern has none. They read only float inputs, and the
  /// sets never read those.
  ScoreRef score, sink;
  bool causal = false;
  SourceRange causalLoc;
  /// One Set term per head (h substituted, causal applied).
  std::vector<TermRef> heads;
  /// Whether the pattern fixes its head count (`heads N` or `head K
  /// attends`). When it does not, its one set applies to any number of heads.
  bool headsDeclared = false;

  int64_t numHeads() const { return static_cast<int64_t>(heads.size()); }
  const ParamValue *param(const std::string &name) const;

  /// Heads grouped by structurally equal sets, in order of first appearance.
  struct Group {
    std::vector<int64_t> heads;
    TermRef set;
  };
  std::vector<Group> distinctHeads() const;
};

struct SemaOptions {
  std::vector<Define> defines;
};

/// Checks every pattern of `module`. Returns them in file order; on error
/// returns the patterns that checked cleanly (diagnostics say why the others
/// did not). A module with no pattern is an error. A define that names no
/// parameter of any pattern is an error.
std::vector<Pattern> analyzeModule(const dsl::Module &module, const dsl::SourceManager &sources,
                                   dsl::DiagnosticEngine &diags, const SemaOptions &options);

} // namespace attnc
