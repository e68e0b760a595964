//===- Lexer.cpp - Tokens of the pattern language -------------------------===//
#include "attnc/dsl/Lexer.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>

namespace attnc::dsl {

const char *tokenKindName(TokenKind kind) {
  switch (kind) {
  case TokenKind::Eof: return "end of file";
  case TokenKind::Error: return "invalid token";
  case TokenKind::Identifier: return "identifier";
  case TokenKind::Integer: return "integer";
  case TokenKind::Float: return "float";
  case TokenKind::String: return "string";
  case TokenKind::KwPattern: return "'pattern'";
  case TokenKind::KwParam: return "'param'";
  case TokenKind::KwRequire: return "'require'";
  case TokenKind::KwCausal: return "'causal'";
  case TokenKind::KwLet: return "'let'";
  case TokenKind::KwAttend: return "'attend'";
  case TokenKind::KwAttends: return "'attends'";
  case TokenKind::KwHead: return "'head'";
  case TokenKind::KwHeads: return "'heads'";
  case TokenKind::KwIn: return "'in'";
  case TokenKind::KwInput: return "'input'";
  case TokenKind::KwElse: return "'else'";
  case TokenKind::KwTrue: return "'true'";
  case TokenKind::KwFalse: return "'false'";
  case TokenKind::LBrace: return "'{'";
  case TokenKind::RBrace: return "'}'";
  case TokenKind::LParen: return "'('";
  case TokenKind::RParen: return "')'";
  case TokenKind::Comma: return "','";
  case TokenKind::Colon: return "':'";
  case TokenKind::Semicolon: return "';'";
  case TokenKind::DotDot: return "'..'";
  case TokenKind::Assign: return "'='";
  case TokenKind::EqEq: return "'=='";
  case TokenKind::NotEq: return "'!='";
  case TokenKind::Less: return "'<'";
  case TokenKind::LessEq: return "'<='";
  case TokenKind::Greater: return "'>'";
  case TokenKind::GreaterEq: return "'>='";
  case TokenKind::Plus: return "'+'";
  case TokenKind::Minus: return "'-'";
  case TokenKind::Star: return "'*'";
  case TokenKind::Slash: return "'/'";
  case TokenKind::Percent: return "'%'";
  case TokenKind::AmpAmp: return "'&&'";
  case TokenKind::PipePipe: return "'||'";
  case TokenKind::Amp: return "'&'";
  case TokenKind::Pipe: return "'|'";
  case TokenKind::Bang: return "'!'";
  case TokenKind::LBracket: return "'['";
  case TokenKind::RBracket: return "']'";
  case TokenKind::Caret: return "'^'";
  }
  return "token";
}

namespace {

class Lexer {
public:
  Lexer(const SourceManager &sources, uint32_t buffer, DiagnosticEngine &diags)
      : text_(sources.text(buffer)), buffer_(buffer), diags_(diags) {}

  std::vector<Token> run() {
    std::vector<Token> tokens;
    for (;;) {
      skipSpaceAndComments();
      Token tok = next();
      tokens.push_back(tok);
      if (tok.kind == TokenKind::Eof)
        return tokens;
    }
  }

private:
  SourceRange range(size_t b, size_t e) const {
    return {{buffer_, static_cast<uint32_t>(b)}, {buffer_, static_cast<uint32_t>(e)}};
  }

