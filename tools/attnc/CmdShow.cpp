//===- CmdShow.cpp - attnc show -------------------------------------------===//
//
// With --queries NQ the picture is the last NQ query rows of the n x n
// square (bottom-right aligned, as the runtime takes fewer queries than
// keys), its rows labelled with their positions; without it, or with
// NQ = n, it is the square's. With --canvas H,W (or T,H,W) it is one
// query's keys on the grid of an image (or a video) instead.
//
//===----------------------------------------------------------------------===//
#include "CallData.h"
#include "Common.h"
#include "Picture.h"

#include <fstream>
#include <iostream>
#include <unistd.h>

namespace attnc::tool {

namespace {
struct ShowOptions {
  PatternOptions pattern;
  int64_t n = 0;
  std::optional<int64_t> queries; ///< unset: n
  std::optional<int64_t> head;
  std::string format;
  std::string output;
  int64_t grid = 0;
  int64_t maxSide = 0;
  std::vector<std::string> inputs; ///< --input NAME=FILE.npy
  std::vector<int64_t> canvas;     ///< --canvas H,W or T,H,W (empty: the square of pairs)
  std::optional<int64_t> query;    ///< --query: whose keys a canvas shows (default: its centre token)
  std::vector<int64_t> tile;       ///< --tile TH,TW or TT,TH,TW: the canvas's tokens tile by tile
};

/// The canvas of --canvas and --tile and the query of --query, checked
/// against n; nullopt after an error message.
std::optional<std::pair<ir::CanvasShape, int64_t>> canvasOf(const ShowOptions &opts, int &exitCode) {
  auto fail = [&](const std::string &what) {
    std::cerr << "attnc: error: " << what << "\n";
    exitCode = kExitUsage;
    return std::nullopt;
  };
  if (opts.queries)
    return fail("--queries draws rows of pairs; a --canvas picture draws one query's keys (--query)");
  std::string error;
  std::optional<ir::CanvasShape> shape = ir::canvasShape(opts.canvas, opts.tile, opts.n, error);
  if (!shape)
    return fail("--canvas" + std::string(opts.tile.empty() ? "" : " --tile") + ": " + error);
  const int64_t query = opts.query.value_or(ir::canvasCentre(*shape));
  if (query < 0 || query >= opts.n)
    return fail("--query " + std::to_string(query) + " is not a position of the sequence [0, " +
                std::to_string(opts.n) + ")");
  return std::pair{*shape, query};
}

std::string inferFormat(const ShowOptions &opts) {
  if (!opts.format.empty())
    return opts.format;
  auto endsWith = [&](const char *ext) {
    std::string e(ext);
    return opts.output.size() >= e.size() &&
           opts.output.compare(opts.output.size() - e.size(), e.size(), e) == 0;
  };
  if (endsWith(".svg"))
    return "svg";
  if (endsWith(".png"))
    return "png";
  return "ascii";
}

int runShow(const ShowOptions &opts) {
  int exitCode = kExitOk;
  auto lp = loadPattern(opts.pattern, exitCode);
  if (!lp)
    return exitCode;
  const Pattern &p = *lp->pattern;
  if (opts.head && (*opts.head < 0 || *opts.head >= p.numHeads())) {
    std::cerr << "attnc: error: head " << *opts.head << " is out of range; pattern '" << p.name
              << "' has " << p.numHeads() << (p.numHeads() == 1 ? " head" : " heads") << " (0 to "
              << p.numHeads() - 1 << ")\n";
    return kExitUserError;
  }
  const int64_t queries = opts.queries.value_or(opts.n);
  if (int code = checkQueries(queries, opts.n); code != kExitOk)
    return code;
  std::string format = inferFormat(opts);
  if (format != "ascii" && opts.output.empty()) {
    std::cerr << "attnc: error: --format " << format << " needs an output file: -o FILE\n";
    return kExitUsage;
  }
  int64_t maxSide = opts.maxSide ? opts.maxSide : (format == "ascii" ? 128 : 768);
  bool bound = false;
  if (!bindPatternData(lp->ir, opts.inputs, opts.n, bound))
    return kExitUserError;
  if (lp->ir.readsData() && !bound) {
    std::string flags;
    for (const InputDecl &d : lp->ir.inputs)
      if (!d.isFloat) // (float inputs feed the score or the sink only)
        flags += " --input " + d.name + "=FILE.npy";
    std::cerr << "attnc: error: pattern '" << p.name << "' reads data; its picture needs it:" << flags << "\n";
    return kExitUserError;
  }
  std::vector<ir::Layer> layers =
      ir::layersOf(lp->ir, opts.head, ir::SetNames(*lp->frontend, p.name));
  ir::Raster raster;
  std::string title;
  if (opts.canvas.empty()) {
    raster = ir::rasterize(layers, opts.n, maxSide, queries);
    title = ir::pictureTitle(lp->ir, opts.n, opts.head, queries);
  } else {
    auto canvas = canvasOf(opts, exitCode);
    if (!canvas)
      return exitCode;
    raster = ir::rasterizeCanvas(layers, opts.n, canvas->first, canvas->second);
    layers.push_back({"the query i = " + std::to_string(canvas->second), nullptr});
    title = ir::pictureTitle(lp->ir, opts.n, opts.head);
  }

  std::string text;
  std::vector<uint8_t> bytes;
  if (format == "ascii") {
    bool color = opts.output.empty() && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR");
    text = ir::renderAscii(raster, layers, title, color);
  } else if (format == "svg") {
    text = ir::renderSvg(raster, layers, title, opts.grid);
  } else {
    bytes = renderPng(raster, layers, title, opts.grid);
  }
  if (opts.output.empty()) {
    std::cout << text;
    return kExitOk;
  }
  std::ofstream out(opts.output, std::ios::binary);
  if (!text.empty())
    out << text;
  else
    out.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::cerr << "attnc: error: cannot write '" << opts.output << "'\n";
    return kExitUserError;
  }
  std::cerr << "wrote " << opts.output << " (" << raster.rows << "x" << raster.cols << " cells)\n";
  return kExitOk;
}
} // namespace

