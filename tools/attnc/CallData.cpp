//===- CallData.cpp - The data a pattern that reads some is run with ------===//
#include "CallData.h"

#include "Npy.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

namespace attnc::tool {

std::string parseInputFlag(const std::string &text, InputFile &out) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return "expected NAME=FILE.npy (an input the pattern declares and a .npy file: int32 or int64 for an int "
           "input, float32 or float64 for a float input), got '" + text + "'";
  out.name = text.substr(0, eq);
  out.path = text.substr(eq + 1);
  return "";
}

std::vector<InputSpec> kernelInputs(const attnc_kernel *kernel, int64_t n, int64_t heads) {
  std::vector<InputSpec> specs;
  for (int64_t x = 0; x < attnc_kernel_num_inputs(kernel); ++x) {
    attnc_input_info info{};
    info.size = sizeof info;
    if (attnc_kernel_input_info(kernel, x, n, heads, &info) != ATTNC_OK)
      break;
    InputSpec s{info.name, info.rank, info.dims[0], info.rank >= 2 ? info.dims[1] : 1, info.id_limit,
                info.is_float != 0, {}};
    s.dims.assign(info.dims, info.dims + std::clamp(info.rank, 1, 3));
    specs.push_back(std::move(s));
  }
  return specs;
}

namespace {
void collectIdBlocks(const ir::SetNode &s, std::vector<int64_t> &block) {
  if (s.kind == ir::Gen::Select) {
    int64_t &b = block[static_cast<size_t>(s.input)];
    b = b ? std::min(b, s.keyBlock) : s.keyBlock;
  }
  for (const ir::SetRef &c : s.children)
    collectIdBlocks(*c, block);
}
} // namespace

std::vector<InputSpec> patternInputs(const ir::PatternIR &ir, int64_t n, int64_t heads) {
  std::vector<int64_t> block(ir.inputs.size(), 0);
  for (const ir::PatternIR::Head &h : ir.heads)
    collectIdBlocks(*h.set, block);
  std::vector<InputSpec> specs;
  for (size_t x = 0; x < ir.inputs.size(); ++x) {
    const InputDecl &d = ir.inputs[x];
    const int64_t B = block[x];
    InputSpec s{d.name, static_cast<int>(d.rank()), inputDim(d, 0, n, heads),
                d.rank() >= 2 ? inputDim(d, 1, n, heads) : 1, B ? (n + B - 1) / B : 0, d.isFloat, {}};
    for (size_t k = 0; k < d.rank(); ++k)
      s.dims.push_back(inputDim(d, k, n, heads));
    specs.push_back(std::move(s));
  }
  return specs;
}

bool bindPatternData(ir::PatternIR &ir, const std::vector<std::string> &inputFlags, int64_t n, bool &bound) {
  bound = false;
  std::vector<InputFile> files;
  for (const std::string &text : inputFlags) {
    InputFile f;
    parseInputFlag(text, f);
    // A float input feeds the score or the sink only: the pairs, and so every count and picture, are
    // the same for any values.
    const auto decl = std::find_if(ir.inputs.begin(), ir.inputs.end(),
                                   [&](const InputDecl &d) { return d.name == f.name; });
    if (decl != ir.inputs.end() && decl->isFloat) {
      std::cerr << "attnc: note: --input " << f.name << ": '" << f.name << "' is a float input (read by the "
                << "pattern's score or sink), which does not change the pairs it attends; not read\n";
      continue;
    }
    files.push_back(f);
  }
  if (!ir.readsData() || files.empty()) {
    if (!files.empty())
      std::cerr << "attnc: error: --input " << files.front().name << ": pattern '" << ir.name << "' declares no "
                << (ir.inputs.empty() ? "input" : "input '" + files.front().name + "'") << "\n";
    return files.empty() || ir.readsData();
  }
  CallData data;
  if (!loadCallData(patternInputs(ir, n), files, -1, -1, false, 0, data, /*skipFloats=*/true))
    return false;
  for (ir::PatternIR::Head &h : ir.heads)
    h.set = ir::bindSet(h.set, data.slice(0, h.heads.front()));
  bound = true;
  return true;
}

