//===- FakeCudaDriver.cpp - A CUDA driver without a GPU, for host tests ---===//
//
// The driver API functions libattnc looks up (CudaDriver.cpp), on the host:
// FakeCudaDriver.h says what they do and check. Not thread-safe beyond a
// mutex per call; the tests call from one thread.
//
//===----------------------------------------------------------------------===//
#include "FakeCudaDriver.h"

#include "cuda/CudaArgs.h"
#include "cuda/CudaDriver.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult kOk = 0, kInvalidValue = 1, kOutOfMemory = 2, kInvalidDevice = 101, kInvalidImage = 200,
                   kInvalidContext = 201, kInvalidHandle = 400, kNotFound = 500, kCaptureUnsupported = 900;

struct Allocation {
  size_t bytes;
  int device;
};

struct Device {
  int major, minor;
  /// The most dynamic shared memory a CTA may opt into, as the GPU of that
  /// compute capability has it (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).
  int smemOptIn() const {
    if (major == 8 && (minor == 0 || minor == 7))
      return 163 * 1024;
    if (major == 9 || major == 10)
      return 227 * 1024;
    return 99 * 1024; // 8.6, 8.9, 12.x
  }
};

struct State {
  std::mutex mutex;
  std::vector<Device> devices;
  std::map<uintptr_t, Allocation> memory; ///< start -> allocation
  /// Allocations freed in stream order since the last reset, kept (not
  /// reused) so that a test can still check what a launch was given; the
  /// oldest are released beyond 256 of them.
  std::map<uintptr_t, Allocation> retired;
  std::vector<uintptr_t> retiredOrder;
  std::map<void *, int> streams; ///< stream -> its device
  std::set<void *> events;
  void *capturing = nullptr;       ///< the stream under capture
  bool invalidated = false;        ///< the capture met a forbidden call
  std::set<std::string> names;                ///< interned kernel names (a CUfunction points at one)
  /// The bytes of the fatbin loaded last: a kernel name resolves only where
  /// its symbol is in them (a name the runtime asks for that nvcc did not
  /// build fails as on a GPU).
  std::string image;
  /// cuFuncSetAttribute's dynamic shared memory, per (device, kernel): a
  /// function belongs to the module of one device's context.
  std::map<std::pair<int, const std::string *>, int> maxSmem;
  std::vector<attnc_fake_launch> launches;
  attnc_fake_counts counts{};
  int contexts[64] = {};
  struct Pool {
    int device;
    unsigned long long threshold = 0;
  };
  std::vector<Pool *> pools; ///< a CUmemoryPool points at one (never freed: the runtime keeps its pools)
  bool noData = false;  ///< ATTNC_FAKE_CUDA_NO_DATA: memsets write nothing
  bool noPools = false; ///< ATTNC_FAKE_CUDA_NO_POOLS: cuMemPoolCreate is not supported
};

State &state() {
  static State *s = [] {
    auto *st = new State;
    const char *noData = std::getenv("ATTNC_FAKE_CUDA_NO_DATA");
    st->noData = noData && std::string(noData) == "1";
    const char *noPools = std::getenv("ATTNC_FAKE_CUDA_NO_POOLS");
    st->noPools = noPools && std::string(noPools) == "1";
    const char *env = std::getenv("ATTNC_FAKE_CUDA_DEVICES");
    std::string list = env && *env ? env : "9.0,8.0";
    size_t at = 0;
    while (at < list.size() && st->devices.size() < 64) {
      size_t end = list.find(',', at);
      if (end == std::string::npos)
        end = list.size();
      const std::string cc = list.substr(at, end - at);
      st->devices.push_back({std::atoi(cc.c_str()), cc.find('.') != std::string::npos
                                                        ? std::atoi(cc.c_str() + cc.find('.') + 1)
                                                        : 0});
      at = end + 1;
    }
    return st;
  }();
  return *s;
}

thread_local std::vector<int> current; ///< the context stack: device indices

