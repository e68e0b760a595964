#!/usr/bin/env python3
"""PyTorch peers for docs/benchmarks.md: scaled_dot_product_attention with a
boolean mask, and flex_attention (compiled) with the same mask_mod and its
create_block_mask, on the CPU, float32, [batch, heads, n, d]; and, in the same
process, attnc through its Python package (`import attnc`, where it is
installed: python/README.md), kernel(q, k, v) on the same tensors, with each
row's largest difference between attnc's O and flex_attention's (the patterns
here are written independently of patterns/*.attn, so that is a check of both).

The patterns are written here again, independently, as mask_mods. Effective
GFLOP/s uses the same definition as `attnc bench`: 4 * nnz * d * batch * heads
/ time, nnz = pairs of the pattern per head. Optional: needs `pip install torch`.

  python3 bench/peers.py --n 4096 --d 64 --threads 2 [--patterns fixed,strided] [--backward]

The shapes of `attnc bench` too: --kv-heads H_kv (grouped-query attention:
SDPA's and flex_attention's enable_gqa), --queries NQ (the last NQ of --n
positions, bottom-right aligned as attnc aligns them: the mask's rows are the
square's last rows) and --varlen L1,L2,... (packed sequences, each attending
within itself: flex_attention with a document mask_mod; SDPA would need the
whole packed square's mask, so it is skipped).

With --backward it also times forward + backward (O.backward(dO), the
gradients of sum(O * dO) for Q, K and V) of both peers, and reports the
backward alone as the difference: bwd_ms = fwdbwd_ms - the forward's ms, and
bwd_gflops = 10 * nnz * d * batch * heads / bwd_ms (attnc bench --backward's
definition).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def mask_mods():
    def fixed(l=128, c=8):
        return lambda b, h, i, j: (j <= i) & ((j // l == i // l) | (j % l >= l - c))

    def strided(l=128):
        return lambda b, h, i, j: (j <= i) & ((i - j <= l) | ((i - j) % l == 0))

    def local(w=512):
        return lambda b, h, i, j: (j <= i) & (i - j < w)

    def longformer(w=256, g=4):
        return lambda b, h, i, j: ((i - j).abs() <= w) | (j < g) | (i < g)

    def bigbird(n, b=64, g=2, r=3, seed=1234):
        # random_blocks(b, r, seed): the same splitmix64 + Floyd draw as attnc
        # (plan/lib/Term.cpp randomBlocksOf), one draw per query block.
        nb = (n + b - 1) // b
        rand = torch.zeros(nb, nb, dtype=torch.bool)
        for qb in range(nb):
            rand[qb, random_blocks(seed, qb, r, nb)] = True
        return lambda bb, h, i, j: ((i // b - 1 <= j // b) & (j // b <= i // b + 1)) | (j < g * b) | (
            i < g * b) | rand[i // b, j // b]

    return {"fixed": fixed(), "strided": strided(), "local": local(), "longformer": longformer(),
            "bigbird": bigbird}


def random_blocks(seed, query_block, count, num_blocks):
    """`count` distinct blocks in [0, num_blocks) for one query block."""
    if count >= num_blocks:
        return list(range(num_blocks))
    m64 = (1 << 64) - 1
    state = ((seed * 0x9E3779B97F4A7C15) & m64) ^ ((query_block + 0x632BE59BD9B4E019) & m64)
    out = []
    for k in range(num_blocks - count, num_blocks):
        state = (state + 0x9E3779B97F4A7C15) & m64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m64
        z ^= z >> 31
        pick = z % (k + 1)
        out.append(k if pick in out else pick)
    return sorted(out)


# The benchmark rows' parameters (bench/common.sh), the mask_mods' defaults above.
ATTNC_PARAMS = {"fixed": {"l": 128, "c": 8}, "strided": {"l": 128}, "local": {"w": 512},
                "longformer": {"w": 256, "g": 4}, "bigbird": {"b": 64, "g": 2, "r": 3, "seed": 1234}}


def attnc_package():
    """The attnc package, or None (with a note) where it is not installed."""
    try:
        import attnc
        import attnc.torch  # noqa: F401 (registers the ops)
    except ImportError as e:
        print(f"peers.py: attnc is not importable ({e}); its columns are left out", file=sys.stderr)
        return None
    return attnc


def timed(fn, repeat):
    fn()  # warm-up (compiles flex_attention on first use)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--patterns", default="fixed,strided,local,longformer,bigbird")
    ap.add_argument("--backward", action="store_true", help="also time forward + backward")
    ap.add_argument("--no-sdpa", action="store_true", help="skip the dense masked SDPA (slow at large n)")
    ap.add_argument("--kv-heads", type=int, default=0, help="key/value heads (default: --heads)")
    ap.add_argument("--queries", type=int, default=0, help="queries: the last NQ of --n positions (default: n)")
    ap.add_argument("--varlen", default="", help="packed sequence lengths L1,L2,... (--n is their sum)")
    ap.add_argument("--no-attnc", action="store_true", help="leave out attnc (the Python package)")
    args = ap.parse_args()
    attnc = None if args.no_attnc else attnc_package()
    patterns_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "patterns")
    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.varlen.split(",")] if args.varlen else []
    n, d = (sum(lengths) if lengths else args.n), args.d
    nq = args.queries or n
    hkv = args.kv_heads or args.heads
    gqa = hkv != args.heads
    g = torch.Generator().manual_seed(1)
    shape = (args.batch, args.heads, nq, d)
    q = torch.randn(shape, generator=g)
    k, v = (torch.randn((args.batch, hkv, n, d), generator=g) for _ in range(2))
    first = n - nq  # the position of the first query
    if lengths:
        # Each packed token's sequence and its position in it.
        doc = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
        starts = torch.cumsum(torch.tensor([0] + lengths[:-1]), 0)
        pos = torch.arange(n) - starts[doc]
        args.no_sdpa = True
    for name in args.patterns.split(","):
        mod = mask_mods()[name]
        if lengths:
            # bigbird's random blocks depend on n: every sequence uses the longest's.
            inner = mod(max(lengths)) if name == "bigbird" else mod
            mod = lambda b, h, i, j, inner=inner: (doc[i] == doc[j]) & inner(b, h, pos[i], pos[j])
            nnz = 0
            for length in lengths:
                idx = torch.arange(length)
                nnz += int(inner(0, 0, idx[:, None], idx[None, :]).sum())
        else:
            if name == "bigbird":
                mod = mod(n)
            if first:
                mod = lambda b, h, i, j, square=mod: square(b, h, i + first, j)
            mask = mod(0, 0, torch.arange(nq)[:, None], torch.arange(n)[None, :])
            nnz = int(mask.sum())
        flops = 4.0 * nnz * d * args.batch * args.heads
        row = {"pattern": name, "n": n, "d": d, "nnz_per_head": nnz}
        if nq != n:
            row["queries"] = nq
        if gqa:
            row["kv_heads"] = hkv
        if lengths:
            row["varlen"] = lengths
        sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                                                                 enable_gqa=gqa)
        if not args.no_sdpa:
            row["sdpa_ms"] = timed(lambda: sdpa(q, k, v), args.repeat)
        # A packed batch's mask_mod indexes tensors: compiled, create_block_mask
        # evaluates it block by block instead of materialising n x n.
        block_mask = create_block_mask(mod, B=None, H=None, Q_LEN=nq, KV_LEN=n, device="cpu",
                                       _compile=bool(lengths))
        # Each row compiles afresh: after a row's failed backward (flex_attention has none on the
        # CPU) the next rows' compiled forwards ran 10-33x slower in one process without this.
        torch._dynamo.reset()
        compiled = torch.compile(flex_attention)
        row["flex_ms"] = timed(lambda: compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa), args.repeat)
        # Pairs flex_attention computes: every non-empty 128 x 128 block.
        kv_blocks = int(block_mask.kv_num_blocks.sum())
        if block_mask.full_kv_num_blocks is not None:
            kv_blocks += int(block_mask.full_kv_num_blocks.sum())
        bs = block_mask.BLOCK_SIZE[0] * block_mask.BLOCK_SIZE[1]
        row["flex_executed_over_useful"] = kv_blocks * bs / nnz
        if not args.no_sdpa:
            row["sdpa_gflops"] = flops / (row["sdpa_ms"] * 1e6)
        row["flex_gflops"] = flops / (row["flex_ms"] * 1e6)
        if attnc is not None:
            kernel = attnc.compile(os.path.join(patterns_dir, name + ".attn"), **ATTNC_PARAMS[name])
            kernel.num_threads = args.threads
            if lengths:
                # FlashAttention's packed layout: [total, heads, d] views of the same tensors.
                cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
                ours = lambda q, k, v: attnc.torch.attention_varlen(
                    q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), cu,
                    kernel=kernel).transpose(0, 1).unsqueeze(0)
            else:
                ours = kernel
            row["attnc_ms"] = timed(lambda: ours(q, k, v), args.repeat)
            row["attnc_gflops"] = flops / (row["attnc_ms"] * 1e6)
            flex_o = compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)
            row["attnc_max_abs_diff_vs_flex"] = float((ours(q, k, v) - flex_o).abs().max())
        if args.backward:
            bwd_flops = 10.0 * nnz * d * args.batch * args.heads
            qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))
            d_o = torch.randn(shape, generator=g)
            peers = [("flex", lambda: compiled(qg, kg, vg, block_mask=block_mask, enable_gqa=gqa))]
            if not args.no_sdpa:
                peers.append(("sdpa", lambda: sdpa(qg, kg, vg)))
            if attnc is not None:
                peers.append(("attnc", lambda: ours(qg, kg, vg)))
            grads = {}
            for peer, forward in peers:
                def step():
                    for x in (qg, kg, vg):
                        x.grad = None
                    forward().backward(d_o)
                try:
                    row[peer + "_fwdbwd_ms"] = timed(step, args.repeat)
                except (NotImplementedError, RuntimeError) as e:
                    # (torch 2.x: "FlexAttention does not support backward on CPU")
                    row[peer + "_bwd_error"] = str(e).splitlines()[0]
                    continue
                grads[peer] = [x.grad.clone() for x in (qg, kg, vg)]
                row[peer + "_bwd_ms"] = row[peer + "_fwdbwd_ms"] - row[peer + "_ms"]
                row[peer + "_bwd_gflops"] = bwd_flops / (row[peer + "_bwd_ms"] * 1e6)
            if "attnc" in grads and "sdpa" in grads:
                row["attnc_grad_max_abs_diff_vs_sdpa"] = max(
                    float((a - b).abs().max()) for a, b in zip(grads["attnc"], grads["sdpa"]))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
