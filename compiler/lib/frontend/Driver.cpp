//===- Driver.cpp - The front-end pipeline in one place -------------------===//
#include "attnc/frontend/Driver.h"

#include "attnc/dsl/Parser.h"

namespace attnc {

static constexpr std::pair<Stage, const char *> kStages[] = {
    {Stage::Ast, "ast"}, {Stage::Ir, "ir"}, {Stage::Plan, "plan"}, {Stage::Halide, "halide"}, {Stage::Cuda, "cuda"},
    {Stage::Mlir, "mlir"},
    {Stage::Llvm, "llvm"}, {Stage::Asm, "asm"}};

const char *stageName(Stage stage) {
  for (auto [s, name] : kStages)
    if (s == stage)
      return name;
  return "?";
}

std::optional<Stage> parseStage(const std::string &name) {
  for (auto [s, n] : kStages)
    if (name == n)
      return s;
  return std::nullopt;
}

bool Frontend::parseFile(const std::string &path) {
  std::string error;
  uint32_t buffer = sources_.addFile(path, error);
  if (!buffer) {
    diags_.error({}, error);
    return false;
  }
  module_ = dsl::parse(sources_, buffer, diags_);
  return !diags_.hasErrors();
}

bool Frontend::parseString(const std::string &name, const std::string &text) {
  uint32_t buffer = sources_.addBuffer(name, text);
  module_ = dsl::parse(sources_, buffer, diags_);
  return !diags_.hasErrors();
}

bool Frontend::analyze(const SemaOptions &options) {
  patterns_ = analyzeModule(module_, sources_, diags_, options);
  return !diags_.hasErrors();
}

const Pattern *Frontend::select(const std::string &name) {
  if (name.empty())
    return patterns_.empty() ? nullptr : &patterns_.front();
  for (const Pattern &p : patterns_)
    if (p.name == name)
      return &p;
  std::string known;
  for (const dsl::PatternDecl &d : module_.patterns)
    known += (known.empty() ? "" : ", ") + d.name;
  diags_.error({}, "no pattern named '" + name + "' in " +
                       std::string(sources_.name(module_.buffer)) + "; it defines: " + known);
  return nullptr;
}

} // namespace attnc
