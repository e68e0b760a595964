//===- AST.cpp - Printing the syntax tree ---------------------------------===//
#include "attnc/dsl/AST.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace attnc::dsl {

const char *spelling(UnaryOp op) { return op == UnaryOp::Neg ? "-" : "!"; }

const char *spelling(BinaryOp op) {
  switch (op) {
  case BinaryOp::Add: return "+";
  case BinaryOp::Sub: return "-";
  case BinaryOp::Mul: return "*";
  case BinaryOp::Div: return "/";
  case BinaryOp::Mod: return "%";
  case BinaryOp::And: return "&&";
  case BinaryOp::Or: return "||";
  case BinaryOp::Union: return "|";
  case BinaryOp::Intersect: return "&";
  case BinaryOp::Else: return "else";
  }
  return "?";
}

const char *spelling(CompareOp op) {
  switch (op) {
  case CompareOp::Eq: return "==";
  case CompareOp::Ne: return "!=";
  case CompareOp::Lt: return "<";
  case CompareOp::Le: return "<=";
  case CompareOp::Gt: return ">";
  case CompareOp::Ge: return ">=";
  }
  return "?";
}

static int precedence(const Expr &e) {
  switch (e.kind) {
  case ExprKind::Binary:
    switch (e.binaryOp) {
    case BinaryOp::Else: return 0;
    case BinaryOp::Or: return 1;
    case BinaryOp::And: return 2;
    case BinaryOp::Union: return 4;
    case BinaryOp::Intersect: return 5;
    case BinaryOp::Add:
    case BinaryOp::Sub: return 6;
    default: return 7;
    }
  case ExprKind::Compare:
  case ExprKind::In:
    return 3;
  case ExprKind::Unary:
    return 8;
  default:
    return 9;
  }
}

/// The shortest spelling that reads back as `v`, with a '.' or an exponent
/// so that it reads back as a float.
static std::string floatSpelling(double v) {
  char buf[64];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v)
      break;
  }
  std::string out = buf;
  if (out.find_first_of(".eEn") == std::string::npos) // (n: nan, inf)
    out += ".0";
  return out;
}

static void printInto(std::ostringstream &os, const Expr &e, int parentPrec, bool rightSide) {
  int prec = precedence(e);
  bool paren = prec < parentPrec || (rightSide && prec == parentPrec && prec < 8);
  if (paren)
    os << "(";
  switch (e.kind) {
  case ExprKind::Int:
    os << e.intValue;
    break;
  case ExprKind::Float:
    os << floatSpelling(e.floatValue);
    break;
  case ExprKind::Bool:
    os << (e.boolValue ? "true" : "false");
    break;
  case ExprKind::Name:
    os << e.name;
    break;
  case ExprKind::Unary:
    os << spelling(e.unaryOp);
    printInto(os, *e.operands[0], prec, false);
    break;
  case ExprKind::Index:
    os << e.name << "[";
    for (size_t k = 0; k < e.operands.size(); ++k) {
      if (k)
        os << ", ";
      printInto(os, *e.operands[k], 0, false);
    }
    os << "]";
    break;
  case ExprKind::Binary:
    if (e.binaryOp == BinaryOp::Else) {
      // Groups to the right: 'A else (B else C)' needs no parentheses.
      printInto(os, *e.operands[0], prec + 1, false);
      os << " else ";
      printInto(os, *e.operands[1], prec, false);
      break;
    }
    printInto(os, *e.operands[0], prec, false);
    os << " " << spelling(e.binaryOp) << " ";
    printInto(os, *e.operands[1], prec, true);
    break;
  case ExprKind::Compare:
    printInto(os, *e.operands[0], prec + 1, false);
    for (size_t k = 0; k < e.compareOps.size(); ++k) {
      os << " " << spelling(e.compareOps[k]) << " ";
      printInto(os, *e.operands[k + 1], prec + 1, false);
    }
    break;
  case ExprKind::In:
    printInto(os, *e.operands[0], prec + 1, false);
    os << " in ";
    printInto(os, *e.operands[1], prec + 1, false);
    break;
  case ExprKind::Call:
    os << e.name << "(";
    for (size_t k = 0; k < e.operands.size(); ++k) {
      if (k)
        os << ", ";
      printInto(os, *e.operands[k], 0, false);
    }
    os << ")";
    break;
  case ExprKind::SetBuilder:
    os << "{ " << e.name << " : ";
    printInto(os, *e.operands[0], 0, false);
    os << " }";
    break;
  case ExprKind::SetRange:
    os << "{ ";
    printInto(os, *e.operands[0], 0, false);
    os << " .. ";
    printInto(os, *e.operands[1], 0, false);
    os << " }";
    break;
  case ExprKind::SetList:
    os << "{";
    for (size_t k = 0; k < e.operands.size(); ++k) {
      os << (k ? ", " : " ");
      printInto(os, *e.operands[k], 0, false);
    }
    os << (e.operands.empty() ? "}" : " }");
    break;
  }
  if (paren)
    os << ")";
}

