//===- Json.h - Writing JSON text -----------------------------------------===//
#pragma once

#include <string>

namespace attnc::support {

/// `s` as a JSON string literal, quotes included (", \ and control
/// characters escaped; other bytes as they are, so UTF-8 passes through).
std::string jsonString(const std::string &s);

} // namespace attnc::support
