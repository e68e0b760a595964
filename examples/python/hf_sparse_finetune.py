"""Trains a small Hugging Face transformers model (a Llama built in code, nothing downloaded) on the
CPU with a sparse attention pattern, draws its loss curve as a PNG, then generates greedily.

    python examples/python/hf_sparse_finetune.py [--steps 400] [--png hf_sparse_finetune_loss.png] [--threads 1]

The attention: ``attnc.transformers.register("attnc_sparse", pattern=...)`` replaces the model's
causal mask with a pattern (made causal): by default a local window of w = 8 keys plus g = 16
global tokens (the first 16 positions, which every query sees):

    pattern local_global { param w = 8  param g = 16  attend { j : i - j < w } | { j : j < g } }

The task: each sequence (128 tokens) is a random motif of 16 tokens repeated (vocabulary 256).
Predicting the next token means finding where the current token appeared in the motif and reading the
one after it, 15 positions back: a layer's window of 8 does not reach it, but the first copy of the
motif is the 16 global tokens, which every query sees. The model learns to read the globals (an
induction head over them): after a plateau at log(256) = 5.5 the loss falls, from about step 200, to
what the first, unpredictable, copy of the motif costs (about 0.7), and greedy generation continues a
new motif. Another pattern: ``--pattern PATH_OR_SOURCE --param name=value``.

400 steps take about a minute on two cores (``--threads 1`` where the cores are shared: torch's
threads wait for each other badly when other processes load the machine).

The PNG is drawn with matplotlib when it is installed, else by a small writer here (zlib + struct).
"""

from __future__ import annotations

import argparse
import math
import struct
import time
import zlib
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
import transformers

import attnc.transformers

LOCAL_GLOBAL = """pattern local_global {
  param w = 8     # the w most recent keys, i included
  param g = 16    # global tokens: positions 0 .. g-1, seen by every query
  attend { j : i - j < w } | { j : j < g }
}"""

VOCAB, PERIOD = 256, 16


def tiny_llama(max_positions: int = 4096, seed: int = 0) -> transformers.LlamaForCausalLM:
    """A small Llama (hidden 128, 4 layers, 4 query heads over 2 key/value heads, vocabulary 256),
    random weights, float32. No special tokens: generation runs until max_new_tokens."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=max_positions, attention_dropout=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).float()


def batch_of(batch: int, n: int, g: torch.Generator, period: int = PERIOD) -> torch.Tensor:
    """[batch, n] token ids: a random motif of `period` tokens per row, repeated."""
    motif = torch.randint(VOCAB, (batch, period), generator=g)
    return motif.repeat(1, (n + period - 1) // period)[:, :n]


def train(model: torch.nn.Module, steps: int, batch: int, n: int, lr: float, seed: int,
          log_every: int = 25) -> List[float]:
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))  # a short warm-up
    g = torch.Generator().manual_seed(seed)
    model.train()
    losses = []
    start = time.perf_counter()
    for step in range(steps):
        ids = batch_of(batch, n, g)
        loss = model(input_ids=ids, labels=ids).loss  # transformers shifts the labels itself
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        losses.append(loss.item())
        if step % log_every == 0 or step == steps - 1:
            print(f"step {step:>4}  loss {loss.item():.3f}  ({time.perf_counter() - start:.1f} s)", flush=True)
    return losses


def generate(model: torch.nn.Module, seed: int, shown: int = 24, new: int = 40) -> Dict[str, object]:
    """Greedy generation from a fresh motif and the first `shown - PERIOD` tokens of its repetition;
    the share of generated tokens that continue the motif."""
    g = torch.Generator().manual_seed(seed + 1)
    seq = batch_of(1, shown + new, g)
    prompt = seq[:, :shown]
    model.eval()
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False)
    generated, expected = out[0, shown:], seq[0, shown:]
    return {"prompt": prompt[0].tolist(), "generated": generated.tolist(), "expected": expected.tolist(),
            "accuracy": float((generated == expected).float().mean())}


# ---- the loss curve as a PNG ----------------------------------------------------------------

# A 3x5 pixel font for the axis labels: each glyph five rows of three bits.
_FONT = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001010010010",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", " ": "000000000000000",
    "l": "100100100100111", "o": "000111101101111", "s": "000111110011111", "t": "010111010010011",
    "e": "000111111100111", "p": "000111101111100",
}


def _png_bytes(pixels: List[bytearray], width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + bytes(row) for row in pixels)  # filter 0 on every row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _draw_png(path: str, curves: Sequence[Sequence[float]], colors: Sequence[tuple], width: int = 640,
              height: int = 400) -> None:
    """Line plots of `curves` (x: the step, y: the value) with axes and a few labelled ticks."""
    px = [bytearray(b"\xff" * (3 * width)) for _ in range(height)]

    def put(x: int, y: int, color: tuple) -> None:
        if 0 <= x < width and 0 <= y < height:
            px[y][3 * x:3 * x + 3] = bytes(color)

    def text(x: int, y: int, s: str, color: tuple = (0, 0, 0), scale: int = 2) -> None:
        for c in s:
            bits = _FONT.get(c, _FONT[" "])
            for r in range(5):
                for col in range(3):
                    if bits[3 * r + col] == "1":
                        for dy in range(scale):
                            for dx in range(scale):
                                put(x + col * scale + dx, y + r * scale + dy, color)
            x += 4 * scale

    left, right, top, bottom = 70, width - 20, 20, height - 50
    steps = max(len(c) for c in curves)
    top_value = max(max(c) for c in curves)
    y_max = max(1.0, math.ceil(top_value))
    sx = lambda s: left + round(s * (right - left) / max(1, steps - 1))  # noqa: E731
    sy = lambda v: bottom - round(min(max(v, 0.0), y_max) * (bottom - top) / y_max)  # noqa: E731
    for t in range(int(y_max) + 1):  # horizontal grid lines at every integer loss
        y = sy(t)
        for x in range(left, right + 1):
            put(x, y, (225, 225, 225))
        text(left - 12 - 8 * len(str(t)), y - 5, str(t))
    for x in range(left, right + 1):
        put(x, bottom, (0, 0, 0))
    for y in range(top, bottom + 1):
        put(left, y, (0, 0, 0))
    for s in (0, steps // 2, steps - 1):
        for y in range(bottom, bottom + 5):
            put(sx(s), y, (0, 0, 0))
        label = str(s + 1 if s == steps - 1 else s)
        text(sx(s) - 4 * len(label), bottom + 10, label)
    text((left + right) // 2 - 16, height - 20, "step")
    text(8, top, "loss")
    for curve, color in zip(curves, colors):
        prev = None
        for s, v in enumerate(curve):
            point = (sx(s), sy(v))
            if prev is not None:  # a line from prev to point, two pixels thick
                n = max(abs(point[0] - prev[0]), abs(point[1] - prev[1]), 1)
                for t in range(n + 1):
                    x = round(prev[0] + (point[0] - prev[0]) * t / n)
                    y = round(prev[1] + (point[1] - prev[1]) * t / n)
                    put(x, y, color)
                    put(x, y + 1, color)
            prev = point
    with open(path, "wb") as f:
        f.write(_png_bytes(px, width, height))


def smooth(values: Sequence[float], k: int = 10) -> List[float]:
    return [sum(values[max(0, i - k + 1):i + 1]) / (i + 1 - max(0, i - k + 1)) for i in range(len(values))]


def plot_losses(losses: Sequence[float], path: str, title: str) -> str:
    """The loss curve (and its 10-step moving average) as a PNG at `path`; returns what drew it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _draw_png(path, [losses, smooth(losses)], [(170, 200, 235), (20, 80, 170)])
        return "attnc's example PNG writer (matplotlib is not installed)"
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(losses, color="#aac8eb", label="loss")
    ax.plot(smooth(losses), color="#1450aa", label="10-step mean")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return "matplotlib"


