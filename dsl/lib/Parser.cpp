//===- Parser.cpp - Recursive-descent parser for .attn files --------------===//
//
// One token of lookahead; every production returns nullptr after reporting an
// error, and statements resynchronise at the next statement keyword or '}'.
//
//===----------------------------------------------------------------------===//
#include "attnc/dsl/Parser.h"

#include "attnc/dsl/Lexer.h"

#include <algorithm>

namespace attnc::dsl {
namespace {

class Parser {
public:
  Parser(const SourceManager &sources, uint32_t buffer, DiagnosticEngine &diags)
      : tokens_(lex(sources, buffer, diags)), diags_(diags) {
    module_.buffer = buffer;
  }

  Module run() {
    while (!at(TokenKind::Eof)) {
      if (at(TokenKind::KwPattern)) {
        parsePattern();
        continue;
      }
      if (!at(TokenKind::Error))
        diags_.error(tok().range, std::string("expected 'pattern', found ") + describe(tok()));
      // Skip to the next 'pattern'.
      while (!at(TokenKind::Eof) && !at(TokenKind::KwPattern))
        advance();
    }
    return std::move(module_);
  }

private:
  const Token &tok() const { return tokens_[pos_]; }
  bool at(TokenKind kind) const { return tok().kind == kind; }
  /// The token after the current one (Eof at the end).
  const Token &peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  static bool isKeyword(TokenKind k) {
    return k >= TokenKind::KwPattern && k <= TokenKind::KwFalse; // the Kw* block of TokenKind
  }
  const Token &advance() {
    const Token &t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size())
      ++pos_;
    return t;
  }
  SourceRange prevRange() const { return tokens_[pos_ == 0 ? 0 : pos_ - 1].range; }

  static std::string describe(const Token &t) {
    if (t.kind == TokenKind::Identifier)
      return "identifier '" + t.text + "'";
    if (t.kind == TokenKind::Integer)
      return "integer " + std::to_string(t.value);
    return tokenKindName(t.kind);
  }

  /// Reports "expected X, found Y" unless the current token is already a lexer
  /// error (which has its own diagnostic).
  void expected(const std::string &what) {
    if (!at(TokenKind::Error))
      diags_.error(tok().range, "expected " + what + ", found " + describe(tok()));
  }

  bool expect(TokenKind kind, const std::string &context) {
    if (at(kind)) {
      advance();
      return true;
    }
    expected(std::string(tokenKindName(kind)) + context);
    return false;
  }

  static bool isStatementStart(TokenKind k) {
    switch (k) {
    case TokenKind::KwParam:
    case TokenKind::KwRequire:
    case TokenKind::KwCausal:
    case TokenKind::KwHeads:
    case TokenKind::KwLet:
    case TokenKind::KwAttend:
    case TokenKind::KwHead:
    case TokenKind::RBrace:
    case TokenKind::KwPattern:
    case TokenKind::Eof:
      return true;
    default:
      return false;
    }
  }

  /// Skips the rest of a failed statement that began at token `start`: up to
  /// the next statement keyword (or the pattern's '}') outside every brace
  /// the statement opened, so that a set literal's '}' does not end the
  /// pattern and the next statement is parsed normally.
  void synchronize(size_t start) {
    int depth = 0;
    for (size_t k = start; k < pos_; ++k) {
      if (tokens_[k].kind == TokenKind::LBrace)
        ++depth;
      else if (tokens_[k].kind == TokenKind::RBrace && depth > 0)
        --depth;
    }
    bool first = pos_ == start;
    while (!at(TokenKind::Eof)) {
      if (!first && depth == 0 && isStatementStart(tok().kind) && !at(TokenKind::RBrace))
        return;
      first = false;
      if (at(TokenKind::LBrace))
        ++depth;
      if (at(TokenKind::RBrace)) {
        // A '}' right before the end of the file or the next pattern closes
        // the pattern, whatever the failed statement left open.
        TokenKind next = tokens_[std::min(pos_ + 1, tokens_.size() - 1)].kind;
        if (depth == 0 || next == TokenKind::Eof || next == TokenKind::KwPattern)
          return;
        --depth;
      }
      advance();
    }
  }

