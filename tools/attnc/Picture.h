//===- Picture.h - Drawing a pattern as PNG -------------------------------===//
//
// ASCII and SVG pictures are the compiler's (attnc/analysis/Picture.h); the
// CLI adds PNG, which needs zlib.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/analysis/Picture.h"

#include <cstdint>
#include <vector>

namespace attnc::tool {

/// A PNG file's bytes (RGB, zlib-compressed), `grid` as for ir::renderSvg.
std::vector<uint8_t> renderPng(const ir::Raster &r, int64_t grid);

} // namespace attnc::tool