# ---- the run --------------------------------------------------------------------------------


def run(steps: int = 400, batch: int = 16, n: int = 128, lr: float = 3e-3, seed: int = 0,
        pattern: str = LOCAL_GLOBAL, params: Optional[Dict[str, int]] = None,
        png: Optional[str] = "hf_sparse_finetune_loss.png", new_tokens: int = 40) -> Dict[str, object]:
    """Trains, plots and generates; returns {"losses", "png", "generation"}."""
    name = attnc.transformers.register("attnc_sparse", pattern=pattern, **(params or {}))
    model = tiny_llama(max_positions=max(n, PERIOD + 8 + new_tokens))
    model.set_attn_implementation(name)
    count = sum(p.numel() for p in model.parameters())
    print(f"model: Llama, {count / 1e6:.2f} M parameters, attn_implementation={name!r}; "
          f"{steps} steps of {batch} x {n} tokens")
    losses = train(model, steps, batch, n, lr, seed)
    if png:
        how = plot_losses(losses, png, f"{name}: a Llama on a sparse pattern")
        print(f"loss curve: {png} (drawn by {how})")
    result = generate(model, seed, new=new_tokens)
    print(f"loss: {sum(losses[:5]) / 5:.3f} (first 5 steps) -> {sum(losses[-20:]) / 20:.3f} (last 20)")
    print(f"prompt:    {result['prompt']}")
    print(f"generated: {result['generated']}")
    print(f"expected:  {result['expected']}")
    print(f"greedy generation continues the motif at {result['accuracy']:.0%} of {new_tokens} tokens")
    return {"losses": losses, "png": png, "generation": result}


def _param(text: str) -> tuple:
    key, _, value = text.partition("=")
    if not key or not value:
        raise argparse.ArgumentTypeError(f"expected name=value, got {text!r}")
    return key, int(value)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n", type=int, default=128, help="tokens per training sequence")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--new-tokens", type=int, default=40, help="tokens generated after training")
    parser.add_argument("--pattern", default=LOCAL_GLOBAL, help="a .attn file or a pattern's text")
    parser.add_argument("--param", type=_param, action="append", default=[], metavar="NAME=VALUE",
                        help="a parameter of the pattern (repeatable)")
    parser.add_argument("--png", default="hf_sparse_finetune_loss.png", help="where the loss curve goes ('' for none)")
    parser.add_argument("--threads", type=int, default=0, help="torch's threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    return run(steps=args.steps, batch=args.batch, n=args.n, lr=args.lr, seed=args.seed, pattern=args.pattern,
               params=dict(args.param), png=args.png or None, new_tokens=args.new_tokens)


if __name__ == "__main__":
    main()
