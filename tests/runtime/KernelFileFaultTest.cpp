//===- KernelFileFaultTest.cpp - Damaged kernel files are refused, never run ===//
//
// Real kernel files of every backend this build has, damaged systematically:
// a byte flipped at many positions, truncated to many lengths, extended,
// and (with the checksum recomputed, as a bug or a hand-edited file could
// produce) headers and section tables that lie about sizes and counts.
//
// What is right: the checksum covers every byte before it, and FNV-1a
// changes whenever one byte does (each step is a bijection of the state), so
// there is no don't-care byte: every flipped or truncated file must be
// refused with ATTNC_ERROR_CORRUPT_KERNEL and a message. A re-sealed file may
// be refused (CORRUPT_KERNEL or ABI_MISMATCH) or, when the damage only hit
// what the runtime ignores (an unknown section, the informational source),
// load; then it must compute bitwise what the undamaged kernel computes.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"

#include "attnc/attnc.h"
#include "attnc/compiler/Compile.h"
#include "attnc/format/KernelFile.h"
#include "attnc/frontend/Driver.h"
#include "attnc/support/Hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

namespace attnc::test {
namespace {

/// patterns/fixed.attn (l=16, c=4) built by `backend`, once per backend.
const std::string &kernelBytes(const std::string &backend) {
  static std::map<std::string, std::string> built;
  auto it = built.find(backend);
  if (it != built.end())
    return it->second;
  Frontend fe;
  SemaOptions sema;
  sema.defines = {{"l", 16}, {"c", 4}};
  std::string out, error;
  codegen::CodeGenOptions options;
  options.backend = *codegen::parseBackend(backend);
  if (!fe.parseFile(patternPath("fixed")) || !fe.analyze(sema) ||
      !codegen::buildKernelFile(fe, fe.patterns().front(), options, out, error))
    throw std::runtime_error("cannot build the test kernel: " + error);
  return built.emplace(backend, out).first->second;
}

/// The output of a [1, 2, 77, 16] call, or empty when the run fails.
std::vector<float> runOnce(attnc_kernel *kernel) {
  const int64_t b = 1, h = 2, n = 77, d = 16;
  std::vector<float> q = randomFloats(b * h * n * d, 1, 1), k = randomFloats(q.size(), 2, 1),
                     v = randomFloats(q.size(), 3, 1), o(q.size());
  attnc_tensor tq = view(q, b, h, n, d), tk = view(k, b, h, n, d), tv = view(v, b, h, n, d), to = view(o, b, h, n, d);
  if (attnc_run(kernel, &tq, &tk, &tv, &to, nullptr) != ATTNC_OK)
    return {};
  return o;
}

bool sameBits(const std::vector<float> &a, const std::vector<float> &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Replaces the trailing checksum so that the bytes pass it.
std::string reseal(std::string bytes) {
  const uint64_t sum = support::fnv1a(bytes.data(), bytes.size() - 8);
  for (int k = 0; k < 8; ++k)
    bytes[bytes.size() - 8 + k] = static_cast<char>((sum >> (8 * k)) & 0xff);
  return bytes;
}

void putU32(std::string &bytes, size_t at, uint32_t v) {
  for (int k = 0; k < 4; ++k)
    bytes[at + k] = static_cast<char>((v >> (8 * k)) & 0xff);
}
void putU64(std::string &bytes, size_t at, uint64_t v) {
  for (int k = 0; k < 8; ++k)
    bytes[at + k] = static_cast<char>((v >> (8 * k)) & 0xff);
}
uint64_t getU64(const std::string &bytes, size_t at) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k)
    v = (v << 8) | static_cast<unsigned char>(bytes[at + k]);
  return v;
}

/// Where each section's header starts (its tag; the size follows at +4).
std::vector<size_t> sectionHeaders(const std::string &bytes) {
  std::vector<size_t> at;
  for (size_t pos = 20; pos + 12 <= bytes.size() - 8; pos += 12 + getU64(bytes, pos + 4))
    at.push_back(pos);
  return at;
}

class KernelFileFault : public ::testing::TestWithParam<const char *> {
protected:
  const std::string &good() { return kernelBytes(GetParam()); }

  /// Loads `bytes` from memory and, for every `fileEvery`-th call, from a
  /// file too; both must agree. Returns the status.
  attnc_status load(const std::string &bytes, attnc_kernel **kernel = nullptr) {
    attnc_kernel *k = nullptr;
    attnc_status s = attnc_kernel_load_memory(bytes.data(), bytes.size(), &k);
    EXPECT_EQ(k == nullptr, s != ATTNC_OK);
    if (s != ATTNC_OK) {
      EXPECT_STRNE(attnc_last_error(), "") << "a refusal says why";
    }
    if (calls_++ % 7 == 0) {
      const std::string path = dir_.file("damaged.attnk");
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      attnc_kernel *fromFile = nullptr;
      EXPECT_EQ(attnc_kernel_load(path.c_str(), &fromFile), s) << "the file and the bytes agree";
      attnc_kernel_free(fromFile);
    }
    if (kernel)
      *kernel = k;
    else
      attnc_kernel_free(k);
    return s;
  }

