//===- KernelFile.cpp - The on-disk format of a compiled kernel -----------===//
#include "attnc/format/KernelFile.h"

#include "attnc/support/Hash.h"

#include <cstdio>
#include <cstring>
#include <sstream>

namespace attnc::format {

using support::fnv1a;

namespace {
constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'C', 'K', 'R', 'N'};
constexpr uint64_t kMaxSection = uint64_t{1} << 32; // 4 GiB: anything larger is corrupt

void putU32(std::string &out, uint32_t v) {
  for (int k = 0; k < 4; ++k)
    out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
void putU64(std::string &out, uint64_t v) {
  for (int k = 0; k < 8; ++k)
    out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}

/// Reads little-endian fields from bytes [pos, end): nothing past `end` (the
/// checksum trailer) is ever read, whatever sizes the file claims.
struct Reader {
  const std::string &bytes;
  size_t pos = 0;
  size_t end = 0;
  bool take(void *dst, size_t n) {
    if (pos > end || end - pos < n)
      return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  }
  bool u32(uint32_t &v) {
    unsigned char b[4];
    if (!take(b, 4))
      return false;
    v = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
    return true;
  }
  bool u64(uint64_t &v) {
    unsigned char b[8];
    if (!take(b, 8))
      return false;
    v = 0;
    for (int k = 7; k >= 0; --k)
      v = (v << 8) | b[k];
    return true;
  }
};

std::string encodeMetadata(const std::map<std::string, std::string> &meta) {
  std::string out;
  for (const auto &[k, v] : meta)
    out += k + "=" + v + "\n";
  return out;
}
} // namespace

std::string encodeKernelFile(const KernelFile &file) {
  std::string out(kMagic, sizeof kMagic);
  putU32(out, kKernelFormatVersion);
  putU32(out, file.abiVersion);
  const std::pair<const char *, std::string> sections[] = {
      {"META", encodeMetadata(file.metadata)}, {"SRC ", file.source}, {"IR  ", file.ir}, {"CODE", file.code}};
  putU32(out, 4);
  for (const auto &[tag, body] : sections) {
    out.append(tag, 4);
    putU64(out, body.size());
    out += body;
  }
  putU64(out, fnv1a(out.data(), out.size()));
  return out;
}

bool decodeKernelFile(const std::string &bytes, KernelFile &out, std::string &error) {
  // Order: magic, the smallest possible size, then the checksum over every
  // byte, and only then any field of the header or a section: no offset or
  // size is trusted before the bytes are known to be the ones written.
  constexpr size_t kHeader = sizeof kMagic + 12, kTrailer = 8;
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    error = "not an attnc kernel file (bad magic)";
    return false;
  }
  if (bytes.size() < kHeader + kTrailer) {
    error = "kernel file is truncated (" + std::to_string(bytes.size()) + " bytes, the header alone needs " +
            std::to_string(kHeader + kTrailer) + ")";
    return false;
  }
  uint64_t stored = 0;
  Reader trailer{bytes, bytes.size() - kTrailer, bytes.size()};
  trailer.u64(stored);
  if (stored != fnv1a(bytes.data(), bytes.size() - kTrailer)) {
    error = "kernel file is corrupt (checksum mismatch)";
    return false;
  }
  Reader r{bytes, sizeof kMagic, bytes.size() - kTrailer};
  uint32_t format = 0, abi = 0, count = 0;
  r.u32(format);
  r.u32(abi);
  r.u32(count);
  if (format < kOldestKernelFormatVersion || format > kKernelFormatVersion) {
    error = "kernel file format " + std::to_string(format) + " is not supported (this runtime reads " +
            std::to_string(kOldestKernelFormatVersion) + " to " + std::to_string(kKernelFormatVersion) + ")";
    return false;
  }
  out = KernelFile{};
  out.formatVersion = format;
  out.abiVersion = abi;
  std::map<std::string, int> seen;
  for (uint32_t s = 0; s < count; ++s) {
    char tag[4];
    uint64_t size = 0;
    if (!r.take(tag, 4) || !r.u64(size) || size > kMaxSection || r.end - r.pos < size) {
      error = "kernel file is truncated or has an oversized section (section " + std::to_string(s) + " of " +
              std::to_string(count) + ")";
      return false;
    }
    std::string body = bytes.substr(r.pos, size);
    r.pos += size;
    std::string t(tag, 4);
    const bool known = t == "META" || t == "SRC " || t == "IR  " || t == "CODE";
    // A second copy of a section would silently replace the first.
    if (known && seen[t]++ > 0) {
      error = "kernel file has two '" + t + "' sections";
      return false;
    }
    if (t == "META") {
      std::istringstream lines(body);
      std::string line;
      while (std::getline(lines, line)) {
        size_t eq = line.find('=');
        if (eq == std::string::npos) {
          error = "kernel file metadata is malformed";
          return false;
        }
        out.metadata[line.substr(0, eq)] = line.substr(eq + 1);
      }
    } else if (t == "SRC ") {
      out.source = std::move(body);
    } else if (t == "IR  ") {
      out.ir = std::move(body);
    } else if (t == "CODE") {
      out.code = std::move(body);
    }
    // Unknown sections are skipped: later writers may add some.
  }
  if (r.pos != r.end) {
    error = "kernel file has " + std::to_string(r.end - r.pos) + " trailing bytes after its " +
            std::to_string(count) + " sections";
    return false;
  }
  return true;
}

} // namespace attnc::format
