#!/usr/bin/env bash
# The fused backend of two builds side by side, to catch a slowdown before it
# lands. For every benchmark row, `attnc bench --backend fused` of the old and
# the new build run alternately, ATTNC_COMPARE_ROUNDS times; a cell is the best
# of a build's medians. A row is flagged when the new build was slower by more
# than ATTNC_COMPARE_TOLERANCE percent in every round (one slow round is this
# machine's noise, ±10%). Usage, from the repository root:
#
#   git worktree add /tmp/base main
#   cmake -S /tmp/base -B /tmp/base/build -G Ninja -DCMAKE_BUILD_TYPE=Release
#   ninja -C /tmp/base/build attnc
#   bash bench/compare_builds.sh /tmp/base/build build
#
# Exit status 1 when a row is flagged. Environment: ATTNC_BENCH_NS (default
# "16384" here), ATTNC_BENCH_DS (default "64 128"), ATTNC_BENCH_THREADS
# (default 2), ATTNC_BENCH_REPEAT (runs per bench, default 3),
# ATTNC_COMPARE_ROUNDS (default 3), ATTNC_COMPARE_TOLERANCE (default 5),
# ATTNC_BENCH_DTYPE (f32 or bf16, default f32: the element type of the runs,
# for a change to the bf16 kernels), ATTNC_COMPARE_PASS (forward, the
# default, or backward: the time of attnc_run_backward from `bench
# --backward`, for a change to the backward's kernels).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: bash bench/compare_builds.sh OLD-BUILD-DIR NEW-BUILD-DIR" >&2
  exit 2
fi
old=$1/tools/attnc/attnc
ATTNC_BENCH_NS=${ATTNC_BENCH_NS:-16384}
source "$(dirname "$0")/common.sh" "$2"
new=$attnc
for bin in "$old" "$new"; do
  if [ ! -x "$bin" ]; then
    echo "compare_builds: no attnc at $bin (build it first)" >&2
    exit 2
  fi
done
repeat=${ATTNC_BENCH_REPEAT:-3}
dtype=${ATTNC_BENCH_DTYPE:-f32}
rounds=${ATTNC_COMPARE_ROUNDS:-3}
tolerance=${ATTNC_COMPARE_TOLERANCE:-5}
pass=${ATTNC_COMPARE_PASS:-forward}
case $pass in
  forward) pass_flags=() field=ms ;;
  backward) pass_flags=(--backward) field=bwd_ms ;;
  *)
    echo "compare_builds: ATTNC_COMPARE_PASS is forward or backward, not '$pass'" >&2
    exit 2
    ;;
esac
flagged=0
fused_ms() { # BINARY NAME N D [-D k=v ...]: the fused backend's median in ms (of the pass compared)
  local bin=$1 name=$2 n=$3 d=$4
  shift 4
  "$bin" bench "patterns/$name.attn" "$@" --n "$n" --d "$d" --batch 1 --heads 8 --threads "$threads" \
    --repeat "$repeat" --backend fused --dtype "$dtype" "${pass_flags[@]}" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["results"][0][sys.argv[1]])' "$field"
}
echo "| pattern | n | d | old $pass ms ($dtype) | new ms | new / old | rounds slower by > ${tolerance}% | |"
echo "|---|---|---|---|---|---|---|---|"
compare_row() { # NAME N D [-D k=v ...]
  local name=$1 n=$2 d=$3 r a b olds=() news=() line
  shift 3
  for ((r = 0; r < rounds; ++r)); do
    a=$(fused_ms "$old" "$name" "$n" "$d" "$@")
    b=$(fused_ms "$new" "$name" "$n" "$d" "$@")
    olds+=("$a")
    news+=("$b")
  done
  line=$(python3 - "$tolerance" "${olds[*]}" "${news[*]}" <<'PY'
import sys
tol = float(sys.argv[1]) / 100
old = [float(x) for x in sys.argv[2].split()]
new = [float(x) for x in sys.argv[3].split()]
slower = sum(b > a * (1 + tol) for a, b in zip(old, new))
flag = "**slower**" if slower == len(old) else ""
print(f"{min(old):.2f} | {min(new):.2f} | {min(new) / min(old):.3f} | {slower}/{len(old)} | {flag}")
PY
)
  echo "| $name | $n | $d | $line"
  case $line in *slower*) flagged=1 ;; esac
}
each_row compare_row
exit $flagged
