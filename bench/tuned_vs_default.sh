#!/usr/bin/env bash
# Tuned against default tile shapes, the table in docs/benchmarks.md. For
# each seed pattern, n and d: `attnc tune` in a fresh cache directory, then
# `attnc bench --backend fused` without the record and with it, alternately,
# ATTNC_TUNE_ROUNDS times; a cell is the best of the rounds' medians. Usage,
# from the repository root after building:
#
#   bash bench/tuned_vs_default.sh [build-dir] > /tmp/tuned.md
#
# Environment: ATTNC_BENCH_NS (default "4096 16384"), ATTNC_BENCH_DS (default
# "64 128"), ATTNC_BENCH_THREADS (default 2), ATTNC_BENCH_REPEAT (runs per
# bench, default 5), ATTNC_TUNE_ROUNDS (default 3), ATTNC_TUNE_MEASURE
# (candidates tune measures besides the default, default 3).
set -euo pipefail
source "$(dirname "$0")/common.sh"
repeat=${ATTNC_BENCH_REPEAT:-5}
rounds=${ATTNC_TUNE_ROUNDS:-3}
measure=${ATTNC_TUNE_MEASURE:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| pattern | n | d | default ms | default GFLOP/s | tuned shape | tuned ms | tuned GFLOP/s | tuned / default |"
echo "|---|---|---|---|---|---|---|---|---|"
tuned_row() { # NAME N D [-D k=v ...]
  local name=$1 n=$2 d=$3 shape
  shift 3
  rm -rf "$work/empty" "$work/tuned"
  mkdir -p "$work/empty" "$work/tuned"
  shape=$(ATTNC_CACHE_DIR="$work/tuned" "$attnc" tune "patterns/$name.attn" "$@" --n "$n" --d "$d" \
            --threads "$threads" --measure "$measure" --repeat "$repeat" 2>/dev/null |
          sed -n 's/^best tiles \([0-9x]*\):.*/\1/p')
  local bench=("$attnc" bench "patterns/$name.attn" "$@" --n "$n" --d "$d" --threads "$threads"
               --repeat "$repeat" --backend fused --json)
  : > "$work/runs"
  for _ in $(seq "$rounds"); do
    echo "default $(ATTNC_CACHE_DIR="$work/empty" "${bench[@]}")" >> "$work/runs"
    echo "tuned $(ATTNC_CACHE_DIR="$work/tuned" "${bench[@]}")" >> "$work/runs"
  done
  python3 - "$work/runs" "$name" "$n" "$d" "$shape" <<'PY'
import json, sys
runs, name, n, d, shape = sys.argv[1:]
best = {}
for line in open(runs):
    kind, js = line.split(" ", 1)
    r = json.loads(js)["results"][0]
    if kind not in best or r["ms"] < best[kind]["ms"]:
        best[kind] = r
a, b = best["default"], best["tuned"]
print(f"| {name} | {n} | {d} | {a['ms']:.2f} | {a['gflops']:.1f} | {shape} | {b['ms']:.2f} | "
      f"{b['gflops']:.1f} | {a['ms'] / b['ms']:.2f}x |")
PY
}
each_row tuned_row
