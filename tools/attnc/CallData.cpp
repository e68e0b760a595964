//===- CallData.cpp - The data a pattern that reads some is run with ------===//
#include "CallData.h"

#include "Npy.h"

#include <algorithm>
#include <iostream>
#include <random>

namespace attnc::tool {

std::string parseInputFlag(const std::string &text, InputFile &out) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return "expected NAME=FILE.npy (an input the pattern declares and an int32 or int64 .npy file), got '" +
           text + "'";
  out.name = text.substr(0, eq);
  out.path = text.substr(eq + 1);
  return "";
}

std::vector<InputSpec> kernelInputs(const attnc_kernel *kernel, int64_t n) {
  std::vector<InputSpec> specs;
  for (int64_t x = 0; x < attnc_kernel_num_inputs(kernel); ++x) {
    const char *name = nullptr;
    int32_t rank = 0;
    int64_t dims[2] = {0, 0}, limit = 0;
    if (attnc_kernel_input(kernel, x, n, &name, &rank, dims, &limit) != ATTNC_OK)
      break;
    specs.push_back({name, rank, dims[0], dims[1], limit});
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

std::vector<InputSpec> patternInputs(const ir::PatternIR &ir, int64_t n) {
  std::vector<int64_t> block(ir.inputs.size(), 0);
  for (const ir::PatternIR::Head &h : ir.heads)
    collectIdBlocks(*h.set, block);
  std::vector<InputSpec> specs;
  for (size_t x = 0; x < ir.inputs.size(); ++x) {
    const InputDecl &d = ir.inputs[x];
    const int64_t B = block[x];
    specs.push_back({d.name, static_cast<int>(d.rank()), inputDim(d, 0, n), d.rank() == 2 ? inputDim(d, 1, n) : 1,
                     B ? (n + B - 1) / B : 0});
  }
  return specs;
}

bool bindPatternData(ir::PatternIR &ir, const std::vector<std::string> &inputFlags, int64_t n, bool &bound) {
  bound = false;
  std::vector<InputFile> files;
  for (const std::string &text : inputFlags) {
    files.emplace_back();
    parseInputFlag(text, files.back());
  }
  if (!ir.readsData() || files.empty()) {
    if (!files.empty())
      std::cerr << "attnc: error: --input " << files.front().name << ": pattern '" << ir.name
                << "' declares no input\n";
    return files.empty() || ir.readsData();
  }
  CallData data;
  if (!loadCallData(patternInputs(ir, n), files, -1, -1, false, 0, data))
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
} // namespace

bool loadCallData(const std::vector<InputSpec> &specs, const std::vector<InputFile> &files, int64_t batch,
                  int64_t heads, bool drawMissing, uint64_t seed, CallData &out) {
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
  std::mt19937_64 rng(seed ^ 0x5eedda7aULL);
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
    std::array<int64_t, 4> shape{1, 1, s.rows, s.cols};
    std::vector<int64_t> values;
    if (file) {
      NpyIntArray array;
      std::string error;
      if (!readNpyInts(file->path, array, error)) {
        std::cerr << "attnc: error: --input " << s.name << ": " << error << "\n";
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
    out.shapes.push_back(shape);
  }
  return true;
}

std::vector<attnc_input> CallData::views() const {
  std::vector<attnc_input> out;
  for (size_t x = 0; x < specs.size(); ++x) {
    attnc_input in{};
    in.name = specs[x].name.c_str();
    in.values.data = const_cast<int64_t *>(values[x].data());
    in.values.dtype = ATTNC_DTYPE_I64;
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

} // namespace attnc::tool
