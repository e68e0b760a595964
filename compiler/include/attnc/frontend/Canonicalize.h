//===- Canonicalize.h - Terms to canonical generators ---------------------===//
//
// Expects: Set terms from Sema (h substituted, causal applied).
// Guarantees: an equivalent SetNode tree (same key set for every i and n).
// Comparisons that are linear in j become bands or key ranges; `j / l`
// comparisons become key ranges (block-diag when it is j / l == i / l);
// `j % m` comparisons become stripes or residue classes; j-free conditions
// become row-ifs; anything else stays a per-key predicate. Never fails.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"
#include "attnc/frontend/Sema.h"

namespace attnc::ir {

/// Canonical form of one Set term.
SetRef canonicalizeSet(const TermRef &set);
/// Canonical IR of every distinct head of a checked pattern.
PatternIR canonicalizePattern(const Pattern &pattern);

} // namespace attnc::ir
