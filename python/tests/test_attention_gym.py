"""attention-gym's positional masks (FlexAttention's example suite, ``attn-gym`` from PyPI) written
as attnc patterns: sliding window, dilated sliding window, prefix LM, causal, Longformer-style global
+ sliding window, NATTEN, tiled NATTEN, sliding-tile attention in 2-D with text tokens and in 3-D,
Sparse VideoGen's spatial and temporal heads, and block diffusion. Each pattern must give exactly
the mask that its ``mask_mod`` gives (every pair, read from ``attnc.show``'s cells), and the fused
kernel's output and gradients must equal a float64 masked softmax built from the ``mask_mod``.

The canvases, kernels and tiles are small and unequal (a width that is not the height, a kernel
that is not square, tiles that do not divide the kernel evenly where attention-gym allows), so
that a swapped coordinate or a wrong clamp shows; attention-gym's own conventions are kept where
they are surprising (its NATTEN takes the row of a token as ``x`` and clamps it by the width)."""

from __future__ import annotations

import math
from typing import Callable, Dict, NamedTuple

import pytest
import torch
from attn_gym import masks as gym

import attnc

D = 16


class Case(NamedTuple):
    n: int
    mask_mod: Callable  # attention-gym's mask_mod(b, h, q_idx, kv_idx)
    source: str  # the same mask as an attnc pattern


