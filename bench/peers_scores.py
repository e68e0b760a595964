#!/usr/bin/env python3
"""attnc's score modifiers (issue 41) against their PyTorch peers, in one process, CPU, float32,
batch 1, [1, heads, n, d], one markdown table:

1. alibi_local  ALiBi (score s + slope[h] * (j - i)) on a causal window of 96 keys: flex_attention
   (compiled) with that score_mod and a create_block_mask of the window; SDPA with a dense additive float
   mask (the bias, -inf outside the window), built at every call from slope (it is an input).
2. capped_fixed soft-capping (cap * tanh(s / cap), cap 20) on the Sparse Transformer's fixed pattern
   (l 64, c 8): flex_attention with that score_mod and the pattern's block mask; SDPA cannot soft-cap, so
   the dense baseline is an eager masked softmax in torch (scores, tanh, mask, softmax, matmul).
3. sink_window  a sink z[h] per head on a causal window of 128 keys: transformers' gpt-oss
   eager_attention_forward itself (the sink logits concatenated to the logits as a column, softmax, the
   column dropped) with the window as its additive mask; flex_attention's score_mod cannot express a sink
   (a term of the denominator, not a score), and its compiled CPU kernel does not return the log-sum-exp
   that would rescale its O afterwards (O * sigmoid(lse - z[h])).
4. t5_bias      T5's relative bias (patterns/t5_bias.attn: 32 buckets, max distance 128, the causal log
   bucketing) on causal attention: flex_attention with a score_mod that indexes a bucket table,
   precomputed per distance, by q_idx - kv_idx; a dense eager baseline (scores + rel[:, bucket], causal
   mask, softmax, matmul), the bias gathered from rel at every call.

Each row has attnc (the Python package: ``kernel(q, k, v, slope=...)``, autograd to the float input),
attnc on the same pattern without the modifier (the cost of the modifier), and the peers. Times are
medians of --repeat after one warm-up: the forward (no grad) and forward + backward (the gradients of
sum(O * dO) for q, k, v and the float input, which requires grad for every implementation that accepts
one: the "input grad" column says whether the peer returned it). Block masks, distance tables and the
window masks depend on positions only: they are built once, outside the timing; what depends on a float
input (the dense bias) is inside it. Effective GFLOP/s = 4 * nnz * d * heads / forward time (14 * ... for
forward + backward), nnz = the pattern's pairs per head, counted exactly. Once per row, outside the
timing, each peer's O is compared with attnc's (max |O - O_attnc|) and, where both give one, the float
input's gradient (max |diff| / max |attnc's|).

  build-venv/bin/python bench/peers_scores.py --n 4096 [--threads 2] [--repeat 5] [--rows alibi,sink]

Dense peers hold n x n scores per head (8 GiB per tensor at n = 16384, 8 heads): they run up to
--dense-max-n (8192). transformers is needed for the sink row's peer (pip install transformers; no
weights are downloaded).
"""
import argparse
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
import types

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

HERE = os.path.dirname(os.path.abspath(__file__))

SOURCES = {
    "alibi": "pattern alibi_local { param w = 96  input slope : float[heads]  causal "
             "attend { j : i - j < w }  score s + slope[h] * (j - i) }",
    "softcap": "pattern capped_fixed { param l = 64  param c = 8  param cap = 20  causal "
               "attend { j : j / l == i / l } | { j : j % l >= l - c }  score cap * tanh(s / cap) }",
    "sink": "pattern sink_window { param w = 128  input z : float[heads]  causal "
            "attend { j : i - j < w }  sink z[h] }",
    "t5": os.path.join(HERE, "..", "patterns", "t5_bias.attn"),
}
# The same patterns without their modifier (what the modifier costs in attnc).
PLAIN = {
    "alibi": "pattern local96 { causal attend { j : i - j < 96 } }",
    "softcap": "pattern fixed { param l = 64  param c = 8  causal "
               "attend { j : j / l == i / l } | { j : j % l >= l - c } }",
    "sink": "pattern local128 { causal attend { j : i - j < 128 } }",
    "t5": "pattern causal { causal attend { j : true } }",
}
TITLES = {
    "alibi": "ALiBi, causal window 96",
    "softcap": "soft-cap 20, fixed l=64 c=8",
    "sink": "sink, causal window 128",
    "t5": "T5 bias (32 buckets, max 128), causal",
}
W_ALIBI, L, C, CAP, W_SINK, BUCKETS, MAX_DISTANCE = 96, 64, 8, 20.0, 128, 32, 128


# ---- exact pair counts (per head) -------------------------------------------------------------


