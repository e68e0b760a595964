"""Prefill and decode with grouped-query heads and a key/value cache, on attnc kernels.

    python examples/python/kv_cache_decoding.py

One attention layer with 8 query heads sharing 2 key/value heads (grouped-query
attention) and a sliding-window pattern (*local*, w = 16) serves three prompts of
different lengths: the prompts run as one packed variable-length batch
(attention_varlen, FlashAttention's [total, heads, d] layout with cu_seqlens), then each
sequence generates tokens one at a time, its single query attending over its cached keys
as the last position (nq = 1, bottom-right aligned: the pattern needs nothing else).
Each decoded row is checked against a full pass over the whole sequence.
"""

from __future__ import annotations

import pathlib

import torch

import attnc
import attnc.torch

PATTERN = pathlib.Path(__file__).resolve().parents[2] / "patterns" / "local.attn"
DIM, HQ, HKV, D = 64, 8, 2, 16


def main() -> None:
    torch.manual_seed(0)
    kernel = attnc.compile(PATTERN, w=16)
    wq, wk, wv = torch.randn(DIM, HQ * D) / DIM**0.5, torch.randn(DIM, HKV * D) / DIM**0.5, \
        torch.randn(DIM, HKV * D) / DIM**0.5

    def project(x: torch.Tensor):
        """[n, DIM] -> q [n, HQ, D], k and v [n, HKV, D]: views of the projections."""
        return (x @ wq).view(-1, HQ, D), (x @ wk).view(-1, HKV, D), (x @ wv).view(-1, HKV, D)

    prompts = [torch.randn(n, DIM) for n in (5, 23, 1)]
    lengths = [len(p) for p in prompts]
    cu_seqlens = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int32)

    # Prefill: every prompt in one call, no padding.
    q, k, v = project(torch.cat(prompts))
    o = attnc.torch.attention_varlen(q, k, v, cu_seqlens, kernel=kernel)
    print(f"prefill: {len(prompts)} prompts of {lengths} tokens -> O {list(o.shape)}")

    # Decode: per sequence, caches [1, HKV, n, D] grown one token at a time.
    worst = 0.0
    for s, prompt in enumerate(prompts):
        a, b = cu_seqlens[s].item(), cu_seqlens[s + 1].item()
        k_cache, v_cache = (x[a:b].permute(1, 0, 2)[None] for x in (k, v))
        tokens = [prompt]
        for _ in range(6):
            x = torch.randn(1, DIM)  # the next token's input (a model would derive it from o_t)
            q_t, k_t, v_t = (y.permute(1, 0, 2)[None] for y in project(x))
            k_cache, v_cache = torch.cat([k_cache, k_t], 2), torch.cat([v_cache, v_t], 2)
            o_t = attnc.torch.attention(q_t, k_cache, v_cache, kernel)  # [1, HQ, 1, D]
            tokens.append(x)
            # The same row from a full pass over the sequence so far.
            fq, fk, fv = (y.permute(1, 0, 2)[None] for y in project(torch.cat(tokens)))
            full = attnc.torch.attention(fq, fk, fv, kernel)
            worst = max(worst, (o_t - full[:, :, -1:]).abs().max().item())
        print(f"sequence {s}: {len(prompt)} prompt tokens + 6 decoded, cache {list(k_cache.shape)}")
    print(f"largest difference between decoding steps and full passes: {worst:.1e}")
    assert worst < 1e-5


if __name__ == "__main__":
    main()
