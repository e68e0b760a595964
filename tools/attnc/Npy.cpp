//===- Npy.cpp - Reading and writing NumPy .npy files (floats, ints) ------===//
#include "Npy.h"

#include "attnc/support/Files.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace attnc::tool {

namespace {

/// Value of `key` in the header dict, as raw text up to the next top-level
/// comma or closing brace.
bool dictValue(const std::string &header, const std::string &key, std::string &value) {
  size_t at = header.find("'" + key + "'");
  if (at == std::string::npos)
    at = header.find("\"" + key + "\"");
  if (at == std::string::npos)
    return false;
  size_t colon = header.find(':', at);
  if (colon == std::string::npos)
    return false;
  size_t k = colon + 1;
  int depth = 0;
  size_t begin = k;
  for (; k < header.size(); ++k) {
    char c = header[k];
    if (c == '(' || c == '[')
      ++depth;
    else if (c == ')' || c == ']')
      --depth;
    else if ((c == ',' || c == '}') && depth == 0)
      break;
  }
  value = header.substr(begin, k - begin);
  auto trim = [](std::string &s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
      s.erase(s.begin());
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
      s.pop_back();
  };
  trim(value);
  return true;
}

/// The header of a .npy file: its dtype text, its shape, and where and how
/// many elements of `sizeOf(descr)` bytes follow (the payload checked against
/// the shape). `accepts` names the dtypes the caller takes, for the message.
bool parseHeader(const std::string &bytes, std::string &descr, std::vector<int64_t> &outShape, size_t &dataStart,
                 size_t &count, size_t (*sizeOf)(const std::string &), const char *accepts, std::string &error) {
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    error = "not a .npy file (bad magic)";
    return false;
  }
  unsigned major = static_cast<unsigned char>(bytes[6]);
  size_t headerLen, headerStart;
  if (major == 1) {
    headerLen = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    headerStart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) {
      error = "truncated .npy header";
      return false;
    }
    headerLen = 0;
    for (int k = 3; k >= 0; --k)
      headerLen = (headerLen << 8) | static_cast<unsigned char>(bytes[8 + k]);
    headerStart = 12;
  } else {
    error = "unsupported .npy format version " + std::to_string(major);
    return false;
  }
  if (bytes.size() < headerStart + headerLen) {
    error = "truncated .npy header";
    return false;
  }
  std::string header = bytes.substr(headerStart, headerLen);
  std::string fortran, shape;
  if (!dictValue(header, "descr", descr) || !dictValue(header, "fortran_order", fortran) ||
      !dictValue(header, "shape", shape)) {
    error = "malformed .npy header: '" + header + "'";
    return false;
  }
  if (!sizeOf(descr)) {
    error = "dtype " + descr + " is not supported; attnc takes " + accepts;
    return false;
  }
  if (fortran != "False") {
    error = "Fortran-order arrays are not supported; save a C-order array";
    return false;
  }
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') {
    error = "malformed .npy shape '" + shape + "'";
    return false;
  }
  std::vector<int64_t> &dims = outShape;
  dims.clear();
  std::string inner = shape.substr(1, shape.size() - 2);
  size_t k = 0;
  while (k < inner.size()) {
    while (k < inner.size() && (std::isspace(static_cast<unsigned char>(inner[k])) || inner[k] == ','))
      ++k;
    if (k >= inner.size())
      break;
    if (!std::isdigit(static_cast<unsigned char>(inner[k]))) {
      error = "malformed .npy shape '" + shape + "'";
      return false;
    }
    int64_t v = 0;
    while (k < inner.size() && std::isdigit(static_cast<unsigned char>(inner[k]))) {
      if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) {
        error = "dimension too large in .npy shape '" + shape + "'";
        return false;
      }
      v = v * 10 + (inner[k++] - '0');
    }
    while (k < inner.size() && (inner[k] == 'L' || std::isspace(static_cast<unsigned char>(inner[k]))))
      ++k;
    dims.push_back(v);
  }
  __int128 elements = 1;
  for (int64_t dim : dims) {
    elements *= dim;
    if (elements > (static_cast<__int128>(1) << 40)) {
      error = "array too large";
      return false;
    }
  }
  const size_t payload = bytes.size() - headerStart - headerLen, size = sizeOf(descr);
  if (static_cast<__int128>(payload) != elements * size) {
    error = "payload has " + std::to_string(payload) + " bytes but shape " + shape + " needs " +
            std::to_string(static_cast<int64_t>(elements * size));
    return false;
  }
  dataStart = headerStart + headerLen;
  count = static_cast<size_t>(elements);
  return true;
}

