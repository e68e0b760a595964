#!/usr/bin/env bash
# The shapes real models use (docs/benchmarks.md, "Grouped heads, decoding,
# varlen"): `attnc bench --peak` of the fused backend, and, when a Python
# with torch is given, bench/peers.py (flex_attention compiled with the same
# shapes; SDPA with a boolean mask where the mask fits) in the same run.
# Prints Markdown tables. Usage, from the repository root after building:
#
#   ATTNC_PEERS_PYTHON=build-venv/bin/python bash bench/run_shapes.sh [build-dir] > /tmp/shapes.md
#
# Rows: grouped-query attention, 32 query heads over 8 key/value heads
# against the same 32 heads with their own K and V (n = 16384, d = 128);
# a decoding step, one query over nk = 32768 keys (d = 64, 8 heads) against
# a memcpy of the K and V rows it reads; a varlen batch of 16 sequences
# summing to 65536 tokens against one sequence of equal total work (the
# length whose pairs per head equal the batch's, found with `attnc analyze`).
# Environment: ATTNC_BENCH_THREADS (default 2), ATTNC_BENCH_REPEAT (default 5),
# ATTNC_PEERS_PYTHON (unset: no peers), ATTNC_PEERS_REPEAT (default 1: flex
# at 32 heads and n = 16384 takes tens of seconds a call on 2 cores).
set -euo pipefail
ATTNC_BENCH_NS=${ATTNC_BENCH_NS:-16384}
source "$(dirname "$0")/common.sh"
repeat=${ATTNC_BENCH_REPEAT:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
lengths=8192,512,4096,1024,6144,2048,3072,7680,768,5120,1536,2560,8192,3584,4608,6400
py=${ATTNC_PEERS_PYTHON:-}
bench() { # FILE PATTERN [bench args...]: one JSON line of the fused backend
  local file=$1 name=$2
  shift 2
  "$attnc" bench "patterns/$name.attn" "$@" --threads "$threads" --repeat "$repeat" --backend fused --peak \
    --json >> "$out/$file"
}
peers() { # FILE [peers.py args...]
  local file=$1
  shift
  if [ -n "$py" ]; then
    "$py" "$(dirname "$0")/peers.py" --no-attnc --threads "$threads" --repeat "${ATTNC_PEERS_REPEAT:-1}" "$@" \
      >> "$out/$file" 2>/dev/null ||
      echo '{"error": "peers.py failed"}' >> "$out/$file"
  fi
}
# The single-sequence length with as many pairs per head as the varlen batch.
equal_work_n() { # PATTERN PARAMS...
  local name=$1
  shift
  python3 - "$attnc" "$name" "$lengths" "$@" <<'PY'
import json, subprocess, sys
attnc, name, lengths, params = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")], sys.argv[4:]
def nnz(n):
    out = subprocess.run([attnc, "analyze", f"patterns/{name}.attn", *params, "--n", str(n), "--json",
                          "--no-connectivity"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["heads"][0]["nnz"]
want = sum(nnz(n) for n in lengths)
lo, hi = 1, sum(lengths)
while lo < hi:
    mid = (lo + hi) // 2
    lo, hi = (mid + 1, hi) if nnz(mid) < want else (lo, mid)
print(lo)
PY
}

for c in "fixed -D l=128 -D c=8" "local -D w=512"; do
  set -- $c
  name=$1
  shift
  for kv in 32 8; do
    bench gqa "$name" "$@" --n 16384 --d 128 --heads 32 --kv-heads "$kv"
    peers gqa_peers --patterns "$name" --n 16384 --d 128 --heads 32 --kv-heads "$kv" --no-sdpa
  done
  bench decode "$name" "$@" --n 32768 --queries 1 --d 64 --heads 8
  peers decode_peers --patterns "$name" --n 32768 --queries 1 --d 64 --heads 8
  bench varlen "$name" "$@" --varlen "$lengths" --d 64 --heads 8
  peers varlen_peers --patterns "$name" --varlen "$lengths" --d 64 --heads 8
  n_equal=$(equal_work_n "$name" "$@")
  bench varlen_single "$name" "$@" --n "$n_equal" --d 64 --heads 8
done

python3 - "$out" "$threads" <<'PY'
import json, os, sys
out, threads = sys.argv[1], sys.argv[2]
def load(name):
    path = os.path.join(out, name)
    return [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
def fused(r):
    return next(x for x in r["results"] if x["backend"] == "fused")
def flex(rows, **match):
    for p in rows:
        if all(p.get(k) == v for k, v in match.items()):
            return p
    return None
cell = lambda x, fmt: "—" if x is None else fmt % x
gqa, gp = load("gqa"), load("gqa_peers")
print("Grouped-query attention (n = 16384, d = 128, 32 query heads):\n")
print("| pattern | K/V heads | fused ms | GFLOP/s | % FMA peak | time / 32-head MHA | flex ms |")
print("|---|---|---|---|---|---|---|")
mha = {}
for r in gqa:
    kv = r.get("kv_heads", r["heads"])
    f = fused(r)
    if kv == r["heads"]:
        mha[r["pattern"]] = f["ms"]
    p = flex(gp, pattern=r["pattern"], **({"kv_heads": kv} if kv != r["heads"] else {}))
    print(f"| {r['pattern']} | {kv} | {f['ms']:.1f} | {f['gflops']:.1f} | {100 * f['fwd_share']:.0f}% | "
          f"{f['ms'] / mha[r['pattern']]:.3f} | {cell(p and p.get('flex_ms'), '%.1f')} |")
print("\nDecoding step (one query, nk = 32768, d = 64, 8 heads):\n")
print("| pattern | K/V rows read per head | MB read | fused ms | memcpy ms | fused / memcpy | SDPA (mask) ms | flex ms |")
print("|---|---|---|---|---|---|---|---|")
for r in load("decode"):
    f = fused(r)
    p = flex(load("decode_peers"), pattern=r["pattern"])
    print(f"| {r['pattern']} | {r['distinct_keys'] // r['heads']} | {r['kv_bytes'] / 1e6:.2f} | {f['ms']:.3f} | "
          f"{r['memcpy_ms']:.3f} | {f['over_memcpy']:.2f} | {cell(p and p.get('sdpa_ms'), '%.2f')} | "
          f"{cell(p and p.get('flex_ms'), '%.2f')} |")
print("\nVariable-length batch (16 sequences, 65536 tokens, d = 64, 8 heads) against one sequence of equal work:\n")
print("| pattern | pairs per head | varlen ms | GFLOP/s | equal-work n | single ms | GFLOP/s | varlen / single time | flex varlen ms |")
print("|---|---|---|---|---|---|---|---|---|")
for v, s in zip(load("varlen"), load("varlen_single")):
    fv, fs = fused(v), fused(s)
    # Equal work: scale the single sequence's time to the batch's pairs.
    single_ms = fs["ms"] * v["nnz_per_head"] / s["nnz_per_head"]
    p = flex(load("varlen_peers"), pattern=v["pattern"])
    print(f"| {v['pattern']} | {v['nnz_per_head']} | {fv['ms']:.1f} | {fv['gflops']:.1f} | {s['n']} | "
          f"{fs['ms']:.1f} | {fs['gflops']:.1f} | {fv['ms'] / single_ms:.3f} | {cell(p and p.get('flex_ms'), '%.1f')} |")
peaks = [r["peak_gflops"] for name in ("gqa", "decode", "varlen", "varlen_single") for r in load(name)]
print(f"\nFMA peak measured in the same run: {min(peaks):.0f}-{max(peaks):.0f} GFLOP/s ({threads} threads); "
      "% FMA peak is each row's against its own measurement")
PY
