//===- CodeGen.cpp - MLIR sparsifier, LLVM and native code, in-process ----===//
//
// Stages in order (each can stop and report its text): MLIR text from
// LowerToMlir, parse + verify, the sparsifier pipeline (built with
// buildSparsifier, not parsed from a string: a parsed
// `builtin.module(sparsifier{...})` on a module PassManager silently does
// nothing), translation to LLVM IR, the C ABI wrappers of KernelAbi.h, O3 for
// the host CPU, object emission, and an in-process lld link into a shared
// object.
//
//===----------------------------------------------------------------------===//
#include "attnc/codegen/CodeGen.h"

#include "attnc/codegen/LowerToMlir.h"
#include "Link.h"

#include "mlir/Dialect/SparseTensor/Pipelines/Passes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"

#include <chrono>
#include <mutex>

namespace attnc::codegen {

namespace {

void initializeLlvmOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::string hostFeatures() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  std::vector<std::string> on;
  for (const auto &f : features)
    if (f.second)
      on.push_back("+" + f.first().str());
  std::sort(on.begin(), on.end());
  std::string out;
  for (const std::string &f : on)
    out += (out.empty() ? "" : ",") + f;
  return out;
}

std::unique_ptr<llvm::TargetMachine> hostMachine(std::string &error) {
  initializeLlvmOnce();
  std::string triple = llvm::sys::getProcessTriple();
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return nullptr;
  llvm::TargetOptions options;
  options.UnsafeFPMath = false;
  return std::unique_ptr<llvm::TargetMachine>(target->createTargetMachine(
      triple, llvm::sys::getHostCPUName(), hostFeatures(), options, llvm::Reloc::PIC_,
      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
}

/// void attnc_head_<k>(const attnc_head_args *args): unpacks the argument
/// struct (KernelAbi.h) into the memref descriptors and the sparse storage
/// the sparsifier's flattened signature expects, then calls the impl.
bool addWrapper(llvm::Module &m, size_t set, std::string &error) {
  llvm::Function *impl = m.getFunction(headFunctionName(set));
  if (!impl) {
    error = "generated module lacks " + headFunctionName(set);
    return false;
  }
  llvm::LLVMContext &ctx = m.getContext();
  llvm::Type *ptr = llvm::PointerType::get(ctx, 0);
  llvm::Type *i64 = llvm::Type::getInt64Ty(ctx);
  llvm::Type *f32 = llvm::Type::getFloatTy(ctx);
  // Field order of attnc_head_args.
  llvm::StructType *argsTy = llvm::StructType::get(
      ctx, {ptr, ptr, ptr, ptr, i64, i64, ptr, ptr, i64, ptr, ptr, f32});
  auto *fnTy = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false);
  auto *fn = llvm::Function::Create(fnTy, llvm::GlobalValue::ExternalLinkage,
                                    "attnc_head_" + std::to_string(set), m);
  fn->setVisibility(llvm::GlobalValue::DefaultVisibility);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
  llvm::Value *args = fn->getArg(0);
  auto field = [&](unsigned k, const char *name) {
    return b.CreateLoad(argsTy->getElementType(k), b.CreateStructGEP(argsTy, args, k), name);
  };
  llvm::Value *q = field(0, "q"), *kk = field(1, "k"), *v = field(2, "v"), *o = field(3, "o");
  llvm::Value *n = field(4, "n"), *d = field(5, "d");
  llvm::Value *pos = field(6, "pos"), *crd = field(7, "crd"), *nnz = field(8, "nnz");
  llvm::Value *values = field(9, "values"), *rows = field(10, "rows"), *scale = field(11, "scale");
  llvm::Value *zero = b.getInt64(0), *one = b.getInt64(1);
  llvm::Value *np1 = b.CreateAdd(n, one);
  auto rowBuf = [&](unsigned k) { return b.CreateGEP(f32, rows, b.CreateMul(n, b.getInt64(k))); };

  std::vector<llvm::Value *> call;
  auto memref2d = [&](llvm::Value *p) {
    call.insert(call.end(), {p, p, zero, n, d, d, one});
  };
  auto memref1d = [&](llvm::Value *p, llvm::Value *size) {
    call.insert(call.end(), {p, p, zero, size, one});
  };
  memref2d(q);
  memref2d(kk);
  memref2d(v);
  memref1d(pos, np1);
  memref1d(crd, nnz);
  memref1d(values, nnz);
  // Storage specifier: level sizes [n, n], memory sizes [pos, crd, values].
  llvm::Type *specTy = impl->getFunctionType()->getParamType(static_cast<unsigned>(call.size()));
  llvm::Value *spec = llvm::UndefValue::get(specTy);
  spec = b.CreateInsertValue(spec, n, {0, 0});
  spec = b.CreateInsertValue(spec, n, {0, 1});
  spec = b.CreateInsertValue(spec, np1, {1, 0});
  spec = b.CreateInsertValue(spec, nnz, {1, 1});
  spec = b.CreateInsertValue(spec, nnz, {1, 2});
  call.push_back(spec);
  memref2d(o);
  memref1d(rowBuf(0), n);
  memref1d(rowBuf(1), n);
  memref1d(rowBuf(2), n);
  call.push_back(scale);
  llvm::FunctionType *implTy = impl->getFunctionType();
  if (implTy->getNumParams() != call.size()) {
    error = "unexpected signature of " + headFunctionName(set) + ": " +
            std::to_string(implTy->getNumParams()) + " parameters, expected " +
            std::to_string(call.size());
    return false;
  }
  for (unsigned k = 0; k < call.size(); ++k)
    if (implTy->getParamType(k) != call[k]->getType()) {
      error = "unexpected parameter " + std::to_string(k) + " type of " + headFunctionName(set);
      return false;
    }
  b.CreateCall(impl, call);
  b.CreateRetVoid();
  impl->setLinkage(llvm::GlobalValue::InternalLinkage);
  return true;
}

void optimize(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder pb(&tm, tuning);
  llvm::TargetLibraryInfoImpl tlii(llvm::Triple(m.getTargetTriple()));
  // Let the loop vectorizer call glibc's vector expf (libmvec).
  tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                          llvm::Triple(m.getTargetTriple()));
  fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

bool emit(llvm::Module &m, llvm::TargetMachine &tm, llvm::CodeGenFileType type, std::string &out,
          std::string &error) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type)) {
    error = "the target machine cannot emit this file type";
    return false;
  }
  pm.run(m);
  out.assign(buffer.begin(), buffer.end());
  return true;
}

} // namespace

