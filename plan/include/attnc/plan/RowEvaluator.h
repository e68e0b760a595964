//===- RowEvaluator.h - Closed-form key sets for a bound sequence length --===//
//
// Binds n and produces, for any query row i, its keys as an IntervalSet in
// O(number of intervals) for every generator but `predicate`, which costs
// O(keys examined) and is only evaluated inside the intervals its
// intersection siblings leave. Never materialises an n x n mask.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "attnc/plan/PatternIR.h"

#include <array>
#include <memory>
#include <utility>
#include <vector>

namespace attnc::ir {

class PredicateLanes;

class RowEvaluator {
public:
  RowEvaluator(SetRef set, int64_t n);

  int64_t n() const { return n_; }
  const SetRef &set() const { return set_; }
  /// Keys of query row i (0 <= i < n), clipped to [0, n).
  IntervalSet row(int64_t i) const;
  /// Keys of query row i inside [lo, hi).
  IntervalSet row(int64_t i, int64_t lo, int64_t hi) const;
  /// The same into `out`, reusing its capacity: evaluating many rows this
  /// way allocates nothing in steady state.
  void row(int64_t i, int64_t lo, int64_t hi, IntervalSet &out) const;
  /// Keys of row i inside [lo, hi), which may reach past [0, n): the keys a
  /// translation-invariant set's generators give there (a band continues
  /// below 0), for blocks that are moved into [0, n) afterwards.
  void rowIn(int64_t i, int64_t lo, int64_t hi, IntervalSet &out) const;
  /// How many groups of the root intersection's children it keeps per
  /// thread and reads back for rows that share them (tiled NATTEN: 2, one
  /// per axis); 0 for most sets.
  size_t memoisedGroups() const { return memo_.size(); }

private:
  /// The calling thread's scratch sets for one level of the set's tree
  /// (two per level), found once per row: a thread_local of a shared
  /// library costs a call at each use (an eighth of tiled NATTEN's row
  /// evaluations when each level looked its sets up).
  /// A memoised child's keys (below), cached per thread: `keys` are the
  /// child's over [lo, hi) where its bound values were `values`.
  struct MemoEntry {
    uint64_t owner = 0; ///< the evaluator's id_ (0: empty)
    int64_t lo = 0, hi = 0;
    std::array<int64_t, 8> values{};
    IntervalSet keys;
  };
  struct Level {
    std::array<IntervalSet, 2> sets;
    std::unique_ptr<Level> next; ///< the level below, made when first needed
    std::vector<MemoEntry> memo; ///< (the top level's only) kMemoWays per memoised child
  };
  struct Frame {
    Level *here;
    /// The row's bound terms' values (tape_'s, open for this row), or null.
    const TermTape::Scope *tape;
    IntervalSet &set(int which) const { return here->sets[static_cast<size_t>(which)]; }
    Frame below() const {
      if (!here->next)
        here->next = std::make_unique<Level>();
      return {here->next.get(), tape};
    }
  };
  static Frame topFrame(const TermTape::Scope *tape);
  /// A bound term's value at row i: from the row's tape where it is one of
  /// its roots (coordBoundsAt's and narrowToRow's, without their lookup).
  int64_t boundAt(const Term &t, int64_t i, Frame f) const;

  /// Keys of row i of `s` inside [lo, hi) into `out`, with `f`'s scratch.
  void eval(const SetNode &s, int64_t i, int64_t lo, int64_t hi, IntervalSet &out, Frame f) const;
  void evalIntersect(const SetNode &s, int64_t i, int64_t lo, int64_t hi, IntervalSet &out, Frame f) const;
  /// Keys of the root intersection's memoised group `m` over a window that
  /// contains [lo, hi) (the thread's cached set, or evaluated into it).
  const IntervalSet &memoised(size_t m, int64_t i, int64_t lo, int64_t hi, Frame f) const;
  /// The thread's cache entry in `region` (kMemoWays entries each) for the
  /// values of `slots` on f's tape: `hit` when it holds them over a window
  /// that contains [lo, hi), else it is taken for them and [lo, hi), its
  /// keys left to the caller.
  MemoEntry *cached(const std::vector<int32_t> &slots, size_t region, int64_t lo, int64_t hi, Frame f,
                    bool &hit) const;
  /// Whether row i of `s` has a key in [lo, hi), stopping at the first
  /// where the structure allows (a fallback asks it of its first operand).
  bool anyIn(const SetNode &s, int64_t i, int64_t lo, int64_t hi, Frame f) const;
  /// Row t of a Permuted node (query order[t] of its child), in key ranks.
  void evalPermuted(const SetNode &s, int64_t t, int64_t lo, int64_t hi, IntervalSet &out, Frame f) const;
  /// Query i's keys in the child's positions, as ranks of `p` inside [lo, hi).
  void renumbered(const SetNode &child, const InputArray &p, int64_t i, int64_t lo, int64_t hi,
                  IntervalSet &out, Frame f) const;

