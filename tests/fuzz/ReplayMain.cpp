//===- ReplayMain.cpp - Runs a fuzz target over saved inputs --------------===//
//
// The main() that GCC builds of tests/fuzz/ link in place of libFuzzer's:
// every file named on the command line, and every regular file under every
// directory named (recursively, in sorted order so that runs are
// reproducible), is passed once to LLVMFuzzerTestOneInput. A crash is the
// test's failure; the exit code is 0 when every input ran. ctest replays the
// corpora and the saved regressions this way, without clang or sanitizers.
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

namespace fs = std::filesystem;

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIRECTORY...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int a = 1; a < argc; ++a) {
    fs::path p(argv[a]);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto &entry : fs::recursive_directory_iterator(p))
        if (entry.is_regular_file())
          inputs.push_back(entry.path());
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or directory\n", argv[a]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  for (const fs::path &p : inputs) {
    std::ifstream in(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // A copy of exactly the input's size, as libFuzzer passes it, so that a
    // read past the end is one past an allocation.
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(data.data(), data.size());
  }
  std::printf("%zu inputs replayed\n", inputs.size());
  return 0;
}
