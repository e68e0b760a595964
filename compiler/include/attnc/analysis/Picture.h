//===- Picture.h - Drawing a pattern: ASCII and SVG -----------------------===//
//
// A pattern is drawn the way the Sparse Transformer paper draws it: query
// rows top to bottom, keys left to right, one colour per set (the operands
// of the head's top-level union) or per head. With fewer queries than keys
// the rows are the last `queries` positions (bottom-right alignment, as the
// runtime takes them), and the picture is that queries x n rectangle. Large
// n is drawn at reduced resolution, by one factor along both axes: a cell
// is coloured when any pair it covers is attended.
// The legend names each colour the way the author did: IR nodes keep the
// source range they were built from, and SetNames maps a range back to the
// `let` (or the set written inline) it lies in. `attnc show` and the Python
// package's `attnc.show` draw with these; the CLI adds PNG (zlib) on top of
// the same raster.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <algorithm>
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

/// rows x cols cells, row-major; 0 = not attended, k = first layer
/// (1-based) that covers it. Cell row pr covers the query positions
/// firstRow() + [pr * queries / rows, (pr + 1) * queries / rows), cell
/// column c the keys [c * n / cols, (c + 1) * n / cols).
///
/// A canvas picture (rasterizeCanvas) is the keys of one query laid out on
/// a grid instead: n is its columns and queries its rows (one per canvas
/// row, frame after frame), note says so, and the axes have its names.
struct Raster {
  int64_t n = 0;       ///< keys, and the positions the queries are the last of
  int64_t queries = 0; ///< query rows drawn: positions [n - queries, n)
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> cells;
  std::string note;                        ///< a canvas picture's line under the title (empty: the pairs)
  std::string colAxis = "key j", rowAxis = "query i";

  bool canvas() const { return !note.empty(); }
  int64_t firstRow() const { return canvas() ? 0 : n - queries; }
  bool square() const { return canvas() || queries == n; }
  /// Query rows and keys one cell covers at most (1 x 1 when not downsampled).
  int64_t rowsPerCell() const { return (queries + rows - 1) / rows; }
  int64_t keysPerCell() const { return (n + cols - 1) / cols; }
};

/// The n x n square: min(n, maxSide) cells per side (n, maxSide >= 1);
/// O(intervals + cells).
Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide);
/// The last `queries` rows (1 <= queries <= n) of n: min(n, maxSide) columns
/// and as many rows as the same downsampling leaves of `queries`,
/// ceil(queries * cols / n); O(intervals of those rows + cells).
Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide, int64_t queries);

/// A grid of `frames` x `height` x `width` tokens, the first tokens of a
/// sequence of n >= their count, in raster order (position p is frame
/// p / (height * width), row p / width % height, column p % width), or tile
/// by tile: tiles of tileFrames x tileHeight x tileWidth tokens (dividing
/// the sides), each tile's tokens consecutive in raster order within it,
/// the tiles in raster order over the canvas (sliding-tile attention's and
/// tiled NATTEN's layout).
struct CanvasShape {
  int64_t frames = 1, height = 0, width = 0;
  int64_t tileFrames = 1, tileHeight = 1, tileWidth = 1;
  int64_t size() const { return frames * height * width; }
  /// Position p's cell of the row-major frames x height x width grid.
  int64_t cellOf(int64_t p) const {
    const int64_t tile = p / (tileFrames * tileHeight * tileWidth), in = p % (tileFrames * tileHeight * tileWidth);
    const int64_t across = width / tileWidth, down = height / tileHeight;
    const int64_t t = tile / (down * across) * tileFrames + in / (tileHeight * tileWidth);
    const int64_t y = tile / across % down * tileHeight + in / tileWidth % tileHeight;
    const int64_t x = tile % across * tileWidth + in % tileWidth;
    return (t * height + y) * width + x;
  }
};

/// The canvas of sides H,W or T,H,W, laid out in tiles of sides TH,TW or
/// TT,TH,TW (`tile` empty: raster order), for a sequence of n positions;
/// nullopt with `error` set when they make none (a side below 1, a tile
/// that does not divide the canvas, more tokens than n, more than 4096 rows
/// of frames or columns to draw).
std::optional<CanvasShape> canvasShape(const std::vector<int64_t> &sides, const std::vector<int64_t> &tile,
                                       int64_t n, std::string &error);
/// The position of the canvas's centre token (frame T / 2, row H / 2,
/// column W / 2), in its layout.
int64_t canvasCentre(const CanvasShape &shape);

/// The keys of query `query` (0 <= query < n) on the canvas: frames * height
/// rows of width cells, row-major (frame after frame); 0 = not attended,
/// k = the first layer (1-based) with the key, layers.size() + 1 = the
/// query's own cell (which it may attend too: a legend entry for it goes
/// after the layers). O(intervals of the row + cells).
Raster rasterizeCanvas(const std::vector<Layer> &layers, int64_t n, const CanvasShape &shape, int64_t query);

/// How a rectangle's rows are numbered: "rows are the queries i = 4089 ..
/// 4095, the last 7 of the 4096 key positions" ("the row is the query i =
/// 4095, the last of the 4096 key positions" for one).
std::string rowsCaption(const Raster &r);

/// "fixed (n=512, l=64, c=8, causal, head 0)": the picture's title; with
/// fewer queries than n, "fixed (n=512, queries=8, l=64, ...)".
std::string pictureTitle(const PatternIR &ir, int64_t n, std::optional<int64_t> head);
std::string pictureTitle(const PatternIR &ir, int64_t n, std::optional<int64_t> head,
                         int64_t queries);

struct Rgb {
  uint8_t r, g, b;
};

/// The colour of layer k (1-based); the palette repeats after 8.
Rgb layerColor(size_t layer);

/// Text, one character per cell and a legend; `color` adds 24-bit ANSI
/// colours. With fewer queries than n, a line under the title names the
/// rows' positions.
std::string renderAscii(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                        bool color);
/// A standalone SVG document, with grid lines every `grid` keys (and at
/// every query position that is a multiple of it) when grid > 0. With
/// fewer queries than n, a line under the axes' caption names the rows'
/// positions, and a raster of few rows has them drawn taller than its cells
/// are wide, so that it stays at least kMinRasterHeight units tall.
std::string renderSvg(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                      int64_t grid);

/// The height below which a picture's rows are stretched (a decoding
/// step's one row would otherwise be a line one pixel thin).
constexpr int64_t kMinRasterHeight = 24;

/// The height of a row of cells `cell` units wide: `cell`, or taller when
/// `rows` of them would make the raster shorter than kMinRasterHeight.
inline int64_t rowHeight(int64_t cell, int64_t rows) {
  return std::max(cell, (kMinRasterHeight + rows - 1) / rows);
}

} // namespace attnc::ir
