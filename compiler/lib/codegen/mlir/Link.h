//===- Link.h - Object file to shared object with in-process lld ----------===//
#pragma once

#include <string>
#include <vector>

namespace attnc::codegen {

/// Links one ELF object (bytes) into a shared object (bytes) with lld as a
/// library; libm is a dependency (expf and its vector forms). Serialised:
/// lld is not re-entrant.
bool linkSharedObject(const std::string &object, std::string &sharedObject, std::string &error);
/// The same for several objects, linked into one shared object.
bool linkSharedObject(const std::vector<std::string> &objects, std::string &sharedObject,
                      std::string &error);

} // namespace attnc::codegen
