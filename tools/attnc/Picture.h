//===- Picture.h - Drawing a pattern as PNG -------------------------------===//
//
// ASCII and SVG pictures are the compiler's (attnc/analysis/Picture.h); the
// CLI adds PNG, which needs zlib, with the same title and legend, drawn in
// the bitmap font of Font.h.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/analysis/Picture.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::tool {

/// A PNG file's bytes (8-bit RGB, zlib-compressed, a tEXt "Title" chunk):
/// `title` on top, "key j →" and tick labels above the raster, "query i"
/// and tick labels to its left (at 0, n and every `grid` keys when grid > 0,
/// where grid lines are drawn too), and below it the legend, one colour
/// swatch and label per layer. The raster sits in a 1-pixel frame, each
/// cell a square of max(1, 768 / cols) pixels, at least 2 while the raster
/// stays within 1024 pixels. With fewer queries than keys the rows' labels
/// are their positions (n - queries at the top), a caption under the title
/// says so (ir::rowsCaption), and a raster of few rows has them stretched
/// to stay ir::kMinRasterHeight pixels tall.
std::vector<uint8_t> renderPng(const ir::Raster &r, const std::vector<ir::Layer> &layers,
                               const std::string &title, int64_t grid);

} // namespace attnc::tool
