#!/usr/bin/env python3
"""Patterns that read data against their PyTorch peers, in one process, CPU, float32, with NEW data at
every call (the data of training changes every step, so its planning is inside the time):

- attnc (the Python package): ``kernel(q, k, v, **inputs)`` on patterns/lsh.attn, nsa.attn, topk.attn and
  document.attn; forward, and forward + backward through autograd;
- ``flex_attention`` (compiled) with a ``mask_mod`` that reads the same tensors, and its
  ``create_block_mask`` at every call (the mask changes with the data);
- ``scaled_dot_product_attention`` with the dense boolean mask built from the data (up to --sdpa-max-n:
  its mask and scores are n x n per head);
- for lsh, Hugging Face transformers' Reformer ``LSHSelfAttention`` layer for the same n, heads, d, buckets
  and rounds (its own hashing, sorting and chunking; the layer includes its q/k/v projections), where
  transformers is installed (``pip install transformers``; no weights are downloaded).

Effective GFLOP/s = 4 * nnz * d * batch * heads / forward time, 14 * nnz * d * ... / forward + backward time,
nnz counted exactly from each call's data (the pattern's pairs, as attnc bench counts them).

  python3 bench/peers_data.py --n 16384 --d 64 --heads 8 --threads 2 [--patterns lsh,nsa] [--backward]

The mask_mods below are written here again, independently of patterns/*.attn, and each row also prints
the largest difference between attnc's O and flex_attention's on the first call's data (a check of both).
"""
import argparse
import os
import statistics
import sys
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

BUCKETS, B_BLOCK, SEL_K, WINDOW, TOP_K = 64, 64, 8, 64, 64


def make_data(pattern, n, heads, g):
    """New inputs for one call: a dict of int64 tensors, as attnc takes them ([H, ...] per head)."""
    if pattern == "lsh":
        return {"b0": torch.randint(0, BUCKETS, (1, heads, n), generator=g),
                "b1": torch.randint(0, BUCKETS, (1, heads, n), generator=g)}
    if pattern == "nsa":
        blocks = (n + B_BLOCK - 1) // B_BLOCK
        sel = torch.full((1, heads, blocks, SEL_K), -1, dtype=torch.int64)
        for r in range(blocks):
            picks = torch.randperm(r + 1, generator=g)[:SEL_K]
            sel[0, :, r, :picks.numel()] = picks
        return {"sel": sel}
    if pattern == "topk":
        # k distinct earlier tokens per query: ranks of random keys among positions <= i.
        top = torch.full((1, heads, n, TOP_K), -1, dtype=torch.int64)
        scores = torch.rand((heads, n, n), generator=g) if n <= 4096 else None
        for i in range(n):
            if scores is not None:
                top[0, :, i, :min(TOP_K, i + 1)] = scores[:, i, :i + 1].topk(min(TOP_K, i + 1), dim=-1).indices
            else:
                top[0, :, i, :min(TOP_K, i + 1)] = torch.randint(0, i + 1, (heads, min(TOP_K, i + 1)), generator=g)
        return {"top": top}
    if pattern == "document":
        doc, start, ident = torch.empty(n, dtype=torch.int64), 0, 0
        while start < n:
            length = min(n - start, 512 + int(torch.randint(0, 3585, (1,), generator=g)))
            doc[start:start + length] = ident
            start, ident = start + length, ident + 1
        return {"doc": doc.view(1, 1, n)}
    raise ValueError(pattern)


