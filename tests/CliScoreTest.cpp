//===- CliScoreTest.cpp - Score modifiers and float inputs, from the CLI --===//
//
// The float .npy reader (float32 and float64, the latter converted; hostile
// files refused with a message), attnc run with float inputs (--input
// NAME=FILE.npy of exactly the declared shape, drawn by --random, --check
// against the reference with the score and the sink), bench and tune
// drawing them, analyze and show neither needing nor reading float inputs
// (scores do not change the set), and emit printing the expressions at its
// stages.
//
//===----------------------------------------------------------------------===//
#include "CliSupport.h"
#include "Npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace attnc::test {
namespace {

/// The bytes of a format 1.0 .npy file of dtype `descr` with the given
/// shape and raw payload.
std::string npyBytes(const std::string &descr, const std::vector<int64_t> &shape, const std::string &payload,
                     const std::string &fortran = "False") {
  std::string dims;
  for (int64_t s : shape)
    dims += std::to_string(s) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': (" + dims + "), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  return std::string("\x93NUMPY\x01\x00", 8) + char(header.size() & 0xff) + char(header.size() >> 8) + header +
         payload;
}

template <typename T> std::string payloadOf(const std::vector<T> &values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(T));
}

/// A .npy file in `dir` of float32 (or, `wide`, float64) values.
std::string floatNpy(const ScratchDir &dir, const std::string &name, const std::vector<int64_t> &shape,
                     const std::vector<double> &values, bool wide = false) {
  std::string payload;
  if (wide) {
    payload = payloadOf(values);
  } else {
    std::vector<float> narrow(values.begin(), values.end());
    payload = payloadOf(narrow);
  }
  writeFile(dir.file(name), npyBytes(wide ? "<f8" : "<f4", shape, payload));
  return dir.file(name);
}

/// The example patterns of issue 41, written as the issue has them, and
/// document masking with ALiBi (an int and a float input).
const char *kAlibi = "pattern alibi_local { param w = 96  input slope : float[heads]  causal\n"
                     "  attend { j : i - j < w }  score s + slope[h] * (j - i) }\n";
const char *kCapped = "pattern capped_fixed { param l = 64  param c = 8  param cap = 20  causal\n"
                      "  attend { j : j / l == i / l } | { j : j % l >= l - c }  score cap * tanh(s / cap) }\n";
const char *kSink = "pattern sink_window { param w = 128  input z : float[heads]  causal\n"
                    "  attend { j : i - j < w }  sink z[h] }\n";
const char *kDocAlibi = "pattern doc_alibi { input doc : int[n]  input slope : float[heads]  causal\n"
                        "  attend { j : doc[j] == doc[i] }  score s + slope[h] * (j - i) }\n";

std::string patternFile(const ScratchDir &dir, const std::string &name, const char *source) {
  writeFile(dir.file(name + ".attn"), source);
  return dir.file(name + ".attn");
}

// ---- the float .npy reader ----------------------------------------------------------

TEST(CliScoreNpy, ReadsFloat32AndFloat64AsFloat32) {
  tool::NpyArray a;
  std::string error;
  ASSERT_TRUE(tool::parseNpyFloats(npyBytes("<f4", {2, 2}, payloadOf(std::vector<float>{1.5f, -2, 0, 3})), a, error))
      << error;
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.data, (std::vector<float>{1.5f, -2, 0, 3}));
  ASSERT_TRUE(tool::parseNpyFloats(npyBytes("<f8", {3}, payloadOf(std::vector<double>{0.1, -1e30, 7})), a, error))
      << error;
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(a.data, (std::vector<float>{0.1f, -1e30f, 7.0f}));
  ASSERT_TRUE(tool::parseNpyFloats(npyBytes("<f4", {0}, ""), a, error)) << error;
  EXPECT_TRUE(a.data.empty());
}