def nnz_of(row, n):
    i = torch.arange(n, dtype=torch.int64)
    if row in ("alibi", "sink"):
        w = W_ALIBI if row == "alibi" else W_SINK
        return int(torch.clamp(i + 1, max=w).sum())
    if row == "softcap":
        # Row i: its own block's keys j <= i, and the last c columns of each earlier (full) block.
        return int((i % L + 1 + C * (i // L)).sum())
    return n * (n + 1) // 2


# ---- the float inputs, the positions' tables --------------------------------------------------


def float_input(row, heads, g):
    """(name, tensor) of the row's float input, or (None, None)."""
    if row == "alibi":
        # ALiBi's geometric slopes 2^(-8 (h + 1) / H), perturbed so that heads differ irregularly.
        base = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])
        return "slope", base * (1 + 0.5 * torch.rand(heads, generator=g))
    if row == "sink":
        return "z", torch.randn(heads, generator=g)
    if row == "t5":
        return "rel", 0.5 * torch.randn(heads, BUCKETS, generator=g)
    return None, None


def t5_buckets(n):
    """int64 [n]: T5's relative_position_bucket(bidirectional=False) of each distance d = i - j in
    [0, n), as patterns/t5_bias.attn writes it (exact = buckets / 2):
    d if d < exact, else min(exact + floor(log(d / exact) / log(max_distance / exact) * (buckets - exact)),
    buckets - 1). In float64; at 32 / 128 no distance lies near a bucket boundary but 16 and 128."""
    exact = BUCKETS // 2
    d = torch.arange(n, dtype=torch.float64)
    far = exact + torch.floor(torch.log(d.clamp(min=exact) / exact) / math.log(MAX_DISTANCE / exact)
                              * (BUCKETS - exact))
    return torch.where(d < exact, d, far.clamp(max=BUCKETS - 1)).long()


def positions(n):
    return torch.arange(n).view(n, 1), torch.arange(n).view(1, n)


def allowed(row, n):
    """bool [n, n]: the row's pattern (dense peers only)."""
    i, j = positions(n)
    causal = j <= i
    if row == "alibi":
        return causal & (i - j < W_ALIBI)
    if row == "sink":
        return causal & (i - j < W_SINK)
    if row == "softcap":
        return causal & ((j // L == i // L) | (j % L >= L - C))
    return causal


def mask_mod(row):
    """The pattern as flex_attention's mask_mod, written again here."""
    if row == "alibi":
        return lambda b, h, i, j: (j <= i) & (i - j < W_ALIBI)
    if row == "sink":
        return lambda b, h, i, j: (j <= i) & (i - j < W_SINK)
    if row == "softcap":
        return lambda b, h, i, j: (j <= i) & ((j // L == i // L) | (j % L >= L - C))
    return lambda b, h, i, j: j <= i


# ---- the peers: each is fn(q, k, v, x) -> O [1, H, n, d], x the float input (or None) ----------


def flex_peer(row, n, flex):
    block_mask = create_block_mask(mask_mod(row), None, None, n, n, device="cpu")
    if row == "alibi":
        def fn(q, k, v, slope):
            return flex(q, k, v, block_mask=block_mask,
                        score_mod=lambda score, b, h, q_idx, kv_idx: score + slope[h] * (kv_idx - q_idx))
    elif row == "softcap":
        def fn(q, k, v, _):
            return flex(q, k, v, block_mask=block_mask,
                        score_mod=lambda score, b, h, q_idx, kv_idx: CAP * torch.tanh(score / CAP))
    else:  # t5 (a sink is no score_mod: main() notes it)
        bucket = t5_buckets(n)

        def fn(q, k, v, rel):
            # (q_idx - kv_idx < 0 only on masked pairs of partial blocks: clamped to stay in the table.)
            return flex(q, k, v, block_mask=block_mask,
                        score_mod=lambda score, b, h, q_idx, kv_idx:
                        score + rel[h, bucket[(q_idx - kv_idx).clamp(min=0)]])
    return fn


def dense_peer(row, n, heads):
    """(label, fn, note) of the row's dense baseline; tables that depend on positions only are made here."""
    ok = allowed(row, n)
    i, j = positions(n)
    if row == "alibi":
        dist = (j - i).float()                                          # [n, n]
        outside = torch.zeros(n, n).masked_fill_(~ok, -math.inf)        # [n, n]

        def fn(q, k, v, slope):
            bias = torch.addcmul(outside, slope.view(1, heads, 1, 1), dist)  # [1, H, n, n], per call
            return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        return "SDPA, dense float mask (bias + window)", fn, "mask built per call from slope"
    if row == "softcap":
        def fn(q, k, v, _):
            s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
            s = CAP * torch.tanh(s / CAP)
            return torch.softmax(s.masked_fill(~ok, -math.inf), dim=-1) @ v
        return "eager masked softmax (dense)", fn, "SDPA cannot soft-cap"
    if row == "t5":
        index = t5_buckets(n)[(i - j).clamp(min=0)]                    # [n, n] bucket of each pair

        def fn(q, k, v, rel):
            s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
            s = (s + rel[:, index].unsqueeze(0)).masked_fill(~ok, -math.inf)
            return torch.softmax(s, dim=-1) @ v
        return "eager dense (scores + rel[:, bucket], causal mask)", fn, "bias gathered per call from rel"
    # sink: transformers' gpt-oss eager attention, the function itself.
    try:
        from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward
    except ImportError as e:
        return "transformers gpt-oss eager_attention_forward", None, f"not available: {e}"
    # transformers' additive mask: 0 where allowed, the dtype's minimum elsewhere.
    mask = torch.zeros(1, 1, n, n).masked_fill_(~ok, torch.finfo(torch.float32).min)

    def fn(q, k, v, z):
        module = types.SimpleNamespace(sinks=z, num_key_value_groups=1, training=False)
        o, _ = eager_attention_forward(module, q, k, v, mask, scaling=1 / math.sqrt(q.shape[-1]))
        return o.transpose(1, 2)                                        # it returns [b, n, H, d]
    return "transformers gpt-oss eager_attention_forward", fn, "sinks as a logit column, window as its mask"


# ---- timing ---------------------------------------------------------------------------------------


def median_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def first_line(e):
    """The exception's type and first sentence (for a table cell)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = f"{type(e).__name__}: {text.split('. ')[0].rstrip('.')}"
    return text if len(text) <= 120 else text[:117] + "..."


class Measure:
    """One implementation of one row: its O once (the check), its forward, its forward + backward."""

    def __init__(self, fn, q, k, v, x, d_o, repeat, backward):
        self.fn, self.q, self.k, self.v, self.x, self.d_o = fn, q, k, v, x, d_o
        self.repeat, self.backward = repeat, backward

    def output(self):
        with torch.no_grad():
            return self.fn(self.q, self.k, self.v, self.x)

    def forward_ms(self):
        def run():
            with torch.no_grad():
                self.fn(self.q, self.k, self.v, self.x)
        return median_ms(run, self.repeat)

    def step_ms(self, x_grad=True):
        """(ms, {name: grad}) of forward + backward; x_grad: the float input requires grad."""
        leaves = [t.detach().clone().requires_grad_() for t in (self.q, self.k, self.v)]
        x = None
        if self.x is not None:
            x = self.x.detach().clone().requires_grad_(x_grad)
            if x_grad:
                leaves.append(x)

        def run():
            for t in leaves:
                t.grad = None
            self.fn(*leaves[:3], x).backward(self.d_o)
        ms = median_ms(run, self.repeat)
        return ms, (leaves[3].grad if len(leaves) > 3 else None)


# ---- the table ------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", default="alibi,softcap,sink,t5", help="any of alibi, softcap, sink, t5")
    ap.add_argument("--no-backward", action="store_true", help="forward only")
    ap.add_argument("--no-plain", action="store_true", help="skip attnc without the modifier")
    ap.add_argument("--dense-max-n", type=int, default=8192, help="dense peers only up to this n")
    ap.add_argument("--flex-max-n", type=int, default=1 << 20, help="flex_attention only up to this n")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rows = args.rows.split(",")
    for row in rows:
        if row not in SOURCES:
            ap.error(f"unknown row '{row}' (alibi, softcap, sink, t5)")
    torch.set_num_threads(args.threads)
    torch._dynamo.config.recompile_limit = 64
    import attnc
    import attnc.torch  # noqa: F401

    n, d, H, backward = args.n, args.d, args.heads, not args.no_backward
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        cpu = "unknown CPU"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=HERE).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    try:
        import transformers
        tf_version = transformers.__version__
    except ImportError:
        tf_version = "not installed"
    print(f"# peers_scores.py: {cpu}, {args.threads} threads (torch and attnc), torch {torch.__version__}, "
          f"transformers {tf_version}, attnc ISA {attnc.cpu_isa()}, commit {commit}")
    print(f"# command: {' '.join(shlex.quote(a) for a in [os.path.relpath(sys.executable)] + sys.argv)}")
    print(f"# f32, batch 1, heads {H}, n {n}, d {d}; median of {args.repeat} after one warm-up; "
          f"GFLOP/s = 4*nnz*d*heads / fwd, 14*nnz*d*heads / fwd+bwd")
    print()
    head = "| modifier, pattern | implementation | nnz/head | fwd ms | fwd GFLOP/s |"
    if backward:
        head += " fwd+bwd ms | fwd+bwd GFLOP/s | input grad |"
    head += " max abs diff O vs attnc | note |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|", flush=True)

    g = torch.Generator().manual_seed(args.seed)
    flex = torch.compile(flex_attention, dynamic=False)
    for row in rows:
        nnz = nnz_of(row, n)
        flops = 4.0 * nnz * d * H
        q, k, v, d_o = (torch.randn((1, H, n, d), generator=g) for _ in range(4))
        name, x = float_input(row, H, g)

        def line(impl, fwd, step=None, grad="", diff="", note=""):
            cells = [TITLES[row], impl, str(nnz)]
            cells += [f"{fwd:.1f}", f"{flops / fwd / 1e6:.1f}"] if fwd else ["—", "—"]
            if backward:
                cells += [f"{step:.1f}", f"{3.5 * flops / step / 1e6:.1f}"] if step else ["—", "—"]
                cells.append(grad or "—")
            cells += [diff or "—", note]
            print("| " + " | ".join(cells) + " |", flush=True)

        # attnc
        kernel = attnc.compile(SOURCES[row])
        kernel.num_threads = args.threads

        def attnc_fn(q, k, v, x, kernel=kernel):
            return kernel(q, k, v, **({name: x} if name else {}))
        ours = Measure(attnc_fn, q, k, v, x, d_o, args.repeat, backward)
        o_ref = ours.output()
        fwd = ours.forward_ms()
        step, ref_grad = ours.step_ms() if backward else (None, None)
        line("attnc (fused)", fwd, step, f"yes (d{name})" if name else "(no input)", "", "")

        if not args.no_plain:
            plain = attnc.compile(PLAIN[row])
            plain.num_threads = args.threads
            m = Measure(lambda q, k, v, _: plain(q, k, v), q, k, v, None, d_o, args.repeat, backward)
            line("attnc (fused), the pattern without the modifier", m.forward_ms(),
                 m.step_ms()[0] if backward else None, "", "", "the modifier's cost")

        def peer(label, fn, note, x_grad=True):
            m = Measure(fn, q, k, v, x, d_o, args.repeat, backward)
            try:
                diff = f"{(m.output() - o_ref).abs().max().item():.2e}"
            except Exception as e:  # noqa: BLE001 - any failure of a peer is reported in its row
                line(label, None, None, "", "", f"failed: {first_line(e)}")
                return
            fwd = m.forward_ms()
            step, grad = None, ""
            if backward:
                try:
                    step, x_gradient = m.step_ms(x_grad and name is not None)
                    if name is None:
                        grad = "(no input)"
                    elif not x_grad:
                        grad = f"no (d{name} not asked)"
                    elif x_gradient is None:
                        grad = f"no (d{name} is None)"
                    else:
                        rel = ((x_gradient - ref_grad).abs().max() / ref_grad.abs().max()).item()
                        grad = f"yes (d{name}, rel diff {rel:.1e})"
                except Exception as e:  # noqa: BLE001
                    if x_grad and name is not None:
                        # Again without the float input's gradient: q, k, v only.
                        try:
                            step, _ = m.step_ms(False)
                            grad = f"no: {first_line(e)}"
                        except Exception as e2:  # noqa: BLE001
                            grad = "no (no backward)"
                            note += f"; backward failed: {first_line(e2)}"
                    else:
                        grad = "no (no backward)" if name else "(no input)"
                        note += f"; backward failed: {first_line(e)}"
            line(label, fwd, step, grad, diff, note.lstrip("; "))

        # flex_attention
        if n > args.flex_max_n:
            line("flex_attention (compiled)", None, None, "", "", f"n > --flex-max-n {args.flex_max_n}")
        elif row == "sink":
            line("flex_attention (compiled)", None, None, "", "", "cannot express a sink: score_mod rewrites "
                 "scores, a sink is a term of the softmax denominator (nor does its CPU kernel return the "
                 "log-sum-exp, to rescale O by sigmoid(lse - z) afterwards)")
        else:
            peer("flex_attention (compiled), score_mod + block mask", flex_peer(row, n, flex),
                 "block mask built once" + ("; bucket table indexed by q_idx - kv_idx" if row == "t5" else ""))

        # dense
        if n > args.dense_max_n:
            line("dense peer", None, None, "", "", f"skipped: n > --dense-max-n {args.dense_max_n} "
                 f"(n x n per head: {4 * H * n * n / 2 ** 30:.0f} GiB per f32 tensor)")
        else:
            label, fn, note = dense_peer(row, n, H)
            if fn is None:
                line(label, None, None, "", "", note)
            else:
                peer(label, fn, note)
        del q, k, v, d_o


if __name__ == "__main__":
    sys.exit(main())
