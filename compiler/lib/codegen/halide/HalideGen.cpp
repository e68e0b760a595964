//===- HalideGen.cpp - Halide 14 code for the plan's row blocks -----------===//
//
// The code generator module, libattnc_halidegen.so: the only code that
// links Halide (HalideSchedule.cpp opens it on first use). The algorithm is
// in HalideGen.h. The schedule template, per row block
// (blocks are the parallel loop):
//   * S = Q K^T in register tiles of (16 * scoreRowVectors rows as 16-lane
//     vectors) x scoreKeys keys with d as the reduction inside, each key's
//     row of K broadcast: 24 accumulators with the defaults;
//   * the mask, the row max, exp and the row sum as 16-row vectors over the
//     block's chunks;
//   * P V in register tiles of outRows rows x d (16-lane vectors, unrolled
//     when d is a compile-time constant) with the keys as the reduction,
//     each value row loaded once per tile and each probability broadcast.
// Facts that shaped it (bench/halide/README.md): bounds inference ignores
// RDom::where, so the per-block intermediates are updates over the
// predicated domain (a pure definition would cost the longest block's keys
// for every block); the output is indexed by (column, row in block, block),
// never by i with i % R.
//
//===----------------------------------------------------------------------===//
#include "attnc/codegen/HalideGen.h"

#include "attnc/format/KernelAbi.h"

#include "Halide.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <cstdio>
#include <limits>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc::halide {

namespace {

using namespace Halide;

/// Halide's compiler keeps global state (unique names, the LLVM context);
/// one compilation at a time.
std::mutex &compileMutex() {
  static std::mutex m;
  return m;
}

struct Kernel {
  ImageParam q{Float(32), 2, "q"}, k{Float(32), 2, "k"}, v{Float(32), 2, "v"};
  ImageParam blocks{Int(32), 2, "blocks"}; ///< (4, blocks): key offset, chunks, first query, query stride
  ImageParam keys{Int(32), 1, "keys"};     ///< every block's keys, each list padded to whole chunks
  ImageParam masks{UInt(32), 2, "masks"};  ///< (words, keys): bit r of word r / 32 = row r has the key
  Param<int> n{"n"}, maxChunks{"max_chunks"}, dim{"d"};
  Param<float> scale{"scale"};
  Func out{"out"};

