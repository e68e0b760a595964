//===- TestSupport.cpp - Shared helpers of the kernel tests ---------------===//
#include "TestSupport.h"

#include "attnc/attnc.hpp"
#include "attnc/compiler/Compile.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace attnc::test {

std::vector<float> randomFloats(size_t count, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> out(count);
  for (float &x : out)
    x = dist(rng);
  return out;
}

static std::vector<float> reference(Frontend &fe, const std::vector<std::string> &defines,
                                    const std::vector<float> &q, const std::vector<float> &k,
                                    const std::vector<float> &v, int64_t batch, int64_t heads,
                                    int64_t n, int64_t d) {
  SemaOptions sema;
  for (const std::string &text : defines) {
    Define def;
    std::string error;
    if (!parseDefine(text, def, error))
      throw std::runtime_error(error);
    sema.defines.push_back(def);
  }
  if (!fe.analyze(sema) || fe.patterns().empty())
    throw std::runtime_error("reference: the pattern does not check");
  const Pattern &p = fe.patterns().front();
  std::vector<float> o(q.size(), 0.0f);
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t h = 0; h < heads; ++h) {
    const Term &set = *p.heads[p.headsDeclared ? h : 0];
    std::vector<char> mask = oracle::denseMask(set, n);
    for (int64_t b = 0; b < batch; ++b) {
      size_t off = static_cast<size_t>((b * heads + h) * n * d);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> s(static_cast<size_t>(n), 0.0);
        double best = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          if (!mask[i * n + j])
            continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(q[off + i * d + c]) * double(k[off + j * d + c]);
          s[j] = dot * scale;
          best = std::max(best, s[j]);
        }
        double sum = 0;
        std::vector<double> acc(static_cast<size_t>(d), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          if (!mask[i * n + j])
            continue;
          double w = std::exp(s[j] - best);
          sum += w;
          for (int64_t c = 0; c < d; ++c)
            acc[c] += w * double(v[off + j * d + c]);
        }
        for (int64_t c = 0; c < d; ++c)
          o[off + i * d + c] = sum > 0 ? float(acc[c] / sum) : 0.0f;
      }
    }
  }
  return o;
}

std::vector<float> referenceFromOracle(const std::string &patternPath,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d) {
  Frontend fe;
  if (!fe.parseFile(patternPath))
    throw std::runtime_error("reference: cannot parse " + patternPath);
  return reference(fe, defines, q, k, v, batch, heads, n, d);
}

std::vector<float> referenceFromSource(const std::string &source,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d) {
  Frontend fe;
  if (!fe.parseString("test.attn", source))
    throw std::runtime_error("reference: cannot parse the source");
  return reference(fe, defines, q, k, v, batch, heads, n, d);
}

attnc_tensor view(std::vector<float> &data, int64_t batch, int64_t heads, int64_t n, int64_t d) {
  return tensorView(data.data(), {batch, heads, n, d});
}

std::string patternPath(const std::string &name) {
  return std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn";
}

std::vector<const char *> builtBackends(std::initializer_list<const char *> all) {
  std::vector<const char *> out;
  for (const char *name : all)
    if (compiler::backendUnavailable(*codegen::parseBackend(name)).empty())
      out.push_back(name);
  return out;
}

} // namespace attnc::test
