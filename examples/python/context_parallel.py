"""One sequence's attention on two ranks (context parallelism with attnc.distributed).

    python examples/python/context_parallel.py [--n 16384] [--ranks 2] [--pattern local]

starts the ranks itself (processes on gloo over loopback, as torchrun would on a cluster), gives each
its share of the positions, runs forward and backward across them, and checks O and the gradients
against one process computing the whole sequence.
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import attnc
import attnc.distributed
import attnc.torch

PATTERNS = pathlib.Path(__file__).resolve().parents[2] / "patterns"
PARAMS = {"local": {"w": 512}, "fixed": {"l": 128, "c": 8}, "longformer": {}, "bigbird": {}, "strided": {"l": 128}}


def rank_main(rank: int, world: int, store: str, n: int, pattern: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=5))
    kernel = attnc.compile(PATTERNS / f"{pattern}.attn", **PARAMS[pattern])
    kernel.num_threads = 1
    shards = attnc.distributed.shard(kernel, n, world)   # every rank gets the same plan

    # The whole sequence (the same seed on every rank); each rank keeps its positions.
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(1, 8, n, 64, generator=g) for _ in range(4))
    mine = [shards.take(x, rank).requires_grad_() for x in (q, k, v)]
    o = attnc.distributed.attention(kernel, *mine, shards)      # O of this rank's queries
    o.backward(shards.take(grad, rank))                          # dK, dV summed on their owners

    # The same on one process, for comparison.
    whole = [x.clone().requires_grad_() for x in (q, k, v)]
    o_ref = attnc.torch.attention(*whole, kernel)
    o_ref.backward(grad)
    err = max((a - shards.take(b, rank)).abs().max().item()
              for a, b in [(o, o_ref.detach())] + [(x.grad, y.grad) for x, y in zip(mine, whole)])
    errors = [None] * world
    dist.all_gather_object(errors, (shards.positions(rank), shards.pairs[rank], shards.recv_rows[rank], err))
    if rank == 0:
        print(f"{pattern}, n = {n}, {world} ranks ({shards.layout} layout):")
        for r, (positions, pairs, recv, e) in enumerate(errors):
            print(f"  rank {r}: {positions} positions {shards.ranges[r][:3]}{' ...' if len(shards.ranges[r]) > 3 else ''}, "
                  f"{pairs:.0f} pairs per head, received {recv} K/V rows; max |difference| from one process {e:.2e}")
    dist.destroy_process_group()
    assert err < 1e-4, f"rank {rank}: differs from one process by {err}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--pattern", choices=sorted(PARAMS), default="local")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(args.ranks, os.path.join(tmp, "store"), args.n, args.pattern), nprocs=args.ranks)


if __name__ == "__main__":
    main()
