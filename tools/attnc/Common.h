//===- Common.h - Shared pieces of the attnc subcommands ------------------===//
#pragma once

#include "attnc/frontend/Driver.h"
#include "attnc/plan/PatternIR.h"

#include "attnc/support/Json.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc::tool {

/// Process exit codes (documented in the README).
enum ExitCode : int {
  kExitOk = 0,        ///< success
  kExitUserError = 1, ///< the pattern or an input is wrong (diagnostics say why)
  kExitUsage = 2,     ///< the command line is wrong
  kExitInternal = 3,  ///< a bug in attnc: "internal error" with file:line
};

/// FILE.attn, -D k=v..., --pattern NAME: shared by every pattern subcommand.
struct PatternOptions {
  std::string file;
  std::vector<std::string> defines;
  std::string pattern;
};

void addPatternOptions(CLI::App &cmd, PatternOptions &opts);

/// A file parsed, checked and canonicalised.
struct LoadedPattern {
  std::unique_ptr<Frontend> frontend;
  const Pattern *pattern = nullptr;
  ir::PatternIR ir;
};

/// Loads the pattern; prints diagnostics (warnings too) to stderr. Returns
/// nullopt after an error and sets `exitCode`.
std::optional<LoadedPattern> loadPattern(const PatternOptions &opts, int &exitCode);

/// Whether to colour diagnostics on stderr.
bool useColor();
void printDiagnostics(const Frontend &fe);

/// A JSON string literal.
using support::jsonString;

/// The pairs of the queries at positions firstRow .. n - 1 of `set` at
/// length n (the rows a call with n - firstRow queries on n keys computes),
/// each row's keys from ir::RowEvaluator: O(rows x intervals). With `keys`,
/// also the union of their keys (the key rows those queries read).
int64_t countRowPairs(const ir::SetRef &set, int64_t n, int64_t firstRow, IntervalSet *keys = nullptr);

/// --queries NQ of analyze and show, the last NQ of the n key positions:
/// kExitOk when 1 <= NQ <= n, else prints why and returns kExitUserError.
int checkQueries(int64_t queries, int64_t n);

/// Parses a comma-separated list of integers, each in [minValue, maxValue]
/// ("0,5,12"). Returns the reason when `spec` is not one, naming `what` and
/// the offending entry; "" when it is.
std::string parseIntList(const std::string &spec, const std::string &what, int64_t minValue, int64_t maxValue,
                         std::vector<int64_t> &out);

/// Parses --max-memory: a byte count with an optional suffix K, M, G or T
/// (powers of 1024, case-insensitive, optionally followed by "B" or "iB"):
/// "8G", "512M", "1.5G", "1000000". Returns the reason when it is not one.
std::string parseByteSize(const std::string &text, uint64_t &bytes);

/// "1.50 GiB" (or "512 bytes"): a byte count for messages.
std::string byteText(double bytes);

/// What a command is about to allocate, added up before it allocates it:
/// each array as its shape and element size, with products checked so that
/// a shape too large for a 64-bit size is reported, never wrapped.
class MemoryEstimate {
public:
  /// `copies` arrays named `what` of `shape`'s elements, `elementBytes` each.
  void add(const std::string &what, const std::vector<int64_t> &shape, int64_t elementBytes, int64_t copies = 1);
  /// Bytes counted some other way (a structure's size).
  void addBytes(const std::string &what, int64_t bytes);
  /// The first arrays whose size overflowed int64 (or made the total do
  /// so), as "arrays of shape [1, 2, 3, 4] (Q, K, V)"; empty when none did.
  const std::string &overflow() const { return overflow_; }
  int64_t total() const { return total_; }
  /// "Q, K, V, O 1.00 GiB; dQ, dK, dV 768 MiB": the parts, largest first.
  std::string parts() const;

private:
  std::vector<std::pair<std::string, int64_t>> parts_;
  int64_t total_ = 0;
  std::string overflow_;
};

/// The memory this process may allocate: MemAvailable from /proc/meminfo,
/// else the available physical pages (sysconf); 0 when neither is known.
uint64_t availableMemoryBytes();

/// Refuses a command whose estimate overflows or exceeds `maxMemory` (when
/// given) or the available memory: prints why, naming the size, the limit
/// and --max-memory, and returns kExitUserError; kExitOk when it fits.
int checkMemory(const MemoryEstimate &estimate, const std::optional<uint64_t> &maxMemory);

/// Adds --max-memory BYTES to `cmd`, parsed into `maxMemory`.
void addMaxMemoryOption(CLI::App &cmd, std::optional<uint64_t> &maxMemory);

/// --target cpu|cuda (described by `help`) and --device I (a CUDA device index).
void addTargetOptions(CLI::App &cmd, std::string &target, int &device, const std::string &help);

/// Appended to every --help: examples on patterns/.
std::string examplesFooter(const std::vector<std::string> &examples);

/// Registration functions, one per subcommand; `exitCode` receives the
/// subcommand's result.
void setupCheck(CLI::App &app, int &exitCode);
void setupShow(CLI::App &app, int &exitCode);
void setupAnalyze(CLI::App &app, int &exitCode);
void setupEmit(CLI::App &app, int &exitCode);
void setupCompile(CLI::App &app, int &exitCode);
void setupRun(CLI::App &app, int &exitCode);
void setupBench(CLI::App &app, int &exitCode);
void setupTune(CLI::App &app, int &exitCode);

} // namespace attnc::tool
