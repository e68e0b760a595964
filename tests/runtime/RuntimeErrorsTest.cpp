//===- RuntimeErrorsTest.cpp - Every error path of the C ABI --------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/attnc.hpp"
#include "attnc/frontend/Driver.h"
#include "attnc/compiler/Compile.h"
#include "attnc/format/KernelFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace attnc::test {
namespace {

/// A kernel file for patterns/fixed.attn (l=16, c=4) built by `backend`.
std::string buildFixedKernel(codegen::Backend backend) {
  Frontend fe;
  SemaOptions sema;
  sema.defines = {{"l", 16}, {"c", 4}};
  std::string out, error;
  codegen::CodeGenOptions options;
  options.backend = backend;
  if (!fe.parseFile(patternPath("fixed")) || !fe.analyze(sema) ||
      !codegen::buildKernelFile(fe, fe.patterns().front(), options, out, error))
    throw std::runtime_error("cannot build the test kernel: " + error);
  return out;
}

/// A valid kernel file, built once: with native code (sparsifier backend)
/// where this build has MLIR, else the fused backend's.
const std::string &fixedKernelBytes() {
  static const std::string bytes =
      buildFixedKernel(ATTNC_HAVE_MLIR ? codegen::Backend::Sparsifier : codegen::Backend::Fused);
  return bytes;
}

#if ATTNC_HAVE_HALIDE
/// The same pattern with the halide backend's default schedule, built once.
const std::string &halideKernelBytes() {
  static const std::string bytes = buildFixedKernel(codegen::Backend::Halide);
  return bytes;
}
#endif

class RuntimeErrors : public ::testing::Test {
protected:
  std::string write(const std::string &name, const std::string &bytes) {
    std::string path = dir.path() + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  attnc_status load(const std::string &bytes) {
    attnc_kernel *k = nullptr;
    attnc_status s = attnc_kernel_load(write("k.attnk", bytes).c_str(), &k);
    EXPECT_EQ(k == nullptr, s != ATTNC_OK);
    attnc_kernel_free(k);
    return s;
  }
  ScratchDir dir;
};

TEST_F(RuntimeErrors, MissingFileIsAnIoError) {
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_kernel_load((dir.path() + "/absent.attnk").c_str(), &k), ATTNC_ERROR_IO);
  EXPECT_EQ(k, nullptr);
  EXPECT_NE(std::string(attnc_last_error()).find("absent.attnk"), std::string::npos);
}

TEST_F(RuntimeErrors, ValidKernelLoads) { EXPECT_EQ(load(fixedKernelBytes()), ATTNC_OK) << attnc_last_error(); }

TEST_F(RuntimeErrors, GarbageIsCorrupt) {
  EXPECT_EQ(load("this is not a kernel"), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("bad magic"), std::string::npos);
  EXPECT_EQ(load(""), ATTNC_ERROR_CORRUPT_KERNEL);
}

TEST_F(RuntimeErrors, TruncatedFileIsCorrupt) {
  const std::string &good = fixedKernelBytes();
  for (size_t keep : {size_t{9}, size_t{30}, good.size() / 2, good.size() - 1})
    EXPECT_EQ(load(good.substr(0, keep)), ATTNC_ERROR_CORRUPT_KERNEL) << "kept " << keep << " bytes";
}

TEST_F(RuntimeErrors, FlippedByteFailsTheChecksum) {
  std::string bad = fixedKernelBytes();
  bad[bad.size() / 2] ^= 0x40;
  EXPECT_EQ(load(bad), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("checksum"), std::string::npos);
}

TEST_F(RuntimeErrors, OtherAbiVersionIsRefused) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error)) << error;
  file.abiVersion = ATTNC_ABI_VERSION + 1;
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_ABI_MISMATCH);
  EXPECT_NE(std::string(attnc_last_error()).find("ABI version"), std::string::npos);
}

#if ATTNC_HAVE_MLIR // native code to corrupt
TEST_F(RuntimeErrors, KernelFilesOfEveryAbiSinceTheOldestLoad) {
  // ABI 2 only added functions to attnc.h: files built for ABI 1 still load.
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error)) << error;
  for (uint32_t abi = ATTNC_OLDEST_ABI_VERSION; abi <= ATTNC_ABI_VERSION; ++abi) {
    file.abiVersion = abi;
    EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << "ABI " << abi << ": " << attnc_last_error();
  }
  file.abiVersion = ATTNC_OLDEST_ABI_VERSION - 1;
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_ABI_MISMATCH);
}

