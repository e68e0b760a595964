//===- Picture.cpp - Drawing a pattern: ASCII and SVG ---------------------===//
//
// The square is the rectangle whose queries are all n positions: every
// drawing takes rows and columns apart, and says where the rows start only
// when they do not start at 0, so that the square's pictures stay as they
// were.
//
//===----------------------------------------------------------------------===//
#include "attnc/analysis/Picture.h"

#include "attnc/frontend/Driver.h"
#include "attnc/plan/RowEvaluator.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace attnc::ir {

namespace {

// Dark and light blue first, as in the paper's figures.
constexpr std::array<Rgb, 8> kPalette = {{{31, 78, 156},
                                          {127, 179, 230},
                                          {230, 126, 34},
                                          {39, 174, 96},
                                          {192, 57, 43},
                                          {142, 68, 173},
                                          {241, 196, 15},
                                          {22, 160, 133}}};
constexpr char kGlyphs[] = "#o+x*%@=";

std::string hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

std::string firstLine(const std::string &s) {
  std::string line = s.substr(0, s.find('\n'));
  size_t at = line.find("  @");
  if (at != std::string::npos)
    line = line.substr(0, at);
  size_t begin = line.find_first_not_of(' ');
  return begin == std::string::npos ? line : line.substr(begin);
}

std::string describe(const SetRef &s) {
  std::string text = firstLine(printSet(*s));
  if (s->kind == Gen::Intersect) {
    text.clear();
    for (const SetRef &c : s->children)
      text += (text.empty() ? "" : " & ") + firstLine(printSet(*c));
  }
  return text;
}

// A label is one line of a legend: comments go, any run of whitespace
// (line breaks included) becomes one space, and long text is cut.
std::string oneLine(std::string_view text) {
  std::string out;
  bool space = false, comment = false;
  for (char c : text) {
    if (comment) {
      comment = c != '\n';
      space = true;
      continue;
    }
    if (c == '#') {
      comment = true;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      space = true;
      continue;
    }
    if (space && !out.empty())
      out += ' ';
    space = false;
    out += c;
  }
  // Count code points, not bytes: a UTF-8 continuation byte is 10xxxxxx.
  size_t points = 0;
  for (size_t k = 0; k < out.size(); ++k) {
    if ((static_cast<unsigned char>(out[k]) & 0xC0) == 0x80)
      continue;
    if (++points == SetNames::kMaxLabelText) {
      size_t rest = k + 1;
      while (rest < out.size() && (static_cast<unsigned char>(out[rest]) & 0xC0) == 0x80)
        ++rest;
      if (rest < out.size()) {
        out.erase(k);
        while (!out.empty() && out.back() == ' ')
          out.pop_back();
        out += "\u2026";
      }
      break;
    }
  }
  return out;
}

bool encloses(SourceRange outer, SourceRange inner) {
  return outer.isValid() && inner.isValid() && outer.begin.buffer == inner.begin.buffer &&
         outer.begin.offset <= inner.begin.offset && inner.end.offset <= outer.end.offset;
}

/// The operands of a union as written, `(A | B) | C` flattened the way the
/// canonical IR flattens it; a set that is no union is its own operand.
void unionOperands(const dsl::Expr &e, std::vector<const dsl::Expr *> &out) {
  if (e.kind == dsl::ExprKind::Binary && e.binaryOp == dsl::BinaryOp::Union) {
    for (const dsl::ExprPtr &operand : e.operands)
      unionOperands(*operand, out);
    return;
  }
  out.push_back(&e);
}

std::string xmlEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  }
  return out;
}

/// The label of a head's set: the Sema term keeps the range of the set as
/// written, except that `causal` wraps it in an intersection located at the
/// `causal` statement; look through such wrappers.
std::optional<std::string> termLabel(const SetNames &names, TermRef t) {
  while (t) {
    if (std::optional<std::string> label = names.labelAt(t->loc()))
      return label;
    if (t->op() != Op::Intersect)
      break;
    t = t->arg(0);
  }
  return std::nullopt;
}

} // namespace

