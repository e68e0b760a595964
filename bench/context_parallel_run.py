#!/usr/bin/env python3
"""Context parallelism measured: attnc.distributed on R ranks (processes on gloo over loopback, one
thread each) against one process with one thread running the same kernel on the whole sequence,
forward and forward + backward, per pattern. The table of docs/benchmarks.md, "Context
parallelism measured".

  python3 bench/context_parallel_run.py [--n 65536] [--d 64] [--heads 8] [--ranks 2]
                                        [--patterns fixed,local] [--reps 3] [--dtype f32|bf16]

Needs the attnc Python package and torch (the venv of scripts/test-python.sh). Times are medians
over --reps after one warm-up; a distributed time is the slowest rank's (barrier before each
step). "exchange" is the median time a rank spent in the two all_to_all calls of a forward +
backward step (its own, i.e. including waiting for the slower rank). Effective GFLOP/s count the
pattern's pairs: 4 nnz d forward, 14 nnz d forward + backward (4 + 10).
"""
import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import attnc
import attnc.distributed
import attnc.torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The patterns and parameters of the benchmark tables (bench/common.sh).
PARAMS = {"fixed": {"l": 128, "c": 8}, "strided": {"l": 128}, "local": {"w": 512}, "longformer": {},
          "bigbird": {}}


def kernel_of(name):
    return attnc.compile(os.path.join(ROOT, "patterns", f"{name}.attn"), **PARAMS[name])


def tensors(args):
    g = torch.Generator().manual_seed(0)
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    shape = (1, args.heads, args.n, args.d)
    return [torch.randn(*shape, generator=g).to(dtype) for _ in range(4)]


def timed(step, reps, sync=lambda: None):
    """Median seconds of `step` over `reps` runs after a warm-up; `sync` before each (a barrier)."""
    times = []
    for rep in range(reps + 1):
        sync()
        start = time.perf_counter()
        step()
        sync()
        if rep:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def single(args, name):
    kernel = kernel_of(name)
    kernel.num_threads = 1
    q, k, v, d_o = tensors(args)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def fwd():
        with torch.no_grad():
            attnc.torch.attention(q, k, v, kernel)

    def fwd_bwd():
        for x in leaves:
            x.grad = None
        attnc.torch.attention(*leaves, kernel).backward(d_o)

    return timed(fwd, args.reps), timed(fwd_bwd, args.reps)


def rank_main(rank, args, store, name, results):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=args.ranks,
                            timeout=datetime.timedelta(minutes=10))
    kernel = kernel_of(name)
    kernel.num_threads = 1
    shards = attnc.distributed.shard(kernel, args.n, args.ranks)
    q, k, v, d_o = (shards.take(x, rank) for x in tensors(args))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    exchange = []
    real = attnc.distributed._all_to_all

    def counted(*a, **kw):
        start = time.perf_counter()
        out = real(*a, **kw)
        exchange.append(time.perf_counter() - start)
        return out

    attnc.distributed._all_to_all = counted

    def fwd():
        with torch.no_grad():
            attnc.distributed.attention(kernel, q, k, v, shards)

    def fwd_bwd():
        for x in leaves:
            x.grad = None
        attnc.distributed.attention(kernel, *leaves, shards).backward(d_o)

    t_fwd = timed(fwd, args.reps, dist.barrier)
    exchange.clear()
    t_both = timed(fwd_bwd, args.reps, dist.barrier)
    # A step exchanges three times: K/V forward, K/V again and the dK/dV sums backward.
    per_step = [sum(exchange[i:i + 3]) for i in range(0, len(exchange), 3)][1:]
    mine = torch.tensor([t_fwd, t_both, statistics.median(per_step) if per_step else 0.0], dtype=torch.float64)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    if rank == 0:
        results.put((mine.tolist(), max(shards.pairs) / (sum(shards.pairs) / len(shards.pairs)), shards.layout,
                     max(shards.recv_rows)))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=65536)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--patterns", default="fixed,local")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"n = {args.n}, d = {args.d}, {args.heads} heads, {args.dtype}, {args.ranks} ranks x 1 thread (gloo, "
          f"loopback) vs 1 process x 1 thread; CPU ISA {attnc.cpu_isa()}; medians of {args.reps}")
    print()
    print("| pattern | layout | pairs max / mean | recv rows (max) | 1 proc fwd ms | R ranks fwd ms | fwd speed-up | "
          "1 proc fwd+bwd ms | R ranks fwd+bwd ms | fwd+bwd speed-up | exchange ms / step | "
          "GFLOP/s fwd+bwd (R ranks) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ctx = mp.get_context("spawn")
    for name in args.patterns.split(","):
        if name not in PARAMS:
            sys.exit(f"context_parallel_run.py: unknown pattern {name!r} (one of {', '.join(PARAMS)})")
        nnz = attnc.analyze(os.path.join(ROOT, "patterns", f"{name}.attn"), n=args.n, connectivity=False,
                            **PARAMS[name])["heads"][0]["nnz"] * args.heads
        one_fwd, one_both = single(args, name)
        results = ctx.SimpleQueue()
        with tempfile.TemporaryDirectory() as tmp:
            mp.start_processes(rank_main, args=(args, os.path.join(tmp, "store"), name, results),
                               nprocs=args.ranks, join=True, start_method="spawn")
        (t_fwd, t_both, t_exchange), imbalance, layout, recv = results.get()
        print(f"| {name} | {layout} | {imbalance:.4f} | {recv} | {one_fwd * 1e3:.0f} | {t_fwd * 1e3:.0f} | "
              f"{one_fwd / t_fwd:.2f}x | {one_both * 1e3:.0f} | {t_both * 1e3:.0f} | {one_both / t_both:.2f}x | "
              f"{t_exchange * 1e3:.1f} | {14 * nnz * args.d / t_both / 1e9:.0f} |", flush=True)


if __name__ == "__main__":
    main()
