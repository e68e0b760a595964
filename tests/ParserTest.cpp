//===- ParserTest.cpp - Tokens, syntax tree, source ranges, recovery ------===//
//
// The parser's output is checked through an independent rendering of the
// tree (`shape`, fully parenthesised prefix form) rather than through
// printAst/printExpr, which are tested on their own at the end.
//
//===----------------------------------------------------------------------===//
#include "attnc/dsl/Parser.h"
#include "attnc/dsl/AST.h"
#include "attnc/dsl/Lexer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>

namespace attnc::dsl {
namespace {

/// A buffer, its diagnostics and its parse, kept together.
struct Parsed {
  SourceManager sources;
  DiagnosticEngine diags{sources};
  uint32_t buffer = 0;
  Module module;

  std::string slice(SourceRange r) const { return std::string(sources.slice(r)); }
  std::string at(SourceRange r) const {
    auto [line, col] = sources.lineAndColumn(r.begin);
    return std::to_string(line) + ":" + std::to_string(col);
  }
};

std::unique_ptr<Parsed> parseText(const std::string &text) {
  auto p = std::make_unique<Parsed>();
  p->buffer = p->sources.addBuffer("t.attn", text);
  p->module = parse(p->sources, p->buffer, p->diags);
  return p;
}

std::string errorsOf(const Parsed &p) {
  std::ostringstream os;
  p.diags.print(os);
  return os.str();
}

/// Prefix form of an expression, written independently of printExpr.
std::string shape(const Expr &e) {
  auto kids = [&](const std::string &head) {
    std::string s = "(";
    s += head;
    for (const ExprPtr &c : e.operands) {
      s += ' ';
      s += shape(*c);
    }
    s += ')';
    return s;
  };
  switch (e.kind) {
  case ExprKind::Int: return std::to_string(e.intValue);
  case ExprKind::Float: return "f" + printExpr(e);
  case ExprKind::Bool: return e.boolValue ? "true" : "false";
  case ExprKind::Name: return e.name;
  case ExprKind::Index: return kids("index " + e.name);
  case ExprKind::Unary: return kids(e.unaryOp == UnaryOp::Neg ? "neg" : "not");
  case ExprKind::Binary: {
    static const char *kOps[] = {"+", "-", "*", "/", "%", "&&", "||", "|", "&", "else"};
    return kids(kOps[static_cast<int>(e.binaryOp)]);
  }
  case ExprKind::Compare: {
    static const char *kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    std::string s = "(cmp " + shape(*e.operands[0]);
    for (size_t k = 0; k < e.compareOps.size(); ++k)
      s += std::string(" ") + kOps[static_cast<int>(e.compareOps[k])] + " " +
           shape(*e.operands[k + 1]);
    return s + ")";
  }
  case ExprKind::In: return kids("in");
  case ExprKind::Call: return kids("call " + e.name);
  case ExprKind::SetBuilder: return kids("builder " + e.name);
  case ExprKind::SetRange: return kids("range");
  case ExprKind::SetList: return kids("list");
  }
  return "?";
}

/// Parses `attend EXPR` (any expression parses there; types are Sema's job).
std::unique_ptr<Parsed> parseExpr(const std::string &expr) {
  return parseText("pattern p { attend " + expr + " }");
}

const Expr &valueOf(const Parsed &p) { return *p.module.patterns.at(0).body.at(0).value; }

std::string shapeOf(const std::string &expr) {
  auto p = parseExpr(expr);
  if (p->diags.hasErrors() || p->module.patterns.empty() || p->module.patterns[0].body.empty())
    return "<error> " + errorsOf(*p);
  return shape(valueOf(*p));
}

// ---- Lexer -------------------------------------------------------------------

TEST(Lexer, PunctuationTakesTheLongestToken) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "{ } ( ) , : ; .. = == != ! < <= > >= + - * / % && & || |");
  std::vector<Token> tokens = lex(sm, b, diags);
  using K = TokenKind;
  std::vector<K> expected = {
      K::LBrace,  K::RBrace,    K::LParen,   K::RParen, K::Comma, K::Colon, K::Semicolon,
      K::DotDot,  K::Assign,    K::EqEq,     K::NotEq,  K::Bang,  K::Less,  K::LessEq,
      K::Greater, K::GreaterEq, K::Plus,     K::Minus,  K::Star,  K::Slash, K::Percent,
      K::AmpAmp,  K::Amp,       K::PipePipe, K::Pipe,   K::Eof};
  ASSERT_EQ(tokens.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k)
    EXPECT_EQ(tokens[k].kind, expected[k]) << "token " << k;
  EXPECT_FALSE(diags.hasErrors());
}

TEST(Lexer, KeywordsAreReservedIdentifiersAreNot) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "pattern param require causal let attend attends head heads in "
                                 "true false patterns _x h2");
  std::vector<Token> t = lex(sm, b, diags);
  using K = TokenKind;
  std::vector<K> expected = {K::KwPattern,  K::KwParam,    K::KwRequire,  K::KwCausal,
                             K::KwLet,      K::KwAttend,   K::KwAttends,  K::KwHead,
                             K::KwHeads,    K::KwIn,       K::KwTrue,     K::KwFalse,
                             K::Identifier, K::Identifier, K::Identifier, K::Eof};
  ASSERT_EQ(t.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k)
    EXPECT_EQ(t[k].kind, expected[k]) << "token " << k;
  EXPECT_EQ(t[12].text, "patterns");
  EXPECT_EQ(t[13].text, "_x");
}

