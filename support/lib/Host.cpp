//===- Host.cpp - What machine this process runs on -----------------------===//
#include "attnc/support/Host.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace attnc::support {

namespace {

const char *architecture() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#elif defined(__powerpc64__)
  return "ppc64";
#else
  return "unknown";
#endif
}

/// The value of the first /proc/cpuinfo line whose key is one of `keys`.
std::string cpuinfo(std::initializer_list<const char *> keys) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    size_t colon = line.find(':');
    if (colon == std::string::npos)
      continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    for (const char *k : keys)
      if (key == k) {
        size_t start = line.find_first_not_of(" \t", colon + 1);
        return start == std::string::npos ? "" : line.substr(start);
      }
  }
  return "";
}

} // namespace

std::string hostTarget() {
  std::string model = cpuinfo({"model name", "uarch", "cpu model", "CPU part"});
  return std::string(architecture()) + "-linux:" + (model.empty() ? "unknown" : model);
}

std::string hostFeatures() {
  // The features that change which code the kernels run or how fast.
  static const std::set<std::string> relevant = {
      "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd",
      "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile", "sse4_2",
      "asimd", "sve", "sve2", "bf16", "fphp", "asimdhp"};
  std::istringstream flags(cpuinfo({"flags", "Features"}));
  std::set<std::string> on;
  for (std::string f; flags >> f;)
    if (relevant.count(f))
      on.insert(f);
  std::string out;
  for (const std::string &f : on)
    out += (out.empty() ? "" : ",") + f;
  return out;
}

} // namespace attnc::support
