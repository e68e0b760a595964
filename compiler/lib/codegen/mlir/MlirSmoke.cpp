//===- MlirSmoke.cpp - Proves that MLIR 19 links and runs -----------------===//
#include "attnc/codegen/MlirSmoke.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include "llvm/Support/raw_ostream.h"

namespace attnc::mlirbridge {

std::string buildEmptyModule() {
  mlir::MLIRContext context;
  mlir::OpBuilder builder(&context);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(builder.getUnknownLoc());
  if (mlir::failed(mlir::verify(*module)))
    return {};
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return os.str();
}

} // namespace attnc::mlirbridge