def mask_mod(pattern, data):
    """The pattern as a mask_mod over the data tensors (flex_attention's convention)."""
    if pattern == "lsh":
        b0, b1 = data["b0"][0], data["b1"][0]
        # The self rule: i attends itself only when no earlier position shares either bucket, i.e. it is
        # the first of its bucket in both rounds.
        pos = torch.arange(b0.shape[1]).expand_as(b0)

        def first_of_bucket(b):
            first = torch.full((b.shape[0], BUCKETS), b.shape[1], dtype=torch.int64)
            first.scatter_reduce_(1, b, pos, reduce="amin")
            return first.gather(1, b) == pos

        lonely = first_of_bucket(b0) & first_of_bucket(b1)
        return lambda b, h, i, j: (j <= i) & ((((b0[h, j] == b0[h, i]) | (b1[h, j] == b1[h, i])) & (j != i)) |
                                              ((j == i) & lonely[h, i]))
    if pattern == "nsa":
        sel = data["sel"][0]
        return lambda b, h, i, j: (j <= i) & (((i - j) < WINDOW) | (sel[h, i // B_BLOCK] == j // B_BLOCK).any(-1))
    if pattern == "topk":
        top = data["top"][0]
        return lambda b, h, i, j: (j <= i) & (((i - j) < WINDOW) | (top[h, i] == j).any(-1))
    if pattern == "document":
        doc = data["doc"][0, 0]
        return lambda b, h, i, j: (j <= i) & (doc[j] == doc[i])
    raise ValueError(pattern)


def dense_mask(pattern, data, n, heads):
    """[H, n, n] bool: the pattern on every pair, from the data (for SDPA and for counting nnz)."""
    out = torch.empty((heads, n, n), dtype=torch.bool)
    j = torch.arange(n).view(1, n)
    if pattern in ("lsh", "document"):
        fn = mask_mod(pattern, data)
        i = torch.arange(n).view(n, 1)
        for h in range(heads):
            out[h] = fn(0, h, i, j)
        return out
    chunk = 32
    for h in range(heads):
        table = data["sel"][0, h] if pattern == "nsa" else data["top"][0, h]
        for r0 in range(0, n, chunk):
            i = torch.arange(r0, min(n, r0 + chunk)).view(-1, 1)
            if pattern == "nsa":
                hit = (table[i[:, 0] // B_BLOCK].unsqueeze(-1) == (j // B_BLOCK).unsqueeze(1)).any(1)
            else:
                hit = (table[i[:, 0]].unsqueeze(-1) == j.unsqueeze(1)).any(1)
            out[h, r0:r0 + i.shape[0]] = (j <= i) & (((i - j) < WINDOW) | hit)
    return out


def median_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=16384)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--patterns", default="lsh,nsa,topk,document")
    ap.add_argument("--backward", action="store_true", help="also forward + backward")
    ap.add_argument("--sdpa-max-n", type=int, default=8192, help="dense masked SDPA only up to this n")
    ap.add_argument("--flex-max-n", type=int, default=16384, help="flex_attention only up to this n")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = 64
    import attnc
    import attnc.torch  # noqa: F401
    here = os.path.dirname(os.path.abspath(__file__))
    n, d, H = args.n, args.d, args.heads
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn((1, H, n, d), generator=g) for _ in range(3))
    flex = torch.compile(flex_attention, dynamic=False)
    print(f"# peers_data.py: n={n} d={d} heads={H} f32, {args.threads} threads, torch {torch.__version__}, "
          f"attnc ISA {attnc.cpu_isa()}, median of {args.repeat}, new data every call")
    cols = "| pattern | peer | fwd ms | fwd GFLOP/s |" + (" fwd+bwd ms | fwd+bwd GFLOP/s |" if args.backward else "")
    print(cols + " note |")
    print("|---" * (cols.count("|") - 1 + 1) + "|")
    for pattern in args.patterns.split(","):
        kernel = attnc.compile(os.path.join(here, "..", "patterns", f"{pattern}.attn"))
        data0 = make_data(pattern, n, H, g)
        nnz = int(dense_mask(pattern, data0, n, H).sum()) if n <= 16384 else None
        flops = 4.0 * nnz * d if nnz else None

        def row(peer, fwd, step=None, note=""):
            gf = f"{flops / fwd / 1e6:.1f}" if flops and fwd else "—"
            line = f"| {pattern} | {peer} | {fwd:.1f} | {gf} |" if fwd else f"| {pattern} | {peer} | — | — |"
            if args.backward:
                sg = f"{3.5 * flops / step / 1e6:.1f}" if flops and step else "—"
                line += f" {step:.1f} | {sg} |" if step else " — | — |"
            print(line + f" {note} |", flush=True)

        datas = [make_data(pattern, n, H, g) for _ in range(args.repeat + 1)]
        it = iter(range(10 ** 9))

        def next_data():
            return datas[next(it) % len(datas)]

        # attnc
        def attnc_fwd():
            with torch.no_grad():
                kernel(q, k, v, **next_data())

        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))

        def attnc_step():
            kernel(qg, kg, vg, **next_data()).sum().backward()

        o_attnc = kernel(q, k, v, **data0)
        row("attnc (fused)", median_ms(attnc_fwd, args.repeat),
            median_ms(attnc_step, args.repeat) if args.backward else None)

        # flex_attention, its block mask made at every call from that call's data
        if n <= args.flex_max_n:
            def flex_fwd():
                data = next_data()
                bm = create_block_mask(mask_mod(pattern, data), 1, H, n, n, device="cpu")
                with torch.no_grad():
                    return flex(q, k, v, block_mask=bm)

            def flex_step():
                data = next_data()
                bm = create_block_mask(mask_mod(pattern, data), 1, H, n, n, device="cpu")
                flex(qg, kg, vg, block_mask=bm).sum().backward()

            bm0 = create_block_mask(mask_mod(pattern, data0), 1, H, n, n, device="cpu")
            diff = (flex(q, k, v, block_mask=bm0) - o_attnc).abs().max().item()
            note = f"max diff vs attnc {diff:.2e}"
            step = None
            if args.backward:
                try:
                    step = median_ms(flex_step, args.repeat)
                except NotImplementedError as e:  # torch's CPU flex_attention has no backward
                    note += f"; backward: {str(e).split('.')[0]}"
            row("flex_attention + create_block_mask", median_ms(flex_fwd, args.repeat), step, note)
        else:
            row("flex_attention + create_block_mask", None, None, f"n > --flex-max-n {args.flex_max_n}")

        # dense masked SDPA
        if n <= args.sdpa_max_n:
            def sdpa_fwd():
                mask = dense_mask(pattern, next_data(), n, H).unsqueeze(0)
                with torch.no_grad():
                    torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

            row("SDPA, dense boolean mask", median_ms(sdpa_fwd, args.repeat), None, "mask built per call")
        else:
            row("SDPA, dense boolean mask", None, None, f"n > --sdpa-max-n {args.sdpa_max_n}")

        if pattern == "lsh":
            try:
                from transformers import ReformerConfig
                from transformers.models.reformer.modeling_reformer import LSHSelfAttention
            except ImportError:
                row("transformers Reformer LSHSelfAttention", None, None, "transformers not installed")
                continue
            config = ReformerConfig(hidden_size=H * d, num_attention_heads=H, attention_head_size=d,
                                    num_buckets=BUCKETS, num_hashes=2, lsh_attn_chunk_length=BUCKETS,
                                    lsh_num_chunks_before=0, lsh_num_chunks_after=0, is_decoder=True,
                                    attn_layers=["lsh"], max_position_embeddings=n, axial_pos_shape=[n // 128, 128])
            layer = LSHSelfAttention(config).eval()
            hidden = torch.randn((1, n, H * d), generator=g)

            def reformer():
                with torch.no_grad():
                    layer(hidden)

            row("transformers Reformer LSHSelfAttention", median_ms(reformer, args.repeat), None,
                "its chunked approximation (2 rounds, 64 buckets, chunks of 64), with q/k/v projections")


if __name__ == "__main__":
    sys.exit(main())
