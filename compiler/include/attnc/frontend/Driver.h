//===- Driver.h - The front-end pipeline in one place ---------------------===//
//
// The stages in order, as `attnc emit --stage` names them:
//
//   source --parse--> AST --sema--> Pattern (Terms) --canonicalize--> IR
//     IR --plan--> pieces and tiles (fused backend, executed by the runtime)
//     IR --lower--> MLIR sparse tensor --> LLVM IR --> asm / native code
//
// A Frontend owns the source buffers and the diagnostics of one run and
// drives the first three stages.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"
#include "attnc/frontend/Sema.h"
#include "attnc/dsl/AST.h"

#include <optional>
#include <string>

namespace attnc {

enum class Stage { Ast, Ir, Plan, Halide, Cuda, Mlir, Llvm, Asm };

/// Kebab-case stage names, in pipeline order.
const char *stageName(Stage stage);
std::optional<Stage> parseStage(const std::string &name);

class Frontend {
public:
  Frontend() : diags_(sources_) {}
  Frontend(const Frontend &) = delete;
  Frontend &operator=(const Frontend &) = delete;

  /// Reads and parses a file. Returns false on a read or parse error.
  bool parseFile(const std::string &path);
  /// Parses source text given a display name.
  bool parseString(const std::string &name, const std::string &text);
  /// Runs Sema on every pattern of the parsed module.
  bool analyze(const SemaOptions &options);
  /// The pattern called `name`, or the first one when `name` is empty.
  /// Reports an error and returns nullptr when there is no such pattern.
  const Pattern *select(const std::string &name);

  const dsl::Module &module() const { return module_; }
  const std::vector<Pattern> &patterns() const { return patterns_; }
  dsl::SourceManager &sources() { return sources_; }
  const dsl::SourceManager &sources() const { return sources_; }
  dsl::DiagnosticEngine &diags() { return diags_; }
  /// Text of the parsed buffer (for hashing into kernel metadata).
  std::string_view sourceText() const { return sources_.text(module_.buffer); }

private:
  dsl::SourceManager sources_;
  dsl::DiagnosticEngine diags_;
  dsl::Module module_;
  std::vector<Pattern> patterns_;
};

} // namespace attnc
