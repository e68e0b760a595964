"""Score modifiers (``score EXPR``, ``sink EXPR``) and float inputs (``input NAME : float[DIMS]``)
from Python: ALiBi on a window, a soft cap on *fixed*, a sink on a window, a T5-style relative
bias table, and ALiBi on document masking (int and float inputs in one call), against a float64
reference written directly in torch (the score and sink formulas, a masked softmax, autograd
for every gradient, the float inputs' included). The patterns are given as source text, so the
tests do not depend on patterns/."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnc
import attnc.torch
from conftest import REPO, raises_status

D = 16

SOURCES = {
    "alibi_local": """pattern alibi_local { param w = 96  input slope : float[heads]  causal
  attend { j : i - j < w }  score s + slope[h] * (j - i) }""",
    "capped_fixed": """pattern capped_fixed { param l = 64  param c = 8  param cap = 20  causal
  attend { j : j / l == i / l } | { j : j % l >= l - c }  score cap * tanh(s / cap) }""",
    "sink_window": """pattern sink_window { param w = 128  input z : float[heads]  causal
  attend { j : i - j < w }  sink z[h] }""",
    # T5's relative-position buckets, log-spaced past E: i - j itself below E, then one bucket per
    # doubling (integer comparisons, so that the buckets are exact, as the reference computes them).
    "t5_bias": """pattern t5_bias { param E = 8  input rel : float[heads, E + 4]  causal
  attend { j : j <= i }
  score s + rel[h, min(i - j, E) + where(i - j >= 2 * E, 1, 0) + where(i - j >= 4 * E, 1, 0)
                   + where(i - j >= 8 * E, 1, 0)] }""",
    "doc_alibi": """pattern doc_alibi { input doc : int[n]  input slope : float[heads]  causal
  attend { j : doc[j] == doc[i] }  score s + slope[h] * (j - i) }""",
}
# Small parameters, so that windows and blocks do not divide the lengths evenly.
PARAMS = {
    "alibi_local": {"w": 20},
    "capped_fixed": {"l": 16, "c": 4, "cap": 5},
    "sink_window": {"w": 13},
    "t5_bias": {"E": 4},
    "doc_alibi": {},
    "t5_log": {"buckets": 16, "max_distance": 64},  # patterns/t5_bias.attn: T5's log-spaced buckets
}
PATTERNS = ("alibi_local", "capped_fixed", "sink_window", "t5_bias")
LENGTHS = (1, 2, 63, 777)


@pytest.fixture(scope="module")
def kernels():
    return {name: attnc.compile(SOURCES[name], **PARAMS[name]) for name in SOURCES}


# ---- the reference -----------------------------------------------------------------


def positions(nq: int, nk: int):
    """Query positions [nq, 1] (the last nq of nk) and key positions [1, nk]."""
    return torch.arange(nk - nq, nk)[:, None], torch.arange(nk)[None, :]


def t5_bucket(dist: torch.Tensor, E: int) -> torch.Tensor:
    dist = dist.clamp(min=0)  # (pairs after the query: masked)
    return dist.clamp(max=E) + (dist >= 2 * E).long() + (dist >= 4 * E).long() + (dist >= 8 * E).long()


def mask_of(name: str, nq: int, nk: int, data: dict) -> torch.Tensor:
    """bool [..., nq, nk]: the pattern's pairs."""
    p = PARAMS[name]
    i, j = positions(nq, nk)
    causal = j <= i
    if name in ("alibi_local", "sink_window"):
        return causal & (i - j < p["w"])
    if name == "capped_fixed":
        return causal & ((j // p["l"] == i // p["l"]) | (j % p["l"] >= p["l"] - p["c"]))
    if name in ("t5_bias", "t5_log"):
        return causal
    doc = data["doc"]  # [nk] (shared) or [batch, 1, nk]
    return causal & (doc[..., nk - nq:, None] == doc[..., None, :])


def logits_of(name: str, s: torch.Tensor, floats: dict, nq: int, nk: int) -> torch.Tensor:
    """The rewritten logits t [batch, H, nq, nk] of scaled logits s (float64)."""
    p = PARAMS[name]
    i, j = positions(nq, nk)
    if name in ("alibi_local", "doc_alibi"):
        return s + floats["slope"][:, None, None] * (j - i)
    if name == "capped_fixed":
        return p["cap"] * torch.tanh(s / p["cap"])
    if name == "t5_bias":
        return s + floats["rel"][:, t5_bucket(i - j, p["E"])]
    if name == "t5_log":
        # relative_position_bucket(bidirectional=False): i - j itself below buckets / 2, then
        # log-spaced up to max_distance (the only distance on a bucket boundary at these parameters
        # is exact itself, where the log is 0).
        buckets, exact = p["buckets"], p["buckets"] // 2
        dist = (i - j).clamp(min=0)
        far = exact + torch.floor(torch.log(dist.clamp(min=exact).double() / exact)
                                  / math.log(p["max_distance"] / exact) * (buckets - exact)).long()
        return s + floats["rel"][:, torch.where(dist < exact, dist, far.clamp(max=buckets - 1))]
    return s


def reference(name: str, q, k, v, floats: dict, data: dict = None, scale=None):
    """(O, lse) in float64 of pattern `name`: each allowed pair's logit rewritten, the sink's
    exp(z[h]) added to every row's denominator; zeros and -inf for a row without keys (and no
    sink). Differentiable in q, k, v and the float inputs."""
    q, k, v = (x.double() for x in (q, k, v))
    floats = {key: x.double() for key, x in floats.items()}
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    nq, nk = q.shape[2], k.shape[2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    mask = mask_of(name, nq, nk, data or {})
    t = logits_of(name, scale * q @ k.transpose(-1, -2), floats, nq, nk).masked_fill(~mask, -math.inf)
    if "z" in floats:
        sink = floats["z"][None, :, None, None].expand(*t.shape[:3], 1)
        lse = torch.logsumexp(torch.cat([t, sink], dim=-1), dim=-1)
    else:
        lse = torch.logsumexp(t, dim=-1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    prob = torch.where(mask, torch.exp(t - safe[..., None]), torch.zeros_like(t))
    return prob @ v, lse


def make_floats(name: str, heads: int, seed: int = 0, dtype=torch.float32, requires_grad=False) -> dict:
    g = torch.Generator().manual_seed(seed)
    if name in ("alibi_local", "doc_alibi"):
        # ALiBi's geometric slopes, perturbed so that heads differ irregularly.
        base = torch.tensor([2.0 ** (-8 * (h + 1) / heads) for h in range(heads)])
        out = {"slope": base * (1 + 0.5 * torch.rand(heads, generator=g))}
    elif name == "sink_window":
        out = {"z": torch.randn(heads, generator=g)}
    elif name == "t5_bias":
        out = {"rel": 0.5 * torch.randn(heads, PARAMS["t5_bias"]["E"] + 4, generator=g)}
    elif name == "t5_log":
        out = {"rel": 0.5 * torch.randn(heads, PARAMS["t5_log"]["buckets"], generator=g)}
    else:
        out = {}
    return {key: x.to(dtype).requires_grad_(requires_grad) for key, x in out.items()}


def tensors(batch, hq, hkv, nq, nk, dtype=torch.float32, seed=1, requires_grad=False, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, nq, D, generator=g) * scale
    k, v = (torch.randn(batch, hkv, nk, D, generator=g) for _ in range(2))
    return [x.to(dtype).requires_grad_(requires_grad) for x in (q, k, v)]


def close(got: torch.Tensor, want: torch.Tensor, rtol: float, what: str = "") -> None:
    """|got - want| <= rtol * |want| + max(rtol * max |want|, 1e-6): relative, with an absolute
    floor at the tensor's own scale (sums of many pairs cancel to values near 0; a row of one key
    has a gradient of 0 that float32 rounding leaves at 1e-8)."""
    got, want = got.double(), want.double()
    assert got.shape == want.shape, f"{what}: {list(got.shape)} vs {list(want.shape)}"
    assert torch.isfinite(got).all(), f"{what}: not finite"
    floor = max(rtol * float(want.abs().max()), 1e-6) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=floor, msg=lambda m: f"{what}: {m}")


# ---- forward and gradients against the reference --------------------------------------


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", PATTERNS)
def test_forward_and_lse(kernels, name, n):
    batch, heads = 2, 3
    q, k, v = tensors(batch, heads, heads, n, n, seed=n)
    floats = make_floats(name, heads, seed=n)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernels[name], **floats)
    want_o, want_lse = reference(name, q, k, v, floats)
    torch.testing.assert_close(o.double(), want_o, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", PATTERNS)
def test_gradients_gqa_batch(kernels, name, n):
    """dQ, dK, dV and the float inputs' gradients, with 4 query heads over 2 key/value heads and a
    batch of 2, against the reference's autograd (rtol 1e-3)."""
    batch, hq, hkv = 2, 4, 2
    q, k, v = tensors(batch, hq, hkv, n, n, seed=n + 1, requires_grad=True)
    floats = make_floats(name, hq, seed=n + 1, requires_grad=True)
    d_o = torch.randn(batch, hq, n, D, generator=torch.Generator().manual_seed(3))
    leaves = (q, k, v, *floats.values())
    got = torch.autograd.grad(kernels[name](q, k, v, **floats), leaves, d_o)
    x = [t.detach().double().requires_grad_() for t in leaves]
    want_o, _ = reference(name, *x[:3], dict(zip(floats, x[3:])))
    want = torch.autograd.grad(want_o, x, d_o.double())
    for g, w, label in zip(got, want, ["dq", "dk", "dv", *(f"d{key}" for key in floats)]):
        assert g.dtype == torch.float32, label
        close(g, w, 1e-3, f"{name} n={n} {label}")


@pytest.mark.parametrize("name", PATTERNS)
def test_fewer_queries_than_keys(kernels, name):
    """The queries are the last nq of nk positions: i in the score is the query's position."""
    nq, nk, heads = 7, 90, 2
    q, k, v = tensors(1, heads, heads, nq, nk, seed=4, requires_grad=True)
    floats = make_floats(name, heads, seed=4, requires_grad=True)
    o = kernels[name](q, k, v, **floats)
    want, _ = reference(name, q, k, v, floats)
    torch.testing.assert_close(o.double(), want, atol=2e-6, rtol=1e-5)
    leaves = (q, k, v, *floats.values())
    got = torch.autograd.grad(o.sum(), leaves)
    x = [t.detach().double().requires_grad_() for t in leaves]
    want = torch.autograd.grad(reference(name, *x[:3], dict(zip(floats, x[3:])))[0].sum(), x)
    for g, w in zip(got, want):
        close(g, w, 1e-3, name)


@pytest.mark.parametrize("name", PATTERNS)
def test_bf16(kernels, name):
    """bf16 q, k, v and float inputs: O and the gradients in bf16, within bf16's tolerance of the
    reference on the same (rounded) values."""
    batch, heads, n = 1, 2, 63
    q, k, v = tensors(batch, heads, heads, n, n, dtype=torch.bfloat16, requires_grad=True, seed=5)
    floats = make_floats(name, heads, seed=5, dtype=torch.bfloat16, requires_grad=True)
    o = kernels[name](q, k, v, **floats)
    assert o.dtype == torch.bfloat16
    want, _ = reference(name, q, k, v, floats)
    torch.testing.assert_close(o.double(), want, atol=2e-2, rtol=2e-2)
    leaves = (q, *floats.values())
    got = torch.autograd.grad(o.float().sum(), leaves)
    x = [t.detach().double().requires_grad_() for t in leaves]
    want = torch.autograd.grad(reference(name, x[0], k.detach(), v.detach(), dict(zip(floats, x[1:])))[0].sum(), x)
    for g, w, x0 in zip(got, want, leaves):
        assert g.dtype == x0.dtype
        close(g, w, 5e-2, f"{name} bf16")


def test_mixed_int_and_float_inputs(kernels):
    """Document masking (an int input, per batch entry) with ALiBi (a float input): both kinds
    in one call, gradients to the slopes; the int input gets none."""
    kernel = kernels["doc_alibi"]
    assert kernel.inputs == {"doc": 1, "slope": 1}
    assert kernel.float_inputs == ("slope",)
    batch, hq, hkv, n = 2, 4, 2, 70
    q, k, v = tensors(batch, hq, hkv, n, n, seed=6, requires_grad=True)
    doc = torch.randint(0, 3, (batch, n), generator=torch.Generator().manual_seed(6)).cumsum(-1) // 5
    slope = make_floats("doc_alibi", hq, seed=6, requires_grad=True)["slope"]
    o = kernel(q, k, v, doc=doc, slope=slope)
    leaves = (q, k, v, slope)
    got = torch.autograd.grad(o.square().sum(), leaves)
    x = [t.detach().double().requires_grad_() for t in leaves]
    want_o, _ = reference("doc_alibi", *x[:3], {"slope": x[3]}, {"doc": doc[:, None]})
    torch.testing.assert_close(o.double(), want_o.detach(), atol=2e-6, rtol=1e-5)
    want = torch.autograd.grad(want_o.square().sum(), x)
    for g, w, label in zip(got, want, ("dq", "dk", "dv", "dslope")):
        close(g, w, 1e-3, label)


@pytest.mark.parametrize("n", (63, 300))
@pytest.mark.parametrize("name", ("alibi_local", "capped_fixed", "sink_window", "t5_log"))
def test_library_patterns(name, n):
    """patterns/alibi_local.attn, capped_fixed.attn, sink_window.attn and t5_bias.attn (T5's
    log-spaced buckets), forward and every gradient, against the reference."""
    path = REPO / "patterns" / f"{'t5_bias' if name == 't5_log' else name}.attn"
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    kernel = attnc.compile(str(path), **PARAMS[name])
    batch, hq, hkv = 2, 4, 2
    q, k, v = tensors(batch, hq, hkv, n, n, seed=n + 2, requires_grad=True)
    floats = make_floats(name, hq, seed=n + 2, requires_grad=True)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernel, **floats)
    want_o, want_lse = reference(name, q, k, v, floats)
    torch.testing.assert_close(o.double(), want_o.detach(), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse.detach(), atol=2e-6, rtol=1e-5)
    leaves = (q, k, v, *floats.values())
    d_o = torch.randn(batch, hq, n, D, generator=torch.Generator().manual_seed(5))
    got = torch.autograd.grad(o, leaves, d_o)
    x = [t.detach().double().requires_grad_() for t in leaves]
    want = torch.autograd.grad(reference(name, *x[:3], dict(zip(floats, x[3:])))[0], x, d_o.double())
    for g, w, label in zip(got, want, ["dq", "dk", "dv", *(f"d{key}" for key in floats)]):
        close(g, w, 1e-3, f"{name} n={n} {label}")


# ---- extreme logits and sinks --------------------------------------------------------


def test_soft_cap_keeps_extreme_logits_finite(kernels):
    """q x 1000: logits in the thousands, which the cap bounds to [-cap, cap]; O, lse and the
    gradients stay finite and match the reference."""
    n = 63
    q, k, v = tensors(2, 2, 2, n, n, seed=7, scale=1000.0, requires_grad=True)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernels["capped_fixed"])
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    want_o, want_lse = reference("capped_fixed", q, k, v, {})
    torch.testing.assert_close(o.double(), want_o.detach(), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lse.double(), want_lse.detach(), atol=2e-5, rtol=1e-5)
    d_o = torch.randn_like(o)
    got = torch.autograd.grad(o, (q, k, v), d_o)
    x = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(reference("capped_fixed", *x, {})[0], x, d_o.double())
    for g, w, label in zip(got, want, "qkv"):
        assert torch.isfinite(g).all(), label
        close(g, w, 1e-3, f"d{label}")


@pytest.mark.parametrize("z_value", [50.0, -50.0])
def test_extreme_sinks(kernels, z_value):
    """A sink of +50 takes nearly all of each row's probability (O near 0, lse near 50); one of
    -50 takes none (the plain window). Finite, and the sink's gradient matches."""
    n, heads = 63, 2
    q, k, v = tensors(1, heads, heads, n, n, seed=8, requires_grad=True)
    z = torch.full((heads,), z_value, requires_grad=True)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernels["sink_window"], z=z)
    assert torch.isfinite(o).all() and torch.isfinite(lse).all()
    want_o, want_lse = reference("sink_window", q, k, v, {"z": z})
    torch.testing.assert_close(o.double(), want_o.detach(), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse.detach(), atol=2e-5, rtol=1e-6)
    if z_value > 0:
        assert o.abs().max() < 1e-10 and (lse - 50).abs().max() < 1e-4
    else:
        plain, _ = reference("sink_window", q, k, v, {})  # the window without a sink
        torch.testing.assert_close(o.double(), plain.detach(), atol=2e-6, rtol=1e-5)
    leaves = (q, k, v, z)
    d_o = torch.randn_like(o)
    got = torch.autograd.grad(o, leaves, d_o)
    x = [t.detach().double().requires_grad_() for t in leaves]
    want = torch.autograd.grad(reference("sink_window", *x[:3], {"z": x[3]})[0], x, d_o.double())
    for g, w, label in zip(got, want, ("dq", "dk", "dv", "dz")):
        assert torch.isfinite(g).all(), label
        # (+50: every gradient is ~exp(-50): compare absolutely there.)
        if z_value > 0:
            assert g.abs().max() < 1e-10, label
        else:
            close(g, w, 1e-3, label)


