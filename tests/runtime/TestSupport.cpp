//===- TestSupport.cpp - Shared helpers of the kernel tests ---------------===//
#include "TestSupport.h"

#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"
#include "attnc/compiler/Compile.h"
#include "attnc/frontend/Canonicalize.h"
#include "attnc/frontend/Driver.h"
#include "support/Oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>
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

/// The checker's options with `defines` ("l=16"); throws on a malformed one.
static SemaOptions semaOptions(const std::vector<std::string> &defines) {
  SemaOptions sema;
  for (const std::string &text : defines) {
    Define def;
    std::string error;
    if (!parseDefine(text, def, error))
      throw std::runtime_error(error);
    sema.defines.push_back(def);
  }
  return sema;
}

/// Parses `source` (a file path, or text when `isText`), checks it with
/// `defines` and returns the brute-force oracle's n x n membership mask of
/// each of `heads` heads (the pattern's one set for every head when it
/// declares none).
static std::vector<std::vector<char>> oracleMasks(const std::string &source, bool isText,
                                                  const std::vector<std::string> &defines,
                                                  int64_t heads, int64_t n) {
  Frontend fe;
  if (isText ? !fe.parseString("test.attn", source) : !fe.parseFile(source))
    throw std::runtime_error(isText ? std::string("reference: cannot parse the source")
                                    : "reference: cannot parse " + source);
  if (!fe.analyze(semaOptions(defines)) || fe.patterns().empty())
    throw std::runtime_error("reference: the pattern does not check");
  const Pattern &p = fe.patterns().front();
  if (p.headsDeclared && static_cast<int64_t>(p.heads.size()) != heads)
    throw std::runtime_error("reference: the pattern declares " + std::to_string(p.heads.size()) +
                             " heads, not " + std::to_string(heads));
  std::vector<std::vector<char>> masks;
  for (int64_t h = 0; h < heads; ++h)
    masks.push_back(oracle::denseMask(*p.heads[p.headsDeclared ? h : 0], n));
  return masks;
}

static std::vector<float> reference(const std::vector<std::vector<char>> &masks,
                                    const std::vector<float> &q, const std::vector<float> &k,
                                    const std::vector<float> &v, int64_t batch, int64_t heads,
                                    int64_t n, int64_t d) {
  std::vector<float> o(q.size(), 0.0f);
  double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t h = 0; h < heads; ++h) {
    const std::vector<char> &mask = masks[static_cast<size_t>(h)];
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
  return reference(oracleMasks(patternPath, false, defines, heads, n), q, k, v, batch, heads, n, d);
}

std::vector<float> referenceFromSource(const std::string &source,
                                       const std::vector<std::string> &defines,
                                       const std::vector<float> &q, const std::vector<float> &k,
                                       const std::vector<float> &v, int64_t batch, int64_t heads,
                                       int64_t n, int64_t d) {
  return reference(oracleMasks(source, true, defines, heads, n), q, k, v, batch, heads, n, d);
}