  void parsePattern() {
    SourceRange start = advance().range; // 'pattern'
    PatternDecl decl;
    // A keyword is a fine pattern name ('pattern causal { ... }'); a string
    // or a number is not, whatever its text.
    if (!at(TokenKind::Identifier) && !isKeyword(tok().kind)) {
      expected("a pattern name after 'pattern'");
      // A bad name right before the '{' ('pattern 3 { ... }') takes the
      // name's place: skip it and parse the body, to report what else is
      // wrong. Without a '{' there is no body to find; skip to the next
      // 'pattern'.
      if (!at(TokenKind::LBrace) && peek().kind == TokenKind::LBrace)
        advance();
      if (!at(TokenKind::LBrace)) {
        while (!at(TokenKind::Eof) && !at(TokenKind::KwPattern))
          advance();
        return;
      }
      advance();
    } else {
      decl.name = tok().text;
      decl.nameRange = advance().range;
      // A missing '{' is reported, then the body is parsed as if it were there.
      expect(TokenKind::LBrace, " after the pattern name");
    }
    while (!at(TokenKind::RBrace) && !at(TokenKind::Eof) && !at(TokenKind::KwPattern)) {
      if (at(TokenKind::Semicolon)) {
        advance();
        continue;
      }
      size_t before = pos_;
      if (!parseStatement(decl.body)) {
        synchronize(before);
        if (pos_ == before)
          advance();
      }
    }
    if (!at(TokenKind::RBrace)) {
      diags_.error(tok().range, decl.name.empty() ? std::string("expected '}' to end the pattern")
                                                  : "expected '}' to end pattern '" + decl.name + "'");
      diags_.note(start, "pattern started here");
    } else {
      advance();
    }
    decl.range = SourceRange::merge(start, prevRange());
    module_.patterns.push_back(std::move(decl));
  }

  bool parseStatement(std::vector<Stmt> &body) {
    Stmt stmt;
    SourceRange start = tok().range;
    switch (tok().kind) {
    case TokenKind::KwParam:
    case TokenKind::KwLet: {
      bool isParam = at(TokenKind::KwParam);
      const char *kw = isParam ? "param" : "let";
      advance();
      stmt.kind = isParam ? StmtKind::Param : StmtKind::Let;
      if (!at(TokenKind::Identifier)) {
        expected(std::string("a name after '") + kw + "'");
        return false;
      }
      stmt.name = tok().text;
      stmt.nameRange = advance().range;
      if (!expect(TokenKind::Assign, std::string(" after '") + kw + " " + stmt.name + "'"))
        return false;
      stmt.value = parseExpr();
      if (!stmt.value)
        return false;
      break;
    }
    case TokenKind::KwRequire:
      advance();
      stmt.kind = StmtKind::Require;
      stmt.value = parseExpr();
      if (!stmt.value)
        return false;
      if (at(TokenKind::Colon)) {
        advance();
        if (!at(TokenKind::String)) {
          expected("a message string after ':'");
          return false;
        }
        stmt.message = advance().text;
      }
      break;
    case TokenKind::KwCausal:
      advance();
      stmt.kind = StmtKind::Causal;
      break;
    case TokenKind::KwHeads:
      advance();
      stmt.kind = StmtKind::Heads;
      stmt.value = parseExpr();
      if (!stmt.value)
        return false;
      break;
    case TokenKind::KwAttend:
      advance();
      stmt.kind = StmtKind::Attend;
      stmt.value = parseExpr();
      if (!stmt.value)
        return false;
      break;
    case TokenKind::KwHead:
      advance();
      stmt.kind = StmtKind::HeadAttends;
      stmt.head = parseAdditive();
      if (!stmt.head)
        return false;
      if (!expect(TokenKind::KwAttends, " after the head index"))
        return false;
      stmt.value = parseExpr();
      if (!stmt.value)
        return false;
      break;
    default:
      expected("a statement ('param', 'require', 'causal', 'heads', 'let', 'attend' or "
               "'head')");
      return false;
    }
    stmt.range = SourceRange::merge(start, prevRange());
    body.push_back(std::move(stmt));
    return true;
  }

  ExprPtr makeExpr(ExprKind kind, SourceRange range) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->range = range;
    return e;
  }