def test_sink_is_a_denominator_term(kernels):
    """sink z[h] with z = log(m): O is the window's softmax scaled by S / (S + m), S each row's
    sum of exp(logits), exactly as a key with a zero value row would do."""
    n, heads = 40, 2
    q, k, v = tensors(1, heads, heads, n, n, seed=9)
    z = torch.tensor([0.0, 1.5])
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernels["sink_window"], z=z)
    plain_o, plain_lse = reference("sink_window", q, k, v, {})  # without a sink
    ratio = torch.exp(plain_lse - torch.logaddexp(plain_lse, z.double()[None, :, None]))
    torch.testing.assert_close(o.double(), plain_o * ratio[..., None], atol=2e-6, rtol=1e-5)


# ---- finite differences ---------------------------------------------------------------


@pytest.mark.parametrize("name,key", [("alibi_local", "slope"), ("sink_window", "z"), ("t5_bias", "rel")])
def test_input_gradient_by_finite_differences(kernels, name, key):
    """The gradient of L = sum(O * dO) by a float input, against central differences of attnc's own
    forward (float32 kernels, so steps of 1e-2 and a 2% tolerance)."""
    n, heads = 63, 2
    q, k, v = tensors(1, heads, heads, n, n, seed=10)
    floats = make_floats(name, heads, seed=10)
    d_o = torch.randn(1, heads, n, D, generator=torch.Generator().manual_seed(11))
    x = floats[key].clone().requires_grad_()
    grad, = torch.autograd.grad((kernels[name](q, k, v, **{**floats, key: x}) * d_o).sum(), x)

    def loss(value):
        with torch.no_grad():
            return float((kernels[name](q, k, v, **{**floats, key: value}).double() * d_o).sum())

    eps = 1e-2
    flat = floats[key].reshape(-1)
    entries = range(flat.numel()) if flat.numel() <= 8 else (0, 1, 5, flat.numel() - 1)
    for e in entries:
        plus, minus = flat.clone(), flat.clone()
        plus[e] += eps
        minus[e] -= eps
        fd = (loss(plus.view_as(floats[key])) - loss(minus.view_as(floats[key]))) / (2 * eps)
        got = float(grad.reshape(-1)[e])
        assert abs(got - fd) <= 2e-2 * max(abs(fd), 1e-2), f"{key}[{e}]: autograd {got}, finite differences {fd}"


