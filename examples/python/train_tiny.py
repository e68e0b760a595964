"""Trains a tiny causal transformer on the CPU twice, from the same initial weights on the
same batches: once with attnc's kernel for the Sparse Transformer's *fixed* pattern, once
with PyTorch's scaled_dot_product_attention and the same pattern as a boolean mask.
Prints both loss curves; they agree to float32 rounding, since the two compute the same
function (attnc only skips the masked pairs).

    python examples/python/train_tiny.py [--steps 300]

The task: each sequence repeats a random motif of 8 tokens, with a few tokens changed at
random; predicting the next token means looking 8 positions back, which the fixed pattern
(blocks of l = 16 with the last c = 4 columns of every block) allows within a block.
"""

from __future__ import annotations

import argparse
import pathlib
import time
from typing import Callable, Dict, List

import torch
import torch.nn as nn
import torch.nn.functional as F

import attnc
import attnc.torch

PATTERN = pathlib.Path(__file__).resolve().parents[2] / "patterns" / "fixed.attn"
L, C = 16, 4  # the pattern's block and summary columns

Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def fixed_mask(n: int, l: int = L, c: int = C) -> torch.Tensor:
    """The paper's definition, bool [n, n]: j <= i and (same block of l, or j in a block's last c)."""
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j <= i) & ((j // l == i // l) | (j % l >= l - c))


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, attend: Attend) -> None:
        super().__init__()
        self.heads, self.attend = heads, attend
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, dim = x.shape
        # Q, K and V as [batch, heads, n, head_dim] views of one projection: strided, not copied.
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        o = self.attend(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, n, dim))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, attend: Attend) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads, attend)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int, n: int, dim: int, heads: int, layers: int, attend: Attend) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Parameter(0.02 * torch.randn(n, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, attend) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens) + self.positions[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def batches(steps: int, batch: int, n: int, vocab: int, seed: int) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        motif = torch.randint(vocab, (batch, 8), generator=g)
        seq = motif.repeat(1, (n + 1 + 7) // 8)[:, : n + 1]
        noise = torch.rand(seq.shape, generator=g) < 0.05
        out.append(torch.where(noise, torch.randint(vocab, seq.shape, generator=g), seq))
    return out


def train(model: nn.Module, data: List[torch.Tensor], lr: float) -> List[float]:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for seq in data:
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def run(steps: int = 300, n: int = 64, batch: int = 16, dim: int = 32, heads: int = 2, layers: int = 2,
        vocab: int = 16, lr: float = 3e-3, seed: int = 0) -> Dict[str, List[float]]:
    """Both loss curves: {"attnc": [...], "sdpa": [...]}, one loss per step."""
    kernel = attnc.compile(PATTERN, l=L, c=C)
    mask = fixed_mask(n)
    attends: Dict[str, Attend] = {
        "attnc": lambda q, k, v: attnc.torch.attention(q, k, v, kernel),
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
    }
    data = batches(steps, batch, n, vocab, seed)
    torch.manual_seed(seed)
    initial = TinyTransformer(vocab, n, dim, heads, layers, attends["attnc"]).state_dict()
    curves = {}
    for name, attend in attends.items():
        model = TinyTransformer(vocab, n, dim, heads, layers, attend)
        model.load_state_dict(initial)
        start = time.perf_counter()
        curves[name] = train(model, data, lr)
        print(f"{name:>5}: {steps} steps in {time.perf_counter() - start:.1f} s")
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    curves = run(steps=args.steps, seed=args.seed)
    print(f"{'step':>5} {'attnc':>9} {'sdpa+mask':>10} {'difference':>11}")
    for step in list(range(0, args.steps, 25)) + [args.steps - 1]:
        a, s = curves["attnc"][step], curves["sdpa"][step]
        print(f"{step:>5} {a:>9.5f} {s:>10.5f} {a - s:>11.2e}")
    worst = max(abs(a - s) for a, s in zip(curves["attnc"], curves["sdpa"]))
    print(f"largest difference over {args.steps} steps: {worst:.2e}")


if __name__ == "__main__":
    main()
