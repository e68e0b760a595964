//===- FuzzCallInputs.cpp - The data a pattern that reads some is given ---===//
//
// attnc_forward and attnc_backward on kernels compiled once whose patterns
// read data (two LSH rounds with the self rule, a block selection, a token
// selection, a predicate on an input), with Q, K and V fixed and the inputs
// decoded from the fuzzer's bytes: how many and which names, dtypes
// (int32, int64, others), shapes, strides, and values (small, -1, edges,
// raw). Each input's buffer covers exactly the elements its shape and
// strides reach when those are sane (the runtime must refuse the others
// without reading them), so a sanitizer report is the runtime's fault. The
// call must return a status; ATTNC_OK only when the values are valid.
//
//===----------------------------------------------------------------------===//
#include "FuzzInput.h"
#include "FuzzKernels.h"

#include "attnc/attnc.h"
#include "attnc/compiler/Compile.h"

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

namespace {

using attnc::fuzz::ByteReader;

const attnc_kernel *kernel(unsigned which) {
  static attnc_kernel *const kernels[] = {
      attnc::fuzz::compileFusedKernel("pattern lsh { input b0 : int[n] input b1 : int[n] causal "
                    "attend ({ j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }) - { i } else { i } }"),
      attnc::fuzz::compileFusedKernel("pattern sel { param B = 4 input s : int[(n + B - 1) / B, 2] causal "
                    "attend { j : j / B in s[i / B] } | { j : i - j < 2 } }"),
      attnc::fuzz::compileFusedKernel("pattern top { input t : int[n, 3] attend { j : j in t[i] } }"),
      attnc::fuzz::compileFusedKernel("pattern pred { input x : int[n] attend { j : x[j] < x[i] + 2 && j <= x[i] } }"),
  };
  return kernels[which % 4];
}

constexpr int64_t kEdges[] = {0, -1, -2, 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                              int64_t(1) << 31, (int64_t(1) << 31) - 1, int64_t(1) << 62, 3037000500};

int64_t drawValue(ByteReader &in, int64_t smallMax) {
  const uint8_t selector = in.byte();
  if (selector < 200)
    return selector % (smallMax + 1) - (selector % 7 == 0 ? 1 : 0);
  if (selector < 245)
    return kEdges[in.pick(std::size(kEdges))];
  return in.integer<int64_t>();
}

struct Input {
  std::string name;
  attnc_input input{};
  std::vector<unsigned char> storage;
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ByteReader in(data, size);
  const attnc_kernel *k = kernel(in.byte());
  const int64_t n = 1 + in.pick(24), d = 1 + in.pick(8), batch = 1 + in.pick(2), heads = 1 + in.pick(3);
  const size_t elements = static_cast<size_t>(batch * heads * n * d);
  std::vector<float> q(elements, 0.25f), kv(elements, 0.5f), o(elements), lse(static_cast<size_t>(batch * heads * n)),
      dq(elements), dk(elements), dv(elements);
  auto view = [&](std::vector<float> &t, int64_t last) {
    attnc_tensor x{};
    x.data = t.data();
    x.dtype = ATTNC_DTYPE_F32;
    const int64_t shape[4] = {batch, heads, n, last};
    int64_t stride = 1;
    for (int a = 3; a >= 0; --a) {
      x.shape[a] = shape[a];
      x.strides[a] = stride;
      stride *= shape[a];
    }
    return x;
  };
  attnc_tensor tq = view(q, d), tk = view(kv, d), to = view(o, d), tl = view(lse, 1), tdq = view(dq, d),
               tdk = view(dk, d), tdv = view(dv, d);

  static const char *const kNames[] = {"b0", "b1", "s", "t", "x", "", "b0 ", "B0"};
  std::vector<Input> inputs(in.pick(4));
  for (Input &x : inputs) {
    x.name = kNames[in.pick(std::size(kNames))];
    attnc_tensor &t = x.input.values;
    const uint8_t dtype = in.byte();
    t.dtype = static_cast<attnc_dtype>(dtype < 120 ? ATTNC_DTYPE_I32 : dtype < 240 ? ATTNC_DTYPE_I64 : dtype % 8);
    for (int a = 0; a < 4; ++a)
      t.shape[a] = drawValue(in, a == 2 ? 26 : 4);
    // Row-major strides, sometimes spoiled.
    int64_t stride = 1;
    for (int a = 3; a >= 0; --a) {
      t.strides[a] = in.byte() < 230 ? stride : drawValue(in, 8);
      stride *= std::max<int64_t>(1, std::min<int64_t>(t.shape[a], 1 << 10));
    }
    // A buffer for what sane shapes and strides reach; else one the runtime must not read.
    __int128 reach = 1;
    bool sane = true;
    for (int a = 0; a < 4; ++a) {
      if (t.shape[a] < 0 || t.shape[a] > (1 << 10) || t.strides[a] < 0 || t.strides[a] > (1 << 12)) {
        sane = false;
        break;
      }
      if (t.shape[a] == 0)
        reach = 0;
      else
        reach += __int128(t.shape[a] - 1) * t.strides[a];
    }
    const size_t width = t.dtype == ATTNC_DTYPE_I64 ? 8 : 4;
    const size_t count = sane && reach > 0 && reach < (1 << 16) ? static_cast<size_t>(reach) : 4;
    x.storage.resize(count * width);
    for (size_t e = 0; e < count; ++e) {
      const int64_t v = drawValue(in, n + 2);
      if (width == 8)
        std::memcpy(x.storage.data() + 8 * e, &v, 8);
      else {
        const auto v32 = static_cast<int32_t>(v);
        std::memcpy(x.storage.data() + 4 * e, &v32, 4);
      }
    }
    t.data = in.byte() < 250 ? x.storage.data() : nullptr;
  }
  std::vector<attnc_input> views;
  for (Input &x : inputs) {
    x.input.name = x.name.c_str();
    views.push_back(x.input);
  }

  attnc_call call;
  attnc_call_init(&call);
  call.q = &tq;
  call.k = &tk;
  call.v = &tk;
  call.o = &to;
  call.lse = &tl;
  call.inputs = views.empty() ? nullptr : views.data();
  call.num_inputs = static_cast<int64_t>(views.size());
  attnc_run_options options{0.0f, 1};
  call.options = &options;
  if (attnc_forward(k, &call) != ATTNC_OK)
    return 0;
  call.d_o = &tq;
  call.d_q = &tdq;
  call.d_k = &tdk;
  call.d_v = &tdv;
  attnc_backward(k, &call);
  (void)tdv;
  return 0;
}