# ---- torch.compile, the op, the eager path, numpy -------------------------------------


def test_compile_fullgraph_new_values_do_not_recompile(kernels):
    """kernel(q, k, v, slope=...) traces into attnc::attention_scored with fullgraph=True; new
    slopes (and new q, k, v) at every call neither recompile the graph nor the kernel, and the
    slopes get their gradients through the compiled graph."""
    import torch._dynamo

    kernel = kernels["alibi_local"]
    n, heads = 48, 2
    proj = torch.nn.Linear(D, D)

    def step(q, k, v, slope):
        return (proj(kernel(q, k, v, slope=slope)) ** 2).mean()

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(step, fullgraph=True)
    before = attnc.cache_stats()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed in range(3):
            q, k, v = tensors(2, heads, heads, n, n, seed=seed, requires_grad=True)
            slope = make_floats("alibi_local", heads, seed=seed, requires_grad=True)["slope"]
            loss = compiled(q, k, v, slope)
            grads = torch.autograd.grad(loss, (q, k, v, slope))
            x = [t.detach().double().requires_grad_() for t in (q, k, v, slope)]
            want_o, _ = reference("alibi_local", *x[:3], {"slope": x[3]})
            want_loss = (torch.nn.functional.linear(want_o, proj.weight.double(), proj.bias.double()) ** 2).mean()
            want = torch.autograd.grad(want_loss, x)
            torch.testing.assert_close(loss.double(), want_loss, atol=1e-6, rtol=1e-5)
            for g, w in zip(grads, want):
                close(g, w, 1e-3, "compiled")
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert attnc.cache_stats() == before