/// The gradients, written from the softmax's formulas over dense n x n
/// matrices of one slice (the masked entries skipped), in double.
static GradientReference gradients(std::vector<std::vector<char>> masks, const std::vector<float> &q,
                                   const std::vector<float> &k, const std::vector<float> &v,
                                   const std::vector<float> &dO, int64_t batch, int64_t heads,
                                   int64_t n, int64_t d, double scale) {
  const size_t count = static_cast<size_t>(batch * heads * n * d);
  if (q.size() != count || k.size() != count || v.size() != count || dO.size() != count)
    throw std::runtime_error("gradient reference: the inputs are not [batch, heads, n, d]");
  if (scale == 0)
    scale = 1.0 / std::sqrt(static_cast<double>(d));
  GradientReference r;
  r.batch = batch;
  r.heads = heads;
  r.n = n;
  r.d = d;
  r.o.assign(count, 0.0);
  r.dq.assign(count, 0.0);
  r.dk.assign(count, 0.0);
  r.dv.assign(count, 0.0);
  r.lse.assign(static_cast<size_t>(batch * heads * n), 0.0);
  r.masks = std::move(masks);
  const size_t nn = static_cast<size_t>(n * n);
  std::vector<double> prob(nn), dprob(nn), rowD(static_cast<size_t>(n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<char> &mask = r.masks[static_cast<size_t>(h)];
      const size_t off = static_cast<size_t>((b * heads + h) * n * d);
      const float *Q = q.data() + off, *K = k.data() + off, *V = v.data() + off, *G = dO.data() + off;
      double *O = r.o.data() + off, *dQ = r.dq.data() + off, *dK = r.dk.data() + off, *dV = r.dv.data() + off;
      double *lse = r.lse.data() + (b * heads + h) * n;
      // P = exp(S - lse) on the mask, 0 elsewhere; O = P V.
      for (int64_t i = 0; i < n; ++i) {
        double best = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double &s = prob[static_cast<size_t>(i * n + j)];
          s = 0;
          if (!mask[static_cast<size_t>(i * n + j)])
            continue;
          double dot = 0;
          for (int64_t c = 0; c < d; ++c)
            dot += double(Q[i * d + c]) * double(K[j * d + c]);
          s = scale * dot;
          best = std::max(best, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < n; ++j)
          if (mask[static_cast<size_t>(i * n + j)])
            sum += std::exp(prob[static_cast<size_t>(i * n + j)] - best);
        lse[i] = sum > 0 ? best + std::log(sum) : -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          double &p = prob[static_cast<size_t>(i * n + j)];
          p = mask[static_cast<size_t>(i * n + j)] ? std::exp(p - lse[i]) : 0.0;
          for (int64_t c = 0; c < d; ++c)
            O[i * d + c] += p * double(V[j * d + c]);
        }
      }
      // dP = dO V^T, D = rowsum(P * dP), dS = P * (dP - D) (kept in dprob).
      for (int64_t i = 0; i < n; ++i) {
        double sumD = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dp = 0;
          if (mask[static_cast<size_t>(i * n + j)])
            for (int64_t c = 0; c < d; ++c)
              dp += double(G[i * d + c]) * double(V[j * d + c]);
          dprob[static_cast<size_t>(i * n + j)] = dp;
          sumD += prob[static_cast<size_t>(i * n + j)] * dp;
        }
        rowD[static_cast<size_t>(i)] = sumD;
        for (int64_t j = 0; j < n; ++j) {
          const size_t ij = static_cast<size_t>(i * n + j);
          dprob[ij] = prob[ij] * (dprob[ij] - sumD);
        }
      }
      // dV = P^T dO, dQ = scale dS K, dK = scale dS^T Q.
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t ij = static_cast<size_t>(i * n + j);
          if (!mask[ij])
            continue;
          for (int64_t c = 0; c < d; ++c) {
            dV[j * d + c] += prob[ij] * double(G[i * d + c]);
            dQ[i * d + c] += scale * dprob[ij] * double(K[j * d + c]);
            dK[j * d + c] += scale * dprob[ij] * double(Q[i * d + c]);
          }
        }
    }
  return r;
}

bool GradientReference::rowEmpty(int64_t h, int64_t i) const {
  const std::vector<char> &mask = masks[static_cast<size_t>(h)];
  for (int64_t j = 0; j < n; ++j)
    if (mask[static_cast<size_t>(i * n + j)])
      return false;
  return true;
}

bool GradientReference::keyUnused(int64_t h, int64_t j) const {
  const std::vector<char> &mask = masks[static_cast<size_t>(h)];
  for (int64_t i = 0; i < n; ++i)
    if (mask[static_cast<size_t>(i * n + j)])
      return false;
  return true;
}

GradientReference gradientsFromOracle(const std::string &patternPath, const std::vector<std::string> &defines,
                                      const std::vector<float> &q, const std::vector<float> &k,
                                      const std::vector<float> &v, const std::vector<float> &dO,
                                      int64_t batch, int64_t heads, int64_t n, int64_t d, double scale) {
  return gradients(oracleMasks(patternPath, false, defines, heads, n), q, k, v, dO, batch, heads, n, d,
                   scale);
}

GradientReference gradientsFromSource(const std::string &source, const std::vector<std::string> &defines,
                                      const std::vector<float> &q, const std::vector<float> &k,
                                      const std::vector<float> &v, const std::vector<float> &dO,
                                      int64_t batch, int64_t heads, int64_t n, int64_t d, double scale) {
  return gradients(oracleMasks(source, true, defines, heads, n), q, k, v, dO, batch, heads, n, d, scale);
}

std::vector<std::vector<char>> masksFromOracle(const std::string &pattern, bool isText,
                                               const std::vector<std::string> &defines, int64_t heads, int64_t n) {
  return oracleMasks(pattern, isText, defines, heads, n);
}