void setupShow(CLI::App &app, int &exitCode) {
  auto opts = std::make_shared<ShowOptions>();
  CLI::App *cmd = app.add_subcommand(
      "show", "Draw the pattern: rows are queries i, columns keys j, one colour per set or head");
  addPatternOptions(*cmd, opts->pattern);
  cmd->add_option("--n", opts->n, "Sequence length to draw")
      ->required()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--queries", opts->queries,
                  "Draw only the last NQ query rows (default: --n, the square): query row r is position "
                  "r + n - NQ, bottom-right aligned as in a decoding step (NQ = 1) with a key/value cache")
      ->type_name("NQ");
  cmd->add_option("--head", opts->head,
                  "Draw this head only, coloured by set (default: head 0, or every head in its "
                  "own colour when the heads differ)");
  cmd->add_option("--format", opts->format,
                  "ascii (terminal), svg or png (default: from the -o extension, else ascii)")
      ->check(CLI::IsMember({"ascii", "svg", "png"}));
  cmd->add_option("-o,--output", opts->output, "Write the picture to this file");
  cmd->add_option("--grid", opts->grid, "Draw grid lines every GRID keys (svg, png)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-side", opts->maxSide,
                  "Cells per side before the picture is downsampled (default 128 for ascii, 768 "
                  "otherwise)")
      ->check(CLI::Range(int64_t{8}, int64_t{4096}));
  cmd->add_option("--input", opts->inputs,
                  "Data of a pattern that reads some: an int32 or int64 .npy per int input (DIMS, [B, DIMS] or "
                  "[B, H, DIMS]; batch entry 0 is drawn, each head with its data). Float inputs (read by score / "
                  "sink) do not change the pairs: not needed, and not read")
      ->type_name("NAME=FILE.npy");
  cmd->add_option("--canvas", opts->canvas,
                  "Draw the keys of one query on a grid instead: H,W (rows, columns) or T,H,W (frames too), the "
                  "first H*W (T*H*W) positions in raster order (position p is row p / W, column p % W), for "
                  "image and video patterns (NATTEN, Swin, sliding tiles)")
      ->delimiter(',')
      ->type_name("[T,]H,W");
  cmd->add_option("--tile", opts->tile,
                  "With --canvas: the tokens are laid out tile by tile (each tile's consecutively, the tiles in "
                  "raster order), as sliding-tile attention and tiled NATTEN take them: the tile's sides, as "
                  "--canvas gives the canvas's")
      ->delimiter(',')
      ->type_name("[TT,]TH,TW");
  cmd->add_option("--query", opts->query,
                  "With --canvas: the query whose keys are drawn (default: the canvas's centre token)")
      ->type_name("I");
  cmd->footer(examplesFooter({"attnc show patterns/fixed.attn --n 64 -D l=16 -D c=4",
                              "attnc show patterns/lsh.attn --n 64 --input b0=b0.npy --input b1=b1.npy",
                              "attnc show patterns/strided.attn --n 256 -D l=16 -o strided.svg --grid 16",
                              "attnc show patterns/fixed_multihead.attn --n 512 -o fixed.png",
                              "attnc show patterns/longformer.attn --n 128 --queries 8 -D w=16",
                              "attnc show patterns/natten2d.attn --n 4096 --canvas 64,64 --query 200 -o natten.png",
                              "attnc show patterns/sta3d.attn --n 13824 --canvas 24,24,24 --tile 4,4,4 -o sta.png"}));
  cmd->callback([opts, &exitCode] { exitCode = runShow(*opts); });
}

} // namespace attnc::tool