namespace {
std::string shapeText(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t a = 0; a < shape.size(); ++a)
    out += (a ? ", " : "") + std::to_string(shape[a]);
  return out + "]";
}

/// A float input's array, from its --input file or drawn: exactly its
/// declared dimensions. Prints the error and returns false.
bool loadFloatInput(const InputSpec &s, const InputFile *file, bool drawMissing, std::mt19937_64 &rng,
                    std::vector<float> &values) {
  if (file) {
    NpyArray array;
    std::string error;
    if (!readNpyFloats(file->path, array, error)) {
      std::cerr << "attnc: error: --input " << s.name << " (a float input): " << error << "\n";
      return false;
    }
    if (array.shape != s.dims) {
      std::cerr << "attnc: error: --input " << s.name << ": " << file->path << " has shape " << shapeText(array.shape)
                << "; float input '" << s.name << "' is " << shapeText(s.dims)
                << " at this length and head count, exactly (the whole call shares it: no batch or head "
                << "dimensions in front)\n";
      return false;
    }
    values = std::move(array.data);
    return true;
  }
  if (!drawMissing) {
    std::cerr << "attnc: error: pattern reads float input '" << s.name << "' (" << shapeText(s.dims)
              << " at this length and head count); give it with --input " << s.name
              << "=FILE.npy (float32 or float64)\n";
    return false;
  }
  int64_t count = 1;
  for (int64_t d : s.dims)
    count *= d;
  values.resize(static_cast<size_t>(count));
  // Normal with standard deviation 0.5 (Box-Muller on the generator's bits: the same values on every
  // standard library, unlike std::normal_distribution).
  const double twoPi = 6.283185307179586;
  for (size_t x = 0; x < values.size(); x += 2) {
    const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1p-53;
    const double u2 = static_cast<double>(rng() >> 11) * 0x1p-53;
    const double r = 0.5 * std::sqrt(-2.0 * std::log(u1));
    values[x] = static_cast<float>(r * std::cos(twoPi * u2));
    if (x + 1 < values.size())
      values[x + 1] = static_cast<float>(r * std::sin(twoPi * u2));
  }
  return true;
}
} // namespace