def _cases() -> Dict[str, Case]:
    glob = torch.zeros(40, dtype=torch.bool)
    glob[[0, 1, 20]] = True
    return {
        "causal": Case(37, gym.causal_mask, """pattern causal_gym { causal  attend { j : j <= i } }"""),
        "sliding_window": Case(45, gym.generate_sliding_window(5), """
pattern sliding_window_gym { param w = 5  causal  attend { j : i - j <= w } }"""),
        "dilated_sliding_window": Case(50, gym.generate_dilated_sliding_window(7, 3), """
pattern dilated_gym { param w = 7  param d = 3
  attend { j : abs(i - j) <= w && abs(i - j) % d == 0 } }"""),
        "prefix_lm": Case(41, gym.generate_prefix_lm_mask(9), """
pattern prefix_lm_gym { param p = 9  attend { j : j < p } | { j : j <= i } }"""),
        "global_sliding_window": Case(40, gym.generate_global_sliding_window(3, glob), """
pattern global_window_gym { param w = 3
  attend { j : abs(i - j) <= w } | { j : j < 2 || j == 20 } | { j : i < 2 || i == 20 } }"""),
        # attention-gym's NATTEN: x = idx // canvas_w (a row), clamped by the kernel's width.
        "natten": Case(12 * 9, gym.generate_natten(canvas_w=12, canvas_h=9, kernel_w=5, kernel_h=3), """
pattern natten_gym { param CW = 12  param CH = 9  param KW = 5  param KH = 3
  let cx = max(KW / 2, min(i / CW, CW - 1 - KW / 2))
  let cy = max(KH / 2, min(i % CW, CH - 1 - KH / 2))
  attend { j : abs(j / CW - cx) <= KW / 2 && abs(j % CW - cy) <= KH / 2 } }"""),
        # Tokens laid out in tiles of TW x TH, tiles in raster order.
        "tiled_natten": Case(12 * 8, gym.generate_tiled_natten(W=12, H=8, K_W=5, K_H=3, T_W=4, T_H=2), """
pattern tiled_natten_gym { param W = 12  param H = 8  param KW = 5  param KH = 3  param TW = 4  param TH = 2
  let qx = i / (TW * TH) % (W / TW) * TW + i % (TW * TH) % TW
  let qy = i / (TW * TH) / (W / TW) * TH + i % (TW * TH) / TW
  let kx = j / (TW * TH) % (W / TW) * TW + j % (TW * TH) % TW
  let ky = j / (TW * TH) / (W / TW) * TH + j % (TW * TH) / TW
  let cx = max(KW / 2, min(qx, W - 1 - KW / 2))
  let cy = max(KH / 2, min(qy, H - 1 - KH / 2))
  attend { j : abs(kx - cx) <= KW / 2 && abs(ky - cy) <= KH / 2 } }"""),
        # Sliding tiles on an 8 x 12 canvas of 2 x 3 tiles, a kernel of 2 x 2 tiles (an even one:
        # one tile more before the centre than after), then 7 text tokens that every token reads.
        "sta_2d_text": Case(8 * 12 + 7, gym.generate_sta_mask_mod_2d((8, 12), (4, 6), (2, 3), text_seq_len=7), """
pattern sta2d_gym { param CH = 8  param CW = 12  param KH = 4  param KW = 6  param TH = 2  param TW = 3
                    param TEXT = 7
  let V = CH * CW
  let N = TH * TW
  let th = CH / TH
  let tw = CW / TW
  let kth = KH / TH
  let ktw = KW / TW
  let lh = kth / 2
  let rh = kth / 2 + kth % 2 - 1
  let lw = ktw / 2
  let rw = ktw / 2 + ktw % 2 - 1
  let ch = max(lh, min(i / N / tw, th - 1 - rh))
  let cw = max(lw, min(i / N % tw, tw - 1 - rw))
  attend { j : i < V && j < V && ch - lh <= j / N / tw && j / N / tw <= ch + rh &&
               cw - lw <= j / N % tw && j / N % tw <= cw + rw }
       | { j : i < V && V <= j && j < V + TEXT }
       | { j : i >= V && j < V + TEXT } }"""),
        "sta_3d": Case(4 * 6 * 6, gym.generate_sta_mask_mod_3d((4, 6, 6), (2, 4, 6), (1, 2, 2)), """
pattern sta3d_gym { param T = 4  param H = 6  param W = 6  param KT = 2  param KH = 4  param KW = 6
                    param TT = 1  param TH = 2  param TW = 2
  let N = TT * TH * TW
  let ct = T / TT
  let ch = H / TH
  let cw = W / TW
  let kt = KT / TT
  let kh = KH / TH
  let kw = KW / TW
  let lt = kt / 2
  let rt = kt / 2 + kt % 2 - 1
  let lh = kh / 2
  let rh = kh / 2 + kh % 2 - 1
  let lw = kw / 2
  let rw = kw / 2 + kw % 2 - 1
  let qt = max(lt, min(i / N / (ch * cw), ct - 1 - rt))
  let qh = max(lh, min(i / N % (ch * cw) / cw, ch - 1 - rh))
  let qw = max(lw, min(i / N % cw, cw - 1 - rw))
  attend { j : qt - lt <= j / N / (ch * cw) && j / N / (ch * cw) <= qt + rt &&
               qh - lh <= j / N % (ch * cw) / cw && j / N % (ch * cw) / cw <= qh + rh &&
               qw - lw <= j / N % cw && j / N % cw <= qw + rw } }"""),
        # Sparse VideoGen: 5 prompt tokens, then 6 frames of 15; the spatial head's band is rounded
        # down to a multiple of 4 (2 * 15 = 30 -> 28), its sink column is the prompt plus a frame.
        "svg_spatial": Case(5 + 6 * 15, gym.generate_spatial_head_mask_mod(5, 6, 15, 2, True, 4), """
pattern svg_spatial_gym { param P = 5  param F = 15  param WD = 2  param R = 4
  attend { j : j < P + F } | { j : i < P } | { j : abs(i - j) < WD * F / R * R } }"""),
        "svg_temporal": Case(5 + 6 * 15, gym.generate_temporal_head_mask_mod(5, 6, 15, 2), """
pattern svg_temporal_gym { param P = 5  param FRAMES = 6  param F = 15  param WD = 2
  attend { j : j < P } | { j : i < P } | { j : abs((i - P) % F - (j - P) % F) < WD * F / FRAMES } }"""),
        # 24 noised tokens then their 24 clean ones, blocks of 5 (the last one short).
        "block_diffusion": Case(48, gym.generate_block_diffusion_mask(24, 5), """
pattern block_diffusion_gym { param L = 24  param B = 5
  let qb = i % L / B
  let kb = j % L / B
  attend { j : qb == kb && ((i < L && j < L) || (i >= L && j >= L)) }
       | { j : qb > kb && i < L && j >= L }
       | { j : qb >= kb && i >= L && j >= L } }"""),
    }


CASES = _cases()


def gym_mask(case: Case) -> torch.Tensor:
    """The mask_mod over every pair, [n, n] bool (rows are queries)."""
    q = torch.arange(case.n).view(-1, 1)
    kv = torch.arange(case.n).view(1, -1)
    zero = torch.zeros((), dtype=torch.int64)
    return case.mask_mod(zero, zero, q, kv).expand(case.n, case.n).to(torch.bool)