/// The allocation holding [p, p + bytes), or null.
const Allocation *find(State &s, uintptr_t p, size_t bytes) {
  auto it = s.memory.upper_bound(p);
  if (it == s.memory.begin())
    return nullptr;
  --it;
  if (p < it->first || p + bytes > it->first + it->second.bytes)
    return nullptr;
  return &it->second;
}

CUresult allocate(unsigned long long *ptr, size_t bytes) {
  State &s = state();
  if (!ptr)
    return kInvalidValue;
  if (current.empty())
    return kInvalidContext;
  void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p)
    return kOutOfMemory;
  s.memory[reinterpret_cast<uintptr_t>(p)] = {bytes, current.back()};
  *ptr = reinterpret_cast<uintptr_t>(p);
  return kOk;
}

CUresult release(unsigned long long ptr) {
  State &s = state();
  auto it = s.memory.find(static_cast<uintptr_t>(ptr));
  if (it == s.memory.end())
    return kInvalidValue;
  s.memory.erase(it);
  std::free(reinterpret_cast<void *>(static_cast<uintptr_t>(ptr)));
  return kOk;
}

bool knownStream(State &s, void *stream) { return !stream || s.streams.count(stream) != 0; }

/// Whether a capture forbids this call (and invalidates it): `sync` a call
/// that synchronises or allocates outside stream order, `stream` the
/// stream it works on (a legacy default stream's work is forbidden too).
bool forbidden(State &s, bool sync, void *stream = nullptr, bool onStream = false) {
  if (!s.capturing || (!sync && onStream && stream))
    return false;
  s.invalidated = true;
  return true;
}

/// The checks of work queued on `stream`: a stream of the fake's, and not
/// what a capture forbids.
CUresult queueOn(State &s, void *stream) {
  if (!knownStream(s, stream))
    return kInvalidHandle;
  return forbidden(s, false, stream, true) ? kCaptureUnsupported : kOk;
}

/// Bytes of the parameters a kernel of attnc's takes, by its name.
std::vector<size_t> parameterSizes(const std::string &name) {
  using namespace attnc::rt::cuda;
  if (name.rfind("attnc_fwd", 0) == 0)
    return {sizeof(FwdArgs)};
  if (name.rfind("attnc_bwd", 0) == 0)
    return {sizeof(BwdArgs)};
  if (name == "attnc_copy")
    return {sizeof(View), sizeof(View), sizeof(int32_t)};
  if (name == "attnc_delta")
    return {sizeof(View), sizeof(View), sizeof(float *)};
  if (name == "attnc_sink_grad")
    return {sizeof(View), sizeof(float *), sizeof(float *), sizeof(float *)};
  return {};
}

/// Whether `name` is a symbol in the fatbin `image`: the whole of a
/// NUL-terminated string there (an ELF string table's entry, or a section
/// name's tail after a '.').
bool inImage(const std::string &image, const std::string &name) {
  const std::string key = name + '\0';
  for (size_t at = image.find(key); at != std::string::npos; at = image.find(key, at + 1)) {
    const char before = at ? image[at - 1] : '\0';
    if (!std::isalnum(static_cast<unsigned char>(before)) && before != '_')
      return true;
  }
  return false;
}

} // namespace

/// Adds the time of a driver function to counts.nanoseconds.
class Timed {
public:
  explicit Timed(State &s) : s_(s), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    s_.counts.nanoseconds +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
  }

private:
  State &s_;
  std::chrono::steady_clock::time_point start_;
};

#define FAKE_LOCK                                                                                                 \
  State &s = state();                                                                                             \
  std::lock_guard<std::mutex> lock(s.mutex);                                                                      \
  Timed timed(s)

