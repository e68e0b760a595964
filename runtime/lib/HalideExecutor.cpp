//===- HalideExecutor.cpp - Running the halide backend's compiled code ----===//
#include "HalideExecutor.h"

#include "attnc/format/KernelAbi.h"
#include "attnc/support/ThreadPool.h"

#include "HalideRuntime.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <mutex>
#include <stdexcept>

namespace attnc::rt {

namespace {

/// The Halide runtime reports errors through a handler; the message of the
/// last one is kept for the caller's status.
std::mutex errorMutex;
std::string lastHalideError;

void recordError(void *, const char *message) {
  std::lock_guard<std::mutex> lock(errorMutex);
  lastHalideError = message ? message : "unknown Halide error";
  while (!lastHalideError.empty() && lastHalideError.back() == '\n')
    lastHalideError.pop_back();
}

/// Halide allocates each row block's scores and probabilities (R x the
/// block's keys, often above glibc's mmap threshold) once per block: fresh
/// pages and page faults every time. Each thread keeps its last few blocks
/// instead. A block may be freed by another thread than the one that got it.
class BlockPool {
public:
  ~BlockPool() {
    for (void *p : free_)
      std::free(p);
  }
  static void *allocate(void *, size_t size) {
    BlockPool &pool = local();
    for (size_t x = 0; x < pool.free_.size(); ++x)
      if (capacity(pool.free_[x]) >= size) {
        void *base = pool.free_[x];
        pool.free_.erase(pool.free_.begin() + static_cast<std::ptrdiff_t>(x));
        return static_cast<char *>(base) + kHeader;
      }
    size_t cap = (size + 4095) & ~size_t(4095);
    void *base = std::aligned_alloc(kHeader, cap + kHeader);
    if (!base)
      return nullptr;
    *static_cast<size_t *>(base) = cap;
    return static_cast<char *>(base) + kHeader;
  }
  static void release(void *, void *p) {
    if (!p)
      return;
    void *base = static_cast<char *>(p) - kHeader;
    BlockPool &pool = local();
    if (pool.free_.size() < kKept) {
      pool.free_.push_back(base);
      return;
    }
    std::free(base);
  }

private:
  static constexpr size_t kHeader = 64, kKept = 8;
  static size_t capacity(void *base) { return *static_cast<size_t *>(base); }
  static BlockPool &local() {
    thread_local BlockPool pool;
    return pool;
  }
  std::vector<void *> free_;
};

/// A halide_buffer_t over memory the caller owns (up to 3 dimensions,
/// each {min 0, extent, stride}).
struct View {
  halide_dimension_t dims[3];
  halide_buffer_t buf{};
  View(const void *host, halide_type_code_t code, std::initializer_list<std::pair<int64_t, int64_t>> shape) {
    int k = 0;
    for (auto [extent, stride] : shape)
      dims[k++] = halide_dimension_t(0, static_cast<int32_t>(extent), static_cast<int32_t>(stride));
    buf.host = static_cast<uint8_t *>(const_cast<void *>(host));
    buf.type = halide_type_t(code, 32, 1);
    buf.dimensions = k;
    buf.dim = dims;
  }
};

} // namespace

bool HalideCode::load(void *library, std::string &error) {
  auto symbol = [&](const std::string &name) -> void * {
    void *fn = dlsym(library, name.c_str());
    if (!fn)
      error = "kernel code lacks the entry point '" + name + "'";
    return fn;
  };
  for (int64_t d : ATTNC_HALIDE_DIMS) {
    void *fn = symbol("attnc_halide_d" + std::to_string(d));
    if (!fn)
      return false;
    byDim[d] = reinterpret_cast<Specialised>(fn);
  }
  generic = reinterpret_cast<Generic>(symbol("attnc_halide_any"));
  setNumThreadsFn = reinterpret_cast<int (*)(int)>(symbol("halide_set_num_threads"));
  using Handler = void (*)(void *, const char *);
  using Malloc = void *(*)(void *, size_t);
  using Free = void (*)(void *, void *);
  auto setHandler = reinterpret_cast<Handler (*)(Handler)>(symbol("halide_set_error_handler"));
  auto setMalloc = reinterpret_cast<Malloc (*)(Malloc)>(symbol("halide_set_custom_malloc"));
  auto setFree = reinterpret_cast<Free (*)(Free)>(symbol("halide_set_custom_free"));
  if (!generic || !setNumThreadsFn || !setHandler || !setMalloc || !setFree)
    return false;
  setHandler(&recordError);
  setMalloc(&BlockPool::allocate);
  setFree(&BlockPool::release);
  return true;
}

namespace {

/// Appends one block, its keys given ascending with their row masks.
void appendBlock(HalideBlocks &hb, int64_t chunk, int64_t words, int64_t firstQuery, int64_t queryStride,
                 int32_t rows, const std::vector<std::pair<int32_t, uint64_t>> &keys) {
  const int64_t count = static_cast<int64_t>(keys.size());
  const int64_t chunks = (count + chunk - 1) / chunk;
  hb.table.insert(hb.table.end(), {static_cast<int32_t>(hb.keys.size()), static_cast<int32_t>(chunks),
                                   static_cast<int32_t>(firstQuery), static_cast<int32_t>(queryStride)});
  hb.rows.push_back(rows);
  hb.maxChunks = std::max(hb.maxChunks, static_cast<int32_t>(chunks));
  for (int64_t x = 0; x < chunks * chunk; ++x) {
    hb.keys.push_back(x < count ? keys[x].first : -1);
    uint64_t mask = x < count ? keys[x].second : 0;
    for (int64_t w = 0; w < words; ++w)
      hb.masks.push_back(static_cast<uint32_t>(mask >> (32 * w)));
  }
  if (hb.keys.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::length_error("the halide backend's key lists exceed 2^31 entries");
}

} // namespace

namespace {

/// Per-thread state for building block lists.
struct ListBuilder {
  plan::BlockShape shape;
  plan::BlockTiles tiles;
  std::vector<std::pair<int32_t, uint64_t>> keys;
  HalideBlocks part;
  /// Appends the keys of block b of `src` to `keys` (ascending within it).
  void collect(const plan::BlockSource &src, int64_t b) {
    src.build(b, shape);
    tiles.expand(shape);
    for (size_t x = 0; x < tiles.keys.size(); ++x)
      keys.emplace_back(tiles.keys[x], tiles.masks[x]);
  }
};

/// One list from `items` units of work (row blocks, or residue classes):
/// `fill(builder, item)` appends the item's blocks to builder.part. The
/// items are split into contiguous ranges over the cores; the parts are
/// then joined in order.
template <typename Fill> HalideBlocks buildList(int64_t items, int threadsAllowed, Fill &&fill) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(threadsAllowed, items / 16));
  std::vector<ListBuilder> builders(static_cast<size_t>(threads));
  support::parallelFor(threads, static_cast<int>(threads), [&](int, int64_t w) {
    for (int64_t item = items * w / threads; item < items * (w + 1) / threads; ++item)
      fill(builders[static_cast<size_t>(w)], item);
  });
  HalideBlocks out = std::move(builders[0].part);
  for (size_t w = 1; w < builders.size(); ++w) {
    HalideBlocks &part = builders[w].part;
    const int32_t offset = static_cast<int32_t>(out.keys.size());
    for (size_t e = 0; e < part.table.size(); e += 4)
      part.table[e] += offset;
    if (out.keys.size() + part.keys.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw std::length_error("the halide backend's key lists exceed 2^31 entries");
    out.table.insert(out.table.end(), part.table.begin(), part.table.end());
    out.rows.insert(out.rows.end(), part.rows.begin(), part.rows.end());
    out.keys.insert(out.keys.end(), part.keys.begin(), part.keys.end());
    out.masks.insert(out.masks.end(), part.masks.begin(), part.masks.end());
    out.maxChunks = std::max(out.maxChunks, part.maxChunks);
  }
  return out;
}

} // namespace

std::vector<std::vector<HalideBlocks>> buildHalideBlocks(const plan::Plan &plan, int64_t n, int threads) {
  const int64_t R = plan.options.tileRows, chunk = plan.options.tileCols;
  const int64_t words = (R + 31) / 32;
  std::vector<std::vector<HalideBlocks>> out(plan.heads.size());
  for (size_t h = 0; h < plan.heads.size(); ++h) {
    // Every row-tiles piece in one list per row block (as the fused
    // executor does): their keys are disjoint, so the union is exact and
    // costs one pass; a relayout piece is its own list of every class.
    std::vector<plan::BlockSource> rowTiles;
    for (const plan::Piece &piece : plan.heads[h].pieces)
      if (piece.strategy == plan::Strategy::RowTiles)
        rowTiles.emplace_back(plan, piece, n);
    if (!rowTiles.empty())
      out[h].push_back(buildList(rowTiles.front().numBlocks(), threads, [&](ListBuilder &lb, int64_t b) {
        // Each piece's keys come ascending: merge the runs.
        lb.keys.clear();
        for (const plan::BlockSource &src : rowTiles) {
          const auto mid = static_cast<std::ptrdiff_t>(lb.keys.size());
          lb.collect(src, b);
          std::inplace_merge(lb.keys.begin(), lb.keys.begin() + mid, lb.keys.end());
        }
        appendBlock(lb.part, chunk, words, rowTiles.front().query(b * R), 1, lb.tiles.rows, lb.keys);
      }));
    for (const plan::Piece &piece : plan.heads[h].pieces) {
      if (piece.strategy != plan::Strategy::ResidueRelayout)
        continue;
      out[h].push_back(buildList(plan::numClasses(piece, n), threads, [&](ListBuilder &lb, int64_t c) {
        plan::BlockSource src(plan, piece, n, c);
        for (int64_t b = 0; b < src.numBlocks(); ++b) {
          lb.keys.clear();
          lb.collect(src, b);
          appendBlock(lb.part, chunk, words, src.query(lb.tiles.firstRow), src.rowStride(), lb.tiles.rows,
                      lb.keys);
        }
      }));
    }
    // The code clamps key positions into the list: never empty.
    for (HalideBlocks &hb : out[h])
      if (hb.keys.empty()) {
        hb.keys.push_back(-1);
        hb.masks.resize(static_cast<size_t>(words), 0u);
      }
  }
  return out;
}

bool runHalideHead(const HalideCode &code, const plan::Plan &plan,
                   const std::vector<HalideBlocks> &pieces, int64_t n, int64_t d, const float *q,
                   const float *k, const float *v, float *o, float scale, HalideScratch &s,
                   std::string &error) {
  const int64_t R = plan.options.tileRows, width = d + 1, words = (R + 31) / 32;
  const float minusInf = -std::numeric_limits<float>::infinity();
  // The first piece's rows are copied when its blocks cover every row once
  // (they do for every plan); otherwise every piece merges into zeros.
  int64_t covered = 0;
  if (!pieces.empty())
    for (int32_t rows : pieces.front().rows)
      covered += rows;
  const bool copyFirst = covered == n;
  s.lse.resize(static_cast<size_t>(n));
  if (!copyFirst) {
    std::fill(s.lse.begin(), s.lse.end(), minusInf);
    std::memset(o, 0, static_cast<size_t>(n * d) * sizeof(float));
  }
  for (size_t p = 0; p < pieces.size(); ++p) {
    const HalideBlocks &hb = pieces[p];
    const int64_t blocks = hb.numBlocks(), slots = static_cast<int64_t>(hb.keys.size());
    if (blocks == 0)
      continue;
    s.rows.resize(static_cast<size_t>(blocks * R * width));
    View qv(q, halide_type_float, {{d, 1}, {n, d}}), kv(k, halide_type_float, {{d, 1}, {n, d}}),
        vv(v, halide_type_float, {{d, 1}, {n, d}});
    View table(hb.table.data(), halide_type_int, {{4, 1}, {blocks, 4}});
    View keys(hb.keys.data(), halide_type_int, {{slots, 1}});
    View masks(hb.masks.data(), halide_type_uint, {{words, 1}, {slots, words}});
    View out(s.rows.data(), halide_type_float, {{width, 1}, {R, width}, {blocks, R * width}});
    auto it = code.byDim.find(d);
    int rc = it != code.byDim.end()
                 ? it->second(&qv.buf, &kv.buf, &vv.buf, &table.buf, &keys.buf, &masks.buf,
                              static_cast<int32_t>(n), hb.maxChunks, scale, &out.buf)
                 : code.generic(&qv.buf, &kv.buf, &vv.buf, &table.buf, &keys.buf, &masks.buf,
                                static_cast<int32_t>(n), hb.maxChunks, scale, static_cast<int32_t>(d),
                                &out.buf);
    if (rc != 0) {
      std::lock_guard<std::mutex> lock(errorMutex);
      error = "the Halide code failed (" + std::to_string(rc) + "): " + lastHalideError;
      return false;
    }
    // Rows back to their queries, merged by log-sum-exp.
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = hb.table[4 * b + 2], stride = hb.table[4 * b + 3];
      for (int64_t r = 0; r < hb.rows[b]; ++r) {
        const float *src = &s.rows[static_cast<size_t>((b * R + r) * width)];
        const int64_t i = first + r * stride;
        float *dst = o + i * d;
        const float lse = src[d], old = s.lse[i];
        if ((p == 0 && copyFirst) || old == minusInf) {
          std::memcpy(dst, src, static_cast<size_t>(d) * sizeof(float));
          s.lse[i] = lse;
          continue;
        }
        if (lse == minusInf)
          continue;
        const float top = std::max(old, lse);
        const float a = std::exp(old - top), c = std::exp(lse - top), sum = a + c;
        for (int64_t x = 0; x < d; ++x)
          dst[x] = (dst[x] * a + src[x] * c) / sum;
        s.lse[i] = top + std::log(sum);
      }
    }
  }
  if (pieces.empty())
    std::memset(o, 0, static_cast<size_t>(n * d) * sizeof(float));
  return true;
}

} // namespace attnc::rt
