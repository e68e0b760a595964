//===- FuzzPattern.cpp - The front end on arbitrary source text -----------===//
//
// What `attnc check` runs (tools/attnc/Common.cpp, loadPattern): parse, Sema,
// then the canonical IR of every pattern that checked, plus the printers that
// `attnc emit --stage ast|ir` and the diagnostics use. Any input may be
// rejected with diagnostics; none may crash, hang, or exhaust the stack.
//
//===----------------------------------------------------------------------===//
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "attnc/plan/IrText.h"

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  attnc::Frontend fe;
  std::string text(reinterpret_cast<const char *>(data), size);
  bool parsed = fe.parseString("fuzz.attn", text);
  std::ostringstream sink;
  sink << attnc::dsl::printAst(fe.module(), fe.sources());
  if (parsed && fe.analyze({})) {
    for (const attnc::Pattern &pattern : fe.patterns())
      sink << attnc::ir::writeIr(attnc::ir::canonicalizePattern(pattern));
  }
  fe.diags().print(sink, /*color=*/true);
  return 0;
}
