//===- FuzzKernelFile.cpp - The kernel loader on arbitrary bytes ----------===//
//
// attnc_kernel_load_memory, the C ABI's entry for kernel files (the JIT's
// and `attnc compile`'s output). Each input is loaded twice: as it is, and
// with its trailing FNV-1a checksum recomputed, because a mutated file almost
// never keeps a matching checksum and the header, the sections, the metadata
// and the IR text behind it would otherwise go untested. A kernel that loads
// has its metadata and head count read, runs once on a small valid call
// (the runtime rebuilds its plan from the IR text it carried) and is freed.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

uint64_t fnv1a(const char *bytes, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t k = 0; k < size; ++k) {
    h ^= static_cast<unsigned char>(bytes[k]);
    h *= 0x100000001b3ull;
  }
  return h;
}

/// Q, K, V, O of shape [1, heads, 8, 4], contiguous f32.
void runOnce(const attnc_kernel *kernel, int64_t heads) {
  constexpr int64_t kN = 8, kD = 4;
  std::vector<float> q(heads * kN * kD, 0.5f), k(q.size(), 0.25f), v(q.size(), 1.0f), o(q.size());
  auto view = [&](std::vector<float> &buffer) {
    return attnc_tensor{buffer.data(), ATTNC_DTYPE_F32, {1, heads, kN, kD},
                        {heads * kN * kD, kN * kD, kD, 1}};
  };
  attnc_tensor tq = view(q), tk = view(k), tv = view(v), to = view(o);
  attnc_run_options options{0.0f, 1};
  attnc_run(kernel, &tq, &tk, &tv, &to, &options);
}

void loadAndUse(const std::string &bytes) {
  attnc_kernel *kernel = nullptr;
  if (attnc_kernel_load_memory(bytes.data(), bytes.size(), &kernel) != ATTNC_OK)
    return;
  size_t total = 0;
  for (const char *key : {"pattern", "params", "heads", "dtype", "target", "backend", "abi_version",
                          "source_hash", "compiler_version", "source", "no such key"})
    if (const char *value = attnc_kernel_metadata(kernel, key))
      total += std::strlen(value);
  int64_t heads = attnc_kernel_num_heads(kernel);
  // Past a few heads the call costs more than it tests.
  if (heads >= 0 && heads <= 4)
    runOnce(kernel, heads == 0 ? 2 : heads);
  attnc_kernel_free(kernel);
  (void)total;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  loadAndUse(bytes);
  if (bytes.size() >= 8) {
    uint64_t sum = fnv1a(bytes.data(), bytes.size() - 8);
    std::string fixed = bytes;
    for (int k = 0; k < 8; ++k)
      fixed[fixed.size() - 8 + k] = static_cast<char>((sum >> (8 * k)) & 0xff);
    if (fixed != bytes)
      loadAndUse(fixed);
  }
  return 0;
}