TEST(CliScoreNpy, RefusesHostileFiles) {
  tool::NpyArray a;
  std::string error;
  auto refused = [&](const std::string &bytes, const std::string &words) {
    error.clear();
    EXPECT_FALSE(tool::parseNpyFloats(bytes, a, error)) << words;
    EXPECT_NE(error.find(words), std::string::npos) << error;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  refused(npyBytes("<f4", {3}, payloadOf(std::vector<float>{1, nan, 2})), "entry 1 (in C order) is NaN");
  refused(npyBytes("<f4", {2}, payloadOf(std::vector<float>{-inf, 2})), "entry 0 (in C order) is infinite");
  refused(npyBytes("<f8", {2}, payloadOf(std::vector<double>{1, 1e300})), "outside float32's range");
  refused(npyBytes("<i8", {2}, payloadOf(std::vector<int64_t>{1, 2})), "float32 ('<f4') or float64 ('<f8')");
  refused(npyBytes(">f4", {2}, payloadOf(std::vector<float>{1, 2})), "is not supported");
  refused(npyBytes("<f2", {2}, std::string(4, '\0')), "is not supported");
  refused(npyBytes("<f4", {3}, payloadOf(std::vector<float>{1, 2})), "payload has 8 bytes");
  refused(npyBytes("<f8", {1}, std::string(12, '\0')), "payload has 12 bytes");
  refused(npyBytes("<f4", {2}, payloadOf(std::vector<float>{1, 2}), "True"), "Fortran-order");
  refused(npyBytes("<f4", {int64_t{1} << 40, 1 << 20}, ""), "array too large");
  refused("\x93NUMPX", "bad magic");
  refused(std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "truncated");
}

// ---- attnc run ------------------------------------------------------------------

TEST(CliScore, RunDrawsFloatInputsAndChecksGradientsAgainstTheScoredReference) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  for (const auto &[name, source] : {std::pair{"alibi", kAlibi}, {"capped", kCapped}, {"sink", kSink}}) {
    CommandResult r = attnc("run " + patternFile(dir, name, source) + " -D " +
                                (std::string(name) == "capped" ? "l=16 -D c=4 -D cap=3" : "w=20") +
                                " --random 2,4,150,16 --kv-heads 2 --grad random --check --dq " + dir.file("dq.npy") +
                                " --dk " + dir.file("dk.npy") + " --dv " + dir.file("dv.npy"),
                            cache);
    EXPECT_EQ(r.exitCode, 0) << name << ": " << r.err;
    EXPECT_NE(r.out.find("max abs error of dK"), std::string::npos) << name << ": " << r.out;
  }
}

TEST(CliScore, CheckNamesTheInputsAndModifiers) {
  ScratchDir dir;
  CommandResult r = attnc("check " + patternFile(dir, "alibi", kAlibi));
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find(", input slope (float), score\n"), std::string::npos) << r.out;
  r = attnc("check " + patternFile(dir, "sink", kSink));
  EXPECT_NE(r.out.find(", input z (float), sink\n"), std::string::npos) << r.out;
}