TEST_F(RuntimeErrors, CodeThatIsNotASharedObjectIsCorrupt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.code = "\x7f" "ELF but not really";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
}

#endif

TEST_F(RuntimeErrors, EmbeddedIrThatDoesNotParseIsCorrupt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.ir = "attnc-ir 1\npattern fixed heads=1 declared=0 causal=1\nhead 0 (stripe 128 127 120)\n";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("pattern IR is malformed"), std::string::npos)
      << attnc_last_error();
}

TEST_F(RuntimeErrors, TheSourceIsNotWhatTheRuntimeRuns) {
  // The runtime builds its plan from the IR: a source that does not even
  // parse (the runtime has no parser) changes nothing.
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.source = "pattern fixed { attend { j : j < } }";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << attnc_last_error();
}

TEST_F(RuntimeErrors, AFileWithoutIrAsksToBeRecompiled) {
  // Format 1 files carried only the source.
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.ir.clear();
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_ABI_MISMATCH);
  EXPECT_NE(std::string(attnc_last_error()).find("recompile"), std::string::npos) << attnc_last_error();
}

TEST_F(RuntimeErrors, NullArgumentsAreRejected) {
  attnc_kernel *k = nullptr;
  EXPECT_EQ(attnc_kernel_load(nullptr, &k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_load("x", nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  attnc_tensor t{};
  EXPECT_EQ(attnc_run(nullptr, &t, &t, &t, &t, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_metadata(nullptr, "pattern"), nullptr);
  attnc_kernel_free(nullptr); // allowed
}

/// attnc_cpu_isa() names the best CPU kernels this CPU has, or those that
/// ATTNC_FUSED_ISA forces; where it forces ones the CPU lacks (or names none)
/// a fused kernel does not load, and says why. ctest runs this with
/// ATTNC_FUSED_ISA unset, avx512, avx2, portable and an unknown name.
TEST_F(RuntimeErrors, CpuIsaFollowsTheCpuAndAttncFusedIsa) {
  const char *env = std::getenv("ATTNC_FUSED_ISA");
  const std::string want = env ? env : "";
  bool avx512 = false, avx2 = false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("bmi2");
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
#endif
  std::string expected = avx512 ? "avx512" : avx2 ? "avx2" : "portable";
  bool refused = false;
  if (want == "portable")
    expected = "portable";
  else if (want == "avx2")
    expected = "avx2", refused = !avx2;
  else if (want == "avx512")
    expected = "avx512", refused = !avx512;
  else if (!want.empty())
    refused = true;
  const char *isa = attnc_cpu_isa();
  if (refused) {
    EXPECT_EQ(isa, nullptr) << isa;
    EXPECT_NE(std::string(attnc_last_error()).find("ATTNC_FUSED_ISA"), std::string::npos) << attnc_last_error();
  } else {
    ASSERT_NE(isa, nullptr) << attnc_last_error();
    EXPECT_EQ(std::string(isa), expected) << "ATTNC_FUSED_ISA=" << want;
  }
  const attnc_status status = load(buildFixedKernel(codegen::Backend::Fused));
  if (refused) {
    EXPECT_EQ(status, ATTNC_ERROR_UNSUPPORTED);
    EXPECT_NE(std::string(attnc_last_error()).find("ATTNC_FUSED_ISA"), std::string::npos) << attnc_last_error();
  } else {
    EXPECT_EQ(status, ATTNC_OK) << attnc_last_error();
  }
}

/// Fixture with a loaded kernel and valid [1, 2, 8, 4] tensors.
class RunErrors : public RuntimeErrors {
protected:
  void SetUp() override {
    kernel = Kernel::load(write("fixed.attnk", fixedKernelBytes()));
    for (auto *buf : {&q, &k, &v, &o})
      buf->assign(64, 0.5f);
    tq = view(q, 1, 2, 8, 4);
    tk = view(k, 1, 2, 8, 4);
    tv = view(v, 1, 2, 8, 4);
    to = view(o, 1, 2, 8, 4);
  }
  attnc_status run() { return attnc_run(kernel.get(), &tq, &tk, &tv, &to, nullptr); }
  Kernel kernel;
  std::vector<float> q, k, v, o;
  attnc_tensor tq, tk, tv, to;
};

TEST_F(RunErrors, ValidCallSucceeds) { EXPECT_EQ(run(), ATTNC_OK) << attnc_last_error(); }

TEST_F(RunErrors, NullTensorIsRejected) {
  EXPECT_EQ(attnc_run(kernel.get(), nullptr, &tk, &tv, &to, nullptr), ATTNC_ERROR_INVALID_ARGUMENT);
  tv.data = nullptr;
  EXPECT_EQ(run(), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(attnc_last_error()).find("'v'"), std::string::npos);
}

TEST_F(RunErrors, ZeroLengthIsNoWork) {
  // ABI 1 and 2 refused n = 0; since ABI 3 an empty call succeeds and writes nothing.
  for (attnc_tensor *t : {&tq, &tk, &tv, &to})
    t->shape[2] = 0;
  EXPECT_EQ(run(), ATTNC_OK) << attnc_last_error();
}

TEST_F(RunErrors, MismatchedShapesAreRejected) {
  tk.shape[3] = 3;
  EXPECT_EQ(run(), ATTNC_ERROR_SHAPE);
  EXPECT_NE(std::string(attnc_last_error()).find("'k' has shape [1, 2, 8, 3]"), std::string::npos)
      << attnc_last_error();
}

TEST_F(RunErrors, NonPositiveDimensionsAreRejected) {
  for (attnc_tensor *t : {&tq, &tk, &tv, &to})
    t->shape[3] = -1;
  EXPECT_EQ(run(), ATTNC_ERROR_SHAPE);
}

TEST_F(RunErrors, OtherDtypeIsRejected) {
  tq.dtype = ATTNC_DTYPE_F16; // reserved
  EXPECT_EQ(run(), ATTNC_ERROR_DTYPE);
  EXPECT_NE(std::string(attnc_last_error()).find("f32 (0) or bf16 (1)"), std::string::npos)
      << attnc_last_error();
  tq.dtype = static_cast<attnc_dtype>(42);
  EXPECT_EQ(run(), ATTNC_ERROR_DTYPE);
}

TEST_F(RunErrors, MixedInputDtypesAreRejected) {
  tk.dtype = ATTNC_DTYPE_BF16; // q, v f32
  EXPECT_EQ(run(), ATTNC_ERROR_DTYPE);
  EXPECT_NE(std::string(attnc_last_error()).find("q, k and v must share one dtype"), std::string::npos)
      << attnc_last_error();
}

TEST_F(RunErrors, NonPositiveStrideIsRejected) {
  tv.strides[2] = 0;
  EXPECT_EQ(run(), ATTNC_ERROR_STRIDE);
}

TEST_F(RunErrors, OverlappingOutputIsRejected) {
  to.strides[2] = 1; // rows overlap each other
  EXPECT_EQ(run(), ATTNC_ERROR_STRIDE);
}

TEST_F(RunErrors, WrongHeadCountForADeclaredPatternIsRejected) {
  Frontend fe;
  std::string bytes, error;
  ASSERT_TRUE(fe.parseFile(patternPath("fixed_multihead")) && fe.analyze({}));
  ASSERT_TRUE(codegen::buildKernelFile(fe, fe.patterns().front(), {}, bytes, error)) << error;
  Kernel multi = Kernel::load(write("multi.attnk", bytes));
  EXPECT_EQ(multi.numHeads(), 2);
  std::vector<float> buf(3 * 8 * 4, 0.5f);
  attnc_tensor t = view(buf, 1, 3, 8, 4), out = t;
  std::vector<float> obuf(buf.size());
  out.data = obuf.data();
  EXPECT_EQ(attnc_run(multi.get(), &t, &t, &t, &out, nullptr), ATTNC_ERROR_SHAPE);
  EXPECT_NE(std::string(attnc_last_error()).find("3 heads"), std::string::npos);
}

TEST_F(RuntimeErrors, IrWithAHeadOutOfRangeIsCorrupt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.ir = "attnc-ir 1\npattern fixed heads=2 declared=1 causal=1\nhead 0 2 (all)\n";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("bad head index"), std::string::npos) << attnc_last_error();
}

TEST_F(RuntimeErrors, FusedKernelWithBadTileSizesIsCorrupt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.metadata["backend"] = "fused";
  file.metadata["tile_rows"] = "65"; // masks hold 64 rows
  file.code.clear();
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  file.metadata["tile_rows"] = "64";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << attnc_last_error();
  // A file without them predates tuning: its tiles were 32 x 32.
  file.metadata.erase("tile_rows");
  file.metadata.erase("tile_cols");
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << attnc_last_error();
  // Shapes tuned per head dimension: each must be a valid shape.
  file.metadata["tuned_tiles"] = "64:32x128,128:64x64";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << attnc_last_error();
  for (const char *bad : {"64:65x32", "64:32x", "64-32x32", "0:32x32", "64:32x32,", "64:32x32;128:32x32"}) {
    file.metadata["tuned_tiles"] = bad;
    EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL) << bad;
    EXPECT_NE(std::string(attnc_last_error()).find("tuned_tiles"), std::string::npos) << attnc_last_error();
  }
  // The backward pass's rows per block, when given, are 1 .. 64 too.
  file.metadata.erase("tuned_tiles");
  for (const char *good : {"1", "16", "64"}) {
    file.metadata["grad_tile_rows"] = good;
    EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << good << ": " << attnc_last_error();
  }
  for (const char *bad : {"0", "65", "-32", "rows", ""}) {
    file.metadata["grad_tile_rows"] = bad;
    EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL) << bad;
    EXPECT_NE(std::string(attnc_last_error()).find("bad tile sizes"), std::string::npos) << attnc_last_error();
  }
}

TEST_F(RuntimeErrors, AnUnknownBackendIsCorruptAndNamesTheKnownOnes) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error));
  file.metadata["backend"] = "warp9";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  const std::string message = attnc_last_error();
  EXPECT_NE(message.find("unknown backend 'warp9'"), std::string::npos) << message;
  EXPECT_NE(message.find("fused"), std::string::npos) << message;
}