def test_compile_checks_the_float_inputs_shape(kernels):
    kernel = kernels["t5_bias"]
    compiled = torch.compile(lambda q, k, v, rel: kernel(q, k, v, rel=rel), fullgraph=True, backend="aot_eager")
    q, k, v = tensors(1, 2, 2, 30, 30)
    with pytest.raises(Exception, match=r"input 'rel' has shape \[2, 7\].*\[2, 8\]"):
        compiled(q, k, v, torch.zeros(2, 7))


def test_compile_score_without_inputs(kernels):
    """A score without float inputs (the soft cap) is the plain attnc::attention op."""
    kernel = kernels["capped_fixed"]
    compiled = torch.compile(lambda q, k, v: kernel(q, k, v), fullgraph=True)
    q, k, v = tensors(1, 2, 2, 40, 40, seed=12, scale=30.0)
    want, _ = reference("capped_fixed", q, k, v, {})
    torch.testing.assert_close(compiled(q, k, v).double(), want, atol=2e-5, rtol=1e-4)


def test_compile_with_changing_lengths(kernels):
    """Lengths that change make dynamo trace n (and the float input's dimensions, here [heads, E + 4]
    and not n-dependent) symbolically: the fake implementation checks the rank, the runtime the rest."""
    import torch._dynamo

    kernel = kernels["t5_bias"]
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v, rel: kernel(q, k, v, rel=rel), fullgraph=True)
    for n in (40, 56, 72):
        q, k, v = tensors(1, 2, 2, n, n, seed=n)
        rel = make_floats("t5_bias", 2, seed=n)["rel"]
        want, _ = reference("t5_bias", q, k, v, {"rel": rel})
        torch.testing.assert_close(compiled(q, k, v, rel).double(), want, atol=2e-6, rtol=1e-5)
    with raises_status("ATTNC_ERROR_SHAPE"):  # the runtime's check, at a symbolic n
        compiled(q, k, v, torch.zeros(2, 9))


