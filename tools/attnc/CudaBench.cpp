//===- CudaBench.cpp - attnc bench --target cuda: CUDA-event timings ------===//
#include "CudaBench.h"

#include "Measure.h"

#include "attnc/attnc.hpp"
#include "attnc/attnc_jit.h"
#include "attnc/runtime/Internal.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <span>
#include <vector>

namespace attnc::tool {

namespace {

/// A failed call: its status and attnc_last_error().
struct Failure {
  attnc_status status;
  std::string message;
};

void check(attnc_status status) {
  if (status != ATTNC_OK)
    throw Failure{status, attnc_last_error()};
}

/// Device memory freed with the object.
class DeviceArray {
public:
  DeviceArray(int device, size_t bytes) : device_(device), bytes_(bytes) {
    check(attnc_internal_cuda_alloc(device, bytes, &ptr_));
  }
  ~DeviceArray() { attnc_internal_cuda_free(device_, ptr_); }
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  void *get() const { return ptr_; }
  void upload(const void *host) { check(attnc_internal_cuda_copy(device_, ptr_, host, bytes_, 1)); }
  void download(void *host) const { check(attnc_internal_cuda_copy(device_, host, ptr_, bytes_, 0)); }

private:
  int device_;
  size_t bytes_;
  void *ptr_ = nullptr;
};

size_t elementBytes(attnc_dtype t) { return t == ATTNC_DTYPE_F32 ? 4 : 2; }

int64_t count(const std::array<int64_t, 4> &s) { return s[0] * s[1] * s[2] * s[3]; }

/// A [B, H, n, d] array on the device holding `values` in `dtype`.
std::unique_ptr<DeviceArray> deviceCopy(int device, std::span<const float> values, attnc_dtype dtype) {
  auto array = std::make_unique<DeviceArray>(device, values.size() * elementBytes(dtype));
  if (dtype == ATTNC_DTYPE_F32) {
    array->upload(values.data());
    return array;
  }
  std::vector<uint16_t> narrow(values.size());
  std::transform(values.begin(), values.end(), narrow.begin(),
                 dtype == ATTNC_DTYPE_BF16 ? floatToBf16 : floatToF16);
  array->upload(narrow.data());
  return array;
}

/// A call's inputs (host views, contiguous: int32 / int64 data, f32 float
/// inputs) copied to `device`, with f32 buffers there for the float ones'
/// gradients.
struct DeviceInputs {
  DeviceInputs(int device, const std::vector<attnc_input> &host) {
    for (const attnc_input &in : host) {
      const size_t element = in.values.dtype == ATTNC_DTYPE_I64 ? 8 : 4; // (int32, int64 or f32 views)
      const size_t bytes =
          static_cast<size_t>(in.values.shape[0] * in.values.shape[1] * in.values.shape[2] * in.values.shape[3]) *
          element;
      arrays.push_back(std::make_unique<DeviceArray>(device, bytes));
      arrays.back()->upload(in.values.data);
      inputs.push_back({in.name, in.values});
      inputs.back().values.data = arrays.back()->get();
      if (in.values.dtype != ATTNC_DTYPE_F32)
        continue; // (an int input has no gradient)
      arrays.push_back(std::make_unique<DeviceArray>(device, bytes));
      grads.push_back({in.name, in.values});
      grads.back().values.data = arrays.back()->get();
    }
  }
  std::vector<std::unique_ptr<DeviceArray>> arrays;
  std::vector<attnc_input> inputs, grads;
};

/// attnc_forward (dO null) or attnc_backward on `dev` with the inputs (and, backward, their gradients).
attnc_status callOn(const attnc_kernel *kernel, const attnc_device &dev, const attnc_tensor &q, const attnc_tensor &k,
                    const attnc_tensor &v, attnc_tensor &o, attnc_tensor *lse, const DeviceInputs &in,
                    const attnc_tensor *dO = nullptr, attnc_tensor *dq = nullptr, attnc_tensor *dk = nullptr,
                    attnc_tensor *dv = nullptr) {
  const attnc_run_options options{0.0f, 0};
  attnc_call call;
  attnc_call_init(&call);
  call.q = &q, call.k = &k, call.v = &v, call.o = &o, call.lse = lse, call.device = &dev, call.options = &options;
  call.inputs = in.inputs.data(), call.num_inputs = static_cast<int64_t>(in.inputs.size());
  if (!dO)
    return attnc_forward(kernel, &call);
  call.d_o = dO, call.d_q = dq, call.d_k = dk, call.d_v = dv;
  call.d_inputs = in.grads.data(), call.num_d_inputs = static_cast<int64_t>(in.grads.size());
  return attnc_backward(kernel, &call);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Calls queued back to back between a timing's two events.
constexpr int kQueuedCalls = 10;

/// Milliseconds of one `call` on the device's default stream, by CUDA
/// events around `calls` of them queued back to back: the GPU's time (the
/// host, running ahead, hides its own per-call cost unless that is longer).
template <typename Call> double eventMs(int device, Call &&call, int calls = kQueuedCalls) {
  void *timer = nullptr;
  check(attnc_internal_cuda_timer(device, &timer, nullptr));
  attnc_status status = ATTNC_OK;
  for (int i = 0; i < calls && status == ATTNC_OK; ++i)
    status = call();
  float ms = 0;
  const attnc_status stop = attnc_internal_cuda_timer(device, &timer, &ms); // (frees the timer)
  check(status);
  check(stop);
  return ms / calls;
}

} // namespace

attnc_kernel *jitFused(const PatternOptions &pattern) {
  std::vector<const char *> defs;
  for (const std::string &d : pattern.defines)
    defs.push_back(d.c_str());
  attnc_jit_options jo{defs.data(), static_cast<int32_t>(defs.size()),
                       pattern.pattern.empty() ? nullptr : pattern.pattern.c_str(), nullptr, 0, "fused"};
  attnc_kernel *kernel = nullptr;
  if (attnc_jit_compile_file(pattern.file.c_str(), &jo, &kernel) != ATTNC_OK) {
    std::cerr << "attnc: error: " << attnc_last_error() << "\n";
    return nullptr;
  }
  return kernel;
}

attnc_status cudaBench(const CudaBenchRequest &r, CudaBenchResult &out, std::string &error) {
  try {
    char name[256] = {};
    int32_t major = 0, minor = 0;
    check(attnc_internal_cuda_device(r.device, name, sizeof name, &major, &minor));
    out.deviceName = name;
    out.major = major;
    out.minor = minor;

    // The same draws as the CPU's bench (f32 values, narrowed on the way), float inputs included.
    RandomInputs host(r.qShape, r.kvShape, 1);
    host.setFloatInputs(r.kernel);
    const DeviceInputs floats(r.device, host.inputs);
    auto q = deviceCopy(r.device, host.q, r.dtype), k = deviceCopy(r.device, host.k, r.dtype),
         v = deviceCopy(r.device, host.v, r.dtype), o = deviceCopy(r.device, host.o, r.dtype);
    const std::array<int64_t, 4> lseShape{r.qShape[0], r.qShape[1], r.qShape[2], 1};
    DeviceArray lse(r.device, static_cast<size_t>(count(lseShape)) * sizeof(float));
    const attnc_tensor tq = tensorView(q->get(), r.qShape, r.dtype), tk = tensorView(k->get(), r.kvShape, r.dtype),
                       tv = tensorView(v->get(), r.kvShape, r.dtype);
    attnc_tensor to = tensorView(o->get(), r.qShape, r.dtype), tl = tensorView(lse.get(), lseShape);
    const attnc_device dev{ATTNC_DEVICE_CUDA, r.device, nullptr};
    auto forward = [&](attnc_tensor *l) { return callOn(r.kernel, dev, tq, tk, tv, to, l, floats); };

    // The first call at this n builds the tables and uploads them.
    const auto t0 = std::chrono::steady_clock::now();
    eventMs(r.device, [&] { return forward(nullptr); }, 1); // (waits for the call's end)
    out.firstMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> times;
    for (int i = 0; i < r.repeat; ++i)
      times.push_back(eventMs(r.device, [&] { return forward(nullptr); }));
    out.forwardMs = median(times);
    times.clear();
    for (int i = 0; i < r.repeat; ++i)
      times.push_back(eventMs(r.device, [&] { return forward(nullptr); }, 1));
    out.callMs = median(times);
    if (!r.backward)
      return ATTNC_OK;

    auto dO = deviceCopy(r.device, RandomInputs(r.qShape, r.qShape, 2).q, r.dtype); // Normal(0, 1), Q's shape
    DeviceArray dq(r.device, static_cast<size_t>(count(r.qShape)) * elementBytes(r.dtype)),
        dk(r.device, static_cast<size_t>(count(r.kvShape)) * elementBytes(r.dtype)),
        dv(r.device, static_cast<size_t>(count(r.kvShape)) * elementBytes(r.dtype));
    const attnc_tensor tdo = tensorView(dO->get(), r.qShape, r.dtype);
    attnc_tensor tdq = tensorView(dq.get(), r.qShape, r.dtype), tdk = tensorView(dk.get(), r.kvShape, r.dtype),
                 tdv = tensorView(dv.get(), r.kvShape, r.dtype);
    auto backward = [&] { return callOn(r.kernel, dev, tq, tk, tv, to, &tl, floats, &tdo, &tdq, &tdk, &tdv); };
    eventMs(r.device, [&] { return forward(&tl); }); // a warm-up step
    eventMs(r.device, backward);
    std::vector<double> fwd, bwd;
    for (int i = 0; i < r.repeat; ++i) {
      fwd.push_back(eventMs(r.device, [&] { return forward(&tl); }));
      bwd.push_back(eventMs(r.device, backward));
    }
    out.forwardLseMs = median(fwd);
    out.backwardMs = median(bwd);
    return ATTNC_OK;
  } catch (const Failure &f) {
    error = f.message;
    return f.status;
  }
}

namespace {

size_t bytesOf(const attnc_tensor &t) {
  return static_cast<size_t>(t.shape[0] * t.shape[1] * t.shape[2] * t.shape[3]) * elementBytes(t.dtype);
}

/// A device copy of host tensor `t` (contiguous), and its view there.
struct OnDevice {
  OnDevice(int device, const attnc_tensor &t, bool upload) : array(device, bytesOf(t)), view(t) {
    view.data = array.get();
    if (upload)
      array.upload(t.data);
  }
  DeviceArray array;
  attnc_tensor view;
};

} // namespace

attnc_status cudaRun(const attnc_kernel *kernel, int device, CudaRunArrays &a, double &forwardMs,
                     double &backwardMs, std::string &error) {
  try {
    const bool grad = a.dO != nullptr;
    OnDevice q(device, a.q, true), k(device, a.k, true), v(device, a.v, true), o(device, a.o, false);
    const DeviceInputs floats(device, a.inputs);
    const std::array<int64_t, 4> lseShape{a.q.shape[0], a.q.shape[1], a.q.shape[2], 1};
    DeviceArray lse(device, static_cast<size_t>(count(lseShape)) * sizeof(float));
    attnc_tensor tl = tensorView(lse.get(), lseShape);
    const attnc_device dev{ATTNC_DEVICE_CUDA, device, nullptr};
    auto start = std::chrono::steady_clock::now();
    check(callOn(kernel, dev, q.view, k.view, v.view, o.view, grad ? &tl : nullptr, floats));
    o.array.download(a.o.data); // (a copy on the default stream: after the call)
    forwardMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!grad)
      return ATTNC_OK;
    OnDevice dO(device, *a.dO, true), dq(device, *a.dq, false), dk(device, *a.dk, false), dv(device, *a.dv, false);
    start = std::chrono::steady_clock::now();
    check(callOn(kernel, dev, q.view, k.view, v.view, o.view, &tl, floats, &dO.view, &dq.view, &dk.view, &dv.view));
    dq.array.download(a.dq->data);
    dk.array.download(a.dk->data);
    dv.array.download(a.dv->data);
    backwardMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return ATTNC_OK;
  } catch (const Failure &f) {
    error = f.message;
    return f.status;
  }
}

} // namespace attnc::tool
