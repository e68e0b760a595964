//===- Font.h - The bitmap font of the PNG pictures -----------------------===//
//
// PNG has no text, so the pictures carry their own letters: a 5x7 font
// (printable ASCII and the few symbols the legends use) drawn by
// tools/attnc/Picture.cpp at an integer scale.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnc::tool {

/// A glyph is kGlyphWidth pixels wide and kGlyphRows tall: capitals and
/// digits fill rows 0-6 (row 6 is the baseline), descenders rows 7-8.
constexpr int kGlyphWidth = 5;
constexpr int kGlyphRows = 9;
constexpr int kGlyphCapHeight = 7;
/// From one glyph's left edge to the next one's, a column of space included.
constexpr int kGlyphAdvance = 6;

/// One row per entry, top first; bit 4 is the leftmost pixel.
using Glyph = std::array<uint8_t, kGlyphRows>;

/// The glyph of code point `c`: printable ASCII, U+2192 (→), U+2193 (↓) and
/// U+2026 (…); an empty box for anything else.
const Glyph &glyphOf(char32_t c);

/// The code points of UTF-8 text; a malformed byte becomes U+FFFD.
std::u32string decodeUtf8(std::string_view text);

} // namespace attnc::tool
