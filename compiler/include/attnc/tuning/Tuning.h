//===- Tuning.h - The autotuner's database of measured tile shapes --------===//
//
// `attnc tune` measures candidate plan options on this machine and records
// the winner here; `attnc compile` and the JIT use a recorded winner for the
// same pattern source, parameters, dtype, target and CPU features. The file
// is `tuning.db` in the cache directory ($ATTNC_CACHE_DIR, else
// ~/.cache/attnc), one entry per line:
//
//   KEY d=64 tile_rows=32 tile_cols=32 gflops=160.3
//   KEY d=64 tile_rows=64 tile_cols=24 gflops=301.0 backend=halide schedule=r64-k24-s4x6-o6
//   KEY d=64 tile_rows=64 tile_cols=64 gflops=81000 backend=cuda gpu=NVIDIA_H200@9.0 dtype=bf16 variant=2
//
// (a line without `backend` is the fused backend's; a cuda line is one GPU's
// and dtype's winner among the forward kernel's variants, its key the
// pattern's with host "cuda"). Each backend has its
// own winner per key and d; the file is rewritten atomically. A malformed
// line is ignored. A fused kernel records every d's winner (TunedTiles); a
// halide kernel's code is compiled for one schedule, the last one tuned.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/Plan.h"
#include "attnc/frontend/Sema.h"

#include <optional>
#include <string>

namespace attnc::tuning {

struct Entry {
  std::string key;
  int64_t d = 0;
  plan::PlanOptions options;
  double gflops = 0;
  std::string backend = "fused"; ///< "fused" or "halide"
  std::string schedule;          ///< halide: the schedule's name (halide::scheduleName)
  // backend "cuda": the GPU (its name with '_' for spaces, '@', its compute
  // capability), the dtype and the forward kernel variant that won.
  std::string gpu, dtype;
  int variant = -1;
};

/// A GPU as tuning entries and kernel metadata name it: "NVIDIA_H200@9.0".
std::string gpuId(const std::string &name, int major, int minor);

/// The cache directory the JIT and the tuner share.
std::string cacheDirectory();
/// `cacheDirectory() + "/tuning.db"`.
std::string databasePath();

/// What identifies a tuned kernel: the pattern source and name, its parameter
/// values, the dtype, the host (target and CPU features) and the CPU
/// kernels' instruction set where ATTNC_FUSED_ISA forces one.
std::string tuningKey(std::string_view source, const Pattern &pattern, const std::string &host);

/// The recorded entry for `key` and `backend` (the last one written), if any.
std::optional<Entry> lookup(const std::string &path, const std::string &key,
                            const std::string &backend = "fused");
/// Every head dimension's entry for `key` and `backend` (the last written
/// for each d), by ascending d.
std::vector<Entry> lookupAll(const std::string &path, const std::string &key,
                             const std::string &backend = "fused");
/// Records `entry`, replacing an entry with the same key, d and backend (and
/// for cuda, GPU and dtype).
bool record(const std::string &path, const Entry &entry, std::string &error);

/// The fused backend's tuned tile shapes per head dimension (plan/Plan.h).
using plan::TunedTiles;
using plan::formatTunedTiles;
using plan::parseTunedTiles;

/// The cuda entries as kernel metadata (`cuda_tuned`):
/// "NVIDIA_H200@9.0:bf16:64=2;..." (GPU:dtype:d=variant).
std::string formatCudaTuned(const std::vector<Entry> &entries);

} // namespace attnc::tuning