SetNames::SetNames(const Frontend &fe, const std::string &pattern) {
  const dsl::PatternDecl *decl = nullptr;
  for (const dsl::PatternDecl &d : fe.module().patterns)
    if (d.name == pattern)
      decl = &d;
  if (!decl)
    return;
  const dsl::SourceManager &sources = fe.sources();
  for (const dsl::Stmt &s : decl->body) {
    bool isLet = s.kind == dsl::StmtKind::Let;
    if (!s.value || !(isLet || s.kind == dsl::StmtKind::Attend ||
                      s.kind == dsl::StmtKind::HeadAttends))
      continue;
    std::string let = isLet ? s.name : std::string();
    written_.push_back({s.value->outerRange(), let, isLet, oneLine(sources.slice(s.value->range))});
    std::vector<const dsl::Expr *> operands;
    unionOperands(*s.value, operands);
    if (operands.size() < 2)
      continue;
    // A name is another let's: sets built from it carry that let's range.
    for (const dsl::Expr *operand : operands)
      if (operand->kind != dsl::ExprKind::Name)
        written_.push_back(
            {operand->outerRange(), let, false, oneLine(sources.slice(operand->range))});
  }
}

std::optional<std::string> SetNames::labelAt(SourceRange loc) const {
  const Written *best = nullptr;
  for (const Written &w : written_)
    if (encloses(w.range, loc) &&
        (!best || w.range.end.offset - w.range.begin.offset <
                      best->range.end.offset - best->range.begin.offset))
      best = &w;
  if (!best)
    return std::nullopt;
  if (best->let.empty())
    return best->text;
  if (best->whole)
    return best->let + "  " + best->text;
  return best->text + "  (in " + best->let + ")";
}

Rgb layerColor(size_t layer) { return kPalette[(layer - 1) % kPalette.size()]; }

std::string rowsCaption(const Raster &r) {
  const std::string keys = "the " + std::to_string(r.n) + " key positions";
  if (r.queries == 1)
    return "the row is the query i = " + std::to_string(r.n - 1) + ", the last of " + keys;
  return "rows are the queries i = " + std::to_string(r.firstRow()) + " .. " + std::to_string(r.n - 1) +
         ", the last " + std::to_string(r.queries) + " of " + keys;
}

std::string pictureTitle(const PatternIR &ir, int64_t n, std::optional<int64_t> head) {
  return pictureTitle(ir, n, head, n);
}

std::string pictureTitle(const PatternIR &ir, int64_t n, std::optional<int64_t> head,
                         int64_t queries) {
  std::string title = ir.name + " (n=" + std::to_string(n);
  if (queries != n)
    title += ", queries=" + std::to_string(queries);
  for (const auto &[name, value] : ir.params)
    title += ", " + name + "=" + std::to_string(value);
  if (ir.causal)
    title += ", causal";
  if (head)
    title += ", head " + std::to_string(*head);
  return title + ")";
}