bool generate(const ir::PatternIR &ir, const dsl::SourceManager &sources,
              const CodeGenOptions &options, CodeGenResult &out, std::string &error) {
  auto start = std::chrono::steady_clock::now();
  out = CodeGenResult{};
  out.mlir = lowerToMlir(ir, sources);
  if (options.stopAfter == Stage::Mlir)
    return true;

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(diagnostics);
    os << diag.getLocation() << ": " << diag << "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(out.mlir, &context, "attnc-generated.mlir");
  if (!module || mlir::failed(mlir::verify(*module))) {
    error = "generated MLIR does not parse or verify:\n" + diagnostics;
    return false;
  }
  mlir::PassManager pm(&context);
  mlir::sparse_tensor::SparsifierOptions sparsifier;
  if (mlir::failed(sparsifier.parseFromString(
          "enable-runtime-library=false vl=16 reassociate-fp-reductions=true "
          "enable-index-optimizations=true"))) {
    error = "bad sparsifier options";
    return false;
  }
  mlir::sparse_tensor::buildSparsifier(pm, sparsifier);
  if (mlir::failed(pm.run(*module))) {
    error = "the sparsifier pipeline failed:\n" + diagnostics;
    return false;
  }

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(*module, llvmContext, "attnc");
  if (!llvmModule) {
    error = "translation to LLVM IR failed:\n" + diagnostics;
    return false;
  }
  std::unique_ptr<llvm::TargetMachine> tm = hostMachine(error);
  if (!tm)
    return false;
  llvmModule->setDataLayout(tm->createDataLayout());
  llvmModule->setTargetTriple(tm->getTargetTriple().str());
  for (size_t k = 0; k < ir.heads.size(); ++k)
    if (!addWrapper(*llvmModule, k, error))
      return false;
  {
    std::string problems;
    llvm::raw_string_ostream os(problems);
    if (llvm::verifyModule(*llvmModule, &os)) {
      error = "generated LLVM IR does not verify:\n" + problems;
      return false;
    }
  }
  optimize(*llvmModule, *tm);
  {
    llvm::raw_string_ostream os(out.llvmIr);
    llvmModule->print(os, nullptr);
  }
  if (options.stopAfter == Stage::Llvm)
    return true;
  if (!emit(*llvmModule, *tm, llvm::CodeGenFileType::AssemblyFile, out.assembly, error))
    return false;
  if (options.stopAfter == Stage::Asm && !options.link)
    return true;
  std::string object;
  if (!emit(*llvmModule, *tm, llvm::CodeGenFileType::ObjectFile, object, error))
    return false;
  if (!linkSharedObject(object, out.sharedObject, error))
    return false;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

} // namespace attnc::codegen