bool isDescr(const std::string &descr, const char *type) {
  return descr == std::string("'") + type + "'" || descr == std::string("\"") + type + "\"";
}
size_t floatSize(const std::string &descr) { return isDescr(descr, "<f4") ? 4 : 0; }
size_t realSize(const std::string &descr) { return isDescr(descr, "<f4") ? 4 : isDescr(descr, "<f8") ? 8 : 0; }
size_t intSize(const std::string &descr) { return isDescr(descr, "<i4") ? 4 : isDescr(descr, "<i8") ? 8 : 0; }

} // namespace

bool parseNpy(const std::string &bytes, NpyArray &out, std::string &error) {
  std::string descr;
  size_t start = 0, count = 0;
  if (!parseHeader(bytes, descr, out.shape, start, count, floatSize, "float32 ('<f4')", error))
    return false;
  out.data.resize(count);
  // An empty array's data() may be null, which memcpy must never be given.
  if (count)
    std::memcpy(out.data.data(), bytes.data() + start, count * 4);
  return true;
}

bool parseNpyInts(const std::string &bytes, NpyIntArray &out, std::string &error) {
  std::string descr;
  size_t start = 0, count = 0;
  if (!parseHeader(bytes, descr, out.shape, start, count, intSize, "int32 ('<i4') or int64 ('<i8') here", error))
    return false;
  out.data.resize(count);
  const char *payload = bytes.data() + start;
  for (size_t k = 0; k < count; ++k) {
    if (intSize(descr) == 4) {
      int32_t v;
      std::memcpy(&v, payload + 4 * k, 4);
      out.data[k] = v;
    } else {
      std::memcpy(&out.data[k], payload + 8 * k, 8);
    }
  }
  return true;
}

bool parseNpyFloats(const std::string &bytes, NpyArray &out, std::string &error) {
  std::string descr;
  size_t start = 0, count = 0;
  if (!parseHeader(bytes, descr, out.shape, start, count, realSize, "float32 ('<f4') or float64 ('<f8') here",
                   error))
    return false;
  out.data.resize(count);
  const char *payload = bytes.data() + start;
  const bool wide = realSize(descr) == 8;
  for (size_t k = 0; k < count; ++k) {
    double v;
    if (wide) {
      std::memcpy(&v, payload + 8 * k, 8);
    } else {
      float f;
      std::memcpy(&f, payload + 4 * k, 4);
      v = f;
    }
    if (!std::isfinite(v)) {
      error = "entry " + std::to_string(k) + " (in C order) is " + (std::isnan(v) ? "NaN" : "infinite") +
              "; a float input must hold finite values";
      return false;
    }
    if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max())) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v);
      error = "entry " + std::to_string(k) + " (in C order) is " + text +
              ", outside float32's range (attnc reads float inputs as float32)";
      return false;
    }
    out.data[k] = static_cast<float>(v);
  }
  return true;
}

bool readNpyFloats(const std::string &path, NpyArray &out, std::string &error) {
  std::string bytes;
  if (!support::readFileBytes(path, bytes, error))
    return false;
  if (!parseNpyFloats(bytes, out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

bool readNpyInts(const std::string &path, NpyIntArray &out, std::string &error) {
  std::string bytes;
  if (!support::readFileBytes(path, bytes, error))
    return false;
  if (!parseNpyInts(bytes, out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

bool readNpy(const std::string &path, NpyArray &out, std::string &error) {
  std::string bytes;
  if (!support::readFileBytes(path, bytes, error))
    return false;
  if (!parseNpy(bytes, out, error)) {
    error = path + ": " + error;
    return false;
  }
  return true;
}

std::string encodeNpy(const NpyArray &array) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (size_t k = 0; k < array.shape.size(); ++k)
    header += (k ? ", " : "") + std::to_string(array.shape[k]);
  if (array.shape.size() == 1)
    header += ",";
  header += "), }";
  // Pad with spaces so that the payload starts at a multiple of 64 bytes.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out.append(reinterpret_cast<const char *>(array.data.data()), array.data.size() * sizeof(float));
  return out;
}

bool writeNpy(const std::string &path, const NpyArray &array, std::string &error) {
  return support::writeFileAtomically(path, encodeNpy(array), error);
}

} // namespace attnc::tool