TEST(CliScore, RunReadsFloatInputFilesOfExactlyTheirShape) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  const std::string alibi = patternFile(dir, "alibi", kAlibi);
  // float[heads] with 3 query heads: [3], float64 converted.
  const std::string slope = floatNpy(dir, "slope.npy", {3}, {0.5, 0.25, 0.125}, true);
  CommandResult r = attnc("run " + alibi + " -D w=10 --random 1,3,40,8 --input slope=" + slope + " --check -o " +
                              dir.file("o.npy"),
                          cache);
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("max abs error vs double-precision reference"), std::string::npos) << r.out;
  // Without --random every float input must be given.
  CommandResult missing = attnc("run " + alibi + " --q " + dir.file("o.npy") + " --k " + dir.file("o.npy") +
                                    " --v " + dir.file("o.npy"),
                                cache);
  EXPECT_EQ(missing.exitCode, 1);
  EXPECT_NE(missing.err.find("float input 'slope' ([3] at this length and head count); give it with --input "
                             "slope=FILE.npy"),
            std::string::npos)
      << missing.err;
  // No batch or head dimensions in front of a float input.
  const std::string batched = floatNpy(dir, "batched.npy", {1, 3}, {1, 2, 3});
  CommandResult shape = attnc("run " + alibi + " --random 1,3,40,8 --input slope=" + batched, cache);
  EXPECT_EQ(shape.exitCode, 1);
  EXPECT_NE(shape.err.find("has shape [1, 3]; float input 'slope' is [3]"), std::string::npos) << shape.err;
  // Ints for a float input, and a value that is not finite.
  writeFile(dir.file("ints.npy"), npyBytes("<i4", {3}, payloadOf(std::vector<int32_t>{1, 2, 3})));
  CommandResult ints = attnc("run " + alibi + " --random 1,3,40,8 --input slope=" + dir.file("ints.npy"), cache);
  EXPECT_EQ(ints.exitCode, 1);
  EXPECT_NE(ints.err.find("--input slope (a float input)"), std::string::npos) << ints.err;
  EXPECT_NE(ints.err.find("float32 ('<f4') or float64 ('<f8')"), std::string::npos) << ints.err;
  const std::string nan = floatNpy(dir, "nan.npy", {3}, {1, std::nan(""), 3});
  CommandResult bad = attnc("run " + alibi + " --random 1,3,40,8 --input slope=" + nan, cache);
  EXPECT_EQ(bad.exitCode, 1);
  EXPECT_NE(bad.err.find("is NaN"), std::string::npos) << bad.err;
  // Floats for an int input, in a pattern with both.
  const std::string docAlibi = patternFile(dir, "doc_alibi", kDocAlibi);
  CommandResult floatDoc = attnc("run " + docAlibi + " --random 1,3,40,8 --input doc=" + slope, cache);
  EXPECT_EQ(floatDoc.exitCode, 1);
  EXPECT_NE(floatDoc.err.find("--input doc (an int input)"), std::string::npos) << floatDoc.err;
  EXPECT_NE(floatDoc.err.find("int32 ('<i4') or int64 ('<i8')"), std::string::npos) << floatDoc.err;
  // Both kinds drawn, and checked.
  CommandResult both = attnc("run " + docAlibi + " --random 2,3,40,8 --grad random --check", cache);
  EXPECT_EQ(both.exitCode, 0) << both.err;
}

TEST(CliScore, RunRefusesWhatDoesNotTakeFloatInputsYet) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  const std::string sink = patternFile(dir, "sink", kSink);
  CommandResult varlen = attnc("run " + sink + " --random 1,2,64,8 --cu-seqlens 0,20,64", cache);
  EXPECT_EQ(varlen.exitCode, 2) << varlen.err;
  EXPECT_NE(varlen.err.find("patterns with float inputs"), std::string::npos) << varlen.err;
  EXPECT_EQ(varlen.err.find("internal error"), std::string::npos) << varlen.err;
}

TEST(CliScore, BenchAndTuneDrawFloatInputs) {
  ScratchDir dir;
  const std::string cache = "ATTNC_CACHE_DIR=" + dir.path();
  const std::string sink = patternFile(dir, "sink", kSink);
  CommandResult bench = attnc("bench " + sink + " -D w=16 --n 256 --d 16 --heads 2 --backend fused,dense "
                              "--backward --repeat 2",
                              cache);
  EXPECT_EQ(bench.exitCode, 0) << bench.err;
  EXPECT_EQ(bench.out.find("failed"), std::string::npos) << bench.out;
  CommandResult tune = attnc("tune " + sink + " -D w=16 --n 256 --d 16 --measure 2 --repeat 1", cache);
  EXPECT_EQ(tune.exitCode, 0) << tune.err;
  EXPECT_NE(tune.out.find("best tiles"), std::string::npos) << tune.out;
}