TEST(Lexer, InputAndElseAreKeywordsElementTypesAndBracketsAreNot) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "input else int float inputs [ ]");
  std::vector<Token> t = lex(sm, b, diags);
  using K = TokenKind;
  std::vector<K> expected = {K::KwInput,    K::KwElse,   K::Identifier, K::Identifier,
                             K::Identifier, K::LBracket, K::RBracket,   K::Eof};
  ASSERT_EQ(t.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k)
    EXPECT_EQ(t[k].kind, expected[k]) << "token " << k;
  EXPECT_FALSE(diags.hasErrors());
}

TEST(Lexer, IntegersAcceptDigitSeparatorsUpToInt64Max) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "0 65_536 9223372036854775807 1..3");
  std::vector<Token> t = lex(sm, b, diags);
  ASSERT_EQ(t.size(), 7u);
  EXPECT_EQ(t[0].value, 0);
  EXPECT_EQ(t[1].value, 65536);
  EXPECT_EQ(t[2].value, INT64_MAX);
  EXPECT_EQ(t[3].value, 1);
  EXPECT_EQ(t[4].kind, TokenKind::DotDot);
  EXPECT_EQ(t[5].value, 3);
  EXPECT_FALSE(diags.hasErrors());
}

TEST(Lexer, CommentsRunToTheEndOfTheLine) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "a # b $ ` c\n  d#e\n#f");
  std::vector<Token> t = lex(sm, b, diags);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].text, "a");
  EXPECT_EQ(t[1].text, "d");
  EXPECT_EQ(sm.lineAndColumn(t[1].range.begin), std::make_pair(2u, 3u));
  EXPECT_EQ(t[2].kind, TokenKind::Eof);
  EXPECT_FALSE(diags.hasErrors());
}

TEST(SourceManager, LineAndColumnOfEveryOffsetMatchesAScanFromTheTop) {
  // The definition: line = 1 + newlines before the offset, column = 1 +
  // bytes since the last of them (offsets past the end clamp to the end).
  auto scan = [](std::string_view text, size_t offset) {
    unsigned line = 1, col = 1;
    for (size_t k = 0; k < std::min(offset, text.size()); ++k)
      text[k] == '\n' ? (++line, col = 1) : ++col;
    return std::make_pair(line, col);
  };
  SourceManager sm;
  for (std::string text : {"", "x", "\n", "\n\n\nab", "ab\ncd\n", "a\r\nb\r\n\r\n", "  let a = {0..3}\n\n  attend a\n"}) {
    const uint32_t b = sm.addBuffer("t", text);
    for (size_t offset = 0; offset <= text.size() + 2; ++offset)
      EXPECT_EQ(sm.lineAndColumn({b, static_cast<uint32_t>(offset)}), scan(text, offset))
          << "offset " << offset << " of '" << text << "'";
  }
  EXPECT_EQ(sm.lineAndColumn({0, 5}), std::make_pair(1u, 1u)); // no buffer: the command line
}

TEST(Lexer, StringsUnescapeQuotesAndNewlines) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", R"("a\"b\nc\\d")");
  std::vector<Token> t = lex(sm, b, diags);
  ASSERT_EQ(t[0].kind, TokenKind::String);
  EXPECT_EQ(t[0].text, "a\"b\nc\\d");
  EXPECT_EQ(sm.slice(t[0].range), R"("a\"b\nc\\d")");
}

TEST(Lexer, StringAtTheEndOfTheBufferWithoutAQuoteIsAnError) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "x \"abc");
  std::vector<Token> t = lex(sm, b, diags);
  ASSERT_EQ(diags.errorCount(), 1u);
  EXPECT_EQ(diags.diagnostics()[0].message, "unterminated string literal");
  EXPECT_EQ(sm.lineAndColumn(diags.diagnostics()[0].range.begin), std::make_pair(1u, 3u));
  EXPECT_EQ(t[1].kind, TokenKind::Error);
  EXPECT_EQ(t.back().kind, TokenKind::Eof);
}

// ---- Precedence and associativity -------------------------------------------

TEST(Parser, MultiplicativeBindsTighterThanAdditive) {
  EXPECT_EQ(shapeOf("a + b * c"), "(+ a (* b c))");
  EXPECT_EQ(shapeOf("a * b + c"), "(+ (* a b) c)");
  EXPECT_EQ(shapeOf("a - b % c / d"), "(- a (/ (% b c) d))");
}

TEST(Parser, BinaryOperatorsAssociateToTheLeft) {
  EXPECT_EQ(shapeOf("a - b - c"), "(- (- a b) c)");
  EXPECT_EQ(shapeOf("a / b % c * d"), "(* (% (/ a b) c) d)");
  EXPECT_EQ(shapeOf("A | B | C"), "(| (| A B) C)");
  EXPECT_EQ(shapeOf("A & B & C"), "(& (& A B) C)");
  EXPECT_EQ(shapeOf("p && q && r"), "(&& (&& p q) r)");
  EXPECT_EQ(shapeOf("p || q || r"), "(|| (|| p q) r)");
}

TEST(Parser, UnaryBindsTighterThanEveryBinaryOperator) {
  EXPECT_EQ(shapeOf("-a * b"), "(* (neg a) b)");
  EXPECT_EQ(shapeOf("- - a"), "(neg (neg a))");
  EXPECT_EQ(shapeOf("!p && q"), "(&& (not p) q)");
  EXPECT_EQ(shapeOf("a - -b"), "(- a (neg b))");
}

