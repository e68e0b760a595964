//===- Parser.cpp - Recursive-descent parser for .attn files --------------===//
//
// One token of lookahead; every production returns nullptr after reporting an
// error, and statements resynchronise at the next statement keyword or '}'.
//
// Nesting is bounded two ways (Parser.h): parseUnary, which every cycle of the
// grammar's call graph but 'else' passes through, counts the levels open on
// the way down and refuses the one past the limit before recursing ('else'
// counts its right operand the same way); each node, once
// built, gets its Expr::nesting from its operands, which catches the depth
// that left-associative chains build without recursing.
//
// Where a mistake has a likely cause, the error gets a note saying what to
// write instead, with a fix-it: operators spelled as words ('and', 'or', 'not',
// 'mod', 'div'), '=' for '==', '//' for floor division or a comment, '**' and
// '^' for a power, '[a, b]' for a range, and '|' / '&' between comparisons,
// which bind tighter than them. Each hint sits where the input is already an
// error, so nothing that parsed before changes. Whether 'and' means '&&' or '&'
// is guessed from the shape of its operands (a comparison, a set literal, a
// let's value) and else from the construct around it (a set-builder's body is
// a condition, 'attend' takes a set).
//
//===----------------------------------------------------------------------===//
#include "attnc/dsl/Parser.h"

#include "attnc/dsl/Lexer.h"

#include <algorithm>
#include <unordered_map>

namespace attnc::dsl {
namespace {

class Parser {
public:
  Parser(const SourceManager &sources, uint32_t buffer, DiagnosticEngine &diags)
      : tokens_(lex(sources, buffer, diags)), sources_(sources), diags_(diags) {
    module_.buffer = buffer;
  }