  ExprPtr makeBinary(BinaryOp op, ExprPtr lhs, ExprPtr rhs) {
    auto e = makeExpr(ExprKind::Binary, SourceRange::merge(lhs->outerRange(), rhs->outerRange()));
    e->binaryOp = op;
    e->operands.push_back(std::move(lhs));
    e->operands.push_back(std::move(rhs));
    return e;
  }

  ExprPtr parseExpr() { return parseOr(); }

  template <typename Next>
  ExprPtr parseLeftAssoc(Next next, std::initializer_list<std::pair<TokenKind, BinaryOp>> ops) {
    ExprPtr lhs = (this->*next)();
    if (!lhs)
      return nullptr;
    for (;;) {
      const std::pair<TokenKind, BinaryOp> *match = nullptr;
      for (const auto &op : ops)
        if (at(op.first))
          match = &op;
      if (!match)
        return lhs;
      advance();
      ExprPtr rhs = (this->*next)();
      if (!rhs)
        return nullptr;
      lhs = makeBinary(match->second, std::move(lhs), std::move(rhs));
    }
  }

  ExprPtr parseOr() {
    return parseLeftAssoc(&Parser::parseAnd, {{TokenKind::PipePipe, BinaryOp::Or}});
  }
  ExprPtr parseAnd() {
    return parseLeftAssoc(&Parser::parseCompare, {{TokenKind::AmpAmp, BinaryOp::And}});
  }

  static bool compareOp(TokenKind k, CompareOp &op) {
    switch (k) {
    case TokenKind::EqEq: op = CompareOp::Eq; return true;
    case TokenKind::NotEq: op = CompareOp::Ne; return true;
    case TokenKind::Less: op = CompareOp::Lt; return true;
    case TokenKind::LessEq: op = CompareOp::Le; return true;
    case TokenKind::Greater: op = CompareOp::Gt; return true;
    case TokenKind::GreaterEq: op = CompareOp::Ge; return true;
    default: return false;
    }
  }

  ExprPtr parseCompare() {
    ExprPtr lhs = parseUnion();
    if (!lhs)
      return nullptr;
    if (at(TokenKind::KwIn)) {
      advance();
      ExprPtr rhs = parseUnion();
      if (!rhs)
        return nullptr;
      auto e = makeExpr(ExprKind::In, SourceRange::merge(lhs->outerRange(), rhs->outerRange()));
      e->operands.push_back(std::move(lhs));
      e->operands.push_back(std::move(rhs));
      return e;
    }
    CompareOp op;
    if (!compareOp(tok().kind, op))
      return lhs;
    auto e = makeExpr(ExprKind::Compare, lhs->outerRange());
    e->operands.push_back(std::move(lhs));
    while (compareOp(tok().kind, op)) {
      advance();
      ExprPtr rhs = parseUnion();
      if (!rhs)
        return nullptr;
      e->range = SourceRange::merge(e->range, rhs->outerRange());
      e->compareOps.push_back(op);
      e->operands.push_back(std::move(rhs));
    }
    return e;
  }

  ExprPtr parseUnion() {
    return parseLeftAssoc(&Parser::parseIntersect, {{TokenKind::Pipe, BinaryOp::Union}});
  }
  ExprPtr parseIntersect() {
    return parseLeftAssoc(&Parser::parseAdditive, {{TokenKind::Amp, BinaryOp::Intersect}});
  }
  ExprPtr parseAdditive() {
    return parseLeftAssoc(&Parser::parseMultiplicative,
                          {{TokenKind::Plus, BinaryOp::Add}, {TokenKind::Minus, BinaryOp::Sub}});
  }
  ExprPtr parseMultiplicative() {
    return parseLeftAssoc(&Parser::parseUnary, {{TokenKind::Star, BinaryOp::Mul},
                                                {TokenKind::Slash, BinaryOp::Div},
                                                {TokenKind::Percent, BinaryOp::Mod}});
  }

  ExprPtr parseUnary() {
    if (at(TokenKind::Minus) || at(TokenKind::Bang)) {
      SourceRange start = tok().range;
      UnaryOp op = at(TokenKind::Minus) ? UnaryOp::Neg : UnaryOp::Not;
      advance();
      ExprPtr operand = parseUnary();
      if (!operand)
        return nullptr;
      auto e = makeExpr(ExprKind::Unary, SourceRange::merge(start, operand->outerRange()));
      e->unaryOp = op;
      e->operands.push_back(std::move(operand));
      return e;
    }
    return parsePrimary();
  }