  void skipSpaceAndComments() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n')
          ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++pos_;
      } else {
        return;
      }
    }
  }

  Token make(TokenKind kind, size_t begin) {
    Token t;
    t.kind = kind;
    t.range = range(begin, pos_);
    return t;
  }

  Token next() {
    size_t begin = pos_;
    if (pos_ >= text_.size())
      return make(TokenKind::Eof, begin);
    char c = text_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_')
      return identifier();
    if (std::isdigit(static_cast<unsigned char>(c)))
      return integer();
    if (c == '"')
      return string();
    auto two = [&](char second) {
      return pos_ + 1 < text_.size() && text_[pos_ + 1] == second;
    };
    auto take = [&](TokenKind kind, size_t len) {
      pos_ += len;
      return make(kind, begin);
    };
    switch (c) {
    case '{': return take(TokenKind::LBrace, 1);
    case '}': return take(TokenKind::RBrace, 1);
    case '(': return take(TokenKind::LParen, 1);
    case ')': return take(TokenKind::RParen, 1);
    case ',': return take(TokenKind::Comma, 1);
    case ':': return take(TokenKind::Colon, 1);
    case ';': return take(TokenKind::Semicolon, 1);
    case '+': return take(TokenKind::Plus, 1);
    case '-': return take(TokenKind::Minus, 1);
    case '*': return take(TokenKind::Star, 1);
    case '/': return take(TokenKind::Slash, 1);
    case '%': return take(TokenKind::Percent, 1);
    case '[': return take(TokenKind::LBracket, 1);
    case ']': return take(TokenKind::RBracket, 1);
    case '^': return take(TokenKind::Caret, 1);
    case '.':
      if (two('.'))
        return take(TokenKind::DotDot, 2);
      break;
    case '=':
      return two('=') ? take(TokenKind::EqEq, 2) : take(TokenKind::Assign, 1);
    case '!':
      return two('=') ? take(TokenKind::NotEq, 2) : take(TokenKind::Bang, 1);
    case '<':
      return two('=') ? take(TokenKind::LessEq, 2) : take(TokenKind::Less, 1);
    case '>':
      return two('=') ? take(TokenKind::GreaterEq, 2) : take(TokenKind::Greater, 1);
    case '&':
      return two('&') ? take(TokenKind::AmpAmp, 2) : take(TokenKind::Amp, 1);
    case '|':
      return two('|') ? take(TokenKind::PipePipe, 2) : take(TokenKind::Pipe, 1);
    default:
      break;
    }
    // One UTF-8 sequence is one bad character.
    ++pos_;
    while (pos_ < text_.size() && (static_cast<unsigned char>(text_[pos_]) & 0xC0) == 0x80)
      ++pos_;
    std::string spelled(text_.substr(begin, pos_ - begin));
    diags_.error(range(begin, pos_), "unexpected character '" + spelled + "'");
    noteAsciiSpelling(spelled, begin);
    return make(TokenKind::Error, begin);
  }

  /// After a stray character: what to write instead, where it is clear.
  void noteAsciiSpelling(const std::string &spelled, size_t begin) {
    // A third dot after '..' (Swift's and Ruby's ranges).
    if (spelled == "." && begin >= 2 && text_.substr(begin - 2, 2) == "..") {
      diags_.note(range(begin - 2, pos_),
                  "a range is written with two dots, '{ a .. b }', and includes both ends", "..");
      return;
    }
    // '.5': a float needs a digit before its point.
    if (spelled == "." && digitAt(pos_)) {
      size_t end = pos_;
      while (digitAt(end))
        ++end;
      std::string written(text_.substr(begin, end - begin));
      diags_.note(range(begin, end), "write '0" + written + "'", "0" + written);
      return;
    }
    static const std::pair<std::string_view, const char *> kMath[] = {
        {"≤", "<="}, {"≥", ">="}, {"≠", "!="}, {"∈", "in"}};
    for (const auto &[math, ascii] : kMath)
      if (spelled == math)
        diags_.note(range(begin, pos_), std::string("use '") + ascii + "'", ascii);
  }

  Token identifier() {
    size_t begin = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    static const std::unordered_map<std::string_view, TokenKind> keywords = {
        {"pattern", TokenKind::KwPattern}, {"param", TokenKind::KwParam},
        {"require", TokenKind::KwRequire}, {"causal", TokenKind::KwCausal},
        {"let", TokenKind::KwLet},         {"attend", TokenKind::KwAttend},
        {"attends", TokenKind::KwAttends}, {"head", TokenKind::KwHead},
        {"heads", TokenKind::KwHeads},     {"in", TokenKind::KwIn},
        {"input", TokenKind::KwInput},     {"else", TokenKind::KwElse},
        {"true", TokenKind::KwTrue},       {"false", TokenKind::KwFalse},
    };
    std::string_view word = text_.substr(begin, pos_ - begin);
    auto it = keywords.find(word);
    Token t = make(it == keywords.end() ? TokenKind::Identifier : it->second, begin);
    t.text = std::string(word);
    return t;
  }

  Token integer() {
    size_t begin = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
    // Digit separators ('_') are allowed for readability: 65_536.
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    if (Token f; floatTail(begin, f))
      return f;
    if (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_]))))  {
      while (pos_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
      diags_.error(range(begin, pos_), "invalid integer literal '" +
                                           std::string(text_.substr(begin, pos_ - begin)) + "'");
      return make(TokenKind::Error, begin);
    }
    Token t = make(TokenKind::Integer, begin);
    int64_t value = 0;
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    for (size_t k = begin; k < pos_; ++k) {
      if (text_[k] == '_')
        continue;
      int digit = text_[k] - '0';
      if (value > (kMax - digit) / 10) {
        diags_.error(t.range, "integer literal '" + std::string(text_.substr(begin, pos_ - begin)) +
                                  "' does not fit in 64 bits");
        t.kind = TokenKind::Error;
        return t;
      }
      value = value * 10 + digit;
    }
    t.value = value;
    return t;
  }

  bool digitAt(size_t k) const {
    return k < text_.size() && std::isdigit(static_cast<unsigned char>(text_[k]));
  }

  /// After the digits of a number at `begin`: a fraction ('.' and a digit;
  /// '..' is a range) and / or an exponent ('e' or 'E', a sign, digits) make
  /// it a float, returned in `out`.
  bool floatTail(size_t begin, Token &out) {
    size_t end = pos_;
    bool isFloat = false;
    if (end + 1 < text_.size() && text_[end] == '.' && digitAt(end + 1)) {
      end += 1;
      while (digitAt(end))
        ++end;
      isFloat = true;
    }
    if (end < text_.size() && (text_[end] == 'e' || text_[end] == 'E')) {
      size_t k = end + 1;
      if (k < text_.size() && (text_[k] == '+' || text_[k] == '-'))
        ++k;
      if (digitAt(k)) {
        while (digitAt(k))
          ++k;
        end = k;
        isFloat = true;
      }
    }
    if (!isFloat)
      return false;
    pos_ = end;
    if (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.')) {
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '.'))
        ++pos_;
      diags_.error(range(begin, pos_), "invalid number literal '" +
                                           std::string(text_.substr(begin, pos_ - begin)) + "'");
      out = make(TokenKind::Error, begin);
      return true;
    }
    std::string digits;
    for (char c : text_.substr(begin, pos_ - begin))
      if (c != '_')
        digits += c;
    out = make(TokenKind::Float, begin);
    out.floatValue = std::strtod(digits.c_str(), nullptr);
    if (std::isinf(out.floatValue)) {
      diags_.error(out.range, "float literal '" + std::string(text_.substr(begin, pos_ - begin)) +
                                  "' is too large for a double");
      out.kind = TokenKind::Error;
    }
    return true;
  }

  Token string() {
    size_t begin = pos_++;
    std::string value;
    while (pos_ < text_.size() && text_[pos_] != '"' && text_[pos_] != '\n') {
      if (text_[pos_] == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] != '\n') {
        char e = text_[pos_ + 1];
        value += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        pos_ += 2;
        continue;
      }
      value += text_[pos_++];
    }
    if (pos_ >= text_.size() || text_[pos_] != '"') {
      diags_.error(range(begin, begin + 1), "unterminated string literal");
      return make(TokenKind::Error, begin);
    }
    ++pos_;
    Token t = make(TokenKind::String, begin);
    t.text = std::move(value);
    return t;
  }

  std::string_view text_;
  uint32_t buffer_;
  DiagnosticEngine &diags_;
  size_t pos_ = 0;
};

} // namespace

std::vector<Token> lex(const SourceManager &sources, uint32_t buffer,
                       DiagnosticEngine &diags) {
  return Lexer(sources, buffer, diags).run();
}

} // namespace attnc::dsl