#if ATTNC_HAVE_HALIDE
TEST_F(RuntimeErrors, HalideKernelWhoseCodeLacksItsEntryPointsIsCorrupt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(fixedKernelBytes(), file, error)); // the sparsifier's code
  file.metadata["backend"] = "halide";
  file.metadata["tile_rows"] = "64";
  file.metadata["tile_cols"] = "24";
  file.metadata["halide_schedule"] = "r64-k24-s4x6-o6";
  // Code for a CPU every x86-64 machine here is (without halide_target a kernel counts as built for AVX-512,
  // which an AVX2-only CPU refuses before it looks for the entry points).
  file.metadata["halide_target"] = "x86-64-linux-sse41";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("attnc_halide_d32"), std::string::npos) << attnc_last_error();
  file.code.clear();
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("no code section"), std::string::npos) << attnc_last_error();
}

TEST_F(RuntimeErrors, HalideScheduleThatDisagreesWithTheTilesIsCorrupt) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(halideKernelBytes(), file, error)) << error;
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_OK) << attnc_last_error();
  file.metadata["tile_rows"] = "32";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_NE(std::string(attnc_last_error()).find("halide schedule"), std::string::npos) << attnc_last_error();
  file.metadata.erase("halide_schedule");
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_CORRUPT_KERNEL);
}

