#!/usr/bin/env python3
"""Image and video patterns beside PyTorch's flex_attention on the CPU, in one process: NATTEN (7 x 7 on 64 x 64
and 13 x 13 on 128 x 128, tokens in raster order: patterns/natten2d.attn), attention-gym's tiled NATTEN (the
same canvas with tokens laid out in 8 x 8 tiles, as NATTEN-style tiling passes them:
patterns/natten2d_tiled.attn), Swin's shifted windows (patterns/swin.attn) and sliding-tile attention in 3-D
(24 x 24 x 24, kernel 12, tiles of 4: patterns/sta3d.attn). float32 [1, heads, n, d]; attnc through its Python
package (kernel(q, k, v), the forward and, with autograd, forward + backward), flex_attention compiled with
the same mask (attention-gym's mask_mods where it has them) and its create_block_mask, built once (the mask is
positional) and timed apart. Effective GFLOP/s = 4 * nnz * d * heads / forward time (14 * ... / forward +
backward), nnz counted from the mask; each row's largest difference between attnc's O and flex_attention's is
printed.

    build-b-venv/bin/python bench/peers_grid.py [--cases natten64,tiled_natten64,natten128,swin,sta3d]
        [--d 64] [--heads 8] [--threads 2] [--repeat 3]

Needs torch and attn-gym (scripts/test-python.sh installs both into the test venv).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from attn_gym import masks as gym
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import attnc

PATTERNS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "patterns")


def swin_mask_mod(h, w, m, s):
    """patterns/swin.attn's windows, written again: windows of m x m starting at -s on both axes."""
    def mod(b, hd, i, j):
        return (((j // w + m - s) // m == (i // w + m - s) // m) &
                ((j % w + m - s) // m == (i % w + m - s) // m))
    return mod


def cases():
    return {
        "natten64": ("NATTEN 7x7, 64x64 canvas", 64 * 64, lambda: attnc.compile(
            os.path.join(PATTERNS, "natten2d.attn"), H=64, W=64, K=7), gym.generate_natten(64, 64, 7, 7)),
        "tiled_natten64": ("NATTEN 7x7, 64x64, tokens in 8x8 tiles", 64 * 64,
                           lambda: attnc.compile(
            os.path.join(PATTERNS, "natten2d_tiled.attn"), H=64, W=64, K=7, TH=8, TW=8),
                           gym.generate_tiled_natten(64, 64, 7, 7, 8, 8)),
        "natten128": ("NATTEN 13x13, 128x128 canvas", 128 * 128, lambda: attnc.compile(
            os.path.join(PATTERNS, "natten2d.attn"), H=128, W=128, K=13), gym.generate_natten(128, 128, 13, 13)),
        "swin": ("Swin 7x7 windows, shift 3, 56x56", 56 * 56, lambda: attnc.compile(
            os.path.join(PATTERNS, "swin.attn"), H=56, W=56, M=7, S=3), swin_mask_mod(56, 56, 7, 3)),
        "sta3d": ("STA 3-D 24x24x24, kernel 12, tiles 4", 24 ** 3, lambda: attnc.compile(
            os.path.join(PATTERNS, "sta3d.attn")),
                  gym.generate_sta_mask_mod_3d((24, 24, 24), (12, 12, 12), (4, 4, 4))),
    }


def timed(fn, repeat):
    fn()  # (warm-up: compiles, first-call row blocks)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="natten64,tiled_natten64,natten128,swin,sta3d")
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("ATTNC_NUM_THREADS", str(args.threads))
    print(f"torch {torch.__version__}, attnc kernels {attnc.cpu_isa()}, d = {args.d}, {args.heads} heads, "
          f"{args.threads} threads, median of {args.repeat}\n")
    print("| case | n | nnz / head | implementation | fwd ms | fwd GFLOP/s | fwd+bwd ms | fwd+bwd GFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    flex = torch.compile(flex_attention, dynamic=False)
    table = cases()
    for name in args.cases.split(","):
        what, n, make, mod = table[name]
        idx = torch.arange(n)
        nnz = int(mod(0, 0, idx[:, None], idx[None, :]).sum())
        g = torch.Generator().manual_seed(0)
        q, k, v, do = (torch.randn(1, args.heads, n, args.d, generator=g) for _ in range(4))
        kernel = make()
        start = time.perf_counter()
        o_attnc = kernel(q, k, v)  # (the first call: its row blocks for this n)
        first_ms = 1e3 * (time.perf_counter() - start)
        fwd = timed(lambda: kernel(q, k, v), args.repeat)
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        both = timed(lambda: torch.autograd.grad((kernel(qg, kg, vg) * do).sum(), (qg, kg, vg)), args.repeat)
        flops = 4.0 * nnz * args.d * args.heads
        print(f"| {what} | {n} | {nnz // n} per row | attnc (fused; first call {first_ms:.0f} ms) | {fwd:.1f} | "
              f"{flops / fwd / 1e6:.1f} | {both:.1f} | {3.5 * flops / both / 1e6:.1f} |")
        start = time.perf_counter()
        block = create_block_mask(mod, 1, 1, n, n, device="cpu")
        mask_ms = 1e3 * (time.perf_counter() - start)
        o_flex = flex(q, k, v, block_mask=block)
        fwd = timed(lambda: flex(q, k, v, block_mask=block), args.repeat)
        diff = (o_flex - o_attnc).abs().max().item()
        print(f"| {what} | {n} | {nnz // n} per row | flex_attention (compiled; create_block_mask {mask_ms:.0f} ms) | "
              f"{fwd:.1f} | {flops / fwd / 1e6:.1f} | — | — |")
        print(f"<!-- {name}: max |O_attnc - O_flex| = {diff:.2e} -->", flush=True)


if __name__ == "__main__":
    main()