def attnc_mask(case: Case) -> torch.Tensor:
    """attnc's pairs at n, read from `attnc.show`'s cells (one character per pair at this size:
    '.' is a pair not attended, any other a pair of one of the pattern's sets)."""
    text = attnc.show(case.source, case.n, format="ascii", max_side=max(case.n, 8))
    rows = text.splitlines()[-case.n:]
    assert all(len(r) == case.n for r in rows), text
    return torch.tensor([[c != "." for c in r] for r in rows], dtype=torch.bool)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_pattern_is_the_mask_mod_exactly(name):
    case = CASES[name]
    want, got = gym_mask(case), attnc_mask(case)
    assert want.any(dim=1).all(), f"{name}: a row of the mask_mod has no key (the case is too small)"
    wrong = (want != got).nonzero()
    assert len(wrong) == 0, (f"{name}: {len(wrong)} pairs differ, the first (query, key) {wrong[:5].tolist()}: "
                             f"mask_mod {want[tuple(wrong[0])].item()}, attnc {got[tuple(wrong[0])].item()}")


def reference(q, k, v, mask):
    """softmax(q k^T / sqrt(d) over the mask) v in float64."""
    s = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    return p @ v.double()


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_backward_equal_the_masked_softmax(name):
    case = CASES[name]
    kernel = attnc.compile(case.source)
    g = torch.Generator().manual_seed(len(name))
    q, k, v, do = (torch.randn(2, 3, case.n, D, generator=g) for _ in range(4))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    o = kernel(q, k, v)
    grads = torch.autograd.grad((o * do).sum(), (q, k, v))
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    want = reference(q64, k64, v64, gym_mask(case))
    want_grads = torch.autograd.grad((want * do.double()).sum(), (q64, k64, v64))
    assert (o.double() - want).abs().max().item() < 2e-6, f"{name}: O"
    for what, got, exp in zip(("dQ", "dK", "dV"), grads, want_grads):
        assert (got.double() - exp).abs().max().item() < 1e-5, f"{name}: {what}"


def canvas_cell(p: int, sides, tile) -> int:
    """attnc.show's cell (row-major over frames x rows x columns) of position p on a canvas laid out
    tile by tile, as attention-gym's tiled masks number their tokens."""
    t, h, w = (1,) * (3 - len(sides)) + tuple(sides)
    tt, th, tw = (1,) * (3 - len(tile)) + tuple(tile)
    k, r = divmod(p, tt * th * tw)
    across, down = w // tw, h // th
    frame = k // (down * across) * tt + r // (th * tw)
    row = k // across % down * th + r // tw % th
    col = k % across * tw + r % tw
    return (frame * h + row) * w + col


@pytest.mark.parametrize("name, sides, tile, query", [
    ("natten", (9, 12), (1, 1), 50),
    ("tiled_natten", (8, 12), (2, 4), 37),
    ("sta_3d", (4, 6, 6), (1, 2, 2), 77),
    ("sta_2d_text", (8, 12), (2, 3), 40),
])
def test_a_query_drawn_on_the_canvas_is_its_mask_mod_row(name, sides, tile, query):
    # attnc.show(canvas=..., tile=..., query=...): the query's keys on the image (or video), each
    # cell where its position lands in the masks' own layout (the query's own glyph is the legend's
    # last, '.' a key not read, any other glyph a key of one of the sets).
    case = CASES[name]
    size = math.prod(sides)
    text = attnc.show(case.source, case.n, format="ascii", canvas=sides, tile=tile, query=query)
    rows = text.splitlines()[-(size // sides[-1]):]
    cells = "".join(rows)
    assert len(cells) == size, text
    me = [line[2] for line in text.splitlines() if line.endswith(f"  the query i = {query}")]
    assert len(me) == 1, text
    row = gym_mask(case)[query]
    for p in range(size):
        c = canvas_cell(p, sides, tile)
        got = "query" if cells[c] == me[0] else "." if cells[c] == "." else "key"
        want = "query" if p == query else "key" if row[p] else "."
        assert got == want, f"{name}: position {p} (cell {c}): {cells[c]!r}, mask_mod {bool(row[p])}\n{text}"


def test_canvas_mistakes_are_refused():
    src = CASES["natten"].source
    for kwargs, what in [
        (dict(canvas=(10, 12)), "holds 120 tokens, more than n = 108"),
        (dict(canvas=(9,)), "a canvas is H,W or T,H,W"),
        (dict(canvas=(9, 12), tile=(2, 5)), "divide the canvas's"),
        (dict(canvas=(9, 12), query=108), "query 108 is not a position of the sequence [0, 108)"),
        (dict(canvas=(9, 12), queries=4), "a canvas picture draws one query's keys"),
        (dict(query=3), "give canvas=(H, W) too"),
    ]:
        with pytest.raises(attnc.AttncError, match=what.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            attnc.show(src, 108, format="ascii", **kwargs)
