#!/usr/bin/env bash
# ctest Bench.DataPatterns.Json: attnc_bench_data's --json output is one JSON
# document with a row per pattern and backend, its times positive, and
# --forward-only leaves out the forward + backward fields. Small n, so that
# it checks the output, not the speed. Usage: check_bench_data.sh BINARY
set -euo pipefail
bin=$1
check() { # $1: forward-only (0/1); the rest: the bench's flags
  local fwd_only=$1
  shift
  "$bin" --n 256 --heads 2 --repeat 1 --dense-max-n 256 --json "$@" | python3 -c '
import json, sys
doc = json.load(sys.stdin)
fwd_only = sys.argv[1] == "1"
rows = doc["rows"]
assert doc["forward_only"] == fwd_only, doc["forward_only"]
assert doc["peak_gflops"] > 0 and doc["kernels"], doc
want = {(p, b) for p in ("lsh", "nsa", "topk", "document") for b in ("fused", "dense")}
got = {(r["pattern"], r["backend"]) for r in rows}
assert got == want, got
for r in rows:
    assert r["fwd_ms"] > 0 and r["fwd_gflops"] > 0, r
    assert ("step_ms" in r) != fwd_only, r
    if not fwd_only:
        assert r["step_ms"] > r["fwd_ms"], r
print("ok:", len(rows), "rows", "(forward only)" if fwd_only else "")
' "$fwd_only"
}
check 0
check 1 --forward-only