TEST(Parser, ArithmeticBindsTighterThanIntersect) {
  EXPECT_EQ(shapeOf("A & B + c"), "(& A (+ B c))");
  EXPECT_EQ(shapeOf("A - B & C"), "(& (- A B) C)");
}

TEST(Parser, IntersectBindsTighterThanUnion) {
  EXPECT_EQ(shapeOf("A | B & C"), "(| A (& B C))");
  EXPECT_EQ(shapeOf("A & B | C"), "(| (& A B) C)");
  EXPECT_EQ(shapeOf("A | B - C"), "(| A (- B C))");
  EXPECT_EQ(shapeOf("A - B | C"), "(| (- A B) C)");
}

TEST(Parser, UnionBindsTighterThanComparisons) {
  EXPECT_EQ(shapeOf("a < b | c"), "(cmp a < (| b c))");
  EXPECT_EQ(shapeOf("a & b == c"), "(cmp (& a b) == c)");
}

TEST(Parser, ComparisonsBindTighterThanAndWhichBindsTighterThanOr) {
  EXPECT_EQ(shapeOf("a < b && c < d || e"), "(|| (&& (cmp a < b) (cmp c < d)) e)");
  EXPECT_EQ(shapeOf("p || q && r"), "(|| p (&& q r))");
}

TEST(Parser, ParenthesesOverridePrecedence) {
  EXPECT_EQ(shapeOf("(a + b) * c"), "(* (+ a b) c)");
  EXPECT_EQ(shapeOf("(A | B) & C"), "(& (| A B) C)");
  EXPECT_EQ(shapeOf("a - (b - c)"), "(- a (- b c))");
  EXPECT_EQ(shapeOf("((a))"), "a");
}

TEST(Parser, ChainedComparisonIsOneNodeWithEveryOperator) {
  EXPECT_EQ(shapeOf("a < b <= c"), "(cmp a < b <= c)");
  EXPECT_EQ(shapeOf("0 <= j < i == k != 2 > 1 >= 0"), "(cmp 0 <= j < i == k != 2 > 1 >= 0)");
  auto p = parseExpr("i - 2 <= j < i + 2");
  const Expr &e = valueOf(*p);
  ASSERT_EQ(e.kind, ExprKind::Compare);
  EXPECT_EQ(e.operands.size(), e.compareOps.size() + 1);
  EXPECT_EQ(e.compareOps, (std::vector<CompareOp>{CompareOp::Le, CompareOp::Lt}));
}

TEST(Parser, InTakesAUnionOnEachSide) {
  EXPECT_EQ(shapeOf("j in A | B"), "(in j (| A B))");
  EXPECT_EQ(shapeOf("j + 1 in S && i in T"), "(&& (in (+ j 1) S) (in i T))");
}

// ---- Set literals, calls, literals ---------------------------------------------

TEST(Parser, SetLiteralsOfEveryForm) {
  EXPECT_EQ(shapeOf("{ a .. b }"), "(range a b)");
  EXPECT_EQ(shapeOf("{1..3}"), "(range 1 3)");
  EXPECT_EQ(shapeOf("{ max(0, i - l) .. i }"), "(range (call max 0 (- i l)) i)");
  EXPECT_EQ(shapeOf("{ a, b + 1, 3 }"), "(list a (+ b 1) 3)");
  EXPECT_EQ(shapeOf("{ 7 }"), "(list 7)");
  EXPECT_EQ(shapeOf("{}"), "(list)");
  EXPECT_EQ(shapeOf("{ j : j < i }"), "(builder j (cmp j < i))");
  EXPECT_EQ(shapeOf("{ k : true }"), "(builder k true)");
  // A name not followed by ':' is an element, not a bound variable.
  EXPECT_EQ(shapeOf("{ j }"), "(list j)");
  EXPECT_EQ(shapeOf("{ j : j in { 1, 2 } }"), "(builder j (in j (list 1 2)))");
  EXPECT_EQ(shapeOf("{ 0 .. 3 } - { 1 }"), "(- (range 0 3) (list 1))");
}

TEST(Parser, CallsTakeAnyNumberOfArguments) {
  EXPECT_EQ(shapeOf("f()"), "(call f)");
  EXPECT_EQ(shapeOf("abs(i - j)"), "(call abs (- i j))");
  EXPECT_EQ(shapeOf("min(a, b, c < d)"), "(call min a b (cmp c < d))");
  EXPECT_EQ(shapeOf("random_blocks(b, r, seed)"), "(call random_blocks b r seed)");
}

TEST(Parser, LiteralsKeepTheirValues) {
  EXPECT_EQ(shapeOf("65_536"), "65536");
  EXPECT_EQ(shapeOf("9223372036854775807"), "9223372036854775807");
  EXPECT_EQ(shapeOf("true || false"), "(|| true false)");
}

// ---- Inputs and the fallback ------------------------------------------------------

TEST(Parser, IndexIsAPostfixOnANameWithAnyNumberOfIndices) {
  EXPECT_EQ(shapeOf("b0[j] == b0[i]"), "(cmp (index b0 j) == (index b0 i))");
  EXPECT_EQ(shapeOf("sel[(n + B - 1) / B, k]"), "(index sel (/ (- (+ n B) 1) B) k)");
  EXPECT_EQ(shapeOf("j / B in sel[i / B]"), "(in (/ j B) (index sel (/ i B)))");
  EXPECT_EQ(shapeOf("b[]"), "(index b)");
  EXPECT_EQ(shapeOf("t[i, j, 0]"), "(index t i j 0)");
  EXPECT_EQ(shapeOf("-b[j] * 2"), "(* (neg (index b j)) 2)");
  EXPECT_EQ(shapeOf("a[b[i] + 1]"), "(index a (+ (index b i) 1))");
}

