//===- Lexer.h - Tokens of the pattern language ---------------------------===//
//
// Turns a buffer into tokens. `#` starts a comment that runs to the end of the
// line; newlines are not significant. A malformed token (a stray character, an
// unterminated string, an integer that does not fit in 64 bits) is reported
// and returned as Token::Error so that the parser can recover; a stray
// character with a likely ASCII spelling ('≤', '...') gets a note saying it.
// A number with a fraction or an exponent ('0.5', '1e-3') is a Float token
// (scores only); '1..5' stays an integer, a range and an integer.
// '[' and ']' index an input (`b[j]`) and give its dimensions
// (`input b : int[n]`); elsewhere, as '^' everywhere, they are lexed only so
// that the parser can say what to write instead ('{ a .. b }', a product).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/dsl/Diagnostics.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::dsl {

enum class TokenKind {
  Eof,
  Error,
  Identifier,
  Integer,
  Float,
  String,
  // Keywords.
  KwPattern,
  KwParam,
  KwRequire,
  KwCausal,
  KwLet,
  KwAttend,
  KwAttends,
  KwHead,
  KwHeads,
  KwIn,
  KwInput,
  KwElse,
  KwTrue,
  KwFalse,
  // Punctuation.
  LBrace,
  RBrace,
  LParen,
  RParen,
  Comma,
  Colon,
  Semicolon,
  DotDot,
  Assign,
  EqEq,
  NotEq,
  Less,
  LessEq,
  Greater,
  GreaterEq,
  Plus,
  Minus,
  Star,
  Slash,
  Percent,
  AmpAmp,
  PipePipe,
  Amp,
  Pipe,
  Bang,
  LBracket,
  RBracket,
  // Not in the grammar; lexed for the parser's hints.
  Caret,
};

/// The spelling used in diagnostics, e.g. "'{'" or "identifier".
const char *tokenKindName(TokenKind kind);

struct Token {
  TokenKind kind = TokenKind::Eof;
  SourceRange range;
  std::string text;  ///< Identifier name or string contents (unescaped).
  int64_t value = 0; ///< Value of an Integer token.
  double floatValue = 0; ///< Value of a Float token ('0.5', '1e-3', '2.5E+4').
};

/// Lexes the whole buffer; the result always ends with an Eof token.
std::vector<Token> lex(const SourceManager &sources, uint32_t buffer,
                       DiagnosticEngine &diags);

} // namespace attnc::dsl