uint16_t toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t lower = bits & 0xffffu, upper = bits >> 16;
  const bool up = lower > 0x8000u || (lower == 0x8000u && (upper & 1u));
  return static_cast<uint16_t>(upper + (up ? 1u : 0u));
}

float fromBf16(uint16_t x) {
  const uint32_t bits = uint32_t{x} << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

attnc_tensor view(std::vector<float> &data, int64_t batch, int64_t heads, int64_t n, int64_t d) {
  return tensorView(data.data(), {batch, heads, n, d});
}

std::string Problem::text() const {
  std::ostringstream os;
  os << "hq=" << hq << " hkv=" << hkv << " d=" << d << " seqs";
  for (const Seq &s : seqs)
    os << " " << s.nq << "/" << s.nk;
  return os.str();
}

Problem dense(int64_t batch, int64_t hq, int64_t hkv, int64_t nq, int64_t nk, int64_t d) {
  Problem p{batch, hq, hkv, nq, nk, d, {}, {}, {}};
  for (int64_t b = 0; b < batch; ++b)
    p.seqs.push_back({b, 0, nq, 0, nk});
  return p;
}

Problem varlen(int64_t hq, int64_t hkv, const std::vector<std::pair<int64_t, int64_t>> &lengths, int64_t d) {
  Problem p{1, hq, hkv, 0, 0, d, {}, {0}, {0}};
  for (auto [nq, nk] : lengths) {
    p.seqs.push_back({0, p.nqTotal, nq, p.nkTotal, nk});
    p.nqTotal += nq;
    p.nkTotal += nk;
    p.cuQ.push_back(static_cast<int32_t>(p.nqTotal));
    p.cuK.push_back(static_cast<int32_t>(p.nkTotal));
  }
  return p;
}

KernelPtr jitCompile(const char *file, const char *source, const std::vector<std::string> &defines,
                     const char *backend, const std::string &cacheDir, std::string &error) {
  std::vector<const char *> defs;
  for (const std::string &d : defines)
    defs.push_back(d.c_str());
  attnc_jit_options options{defs.data(), static_cast<int32_t>(defs.size()), nullptr, cacheDir.c_str(), 0, backend};
  attnc_kernel *kernel = nullptr;
  const attnc_status s = file ? attnc_jit_compile_file(patternPath(file).c_str(), &options, &kernel)
                              : attnc_jit_compile_string(source, "inline.attn", &options, &kernel);
  error = s == ATTNC_OK ? "" : attnc_last_error();
  return KernelPtr(s == ATTNC_OK ? kernel : nullptr, attnc_kernel_free);
}

const std::string &jitCacheDir() {
  static const ScratchDir dir;
  return dir.path();
}

std::string patternPath(const std::string &name) {
  // $ATTNC_TEST_SOURCE_DIR: the checkout, where the tests run from a copy
  // of the build in another place (scripts/gpu-check.sh on the GPU machine).
  const char *moved = std::getenv("ATTNC_TEST_SOURCE_DIR");
  return std::string(moved && *moved ? moved : ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn";
}

ir::PatternIR patternIr(const std::string &name, const std::vector<std::string> &defines) {
  Frontend fe;
  if (!fe.parseFile(patternPath(name)) || !fe.analyze(semaOptions(defines)))
    throw std::runtime_error("cannot compile " + name);
  return ir::canonicalizePattern(fe.patterns().front());
}

std::string fusedKernelBytes(const std::string &name, const std::vector<std::string> &defines, int64_t rows,
                             int64_t cols) {
  Frontend fe;
  SemaOptions sema;
  std::string bytes, error;
  for (const std::string &text : defines) {
    Define def;
    if (!parseDefine(text, def, error))
      throw std::runtime_error(error);
    sema.defines.push_back(def);
  }
  codegen::CodeGenOptions options;
  options.planOptions = {rows, cols};
  if (!fe.parseFile(patternPath(name)) || !fe.analyze(sema) ||
      !codegen::buildKernelFile(fe, fe.patterns().front(), options, bytes, error))
    throw std::runtime_error("cannot build the fused kernel of " + name + ": " + error);
  return bytes;
}

AttentionInDouble attentionInDouble(const ScoredAttention &m, const std::vector<float> &q, const std::vector<float> &k,
                                    const std::vector<float> &v, const std::vector<float> &dO, int64_t batch,
                                    int64_t hq, int64_t hkv, int64_t nq, int64_t n, int64_t d, bool grads) {
  AttentionInDouble r;
  const size_t qs = static_cast<size_t>(batch * hq * nq * d), ks = static_cast<size_t>(batch * hkv * n * d);
  r.o.assign(qs, 0);
  r.dq.assign(qs, 0);
  r.dk.assign(ks, 0);
  r.dv.assign(ks, 0);
  const double ninf = -std::numeric_limits<double>::infinity();
  r.lse.assign(static_cast<size_t>(batch * hq * nq), ninf);
  const double scale = 1 / std::sqrt(double(d));
  std::vector<double> s(static_cast<size_t>(n)), p(static_cast<size_t>(n));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t slice = b * hq + h, g = h / (hq / hkv);
      auto Q = [&](int64_t r0, int64_t x) { return double(q[static_cast<size_t>((slice * nq + r0) * d + x)]); };
      auto K = [&](int64_t j, int64_t x) { return double(k[static_cast<size_t>(((b * hkv + g) * n + j) * d + x)]); };
      auto V = [&](int64_t j, int64_t x) { return double(v[static_cast<size_t>(((b * hkv + g) * n + j) * d + x)]); };
      for (int64_t r0 = 0; r0 < nq; ++r0) {
        const int64_t i = n - nq + r0;
        const double sink = m.sink ? m.sink(i, h) : ninf;
        double mx = sink;
        for (int64_t j = 0; j < n; ++j) {
          p[static_cast<size_t>(j)] = ninf;
          if (!m.mask(slice, i, j))
            continue;
          double dot = 0;
          for (int64_t x = 0; x < d; ++x)
            dot += Q(r0, x) * K(j, x);
          s[static_cast<size_t>(j)] = dot * scale;
          p[static_cast<size_t>(j)] = m.score ? m.score(dot * scale, i, j, h) : dot * scale;
          mx = std::max(mx, p[static_cast<size_t>(j)]);
        }
        if (mx == ninf)
          continue; // no key: zeros
        double sum = m.sink ? std::exp(sink - mx) : 0;
        for (double &x : p)
          sum += (x = std::exp(x - mx));
        const size_t row = static_cast<size_t>((slice * nq + r0) * d);
        r.lse[static_cast<size_t>(slice * nq + r0)] = mx + std::log(sum);
        for (int64_t j = 0; j < n; ++j)
          for (int64_t x = 0; x < d; ++x)
            r.o[row + static_cast<size_t>(x)] += p[static_cast<size_t>(j)] / sum * V(j, x);
        // dP = dO V^T, dS = P (dP - rowsum(dO o O)) score'(s).
        double delta = 0;
        for (int64_t x = 0; x < d; ++x)
          delta += double(dO[row + static_cast<size_t>(x)]) * r.o[row + static_cast<size_t>(x)];
        r.loss += delta;
        if (!grads)
          continue;
        for (int64_t j = 0; j < n; ++j) {
          const double pj = p[static_cast<size_t>(j)] / sum;
          if (pj == 0)
            continue;
          double dp = 0;
          for (int64_t x = 0; x < d; ++x)
            dp += double(dO[row + static_cast<size_t>(x)]) * V(j, x);
          const double sj = s[static_cast<size_t>(j)], e = 1e-6 * std::max(1.0, std::abs(sj));
          const double slope = m.score ? (m.score(sj + e, i, j, h) - m.score(sj - e, i, j, h)) / (2 * e) : 1.0;
          const double ds = pj * (dp - delta) * slope * scale;
          const size_t key = static_cast<size_t>(((b * hkv + g) * n + j) * d);
          for (int64_t x = 0; x < d; ++x) {
            r.dq[row + static_cast<size_t>(x)] += ds * K(j, x);
            r.dk[key + static_cast<size_t>(x)] += ds * Q(r0, x);
            r.dv[key + static_cast<size_t>(x)] += pj * double(dO[row + static_cast<size_t>(x)]);
          }
        }
      }
    }
  return r;
}

std::vector<const char *> builtBackends(std::initializer_list<const char *> all) {
  std::vector<const char *> out;
  for (const char *name : all)
    if (compiler::backendUnavailable(*codegen::parseBackend(name)).empty())
      out.push_back(name);
  return out;
}

} // namespace attnc::test
