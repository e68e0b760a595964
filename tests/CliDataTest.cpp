//===- CliDataTest.cpp - Patterns that read data, from the CLI ------------===//
//
// attnc run, analyze and show with --input NAME=FILE.npy (int32 or int64
// arrays of DIMS, [B, DIMS] or [B, H, DIMS]), run --random drawing the inputs
// it is not given, --check against the reference bound to the same data, and
// the commands and backends that do not take such patterns refusing them
// with a message (exit 1), never an internal error.
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::test {
namespace {

/// An int .npy file ('<i4' or '<i8') of `values` with the given shape.
std::string intNpy(const ScratchDir &dir, const std::string &name, const std::vector<int64_t> &shape,
                   const std::vector<int64_t> &values, bool wide = false) {
  std::string dims;
  for (int64_t s : shape)
    dims += std::to_string(s) + ", ";
  std::string header = std::string("{'descr': '") + (wide ? "<i8" : "<i4") + "', 'fortran_order': False, 'shape': (" +
                       dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 0xff) + char(header.size() >> 8) +
                      header;
  for (int64_t v : values) {
    if (wide)
      bytes.append(reinterpret_cast<const char *>(&v), 8);
    else {
      const auto v32 = static_cast<int32_t>(v);
      bytes.append(reinterpret_cast<const char *>(&v32), 4);
    }
  }
  writeFile(dir.file(name), bytes);
  return dir.file(name);
}

std::vector<int64_t> cycle(int64_t count, int64_t period) {
  std::vector<int64_t> out;
  for (int64_t x = 0; x < count; ++x)
    out.push_back((x * 7) % period);
  return out;
}

TEST(CliData, RunChecksLshOnRandomDataWithGradients) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("lsh") + " --random 2,2,300,16 --grad random --check --dq " +
                              dir.file("dq.npy") + " --dk " + dir.file("dk.npy") + " --dv " + dir.file("dv.npy"),
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("max abs error of dK"), std::string::npos) << r.out;
}

TEST(CliData, RunReadsInputFilesPerBatchAndHead) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  // [B, H, n] for b0 (int64), [n] for b1 (int32, shared).
  const std::string b0 = intNpy(dir, "b0.npy", {2, 3, 40}, cycle(240, 5), true);
  const std::string b1 = intNpy(dir, "b1.npy", {40}, cycle(40, 3));
  CommandResult r = attnc("run " + libraryPattern("lsh") + " --random 2,3,40,8 --input b0=" + b0 + " --input b1=" +
                              b1 + " --check -o " + dir.file("o.npy"),
                          cache);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("max abs error vs double-precision reference"), std::string::npos) << r.out;
  // Without --random every input must be given, each fitting the pattern at this n.
  CommandResult missing =
      attnc("run " + libraryPattern("lsh") + " --q " + dir.file("o.npy") + " --k " + dir.file("o.npy") + " --v " +
                dir.file("o.npy") + " --input b0=" + b0,
            cache);
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.err.find("give it with --input b1=FILE.npy"), std::string::npos) << missing.err;
  const std::string shortB1 = intNpy(dir, "short.npy", {39}, cycle(39, 3));
  CommandResult shape = attnc("run " + libraryPattern("lsh") + " --random 2,3,40,8 --input b1=" + shortB1, cache);
  EXPECT_EQ(shape.exitCode, 1);
  EXPECT_NE(shape.err.find("input 'b1' is [40] at this length"), std::string::npos) << shape.err;
  CommandResult unknown = attnc("run " + libraryPattern("lsh") + " --random 2,3,40,8 --input doc=" + b1, cache);
  EXPECT_EQ(unknown.exitCode, 1);
  EXPECT_NE(unknown.err.find("has no input 'doc' (it declares 'b0', 'b1')"), std::string::npos) << unknown.err;
  CommandResult positional = attnc("run " + libraryPattern("local") + " --random 1,1,40,8 --input b1=" + b1, cache);
  EXPECT_EQ(positional.exitCode, 1);
  EXPECT_NE(positional.err.find("declares no input"), std::string::npos) << positional.err;
  CommandResult floats = attnc("run " + libraryPattern("lsh") + " --random 2,3,40,8 --input b1=" + dir.file("o.npy"),
                               cache);
  EXPECT_EQ(floats.exitCode, 1);
  EXPECT_NE(floats.err.find("int32 ('<i4') or int64 ('<i8')"), std::string::npos) << floats.err;
}

