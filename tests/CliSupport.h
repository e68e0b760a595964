//===- CliSupport.h - Running the attnc binary from tests -----------------===//
//
// Shared by the command-line and golden tests: run `attnc` and capture its
// exit code, stdout and stderr; a scratch directory per test; a strict JSON
// reader that keeps integers and floats apart.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "ScratchDir.h"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace attnc::test {

struct CommandResult {
  int exitCode = -1; ///< -1 when the process did not exit normally
  std::string out, err;
};

/// Runs a shell command line; stdout and stderr are captured separately.
CommandResult runCommand(const std::string &commandLine);
/// Runs the built attnc with `args` (a shell fragment), after `env`
/// assignments ("NAME=value ...").
CommandResult attnc(const std::string &args, const std::string &env = "");

/// A library pattern's path: patterns/NAME.attn in the source tree.
std::string libraryPattern(const std::string &name);

std::string readFile(const std::string &path);
void writeFile(const std::string &path, const std::string &bytes);


/// A JSON value. Numbers written without '.', 'e' or 'E' are Int.
struct Json {
  enum Kind { Null, Bool, Int, Float, String, Array, Object } kind = Null;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0; ///< Int and Float both set it
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object; ///< in document order

  bool has(const std::string &key) const;
  /// The member `key`; throws std::runtime_error when absent or not an object.
  const Json &operator[](const std::string &key) const;
  std::vector<std::string> keys() const;
};

/// Parses exactly one JSON value (surrounding whitespace allowed); throws
/// std::runtime_error with the offset on malformed input or duplicate keys.
Json parseJson(const std::string &text);

} // namespace attnc::test