  ExprPtr parsePrimary() {
    const Token &t = tok();
    switch (t.kind) {
    case TokenKind::Integer: {
      auto e = makeExpr(ExprKind::Int, t.range);
      e->intValue = t.value;
      advance();
      return e;
    }
    case TokenKind::KwTrue:
    case TokenKind::KwFalse: {
      auto e = makeExpr(ExprKind::Bool, t.range);
      e->boolValue = t.kind == TokenKind::KwTrue;
      advance();
      return e;
    }
    case TokenKind::Identifier: {
      std::string name = t.text;
      SourceRange nameRange = advance().range;
      if (!at(TokenKind::LParen)) {
        auto e = makeExpr(ExprKind::Name, nameRange);
        e->name = std::move(name);
        return e;
      }
      advance();
      auto e = makeExpr(ExprKind::Call, nameRange);
      e->name = std::move(name);
      e->nameRange = nameRange;
      if (!at(TokenKind::RParen)) {
        for (;;) {
          ExprPtr arg = parseExpr();
          if (!arg)
            return nullptr;
          e->operands.push_back(std::move(arg));
          if (!at(TokenKind::Comma))
            break;
          advance();
        }
      }
      if (!expect(TokenKind::RParen, " to close the call to '" + e->name + "'"))
        return nullptr;
      e->range = SourceRange::merge(nameRange, prevRange());
      return e;
    }
    case TokenKind::LParen: {
      SourceRange open = advance().range;
      ExprPtr inner = parseExpr();
      if (!inner)
        return nullptr;
      if (!expect(TokenKind::RParen, " to close '('"))
        return nullptr;
      // The inner expression keeps its own range; the parentheses are
      // recorded for the nodes built around it. For '((a))' the outer pair
      // wins.
      inner->parenRange = SourceRange::merge(open, prevRange());
      return inner;
    }
    case TokenKind::LBrace:
      return parseSetLiteral();
    default:
      expected("an expression");
      return nullptr;
    }
  }

  ExprPtr parseSetLiteral() {
    SourceRange start = advance().range; // '{'
    // { j : predicate }
    if (at(TokenKind::Identifier) && pos_ + 1 < tokens_.size() &&
        tokens_[pos_ + 1].kind == TokenKind::Colon) {
      auto e = makeExpr(ExprKind::SetBuilder, start);
      e->name = tok().text;
      e->nameRange = advance().range;
      advance(); // ':'
      ExprPtr pred = parseExpr();
      if (!pred)
        return nullptr;
      e->operands.push_back(std::move(pred));
      if (!expect(TokenKind::RBrace, " to close the set"))
        return nullptr;
      e->range = SourceRange::merge(start, prevRange());
      return e;
    }
    if (at(TokenKind::RBrace)) {
      auto e = makeExpr(ExprKind::SetList, SourceRange::merge(start, advance().range));
      return e;
    }
    ExprPtr first = parseExpr();
    if (!first)
      return nullptr;
    if (at(TokenKind::DotDot)) {
      advance();
      ExprPtr last = parseExpr();
      if (!last)
        return nullptr;
      if (!expect(TokenKind::RBrace, " to close the range"))
        return nullptr;
      auto e = makeExpr(ExprKind::SetRange, SourceRange::merge(start, prevRange()));
      e->operands.push_back(std::move(first));
      e->operands.push_back(std::move(last));
      return e;
    }
    auto e = makeExpr(ExprKind::SetList, start);
    e->operands.push_back(std::move(first));
    while (at(TokenKind::Comma)) {
      advance();
      ExprPtr next = parseExpr();
      if (!next)
        return nullptr;
      e->operands.push_back(std::move(next));
    }
    if (!expect(TokenKind::RBrace, " to close the set"))
      return nullptr;
    e->range = SourceRange::merge(start, prevRange());
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  DiagnosticEngine &diags_;
  Module module_;
};

} // namespace

Module parse(const SourceManager &sources, uint32_t buffer, DiagnosticEngine &diags) {
  return Parser(sources, buffer, diags).run();
}

} // namespace attnc::dsl
