//===- Internal.h - Runtime hooks for attnc's own libraries ---------------===//
//
// Not part of the public ABI: used by libattnc_jit so that its failures are
// reported through the same attnc_last_error() as the runtime's.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/attnc.h"

#ifdef __cplusplus
extern "C" {
#endif

ATTNC_API void attnc_internal_set_last_error(const char *message);

#ifdef __cplusplus
}
#endif
