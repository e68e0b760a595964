#!/usr/bin/env python3
"""Context parallelism, the analytic table of docs/benchmarks.md: for every
benchmark pattern at n positions shared out to R ranks (`attnc analyze
--ranks R --json`), the pairs per rank (max / mean) and the K/V bytes the
busiest rank receives forward and backward, beside ring attention's (every
rank receives the K and V of every other: n (R - 1) / R rows forward; in the
backward pass those again and as many rows of dK and dV partial sums).

  python3 bench/context_parallel.py [--build build] [--n 1048576] [--d 128] [--kv-heads 8]
                                    [--dtype bf16] [--ranks 4,8,16,64] [--json]

Prints a Markdown table (or one JSON object per row with --json). Needs only
the attnc binary of a build. The measured half (ranks exchanging K and V with
attnc.distributed) is bench/context_parallel_run.py.
"""
import argparse
import json
import os
import subprocess
import sys

# The patterns and parameters of the benchmark tables (bench/common.sh).
CASES = [
    ("fixed", ["-D", "l=128", "-D", "c=8"]),
    ("strided", ["-D", "l=128"]),
    ("local", ["-D", "w=512"]),
    ("longformer", []),
    ("bigbird", []),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build", help="the build directory whose tools/attnc/attnc runs")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="bf16")
    ap.add_argument("--ranks", default="4,8,16,64")
    ap.add_argument("--json", action="store_true", help="one JSON object per row instead of the table")
    args = ap.parse_args()
    attnc = os.path.join(args.build, "tools", "attnc", "attnc")
    if not os.access(attnc, os.X_OK):
        sys.exit(f"context_parallel.py: no attnc at {attnc} (build it, or pass --build)")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not args.json:
        print("| pattern | R | pairs max / mean | recv rows fwd (max) | MiB fwd (max) | ring MiB fwd | fwd vs ring | "
              "MiB bwd (max) | ring MiB bwd | bwd vs ring | positions of the busiest rank | seconds |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, defines in CASES:
        for ranks in (int(r) for r in args.ranks.split(",")):
            cmd = [attnc, "analyze", os.path.join(root, "patterns", f"{name}.attn"), *defines, "--n", str(args.n),
                   "--ranks", str(ranks), "--d", str(args.d), "--kv-heads", str(args.kv_heads), "--dtype",
                   args.dtype, "--no-connectivity", "--json"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"context_parallel.py: {' '.join(cmd)} failed: {out.stderr}")
            doc = json.loads(out.stdout)
            cp = doc["context_parallel"]
            fwd, bwd = max(cp["forward_bytes"]), max(cp["backward_bytes"])
            busiest = max(range(ranks), key=lambda r: cp["forward_bytes"][r])
            row = {"pattern": name, "n": args.n, "ranks": ranks, "pairs_max_over_mean": cp["pairs_max_over_mean"],
                   "recv_rows_max": max(cp["recv_rows"]), "forward_bytes_max": fwd, "backward_bytes_max": bwd,
                   "ring_forward_bytes": cp["ring_forward_bytes"], "ring_backward_bytes": cp["ring_backward_bytes"],
                   "busiest_rank_positions": sum(b - a for a, b in cp["ranges"][busiest]),
                   "seconds": doc["seconds"]}
            if args.json:
                print(json.dumps(row))
                continue
            mib = 1 << 20
            print(f"| {name} | {ranks} | {row['pairs_max_over_mean']:.4f} | {row['recv_rows_max']} | {fwd / mib:.1f} | "
                  f"{cp['ring_forward_bytes'] / mib:.1f} | {fwd / cp['ring_forward_bytes']:.4f} | {bwd / mib:.1f} | "
                  f"{cp['ring_backward_bytes'] / mib:.1f} | {bwd / cp['ring_backward_bytes']:.4f} | "
                  f"{row['busiest_rank_positions']} | {doc['seconds']:.2f} |")


if __name__ == "__main__":
    main()