bool loadCallData(const std::vector<InputSpec> &specs, const std::vector<InputFile> &files, int64_t batch,
                  int64_t heads, bool drawMissing, uint64_t seed, CallData &out, bool skipFloats) {
  out = CallData{};
  out.specs = specs;
  for (const InputFile &f : files) {
    bool known = false;
    for (const InputSpec &s : specs)
      known = known || s.name == f.name;
    if (!known) {
      std::string declared;
      for (const InputSpec &s : specs)
        declared += (declared.empty() ? "'" : ", '") + s.name + "'";
      std::cerr << "attnc: error: --input " << f.name << ": the pattern has no input '" << f.name << "'"
                << (declared.empty() ? " (it declares none)" : " (it declares " + declared + ")") << "\n";
      return false;
    }
  }
  std::mt19937_64 rng(seed ^ 0x5eedda7aULL), floatRng(seed ^ 0xf1a7da7aULL);
  for (const InputSpec &s : specs) {
    const std::vector<int64_t> dims = s.rank == 2 ? std::vector<int64_t>{s.rows, s.cols} : std::vector<int64_t>{s.rows};
    const InputFile *file = nullptr;
    for (const InputFile &f : files)
      if (f.name == s.name) {
        if (file) {
          std::cerr << "attnc: error: --input " << s.name << " is given twice\n";
          return false;
        }
        file = &f;
      }
    if (s.isFloat) {
      std::vector<float> reals;
      if (!skipFloats && !loadFloatInput(s, file, drawMissing, floatRng, reals))
        return false;
      std::array<int64_t, 4> shape{1, 1, 1, 1};
      for (size_t a = 0; a < s.dims.size() && a < 4; ++a)
        shape[a] = s.dims[a];
      out.values.emplace_back();
      out.reals.push_back(std::move(reals));
      out.shapes.push_back(shape);
      continue;
    }
    std::array<int64_t, 4> shape{1, 1, s.rows, s.cols};
    std::vector<int64_t> values;
    if (file) {
      NpyIntArray array;
      std::string error;
      if (!readNpyInts(file->path, array, error)) {
        std::cerr << "attnc: error: --input " << s.name << (std::any_of(specs.begin(), specs.end(), [](const InputSpec &x) { return x.isFloat; }) ? " (an int input)" : "")
                  << ": " << error << "\n";
        return false;
      }
      // DIMS, [B, DIMS] or [B, H, DIMS].
      const size_t lead = array.shape.size() >= dims.size() ? array.shape.size() - dims.size() : 99;
      const bool fits = lead <= 2 && std::equal(dims.begin(), dims.end(), array.shape.begin() + lead) &&
                        (lead < 1 || array.shape[0] == 1 || batch < 0 || array.shape[0] == batch) &&
                        (lead < 2 || array.shape[1] == 1 || heads < 0 || array.shape[1] == heads);
      if (!fits) {
        std::cerr << "attnc: error: --input " << s.name << ": " << file->path << " has shape "
                  << shapeText(array.shape) << "; input '" << s.name << "' is " << shapeText(dims)
                  << " at this length, given as " << shapeText(dims) << ", [B, ...] or [B, H, ...] (one per "
                  << "sequence, or per sequence and head"
                  << (batch < 0 ? "" : "; B is 1 or " + std::to_string(batch) + ", H 1 or " + std::to_string(heads))
                  << ")\n";
        return false;
      }
      if (lead >= 1)
        shape[0] = array.shape[0];
      if (lead == 2)
        shape[1] = array.shape[1];
      values = std::move(array.data);
    } else if (drawMissing) {
      values.resize(static_cast<size_t>(s.rows * s.cols));
      for (int64_t &v : values)
        v = static_cast<int64_t>(rng() % static_cast<uint64_t>(s.idLimit > 0 ? s.idLimit : 64));
    } else {
      std::cerr << "attnc: error: pattern reads input '" << s.name << "' (" << shapeText(dims)
                << " at this length); give it with --input " << s.name << "=FILE.npy (int32 or int64)\n";
      return false;
    }
    out.values.push_back(std::move(values));
    out.reals.emplace_back();
    out.shapes.push_back(shape);
  }
  return true;
}

std::vector<attnc_input> CallData::views() const {
  std::vector<attnc_input> out;
  for (size_t x = 0; x < specs.size(); ++x) {
    attnc_input in{};
    in.name = specs[x].name.c_str();
    if (specs[x].isFloat) {
      in.values.data = const_cast<float *>(reals[x].data());
      in.values.dtype = ATTNC_DTYPE_F32;
    } else {
      in.values.data = const_cast<int64_t *>(values[x].data());
      in.values.dtype = ATTNC_DTYPE_I64;
    }
    int64_t stride = 1;
    for (int a = 3; a >= 0; --a) {
      in.values.shape[a] = shapes[x][a];
      in.values.strides[a] = stride;
      stride *= shapes[x][a];
    }
    out.push_back(in);
  }
  return out;
}

InputArrays CallData::slice(int64_t b, int64_t h) const {
  InputArrays out;
  for (size_t x = 0; x < specs.size(); ++x) {
    auto a = std::make_shared<InputArray>();
    a->name = specs[x].name;
    a->rank = specs[x].rank;
    if (specs[x].isFloat) { // (no set reads it)
      out.push_back(std::move(a));
      continue;
    }
    a->bound = true;
    a->rows = specs[x].rows;
    a->cols = specs[x].cols;
    const int64_t bi = std::min(b, shapes[x][0] - 1), hi = std::min(h, shapes[x][1] - 1);
    const size_t at = static_cast<size_t>((bi * shapes[x][1] + hi) * a->rows * a->cols);
    a->values.assign(values[x].begin() + static_cast<std::ptrdiff_t>(at),
                     values[x].begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(a->rows * a->cols)));
    if (a->rank == 1)
      a->indexClasses();
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<FloatInput> CallData::floatInputs() const {
  std::vector<FloatInput> out(specs.size());
  for (size_t x = 0; x < specs.size(); ++x)
    if (specs[x].isFloat) {
      out[x].values = reals[x].data();
      out[x].dims = specs[x].dims;
    }
  return out;
}

} // namespace attnc::tool