// A halide kernel's code is for the CPU named by halide_target: features
// this CPU lacks (here one no CPU has) refuse the kernel, naming them.
TEST_F(RuntimeErrors, HalideCodeForACpuThisOneIsNotIsRefusedWithTheReason) {
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(halideKernelBytes(), file, error)) << error;
  ASSERT_NE(file.metadata.count("halide_target"), 0u);
  file.metadata["halide_target"] = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41-avx10_9";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_UNSUPPORTED);
  const std::string message = attnc_last_error();
  EXPECT_NE(message.find("avx10_9 (a feature this runtime does not know)"), std::string::npos) << message;
  EXPECT_NE(message.find("--backend fused"), std::string::npos) << message;
  file.metadata["halide_target"] = "arm-64-linux";
  EXPECT_EQ(load(format::encodeKernelFile(file)), ATTNC_ERROR_UNSUPPORTED);
  EXPECT_NE(std::string(attnc_last_error()).find("an x86-64 CPU"), std::string::npos) << attnc_last_error();
}

TEST_F(RuntimeErrors, HalideCodeThatRejectsItsBuffersIsAnErrorNotACrash) {
  // Consistent metadata for 32-row blocks, code compiled for 64: the Halide
  // code's own checks refuse the output buffer and the run reports it.
  format::KernelFile file;
  std::string error;
  ASSERT_TRUE(format::decodeKernelFile(halideKernelBytes(), file, error)) << error;
  file.metadata["tile_rows"] = "32";
  file.metadata["halide_schedule"] = "r32-k24-s4x6-o6";
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_kernel_load(write("k.attnk", format::encodeKernelFile(file)).c_str(), &k), ATTNC_OK)
      << attnc_last_error();
  int64_t n = 100, d = 32;
  std::vector<float> x = randomFloats(n * d, 7, 1), o(n * d);
  attnc_tensor t = view(x, 1, 1, n, d), to = view(o, 1, 1, n, d);
  EXPECT_EQ(attnc_run(k, &t, &t, &t, &to, nullptr), ATTNC_ERROR_INTERNAL);
  EXPECT_NE(std::string(attnc_last_error()).find("the Halide code failed"), std::string::npos)
      << attnc_last_error();
  attnc_kernel_free(k);
}