def test_varlen_score_without_inputs(kernels):
    """A score without float inputs runs on variable-length batches: each sequence as its own call."""
    kernel = kernels["capped_fixed"]
    g = torch.Generator().manual_seed(15)
    q, k, v = (torch.randn(50, 2, D, generator=g) * (8 if x == 0 else 1) for x in range(3))
    o = attnc.torch.attention_varlen(q, k, v, [0, 20, 50], kernel=kernel)
    for a, b in ((0, 20), (20, 50)):
        part = [x[a:b].transpose(0, 1)[None] for x in (q, k, v)]
        want, _ = reference("capped_fixed", *part, {})
        torch.testing.assert_close(o[a:b].transpose(0, 1)[None].double(), want, atol=2e-6, rtol=1e-5)


def test_eager_path_matches_the_op(kernels):
    n, heads = 40, 2
    kernel = kernels["t5_bias"]
    q, k, v = tensors(2, heads, heads, n, n, requires_grad=True)
    rel = make_floats("t5_bias", heads, requires_grad=True)["rel"]
    o = kernel(q, k, v, rel=rel)
    o_op, _ = torch.ops.attnc.attention_scored(q, k, v, [], [rel], kernel.id, 0.0)
    assert torch.equal(o, o_op)
    d_o = torch.randn_like(o)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(o, (q, k, v, rel), d_o),
                                                 torch.autograd.grad(o_op, (q, k, v, rel), d_o)))