  /// A re-sealed variant: refused, or loaded and computing what the
  /// undamaged kernel computes. Counts which.
  void expectRefusedOrUnchanged(const std::string &bytes, const std::string &what) {
    attnc_kernel *k = nullptr;
    attnc_status s = load(bytes, &k);
    if (s == ATTNC_OK) {
      ++loaded_;
      EXPECT_TRUE(sameBits(runOnce(k), reference())) << what << ": loaded but computes something else";
      attnc_kernel_free(k);
      return;
    }
    ++refused_;
    EXPECT_TRUE(s == ATTNC_ERROR_CORRUPT_KERNEL || s == ATTNC_ERROR_ABI_MISMATCH)
        << what << ": " << attnc_status_name(s) << ": " << attnc_last_error();
  }

  const std::vector<float> &reference() {
    if (reference_.empty()) {
      attnc_kernel *k = nullptr;
      EXPECT_EQ(attnc_kernel_load_memory(good().data(), good().size(), &k), ATTNC_OK) << attnc_last_error();
      reference_ = runOnce(k);
      attnc_kernel_free(k);
    }
    return reference_;
  }

  ScratchDir dir_;
  int calls_ = 0, refused_ = 0, loaded_ = 0;
  std::vector<float> reference_;
};

INSTANTIATE_TEST_SUITE_P(Backends, KernelFileFault,
                         ::testing::ValuesIn(builtBackends({"fused", "halide", "sparsifier", "dense"})),
                         [](const ::testing::TestParamInfo<const char *> &info) { return std::string(info.param); });

TEST_P(KernelFileFault, TheUndamagedFileLoadsAndRuns) {
  attnc_kernel *k = nullptr;
  ASSERT_EQ(load(good(), &k), ATTNC_OK) << attnc_last_error();
  EXPECT_FALSE(runOnce(k).empty()) << attnc_last_error();
  attnc_kernel_free(k);
}

TEST_P(KernelFileFault, EveryFlippedByteIsRefusedAsCorrupt) {
  // Every 97th byte, flipped three ways (one in large files: the halide
  // backend's are 230 KB), and every byte of the header and the checksum.
  const std::string &bytes = good();
  std::vector<std::pair<size_t, std::vector<unsigned char>>> positions;
  const std::vector<unsigned char> threeWays{0x01, 0x80, 0xff};
  for (size_t at = 0; at < bytes.size(); at += 97)
    positions.push_back({at, bytes.size() < 65536 ? threeWays : std::vector<unsigned char>{0x01}});
  for (size_t at = 0; at < 20; ++at)
    positions.push_back({at, threeWays});
  for (size_t at = bytes.size() - 8; at < bytes.size(); ++at)
    positions.push_back({at, threeWays});
  int tried = 0;
  for (const auto &[at, flips] : positions)
    for (unsigned char flip : flips) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ flip);
      ASSERT_EQ(load(bad), ATTNC_ERROR_CORRUPT_KERNEL) << "byte " << at << " of " << bytes.size() << " ^ " << int(flip);
      ++tried;
    }
  std::printf("[ figures  ] %s: %d flipped variants of a %zu-byte file, all refused\n", GetParam(), tried, bytes.size());
}

TEST_P(KernelFileFault, EveryTruncationIsRefusedAsCorrupt) {
  // Every length up to 64 bytes and in the last 64, and every 61st between.
  const std::string &bytes = good();
  std::vector<size_t> lengths;
  for (size_t keep = 0; keep < bytes.size(); ++keep)
    if (keep < 64 || keep + 64 >= bytes.size() || keep % 61 == 0)
      lengths.push_back(keep);
  for (size_t keep : lengths) {
    ASSERT_EQ(load(bytes.substr(0, keep)), ATTNC_ERROR_CORRUPT_KERNEL) << "kept " << keep << " of " << bytes.size();
    std::string message = attnc_last_error();
    if (keep < 8) {
      EXPECT_NE(message.find("bad magic"), std::string::npos) << message;
    } else if (keep < 28) {
      EXPECT_NE(message.find("truncated"), std::string::npos) << message;
    }
  }
  std::printf("[ figures  ] %s: %zu truncations of a %zu-byte file, all refused\n", GetParam(), lengths.size(),
              bytes.size());
}

