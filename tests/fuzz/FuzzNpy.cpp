//===- FuzzNpy.cpp - The .npy reader on arbitrary bytes -------------------===//
//
// tools/attnc/Npy.cpp's parseNpy, which `attnc run --q FILE` and the tests
// read arrays with. A file it accepts must re-encode to one it accepts with
// the same shape and payload. parseNpyFloats (float inputs) on the same
// bytes: what it accepts is as long as its shape and finite.
//
//===----------------------------------------------------------------------===//
#include "Npy.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  attnc::tool::NpyArray array;
  std::string error;
  // The float inputs' reader ('<f4' or '<f8'): what it accepts holds as many finite floats as the
  // shape says.
  if (attnc::tool::parseNpyFloats(bytes, array, error)) {
    size_t count = 1;
    for (int64_t dim : array.shape)
      count *= static_cast<size_t>(dim);
    if (count != array.data.size())
      std::abort();
    for (float value : array.data)
      if (!std::isfinite(value))
        std::abort();
  }
  if (!attnc::tool::parseNpy(bytes, array, error))
    return 0;
  attnc::tool::NpyArray again;
  if (!attnc::tool::parseNpy(attnc::tool::encodeNpy(array), again, error) ||
      again.shape != array.shape || again.data.size() != array.data.size() ||
      (!array.data.empty() && std::memcmp(again.data.data(), array.data.data(),
                                          array.data.size() * sizeof(float)) != 0))
    std::abort(); // a round trip that changes the array
  return 0;
}