#ifdef ATTNC_FAKE_CUDA_PATH
/// run and bench --target cuda on the tests' fake driver (launches run nothing): the float inputs of
/// a soft cap, ALiBi and a sink go to the GPU, read from a file or drawn, and int inputs with them;
/// what the GPU does not run (T5's table) is refused saying so.
TEST(CliScore, TargetCudaTakesTheScoresTheGpuRuns) {
  ScratchDir dir;
  const std::string env = "ATTNC_CACHE_DIR=" + dir.path() + " ATTNC_CUDA_DRIVER=" ATTNC_FAKE_CUDA_PATH
                          " ATTNC_FAKE_CUDA_NO_DATA=1";
  const std::string z = floatNpy(dir, "z.npy", {2}, {0.5, -1.0});
  const std::string out = " -o " + dir.file("o.npy");
  for (const auto &[name, source, extra] :
       {std::tuple{"sink", kSink, " --input z=" + z}, {"alibi", kAlibi, std::string()}, {"capped", kCapped, std::string()}}) {
    SCOPED_TRACE(name);
    const std::string file = patternFile(dir, name, source);
    CommandResult run = attnc("run " + file + " --random 1,2,100,64 --target cuda --grad random" + extra + out, env);
    EXPECT_EQ(run.exitCode, 0) << run.err;
    EXPECT_NE(run.out.find("on CUDA device 0"), std::string::npos) << run.out;
    CommandResult bench =
        attnc("bench " + file + " --n 200 --d 64 --heads 2 --repeat 1 --target cuda --backward", env);
    EXPECT_EQ(bench.exitCode, 0) << bench.err;
  }
  const std::string t5 = patternFile(dir, "t5", "pattern t5 { input rel : float[heads, 4]  causal  "
                                                "attend { j : j <= i }  score s + rel[h, min(i - j, 3)] }\n");
  CommandResult refused = attnc("run " + t5 + " --random 1,2,100,64 --target cuda" + out, env);
  EXPECT_EQ(refused.exitCode, 1) << refused.err;
  EXPECT_NE(refused.err.find("soft cap alone"), std::string::npos) << refused.err;
  // Int and float inputs together (documents and ALiBi): the documents read on the host, the slopes on the GPU.
  const std::string doc = patternFile(dir, "doc", kDocAlibi);
  CommandResult data = attnc("run " + doc + " --random 1,2,100,64 --target cuda --grad random" + out, env);
  EXPECT_EQ(data.exitCode, 0) << data.err;
  EXPECT_NE(data.out.find("on CUDA device 0"), std::string::npos) << data.out;
}
#endif

// ---- analyze, show: scores do not change the set -----------------------------------------

