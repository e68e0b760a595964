//===- Picture.cpp - Drawing a pattern as PNG ------------------------------===//
//
// The image is laid out top to bottom (title, key axis, raster, legend) with
// a running y, then the width is whatever the widest of them needs. Text is
// the 5x7 font of Font.h at an integer scale, so every pixel is either ink
// or background and the file compresses as well as the bare raster did.
// A raster of fewer queries than keys is as wide as the square's and as
// tall as its rows make it; its row labels are the queries' positions, and
// a caption under the title says where they start.
//
//===----------------------------------------------------------------------===//
#include "Picture.h"

#include "Font.h"

#include <zlib.h>

#include <algorithm>

namespace attnc::tool {

namespace {

constexpr ir::Rgb kInk{34, 34, 34};
constexpr ir::Rgb kMuted{96, 96, 96};
constexpr ir::Rgb kFrame{120, 120, 120};
constexpr ir::Rgb kUnattended{244, 244, 244};
constexpr ir::Rgb kGridLine{200, 200, 200};

constexpr int64_t kMargin = 24;
constexpr int64_t kTextScale = 2;
constexpr int64_t kTickLength = 5;
constexpr int64_t kSwatch = 16;
constexpr int64_t kLegendLine = 24;

int64_t textWidth(std::string_view text, int64_t scale) {
  int64_t glyphs = static_cast<int64_t>(decodeUtf8(text).size());
  return glyphs ? (glyphs * kGlyphAdvance - 1) * scale : 0;
}

/// An RGB image, white to begin with; drawing outside it is clipped.
class Canvas {
public:
  Canvas(int64_t width, int64_t height)
      : width_(width), height_(height), rgb_(static_cast<size_t>(width * height * 3), 255) {}

  void fill(int64_t x, int64_t y, int64_t w, int64_t h, ir::Rgb c) {
    for (int64_t py = std::max<int64_t>(y, 0); py < std::min(y + h, height_); ++py)
      for (int64_t px = std::max<int64_t>(x, 0); px < std::min(x + w, width_); ++px) {
        uint8_t *p = &rgb_[static_cast<size_t>((py * width_ + px) * 3)];
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
      }
  }

  void outline(int64_t x, int64_t y, int64_t w, int64_t h, ir::Rgb c) {
    fill(x, y, w, 1, c);
    fill(x, y + h - 1, w, 1, c);
    fill(x, y, 1, h, c);
    fill(x + w - 1, y, 1, h, c);
  }

  /// `text` with the top of its capitals at y. With `down`, it is turned a
  /// quarter clockwise: it reads top to bottom from (x, y), the tops of its
  /// letters to the right, within kGlyphRows * scale columns.
  void text(int64_t x, int64_t y, std::string_view text, int64_t scale, ir::Rgb c,
            bool down = false) {
    int64_t along = 0;
    for (char32_t ch : decodeUtf8(text)) {
      const Glyph &g = glyphOf(ch);
      for (int row = 0; row < kGlyphRows; ++row)
        for (int col = 0; col < kGlyphWidth; ++col) {
          if (!(g[row] >> (kGlyphWidth - 1 - col) & 1))
            continue;
          int64_t u = along + col * scale, v = row * scale;
          if (down)
            fill(x + (kGlyphRows - row - 1) * scale, y + u, scale, scale, c);
          else
            fill(x + u, y + v, scale, scale, c);
        }
      along += kGlyphAdvance * scale;
    }
  }

  /// Filter byte 0 (none) before each row, as IDAT expects.
  std::vector<uint8_t> scanlines() const {
    std::vector<uint8_t> raw;
    raw.reserve(static_cast<size_t>(height_ * (width_ * 3 + 1)));
    for (int64_t y = 0; y < height_; ++y) {
      raw.push_back(0);
      auto row = rgb_.begin() + static_cast<std::ptrdiff_t>(y * width_ * 3);
      raw.insert(raw.end(), row, row + static_cast<std::ptrdiff_t>(width_ * 3));
    }
    return raw;
  }