TEST(Parser, BracketsThatStartAnOperandAreStillTheRangeSlip) {
  auto p = parseExpr("{ j : j in [i - 3, i] }");
  ASSERT_EQ(p->diags.errorCount(), 1u);
  EXPECT_EQ(p->diags.diagnostics()[0].message, "expected an expression, found '['");
}

TEST(Parser, ElseIsTheLoosestOperator) {
  EXPECT_EQ(shapeOf("A | B else C"), "(else (| A B) C)");
  EXPECT_EQ(shapeOf("A else B | C"), "(else A (| B C))");
  EXPECT_EQ(shapeOf("A - B & C else D - E"), "(else (& (- A B) C) (- D E))");
  EXPECT_EQ(shapeOf("(X | Y) - { i } else { i }"), "(else (- (| X Y) (list i)) (list i))");
  EXPECT_EQ(shapeOf("x in A else B"), "(else (in x A) B)");
  EXPECT_EQ(shapeOf("p || q && r else C"), "(else (|| p (&& q r)) C)");
}

TEST(Parser, ElseGroupsToTheRight) {
  EXPECT_EQ(shapeOf("A else B else C"), "(else A (else B C))");
  EXPECT_EQ(shapeOf("(A else B) else C"), "(else (else A B) C)");
  EXPECT_EQ(shapeOf("(A else B) | C"), "(| (else A B) C)");
  EXPECT_EQ(shapeOf("{ j : j in (A else B) }"), "(builder j (in j (else A B)))");
}