TEST(CliData, OutOfRangeBlockIdIsTheRuntimesError) {
  ScratchDir dir;
  // nsa with B = 16 at n = 64: 4 query blocks of k = 2 ids, each in [-1, 4).
  std::vector<int64_t> ids{0, -1, 1, 0, 2, 4, 3, -1};
  const std::string sel = intNpy(dir, "sel.npy", {4, 2}, ids);
  CommandResult r = attnc("run " + libraryPattern("nsa") + " -D B=16 -D k=2 -D w=16 --random 1,1,64,8 --input sel=" + sel,
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 1);
  EXPECT_NE(r.err.find("input 'sel' holds 4 at [0, 0, 2, 1]"), std::string::npos) << r.err;
}

TEST(CliData, AnalyzeCountsTheDataItIsGivenAndSaysWhatNeedsIt) {
  ScratchDir dir;
  // Two documents of 3 and 5 tokens: 6 + 15 causal pairs.
  const std::string doc = intNpy(dir, "doc.npy", {8}, {7, 7, 7, 2, 2, 2, 2, 2});
  CommandResult r = attnc("analyze " + libraryPattern("document") + " --n 8 --input doc=" + doc + " --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json j = parseJson(r.out);
  ASSERT_FALSE(j["heads"].array.empty()) << r.out;
  EXPECT_EQ(j["heads"].array[0]["nnz"].integer, 21) << r.out;
  CommandResult none = attnc("analyze " + libraryPattern("document") + " --n 8");
  EXPECT_EQ(none.exitCode, 0) << none.err;
  EXPECT_NE(none.out.find("reads data ('doc')"), std::string::npos) << none.out;
  EXPECT_NE(none.out.find("--input doc=FILE.npy"), std::string::npos) << none.out;
  CommandResult json = attnc("analyze " + libraryPattern("lsh") + " --n 8 --json");
  ASSERT_EQ(json.exitCode, 0) << json.err;
  Json k = parseJson(json.out);
  EXPECT_TRUE(k["needs_data"].boolean) << json.out;
  ASSERT_EQ(k["inputs"].array.size(), 2u) << json.out;
  EXPECT_EQ(k["inputs"].array[1]["name"].string, "b1") << json.out;
}

TEST(CliData, EmitPlanCountsTilesOnTheDataInTheOrderTheyRun) {
  ScratchDir dir;
  // Four documents of 32 tokens each, interleaved (doc[p] = p % 4): in raster
  // order a row block of 32 needs every earlier key; in the documents' order
  // each block is one document's 32 x 32 (4096 executed, 4 x 528 useful).
  std::vector<int64_t> docs(128);
  for (size_t p = 0; p < docs.size(); ++p)
    docs[p] = static_cast<int64_t>(p % 4);
  const std::string doc = intNpy(dir, "doc.npy", {128}, docs);
  CommandResult r = attnc("emit " + libraryPattern("document") + " --stage plan --n 128 --input doc=" + doc);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("useful 2112, executed 4096 (1.939x)"), std::string::npos) << r.out;
  CommandResult none = attnc("emit " + libraryPattern("document") + " --stage plan --n 128");
  EXPECT_EQ(none.exitCode, 1);
  EXPECT_NE(none.err.find("give them with --input doc=FILE.npy"), std::string::npos) << none.err;
  EXPECT_EQ(none.err.find("internal error"), std::string::npos) << none.err;
  CommandResult noLength = attnc("emit " + libraryPattern("document") + " --stage plan --input doc=" + doc);
  EXPECT_EQ(noLength.exitCode, 2);
  EXPECT_NE(noLength.err.find("add --n N"), std::string::npos) << noLength.err;
  CommandResult shortData = attnc("emit " + libraryPattern("document") + " --stage plan --n 64 --input doc=" + doc);
  EXPECT_EQ(shortData.exitCode, 1);
  EXPECT_NE(shortData.err.find("doc"), std::string::npos) << shortData.err;
  // LSH's second round drops the pairs its first round has (counted from the masks).
  std::vector<int64_t> b0(96), b1(96);
  for (size_t p = 0; p < b0.size(); ++p) {
    b0[p] = static_cast<int64_t>(p % 3);
    b1[p] = static_cast<int64_t>(p % 2);
  }
  CommandResult lsh = attnc("emit " + libraryPattern("lsh") + " --stage plan --n 96 --input b0=" +
                            intNpy(dir, "b0.npy", {96}, b0) + " --input b1=" + intNpy(dir, "b1.npy", {96}, b1));
  ASSERT_EQ(lsh.exitCode, 0) << lsh.err;
  // Round 0: 3 classes of 32, 32 * 31 / 2 pairs each before the query; round 1: 2 classes of 48
  // (48 * 47 / 2 each) less the pairs that share a b0 class (p = q mod 6 less p < q: 6 x 16 * 15 / 2).
  EXPECT_NE(lsh.out.find("useful 1488,"), std::string::npos) << lsh.out;
  EXPECT_NE(lsh.out.find("useful 1536,"), std::string::npos) << lsh.out;
  // Selected tokens run row by row over each row's own keys: tokens 0 and i / 2 of row i (one key on
  // rows 0 and 1), 2 + 62 * 2 pairs, none executed past them.
  std::vector<int64_t> top;
  for (int64_t i = 0; i < 64; ++i)
    top.insert(top.end(), {0, i / 2});
  CommandResult tokens = attnc("emit " + libraryPattern("topk") + " -D k=2 -D w=4 --stage plan --n 64 --input top=" +
                               intNpy(dir, "top.npy", {64, 2}, top));
  ASSERT_EQ(tokens.exitCode, 0) << tokens.err;
  EXPECT_NE(tokens.out.find("piece 0: rows (one by one"), std::string::npos) << tokens.out;
  EXPECT_NE(tokens.out.find("useful 126, executed 126 (1.000x), tiles 0"), std::string::npos) << tokens.out;
}