def test_modes_see_the_scored_op(kernels):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = tensors(1, 2, 2, 20, 20, requires_grad=True)
    z = make_floats("sink_window", 2, requires_grad=True)["z"]
    with Record() as seen:
        o = kernels["sink_window"](q, k, v, z=z)
        o.sum().backward()
    assert "attnc.attention_scored.default" in seen.ops
    assert "attnc.attention_scored_backward.default" in seen.ops
    assert z.grad is not None and torch.isfinite(z.grad).all()


def test_only_float_inputs_requiring_grad(kernels):
    """A float input that does not require grad gets none; one that does gets it even when q, k and
    v do not require grad."""
    n, heads = 30, 2
    q, k, v = tensors(1, heads, heads, n, n)
    slope = make_floats("alibi_local", heads, requires_grad=True)["slope"]
    o = kernels["alibi_local"](q, k, v, slope=slope)
    assert o.requires_grad
    o.sum().backward()
    x = slope.detach().double().requires_grad_()
    want, = torch.autograd.grad(reference("alibi_local", q, k, v, {"slope": x})[0].sum(), x)
    close(slope.grad, want, 1e-3, "dslope")
    frozen = slope.detach()
    q.requires_grad_()
    kernels["alibi_local"](q, k, v, slope=frozen).sum().backward()
    assert frozen.grad is None and q.grad is not None