TEST(Parser, InputDeclarationsKeepNameElementTypeAndDimensions) {
  auto p = parseText("pattern p {\n"
                     "  input b0 : int[n]\n"
                     "  input sel : int[(n + B - 1) / B, k]\n"
                     "  input s : float[n]\n"
                     "  head 0 attends { j : b0[j] == b0[i] } else { i }\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].kind, StmtKind::Input);
  EXPECT_EQ(b[0].name, "b0");
  EXPECT_EQ(b[0].elementType, "int");
  ASSERT_EQ(b[0].dims.size(), 1u);
  EXPECT_EQ(shape(*b[0].dims[0]), "n");
  EXPECT_EQ(b[0].value, nullptr);
  EXPECT_EQ(b[1].name, "sel");
  ASSERT_EQ(b[1].dims.size(), 2u);
  EXPECT_EQ(shape(*b[1].dims[0]), "(/ (- (+ n B) 1) B)");
  EXPECT_EQ(shape(*b[1].dims[1]), "k");
  // 'float' parses (a float input, for scores).
  EXPECT_EQ(b[2].elementType, "float");
  EXPECT_EQ(b[3].kind, StmtKind::HeadAttends);
  EXPECT_EQ(shape(*b[3].value), "(else (builder j (cmp (index b0 j) == (index b0 i))) (list i))");
}

// ---- Score modifiers -----------------------------------------------------------

TEST(Lexer, FloatLiteralsAndRangesOfIntegers) {
  SourceManager sm;
  DiagnosticEngine diags(sm);
  uint32_t b = sm.addBuffer("t", "0.5 1e-3 2.5E+4 7e2 1..5 65_536.25 3");
  std::vector<Token> t = lex(sm, b, diags);
  using K = TokenKind;
  std::vector<K> expected = {K::Float, K::Float, K::Float,   K::Float, K::Integer,
                             K::DotDot, K::Integer, K::Float, K::Integer, K::Eof};
  ASSERT_EQ(t.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k)
    EXPECT_EQ(t[k].kind, expected[k]) << "token " << k;
  EXPECT_EQ(t[0].floatValue, 0.5);
  EXPECT_EQ(t[1].floatValue, 1e-3);
  EXPECT_EQ(t[2].floatValue, 2.5e4);
  EXPECT_EQ(t[3].floatValue, 700.0);
  EXPECT_EQ(t[4].value, 1);
  EXPECT_EQ(t[7].floatValue, 65536.25);
  EXPECT_FALSE(diags.hasErrors());
}

TEST(Lexer, MalformedFloatsAreErrors) {
  for (const char *bad : {"1.5e", "1e999", "1.5.2", "2.5x"}) {
    SourceManager sm;
    DiagnosticEngine diags(sm);
    uint32_t b = sm.addBuffer("t", bad);
    std::vector<Token> t = lex(sm, b, diags);
    EXPECT_TRUE(diags.hasErrors()) << bad;
    EXPECT_EQ(t[0].kind, TokenKind::Error) << bad;
  }
}

TEST(Parser, ScoreAndSinkStatements) {
  auto p = parseText("pattern p {\n"
                     "  input rel : float[heads, 32]\n"
                     "  attend { j : j <= i }\n"
                     "  score cap * tanh(s / 2.5) + rel[h, min(floor(log(abs(j - i) + 1) * 4), 31)]\n"
                     "  sink -1e-3 * i\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(shape(*b[0].dims[0]), "heads");
  EXPECT_EQ(b[2].kind, StmtKind::Score);
  EXPECT_EQ(shape(*b[2].value),
            "(+ (* cap (call tanh (/ s f2.5))) (index rel h (call min (call floor (* (call log (+ (call abs (- j i)) "
            "1)) 4)) 31)))");
  EXPECT_EQ(b[3].kind, StmtKind::Sink);
  EXPECT_EQ(shape(*b[3].value), "(* (neg f0.001) i)");
  EXPECT_EQ(p->at(b[3].range), "5:3");
}

TEST(Parser, ScoreAndSinkAreNamesOutsideStatements) {
  auto p = parseText("pattern p { let score = { 0 } let sink = { 1 } attend score | sink score s }");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  ASSERT_EQ(b.size(), 4u);
  EXPECT_EQ(b[0].name, "score");
  EXPECT_EQ(shape(*b[2].value), "(| score sink)");
  EXPECT_EQ(b[3].kind, StmtKind::Score);
}

TEST(Parser, HeadsIsANameOnlyInDimensions) {
  auto p = parseExpr("{ j : heads }");
  EXPECT_TRUE(p->diags.hasErrors());
  EXPECT_NE(errorsOf(*p).find("expected an expression, found 'heads'"), std::string::npos) << errorsOf(*p);
}

TEST(Parser, TheScorePatternsOfTheLibraryParse) {
  for (const char *name : {"alibi_local", "capped_fixed", "sink_window", "t5_bias"}) {
    std::ifstream in(std::string(ATTNC_SOURCE_DIR) + "/patterns/" + name + ".attn");
    std::stringstream text;
    text << in.rdbuf();
    auto p = parseText(text.str());
    ASSERT_FALSE(p->diags.hasErrors()) << name << "\n" << errorsOf(*p);
    ASSERT_EQ(p->module.patterns.size(), 1u);
    const std::vector<Stmt> &b = p->module.patterns[0].body;
    const bool sink = std::string(name) == "sink_window";
    ASSERT_FALSE(b.empty());
    EXPECT_EQ(b.back().kind, sink ? StmtKind::Sink : StmtKind::Score) << name;
  }
  // The issue's contract, statements on one line separated by spaces only.
  auto p = parseText("pattern alibi_local { param w = 96  input slope : float[heads]  causal\n"
                     "  attend { j : i - j < w }  score s + slope[h] * (j - i) }");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  ASSERT_EQ(b.size(), 5u);
  EXPECT_EQ(shape(*b[4].value), "(+ s (* (index slope h) (- j i)))");
}

TEST(Parser, TheContractPatternsParse) {
  auto p = parseText("pattern lsh_union {\n"
                     "  input b0 : int[n]\n"
                     "  input b1 : int[n]\n"
                     "  causal\n"
                     "  attend { j : b0[j] == b0[i] } | { j : b1[j] == b1[i] }\n"
                     "}\n"
                     "pattern select {\n"
                     "  param B = 64\n"
                     "  param k = 4\n"
                     "  input sel : int[(n + B - 1) / B, k]\n"
                     "  causal\n"
                     "  attend { j : j / B in sel[i / B] } | { j : i - j < B }\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  ASSERT_EQ(p->module.patterns.size(), 2u);
  EXPECT_EQ(shape(*p->module.patterns[0].body[3].value),
            "(| (builder j (cmp (index b0 j) == (index b0 i))) "
            "(builder j (cmp (index b1 j) == (index b1 i))))");
  EXPECT_EQ(shape(*p->module.patterns[1].body[4].value),
            "(| (builder j (in (/ j B) (index sel (/ i B)))) (builder j (cmp (- i j) < B)))");
}

// ---- Statements and patterns ----------------------------------------------------

TEST(Parser, EveryStatementKindKeepsItsParts) {
  auto p = parseText("pattern p {\n"
                     "  param l = 128\n"
                     "  require 1 <= l : \"l must be positive\"\n"
                     "  causal\n"
                     "  heads 2\n"
                     "  let A = { j : j < i }\n"
                     "  attend A\n"
                     "  head 1 + 0 attends A | {}\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  ASSERT_EQ(p->module.patterns.size(), 1u);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  ASSERT_EQ(b.size(), 7u);
  EXPECT_EQ(b[0].kind, StmtKind::Param);
  EXPECT_EQ(b[0].name, "l");
  EXPECT_EQ(shape(*b[0].value), "128");
  EXPECT_EQ(b[1].kind, StmtKind::Require);
  EXPECT_EQ(b[1].message, "l must be positive");
  EXPECT_EQ(shape(*b[1].value), "(cmp 1 <= l)");
  EXPECT_EQ(b[2].kind, StmtKind::Causal);
  EXPECT_EQ(b[2].value, nullptr);
  EXPECT_EQ(b[3].kind, StmtKind::Heads);
  EXPECT_EQ(shape(*b[3].value), "2");
  EXPECT_EQ(b[4].kind, StmtKind::Let);
  EXPECT_EQ(b[4].name, "A");
  EXPECT_EQ(b[5].kind, StmtKind::Attend);
  EXPECT_EQ(shape(*b[5].value), "A");
  EXPECT_EQ(b[6].kind, StmtKind::HeadAttends);
  EXPECT_EQ(shape(*b[6].head), "(+ 1 0)");
  EXPECT_EQ(shape(*b[6].value), "(| A (list))");
}

TEST(Parser, SemicolonsBetweenStatementsAreOptional) {
  auto p = parseText("pattern p { causal; ; let A = {} ; attend A; }");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  EXPECT_EQ(p->module.patterns[0].body.size(), 3u);
}

TEST(Parser, KeywordsAreValidPatternNames) {
  auto p = parseText("pattern causal { attend {} } pattern heads { attend {} }");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  ASSERT_EQ(p->module.patterns.size(), 2u);
  EXPECT_EQ(p->module.patterns[0].name, "causal");
  EXPECT_EQ(p->module.patterns[1].name, "heads");
}

TEST(Parser, EmptyBufferIsAnEmptyModule) {
  auto p = parseText("# only a comment\n");
  EXPECT_FALSE(p->diags.hasErrors());
  EXPECT_TRUE(p->module.patterns.empty());
}

// ---- Source ranges --------------------------------------------------------------

TEST(SourceRanges, NodesCoverExactlyTheirText) {
  auto p = parseText("pattern fixed {\n"
                     "  param l = 128\n"
                     "  attend { j : j / l == i / l } | { max(0, i - l) .. -i }\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const PatternDecl &d = p->module.patterns[0];
  EXPECT_EQ(p->slice(d.nameRange), "fixed");
  EXPECT_EQ(p->slice(d.range).substr(0, 15), "pattern fixed {");
  EXPECT_EQ(p->slice(d.range).back(), '}');
  const Stmt &param = d.body[0];
  EXPECT_EQ(p->slice(param.range), "param l = 128");
  EXPECT_EQ(p->slice(param.nameRange), "l");
  EXPECT_EQ(p->at(param.nameRange), "2:9");
  EXPECT_EQ(p->slice(param.value->range), "128");
  const Stmt &attend = d.body[1];
  EXPECT_EQ(p->slice(attend.range), "attend { j : j / l == i / l } | { max(0, i - l) .. -i }");
  const Expr &u = *attend.value;
  EXPECT_EQ(p->slice(u.range), "{ j : j / l == i / l } | { max(0, i - l) .. -i }");
  const Expr &builder = *u.operands[0];
  EXPECT_EQ(p->slice(builder.range), "{ j : j / l == i / l }");
  EXPECT_EQ(p->slice(builder.nameRange), "j");
  EXPECT_EQ(p->at(builder.nameRange), "3:12");
  const Expr &cmp = *builder.operands[0];
  EXPECT_EQ(p->slice(cmp.range), "j / l == i / l");
  EXPECT_EQ(p->slice(cmp.operands[1]->range), "i / l");
  const Expr &range = *u.operands[1];
  EXPECT_EQ(p->slice(range.range), "{ max(0, i - l) .. -i }");
  EXPECT_EQ(p->slice(range.operands[0]->range), "max(0, i - l)");
  EXPECT_EQ(p->slice(range.operands[0]->nameRange), "max");
  EXPECT_EQ(p->slice(range.operands[1]->range), "-i");
  EXPECT_EQ(p->at(range.operands[1]->range), "3:54");
}

TEST(SourceRanges, ListAndEmptySetCoverTheirBraces) {
  auto p = parseText("pattern p { attend {0, 3, i} | {} }");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const Expr &u = valueOf(*p);
  EXPECT_EQ(p->slice(u.operands[0]->range), "{0, 3, i}");
  EXPECT_EQ(p->slice(u.operands[1]->range), "{}");
}

TEST(SourceRanges, StatementsOnOneLineEndAtTheirLastToken) {
  auto p = parseText("pattern p { causal heads 2 head 0 attends {} attend { j : true } }");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  EXPECT_EQ(p->slice(b[0].range), "causal");
  EXPECT_EQ(p->slice(b[1].range), "heads 2");
  EXPECT_EQ(p->slice(b[2].range), "head 0 attends {}");
  EXPECT_EQ(p->slice(b[2].head->range), "0");
  EXPECT_EQ(p->slice(b[3].range), "attend { j : true }");
}

TEST(SourceRanges, InputStatementAndIndexCoverTheirBrackets) {
  auto p = parseText("pattern p {\n  input sel : int[n, 4]\n"
                     "  attend { j : j in sel[i / 4] } else { i }\n}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  const std::vector<Stmt> &b = p->module.patterns[0].body;
  EXPECT_EQ(p->slice(b[0].range), "input sel : int[n, 4]");
  EXPECT_EQ(p->slice(b[0].nameRange), "sel");
  EXPECT_EQ(p->slice(b[0].typeRange), "int");
  EXPECT_EQ(p->at(b[0].typeRange), "2:15");
  EXPECT_EQ(p->slice(b[0].dims[1]->range), "4");
  const Expr &fallback = *b[1].value;
  EXPECT_EQ(p->slice(fallback.range), "{ j : j in sel[i / 4] } else { i }");
  EXPECT_EQ(p->slice(fallback.opRange), "else");
  const Expr &index = *fallback.operands[0]->operands[0]->operands[1];
  ASSERT_EQ(index.kind, ExprKind::Index);
  EXPECT_EQ(p->slice(index.range), "sel[i / 4]");
  EXPECT_EQ(p->slice(index.nameRange), "sel");
}

TEST(SourceRanges, BinaryNodeWithParenthesisedOperandsCoversTheParentheses) {
  auto p = parseExpr("(a + b) * c");
  EXPECT_EQ(p->slice(valueOf(*p).range), "(a + b) * c");
  auto q = parseExpr("c * (a + b)");
  EXPECT_EQ(q->slice(valueOf(*q).range), "c * (a + b)");
}

// ---- Recovery ----------------------------------------------------------------------

TEST(ParserRecovery, ReportsEveryMistakeAndKeepsTheStatementsAroundThem) {
  auto p = parseText("pattern p {\n"
                     "  param l = 4\n"
                     "  let A = { j : j < }\n" // missing operand
                     "  param = 2\n"           // missing name
                     "  let B = { j : j <= i }\n"
                     "  window 3\n" // not a statement
                     "  attend B\n"
                     "}\n"
                     "pattern q attend { j : true } }\n" // missing '{'
                     "pattern r { causal attend { j : true } }\n");
  EXPECT_EQ(p->diags.errorCount(), 4u) << errorsOf(*p);
  std::vector<std::string> where;
  for (const Diagnostic &d : p->diags.diagnostics())
    where.push_back(p->at(d.range));
  EXPECT_EQ(where, (std::vector<std::string>{"3:21", "4:9", "6:3", "9:11"}));
  ASSERT_EQ(p->module.patterns.size(), 3u);
  const std::vector<Stmt> &body = p->module.patterns[0].body;
  ASSERT_EQ(body.size(), 3u);
  EXPECT_EQ(body[0].name, "l");
  EXPECT_EQ(body[1].name, "B");
  EXPECT_EQ(body[2].kind, StmtKind::Attend);
  EXPECT_EQ(p->module.patterns[1].name, "q");
  ASSERT_EQ(p->module.patterns[1].body.size(), 1u);
  EXPECT_EQ(p->module.patterns[2].name, "r");
  EXPECT_EQ(p->module.patterns[2].body.size(), 2u);
}

TEST(ParserRecovery, StrayTokensBetweenPatternsAreSkippedOnce) {
  auto p = parseText("x y z\npattern p { attend {} }\n) ) )\npattern q { attend {} }\n");
  EXPECT_EQ(p->diags.errorCount(), 2u) << errorsOf(*p);
  EXPECT_EQ(p->module.patterns.size(), 2u);
}

// ---- Nesting limit ---------------------------------------------------------------

std::string repeat(const std::string &s, size_t times) {
  std::string out;
  out.reserve(s.size() * times);
  for (size_t k = 0; k < times; ++k)
    out += s;
  return out;
}

std::string nestedIn(size_t parens, const std::string &inner) {
  return repeat("(", parens) + inner + repeat(")", parens);
}

const std::string kTooDeep = "expressions nest 257 levels deep; the limit is 256";

TEST(NestingLimit, ExactlyTheLimitParses) {
  // 255 parentheses around a name: 256 levels.
  auto p = parseExpr(nestedIn(255, "i"));
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  EXPECT_EQ(valueOf(*p).nesting, kMaxExprNesting);
}

TEST(NestingLimit, EveryConstructCountsOneLevel) {
  auto nesting = [](const std::string &expr) {
    auto p = parseExpr(expr);
    return p->diags.hasErrors() ? 0u : valueOf(*p).nesting;
  };
  EXPECT_EQ(nesting("i"), 1u);
  EXPECT_EQ(nesting("(i)"), 2u);
  EXPECT_EQ(nesting("-(i + 1)"), 4u);
  EXPECT_EQ(nesting("i < j < n"), 3u);
  EXPECT_EQ(nesting("{ j : j <= i }"), 3u);
  EXPECT_EQ(nesting("min(i, (j))"), 3u);
  EXPECT_EQ(nesting("1 + 2 + 3 + 4"), 4u);
}

TEST(NestingLimit, OneLevelPastTheLimitIsOneErrorAtTheTokenThatOpensIt) {
  auto p = parseExpr(nestedIn(257, "i"));
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  const Diagnostic &d = p->diags.diagnostics()[0];
  EXPECT_EQ(d.message, kTooDeep);
  EXPECT_EQ(p->at(d.range), "1:" + std::to_string(std::string("pattern p { attend ").size() + 257));
}

TEST(NestingLimit, FiveThousandParenthesesAroundASetAreOneError) {
  auto p = parseExpr(nestedIn(5000, "{ j : j <= i }"));
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
  // Recovery skips the rest of the statement, the pattern is still whole.
  ASSERT_EQ(p->module.patterns.size(), 1u);
  EXPECT_TRUE(p->module.patterns[0].body.empty());
}

TEST(NestingLimit, HundredThousandUnclosedParenthesesDoNotExhaustTheStack) {
  auto p = parseText("pattern p { attend " + repeat("(", 100000));
  ASSERT_GE(p->diags.errorCount(), 1u);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
}

TEST(NestingLimit, LongUnaryChainIsRefused) {
  auto p = parseExpr(repeat("- ", 100000) + "i");
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
}

TEST(NestingLimit, LongLeftAssociativeChainIsRefusedWithoutRecursing) {
  // A chain builds its depth in a loop; the node past the limit is refused.
  auto p = parseExpr("{ j : j < " + repeat("1 + ", 100000) + "1 }");
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
}

TEST(NestingLimit, LongComparisonChainIsRefused) {
  auto p = parseExpr("{ j : " + repeat("j < ", 100000) + "j }");
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
}

TEST(NestingLimit, LongElseChainIsRefusedWithoutExhaustingTheStack) {
  // 'else' groups to the right, by recursion: each one is a level.
  auto ok = parseExpr(repeat("A else ", 255) + "B");
  EXPECT_FALSE(ok->diags.hasErrors()) << errorsOf(*ok);
  EXPECT_EQ(valueOf(*ok).nesting, 256u);
  auto p = parseExpr(repeat("{ i } else ", 100000) + "{}");
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
}

TEST(NestingLimit, DeepIndicesAreRefused) {
  auto p = parseExpr(repeat("b[", 300) + "i" + repeat("]", 300));
  ASSERT_EQ(p->diags.errorCount(), 1u) << errorsOf(*p);
  EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep);
}

TEST(NestingLimit, DeepSetLiteralsAndCallsAreRefused) {
  for (const std::string open : {"{", "{ j : j in ", "min(1, ", "{ 0 .. "}) {
    std::string close = open[0] == 'm' ? ")" : open == "{ 0 .. " ? " }" : " }";
    auto p = parseExpr(repeat(open, 5000) + "i" + repeat(close, 5000));
    ASSERT_GE(p->diags.errorCount(), 1u) << open;
    EXPECT_EQ(p->diags.diagnostics()[0].message, kTooDeep) << open;
  }
}

// ---- Printing ------------------------------------------------------------------

TEST(PrintAst, ShowsEveryNodeWithItsLocation) {
  auto p = parseText("pattern p {\n"
                     "  param l = 4\n"
                     "  require l > 1 : \"msg\"\n"
                     "  attend { j : j < l } | { 0, i }\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  std::string ast = printAst(p->module, p->sources);
  std::vector<std::string> lines;
  std::istringstream in(ast);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  const std::vector<std::string> expected = {
      "(pattern p @1:1",
      "  (param l @2:3",
      "    (int 4 @2:13))",
      "  (require \"msg\" @3:3",
      "    (compare '>' @3:11",
      "      (name l @3:11)",
      "      (int 1 @3:15)))",
      "  (attend @4:3",
      "    (binary '|' @4:10",
      "      (set-builder j @4:10",
      "        (compare '<' @4:16",
      "          (name j @4:16)",
      "          (name l @4:20)))",
      "      (set-list @4:26",
      "        (int 0 @4:28)",
      "        (name i @4:31)))))",
  };
  EXPECT_EQ(lines, expected) << ast;
}

TEST(PrintAst, ShowsInputsIndicesAndElse) {
  auto p = parseText("pattern p {\n"
                     "  input sel : int[n, 4]\n"
                     "  attend { j : j in sel[i] } else { i }\n"
                     "}\n");
  ASSERT_FALSE(p->diags.hasErrors()) << errorsOf(*p);
  std::string ast = printAst(p->module, p->sources);
  std::vector<std::string> lines;
  std::istringstream in(ast);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  const std::vector<std::string> expected = {
      "(pattern p @1:1",
      "  (input sel int @2:3",
      "    (name n @2:19)",
      "    (int 4 @2:22))",
      "  (attend @3:3",
      "    (binary 'else' @3:10",
      "      (set-builder j @3:10",
      "        (in @3:16",
      "          (name j @3:16)",
      "          (index sel @3:21",
      "            (name i @3:25))))",
      "      (set-list @3:35",
      "        (name i @3:37)))))",
  };
  EXPECT_EQ(lines, expected) << ast;
}

TEST(PrintExpr, ParenthesisesOnlyWherePrecedenceNeedsIt) {
  EXPECT_EQ(printExpr(valueOf(*parseExpr("(a + b) * c"))), "(a + b) * c");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("a + (b * c)"))), "a + b * c");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("(a - b) - c"))), "a - b - c");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("a - (b - c)"))), "a - (b - c)");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("-(a + b)"))), "-(a + b)");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("!(j < i)"))), "!(j < i)");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("{ j : (j < i) }"))), "{ j : j < i }");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("{}"))), "{}");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("{0,1}"))), "{ 0, 1 }");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("{ max(0,i-l)..i }"))), "{ max(0, i - l) .. i }");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("A else (B else C)"))), "A else B else C");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("(A else B) else C"))), "(A else B) else C");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("(A else B) | C"))), "(A else B) | C");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("(A | B) else C"))), "A | B else C");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("sel[(i) / 4,k]"))), "sel[i / 4, k]");
  EXPECT_EQ(printExpr(valueOf(*parseExpr("-(b[j])"))), "-b[j]");
}

