//===- Common.cpp - Shared pieces of the attnc subcommands ----------------===//
#include "Common.h"

#include "attnc/frontend/Canonicalize.h"
#include "attnc/plan/RowEvaluator.h"

#include "attnc/support/Json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <unistd.h>

namespace attnc::tool {

void addPatternOptions(CLI::App &cmd, PatternOptions &opts) {
  cmd.add_option("file", opts.file, "The pattern file (.attn)")->required()->check(CLI::ExistingFile);
  cmd.add_option("-D,--define", opts.defines,
                 "Override a parameter: -D l=256 (repeatable)")
      ->type_name("NAME=INT")
      ->allow_extra_args(false);
  cmd.add_option("--pattern", opts.pattern,
                 "Which pattern of the file to use (default: the first)")
      ->type_name("NAME");
}

bool useColor() {
  if (std::getenv("NO_COLOR"))
    return false;
  return isatty(STDERR_FILENO) != 0;
}

void printDiagnostics(const Frontend &fe) {
  auto &self = const_cast<Frontend &>(fe);
  self.diags().print(std::cerr, useColor());
}

std::optional<LoadedPattern> loadPattern(const PatternOptions &opts, int &exitCode) {
  LoadedPattern out;
  out.frontend = std::make_unique<Frontend>();
  Frontend &fe = *out.frontend;
  SemaOptions sema;
  for (const std::string &d : opts.defines) {
    Define def;
    std::string error;
    if (!parseDefine(d, def, error)) {
      std::cerr << "attnc: error: " << error << "\n";
      exitCode = kExitUsage;
      return std::nullopt;
    }
    sema.defines.push_back(def);
  }
  bool ok = fe.parseFile(opts.file) && fe.analyze(sema);
  if (ok)
    out.pattern = fe.select(opts.pattern);
  printDiagnostics(fe);
  if (!ok || !out.pattern) {
    exitCode = kExitUserError;
    return std::nullopt;
  }
  out.ir = ir::canonicalizePattern(*out.pattern);
  return out;
}

int64_t countRowPairs(const ir::SetRef &set, int64_t n, int64_t firstRow, IntervalSet *keys) {
  if (keys)
    keys->clear();
  if (firstRow >= n)
    return 0;
  const ir::RowEvaluator rows(set, n);
  IntervalSet row, merged;
  int64_t pairs = 0;
  for (int64_t i = firstRow; i < n; ++i) {
    rows.row(i, 0, n, row);
    pairs += cardinality(row);
    if (keys) {
      uniteInto(*keys, row, merged);
      keys->swap(merged);
    }
  }
  return pairs;
}

int checkQueries(int64_t queries, int64_t n) {
  if (queries >= 1 && queries <= n)
    return kExitOk;
  std::cerr << "attnc: error: --queries " << queries
            << (queries < 1 ? " leaves no query row" : " is more than --n " + std::to_string(n))
            << "; the queries are the last NQ of the n key positions, so 1 <= --queries <= --n\n";
  return kExitUserError;
}

std::string parseIntList(const std::string &spec, const std::string &what, int64_t minValue, int64_t maxValue,
                         std::vector<int64_t> &out) {
  out.clear();
  for (size_t start = 0;;) {
    const size_t comma = spec.find(',', start);
    const std::string field = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (field.empty() || ec == std::errc::invalid_argument || ptr != field.data() + field.size())
      return what + " must be integers separated by commas, got '" + field + "' in '" + spec + "'";
    if (ec == std::errc::result_out_of_range || value < minValue || value > maxValue)
      return what + " must be in [" + std::to_string(minValue) + ", " + std::to_string(maxValue) + "], got " +
             field + " in '" + spec + "'";
    out.push_back(value);
    if (comma == std::string::npos)
      return {};
    start = comma + 1;
  }
}

std::string parseByteSize(const std::string &text, uint64_t &bytes) {
  const std::string usage = "expected a byte count such as 8G, 512M or 1000000 (K, M, G, T: powers of 1024), got '" +
                            text + "'";
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  if (digits == 0)
    return usage;
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, digits), &used);
    if (used != digits)
      return usage;
  } catch (const std::exception &) {
    return usage;
  }
  std::string suffix = text.substr(digits);
  for (char &c : suffix)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double scale = 1;
  if (!suffix.empty() && suffix != "B") {
    const size_t power = std::string("KMGT").find(suffix[0]);
    const std::string rest = suffix.substr(1);
    if (power == std::string::npos || !(rest.empty() || rest == "B" || rest == "IB"))
      return usage;
    scale = std::ldexp(1.0, 10 * static_cast<int>(power + 1));
  }
  const double total = std::floor(value * scale);
  if (!(total < 0x1p63))
    return "'" + text + "' is more than 2^63 bytes";
  bytes = static_cast<uint64_t>(total);
  return {};
}