extern "C" {

// --- The driver API -----------------------------------------------------------

CUresult cuInit(unsigned flags) { return flags == 0 ? kOk : kInvalidValue; }

CUresult cuDeviceGetCount(int *count) {
  FAKE_LOCK;
  *count = static_cast<int>(s.devices.size());
  return kOk;
}

CUresult cuDeviceGet(int *device, int ordinal) {
  FAKE_LOCK;
  if (ordinal < 0 || ordinal >= static_cast<int>(s.devices.size()))
    return kInvalidDevice;
  *device = ordinal;
  return kOk;
}

CUresult cuDeviceGetName(char *name, int len, int device) {
  FAKE_LOCK;
  if (device < 0 || device >= static_cast<int>(s.devices.size()) || len <= 0)
    return kInvalidValue;
  const std::string text = "attnc fake GPU " + std::to_string(s.devices[device].major) + "." +
                           std::to_string(s.devices[device].minor);
  std::strncpy(name, text.c_str(), static_cast<size_t>(len) - 1);
  name[len - 1] = 0;
  return kOk;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
  FAKE_LOCK;
  if (device < 0 || device >= static_cast<int>(s.devices.size()))
    return kInvalidDevice;
  if (attribute == 75)
    *value = s.devices[device].major;
  else if (attribute == 76)
    *value = s.devices[device].minor;
  else if (attribute == 97)
    *value = s.devices[device].smemOptIn();
  else
    return kInvalidValue;
  return kOk;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int device) {
  FAKE_LOCK;
  if (device < 0 || device >= static_cast<int>(s.devices.size()))
    return kInvalidDevice;
  *ctx = &s.contexts[device];
  return kOk;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
  FAKE_LOCK;
  const auto index = static_cast<int *>(ctx) - s.contexts;
  if (index < 0 || index >= static_cast<long>(s.devices.size()))
    return kInvalidContext;
  current.push_back(static_cast<int>(index));
  return kOk;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
  FAKE_LOCK;
  if (current.empty())
    return kInvalidContext;
  if (ctx)
    *ctx = &s.contexts[current.back()];
  current.pop_back();
  return kOk;
}

CUresult cuModuleLoadData(void **module, const void *image) {
  FAKE_LOCK;
  if (forbidden(s, true))
    return kCaptureUnsupported;
  if (current.empty())
    return kInvalidContext;
  // A fatbin starts with its magic number (what nvcc -fatbin writes).
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof magic);
  if (magic != 0xBA55ED50u)
    return kInvalidImage;
  // Its header: magic, version (16 bits), header size (16 bits), then the
  // size of what follows (64 bits).
  uint16_t headerSize = 0;
  uint64_t fatSize = 0;
  std::memcpy(&headerSize, static_cast<const char *>(image) + 6, sizeof headerSize);
  std::memcpy(&fatSize, static_cast<const char *>(image) + 8, sizeof fatSize);
  s.image.assign(static_cast<const char *>(image), headerSize + fatSize);
  ++s.counts.moduleLoads;
  *module = &s.names; // one module: any kernel name resolves
  return kOk;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
  FAKE_LOCK;
  if (module != &s.names || !name)
    return kInvalidHandle;
  if (parameterSizes(name).empty() || !inImage(s.image, name))
    return kNotFound;
  *function = const_cast<std::string *>(&*s.names.insert(name).first);
  return kOk;
}

CUresult cuFuncSetAttribute(void *function, int attribute, int value) {
  FAKE_LOCK;
  if (current.empty())
    return kInvalidContext;
  if (attribute == 8) { // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: up to the device's opt-in limit
    if (value < 0 || value > s.devices[current.back()].smemOptIn())
      return kInvalidValue;
    s.maxSmem[{current.back(), static_cast<const std::string *>(function)}] = value;
  }
  return kOk;
}

