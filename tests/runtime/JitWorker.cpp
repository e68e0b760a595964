//===- JitWorker.cpp - A separate process for the cache and thread tests ---===//
//
// What JitCacheTest and ConcurrencyTest need a fresh process for: several
// processes sharing one cache directory, a process with other privileges,
// and the threads a run starts in a process that has started none yet. It
// prints one result per line on stdout (the tests parse them) and exits 0
// only when every step succeeded.
//
//   attnc_jit_worker compile DIR BACKEND ROUNDS EVICT_EVERY INDEX
//       ROUNDS times: (every EVICT_EVERY-th round counted from INDEX, 0:
//       never) remove the entries, compile patterns/fixed.attn (l=16) into
//       DIR ("-": $ATTNC_CACHE_DIR), make Worker.h's fixed call and print
//       "round R HASH"; then check that every entry in DIR loads ("torn"
//       counts those that do not). Last: "stats HITS MISSES REBUILT TORN"
//       and "warning TEXT" for each line of attnc_jit_last_warning. Exits
//       1 when a step failed, an entry was torn or one was rebuilt.
//   attnc_jit_worker threads NUM_THREADS
//       Runs a [2, 4, 300, 32] call with num_threads = NUM_THREADS (0: the
//       default) and prints "threads BEFORE AFTER": this process's threads
//       before the first run and after it.
//
//===----------------------------------------------------------------------===//
#include "TestSupport.h"
#include "Worker.h"

#include "attnc/attnc_jit.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace attnc::test;

std::vector<std::filesystem::path> entries(const std::string &dir) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto &e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".attnk")
      out.push_back(e.path());
  return out;
}

int compileRounds(const std::string &dir, const std::string &backend, int rounds, int evictEvery, int index) {
  const char *defines[] = {"l=16"};
  // "-": no directory of its own, $ATTNC_CACHE_DIR's.
  attnc_jit_options options{defines, 1, nullptr, dir == "-" ? nullptr : dir.c_str(), 0, backend.c_str()};
  bool ok = true;
  int64_t torn = 0;
  std::string warnings;
  for (int round = 0; round < rounds; ++round) {
    // Removing entries that other workers may be reading or publishing:
    // the next compiles miss and publish again while others read.
    if (evictEvery > 0 && (round + index) % evictEvery == 0)
      for (const auto &path : entries(dir))
        std::filesystem::remove(path);
    attnc_kernel *kernel = nullptr;
    if (attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &kernel) != ATTNC_OK) {
      std::printf("error compile round %d: %s\n", round, attnc_last_error());
      ok = false;
      continue;
    }
    if (*attnc_jit_last_warning())
      warnings += std::string(attnc_jit_last_warning()) + "\n";
    const std::string hash = fixedRunHash(kernel, 1);
    if (hash.empty()) {
      std::printf("error run round %d: %s\n", round, attnc_last_error());
      ok = false;
    }
    attnc_kernel_free(kernel);
    std::printf("round %d %s\n", round, hash.c_str());
    // An entry that is there is whole: it was renamed into place complete.
    for (const auto &path : entries(dir)) {
      attnc_kernel *entry = nullptr;
      attnc_status s = attnc_kernel_load(path.c_str(), &entry);
      attnc_kernel_free(entry);
      if (s == ATTNC_ERROR_IO) // removed by another worker since listed
        continue;
      if (s != ATTNC_OK) {
        std::printf("torn %s: %s\n", path.c_str(), attnc_last_error());
        ++torn;
      }
    }
  }
  int64_t hits = 0, misses = 0, rebuilt = 0;
  attnc_jit_cache_stats(&hits, &misses, &rebuilt);
  std::printf("stats %lld %lld %lld %lld\n", static_cast<long long>(hits), static_cast<long long>(misses),
              static_cast<long long>(rebuilt), static_cast<long long>(torn));
  std::istringstream lines(warnings);
  for (std::string line; std::getline(lines, line);)
    std::printf("warning %s\n", line.c_str());
  return ok && torn == 0 && rebuilt == 0 ? 0 : 1;
}

int64_t threadsOfThisProcess() {
  int64_t count = 0;
  for ([[maybe_unused]] const auto &e : std::filesystem::directory_iterator("/proc/self/task"))
    ++count;
  return count;
}

int countThreads(int32_t threads) {
  const int64_t before = threadsOfThisProcess();
  attnc_jit_options options{nullptr, 0, nullptr, nullptr, 1, "fused"};
  attnc_kernel *kernel = nullptr;
  if (attnc_jit_compile_file(patternPath("fixed").c_str(), &options, &kernel) != ATTNC_OK) {
    std::printf("error compile: %s\n", attnc_last_error());
    return 1;
  }
  // [2, 4, 300, 32]: eight slices, more than any thread count asked for.
  const int64_t b = 2, h = 4, n = 300, d = 32;
  std::vector<float> x = randomFloats(static_cast<size_t>(b * h * n * d), 5, 1), o(x.size());
  attnc_tensor tx = view(x, b, h, n, d), to = view(o, b, h, n, d);
  attnc_run_options options2{0.0f, threads};
  attnc_status s = attnc_run(kernel, &tx, &tx, &tx, &to, &options2);
  attnc_kernel_free(kernel);
  if (s != ATTNC_OK) {
    std::printf("error run: %s\n", attnc_last_error());
    return 1;
  }
  std::printf("threads %lld %lld\n", static_cast<long long>(before),
              static_cast<long long>(threadsOfThisProcess()));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // The output goes to a file the parent reads after the exit.
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "compile" && argc == 7)
    return compileRounds(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
  if (mode == "threads" && argc == 3)
    return countThreads(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: attnc_jit_worker compile DIR BACKEND ROUNDS EVICT_EVERY INDEX\n"
                       "       attnc_jit_worker threads NUM_THREADS\n");
  return 2;
}