TEST(CliScore, AnalyzeAndShowNeitherNeedNorReadFloatInputs) {
  ScratchDir dir;
  const std::string alibi = patternFile(dir, "alibi", kAlibi), sink = patternFile(dir, "sink", kSink);
  CommandResult r = attnc("analyze " + alibi + " --n 64 -D w=8 --json");
  ASSERT_EQ(r.exitCode, 0) << r.err;
  Json j = parseJson(r.out);
  EXPECT_FALSE(j.has("needs_data")) << r.out;
  ASSERT_FALSE(j["heads"].array.empty()) << r.out;
  EXPECT_EQ(j["heads"].array[0]["nnz"].integer, 8 * 64 - 28) << r.out; // 28 = 1 + ... + 7 missing at the start
  CommandResult text = attnc("analyze " + sink + " --n 64");
  EXPECT_EQ(text.exitCode, 0) << text.err;
  EXPECT_EQ(text.out.find("reads data"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("nnz"), std::string::npos) << text.out;
  CommandResult show = attnc("show " + sink + " --n 12");
  EXPECT_EQ(show.exitCode, 0) << show.err;
  EXPECT_EQ(show.err.find("needs it"), std::string::npos) << show.err;
  // A float input's file is not needed: given, it is noted and not read (this one is not even a .npy).
  writeFile(dir.file("junk.npy"), "not an array");
  CommandResult given = attnc("analyze " + alibi + " --n 64 --input slope=" + dir.file("junk.npy"));
  EXPECT_EQ(given.exitCode, 0) << given.err;
  EXPECT_NE(given.err.find("'slope' is a float input"), std::string::npos) << given.err;
  // With an int input too, only the int input is what the counts need.
  const std::string docAlibi = patternFile(dir, "doc_alibi", kDocAlibi);
  CommandResult needs = attnc("analyze " + docAlibi + " --n 16 --json");
  ASSERT_EQ(needs.exitCode, 0) << needs.err;
  Json k = parseJson(needs.out);
  EXPECT_TRUE(k["needs_data"].boolean) << needs.out;
  ASSERT_EQ(k["inputs"].array.size(), 1u) << needs.out;
  EXPECT_EQ(k["inputs"].array[0]["name"].string, "doc") << needs.out;
  CommandResult picture = attnc("show " + docAlibi + " --n 16");
  EXPECT_EQ(picture.exitCode, 1);
  EXPECT_NE(picture.err.find("its picture needs it: --input doc=FILE.npy\n"), std::string::npos) << picture.err;
  CommandResult unknown = attnc("analyze " + dir.file("sink.attn") + " --n 16 --input slope=" + dir.file("junk.npy"));
  EXPECT_EQ(unknown.exitCode, 1);
  EXPECT_NE(unknown.err.find("declares no input 'slope'"), std::string::npos) << unknown.err;
}

// ---- emit ----------------------------------------------------------------------

TEST(CliScore, EmitPrintsTheExpressionsAtEachStage) {
  ScratchDir dir;
  const std::string alibi = patternFile(dir, "alibi", kAlibi), sink = patternFile(dir, "sink", kSink);
  CommandResult ast = attnc("emit " + alibi + " --stage ast");
  EXPECT_EQ(ast.exitCode, 0) << ast.err;
  EXPECT_NE(ast.out.find("(score"), std::string::npos) << ast.out;
  CommandResult ir = attnc("emit " + alibi + " --stage ir");
  EXPECT_EQ(ir.exitCode, 0) << ir.err;
  EXPECT_NE(ir.out.find("input slope : float[heads]"), std::string::npos) << ir.out;
  EXPECT_NE(ir.out.find("score s + slope[h] * (j - i)"), std::string::npos) << ir.out;
  CommandResult plan = attnc("emit " + alibi + " --stage plan --n 256");
  EXPECT_EQ(plan.exitCode, 0) << plan.err;
  EXPECT_NE(plan.out.find("score s + slope[h] * (j - i)\n  forward:"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("d/ds"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("d/dslope"), std::string::npos) << plan.out;
  CommandResult sinkPlan = attnc("emit " + sink + " --stage plan");
  EXPECT_EQ(sinkPlan.exitCode, 0) << sinkPlan.err;
  EXPECT_NE(sinkPlan.out.find("sink z[h]"), std::string::npos) << sinkPlan.out;
  // A soft cap alone runs in the tile kernels' registers, and the listing says so.
  const std::string capped = patternFile(dir, "capped", "pattern c { causal attend { j : i - j < 8 }  "
                                                        "score 20 * tanh(s / 20) }");
  CommandResult capPlan = attnc("emit " + capped + " --stage plan --n 64");
  EXPECT_EQ(capPlan.exitCode, 0) << capPlan.err;
  EXPECT_NE(capPlan.out.find("captanh s 0.05 20"), std::string::npos) << capPlan.out;
  EXPECT_NE(capPlan.out.find("the tile kernels apply 20 * tanh(0.05 * s) to the scores in registers"),
            std::string::npos)
      << capPlan.out;
  CommandResult cuda = attnc("emit " + sink + " --stage cuda");
  EXPECT_EQ(cuda.exitCode, 0) << cuda.err;
  EXPECT_EQ(cuda.out.rfind("// sink z[h]\n", 0), 0u) << cuda.out.substr(0, 200);
}

} // namespace
} // namespace attnc::test
