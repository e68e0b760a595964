#!/usr/bin/env bash
# Forward + backward of the benchmark rows (docs/benchmarks.md, "Gradients"):
# `attnc bench --backward --peak` for the fused backend and the dense masked
# baseline, and, when a Python with torch is given, bench/peers.py --backward
# (flex_attention compiled, forward + backward) in the same run. Prints a
# Markdown table. Usage, from the repository root after building:
#
#   ATTNC_PEERS_PYTHON=.venv/bin/python bash bench/run_backward.sh [build-dir] > /tmp/table.md
#
# Environment: as bench/run_benchmarks.sh (ATTNC_BENCH_NS, ATTNC_BENCH_DS,
# ATTNC_BENCH_THREADS, ATTNC_BENCH_REPEAT), ATTNC_BENCH_DENSE_MAX_N (the dense
# baseline, and PyTorch's SDPA with a boolean mask, only up to this n; default
# 4096: at 16384 the dense backward takes seconds per head and SDPA's n x n
# weights 8.6 GB), ATTNC_PEERS_PYTHON (a python with torch; unset: no peers).
# flex_attention has no backward on the CPU in the torch releases we ran
# (NotImplementedError): its column then says so, and SDPA is the peer.
set -euo pipefail
source "$(dirname "$0")/common.sh"
repeat=${ATTNC_BENCH_REPEAT:-3}
dense_max=${ATTNC_BENCH_DENSE_MAX_N:-4096}
ours=$(mktemp)
peers=$(mktemp)
trap 'rm -f "$ours" "$peers"' EXIT
bench_row() { # NAME N D [-D k=v ...]
  local name=$1 n=$2 d=$3 backends=fused
  shift 3
  if [ "$n" -le "$dense_max" ]; then backends=$backends,dense; fi
  "$attnc" bench "patterns/$name.attn" "$@" --n "$n" --d "$d" --batch 1 --heads 8 \
    --threads "$threads" --repeat "$repeat" --backend "$backends" --backward --peak --json >> "$ours"
  if [ -n "${ATTNC_PEERS_PYTHON:-}" ]; then
    local sdpa=--no-sdpa
    if [ "$n" -le "$dense_max" ]; then sdpa=; fi
    "$ATTNC_PEERS_PYTHON" "$(dirname "$0")/peers.py" --no-attnc --n "$n" --d "$d" --threads "$threads" \
      --repeat "$repeat" --patterns "$name" --backward $sdpa >> "$peers"
  fi
}
each_row bench_row
python3 - "$ours" "$peers" <<'PY'
import json, sys
ours = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
peers = {(p["pattern"], p["n"], p["d"]): p for p in map(json.loads, filter(str.strip, open(sys.argv[2])))}
print("| pattern | n | d | fused fwd ms | fused bwd ms | bwd/fwd | fused bwd GFLOP/s | % FMA peak | "
      "dense fwd+bwd ms | SDPA (mask) fwd+bwd ms | flex fwd ms | flex fwd+bwd | fused fwd+bwd vs dense | vs SDPA |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in ours:
    res = {x["backend"]: x for x in r["results"]}
    f = res["fused"]
    fused_total = f["fwd_lse_ms"] + f["bwd_ms"]
    dense = res.get("dense")
    dense_total = dense["fwd_lse_ms"] + dense["bwd_ms"] if dense and "bwd_ms" in dense else None
    p = peers.get((r["pattern"], r["n"], r["d"]))
    cell = lambda x, fmt: "—" if x is None else fmt % x
    print(f"| {r['pattern']} | {r['n']} | {r['d']} | {f['ms']:.2f} | {f['bwd_ms']:.2f} | {f['bwd_over_fwd']:.2f} | "
          f"{f['bwd_gflops']:.1f} | {100 * f['bwd_share']:.0f}% | {cell(dense_total, '%.1f')} | "
          f"{cell(p and p.get('sdpa_fwdbwd_ms'), '%.1f')} | {cell(p and p.get('flex_ms'), '%.1f')} | "
          f"{'no CPU backward' if p and 'flex_bwd_error' in p else cell(p and p.get('flex_fwdbwd_ms'), '%.1f')} | "
          f"{cell(dense_total and dense_total / fused_total, '%.1fx')} | "
          f"{cell(p and p.get('sdpa_fwdbwd_ms') and p['sdpa_fwdbwd_ms'] / fused_total, '%.1fx')} |")
print()
print(f"FMA peak measured in the same run: {min(r['peak_gflops'] for r in ours):.0f}-{max(r['peak_gflops'] for r in ours):.0f} GFLOP/s ({ours[0]['peak_threads']} threads, {ours[0]['peak_isa']}); % FMA peak is each row's against its own measurement")
PY
