//===- Tuning.cpp - The autotuner's database of measured tile shapes ------===//
#include "attnc/tuning/Tuning.h"

#include "attnc/support/Hash.h"
#include "attnc/support/Files.h"

#include <algorithm>
#include <tuple>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <vector>

namespace attnc::tuning {

std::string cacheDirectory() {
  if (const char *env = std::getenv("ATTNC_CACHE_DIR"); env && *env)
    return env;
  const char *home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/attnc";
}

std::string databasePath() { return cacheDirectory() + "/tuning.db"; }

std::string tuningKey(std::string_view source, const Pattern &pattern, const std::string &host) {
  std::string text(source);
  text += '\0' + pattern.name;
  for (const ParamValue &p : pattern.params)
    text += '\0' + p.name + "=" + std::to_string(p.value);
  text += std::string("\0f32\0", 5) + host;
  // Shapes measured on kernels that ATTNC_FUSED_ISA forced (the AVX2 ones on
  // an AVX-512 CPU) are not the best for the CPU's own, nor the reverse.
  if (const char *isa = std::getenv("ATTNC_FUSED_ISA"); isa && *isa && host != "cuda") // (GPU entries: no CPU)
    text += std::string("\0isa=") + isa;
  return pattern.name + "-" + support::fnv1aHex(text);
}

namespace {
bool parseLine(const std::string &line, Entry &e) {
  std::istringstream words(line);
  std::string word;
  if (!(words >> e.key))
    return false;
  int found = 0;
  while (words >> word) {
    size_t eq = word.find('=');
    if (eq == std::string::npos)
      return false;
    std::string name = word.substr(0, eq), value = word.substr(eq + 1);
    if (name == "backend" || name == "schedule" || name == "gpu" || name == "dtype") {
      (name == "backend" ? e.backend : name == "schedule" ? e.schedule : name == "gpu" ? e.gpu : e.dtype) = value;
      continue;
    }
    char *end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end)
      return false;
    if (name == "d")
      e.d = static_cast<int64_t>(v), ++found;
    else if (name == "tile_rows")
      e.options.tileRows = static_cast<int64_t>(v), ++found;
    else if (name == "tile_cols")
      e.options.tileCols = static_cast<int64_t>(v), ++found;
    else if (name == "gflops")
      e.gflops = v, ++found;
    else if (name == "variant")
      e.variant = static_cast<int>(v);
  }
  // (the GPU forward's variants 0-5: runtime/lib/cuda/CudaPlan.h)
  const bool cuda = e.backend == "cuda" && !e.gpu.empty() && !e.dtype.empty() && e.variant >= 0 && e.variant <= 5;
  return found == 4 && (e.backend == "fused" || (e.backend == "halide" && !e.schedule.empty()) || cuda) &&
         e.options.tileRows >= 1 && e.options.tileRows <= 64 &&
         e.options.tileCols >= 1 && e.options.tileCols <= 4096;
}

std::vector<Entry> readAll(const std::string &path) {
  std::vector<Entry> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    Entry e;
    if (parseLine(line, e))
      out.push_back(e);
  }
  return out;
}

void writeLine(std::ostream &os, const Entry &e) {
  os << e.key << " d=" << e.d << " tile_rows=" << e.options.tileRows << " tile_cols=" << e.options.tileCols
     << " gflops=" << e.gflops;
  if (e.backend == "cuda")
    os << " backend=cuda gpu=" << e.gpu << " dtype=" << e.dtype << " variant=" << e.variant;
  else if (e.backend != "fused")
    os << " backend=" << e.backend << " schedule=" << e.schedule;
  os << "\n";
}

} // namespace

std::optional<Entry> lookup(const std::string &path, const std::string &key, const std::string &backend) {
  std::optional<Entry> found;
  for (const Entry &e : readAll(path))
    if (e.key == key && e.backend == backend)
      found = e;
  return found;
}

std::vector<Entry> lookupAll(const std::string &path, const std::string &key, const std::string &backend) {
  std::vector<Entry> out;
  for (const Entry &e : readAll(path)) {
    if (e.key != key || e.backend != backend)
      continue;
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const Entry &x) { return x.d == e.d && x.gpu == e.gpu && x.dtype == e.dtype; });
    if (same != out.end())
      *same = e;
    else
      out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const Entry &a, const Entry &b) {
    return std::tie(a.d, a.gpu, a.dtype) < std::tie(b.d, b.gpu, b.dtype);
  });
  return out;
}

bool record(const std::string &path, const Entry &entry, std::string &error) {
  std::vector<Entry> all = readAll(path);
  std::ostringstream os;
  for (const Entry &e : all)
    if (!(e.key == entry.key && e.d == entry.d && e.backend == entry.backend && e.gpu == entry.gpu &&
          e.dtype == entry.dtype))
      writeLine(os, e);
  writeLine(os, entry);
  if (!support::makeDirectories(path.substr(0, path.rfind('/')), error))
    return false;
  return support::writeFileAtomically(path, os.str(), error);
}

std::string gpuId(const std::string &name, int major, int minor) {
  std::string id = name;
  for (char &c : id)
    if (c == ' ' || c == ';' || c == ':' || c == '=' || c == '@')
      c = '_';
  return id + "@" + std::to_string(major) + "." + std::to_string(minor);
}

std::string formatCudaTuned(const std::vector<Entry> &entries) {
  std::string out;
  for (const Entry &e : entries)
    if (e.backend == "cuda")
      out += (out.empty() ? "" : ";") + e.gpu + ":" + e.dtype + ":" + std::to_string(e.d) + "=" +
             std::to_string(e.variant);
  return out;
}

} // namespace attnc::tuning
