//===- CmdAnalyze.cpp - attnc analyze -------------------------------------===//
//
// The analyses and their JSON form (a contract, docs/cli.md) are the
// compiler's (attnc/analysis/Report.h); the text form is this command's.
// With --queries NQ every count is over the last NQ rows (bottom-right
// aligned, as the runtime takes fewer queries than keys); without it, or
// with NQ = n, the output is the square's, unchanged.
//
//===----------------------------------------------------------------------===//
#include "CallData.h"
#include "Common.h"

#include "attnc/analysis/Report.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace attnc::tool {

namespace {
struct AnalyzeOptions {
  PatternOptions pattern;
  int64_t n = 0;
  std::optional<int64_t> queries; ///< unset: n
  int64_t block = 64;
  int64_t blockCols = 0;
  bool json = false;
  bool connectivity = true;
  double connectivitySeconds = 1.0;
  int ranks = 0;           ///< context parallelism over this many ranks; 0: none
  int64_t d = 128;         ///< head dimension, for the bytes moved
  int64_t kvHeads = 8;     ///< key/value heads, for the bytes moved
  std::vector<std::string> inputs; ///< --input NAME=FILE.npy
  std::string dtype = "bf16";
};

std::string fmtBytes(double bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4)
    bytes /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

/// The context-parallel section of the text form.
void printContext(const ir::ContextReport &c, std::ostream &os) {
  const ir::ShardPlan &p = c.shards;
  double sumPairs = 0;
  for (double v : p.pairs)
    sumPairs += v;
  char imbalance[32];
  std::snprintf(imbalance, sizeof imbalance, "%.4f", p.imbalance());
  os << "context parallel over " << p.ranks << " ranks: pairs per rank max/mean " << imbalance << " (mean "
     << static_cast<int64_t>(sumPairs / p.ranks)
     << " per head), layout " << p.layout << "; K/V rows of " << c.rowBytes << " bytes each; dK/dV sums go straight back to "
        "their owners\n";
  os << "  rank  positions                       pairs/head   recv rows fwd   recv bytes fwd   recv bytes bwd   vs ring fwd\n";
  for (int q = 0; q < p.ranks; ++q) {
    std::string pos;
    for (const auto &[a, b] : p.ranges[static_cast<size_t>(q)]) {
      if (pos.size() > 26) {
        pos += " ...";
        break;
      }
      pos += (pos.empty() ? "" : " ") + ("[" + std::to_string(a) + ", " + std::to_string(b) + ")");
    }
    char line[256];
    std::snprintf(line, sizeof line, "  %4d  %-30s %12.0f %15lld %16s %16s %12.4f\n", q, pos.empty() ? "(none)" : pos.c_str(),
                  p.pairs[static_cast<size_t>(q)], (long long)p.recvRows[static_cast<size_t>(q)],
                  fmtBytes(double(c.forwardBytes[static_cast<size_t>(q)])).c_str(),
                  fmtBytes(double(c.backwardBytes[static_cast<size_t>(q)])).c_str(),
                  c.ringForwardBytes > 0 ? double(c.forwardBytes[static_cast<size_t>(q)]) / double(c.ringForwardBytes) : 0.0);
    os << line;
  }
  os << "  ring attention: every rank receives " << c.ringRows << " rows, " << fmtBytes(double(c.ringForwardBytes))
     << " forward, " << fmtBytes(double(c.ringBackwardBytes)) << " backward\n";
}

std::string fmtDouble(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void printText(const LoadedPattern &lp, const AnalyzeOptions &opts, const ir::PatternReport &report) {
  const std::vector<ir::HeadReport> &heads = report.heads;
  const std::optional<ir::Connectivity> &conn = report.connectivity;
  const Pattern &p = *lp.pattern;
  const int64_t nq = report.queries, first = opts.n - nq;
  const bool rectangular = nq != opts.n;
  std::ostringstream os;
  os << "pattern " << p.name << ": n=" << opts.n << ", " << p.numHeads()
     << (p.numHeads() == 1 ? " head" : " heads") << ", " << heads.size()
     << (heads.size() == 1 ? " distinct set" : " distinct sets") << (p.causal ? ", causal" : "");
  for (const ParamValue &v : p.params)
    os << ", " << v.name << "=" << v.value;
  os << "\n";
  if (rectangular)
    os << "queries " << nq << ": rows i = " << first << " .. " << opts.n - 1 << ", the last " << nq
       << " of the " << opts.n << " key positions; every count below is over these rows (tiles from ("
       << first << ", 0))\n";
  // The pairs of the rows counted, and those with j <= i: rows first .. n-1
  // have first + 1 .. n of them.
  double pairs = static_cast<double>(nq) * static_cast<double>(opts.n);
  double lower = static_cast<double>(nq) * static_cast<double>(first + 1 + opts.n) / 2;
  for (const ir::HeadReport &h : heads) {
    os << "head";
    for (int64_t k : h.heads)
      os << " " << k;
    os << ":\n";
    os << "  nnz           " << h.rows.nnz << "  (" << fmtDouble(100.0 * h.rows.nnz / pairs, 3)
       << (rectangular ? "% of queries*n, " : "% of n^2, ") << fmtDouble(100.0 * h.rows.nnz / lower, 3)
       << (rectangular ? "% of their causal part" : "% of the causal triangle") << ")\n";
    os << "  keys per row  min " << h.rows.minRow << ", max " << h.rows.maxRow << ", mean "
       << fmtDouble(h.rows.mean, 2) << "\n";
    if (rectangular && h.rows.keysRead)
      os << "  keys read     " << *h.rows.keysRead << "  ("
         << fmtDouble(100.0 * static_cast<double>(*h.rows.keysRead) / static_cast<double>(opts.n), 3)
         << "% of n: the distinct keys these rows attend, the key/value rows a call reads)\n";
    os << "  empty rows    " << h.rows.emptyRows;
    if (h.rows.emptyWitness)
      os << "  (first: row " << *h.rows.emptyWitness << "; its output is all zeros)";
    os << "\n  causal leaks  ";
    if (h.rows.leaks == 0)
      os << "none (j <= i everywhere)\n";
    else
      os << h.rows.leaks << " pairs with j > i, e.g. (i, j) = (" << h.rows.leakWitness->first
         << ", " << h.rows.leakWitness->second << ")"
         << (p.causal ? "" : "; add 'causal' if the pattern must not see the future") << "\n";
    os << "  tiles " << h.tiles.blockRows << "x" << h.tiles.blockCols << "   full "
       << h.tiles.full << ", partial " << h.tiles.partial << ", empty " << h.tiles.empty << "\n";
    os << "  tile waste    " << fmtDouble(h.tiles.waste, 2)
       << "x  (pairs a tile-granular kernel computes / pairs in the pattern)\n";
  }
  if (conn) {
    os << "criterion 2 (every j <= i reachable from i"
       << (rectangular ? ", for the " + std::to_string(nq) + " query rows" : std::string()) << "):  ";
    if (conn->p)
      os << "p = " << *conn->p;
    else if (conn->gaveUp)
      os << "p > " << ir::ConnectivityOptions().maxSteps << ": row "
         << conn->unreachableWitness->first << " does not reach key "
         << conn->unreachableWitness->second << " within " << ir::ConnectivityOptions().maxSteps
         << " steps (search stopped)";
    else
      os << "NOT reachable: row " << conn->unreachableWitness->first << " never reaches key "
         << conn->unreachableWitness->second;
    const std::string rowsName = rectangular ? "query rows" : "rows";
    if (conn->stoppedEarly)
      os << "  (" << conn->rowsChecked << " " << rowsName << " spread over "
         << (rectangular ? "[" + std::to_string(first) + ", " + std::to_string(opts.n) + ")" : "[0, n)")
         << " checked before the " << fmtDouble(opts.connectivitySeconds, 1)
         << " s limit; --connectivity-seconds 0 checks every chosen row)";
    else
      os << (conn->exact ? std::string(rectangular ? "  (every query row checked)" : "  (every row checked)")
                         : "  (" + std::to_string(conn->rowsChecked) + " sampled " + rowsName + " checked)");
    os << "\n";
  }
  if (report.context)
    printContext(*report.context, os);
  os << "analysis time " << fmtDouble(report.seconds * 1e3, 1) << " ms\n";
  std::cout << os.str();
}

/// A pattern that reads data, analysed without it: what holds for any data,
/// and which inputs the counts need.
int printNeedsData(const LoadedPattern &lp, const AnalyzeOptions &opts) {
  // (Float inputs feed the score or the sink only: the pairs never need them.)
  std::vector<InputSpec> specs = patternInputs(lp.ir, opts.n);
  specs.erase(std::remove_if(specs.begin(), specs.end(), [](const InputSpec &s) { return s.isFloat; }), specs.end());
  std::string flags, names;
  for (const InputSpec &s : specs) {
    flags += " --input " + s.name + "=FILE.npy";
    names += (names.empty() ? "'" : ", '") + s.name + "'";
  }
  if (opts.json) {
    std::ostringstream os;
    os << "{\"pattern\": " << jsonString(lp.ir.name) << ", \"n\": " << opts.n << ", \"params\": {";
    for (size_t k = 0; k < lp.ir.params.size(); ++k)
      os << (k ? ", " : "") << jsonString(lp.ir.params[k].first) << ": " << lp.ir.params[k].second;
    os << "}, \"needs_data\": true, \"causal\": " << (lp.ir.causal ? "true" : "false") << ", \"inputs\": [";
    for (size_t k = 0; k < specs.size(); ++k) {
      os << (k ? ", " : "") << "{\"name\": " << jsonString(specs[k].name) << ", \"dims\": [" << specs[k].rows;
      if (specs[k].rank == 2)
        os << ", " << specs[k].cols;
      os << "]}";
    }
    os << "], \"heads\": []}\n";
    std::cout << os.str();
    return kExitOk;
  }
  std::cout << "pattern '" << lp.ir.name << "' reads data (" << names << "): its pairs are known only with "
            << "each call's data\n";
  for (const InputSpec &s : specs)
    std::cout << "  input " << s.name << ": " << (s.rank == 2 ? "[" + std::to_string(s.rows) + ", " +
                                                                    std::to_string(s.cols) + "]"
                                                              : "[" + std::to_string(s.rows) + "]")
              << " at n = " << opts.n
              << (s.idLimit ? ", ids in [-1, " + std::to_string(s.idLimit) + ")" : std::string()) << "\n";
  std::cout << "for any data: " << (lp.ir.causal ? "causal (no key after its query)" : "not declared causal")
            << "\nnnz, keys per row, empty rows, blocks and connectivity need the data: attnc analyze "
            << opts.pattern.file << " --n " << opts.n << flags << "\n";
  return kExitOk;
}

int runAnalyze(const AnalyzeOptions &opts) {
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  if (int code = checkQueries(opts.queries.value_or(opts.n), opts.n); code != kExitOk)
    return code;
  bool bound = false;
  if (!bindPatternData(lp->ir, opts.inputs, opts.n, bound))
    return kExitUserError;
  if (lp->ir.readsData() && !bound)
    return printNeedsData(*lp, opts);
  ir::ReportOptions options;
  options.n = opts.n;
  options.queries = opts.queries.value_or(opts.n);
  options.blockRows = opts.block;
  options.blockCols = opts.blockCols;
  options.connectivity = opts.connectivity;
  options.connectivitySeconds = opts.connectivitySeconds;
  options.ranks = opts.ranks;
  options.headDim = opts.d;
  options.kvHeads = opts.kvHeads;
  options.elementBytes = opts.dtype == "f32" ? 4 : 2;
  const ir::PatternReport report = ir::analyzePattern(lp->ir, options);
  if (opts.json)
    std::cout << ir::reportJson(lp->ir, report);
  else
    printText(*lp, opts, report);
  return kExitOk;
}
} // namespace

void setupAnalyze(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<AnalyzeOptions>();
  CLI::App *cmd = app.add_subcommand(
      "analyze", "Count what a pattern attends to at a sequence length: nnz, keys per row, empty "
                 "rows, causality, tiles and reachability");
  addPatternOptions(*cmd, opts->pattern);
  // Rows and tiles cost O(n) for the seed patterns (under a second at n = 2^20);
  // criterion 2 stops at its time budget.
  cmd->add_option("--n", opts->n, "Sequence length (at most 2^24)")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--queries", opts->queries,
                  "Count only the last NQ query rows (default: --n, the square): query row r is position "
                  "r + n - NQ, bottom-right aligned as in a decoding step (NQ = 1) with a key/value cache")
      ->type_name("NQ");
  cmd->add_option("--block", opts->block, "Tile side for the full/partial/empty count")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  cmd->add_option("--block-cols", opts->blockCols,
                  "Tile width when tiles are not square (default: --block)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  cmd->add_flag("--json", opts->json, "Print one JSON object (schema in docs/cli.md)");
  cmd->add_flag("--connectivity,!--no-connectivity", opts->connectivity,
                "Compute the Sparse Transformer's criterion 2 (default: on)");
  cmd->add_option("--connectivity-seconds", opts->connectivitySeconds,
                  "Time budget of criterion 2's search; past it, p is the worst over the rows checked "
                  "so far (spread over [0, n), or over the --queries rows) and the output says so. 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--ranks", opts->ranks,
                  "Context parallelism: share the n positions out to R ranks with equal pairs, and count the key/value "
                  "rows and bytes each rank receives forward and backward, beside ring attention's")
      ->type_name("R")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--d", opts->d, "With --ranks: head dimension of the K and V rows counted in bytes")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd->add_option("--kv-heads", opts->kvHeads, "With --ranks: key/value heads of the K and V rows counted in bytes")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--dtype", opts->dtype, "With --ranks: element type of K and V, f32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--input", opts->inputs,
                  "Data of a pattern that reads some: an int32 or int64 .npy per int input (DIMS, [B, DIMS] or "
                  "[B, H, DIMS]; batch entry 0 is counted, head set k with its first head's data). Float inputs "
                  "(read by score / sink) do not change the pairs: not needed, and not read")
      ->type_name("NAME=FILE.npy");
  cmd->footer(examplesFooter({"attnc analyze patterns/fixed.attn --n 4096",
                              "attnc analyze patterns/document.attn --n 4096 --input doc=doc.npy --json",
                              "attnc analyze patterns/strided.attn --n 16384 -D l=128 --json",
                              "attnc analyze patterns/fixed.attn --n 4096 --block 64 --block-cols 8",
                              "attnc analyze patterns/local.attn --n 32768 --queries 1",
                              "attnc analyze patterns/local.attn --n 1048576 --ranks 8 --no-connectivity"}));
  cmd->callback([opts, &exitCode] { exitCode = runAnalyze(*opts); });
}

} // namespace attnc::tool