std::vector<Layer> layersOf(const PatternIR &ir, std::optional<int64_t> head,
                            const SetNames &names) {
  std::vector<Layer> layers;
  if (!head && ir.heads.size() > 1) {
    for (const PatternIR::Head &h : ir.heads) {
      std::string label = "head";
      for (int64_t k : h.heads)
        label += " " + std::to_string(k);
      if (std::optional<std::string> set = termLabel(names, h.term))
        label += ": " + *set;
      layers.push_back({label, h.set});
    }
    return layers;
  }
  const PatternIR::Head *chosen = &ir.heads.front();
  if (head)
    for (const PatternIR::Head &h : ir.heads)
      if (std::find(h.heads.begin(), h.heads.end(), *head) != h.heads.end())
        chosen = &h;
  const SetRef &set = chosen->set;
  // Split the top-level union; an intersection distributes over it.
  auto splitUnion = [&](const SetRef &u, const std::vector<SetRef> &rest) {
    for (const SetRef &part : u->children) {
      std::vector<SetRef> conj{part};
      conj.insert(conj.end(), rest.begin(), rest.end());
      layers.push_back({names.labelAt(part->loc).value_or(describe(part)),
                        SetNode::intersect(conj, part->loc)});
    }
  };
  if (set->kind == Gen::Union) {
    splitUnion(set, {});
  } else if (set->kind == Gen::Intersect) {
    auto u = std::find_if(set->children.begin(), set->children.end(),
                          [](const SetRef &c) { return c->kind == Gen::Union; });
    if (u != set->children.end()) {
      std::vector<SetRef> rest;
      for (const SetRef &c : set->children)
        if (c != *u)
          rest.push_back(c);
      splitUnion(*u, rest);
    }
  }
  if (layers.empty())
    layers.push_back({termLabel(names, chosen->term).value_or(describe(set)), set});
  return layers;
}

Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide) {
  return rasterize(layers, n, maxSide, n);
}

Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide, int64_t queries) {
  ATTNC_CHECK(n >= 1 && maxSide >= 1 && queries >= 1 && queries <= n,
              "a picture has 1 to n query rows of n >= 1 keys");
  Raster r;
  r.n = n;
  r.queries = queries;
  r.cols = std::min(n, maxSide);
  // The rows shrink by the columns' factor, so a cell stays as many query
  // rows tall as it is keys wide (the square: as many rows as columns).
  r.rows = (queries * r.cols + n - 1) / n;
  r.cells.assign(static_cast<size_t>(r.rows * r.cols), 0);
  std::vector<RowEvaluator> evals;
  for (const Layer &l : layers)
    evals.emplace_back(l.set, n);
  for (int64_t q = 0; q < queries; ++q) {
    const int64_t i = r.firstRow() + q;
    uint8_t *row = &r.cells[q * r.rows / queries * r.cols];
    for (size_t k = 0; k < evals.size(); ++k)
      for (const Interval &x : evals[k].row(i)) {
        int64_t c0 = x.lo * r.cols / n, c1 = (x.hi - 1) * r.cols / n;
        for (int64_t c = c0; c <= c1; ++c)
          if (!row[c])
            row[c] = static_cast<uint8_t>(k + 1);
      }
  }
  return r;
}

std::optional<CanvasShape> canvasShape(const std::vector<int64_t> &sides, const std::vector<int64_t> &tile,
                                       int64_t n, std::string &error) {
  auto fail = [&](std::string what) {
    error = std::move(what);
    return std::nullopt;
  };
  if (sides.size() != 2 && sides.size() != 3)
    return fail("a canvas is H,W or T,H,W (frames, rows, columns), got " + std::to_string(sides.size()) +
                " numbers");
  CanvasShape shape;
  if (sides.size() == 3)
    shape.frames = sides[0];
  shape.height = sides[sides.size() - 2];
  shape.width = sides.back();
  if (shape.frames < 1 || shape.height < 1 || shape.width < 1)
    return fail("every side of the canvas must be at least 1");
  if (shape.frames > 4096 || shape.frames * shape.height > 4096 || shape.width > 4096)
    return fail("a canvas of at most 4096 rows (frames x rows) and 4096 columns is drawn");
  if (!tile.empty()) {
    if (tile.size() != sides.size())
      return fail("a tile has as many sides as the canvas: " + std::to_string(sides.size()) + " numbers");
    if (tile.size() == 3)
      shape.tileFrames = tile[0];
    shape.tileHeight = tile[tile.size() - 2];
    shape.tileWidth = tile.back();
    if (shape.tileFrames < 1 || shape.tileHeight < 1 || shape.tileWidth < 1 || shape.frames % shape.tileFrames ||
        shape.height % shape.tileHeight || shape.width % shape.tileWidth)
      return fail("each side of a tile must be at least 1 and divide the canvas's");
  }
  if (shape.size() > n)
    return fail("the canvas " + std::to_string(shape.frames) + "x" + std::to_string(shape.height) + "x" +
                std::to_string(shape.width) + " holds " + std::to_string(shape.size()) + " tokens, more than n = " +
                std::to_string(n));
  return shape;
}