  Module run() {
    while (!at(TokenKind::Eof)) {
      if (at(TokenKind::KwPattern)) {
        parsePattern();
        continue;
      }
      if (atDoubleSlash()) {
        reportSlashComment();
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
    if (t.kind == TokenKind::Float)
      return "float";
    return tokenKindName(t.kind);
  }

  /// What an expression is, as far as its syntax and the names defined so far
  /// tell; only the hints use it (types are Sema's).
  enum class Shape { Unknown, Integer, Condition, Set };

  /// Sets what the construct being parsed expects of its expression, for the
  /// lifetime of the scope.
  class ContextScope {
  public:
    ContextScope(Parser &parser, Shape context) : parser_(parser), saved_(parser.context_) {
      parser.context_ = context;
    }
    ~ContextScope() { parser_.context_ = saved_; }
    ContextScope(const ContextScope &) = delete;
    ContextScope &operator=(const ContextScope &) = delete;

  private:
    Parser &parser_;
    Shape saved_;
  };

  /// One level of the parser's recursion, for the lifetime of the scope.
  class DepthScope {
  public:
    explicit DepthScope(Parser &parser) : parser_(parser) { ++parser.depth_; }
    ~DepthScope() { --parser_.depth_; }
    DepthScope(const DepthScope &) = delete;
    DepthScope &operator=(const DepthScope &) = delete;

  private:
    Parser &parser_;
  };

  void reportNesting(unsigned levels, SourceRange at) {
    diags_.error(at, "expressions nest " + std::to_string(levels) + " levels deep; the limit is " +
                         std::to_string(kMaxExprNesting));
  }

  /// Sets `e.nesting` to `extra` levels above its deepest operand (one for a
  /// node, the operator count for a comparison chain) and reports, at `at`,
  /// an expression that passes the limit.
  bool setNesting(Expr &e, SourceRange at, unsigned extra = 1) {
    unsigned deepest = 0;
    for (const ExprPtr &c : e.operands)
      deepest = std::max(deepest, c->nesting);
    e.nesting = deepest + extra;
    if (e.nesting <= kMaxExprNesting)
      return true;
    reportNesting(e.nesting, at);
    return false;
  }

  ExprPtr parseExprIn(Shape context) {
    ContextScope scope(*this, context);
    return parseExpr();
  }

  Shape nameShape(const std::string &name) const {
    if (name == "i" || name == "j" || name == "h" || name == "n")
      return Shape::Integer;
    auto it = nameShapes_.find(name);
    return it == nameShapes_.end() ? Shape::Unknown : it->second;
  }

  /// An input indexed `count` times: a row of a 2-D input is a set, an
  /// entry an integer.
  Shape indexShape(const std::string &name, size_t count) const {
    auto it = inputRanks_.find(name);
    if (it == inputRanks_.end())
      return count >= 2 ? Shape::Integer : Shape::Unknown;
    return it->second == 2 && count == 1 ? Shape::Set : Shape::Integer;
  }

  Shape shapeOf(const Expr &e) const {
    switch (e.kind) {
    case ExprKind::Int:
    case ExprKind::Float: return Shape::Integer;
    case ExprKind::Bool:
    case ExprKind::Compare:
    case ExprKind::In: return Shape::Condition;
    case ExprKind::Name: return nameShape(e.name);
    case ExprKind::Index: return indexShape(e.name, e.operands.size());
    case ExprKind::Unary: return e.unaryOp == UnaryOp::Not ? Shape::Condition : Shape::Integer;
    case ExprKind::Binary:
      switch (e.binaryOp) {
      case BinaryOp::And:
      case BinaryOp::Or: return Shape::Condition;
      case BinaryOp::Union:
      case BinaryOp::Intersect:
      case BinaryOp::Else: return Shape::Set;
      case BinaryOp::Sub: {
        // Integer subtraction or set difference, as its operands say.
        Shape a = shapeOf(*e.operands[0]), b = shapeOf(*e.operands[1]);
        return a == Shape::Set || b == Shape::Set           ? Shape::Set
               : a == Shape::Integer || b == Shape::Integer ? Shape::Integer
                                                            : Shape::Unknown;
      }
      default: return Shape::Integer;
      }
    case ExprKind::Call:
      return e.name == "random_blocks"                               ? Shape::Set
             : e.name == "abs" || e.name == "min" || e.name == "max" ? Shape::Integer
                                                                     : Shape::Unknown;
    case ExprKind::SetBuilder:
    case ExprKind::SetRange:
    case ExprKind::SetList: return Shape::Set;
    }
    return Shape::Unknown;
  }

  /// The shape of the operand that token `k` starts, from that token alone.
  Shape tokenShape(size_t k) const {
    const Token &t = tokens_[std::min(k, tokens_.size() - 1)];
    switch (t.kind) {
    case TokenKind::Integer:
    case TokenKind::Float: return Shape::Integer;
    case TokenKind::LBrace: return Shape::Set;
    case TokenKind::KwTrue:
    case TokenKind::KwFalse:
    case TokenKind::Bang: return Shape::Condition;
    case TokenKind::Identifier:
      // A call's shape is its callee's; a name's what it was defined as.
      if (tokens_[std::min(k + 1, tokens_.size() - 1)].kind == TokenKind::LParen)
        return t.text == "random_blocks" ? Shape::Set : Shape::Integer;
      if (tokens_[std::min(k + 1, tokens_.size() - 1)].kind == TokenKind::LBracket)
        return indexShape(t.text, 1); // (at least one index; a row unless it has two)
      return nameShape(t.text);
    default: return Shape::Unknown;
    }
  }

  std::string text(SourceRange range) const { return std::string(sources_.slice(range)); }

  /// Two tokens written with nothing between them ('**', '//').
  bool adjacent(const Token &a, const Token &b) const {
    return a.range.end.buffer == b.range.begin.buffer && a.range.end.offset == b.range.begin.offset;
  }
  bool atDoubleSlash() const {
    return at(TokenKind::Slash) && peek().kind == TokenKind::Slash && adjacent(tok(), peek());
  }
  bool sameLine(const Token &a, const Token &b) const {
    std::string_view t = sources_.text(a.range.begin.buffer);
    size_t from = std::min<size_t>(a.range.end.offset, t.size());
    size_t to = std::min<size_t>(b.range.begin.offset, t.size());
    return from > to || t.substr(from, to - from).find('\n') == std::string_view::npos;
  }

  /// Skips the tokens on the rest of the current token's line.
  void skipRestOfLine() {
    const Token &first = tok();
    while (!at(TokenKind::Eof) && sameLine(first, tok()))
      advance();
  }

  /// '//' where a statement or a pattern should start: a C++ comment.
  void reportSlashComment() {
    SourceRange slashes = SourceRange::merge(tok().range, peek().range);
    diags_.error(slashes, "'//' does not start a comment");
    diags_.note(slashes, "comments start with '#'", "#");
    skipRestOfLine();
  }

  /// '//' after an operand: floor division ('j // l'), or a comment after an
  /// expression when what follows on its line reads as prose: nothing, a word
  /// that cannot start an operand, two words in a row, a stray character.
  bool doubleSlashIsComment() const {
    const Token &slash = tok();
    auto onLine = [&](size_t k) {
      return k < tokens_.size() && tokens_[k].kind != TokenKind::Eof && sameLine(slash, tokens_[k]);
    };
    auto isWord = [&](size_t k) {
      return tokens_[k].kind == TokenKind::Identifier || isKeyword(tokens_[k].kind);
    };
    size_t k = pos_ + 2;
    if (!onLine(k) || isKeyword(tokens_[k].kind) ||
        (tokens_[k].kind != TokenKind::Identifier && tokens_[k].kind != TokenKind::Integer &&
         tokens_[k].kind != TokenKind::LParen))
      return true;
    for (bool previousWord = false; onLine(k); ++k) {
      if (tokens_[k].kind == TokenKind::Error || (isWord(k) && previousWord))
        return true;
      previousWord = isWord(k);
    }
    return false;
  }

  static bool isWordOperator(const std::string &word) {
    return word == "and" || word == "or" || word == "not" || word == "mod" || word == "div";
  }

  /// The operand a trailing 'x not in S' tests: the last operand of the last
  /// comparison of `e`.
  static const Expr &lastComparand(const Expr &e) {
    const Expr *x = &e;
    while (!x->parenRange.isValid() &&
           ((x->kind == ExprKind::Binary &&
             (x->binaryOp == BinaryOp::And || x->binaryOp == BinaryOp::Or)) ||
            x->kind == ExprKind::Compare))
      x = x->operands.back().get();
    return *x;
  }

  /// An operator spelled as a word ('and', 'or', 'not', 'mod', 'div') right
  /// after the complete expression `left`: reports it with what to write.
  void reportWordOperator(const Expr &left) {
    const std::string word = tok().text;
    const SourceRange wordRange = tok().range;
    if (word == "mod" || word == "div") {
      diags_.error(wordRange, "unknown operator '" + word + "'");
      if (word == "mod")
        diags_.note(wordRange, "use '%', the non-negative modulo", "%");
      else
        diags_.note(wordRange, "use '/', which is floor division", "/");
      return;
    }
    if (word == "not") {
      advance();
      if (!at(TokenKind::KwIn)) {
        diags_.error(wordRange, "unknown operator 'not'");
        diags_.note(wordRange,
                    "use '!' to negate a condition; the keys that are not in a set S are "
                    "'{ j : true } - S'");
        return;
      }
      // Python's 'x not in S'.
      SourceRange notIn = SourceRange::merge(wordRange, advance().range);
      diags_.error(notIn, "unknown operator 'not in'");
      ExprPtr set = parseUnion();
      const Expr &x = lastComparand(left);
      if (set)
        diags_.note(SourceRange::merge(x.outerRange(), set->outerRange()),
                    "use '!(x in S)' to test that x is not in S",
                    "!(" + text(x.outerRange()) + " in " + text(set->outerRange()) + ")");
      return;
    }
    // 'and' / 'or': '&&' / '||' between conditions, '&' / '|' between sets.
    const bool isAnd = word == "and";
    const bool andNot = isAnd && peek().kind == TokenKind::Identifier && peek().text == "not";
    Shape l = shapeOf(left), r = tokenShape(pos_ + (andNot ? 2 : 1));
    Shape between = Shape::Unknown;
    if (r == Shape::Set && (l == Shape::Set || left.kind == ExprKind::In))
      between = Shape::Set; // 'j in A or B' is 'j in A | B'
    else if (l == Shape::Condition || r == Shape::Condition)
      between = Shape::Condition;
    else if (l == Shape::Set || r == Shape::Set)
      between = Shape::Set;
    else if (context_ == Shape::Condition || context_ == Shape::Set)
      between = context_;
    diags_.error(wordRange, "unknown operator '" + word + "'");
    if (between == Shape::Set && andNot)
      diags_.note(SourceRange::merge(wordRange, peek().range),
                  "use '-' for the keys of one set that are not in the other", "-");
    else if (between == Shape::Set)
      diags_.note(wordRange,
                  isAnd ? "use '&' for the keys in both sets"
                        : "use '|' for the keys in either set",
                  isAnd ? "&" : "|");
    else if (between == Shape::Condition)
      diags_.note(wordRange,
                  isAnd ? "use '&&' to require both conditions"
                        : "use '||' to accept either condition",
                  isAnd ? "&&" : "||");
    else
      diags_.note(wordRange, isAnd ? "use '&&' between conditions and '&' between sets"
                                   : "use '||' between conditions and '|' between sets");
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

  /// `score` and `sink` are statement words where a statement starts, and
  /// plain names everywhere else (a let may be called 'score').
  static bool isScoreWord(const Token &t) {
    return t.kind == TokenKind::Identifier && (t.text == "score" || t.text == "sink");
  }
  static bool isStatementStart(const Token &t) { return isScoreWord(t) || isStatementStart(t.kind); }
  static bool isStatementStart(TokenKind k) {
    switch (k) {
    case TokenKind::KwParam:
    case TokenKind::KwRequire:
    case TokenKind::KwCausal:
    case TokenKind::KwHeads:
    case TokenKind::KwLet:
    case TokenKind::KwAttend:
    case TokenKind::KwHead:
    case TokenKind::KwInput:
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
      if (!first && depth == 0 && isStatementStart(tok()) && !at(TokenKind::RBrace))
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
    nameShapes_.clear();
    inputRanks_.clear();
    while (!at(TokenKind::RBrace) && !at(TokenKind::Eof) && !at(TokenKind::KwPattern)) {
      if (at(TokenKind::Semicolon)) {
        advance();
        continue;
      }
      if (atDoubleSlash()) {
        reportSlashComment();
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
      stmt.value = parseExprIn(isParam ? Shape::Integer : Shape::Unknown);
      if (!stmt.value)
        return false;
      nameShapes_[stmt.name] = isParam ? Shape::Integer : shapeOf(*stmt.value);
      break;
    }
    case TokenKind::KwRequire:
      advance();
      stmt.kind = StmtKind::Require;
      stmt.value = parseExprIn(Shape::Condition);
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
      stmt.value = parseExprIn(Shape::Integer);
      if (!stmt.value)
        return false;
      break;
    case TokenKind::KwAttend:
      advance();
      stmt.kind = StmtKind::Attend;
      stmt.value = parseExprIn(Shape::Set);
      if (!stmt.value)
        return false;
      break;
    case TokenKind::KwHead:
      advance();
      stmt.kind = StmtKind::HeadAttends;
      {
        ContextScope scope(*this, Shape::Integer);
        stmt.head = parseAdditive();
      }
      if (!stmt.head)
        return false;
      if (!expect(TokenKind::KwAttends, " after the head index"))
        return false;
      stmt.value = parseExprIn(Shape::Set);
      if (!stmt.value)
        return false;
      break;
    case TokenKind::KwInput:
      if (!parseInput(stmt))
        return false;
      break;
    case TokenKind::Identifier:
      if (isScoreWord(tok())) {
        stmt.kind = tok().text == "score" ? StmtKind::Score : StmtKind::Sink;
        advance();
        stmt.value = parseExprIn(Shape::Integer);
        if (!stmt.value)
          return false;
        break;
      }
      [[fallthrough]];
    default:
      expected("a statement ('param', 'require', 'causal', 'heads', 'let', 'attend', 'head', "
               "'input', 'score' or 'sink')");
      return false;
    }
    stmt.range = SourceRange::merge(start, prevRange());
    body.push_back(std::move(stmt));
    return true;
  }

  /// `input NAME : TYPE [DIM, ...]`. Any word is read as the element type
  /// when it is 'int' or 'float' (Sema refuses 'float' with its reason); the
  /// dimensions are integer expressions, as many as written.
  bool parseInput(Stmt &stmt) {
    advance(); // 'input'
    stmt.kind = StmtKind::Input;
    if (!at(TokenKind::Identifier)) {
      expected("a name after 'input'");
      return false;
    }
    stmt.name = tok().text;
    stmt.nameRange = advance().range;
    if (!expect(TokenKind::Colon, " after 'input " + stmt.name + "'"))
      return false;
    if (!at(TokenKind::Identifier) || (tok().text != "int" && tok().text != "float")) {
      expected("the element type 'int' or 'float' after 'input " + stmt.name + " :'");
      return false;
    }
    stmt.elementType = tok().text;
    stmt.typeRange = advance().range;
    if (!expect(TokenKind::LBracket, " after '" + stmt.elementType + "' (the dimensions, as in '" +
                                         stmt.elementType + "[n]')"))
      return false;
    for (;;) {
      // 'heads' (a keyword) is the call's head count here.
      inDims_ = true;
      ExprPtr dim = parseExprIn(Shape::Integer);
      inDims_ = false;
      if (!dim)
        return false;
      stmt.dims.push_back(std::move(dim));
      if (!at(TokenKind::Comma))
        break;
      advance();
    }
    if (!expect(TokenKind::RBracket, " to close the dimensions of input '" + stmt.name + "'"))
      return false;
    inputRanks_[stmt.name] = stmt.dims.size();
    nameShapes_.erase(stmt.name);
    return true;
  }

  ExprPtr makeExpr(ExprKind kind, SourceRange range) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->range = range;
    return e;
  }

  ExprPtr makeBinary(BinaryOp op, SourceRange opRange, ExprPtr lhs, ExprPtr rhs) {
    auto e = makeExpr(ExprKind::Binary, SourceRange::merge(lhs->outerRange(), rhs->outerRange()));
    e->binaryOp = op;
    e->opRange = opRange;
    e->operands.push_back(std::move(lhs));
    e->operands.push_back(std::move(rhs));
    if (!setNesting(*e, opRange))
      return nullptr;
    return e;
  }

  /// `expr`: `or`, then an optional 'else' and another `expr` (so that
  /// 'else' is the loosest operator and groups to the right). Recursing on
  /// the right passes through parseUnary, which bounds the depth.
  ExprPtr parseExpr() {
    ExprPtr e = parseOr();
    // Nothing valid puts a name right after a complete expression.
    if (e && at(TokenKind::Identifier) && isWordOperator(tok().text)) {
      reportWordOperator(*e);
      return nullptr;
    }
    if (!e || !at(TokenKind::KwElse))
      return e;
    SourceRange opRange = advance().range;
    ExprPtr rhs;
    {
      DepthScope scope(*this);
      if (depth_ > kMaxExprNesting) {
        reportNesting(depth_, tok().range);
        return nullptr;
      }
      rhs = parseExpr();
    }
    if (!rhs)
      return nullptr;
    return makeBinary(BinaryOp::Else, opRange, std::move(e), std::move(rhs));
  }

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
      SourceRange opRange = advance().range;
      ExprPtr rhs = (this->*next)();
      if (!rhs)
        return nullptr;
      lhs = makeBinary(match->second, opRange, std::move(lhs), std::move(rhs));
      if (!lhs)
        return nullptr;
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

  /// A comparison, or a hint for '=' written for '==' and for '|' / '&'
  /// written between comparisons (which binds tighter and joins operands).
  ExprPtr parseCompare() {
    ExprPtr e = parseComparison();
    if (!e)
      return nullptr;
    if (at(TokenKind::Assign)) {
      // No expression is ever followed by '='.
      diags_.error(tok().range, "unexpected '=' in an expression");
      diags_.note(tok().range, "use '==' to test equality", "==");
      return nullptr;
    }
    auto isSetOp = [](const Expr &x) {
      return x.kind == ExprKind::Binary && !x.parenRange.isValid() &&
             (x.binaryOp == BinaryOp::Union || x.binaryOp == BinaryOp::Intersect);
    };
    auto report = [&](const Expr &op, const std::string &bindsTighterThan,
                      const std::string &written, const std::string &reads) {
      const char *spelled = spelling(op.binaryOp);
      diags_.error(op.opRange, std::string("'") + spelled + "' binds tighter than " +
                                   bindsTighterThan + ": '" + written + "' reads '" + reads + "'");
      bool isOr = op.binaryOp == BinaryOp::Union;
      diags_.note(op.opRange,
                  isOr ? "use '||' to accept either condition"
                       : "use '&&' to require both conditions",
                  isOr ? "||" : "&&");
    };
    // 'j < i | j > 2' is 'j < (i | j) > 2': a set between two comparisons,
    // never valid.
    if (e->kind == ExprKind::Compare)
      for (size_t k = 1; k + 1 < e->operands.size(); ++k)
        if (isSetOp(*e->operands[k])) {
          std::string reads;
          for (size_t m = 0; m < e->operands.size(); ++m) {
            if (m)
              reads += std::string(" ") + spelling(e->compareOps[m - 1]) + " ";
            std::string operand = text(e->operands[m]->outerRange());
            reads += m == k ? "(" + operand + ")" : operand;
          }
          report(*e->operands[k], "comparisons", text(e->range), reads);
          return nullptr;
        }
    // 'j in A | j in B' is 'j in (A | j)' followed by 'in B'.
    if (e->kind == ExprKind::In && at(TokenKind::KwIn) && isSetOp(*e->operands[1])) {
      const Expr &x = *e->operands[0], &set = *e->operands[1];
      report(set, "'in'", text(e->range), text(x.outerRange()) + " in (" + text(set.range) + ")");
      return nullptr;
    }
    return e;
  }

  ExprPtr parseComparison() {
    ExprPtr lhs = parseUnion();
    if (!lhs)
      return nullptr;
    if (at(TokenKind::KwIn)) {
      SourceRange inRange = advance().range;
      ExprPtr rhs = parseUnion();
      if (!rhs)
        return nullptr;
      auto e = makeExpr(ExprKind::In, SourceRange::merge(lhs->outerRange(), rhs->outerRange()));
      e->operands.push_back(std::move(lhs));
      e->operands.push_back(std::move(rhs));
      if (!setNesting(*e, inRange))
        return nullptr;
      return e;
    }
    CompareOp op;
    if (!compareOp(tok().kind, op))
      return lhs;
    auto e = makeExpr(ExprKind::Compare, lhs->outerRange());
    e->operands.push_back(std::move(lhs));
    while (compareOp(tok().kind, op)) {
      SourceRange opRange = advance().range;
      ExprPtr rhs = parseUnion();
      if (!rhs)
        return nullptr;
      e->range = SourceRange::merge(e->range, rhs->outerRange());
      e->compareOps.push_back(op);
      e->operands.push_back(std::move(rhs));
      if (!setNesting(*e, opRange, static_cast<unsigned>(e->compareOps.size())))
        return nullptr;
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
  /// `mul`, with hints for '//' (floor division, or a C++ comment) and for
  /// '**' and '^' (a power).
  ExprPtr parseMultiplicative() {
    ExprPtr lhs = parseUnary();
    if (!lhs)
      return nullptr;
    const Expr *last = lhs.get(); // the operand a power would raise
    for (;;) {
      if (atDoubleSlash()) {
        if (doubleSlashIsComment()) {
          // Reported, then read as the comment it is meant to be.
          reportSlashComment();
          continue;
        }
        SourceRange slashes = SourceRange::merge(tok().range, peek().range);
        diags_.error(slashes, "unknown operator '//'");
        diags_.note(slashes, "use '/', which is already floor division", "/");
        return nullptr;
      }
      if (at(TokenKind::Caret) ||
          (at(TokenKind::Star) && peek().kind == TokenKind::Star && adjacent(tok(), peek()))) {
        reportPower(*last);
        return nullptr;
      }
      BinaryOp op;
      switch (tok().kind) {
      case TokenKind::Star: op = BinaryOp::Mul; break;
      case TokenKind::Slash: op = BinaryOp::Div; break;
      case TokenKind::Percent: op = BinaryOp::Mod; break;
      default: return lhs;
      }
      SourceRange opRange = advance().range;
      ExprPtr rhs = parseUnary();
      if (!rhs)
        return nullptr;
      last = rhs.get();
      lhs = makeBinary(op, opRange, std::move(lhs), std::move(rhs));
      if (!lhs)
        return nullptr;
    }
  }

  /// '**' or '^' after `base`: there is no power operator. A small constant
  /// exponent gets the product as a fix-it.
  void reportPower(const Expr &base) {
    SourceRange op = tok().range;
    if (at(TokenKind::Star))
      advance();
    op = SourceRange::merge(op, advance().range);
    diags_.error(op, "unknown operator '" + text(op) + "'");
    ExprPtr exponent = parseUnary();
    if (exponent && exponent->kind == ExprKind::Int && !exponent->parenRange.isValid() &&
        exponent->intValue >= 2 && exponent->intValue <= 4) {
      std::string product = text(base.outerRange());
      for (int64_t k = 1; k < exponent->intValue; ++k)
        product += " * " + text(base.outerRange());
      diags_.note(SourceRange::merge(base.outerRange(), exponent->range),
                  "there is no power operator; write the product", product);
      return;
    }
    diags_.note(op, "there is no power operator; write the product out with '*'");
  }

  /// '[a, b]' (or '[a, b)', '[a, b, c]') where an expression should start:
  /// the range or list it means, in braces.
  void reportBrackets() {
    const size_t open = pos_;
    expected("an expression");
    std::vector<std::pair<size_t, size_t>> elements; // token index ranges [first, last)
    size_t first = open + 1, close = 0;
    int depth = 0;
    for (size_t k = open + 1; k < tokens_.size() && !close; ++k) {
      TokenKind kind = tokens_[k].kind;
      if (kind == TokenKind::Eof || kind == TokenKind::Error ||
          (depth == 0 && isStatementStart(tokens_[k])))
        return;
      if (kind == TokenKind::LParen || kind == TokenKind::LBrace || kind == TokenKind::LBracket) {
        ++depth;
      } else if (depth > 0 && (kind == TokenKind::RParen || kind == TokenKind::RBrace ||
                               kind == TokenKind::RBracket)) {
        --depth;
      } else if (depth == 0 && (kind == TokenKind::Comma || kind == TokenKind::RBracket ||
                                kind == TokenKind::RParen)) {
        if (k == first)
          return; // an empty element
        elements.push_back({first, k});
        first = k + 1;
        if (kind != TokenKind::Comma)
          close = k;
      }
    }
    if (!close)
      return;
    auto elementText = [&](std::pair<size_t, size_t> e) {
      return text(SourceRange::merge(tokens_[e.first].range, tokens_[e.second - 1].range));
    };
    SourceRange whole = SourceRange::merge(tokens_[open].range, tokens_[close].range);
    if (elements.size() == 2) {
      std::string last = elementText(elements[1]);
      if (tokens_[close].kind == TokenKind::RParen) {
        // '[a, b)' leaves b out.
        const Token &b = tokens_[elements[1].first];
        last = elements[1].second - elements[1].first == 1 && b.kind == TokenKind::Integer &&
                       b.value > 0
                   ? std::to_string(b.value - 1)
                   : last + " - 1";
      }
      diags_.note(whole, "a range of keys is written '{ a .. b }' and includes both ends",
                  "{ " + elementText(elements[0]) + " .. " + last + " }");
      return;
    }
    if (tokens_[close].kind != TokenKind::RBracket)
      return;
    std::string list;
    for (const auto &e : elements)
      list += (list.empty() ? "" : ", ") + elementText(e);
    diags_.note(whole, "a list of keys is written '{ a, b, c }'", "{ " + list + " }");
  }

  /// Python's prefix 'not' where an operand should start: '!' for a
  /// condition, a difference for a set. Its operand is read as Python reads
  /// it (a comparison), to show the fix-it whole.
  void reportPrefixNot() {
    SourceRange notRange = advance().range;
    ExprPtr operand = parseCompare();
    diags_.error(notRange, "unknown operator 'not'");
    if (!operand)
      return;
    Shape shape = shapeOf(*operand);
    if (shape != Shape::Condition && shape != Shape::Set)
      shape = context_;
    SourceRange whole = SourceRange::merge(notRange, operand->outerRange());
    std::string written = text(operand->outerRange());
    bool primary = operand->parenRange.isValid() || operand->kind == ExprKind::Name ||
                   operand->kind == ExprKind::Bool || operand->kind == ExprKind::Call ||
                   operand->kind == ExprKind::SetBuilder || operand->kind == ExprKind::SetRange ||
                   operand->kind == ExprKind::SetList;
    if (shape == Shape::Condition) {
      diags_.note(whole, "use '!' to negate a condition",
                  primary ? "!" + written : "!(" + written + ")");
    } else if (shape == Shape::Set) {
      // Set difference binds tighter than '&' and '|'.
      bool loose =
          !operand->parenRange.isValid() && operand->kind == ExprKind::Binary &&
          (operand->binaryOp == BinaryOp::Union || operand->binaryOp == BinaryOp::Intersect);
      std::string complement = "{ j : true } - " + (loose ? "(" + written + ")" : written);
      diags_.note(whole, "the keys that are not in a set are every key minus the set", complement);
    } else {
      diags_.note(notRange, "use '!' to negate a condition; the keys that are not in a set S are "
                            "'{ j : true } - S'");
    }
  }

  ExprPtr parseUnary() {
    DepthScope scope(*this);
    if (depth_ > kMaxExprNesting) {
      reportNesting(depth_, tok().range);
      return nullptr;
    }
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
      if (!setNesting(*e, start))
        return nullptr;
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
    case TokenKind::Float: {
      auto e = makeExpr(ExprKind::Float, t.range);
      e->floatValue = t.floatValue;
      advance();
      return e;
    }
    case TokenKind::KwHeads:
      if (!inDims_) {
        expected("an expression");
        return nullptr;
      }
      {
        auto e = makeExpr(ExprKind::Name, t.range);
        e->name = "heads";
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
      if (t.text == "not") {
        // A name followed by the start of another operand is never valid.
        switch (peek().kind) {
        case TokenKind::Identifier:
        case TokenKind::Integer:
        case TokenKind::LBrace:
        case TokenKind::LParen:
        case TokenKind::KwTrue:
        case TokenKind::KwFalse:
        case TokenKind::Bang:
          reportPrefixNot();
          return nullptr;
        default:
          break;
        }
      }
      std::string name = t.text;
      SourceRange nameRange = advance().range;
      if (at(TokenKind::LBracket))
        return parseIndex(std::move(name), nameRange);
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
          ExprPtr arg = parseExprIn(Shape::Integer);
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
      if (!setNesting(*e, nameRange))
        return nullptr;
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
      if (++inner->nesting > kMaxExprNesting) {
        reportNesting(inner->nesting, open);
        return nullptr;
      }
      return inner;
    }
    case TokenKind::LBrace:
      return parseSetLiteral();
    case TokenKind::LBracket:
      reportBrackets();
      return nullptr;
    default:
      expected("an expression");
      return nullptr;
    }
  }

  /// `NAME[E, ...]` after the name: an input read, its indices (none is
  /// fine here; Sema counts them against the input's dimensions).
  ExprPtr parseIndex(std::string name, SourceRange nameRange) {
    advance(); // '['
    auto e = makeExpr(ExprKind::Index, nameRange);
    e->name = std::move(name);
    e->nameRange = nameRange;
    if (!at(TokenKind::RBracket)) {
      for (;;) {
        ExprPtr index = parseExprIn(Shape::Integer);
        if (!index)
          return nullptr;
        e->operands.push_back(std::move(index));
        if (!at(TokenKind::Comma))
          break;
        advance();
      }
    }
    if (!expect(TokenKind::RBracket, " to close the index of '" + e->name + "'"))
      return nullptr;
    e->range = SourceRange::merge(nameRange, prevRange());
    if (!setNesting(*e, nameRange))
      return nullptr;
    return e;
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
      ExprPtr pred = parseExprIn(Shape::Condition);
      if (!pred)
        return nullptr;
      e->operands.push_back(std::move(pred));
      if (!expect(TokenKind::RBrace, " to close the set"))
        return nullptr;
      e->range = SourceRange::merge(start, prevRange());
      if (!setNesting(*e, start))
        return nullptr;
      return e;
    }
    if (at(TokenKind::RBrace)) {
      auto e = makeExpr(ExprKind::SetList, SourceRange::merge(start, advance().range));
      return e;
    }
    ContextScope scope(*this, Shape::Integer);
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
      if (!setNesting(*e, start))
        return nullptr;
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
    if (!setNesting(*e, start))
      return nullptr;
    return e;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  /// Levels of parseUnary open now (DepthScope).
  unsigned depth_ = 0;
  const SourceManager &sources_;
  DiagnosticEngine &diags_;
  Module module_;
  /// What the construct around the expression being parsed expects of it.
  Shape context_ = Shape::Unknown;
  /// The shape of each parameter and let of the current pattern so far.
  std::unordered_map<std::string, Shape> nameShapes_;
  /// Parsing an input's dimensions, where 'heads' is a name.
  bool inDims_ = false;
  /// The rank of each input of the current pattern so far.
  std::unordered_map<std::string, size_t> inputRanks_;
};

} // namespace

Module parse(const SourceManager &sources, uint32_t buffer, DiagnosticEngine &diags) {
  return Parser(sources, buffer, diags).run();
}

} // namespace attnc::dsl
