//===- Parser.h - Recursive-descent parser for .attn files ----------------===//
//
// Grammar (newlines are not significant; ';' between statements is optional):
//
//   module    := pattern*
//   pattern   := 'pattern' IDENT '{' stmt* '}'
//   stmt      := 'param' IDENT '=' expr | 'require' expr [':' STRING]
//              | 'causal' | 'heads' expr | 'let' IDENT '=' expr
//              | 'attend' expr | 'head' expr 'attends' expr
//              | 'input' IDENT ':' TYPE '[' expr (',' expr)* ']'
//              | 'score' expr | 'sink' expr
//                                    ('score' / 'sink': names, statement words
//                                    only where a statement starts)
//   TYPE      := 'int' | 'float'     (plain names, not keywords)
//   expr      := or ['else' expr]    (A else B else C is A else (B else C))
//   or        := and ('||' and)*
//   and       := cmp ('&&' cmp)*
//   cmp       := union (CMPOP union)* | union 'in' union
//   union     := inter ('|' inter)*
//   inter     := add ('&' add)*
//   add       := mul (('+' | '-') mul)*
//   mul       := unary (('*' | '/' | '%') unary)*
//   unary     := ('-' | '!') unary | primary
//   primary   := INT | FLOAT | 'true' | 'false' | IDENT | IDENT '(' args ')' | '(' expr ')'
//              | 'heads'             (only in an input's dimensions: the head count)
//              | IDENT '[' [expr (',' expr)*] ']'
//              | '{' IDENT ':' expr '}' | '{' expr '..' expr '}'
//              | '{' [expr (',' expr)*] '}'
//
// Errors are reported to the DiagnosticEngine; the parser recovers at the next
// statement keyword so that one run reports several mistakes.
//
// Expressions nest at most kMaxExprNesting levels (Expr::nesting): deeper
// input is an error, reported where it passes the limit, so that neither the
// parser's recursion nor any later walk of the tree can exhaust the stack.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/dsl/AST.h"

namespace attnc::dsl {

/// The deepest an expression may nest (Expr::nesting). Each level costs the
/// parser about sixteen stack frames; at 256 levels that stays far below the
/// 8 MiB of a main thread, sanitizers included.
constexpr unsigned kMaxExprNesting = 256;

/// Parses one buffer. Always returns a module (possibly partial); check
/// `diags.hasErrors()`.
Module parse(const SourceManager &sources, uint32_t buffer, DiagnosticEngine &diags);

} // namespace attnc::dsl