  int64_t width() const { return width_; }
  int64_t height() const { return height_; }

private:
  int64_t width_, height_;
  std::vector<uint8_t> rgb_;
};

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

std::vector<uint8_t> encodePng(const Canvas &canvas, const std::string &title) {
  std::vector<uint8_t> raw = canvas.scanlines();
  uLongf bound = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(bound);
  compress2(z.data(), &bound, raw.data(), static_cast<uLong>(raw.size()), 6);
  z.resize(bound);
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  putU32(ihdr, static_cast<uint32_t>(canvas.width()));
  putU32(ihdr, static_cast<uint32_t>(canvas.height()));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0}); // 8-bit RGB
  chunk(png, "IHDR", ihdr);
  // tEXt is Latin-1: keep the title only when it is ASCII, as titles are.
  if (std::all_of(title.begin(), title.end(), [](char c) { return c >= 0x20 && c < 0x7F; })) {
    std::vector<uint8_t> text = {'T', 'i', 't', 'l', 'e', 0};
    text.insert(text.end(), title.begin(), title.end());
    chunk(png, "tEXt", text);
  }
  chunk(png, "IDAT", z);
  chunk(png, "IEND", {});
  return png;
}

/// The ticks of one axis of `count` cells' worth of positions origin ..
/// origin + count, `size` pixels long, as offsets from origin: 0 always,
/// count always on the square (origin 0) and otherwise where it fits, and
/// the positions that are multiples of `grid` where they fit between their
/// neighbours (`extent`: the size along the axis of a position's label).
std::vector<int64_t> labelledTicks(int64_t count, int64_t origin, int64_t grid, int64_t size,
                                   int64_t (*extent)(int64_t)) {
  std::vector<int64_t> ticks = {0};
  auto at = [&](int64_t k) { return k * size / count; };
  auto fits = [&](int64_t a, int64_t b) {
    return at(b) - at(a) >= (extent(origin + a) + extent(origin + b)) / 2 + 2 * kTextScale * kGlyphAdvance;
  };
  if (grid > 0)
    for (int64_t k = (origin / grid + 1) * grid - origin; k < count; k += grid)
      if (fits(ticks.back(), k) && fits(k, count))
        ticks.push_back(k);
  if (count > 0 && (origin == 0 || fits(ticks.back(), count)))
    ticks.push_back(count);
  return ticks;
}

int64_t labelWidth(int64_t k) { return textWidth(std::to_string(k), kTextScale); }
int64_t labelHeight(int64_t) { return kGlyphCapHeight * kTextScale; }

} // namespace

