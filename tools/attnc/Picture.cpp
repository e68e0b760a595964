//===- Picture.cpp - Drawing a pattern: ASCII, SVG and PNG ----------------===//
#include "Picture.h"

#include "attnc/plan/RowEvaluator.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>

namespace attnc::tool {

namespace {

struct Rgb {
  uint8_t r, g, b;
};

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

Rgb colorOf(size_t layer) { return kPalette[(layer - 1) % kPalette.size()]; }

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

std::string describe(const ir::SetRef &s) {
  std::string text = firstLine(ir::printSet(*s));
  if (s->kind == ir::Gen::Intersect) {
    text.clear();
    for (const ir::SetRef &c : s->children)
      text += (text.empty() ? "" : " & ") + firstLine(ir::printSet(*c));
  }
  return text;
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

} // namespace

std::vector<Layer> layersOf(const ir::PatternIR &ir, std::optional<int64_t> head) {
  std::vector<Layer> layers;
  if (!head && ir.heads.size() > 1) {
    for (const ir::PatternIR::Head &h : ir.heads) {
      std::string label = "head";
      for (int64_t k : h.heads)
        label += " " + std::to_string(k);
      layers.push_back({label, h.set});
    }
    return layers;
  }
  const ir::PatternIR::Head *chosen = &ir.heads.front();
  if (head)
    for (const ir::PatternIR::Head &h : ir.heads)
      if (std::find(h.heads.begin(), h.heads.end(), *head) != h.heads.end())
        chosen = &h;
  const ir::SetRef &set = chosen->set;
  // Split the top-level union; an intersection distributes over it.
  auto splitUnion = [&](const ir::SetRef &u, const std::vector<ir::SetRef> &rest) {
    for (const ir::SetRef &part : u->children) {
      std::vector<ir::SetRef> conj{part};
      conj.insert(conj.end(), rest.begin(), rest.end());
      layers.push_back({describe(part), ir::SetNode::intersect(conj, part->loc)});
    }
  };
  if (set->kind == ir::Gen::Union) {
    splitUnion(set, {});
  } else if (set->kind == ir::Gen::Intersect) {
    auto u = std::find_if(set->children.begin(), set->children.end(),
                          [](const ir::SetRef &c) { return c->kind == ir::Gen::Union; });
    if (u != set->children.end()) {
      std::vector<ir::SetRef> rest;
      for (const ir::SetRef &c : set->children)
        if (c != *u)
          rest.push_back(c);
      splitUnion(*u, rest);
    }
  }
  if (layers.empty())
    layers.push_back({describe(set), set});
  return layers;
}

Raster rasterize(const std::vector<Layer> &layers, int64_t n, int64_t maxSide) {
  Raster r;
  r.n = n;
  r.side = std::min(n, maxSide);
  r.cells.assign(static_cast<size_t>(r.side * r.side), 0);
  std::vector<ir::RowEvaluator> evals;
  for (const Layer &l : layers)
    evals.emplace_back(l.set, n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t pr = i * r.side / n;
    uint8_t *row = &r.cells[pr * r.side];
    for (size_t k = 0; k < evals.size(); ++k)
      for (const Interval &x : evals[k].row(i)) {
        int64_t c0 = x.lo * r.side / n, c1 = (x.hi - 1) * r.side / n;
        for (int64_t c = c0; c <= c1; ++c)
          if (!row[c])
            row[c] = static_cast<uint8_t>(k + 1);
      }
  }
  return r;
}

std::string renderAscii(const Raster &r, const std::vector<Layer> &layers, const std::string &title,
                        bool color) {
  std::ostringstream os;
  os << title << "\n";
  if (r.side < r.n)
    os << "(each character covers about " << (r.n + r.side - 1) / r.side << "x"
       << (r.n + r.side - 1) / r.side << " pairs)\n";
  for (size_t k = 0; k < layers.size(); ++k)
    os << "  " << kGlyphs[k % 8] << "  " << layers[k].label << "\n";
  os << "  .  not attended\n";
  for (int64_t pr = 0; pr < r.side; ++pr) {
    for (int64_t c = 0; c < r.side; ++c) {
      uint8_t v = r.cells[pr * r.side + c];
      if (!v) {
        os << '.';
        continue;
      }
      if (color) {
        Rgb rgb = colorOf(v);
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
  int64_t cell = std::max<int64_t>(1, 720 / r.side);
  int64_t size = cell * r.side;
  int64_t margin = 40, top = 50, legendLine = 20;
  int64_t width = size + 2 * margin;
  int64_t height = top + size + 20 + legendLine * static_cast<int64_t>(layers.size()) + 20;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
     << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << margin << "\" y=\"24\" font-size=\"16\">" << xmlEscape(title) << "</text>\n";
  os << "<text x=\"" << margin << "\" y=\"42\" font-size=\"11\" fill=\"#555\">query i (rows, "
        "top to bottom) attends to key j (columns, left to right)</text>\n";
  os << "<g transform=\"translate(" << margin << "," << top << ")\" shape-rendering=\"crispEdges\">\n";
  os << "<rect width=\"" << size << "\" height=\"" << size
     << "\" fill=\"#f4f4f4\" stroke=\"#999\"/>\n";
  for (int64_t pr = 0; pr < r.side; ++pr) {
    for (int64_t c = 0; c < r.side;) {
      uint8_t v = r.cells[pr * r.side + c];
      int64_t e = c;
      while (e < r.side && r.cells[pr * r.side + e] == v)
        ++e;
      if (v)
        os << "<rect x=\"" << c * cell << "\" y=\"" << pr * cell << "\" width=\"" << (e - c) * cell
           << "\" height=\"" << cell << "\" fill=\"" << hex(colorOf(v)) << "\"/>\n";
      c = e;
    }
  }
  if (grid > 0 && grid < r.n) {
    for (int64_t g = grid; g < r.n; g += grid) {
      double at = static_cast<double>(g) * static_cast<double>(size) / static_cast<double>(r.n);
      os << "<line x1=\"" << at << "\" y1=\"0\" x2=\"" << at << "\" y2=\"" << size
         << "\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n";
      os << "<line x1=\"0\" y1=\"" << at << "\" x2=\"" << size << "\" y2=\"" << at
         << "\" stroke=\"#bbb\" stroke-width=\"0.5\"/>\n";
    }
  }
  os << "</g>\n";
  int64_t y = top + size + 24;
  for (size_t k = 0; k < layers.size(); ++k, y += legendLine) {
    os << "<rect x=\"" << margin << "\" y=\"" << y - 11 << "\" width=\"14\" height=\"14\" fill=\""
       << hex(colorOf(k + 1)) << "\"/>\n";
    os << "<text x=\"" << margin + 22 << "\" y=\"" << y << "\" font-size=\"12\">"
       << xmlEscape(layers[k].label) << "</text>\n";
  }
  os << "</svg>\n";
  return os.str();
}

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

std::vector<uint8_t> renderPng(const Raster &r, int64_t grid) {
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
      Rgb c = v ? colorOf(v) : Rgb{244, 244, 244};
      if (!v && (isGrid(x) || isGrid(y)))
        c = Rgb{200, 200, 200};
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
