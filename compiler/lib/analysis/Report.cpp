//===- Report.cpp - Every analysis of a pattern at one n, and its JSON ----===//
//
// The JSON is written by hand, field by field, so that its text stays what
// the tests and the docs show: numbers as integers, the mean with 6 decimals,
// the waste with 4.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Report.h"

#include "attnc/support/Json.h"

#include <chrono>
#include <cstdio>
#include <sstream>

namespace attnc::ir {

namespace {

using support::jsonString;

std::string fmtDouble(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}


std::string witnessPair(const std::optional<std::pair<int64_t, int64_t>> &w) {
  if (!w)
    return "null";
  return "[" + std::to_string(w->first) + ", " + std::to_string(w->second) + "]";
}

} // namespace

PatternReport analyzePattern(const PatternIR &ir, const ReportOptions &options) {
  auto start = std::chrono::steady_clock::now();
  PatternReport report;
  report.n = options.n;
  report.queries = options.queries ? options.queries : options.n;
  const QueryRows queryRows{report.n, report.queries};
  const int64_t cols = options.blockCols ? options.blockCols : options.blockRows;
  std::vector<SetRef> sets;
  for (const PatternIR::Head &h : ir.heads) {
    auto [rows, tiles] = analyzeRowsAndTiles(h.set, queryRows, options.blockRows, cols);
    report.heads.push_back({h.heads, rows, tiles});
    sets.push_back(h.set);
  }
  if (options.connectivity) {
    ConnectivityOptions search;
    search.firstRow = queryRows.firstRow();
    search.timeBudgetSeconds = options.connectivitySeconds;
    report.connectivity = analyzeConnectivity(sets, options.n, search);
  }
  if (options.ranks > 0) {
    ContextReport c;
    c.shards = shardContext(ir, options.n, options.ranks);
    c.rowBytes = 2 * options.headDim * options.kvHeads * options.elementBytes;
    const int64_t r = options.ranks;
    c.ringRows = options.n * (r - 1) / r;
    c.ringForwardBytes = c.ringRows * c.rowBytes;
    c.ringBackwardBytes = 2 * c.ringForwardBytes;
    for (int q = 0; q < options.ranks; ++q) {
      c.forwardBytes.push_back(c.shards.recvRows[static_cast<size_t>(q)] * c.rowBytes);
      c.backwardBytes.push_back(
          (c.shards.recvRows[static_cast<size_t>(q)] + c.shards.returnRows[static_cast<size_t>(q)]) * c.rowBytes);
    }
    report.context = std::move(c);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::string reportJson(const PatternIR &ir, const PatternReport &report) {
  std::ostringstream os;
  // The square's object is what it always was; fewer queries add keys.
  const bool rectangular = report.queries != report.n;
  os << "{\"pattern\": " << jsonString(ir.name) << ", \"n\": " << report.n;
  if (rectangular)
    os << ", \"queries\": " << report.queries << ", \"first_row\": " << report.n - report.queries;
  os << ", \"params\": {";
  for (size_t k = 0; k < ir.params.size(); ++k)
    os << (k ? ", " : "") << jsonString(ir.params[k].first) << ": " << ir.params[k].second;
  os << "}, \"num_heads\": " << ir.numHeads << ", \"causal\": " << (ir.causal ? "true" : "false")
     << ", \"heads\": [";
  for (size_t k = 0; k < report.heads.size(); ++k) {
    const HeadReport &h = report.heads[k];
    os << (k ? ", " : "") << "{\"head\": " << h.heads.front() << ", \"heads\": [";
    for (size_t m = 0; m < h.heads.size(); ++m)
      os << (m ? ", " : "") << h.heads[m];
    os << "], \"nnz\": " << h.rows.nnz << ", \"row_nnz\": {\"min\": " << h.rows.minRow
       << ", \"max\": " << h.rows.maxRow << ", \"mean\": " << fmtDouble(h.rows.mean, 6) << "}";
    if (rectangular && h.rows.keysRead)
      os << ", \"keys_read\": " << *h.rows.keysRead;
    os << ", \"empty_rows\": " << h.rows.emptyRows << ", \"empty_row_witness\": "
       << (h.rows.emptyWitness ? std::to_string(*h.rows.emptyWitness) : "null")
       << ", \"causal_leaks\": " << h.rows.leaks
       << ", \"causal_leak_witness\": " << witnessPair(h.rows.leakWitness)
       << ", \"blocks\": {\"size\": " << h.tiles.blockRows;
    if (h.tiles.blockCols != h.tiles.blockRows)
      os << ", \"cols\": " << h.tiles.blockCols;
    os << ", \"full\": " << h.tiles.full << ", \"partial\": " << h.tiles.partial
       << ", \"empty\": " << h.tiles.empty << ", \"executed_pairs\": " << h.tiles.executedPairs
       << ", \"waste\": " << fmtDouble(h.tiles.waste, 4) << "}}";
  }
  os << "]";
  if (const std::optional<Connectivity> &conn = report.connectivity) {
    os << ", \"connectivity\": {\"p\": " << (conn->p ? std::to_string(*conn->p) : "null")
       << ", \"unreachable_witness\": " << witnessPair(conn->unreachableWitness)
       << ", \"steps_exceeded\": " << (conn->gaveUp ? "true" : "false")
       << ", \"exact\": " << (conn->exact ? "true" : "false")
       << ", \"rows_checked\": " << conn->rowsChecked
       << ", \"stopped_early\": " << (conn->stoppedEarly ? "true" : "false") << "}";
  }
  if (const std::optional<ContextReport> &c = report.context) {
    const ShardPlan &p = c->shards;
    auto list = [&](const auto &values) {
      std::ostringstream out;
      out << "[";
      for (size_t k = 0; k < values.size(); ++k)
        out << (k ? ", " : "") << values[k];
      return out.str() + "]";
    };
    os << ", \"context_parallel\": {\"ranks\": " << p.ranks << ", \"layout\": \"" << p.layout
       << "\", \"backward_return\": \"" << "direct" << "\", \"ranges\": [";
    for (size_t q = 0; q < p.ranges.size(); ++q) {
      os << (q ? ", " : "") << "[";
      for (size_t k = 0; k < p.ranges[q].size(); ++k)
        os << (k ? ", " : "") << "[" << p.ranges[q][k].first << ", " << p.ranges[q][k].second << "]";
      os << "]";
    }
    std::vector<std::string> pairs;
    for (double v : p.pairs)
      pairs.push_back(fmtDouble(v, 1));
    os << "], \"pairs\": " << list(pairs) << ", \"pairs_max_over_mean\": " << fmtDouble(p.imbalance(), 6)
       << ", \"recv_rows\": " << list(p.recvRows) << ", \"return_rows\": " << list(p.returnRows)
       << ", \"row_bytes\": " << c->rowBytes << ", \"forward_bytes\": " << list(c->forwardBytes)
       << ", \"backward_bytes\": " << list(c->backwardBytes) << ", \"ring_recv_rows\": " << c->ringRows
       << ", \"ring_forward_bytes\": " << c->ringForwardBytes
       << ", \"ring_backward_bytes\": " << c->ringBackwardBytes << "}";
  }
  os << ", \"seconds\": " << fmtDouble(report.seconds, 6) << "}\n";
  return os.str();
}

} // namespace attnc::ir