CUresult cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *stream, void **params, void **extra) {
  FAKE_LOCK;
  if (current.empty())
    return kInvalidContext;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  const auto *name = static_cast<const std::string *>(function);
  if (!s.names.count(*name) || extra || !params)
    return kInvalidValue;
  // The real driver's limits: grid x < 2^31, y and z < 2^16, 1024 threads, and
  // dynamic shared memory above 48 KB only up to what the kernel opted into.
  if (gx == 0 || gy == 0 || gz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535 || bx * by * bz == 0 ||
      bx * by * bz > 1024)
    return kInvalidValue;
  const auto opt = s.maxSmem.find({current.back(), name});
  if (smem > 48 * 1024 && (opt == s.maxSmem.end() || smem > static_cast<unsigned>(opt->second)))
    return kInvalidValue;
  attnc_fake_launch l{};
  std::strncpy(l.name, name->c_str(), sizeof l.name - 1);
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.smem = smem;
  l.stream = stream;
  for (size_t i = 0, at = 0; const size_t bytes : parameterSizes(*name)) {
    std::memcpy(l.args + at, params[i++], bytes);
    at += bytes;
    l.argBytes = at;
  }
  s.launches.push_back(l);
  ++s.counts.launches;
  return kOk;
}

CUresult cuMemAlloc_v2(unsigned long long *ptr, size_t bytes) {
  FAKE_LOCK;
  if (forbidden(s, true))
    return kCaptureUnsupported;
  ++s.counts.allocs;
  return allocate(ptr, bytes);
}

CUresult cuMemFree_v2(unsigned long long ptr) {
  FAKE_LOCK;
  if (forbidden(s, true))
    return kCaptureUnsupported;
  ++s.counts.frees;
  return release(ptr);
}

CUresult cuMemAllocAsync(unsigned long long *ptr, size_t bytes, void *stream) {
  FAKE_LOCK;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  ++s.counts.asyncAllocs;
  return allocate(ptr, bytes);
}

CUresult cuMemPoolCreate(void **pool, const attnc::rt::cuda::CUmemPoolProps *props) {
  FAKE_LOCK;
  if (s.noPools)
    return 801; // CUDA_ERROR_NOT_SUPPORTED (a driver or device without memory pools)
  if (!pool || !props || props->allocType != 1 || props->locationType != 1 || props->locationId < 0 ||
      props->locationId >= static_cast<int>(s.devices.size()))
    return kInvalidValue;
  s.pools.push_back(new State::Pool{props->locationId});
  *pool = s.pools.back();
  return kOk;
}

CUresult cuMemPoolSetAttribute(void *pool, int attribute, void *value) {
  FAKE_LOCK;
  auto *p = static_cast<State::Pool *>(pool);
  if (std::find(s.pools.begin(), s.pools.end(), p) == s.pools.end() || !value)
    return kInvalidHandle;
  if (attribute == 4) // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    p->threshold = *static_cast<unsigned long long *>(value);
  return kOk;
}

CUresult cuMemAllocFromPoolAsync(unsigned long long *ptr, size_t bytes, void *pool, void *stream) {
  FAKE_LOCK;
  auto *p = static_cast<State::Pool *>(pool);
  if (std::find(s.pools.begin(), s.pools.end(), p) == s.pools.end())
    return kInvalidHandle;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  ++s.counts.poolAllocs;
  current.push_back(p->device); // (the pool's device, whatever context is current)
  const CUresult r = allocate(ptr, bytes);
  current.pop_back();
  return r;
}

CUresult cuMemFreeAsync(unsigned long long ptr, void *stream) {
  FAKE_LOCK;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  ++s.counts.asyncFrees;
  auto it = s.memory.find(static_cast<uintptr_t>(ptr));
  if (it == s.memory.end())
    return kInvalidValue;
  s.retired.insert(*it);
  s.retiredOrder.push_back(it->first);
  s.memory.erase(it);
  if (s.retiredOrder.size() > 256) {
    std::free(reinterpret_cast<void *>(s.retiredOrder.front()));
    s.retired.erase(s.retiredOrder.front());
    s.retiredOrder.erase(s.retiredOrder.begin());
  }
  return kOk;
}

CUresult cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
  FAKE_LOCK;
  if (forbidden(s, true))
    return kCaptureUnsupported;
  if (current.empty())
    return kInvalidContext;
  if (!find(s, static_cast<uintptr_t>(dst), bytes))
    return kInvalidValue;
  ++s.counts.copiesToDevice;
  std::memcpy(reinterpret_cast<void *>(static_cast<uintptr_t>(dst)), src, bytes);
  return kOk;
}

