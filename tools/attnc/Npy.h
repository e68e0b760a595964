//===- Npy.h - Reading and writing NumPy .npy files (floats, ints) --------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::tool {

/// A C-order float32 array.
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// Parses a .npy file: format 1.0, 2.0 or 3.0, dtype '<f4' (little-endian
/// float32), C order. Returns false and sets `error` (naming the file) for
/// anything else: a bad magic, a truncated header or payload, another dtype,
/// Fortran order, a payload whose size does not match the shape.
bool readNpy(const std::string &path, NpyArray &out, std::string &error);
bool parseNpy(const std::string &bytes, NpyArray &out, std::string &error);

/// A C-order integer array (the inputs of patterns that read data).
struct NpyIntArray {
  std::vector<int64_t> shape;
  std::vector<int64_t> data;
};

/// Parses a .npy file of dtype '<i4' or '<i8' (little-endian int32 or
/// int64), C order, with the same checks as readNpy.
bool readNpyInts(const std::string &path, NpyIntArray &out, std::string &error);
bool parseNpyInts(const std::string &bytes, NpyIntArray &out, std::string &error);

/// Parses a .npy file of dtype '<f4' or '<f8' (little-endian float32 or
/// float64, the latter converted to float32), C order, with the same checks
/// as readNpy: the float inputs of patterns with a score modifier. A value
/// that is NaN, infinite or (float64) outside float32's range is refused,
/// naming its index.
bool readNpyFloats(const std::string &path, NpyArray &out, std::string &error);
bool parseNpyFloats(const std::string &bytes, NpyArray &out, std::string &error);

/// Writes a format 1.0 float32 C-order file.
bool writeNpy(const std::string &path, const NpyArray &array, std::string &error);
std::string encodeNpy(const NpyArray &array);

} // namespace attnc::tool