TEST_P(KernelFileFault, AppendedBytesAreRefusedAsCorrupt) {
  for (const char *tail : {"\0", "x", "12345678", "ATTNCKRN"}) {
    std::string bad = good() + std::string(tail, std::max<size_t>(1, std::strlen(tail)));
    EXPECT_EQ(load(bad), ATTNC_ERROR_CORRUPT_KERNEL) << "appended '" << tail << "'";
  }
}

TEST_P(KernelFileFault, ResealedHeadersThatLieAreRefused) {
  const std::string &bytes = good();
  // Format versions this reader does not know (0 and the next ones).
  for (uint32_t format : {0u, format::kKernelFormatVersion + 1, 0xffffffffu}) {
    std::string bad = bytes;
    putU32(bad, 8, format);
    EXPECT_EQ(load(reseal(bad)), ATTNC_ERROR_CORRUPT_KERNEL) << "format " << format;
    EXPECT_NE(std::string(attnc_last_error()).find("is not supported"), std::string::npos) << attnc_last_error();
  }
  // ABI versions outside [oldest, current].
  for (uint32_t abi : {0u, uint32_t{ATTNC_ABI_VERSION} + 1, 0xffffffffu}) {
    std::string bad = bytes;
    putU32(bad, 12, abi);
    EXPECT_EQ(load(reseal(bad)), ATTNC_ERROR_ABI_MISMATCH) << "abi " << abi;
  }
  // Section counts other than the four written.
  for (uint32_t count : {0u, 1u, 3u, 5u, 0x7fffffffu, 0xffffffffu}) {
    std::string bad = bytes;
    putU32(bad, 16, count);
    expectRefusedOrUnchanged(reseal(bad), "section count " + std::to_string(count));
  }
  EXPECT_EQ(loaded_, 0) << "a file whose count disagrees with its sections is refused";
}

TEST_P(KernelFileFault, ResealedSectionSizesThatLieAreRefused) {
  // Each section's size set to values that overrun the file, the checksum
  // trailer or 64 bits, or cut the section short: the reader must stay
  // inside the bytes it was given.
  const std::string &bytes = good();
  const std::vector<size_t> headers = sectionHeaders(bytes);
  ASSERT_EQ(headers.size(), 4u);
  int tried = 0;
  for (size_t at : headers) {
    const uint64_t size = getU64(bytes, at + 4), rest = bytes.size() - 8 - (at + 12);
    for (uint64_t lie : {size + 1, size + 8, rest, rest + 1, rest + 8, rest + 9, uint64_t{1} << 32,
                         (uint64_t{1} << 32) + 1, uint64_t{1} << 63, ~uint64_t{0}, ~uint64_t{0} - 11}) {
      if (lie == size)
        continue;
      std::string bad = bytes;
      putU64(bad, at + 4, lie);
      expectRefusedOrUnchanged(reseal(bad), "section at " + std::to_string(at) + " claiming " + std::to_string(lie));
      ++tried;
    }
    if (size > 0) { // cut short: the rest of it reads as garbage headers
      std::string bad = bytes;
      putU64(bad, at + 4, size - 1);
      expectRefusedOrUnchanged(reseal(bad), "section at " + std::to_string(at) + " one byte short");
      ++tried;
    }
  }
  EXPECT_EQ(loaded_, 0);
  std::printf("[ figures  ] %s: %d re-sealed section-size lies, all refused\n", GetParam(), tried);
}

TEST_P(KernelFileFault, ResealedSectionTagsAreRefusedOrIgnored) {
  // A renamed section: a duplicate of a known one is refused; an unknown tag
  // is skipped, which is harmless for the source (informational) and fatal
  // for the IR or the metadata (the runtime cannot build the plan without
  // them).
  const std::string &bytes = good();
  for (size_t at : sectionHeaders(bytes))
    for (const char *tag : {"META", "SRC ", "IR  ", "CODE", "XXXX", "meta"}) {
      std::string bad = bytes;
      std::memcpy(bad.data() + at, tag, 4);
      if (bad == bytes)
        continue;
      expectRefusedOrUnchanged(reseal(bad), "section at " + std::to_string(at) + " renamed '" + tag + "'");
    }
  EXPECT_GT(refused_, 0);
  std::printf("[ figures  ] %s: re-sealed renamed sections: %d refused, %d loaded and computed the same\n",
              GetParam(), refused_, loaded_);
}

TEST(KernelFileFormat, DuplicateSectionsAreRefused) {
  // Two "SRC " sections: the second would silently win.
  std::string bytes = kernelBytes("fused");
  const std::vector<size_t> headers = sectionHeaders(bytes);
  std::memcpy(bytes.data() + headers[0], "SRC ", 4);
  format::KernelFile out;
  std::string error;
  EXPECT_FALSE(format::decodeKernelFile(reseal(bytes), out, error));
  EXPECT_NE(error.find("two 'SRC ' sections"), std::string::npos) << error;
}

} // namespace
} // namespace attnc::test