std::string printExpr(const Expr &expr) {
  std::ostringstream os;
  printInto(os, expr, 0, false);
  return os.str();
}

namespace {
struct AstPrinter {
  const SourceManager &sources;
  std::ostringstream os;

  std::string loc(SourceRange r) {
    auto [line, col] = sources.lineAndColumn(r.begin);
    return std::to_string(line) + ":" + std::to_string(col);
  }

  void expr(const Expr &e, int indent) {
    os << std::string(indent, ' ') << "(";
    switch (e.kind) {
    case ExprKind::Int: os << "int " << e.intValue; break;
    case ExprKind::Float: os << "float " << floatSpelling(e.floatValue); break;
    case ExprKind::Bool: os << "bool " << (e.boolValue ? "true" : "false"); break;
    case ExprKind::Name: os << "name " << e.name; break;
    case ExprKind::Index: os << "index " << e.name; break;
    case ExprKind::Unary: os << "unary '" << spelling(e.unaryOp) << "'"; break;
    case ExprKind::Binary: os << "binary '" << spelling(e.binaryOp) << "'"; break;
    case ExprKind::Compare:
      os << "compare";
      for (CompareOp op : e.compareOps)
        os << " '" << spelling(op) << "'";
      break;
    case ExprKind::In: os << "in"; break;
    case ExprKind::Call: os << "call " << e.name; break;
    case ExprKind::SetBuilder: os << "set-builder " << e.name; break;
    case ExprKind::SetRange: os << "set-range"; break;
    case ExprKind::SetList: os << "set-list"; break;
    }
    os << " @" << loc(e.range);
    for (const ExprPtr &child : e.operands) {
      os << "\n";
      expr(*child, indent + 2);
    }
    os << ")";
  }
};
} // namespace

std::string printAst(const Module &module, const SourceManager &sources) {
  AstPrinter p{sources, {}};
  static const char *kStmtNames[] = {"param",  "require", "causal",       "heads",
                                     "let",    "attend",  "head-attends", "input",
                                     "score",  "sink"};
  for (const PatternDecl &decl : module.patterns) {
    p.os << "(pattern " << decl.name << " @" << p.loc(decl.range);
    for (const Stmt &s : decl.body) {
      p.os << "\n  (" << kStmtNames[static_cast<int>(s.kind)];
      if (!s.name.empty())
        p.os << " " << s.name;
      if (!s.elementType.empty())
        p.os << " " << s.elementType;
      if (!s.message.empty())
        p.os << " \"" << s.message << "\"";
      p.os << " @" << p.loc(s.range);
      if (s.head) {
        p.os << "\n";
        p.expr(*s.head, 4);
      }
      if (s.value) {
        p.os << "\n";
        p.expr(*s.value, 4);
      }
      for (const ExprPtr &dim : s.dims) {
        p.os << "\n";
        p.expr(*dim, 4);
      }
      p.os << ")";
    }
    p.os << ")\n";
  }
  return p.os.str();
}

} // namespace attnc::dsl