int64_t canvasCentre(const CanvasShape &shape) {
  const int64_t cell = (shape.frames / 2 * shape.height + shape.height / 2) * shape.width + shape.width / 2;
  for (int64_t p = 0; p < shape.size(); ++p) // (cellOf's inverse: few tokens, once)
    if (shape.cellOf(p) == cell)
      return p;
  return 0;
}

Raster rasterizeCanvas(const std::vector<Layer> &layers, int64_t n, const CanvasShape &shape, int64_t query) {
  ATTNC_CHECK(shape.frames >= 1 && shape.height >= 1 && shape.width >= 1 && shape.size() <= n && query >= 0 &&
                  query < n,
              "a canvas of at most n tokens and a query in [0, n)");
  Raster r;
  r.cols = r.n = shape.width;
  r.rows = r.queries = shape.frames * shape.height;
  r.cells.assign(static_cast<size_t>(r.rows * r.cols), 0);
  const int64_t size = shape.size();
  int64_t outside = 0; // keys past the canvas
  for (size_t k = 0; k < layers.size(); ++k) {
    if (!layers[k].set)
      continue;
    for (const Interval &x : RowEvaluator(layers[k].set, n).row(query)) {
      for (int64_t j = x.lo; j < std::min(x.hi, size); ++j)
        if (uint8_t &cell = r.cells[static_cast<size_t>(shape.cellOf(j))]; !cell)
          cell = static_cast<uint8_t>(k + 1);
      outside += std::max<int64_t>(0, x.hi - std::max(x.lo, size));
    }
  }
  const int64_t cell = query < size ? shape.cellOf(query) : 0;
  if (query < size)
    r.cells[static_cast<size_t>(cell)] = static_cast<uint8_t>(layers.size() + 1);
  const int64_t qt = cell / (shape.height * shape.width), qy = cell / shape.width % shape.height,
                qx = cell % shape.width;
  std::ostringstream note;
  note << "the keys of the query i = " << query;
  if (query < size)
    note << " (" << (shape.frames > 1 ? "frame " + std::to_string(qt) + ", " : "") << "row " << qy << ", column "
         << qx << ")";
  else
    note << " (after the canvas)";
  note << " on the canvas of " << (shape.frames > 1 ? std::to_string(shape.frames) + " x " : "") << shape.height
       << " x " << shape.width << " tokens";
  if (shape.tileFrames * shape.tileHeight * shape.tileWidth > 1)
    note << " laid out in tiles of " << (shape.frames > 1 ? std::to_string(shape.tileFrames) + " x " : "")
         << shape.tileHeight << " x " << shape.tileWidth;
  else
    note << " in raster order";
  if (size < n)
    note << "; " << outside << " of the keys past it (positions " << size << " .. " << n - 1 << ") not drawn";
  r.note = note.str();
  r.colAxis = "column";
  r.rowAxis = shape.frames > 1 ? "frame, row" : "row";
  return r;
}

std::string renderAscii(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                        bool color) {
  std::ostringstream os;
  os << title << "\n";
  if (r.canvas())
    os << "(" << r.note << ")\n";
  if (!r.square())
    os << "(" << rowsCaption(r) << ")\n";
  if (r.cols < r.n || r.rows < r.queries)
    os << "(each character covers about " << r.rowsPerCell() << "x" << r.keysPerCell()
       << " pairs)\n";
  for (size_t k = 0; k < layers.size(); ++k)
    os << "  " << kGlyphs[k % 8] << "  " << layers[k].label << "\n";
  os << "  .  not attended\n";
  for (int64_t pr = 0; pr < r.rows; ++pr) {
    for (int64_t c = 0; c < r.cols; ++c) {
      uint8_t v = r.cells[pr * r.cols + c];
      if (!v) {
        os << '.';
        continue;
      }
      if (color) {
        Rgb rgb = layerColor(v);
        os << "\033[38;2;" << int(rgb.r) << ";" << int(rgb.g) << ";" << int(rgb.b) << "m"
           << kGlyphs[(v - 1) % 8] << "\033[0m";
      } else {
        os << kGlyphs[(v - 1) % 8];
      }
    }
    os << "\n";
  }
  return os.str();
}