TEST(PrintExpr, PrintedTextParsesBackToTheSameTree) {
  for (const char *text :
       {"a - (b - c) * -(d % e)", "(A | B) & (C - D) | E", "A - (B | C)", "(p || q) && !(r && s)",
        "a < b <= c == (d < e)", "(j in A | B) == (i in C)", "{ j : (j + 1) / 4 == i / 4 }",
        "{ min(i, 3) .. n - 1 } & { 0, i, i + 2 }", "- - a", "a - -b", "(a < b) < c",
        "p && (q && r)", "a / (b / c)", "(A & B) & C", "A else B else C", "(A else B) else C",
        "(A else B) | C", "{ j : j in (A else B) } else {}", "b0[j] == sel[i / 4, k] - b[]",
        "(X | Y) - { i } else { i }", "j in sel[(i + 1) / 64]"}) {
    auto first = parseExpr(text);
    ASSERT_FALSE(first->diags.hasErrors()) << text << "\n" << errorsOf(*first);
    std::string printed = printExpr(valueOf(*first));
    auto second = parseExpr(printed);
    ASSERT_FALSE(second->diags.hasErrors()) << printed << "\n" << errorsOf(*second);
    EXPECT_EQ(shape(valueOf(*second)), shape(valueOf(*first))) << text << " printed as " << printed;
  }
}

} // namespace
} // namespace attnc::dsl
