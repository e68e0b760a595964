//===- Link.h - Object file to shared object with in-process lld ----------===//
#pragma once

#include <string>

namespace attnc::codegen {

/// Links one ELF object (bytes) into a shared object (bytes) with lld as a
/// library; libm is a dependency (expf and its vector forms). Serialised:
/// lld is not re-entrant.
bool linkSharedObject(const std::string &object, std::string &sharedObject, std::string &error);

} // namespace attnc::codegen