TEST(CliData, EmitCudaShowsTheTablesOfTheDataItIsGiven) {
  ScratchDir dir;
  // Four documents of 32 tokens, contiguous: the GPU's 64-row blocks each hold two documents whole, so a
  // block's key union is its own 64 keys (the tables in raster order, as a GPU call builds them).
  std::vector<int64_t> docs(128);
  for (size_t p = 0; p < docs.size(); ++p)
    docs[p] = static_cast<int64_t>(p / 32);
  const std::string doc = intNpy(dir, "doc.npy", {128}, docs);
  CommandResult r = attnc("emit " + libraryPattern("document") + " --stage cuda --n 128 --input doc=" + doc);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("head set 0 at n = 128: 1 forward launch, 2 items, 2 key tiles"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("executed/useful pairs, forward: "), std::string::npos) << r.out;
  CommandResult none = attnc("emit " + libraryPattern("document") + " --stage cuda");
  EXPECT_EQ(none.exitCode, 1);
  EXPECT_NE(none.err.find("give --n N and --input doc=FILE.npy"), std::string::npos) << none.err;
  EXPECT_EQ(none.err.find("internal error"), std::string::npos) << none.err;
}

TEST(CliData, ShowDrawsTheDataItIsGiven) {
  ScratchDir dir;
  const std::string doc = intNpy(dir, "doc.npy", {6}, {1, 1, 1, 5, 5, 5});
  CommandResult r = attnc("show " + libraryPattern("document") + " --n 6 --input doc=" + doc);
  ASSERT_EQ(r.exitCode, 0) << r.err;
  // Row 3 starts the second document: only its own key.
  CommandResult none = attnc("show " + libraryPattern("document") + " --n 6");
  EXPECT_EQ(none.exitCode, 1);
  EXPECT_NE(none.err.find("its picture needs it: --input doc=FILE.npy"), std::string::npos) << none.err;
}

#if ATTNC_HAVE_MLIR
TEST(CliData, SparsifierReferenceRunsOnEachCallsData) {
  ScratchDir dir;
  CommandResult r = attnc("run " + libraryPattern("lsh") + " --backend sparsifier --random 2,2,100,16 --check",
                          "ATTNC_CACHE_DIR=" + dir.path());
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("max abs error vs double-precision reference"), std::string::npos) << r.out;
}
#endif

TEST(CliData, CommandsAndBackendsWithoutDataSupportRefuseClearly) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  for (const std::string &args : {"bench " + libraryPattern("lsh") + " --n 64 --d 8",
                                  "tune " + libraryPattern("lsh") + " --n 64 --d 8"}) {
    CommandResult r = attnc(args, cache);
    EXPECT_EQ(r.exitCode, 1) << args;
    EXPECT_NE(r.err.find("reads data"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("internal error"), std::string::npos) << args << ": " << r.err;
  }
  // (A build without Halide says that first.)
  CommandResult halide = attnc("compile " + libraryPattern("nsa") + " --backend halide -o " + dir.file("k"), cache);
  EXPECT_EQ(halide.exitCode, 1) << halide.err;
  EXPECT_NE(halide.err.find(ATTNC_HAVE_HALIDE ? "the halide backend does not take yet" : "is not built into"),
            std::string::npos)
      << halide.err;
  EXPECT_EQ(halide.err.find("internal error"), std::string::npos) << halide.err;
  CommandResult emit = attnc("emit " + libraryPattern("topk") + " --stage halide", cache);
  EXPECT_EQ(emit.exitCode, 1) << emit.err;
  EXPECT_NE(emit.err.find("--stage ast, ir and plan show it"), std::string::npos) << emit.err;
  CommandResult plan = attnc("emit " + libraryPattern("lsh") + " --stage plan", cache);
  EXPECT_EQ(plan.exitCode, 0) << plan.err;
  EXPECT_NE(plan.out.find("class b0[j] == b0[i]"), std::string::npos) << plan.out;
}

} // namespace
} // namespace attnc::test