std::string renderSvg(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                      int64_t grid) {
  int64_t cell = std::max<int64_t>(1, 720 / r.cols), rowCell = rowHeight(cell, r.rows);
  int64_t width = cell * r.cols, height = rowCell * r.rows;
  // A rectangle's rows get a second caption line.
  int64_t margin = 40, top = r.square() ? 50 : 64, legendLine = 20;
  int64_t docWidth = width + 2 * margin;
  int64_t docHeight = top + height + 20 + legendLine * static_cast<int64_t>(layers.size()) + 20;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << docWidth << "\" height=\""
     << docHeight << "\" viewBox=\"0 0 " << docWidth << " " << docHeight
     << "\" font-family=\"sans-serif\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << margin << "\" y=\"24\" font-size=\"16\">" << xmlEscape(title) << "</text>\n";
  os << "<text x=\"" << margin << "\" y=\"42\" font-size=\"11\" fill=\"#555\">"
     << (r.canvas() ? xmlEscape(r.note)
                    : std::string("query i (rows, top to bottom) attends to key j (columns, left to right)"))
     << "</text>\n";
  if (!r.square())
    os << "<text x=\"" << margin << "\" y=\"56\" font-size=\"11\" fill=\"#555\">"
       << xmlEscape(rowsCaption(r)) << "</text>\n";
  os << "<g transform=\"translate(" << margin << "," << top << ")\" shape-rendering=\"crispEdges\">\n";
  os << "<rect width=\"" << width << "\" height=\"" << height
     << "\" fill=\"#f4f4f4\" stroke=\"#999\"/>\n";
  for (int64_t pr = 0; pr < r.rows; ++pr) {
    for (int64_t c = 0; c < r.cols;) {
      uint8_t v = r.cells[pr * r.cols + c];
      int64_t e = c;
      while (e < r.cols && r.cells[pr * r.cols + e] == v)
        ++e;
      if (v)
        os << "<rect x=\"" << c * cell << "\" y=\"" << pr * rowCell << "\" width=\"" << (e - c) * cell
           << "\" height=\"" << rowCell << "\" fill=\"" << hex(layerColor(v)) << "\"/>\n";
      c = e;
    }
  }
  if (grid > 0 && grid < r.n) {
    // Lines at every multiple of `grid`: keys across, query positions down.
    for (int64_t g = grid; g < r.n; g += grid) {
      double at = static_cast<double>(g) * static_cast<double>(width) / static_cast<double>(r.n);
      os << "<line x1=\"" << at << "\" y1=\"0\" x2=\"" << at << "\" y2=\"" << height
         << "\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n";
      if (g <= r.firstRow())
        continue;
      at = static_cast<double>(g - r.firstRow()) * static_cast<double>(height) /
           static_cast<double>(r.queries);
      os << "<line x1=\"0\" y1=\"" << at << "\" x2=\"" << width << "\" y2=\"" << at
         << "\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n";
    }
  }
  os << "</g>\n";
  int64_t y = top + height + 24;
  for (size_t k = 0; k < layers.size(); ++k, y += legendLine) {
    os << "<rect x=\"" << margin << "\" y=\"" << y - 11 << "\" width=\"14\" height=\"14\" fill=\""
       << hex(layerColor(k + 1)) << "\"/>\n";
    os << "<text x=\"" << margin + 22 << "\" y=\"" << y << "\" font-size=\"12\">"
       << xmlEscape(layers[k].label) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

} // namespace attnc::ir