def test_strided_and_expanded_float_inputs(kernels):
    n, heads = 30, 3
    q, k, v = tensors(1, heads, heads, n, n, seed=13)
    rel = make_floats("t5_bias", heads, seed=13)["rel"]
    transposed = rel.t().contiguous().t()
    assert not transposed.is_contiguous()
    want, _ = reference("t5_bias", q, k, v, {"rel": rel})
    torch.testing.assert_close(kernels["t5_bias"](q, k, v, rel=transposed).double(), want, atol=2e-6, rtol=1e-5)
    one = torch.tensor(0.25).expand(heads)  # a stride of 0: copied once
    want, _ = reference("sink_window", q, k, v, {"z": torch.full((heads,), 0.25)})
    torch.testing.assert_close(kernels["sink_window"](q, k, v, z=one).double(), want, atol=2e-6, rtol=1e-5)


def test_opcheck(kernels):
    kernel = kernels["alibi_local"]
    n = 30
    q, k, v = tensors(2, 2, 2, n, n, requires_grad=True)
    slope = make_floats("alibi_local", 2, requires_grad=True)["slope"]
    torch.library.opcheck(torch.ops.attnc.attention_scored.default, (q, k, v, [], [slope], kernel.id, 0.0))
    doc = torch.zeros(1, 1, n, 1, dtype=torch.int64)
    torch.library.opcheck(torch.ops.attnc.attention_scored.default,
                          (q, k, v, [doc], [slope], kernels["doc_alibi"].id, 0.5))
    o, lse = torch.ops.attnc.attention_scored(q, k, v, [], [slope], kernel.id, 0.0)
    torch.library.opcheck(torch.ops.attnc.attention_scored_backward.default,
                          (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o.detach(), lse, [],
                           [slope.detach()], kernel.id, 0.0))