CUresult cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream) {
  FAKE_LOCK;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  if (!find(s, static_cast<uintptr_t>(dst), bytes))
    return kInvalidValue;
  ++s.counts.copiesToDevice;
  std::memcpy(reinterpret_cast<void *>(static_cast<uintptr_t>(dst)), src, bytes);
  return kOk;
}

CUresult cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
  FAKE_LOCK;
  if (forbidden(s, true))
    return kCaptureUnsupported;
  if (!find(s, static_cast<uintptr_t>(src), bytes))
    return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void *>(static_cast<uintptr_t>(src)), bytes);
  ++s.counts.copiesToHost;
  return kOk;
}

CUresult cuMemsetD8Async(unsigned long long dst, unsigned char value, size_t count, void *stream) {
  FAKE_LOCK;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  if (!find(s, static_cast<uintptr_t>(dst), count))
    return kInvalidValue;
  ++s.counts.memsets;
  if (!s.noData)
    std::memset(reinterpret_cast<void *>(static_cast<uintptr_t>(dst)), value, count);
  return kOk;
}

CUresult cuMemsetD32Async(unsigned long long dst, unsigned value, size_t count, void *stream) {
  FAKE_LOCK;
  if (const CUresult r = queueOn(s, stream); r != kOk)
    return r;
  if (dst % 4 != 0 || !find(s, static_cast<uintptr_t>(dst), count * 4))
    return kInvalidValue;
  ++s.counts.memsets;
  auto *p = reinterpret_cast<uint32_t *>(static_cast<uintptr_t>(dst));
  for (size_t i = 0; i < count && !s.noData; ++i)
    p[i] = value;
  return kOk;
}

CUresult cuStreamQuery(void *stream) {
  FAKE_LOCK;
  if (s.capturing && (stream == s.capturing || !stream)) {
    s.invalidated = true;
    return kCaptureUnsupported;
  }
  return knownStream(s, stream) ? kOk : kInvalidHandle;
}

/// A synchronisation: forbidden in a capture (as the real driver's; it ends it).
CUresult cuStreamSynchronize(void *stream) {
  FAKE_LOCK;
  if (!knownStream(s, stream))
    return kInvalidHandle;
  if (forbidden(s, true, stream, true))
    return kCaptureUnsupported;
  ++s.counts.syncs;
  return kOk;
}

CUresult cuStreamGetCtx(void *stream, void **ctx) {
  FAKE_LOCK;
  if (!stream) {
    if (current.empty())
      return kInvalidContext;
    *ctx = &s.contexts[current.back()];
    return kOk;
  }
  const auto it = s.streams.find(stream);
  if (it == s.streams.end())
    return kInvalidHandle;
  *ctx = &s.contexts[it->second];
  return kOk;
}

CUresult cuPointerGetAttribute(void *data, int attribute, unsigned long long ptr) {
  FAKE_LOCK;
  ++s.counts.pointerQueries;
  const Allocation *a = find(s, static_cast<uintptr_t>(ptr), 1);
  if (!a)
    return kInvalidValue; // not memory the driver knows (as for a plain host pointer)
  if (attribute == 2)
    *static_cast<unsigned *>(data) = 2; // CU_MEMORYTYPE_DEVICE
  else if (attribute == 9)
    *static_cast<int *>(data) = a->device;
  else
    return kInvalidValue;
  return kOk;
}

CUresult cuGetErrorString(CUresult r, const char **text) {
  switch (r) {
  case kOk: *text = "no error"; break;
  case kInvalidValue: *text = "invalid argument"; break;
  case kOutOfMemory: *text = "out of memory"; break;
  case kInvalidDevice: *text = "invalid device ordinal"; break;
  case kInvalidImage: *text = "device kernel image is invalid"; break;
  case kInvalidContext: *text = "invalid device context"; break;
  case kInvalidHandle: *text = "invalid resource handle"; break;
  case kNotFound: *text = "named symbol not found"; break;
  case kCaptureUnsupported: *text = "operation not permitted when stream is capturing"; break;
  default: *text = nullptr; return kInvalidValue;
  }
  return kOk;
}