std::vector<uint8_t> renderPng(const ir::Raster &r, const std::vector<ir::Layer> &layers,
                               const std::string &title, int64_t grid) {
  // Small n gets large cells; large n at least 2 pixels a cell while the
  // raster stays within 1024 pixels, one beyond. There are never more rows
  // than columns.
  int64_t scale = std::max<int64_t>({1, 768 / r.cols, std::min<int64_t>(2, 1024 / r.cols)});
  const int64_t rowScale = ir::rowHeight(scale, r.rows);
  const int64_t plotWidth = r.cols * scale, plotHeight = r.rows * rowScale;
  const int64_t first = r.firstRow();
  const int64_t capHeight = kGlyphCapHeight * kTextScale;
  const int64_t lineHeight = kGlyphRows * kTextScale;
  const bool showGrid = grid > 0 && grid < r.n;

  std::vector<int64_t> keyTicks = labelledTicks(r.n, 0, showGrid ? grid : 0, plotWidth, labelWidth);
  std::vector<int64_t> rowTicks =
      labelledTicks(r.queries, first, showGrid ? grid : 0, plotHeight, labelHeight);
  int64_t rowLabelWidth = 0;
  for (int64_t k : rowTicks)
    rowLabelWidth = std::max(rowLabelWidth, labelWidth(first + k));

  // Columns: "query i" turned on its side, the row labels, the ticks, the frame.
  const int64_t plotLeft = kMargin + lineHeight + 12 + rowLabelWidth + 4 + kTickLength + 1;
  const int64_t titleScale = textWidth(title, 3) <= plotWidth + plotLeft - kMargin ? 3 : 2;
  // Rows: the title, a rectangle's caption, "key j", the key labels, the
  // ticks, the frame.
  const std::string caption = r.canvas() ? r.note : r.square() ? std::string() : ir::rowsCaption(r);
  const int64_t titleY = kMargin;
  const int64_t captionY = titleY + kGlyphRows * titleScale + 10;
  const int64_t keyAxisY = caption.empty() ? titleY + kGlyphRows * titleScale + 14 : captionY + lineHeight + 14;
  const int64_t keyLabelY = keyAxisY + lineHeight + 6;
  const int64_t plotTop = keyLabelY + capHeight + 4 + kTickLength + 1;
  // "query i →" runs down beside the raster, past it when the raster is
  // shorter than the words.
  const std::string rowAxis = r.rowAxis + " \u2192";
  const int64_t rowAxisLength = textWidth(rowAxis, kTextScale);
  const int64_t legendY = plotTop + std::max(plotHeight + 1, rowAxisLength) + 22;

  std::vector<std::string> legend;
  for (const ir::Layer &l : layers)
    legend.push_back(l.label);
  legend.push_back("not attended");
  if (r.cols < r.n || r.rows < r.queries)
    legend.push_back("each cell covers about " + std::to_string(r.rowsPerCell()) + "x" +
                     std::to_string(r.keysPerCell()) + " pairs");
  const int64_t legendX = plotLeft - 1;
  const int64_t legendTextX = legendX + kSwatch + 10;
  int64_t width = plotLeft + plotWidth + 1 + labelWidth(r.n) / 2 + kMargin;
  width = std::max(width, kMargin + textWidth(title, titleScale) + kMargin);
  width = std::max(width, kMargin + textWidth(caption, kTextScale) + kMargin);
  for (const std::string &line : legend)
    width = std::max(width, legendTextX + textWidth(line, kTextScale) + kMargin);
  const int64_t height = legendY + static_cast<int64_t>(legend.size()) * kLegendLine + kMargin;

  Canvas canvas(width, height);
  canvas.text(kMargin, titleY, title, titleScale, kInk);
  if (!caption.empty())
    canvas.text(kMargin, captionY, caption, kTextScale, kMuted);

  const std::string keyAxis = r.colAxis + " \u2192";
  canvas.text(plotLeft + (plotWidth - textWidth(keyAxis, kTextScale)) / 2, keyAxisY, keyAxis,
              kTextScale, kMuted);
  // Turned clockwise, the arrow of "query i →" points down the rows.
  canvas.text(kMargin, plotTop + std::max<int64_t>(0, (plotHeight - rowAxisLength) / 2), rowAxis,
              kTextScale, kMuted, /*down=*/true);

  // Tick k marks the first pixel of key (or query row) k; the outer two sit
  // on the frame.
  auto at = [](int64_t k, int64_t count, int64_t size) { return k == 0 ? -1 : k * size / count; };
  for (int64_t k : keyTicks) {
    int64_t x = plotLeft + at(k, r.n, plotWidth);
    canvas.fill(x, plotTop - 1 - kTickLength, 1, kTickLength, kFrame);
    std::string label = std::to_string(k);
    canvas.text(x - labelWidth(k) / 2, keyLabelY, label, kTextScale, kInk);
  }
  for (int64_t k : rowTicks) {
    int64_t y = plotTop + at(k, r.queries, plotHeight);
    canvas.fill(plotLeft - 1 - kTickLength, y, kTickLength, 1, kFrame);
    std::string label = std::to_string(first + k);
    canvas.text(plotLeft - 1 - kTickLength - 4 - labelWidth(first + k), y - capHeight / 2, label,
                kTextScale, kInk);
  }

  // Pixel p of an axis covers positions [origin + p*count/size, origin +
  // (p+1)*count/size): a line where a multiple of `grid` starts inside it.
  auto isGrid = [&](int64_t p, int64_t origin, int64_t count, int64_t size) {
    if (!showGrid)
      return false;
    int64_t k0 = p * count / size, k1 = (p + 1) * count / size;
    return k0 > 0 && (origin + k1 - 1) / grid != (origin + k0 - 1) / grid;
  };
  for (int64_t y = 0; y < plotHeight; ++y) {
    const bool gridRow = isGrid(y, first, r.queries, plotHeight);
    for (int64_t x = 0; x < plotWidth; ++x) {
      uint8_t v = r.cells[(y / rowScale) * r.cols + x / scale];
      ir::Rgb c = v                                                ? ir::layerColor(v)
                  : (gridRow || isGrid(x, 0, r.n, plotWidth)) ? kGridLine
                                                                   : kUnattended;
      canvas.fill(plotLeft + x, plotTop + y, 1, 1, c);
    }
  }
  canvas.outline(plotLeft - 1, plotTop - 1, plotWidth + 2, plotHeight + 2, kFrame);

  for (size_t k = 0; k < legend.size(); ++k) {
    int64_t y = legendY + static_cast<int64_t>(k) * kLegendLine;
    if (k < layers.size()) {
      canvas.fill(legendX, y, kSwatch, kSwatch, ir::layerColor(k + 1));
    } else if (k == layers.size()) {
      canvas.fill(legendX, y, kSwatch, kSwatch, kUnattended);
      canvas.outline(legendX, y, kSwatch, kSwatch, kFrame);
    }
    canvas.text(legendTextX, y + (kSwatch - capHeight) / 2, legend[k], kTextScale,
                k <= layers.size() ? kInk : kMuted);
  }
  return encodePng(canvas, title);
}

} // namespace attnc::tool