#endif

TEST_F(RunErrors, MetadataDescribesTheKernel) {
  EXPECT_EQ(kernel.metadata("pattern"), "fixed");
  EXPECT_EQ(kernel.metadata("params"), "l=16,c=4");
  EXPECT_EQ(kernel.metadata("dtype"), "f32,bf16");
  EXPECT_EQ(kernel.metadata("abi_version"), std::to_string(ATTNC_ABI_VERSION));
  EXPECT_EQ(kernel.metadata("heads"), "any");
  EXPECT_EQ(kernel.metadata("backend"), ATTNC_HAVE_MLIR ? "sparsifier" : "fused");
  EXPECT_EQ(kernel.metadata("source_hash").size(), 16u);
  EXPECT_NE(kernel.metadata("source").find("pattern fixed"), std::string::npos);
  EXPECT_EQ(attnc_kernel_metadata(kernel.get(), "no-such-key"), nullptr);
  EXPECT_EQ(kernel.numHeads(), 0); // the merged pattern serves any head count
}

TEST_F(RunErrors, CppWrapperThrowsWithTheCodeAndMessage) {
  try {
    Kernel::load(dir.path() + "/missing.attnk");
    FAIL() << "no exception";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ATTNC_ERROR_IO);
    EXPECT_NE(std::string(e.what()).find("ATTNC_ERROR_IO"), std::string::npos);
  }
}

} // namespace
} // namespace attnc::test

namespace attnc::test {
namespace {

TEST(KernelLoadMemory, LoadsTheBytesOfAKernelFileAndRejectsCorruptOnes) {
  std::string bytes = fixedKernelBytes();
  attnc_kernel *k = nullptr;
  ASSERT_EQ(attnc_kernel_load_memory(bytes.data(), bytes.size(), &k), ATTNC_OK) << attnc_last_error();
  EXPECT_STREQ(attnc_kernel_metadata(k, "pattern"), "fixed");
  attnc_kernel_free(k);
  bytes[bytes.size() / 2] ^= 0x5a;
  EXPECT_EQ(attnc_kernel_load_memory(bytes.data(), bytes.size(), &k), ATTNC_ERROR_CORRUPT_KERNEL);
  EXPECT_EQ(k, nullptr);
  EXPECT_NE(std::string(attnc_last_error()).find("kernel in memory"), std::string::npos) << attnc_last_error();
  EXPECT_EQ(attnc_kernel_load_memory(nullptr, 10, &k), ATTNC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(attnc_kernel_load_memory(bytes.data(), 0, &k), ATTNC_ERROR_CORRUPT_KERNEL);
}

} // namespace
} // namespace attnc::test