CUresult cuEventCreate(void **event, unsigned) {
  FAKE_LOCK;
  *event = std::malloc(1);
  s.events.insert(*event);
  return kOk;
}

CUresult cuEventRecord(void *event, void *stream) {
  FAKE_LOCK;
  return s.events.count(event) && knownStream(s, stream) ? kOk : kInvalidHandle;
}

CUresult cuEventSynchronize(void *event) {
  FAKE_LOCK;
  return s.events.count(event) ? kOk : kInvalidHandle;
}

CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
  FAKE_LOCK;
  if (!s.events.count(start) || !s.events.count(end))
    return kInvalidHandle;
  *ms = 0; // nothing ran
  return kOk;
}

CUresult cuEventDestroy_v2(void *event) {
  FAKE_LOCK;
  if (!s.events.erase(event))
    return kInvalidHandle;
  std::free(event);
  return kOk;
}

// --- The tests' side ----------------------------------------------------------

void attnc_fake_cuda_reset(void) {
  FAKE_LOCK;
  s.launches.clear();
  s.counts = {};
  for (uintptr_t p : s.retiredOrder)
    std::free(reinterpret_cast<void *>(p));
  s.retired.clear();
  s.retiredOrder.clear();
}

attnc_fake_counts attnc_fake_cuda_counts(void) {
  FAKE_LOCK;
  return s.counts;
}

int attnc_fake_cuda_launch_count(void) {
  FAKE_LOCK;
  return static_cast<int>(s.launches.size());
}

const attnc_fake_launch *attnc_fake_cuda_launch(int i) {
  FAKE_LOCK;
  return i >= 0 && i < static_cast<int>(s.launches.size()) ? &s.launches[static_cast<size_t>(i)] : nullptr;
}

void *attnc_fake_cuda_stream(int device) {
  FAKE_LOCK;
  static char streams[64];
  if (device < 0 || device >= static_cast<int>(s.devices.size()))
    return nullptr;
  s.streams[&streams[device]] = device;
  return &streams[device];
}

int attnc_fake_cuda_capture(void *stream, int on) {
  FAKE_LOCK;
  if (on) {
    s.capturing = stream;
    s.invalidated = false;
    return 1;
  }
  s.capturing = nullptr;
  return s.invalidated ? 0 : 1;
}

void *attnc_fake_cuda_alloc(int device, size_t bytes) {
  FAKE_LOCK;
  current.push_back(device);
  unsigned long long p = 0;
  const CUresult r = allocate(&p, bytes);
  current.pop_back();
  return r == kOk ? reinterpret_cast<void *>(static_cast<uintptr_t>(p)) : nullptr;
}

void attnc_fake_cuda_free(void *ptr) {
  FAKE_LOCK;
  release(reinterpret_cast<uintptr_t>(ptr));
}

int attnc_fake_cuda_is_device(const void *ptr, size_t bytes) {
  FAKE_LOCK;
  return find(s, reinterpret_cast<uintptr_t>(ptr), bytes) != nullptr;
}

int attnc_fake_cuda_was_device(const void *ptr, size_t bytes) {
  FAKE_LOCK;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (find(s, p, bytes))
    return 1;
  auto it = s.retired.upper_bound(p);
  if (it == s.retired.begin())
    return 0;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second.bytes;
}

int attnc_fake_cuda_pools(int device) {
  FAKE_LOCK;
  return static_cast<int>(std::count_if(s.pools.begin(), s.pools.end(), [&](auto *p) { return p->device == device; }));
}

unsigned long long attnc_fake_cuda_pool_threshold(int device) {
  FAKE_LOCK;
  for (auto it = s.pools.rbegin(); it != s.pools.rend(); ++it)
    if ((*it)->device == device)
      return (*it)->threshold;
  return 0;
}


} // extern "C"
