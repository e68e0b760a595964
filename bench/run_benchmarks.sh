#!/usr/bin/env bash
# Runs `attnc bench` on the seed and library patterns and prints a Markdown
# table (the one in docs/benchmarks.md). Usage, from the repository root after
# building:
#
#   bash bench/run_benchmarks.sh [build-dir] > /tmp/table.md
#
# Environment: ATTNC_BENCH_NS (default "4096 16384"), ATTNC_BENCH_DS (default
# "64 128"), ATTNC_BENCH_THREADS (default 2), ATTNC_BENCH_REPEAT (default 3),
# ATTNC_BENCH_DENSE_MAX_N (dense baseline only up to this n; default 16384).
set -euo pipefail
source "$(dirname "$0")/common.sh"
repeat=${ATTNC_BENCH_REPEAT:-3}
dense_max=${ATTNC_BENCH_DENSE_MAX_N:-16384}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
bench_row() { # NAME N D [-D k=v ...]
  local name=$1 n=$2 d=$3 backends=fused,halide,sparsifier
  shift 3
  if [ "$n" -le "$dense_max" ]; then backends=$backends,dense; fi
  "$attnc" bench "patterns/$name.attn" "$@" --n "$n" --d "$d" --batch 1 --heads 8 \
    --threads "$threads" --repeat "$repeat" --backend "$backends" --json >> "$tmp"
}
each_row bench_row
python3 - "$tmp" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
print("| pattern | n | d | fused ms | fused GFLOP/s | fused exec/useful | halide ms | halide GFLOP/s | halide exec/useful | sparsifier ms | sparsifier GFLOP/s | dense ms | dense GFLOP/s | dense exec/useful | fused vs halide | fused vs sparsifier | fused vs dense |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    res = {x["backend"]: x for x in r["results"]}
    def cell(b, key, fmt):
        x = res.get(b)
        if x is None or key not in x:
            return "—"
        return fmt % x[key]
    def ratio(b):
        if b not in res or "ms" not in res[b] or "ms" not in res.get("fused", {}):
            return "—"
        return "%.1fx" % (res[b]["ms"] / res["fused"]["ms"])
    print(f"| {r['pattern']} | {r['n']} | {r['d']} | {cell('fused','ms','%.2f')} | {cell('fused','gflops','%.1f')} | "
          f"{cell('fused','executed_over_useful','%.2f')} | {cell('halide','ms','%.2f')} | {cell('halide','gflops','%.1f')} | "
          f"{cell('halide','executed_over_useful','%.2f')} | {cell('sparsifier','ms','%.2f')} | {cell('sparsifier','gflops','%.1f')} | "
          f"{cell('dense','ms','%.1f')} | {cell('dense','gflops','%.1f')} | {cell('dense','executed_over_useful','%.1f')} | "
          f"{ratio('halide')} | {ratio('sparsifier')} | {ratio('dense')} |")
PY