  std::vector<Argument> arguments(bool generic) const {
    std::vector<Argument> args = {q, k, v, blocks, keys, masks, n, maxChunks, scale};
    if (generic)
      args.push_back(dim);
    return args;
  }
};

/// Defines and schedules `kernel.out` for head dimension D (0: run time).
void define(const Schedule &s, int D, Kernel &in) {
  const int R = s.rows, KC = s.keyChunk, words = (R + 31) / 32;
  const bool generic = D == 0;
  Expr dim = generic ? Expr(in.dim) : Expr(D);
  Expr n = in.n;
  Expr lowest = Float(32).min();
  Var c("c"), d("d"), r("r"), k("k"), b("b");

  Expr offset = in.blocks(0, b), chunks = in.blocks(1, b);
  Expr query = clamp(in.blocks(2, b) + r * in.blocks(3, b), 0, n - 1);
  auto slot = [&](Expr key) { return clamp(offset + key, 0, in.keys.dim(0).extent() - 1); };
  // Padding entries are -1: clamped for the loads, never in a mask.
  auto keyAt = [&](Expr key) { return clamp(in.keys(slot(key)), 0, n - 1); };

  Func qs("qs");
  qs(r, d, b) = in.q(d, query) * in.scale;
  RDom rd(0, dim, "rd");
  Func score("score");
  score(r, k, b) = 0.0f;
  score(r, k, b) += qs(r, rd, b) * in.k(rd, keyAt(k));

  RDom rk(0, KC, 0, in.maxChunks, "rk");
  rk.where(rk.y < chunks);
  Expr kk = rk.y * KC + rk.x;
  Expr word = in.masks(r / 32, slot(kk));
  Expr has = ((word >> cast<uint32_t>(r % 32)) & 1) != 0;

  Func masked("masked");
  masked(r, k, b) = undef<float>();
  masked(r, kk, b) = select(has, score(r, kk, b), lowest);
  // The row max sticks at NaN once a score of the row is NaN (a NaN in Q or
  // in a key it attends), so that the row comes out NaN, as PyTorch gives,
  // rather than dropping the key: max() alone may return either operand.
  // strict_float: Halide otherwise compiles with LLVM's no-NaN fast-math
  // flags, under which a select that yields NaN may be folded away.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Func rowMax("row_max");
  rowMax(r, b) = lowest;
  Expr nanSoFar = is_nan(rowMax(r, b)) || is_nan(masked(r, kk, b));
  rowMax(r, b) = strict_float(select(nanSoFar, nan, max(rowMax(r, b), masked(r, kk, b))));
  Func prob("prob");
  prob(r, k, b) = undef<float>();
  prob(r, kk, b) = exp(masked(r, kk, b) - rowMax(r, b));
  Func rowSum("row_sum");
  rowSum(r, b) = 0.0f;
  rowSum(r, b) += prob(r, kk, b);
  Func acc("acc");
  acc(d, r, b) = 0.0f;
  acc(d, r, b) += prob(r, kk, b) * in.v(d, keyAt(kk));

  // A row without keys (its max never left `lowest`) is zeros with
  // log-sum-exp -inf, so that it merges as nothing. Per row, once: the
  // normaliser and the log-sum-exp.
  Expr empty = rowMax(r, b) <= lowest;
  Func rowScale("row_scale"), rowLse("row_lse");
  rowScale(r, b) = strict_float(select(is_nan(rowMax(r, b)), nan, select(empty, 0.0f, 1.0f / rowSum(r, b))));
  rowLse(r, b) = strict_float(select(is_nan(rowMax(r, b)), nan,
                                     select(empty, -std::numeric_limits<float>::infinity(),
                                            rowMax(r, b) + log(rowSum(r, b)))));
  in.out(c, r, b) = select(c < dim, acc(min(c, dim - 1), r, b) * rowScale(r, b), rowLse(r, b));

  // Shapes the code may assume.
  in.out.output_buffer().dim(0).set_bounds(0, dim + 1);
  in.out.output_buffer().dim(1).set_bounds(0, R).set_stride(dim + 1);
  in.out.output_buffer().dim(2).set_min(0).set_stride((dim + 1) * R);
  for (ImageParam *p : {&in.q, &in.k, &in.v}) {
    p->dim(0).set_bounds(0, dim);
    p->dim(1).set_min(0).set_stride(dim);
  }
  in.blocks.dim(0).set_bounds(0, 4);
  in.blocks.dim(1).set_min(0).set_stride(4);
  in.keys.dim(0).set_min(0);
  in.masks.dim(0).set_bounds(0, words);
  in.masks.dim(1).set_min(0).set_stride(words);

  // The schedule template.
  const TailStrategy tail = TailStrategy::GuardWithIf;
  Var ro("ro"), ri("ri"), co("co"), ci("ci"), dO("do"), di("di");
  // The P V tile holds outRows x d / 16 accumulators: fewer rows for a wide
  // d, so that they stay within 24 of the 32 registers (d = 128: 3 rows).
  const int outRows = generic ? s.outRows : std::max(1, std::min(s.outRows, 24 / ((D + 15) / 16)));
  in.out.split(r, ro, ri, outRows)
      .split(c, co, ci, 16, tail)
      .reorder(ci, co, ri, ro, b)
      .vectorize(ci)
      .unroll(ri)
      .parallel(b);

  // P V: (outRows x d) accumulators, the keys outside.
  acc.compute_at(in.out, ro).split(d, dO, di, 16, tail).vectorize(di).unroll(r);
  Stage accUpdate = acc.update();
  accUpdate.split(d, dO, di, 16, tail);
  if (generic) {
    accUpdate.reorder(di, r, rk.x, rk.y, dO).vectorize(di).unroll(r);
  } else {
    acc.unroll(dO);
    accUpdate.reorder(di, dO, r, rk.x, rk.y).vectorize(di).unroll(dO).unroll(r);
  }

  // Q K^T: (16 * scoreRowVectors x scoreKeys) accumulators, d inside.
  const int scoreRows = 16 * s.scoreRowVectors;
  Var so("so"), si("si");
  RVar kxo("kxo"), kxi("kxi");
  qs.compute_at(in.out, b).vectorize(r, 16);
  masked.compute_at(in.out, b);
  masked.update()
      .split(r, so, si, scoreRows)
      .split(rk.x, kxo, kxi, s.scoreKeys)
      .reorder(si, kxi, so, kxo, rk.y)
      .vectorize(si, 16)
      .unroll(si)
      .unroll(kxi);
  score.compute_at(masked, so).vectorize(r, 16).unroll(r).unroll(k);
  score.update().reorder(r, k, rd).vectorize(r, 16).unroll(r).unroll(k);

  // The softmax statistics, 16 rows at a time.
  for (Func *f : {&rowMax, &rowSum}) {
    f->compute_at(in.out, b).vectorize(r, 16);
    f->update().reorder(r, rk.x, rk.y).vectorize(r, 16);
  }
  for (Func *f : {&rowScale, &rowLse})
    f->compute_at(in.out, b).vectorize(r, 16);
  prob.compute_at(in.out, b);
  prob.update().reorder(r, rk.x, rk.y).vectorize(r, 16);
}

/// A private temporary directory for Halide's file outputs, removed with
/// everything in it when this goes out of scope.
struct TempDir {
  std::string path;
  std::vector<std::string> files;
  TempDir() {
    char templ[] = "/tmp/attnc-halide-XXXXXX";
    if (mkdtemp(templ))
      path = templ;
  }
  std::string file(const std::string &name) {
    files.push_back(path + "/" + name);
    return files.back();
  }
  ~TempDir() {
    for (const std::string &f : files)
      unlink(f.c_str());
    if (!path.empty())
      rmdir(path.c_str());
  }
};

/// The bytes of a file Halide wrote.
bool readFile(const std::string &path, std::string &bytes, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  std::ostringstream os;
  os << in.rdbuf();
  bytes = os.str();
  return true;
}

template <typename Fn> bool guarded(Fn &&fn, std::string &error) {
  try {
    std::lock_guard<std::mutex> lock(compileMutex());
    return fn();
  } catch (const Halide::Error &e) {
    error = std::string("Halide: ") + e.what();
  } catch (const std::exception &e) {
    error = std::string("Halide: ") + e.what();
  }
  return false;
}

} // namespace

} // namespace attnc::halide

