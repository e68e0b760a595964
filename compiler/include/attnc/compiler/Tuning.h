//===- Tuning.h - The autotuner's database of measured tile shapes --------===//
//
// `attnc tune` measures candidate plan options on this machine and records
// the winner here; `attnc compile` and the JIT use a recorded winner for the
// same pattern source, parameters, dtype, target and CPU features. The file
// is `tuning.db` in the cache directory ($ATTNC_CACHE_DIR, else
// ~/.cache/attnc), one entry per line:
//
//   KEY d=64 tile_rows=32 tile_cols=32 gflops=160.3
//
// and is rewritten atomically. A malformed line is ignored.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/compiler/Plan.h"
#include "attnc/compiler/Sema.h"

#include <optional>
#include <string>

namespace attnc::tuning {

struct Entry {
  std::string key;
  int64_t d = 0;
  plan::PlanOptions options;
  double gflops = 0;
};

/// The cache directory the JIT and the tuner share.
std::string cacheDirectory();
/// `cacheDirectory() + "/tuning.db"`.
std::string databasePath();

/// What identifies a tuned kernel: the pattern source and name, its parameter
/// values, the dtype and the host (target and CPU features).
std::string tuningKey(std::string_view source, const Pattern &pattern, const std::string &host);

/// The recorded entry for `key` (the last one written), if any.
std::optional<Entry> lookup(const std::string &path, const std::string &key);
/// Records `entry`, replacing an entry with the same key and d.
bool record(const std::string &path, const Entry &entry, std::string &error);

} // namespace attnc::tuning
