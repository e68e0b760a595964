//===- Picture.h - Drawing a pattern: ASCII and SVG -----------------------===//
//
// A pattern is drawn the way the Sparse Transformer paper draws it: query
// rows top to bottom, keys left to right, one colour per set (the operands
// of the head's top-level union) or per head. Large n is drawn at reduced
// resolution: a cell is coloured when any pair it covers is attended.
// The legend names each colour the way the author did: IR nodes keep the
// source range they were built from, and SetNames maps a range back to the
// `let` (or the set written inline) it lies in. `attnc show` and the Python
// package's `attnc.show` draw with these; the CLI adds PNG (zlib) on top of
// the same raster.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnc {
class Frontend;
} // namespace attnc

namespace attnc::ir {

/// One colour of the picture: a set and what to call it in the legend.
struct Layer {
  std::string label;
  SetRef set;
};

/// What the author called the sets of one pattern, read from its source: the
/// name and definition of each `let`, and the text of each set written in an
/// `attend` or `head K attends` (and of each operand of a union written
/// there). Default-constructed, it knows no names.
class SetNames {
public:
  SetNames() = default;
  /// The sets of the pattern called `pattern` in the file `fe` parsed; none
  /// when `fe` has no such pattern. Copies what it needs: `fe` may go away.
  SetNames(const Frontend &fe, const std::string &pattern);

  /// The label of a set built at `loc`: `A1  { j : j / l == i / l }` when the
  /// innermost written set around `loc` is the definition of `let A1`, its
  /// text when it was written inline (`{ j : j < g }`; `... (in B)` for an
  /// operand of the union `let B` is), whitespace and comments collapsed to
  /// single spaces and text past kMaxLabelText code points cut to `…`.
  /// nullopt when no written set encloses `loc` (e.g. `causal`'s j <= i).
  std::optional<std::string> labelAt(SourceRange loc) const;

  static constexpr size_t kMaxLabelText = 56;

private:
  struct Written {
    SourceRange range;
    std::string let;   ///< the let it defines or lies in; empty when inline
    bool whole = false; ///< the let's whole definition, not one operand of it
    std::string text;
  };
  std::vector<Written> written_;
};

/// The layers of one head (its union's operands, each intersected with the
/// rest of the head's intersection), or of every head when `head` is unset
/// and the pattern has several distinct sets. `head`, when set, must lie in
/// [0, ir.numHeads). Labels come from `names` where it knows the set (for a
/// head, `head 0: ` and then its set's label), else from the canonical IR
/// (`block-diag j / 128 == i / 128`).
std::vector<Layer> layersOf(const PatternIR &ir, std::optional<int64_t> head,
                            const SetNames &names = {});

/// side x side cells; 0 = not attended, k = first layer (1-based) that covers it.
struct Raster {
  int64_t n = 0;
  int64_t side = 0;
  std::vector<uint8_t> cells;
};

/// min(n, maxSide) cells per side (n, maxSide >= 1); O(intervals + cells).
Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide);

/// "fixed (n=512, l=64, c=8, causal, head 0)": the picture's title.
std::string pictureTitle(const PatternIR &ir, int64_t n, std::optional<int64_t> head);

struct Rgb {
  uint8_t r, g, b;
};

/// The colour of layer k (1-based); the palette repeats after 8.
Rgb layerColor(size_t layer);

/// Text, one character per cell and a legend; `color` adds 24-bit ANSI colours.
std::string renderAscii(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                        bool color);
/// A standalone SVG document, with grid lines every `grid` keys when grid > 0.
std::string renderSvg(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                      int64_t grid);

} // namespace attnc::ir