  /// The set's predicates compiled over lanes of keys (null: none).
  const PredicateLanes *lanesOf(const SetNode &s) const;

  SetRef set_;
  int64_t n_;
  std::shared_ptr<const std::vector<std::pair<const SetNode *, PredicateLanes>>> predicates_;
  /// Rows computed in closed form, without interval lists: one interval
  /// (intersections of bands, blocks, key ranges), or one such set minus
  /// another; General evaluates the tree.
  enum class Form { General, OneInterval, IntervalMinusInterval } form_ = Form::General;
  /// The terms of its range bounds share many nodes: each row evaluates
  /// them once (evalIntShared in a SharedTermsScope; tiled NATTEN's row
  /// blocks at n = 65,536: 263 -> 185 ms); other sets skip the scope.
  bool sharedTerms_ = false;
  /// Those bounds as one flat program, evaluated once per row (rowIn) and
  /// read back by the generators (evalIntShared): tiled NATTEN's row
  /// blocks at n = 65,536 spent two fifths of their time walking them.
  std::shared_ptr<const TermTape> tape_;
  /// The root intersection's children whose rows depend on the row only
  /// through values on the tape (`slots`: the tape's nodes of their
  /// bounds), not one interval, in groups that read the same quantity of
  /// the row: tiled NATTEN's four unions, each one side of the window on one
  /// axis, make a group per axis (both read the clamped centre's column, or
  /// row). A row block's rows share a group's keys (the 8 columns and 4
  /// canvas rows of a block of 32 give 8 and 4 distinct sets), so each group
  /// is evaluated once per distinct value and window and then read back:
  /// a row is then two merges.
  struct Memoised {
    std::vector<const SetNode *> children;
    std::vector<int32_t> slots;
  };
  static std::vector<Memoised> memoGroups(const SetNode &root, const TermTape &tape);
  std::vector<Memoised> memo_;  ///< at most 64 groups
  std::vector<int8_t> groupOf_; ///< per child of the root: its group in memo_, or -1
  /// A Permuted root whose child's keys follow from its bounds alone (Swin,
  /// NATTEN in the fused backend's tiles): their tape slots, the key of the
  /// renumbered rows evalPermuted keeps per thread; else empty.
  std::vector<int32_t> permSlots_;
  static constexpr size_t kMemoWays = 32; ///< cached sets per child and thread
  uint64_t id_ = 0;                       ///< this evaluator's, for the thread's cache
};

/// The values of a set's key and coordinate ranges' bounds at a row, where
/// they decide its keys (a set of ranges, unions, intersections and
/// differences whose bounds are integer arithmetic): two rows with equal
/// values have equal keys (a Swin window's queries), without evaluating
/// either.
class BoundValues {
public:
  explicit BoundValues(const SetNode &set);
  /// Whether the values decide the set's keys.
  bool decide() const { return tape_ != nullptr; }
  /// Appends row i's values at length n to `out`.
  void append(int64_t i, int64_t n, std::vector<int64_t> &out) const;

private:
  std::shared_ptr<const TermTape> tape_;
  std::vector<int32_t> slots_;
};

/// For each key position j < n, the last query row i < n whose keys (in
/// any of `sets`, each evaluated at length n) include j, or -1 when none
/// does: a generation cache whose next query is at position p never needs
/// a key j with last[j] < p again, as long as p < n and the sets do not
/// depend on n (dependsOnLength). One sweep from the last row down, each
/// row's keys met against the keys not yet claimed: O(n + intervals met).
std::vector<int64_t> lastReaders(const std::vector<SetRef> &sets, int64_t n);

} // namespace attnc::ir