std::string byteText(double bytes) {
  static const char *const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024)
    return std::to_string(static_cast<int64_t>(bytes)) + " bytes";
  int unit = 0;
  bytes /= 1024;
  while (bytes >= 1024 && unit < 5) {
    bytes /= 1024;
    ++unit;
  }
  char text[48];
  std::snprintf(text, sizeof text, "%.2f %s", bytes, kUnits[unit]);
  return text;
}

void MemoryEstimate::add(const std::string &what, const std::vector<int64_t> &shape, int64_t elementBytes,
                         int64_t copies) {
  int64_t bytes = elementBytes * copies;
  bool overflow = false;
  for (int64_t s : shape)
    overflow |= __builtin_mul_overflow(bytes, s, &bytes);
  if (overflow && overflow_.empty()) {
    std::ostringstream os;
    os << "arrays of shape [";
    for (size_t a = 0; a < shape.size(); ++a)
      os << (a ? ", " : "") << shape[a];
    os << "] (" << what << ")";
    overflow_ = os.str();
  }
  if (!overflow)
    addBytes(what, bytes);
}

void MemoryEstimate::addBytes(const std::string &what, int64_t bytes) {
  if (__builtin_add_overflow(total_, bytes, &total_) && overflow_.empty())
    overflow_ = "the arrays (" + what + " with what comes before them)";
  for (auto &[name, size] : parts_)
    if (name == what) {
      size += bytes;
      return;
    }
  parts_.push_back({what, bytes});
}

std::string MemoryEstimate::parts() const {
  std::vector<std::pair<std::string, int64_t>> sorted = parts_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) { return a.second > b.second; });
  std::string out;
  for (const auto &[name, bytes] : sorted)
    if (bytes > 0)
      out += (out.empty() ? "" : "; ") + name + " " + byteText(static_cast<double>(bytes));
  return out;
}

uint64_t availableMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemAvailable:")
      return value * 1024; // the file counts kB
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  return pages > 0 && pageSize > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize) : 0;
}

int checkMemory(const MemoryEstimate &estimate, const std::optional<uint64_t> &maxMemory) {
  if (!estimate.overflow().empty()) {
    std::cerr << "attnc: error: " << estimate.overflow()
              << " take more bytes than a 64-bit size can count; give a smaller shape\n";
    return kExitUserError;
  }
  const uint64_t total = static_cast<uint64_t>(estimate.total());
  const uint64_t limit = maxMemory ? *maxMemory : availableMemoryBytes();
  // Unknown available memory (limit 0 without --max-memory) refuses nothing.
  if (total <= limit || (!maxMemory && limit == 0))
    return kExitOk;
  std::cerr << "attnc: error: this run would allocate " << byteText(double(total)) << " (" << total << " bytes: "
            << estimate.parts() << "), more than ";
  if (maxMemory)
    std::cerr << "--max-memory " << byteText(double(limit)) << " (" << limit << " bytes)";
  else
    std::cerr << "the " << byteText(double(limit)) << " of memory available (MemAvailable in /proc/meminfo)";
  std::cerr << "; give a smaller shape, or --max-memory BYTES (e.g. 64G) to change the limit\n";
  return kExitUserError;
}

void addTargetOptions(CLI::App &cmd, std::string &target, int &device, const std::string &help) {
  cmd.add_option("--target", target, help)->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd.add_option("--device", device, "With --target cuda: the CUDA device index")
      ->capture_default_str()
      ->check(CLI::Range(0, 1023));
}

void addMaxMemoryOption(CLI::App &cmd, std::optional<uint64_t> &maxMemory) {
  cmd.add_option_function<std::string>(
         "--max-memory",
         [&maxMemory](const std::string &text) {
           uint64_t bytes = 0;
           parseByteSize(text, bytes);
           maxMemory = bytes;
         },
         "Refuse to run when the arrays would take more than this many bytes (suffixes K, M, G, T: powers of "
         "1024; default: the memory available, MemAvailable in /proc/meminfo)")
      ->type_name("BYTES")
      ->check(CLI::Validator(
          [](std::string &text) {
            uint64_t bytes = 0;
            return parseByteSize(text, bytes);
          },
          ""));
}

std::string examplesFooter(const std::vector<std::string> &examples) {
  std::string out = "\nExamples:\n";
  for (const std::string &e : examples)
    out += "  " + e + "\n";
  return out;
}

} // namespace attnc::tool
