//===- Picture.h - Drawing a pattern: ASCII, SVG and PNG ------------------===//
//
// A pattern is drawn the way the Sparse Transformer paper draws it: query
// rows top to bottom, keys left to right, one colour per set (the operands
// of the head's top-level union) or per head. Large n is drawn at reduced
// resolution: a pixel is coloured when any pair it covers is attended.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnc::tool {

/// One colour of the picture: a set and what to call it in the legend.
struct Layer {
  std::string label;
  ir::SetRef set;
};

/// The layers of one head (its union's operands, each intersected with the
/// rest of the head's intersection), or of every head when `head` is unset
/// and the pattern has several distinct sets.
std::vector<Layer> layersOf(const ir::PatternIR &ir, std::optional<int64_t> head);

/// side x side cells; 0 = not attended, k = first layer (1-based) that covers it.
struct Raster {
  int64_t n = 0;
  int64_t side = 0;
  std::vector<uint8_t> cells;
};

Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide);

std::string renderAscii(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                        bool color);
std::string renderSvg(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                      int64_t grid);
/// A PNG file's bytes (RGB, zlib-compressed).
std::vector<uint8_t> renderPng(const Raster &r, int64_t grid);

} // namespace attnc::tool
