//===- FuzzNpy.cpp - The .npy reader on arbitrary bytes -------------------===//
//
// tools/attnc/Npy.cpp's parseNpy, which `attnc run --q FILE` and the tests
// read arrays with. A file it accepts must re-encode to one it accepts with
// the same shape and payload.
//
//===----------------------------------------------------------------------===//
#include "Npy.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string bytes(reinterpret_cast<const char *>(data), size);
  attnc::tool::NpyArray array;
  std::string error;
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
