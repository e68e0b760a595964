//===- Picture.cpp - Drawing a pattern as PNG ------------------------------===//
#include "Picture.h"

#include <zlib.h>

#include <algorithm>

namespace attnc::tool {

namespace {
void putU32(std::vector<uint8_t> &out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8)
    out.push_back(static_cast<uint8_t>(v >> s));
}

void chunk(std::vector<uint8_t> &png, const char *type, const std::vector<uint8_t> &data) {
  putU32(png, static_cast<uint32_t>(data.size()));
  size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), data.begin(), data.end());
  uLong crc = crc32(0L, png.data() + start, static_cast<uInt>(png.size() - start));
  putU32(png, static_cast<uint32_t>(crc));
}
} // namespace

std::vector<uint8_t> renderPng(const ir::Raster &r, int64_t grid) {
  int64_t scale = std::max<int64_t>(1, 768 / r.side);
  int64_t size = r.side * scale;
  std::vector<uint8_t> raw;
  raw.reserve(static_cast<size_t>(size * (size * 3 + 1)));
  auto isGrid = [&](int64_t px) {
    if (grid <= 0 || grid >= r.n)
      return false;
    // Pixel px covers keys [px*n/size, (px+1)*n/size): a line where a
    // multiple of `grid` starts inside it.
    int64_t k0 = px * r.n / size, k1 = (px + 1) * r.n / size;
    return k0 > 0 && (k1 - 1) / grid != (k0 - 1) / grid;
  };
  for (int64_t y = 0; y < size; ++y) {
    raw.push_back(0); // filter: none
    for (int64_t x = 0; x < size; ++x) {
      uint8_t v = r.cells[(y / scale) * r.side + x / scale];
      ir::Rgb c = v ? ir::layerColor(v) : ir::Rgb{244, 244, 244};
      if (!v && (isGrid(x) || isGrid(y)))
        c = ir::Rgb{200, 200, 200};
      raw.push_back(c.r);
      raw.push_back(c.g);
      raw.push_back(c.b);
    }
  }
  uLongf bound = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(bound);
  compress2(z.data(), &bound, raw.data(), static_cast<uLong>(raw.size()), 6);
  z.resize(bound);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  putU32(ihdr, static_cast<uint32_t>(size));
  putU32(ihdr, static_cast<uint32_t>(size));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0}); // 8-bit RGB
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

} // namespace attnc::tool