def test_numpy_forward_and_backward(kernels):
    """Kernel.forward / backward on numpy arrays: the float inputs' gradients come back as a dict."""
    n, heads = 50, 2
    kernel = kernels["sink_window"]
    q, k, v = tensors(1, heads, heads, n, n, seed=14)
    z = make_floats("sink_window", heads, seed=14)["z"]
    o, lse = kernel.forward(q.numpy(), k.numpy(), v.numpy(), z=z.numpy())
    want_o, want_lse = reference("sink_window", q, k, v, {"z": z})
    np.testing.assert_allclose(o, want_o.numpy(), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(lse, want_lse.numpy(), atol=2e-6, rtol=1e-5)
    np.testing.assert_array_equal(kernel(q.numpy(), k.numpy(), v.numpy(), z=z.numpy()), o)
    d_o = np.random.default_rng(0).standard_normal(o.shape).astype(np.float32)
    d_q, d_k, d_v, d_inputs = kernel.backward(q.numpy(), k.numpy(), v.numpy(), o, lse, d_o, z=z.numpy())
    assert set(d_inputs) == {"z"} and d_inputs["z"].shape == (heads,) and d_inputs["z"].dtype == np.float32
    x = [t.double().requires_grad_() for t in (q, k, v, z)]
    want = torch.autograd.grad(reference("sink_window", *x[:3], {"z": x[3]})[0], x, torch.from_numpy(d_o).double())
    for g, w in zip((d_q, d_k, d_v, d_inputs["z"]), want):
        close(torch.from_numpy(g), w, 1e-3, "numpy")


def test_out(kernels):
    n = 30
    q, k, v = tensors(1, 2, 2, n, n)
    slope = make_floats("alibi_local", 2)["slope"]
    out = torch.empty_like(q)
    assert kernels["alibi_local"](q, k, v, out=out, slope=slope) is out
    assert torch.equal(out, kernels["alibi_local"](q, k, v, slope=slope))


# ---- what a kernel says about its inputs ---------------------------------------------


def test_kernel_describes_float_inputs(kernels):
    alibi, t5, capped, doc = kernels["alibi_local"], kernels["t5_bias"], kernels["capped_fixed"], kernels["doc_alibi"]
    assert alibi.inputs == {"slope": 1} and alibi.float_inputs == ("slope",)
    assert alibi.modifiers == ("score",)
    assert kernels["sink_window"].modifiers == ("sink",)
    assert capped.modifiers == ("score",) and capped.inputs == {} and capped.float_inputs == ()
    assert t5.input_shape("rel", 100, heads=6) == (6, 8)
    assert alibi.input_shape("slope", 10, heads=3) == (3,)
    assert alibi.input_shape("slope", 10) == (1,)  # (no heads declared: 1 unless given)
    info = doc.input_info(n=12, heads=4)
    assert info == {"doc": {"is_float": False, "rank": 1, "shape": (12,), "id_limit": None},
                    "slope": {"is_float": True, "rank": 1, "shape": (4,), "id_limit": None}}
    assert alibi.input_id_limit("slope", 10) is None


# ---- errors ---------------------------------------------------------------------------


def test_errors(kernels):
    alibi, t5, doc = kernels["alibi_local"], kernels["t5_bias"], kernels["doc_alibi"]
    n, heads = 20, 4
    q, k, v = tensors(2, heads, 2, n, n)
    slope = torch.ones(heads)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        alibi(q, k, v)
    assert "'slope'" in str(info.value) and "missing" in str(info.value)
    assert "float input of shape [4] at n = 20 with 4 query heads" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE") as info:
        alibi(q, k, v, slope=torch.ones(3))
    assert "input 'slope' has shape [3]" in str(info.value) and "it must be [4]" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE") as info:
        alibi(q, k, v, slope=torch.ones(2, heads))  # no batch dimension for a float input
    assert "no batch or head dimensions" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE") as info:
        t5(q, k, v, rel=torch.ones(heads, 7))
    assert "[4, 8]" in str(info.value)
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        alibi(q, k, v, slope=torch.ones(heads, dtype=torch.int64))
    assert "input 'slope'" in str(info.value) and "float input" in str(info.value)
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        alibi(q, k, v, slope=torch.ones(heads, dtype=torch.float64))
    assert "float32 or bfloat16" in str(info.value)
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        doc(q, k, v, doc=torch.zeros(n), slope=slope)
    assert "input 'doc'" in str(info.value) and "int input" in str(info.value)
    with pytest.raises(TypeError, match="input 'slope'"):
        alibi(q, k, v, slope=[1.0] * heads)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        alibi(q, k, v, slope=slope, z=slope)
    assert "no input 'z'" in str(info.value)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT"):
        kernels["capped_fixed"](q, k, v, slope=slope)  # a score without inputs takes none
    # numpy
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        alibi.forward(q.numpy(), k.numpy(), v.numpy(), slope=np.ones(heads))  # float64
    assert "float32 array" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE"):
        alibi.forward(q.numpy(), k.numpy(), v.numpy(), slope=np.ones(heads + 1, dtype=np.float32))
    # varlen and distributed do not take them yet
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as info:
        attnc.torch.attention_varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1),
                                     [0, n], kernel=alibi)
    assert "float inputs" in str(info.value)


def test_distributed_refuses_score_modifiers(kernels):
    import attnc.distributed

    for name in ("alibi_local", "capped_fixed", "sink_window"):
        with raises_status("ATTNC_ERROR_UNSUPPORTED") as info:
            attnc.distributed.shard(kernels[name], 64, 2)
        assert "score modifier" in str(info.value), name