// The module's entry points, looked up by HalideSchedule.cpp (the schedule
// has been validated there).
using attnc::halide::Schedule;

extern "C" __attribute__((visibility("default"))) bool
attnc_halidegen_compile_objects(const Schedule &s, std::vector<std::string> &objects,
                                std::string &error) {
  using namespace attnc::halide;
  std::vector<int> dims = specialisedDims();
  dims.push_back(0);
  return guarded(
      [&] {
        TempDir dir;
        if (dir.path.empty()) {
          error = "cannot create a temporary directory for Halide's objects";
          return false;
        }
        objects.clear();
        for (size_t x = 0; x < dims.size(); ++x) {
          Kernel kernel;
          define(s, dims[x], kernel);
          // One Halide runtime per shared object: in the first only.
          Target target(targetString());
          if (x > 0)
            target = target.with_feature(Target::NoRuntime);
          std::string path = dir.file(entryName(dims[x]) + ".o");
          kernel.out.compile_to_object(path, kernel.arguments(dims[x] == 0), entryName(dims[x]), target);
          std::string bytes;
          if (!readFile(path, bytes, error))
            return false;
          objects.push_back(std::move(bytes));
        }
        return true;
      },
      error);
}

extern "C" __attribute__((visibility("default"))) bool
attnc_halidegen_lowered_statement(const Schedule &s, int d, std::string &text, std::string &error) {
  using namespace attnc::halide;
  return guarded(
      [&] {
        TempDir dir;
        Kernel kernel;
        define(s, d, kernel);
        std::string path = dir.file("kernel.stmt");
        kernel.out.compile_to_lowered_stmt(path, kernel.arguments(d == 0), Text, Target(targetString()));
        return readFile(path, text, error);
      },
      error);
}
