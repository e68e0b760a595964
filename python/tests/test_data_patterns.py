"""Patterns that read data (``input NAME : int[...]``): lsh, document, nsa and topk from
patterns/, called with their inputs as keyword arguments, against a float64 reference over
boolean masks built from the same data in plain torch (not from attnc's plans or analyses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnc
import attnc.torch
from conftest import pattern_path, raises_status

D = 16
# Small parameters, so that blocks, windows and selections do not divide n evenly.
PARAMS = {"lsh": {}, "document": {}, "nsa": {"B": 4, "k": 3, "w": 5}, "topk": {"k": 4, "w": 3}}
PATTERNS = tuple(PARAMS)
LENGTHS = (1, 2, 63, 257)


@pytest.fixture(scope="module")
def kernels():
    return {name: attnc.compile(pattern_path(name), **params) for name, params in PARAMS.items()}


def make_inputs(name: str, lead: tuple, n: int, seed: int = 0, dtype=torch.int64) -> dict:
    """Random data for pattern `name` at length n, of shape lead + the declared dimensions: few
    buckets and documents (so that keys share them), block and token ids with -1 among them."""
    g = torch.Generator().manual_seed(seed)
    p = PARAMS[name]
    if name == "lsh":
        buckets = 2 if n < 8 else 5
        out = {b: torch.randint(0, buckets, lead + (n,), generator=g) for b in ("b0", "b1")}
    elif name == "document":
        out = {"doc": torch.randint(0, 3, lead + (n,), generator=g).cumsum(-1) // 4}  # runs of ids
    elif name == "nsa":
        rows = (n + p["B"] - 1) // p["B"]
        out = {"sel": torch.randint(-1, rows, lead + (rows, p["k"]), generator=g)}
    else:
        out = {"top": torch.randint(-1, n, lead + (n, p["k"]), generator=g)}
    return {key: value.to(dtype) for key, value in out.items()}


def full_inputs(name: str, inputs: dict, batch: int, heads: int) -> dict:
    """The inputs expanded to [batch, heads, ...] (each 1-D input has rank 1, nsa/topk rank 2)."""
    rank = 2 if name in ("nsa", "topk") else 1
    out = {}
    for key, x in inputs.items():
        if x.dim() == rank:  # [D...]: shared by all
            x = x[None, None]
        elif x.dim() == rank + 1:  # [batch, D...]: shared by the heads
            x = x[:, None]
        out[key] = x.expand(batch, heads, *x.shape[2:]).long()
    return out


def mask_of(name: str, data: dict, nq: int, nk: int) -> torch.Tensor:
    """bool [batch, heads, nq, nk]: the pattern's keys for the queries at positions nk - nq .. nk - 1,
    written from patterns/<name>.attn in plain torch over [batch, heads, ...] data."""
    p = PARAMS[name]
    i = torch.arange(nk - nq, nk)[:, None]  # query positions, [nq, 1]
    j = torch.arange(nk)[None, :]  # key positions, [1, nk]
    causal = j <= i
    if name == "lsh":
        same = torch.zeros((), dtype=torch.bool)
        for b in (data["b0"], data["b1"]):
            same = same | (b[..., nk - nq:, None] == b[..., None, :])
        others = same & causal & (j != i)
        alone = ~others.any(-1, keepdim=True)  # no earlier key shares a bucket: the query itself
        return others | (alone & (j == i))
    if name == "document":
        doc = data["doc"]
        return (doc[..., nk - nq:, None] == doc[..., None, :]) & causal
    if name == "nsa":
        sel = data["sel"][..., i[:, 0] // p["B"], :]  # [batch, heads, nq, k]: the query's block row
        picked = ((j // p["B"])[..., None] == sel[..., :, None, :]).any(-1)
        return (picked | (i - j < p["w"])) & causal
    top = data["top"][..., nk - nq:, :]  # [batch, heads, nq, k]
    picked = (j[..., None] == top[..., :, None, :]).any(-1)
    return (picked | (i - j < p["w"])) & causal


def reference(q, k, v, mask, scale=None):
    """(O, lse) in float64: softmax over each row's keys (zeros and -inf for a row without),
    grouped-query heads by repeating k and v. Differentiable."""
    q, k, v = (x.double() for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (scale * q @ k.transpose(-1, -2)).masked_fill(~mask, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.where(mask, torch.exp(s - safe[..., None]), torch.zeros_like(s))
    return p @ v, lse


def tensors(batch, hq, hkv, nq, nk, dtype=torch.float32, seed=1, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, nq, D, generator=g)
    k, v = (torch.randn(batch, hkv, nk, D, generator=g) for _ in range(2))
    return [x.to(dtype).requires_grad_(requires_grad) for x in (q, k, v)]


# ---- forward and backward against the reference ------------------------------------


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("name", PATTERNS)
def test_forward_per_head_inputs(kernels, name, n):
    batch, heads = 2, 3
    q, k, v = tensors(batch, heads, heads, n, n)
    data = make_inputs(name, (batch, heads), n, seed=n)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernels[name], **data)
    want_o, want_lse = reference(q, k, v, mask_of(name, data, n, n))
    torch.testing.assert_close(o.double(), want_o, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("lead", [(), (1,), (2,), (1, 1), (2, 1), (1, 4), (2, 4)],
                         ids=lambda lead: "x".join(map(str, lead)) or "shared")
@pytest.mark.parametrize("name", PATTERNS)
def test_broadcast_inputs_and_gqa(kernels, name, lead):
    """An input without [batch] or [batch, heads], or with 1 there, is shared; heads count query
    heads (4 here over 2 key/value heads)."""
    batch, hq, hkv, n = 2, 4, 2, 37
    q, k, v = tensors(batch, hq, hkv, n, n)
    data = make_inputs(name, lead, n, seed=len(lead))
    o = kernels[name](q, k, v, **data)
    want, _ = reference(q, k, v, mask_of(name, full_inputs(name, data, batch, hq), n, n))
    torch.testing.assert_close(o.double(), want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("n", (2, 63))
@pytest.mark.parametrize("name", PATTERNS)
def test_gradients(kernels, name, n):
    batch, hq, hkv = 2, 4, 2
    q, k, v = tensors(batch, hq, hkv, n, n, requires_grad=True)
    data = make_inputs(name, (batch, hq), n, seed=7)
    d_o = torch.randn(batch, hq, n, D, generator=torch.Generator().manual_seed(3))
    grads = torch.autograd.grad(kernels[name](q, k, v, **data), (q, k, v), d_o)
    x = [t.detach().double().requires_grad_() for t in (q, k, v)]
    want_o, _ = reference(*x, mask_of(name, data, n, n))
    want = torch.autograd.grad(want_o, x, d_o.double())
    for got, exp, label in zip(grads, want, "qkv"):
        assert got.shape == exp.shape, label
        torch.testing.assert_close(got.double(), exp, atol=1e-5, rtol=1e-4, msg=f"d{label}")


@pytest.mark.parametrize("name", PATTERNS)
def test_bf16(kernels, name):
    batch, heads, n = 1, 2, 63
    q, k, v = tensors(batch, heads, heads, n, n, dtype=torch.bfloat16, requires_grad=True)
    data = make_inputs(name, (batch, heads), n, seed=5)
    o = kernels[name](q, k, v, **data)
    assert o.dtype == torch.bfloat16
    mask = mask_of(name, data, n, n)
    want, _ = reference(q, k, v, mask)  # on the bf16 values
    torch.testing.assert_close(o.double(), want, atol=2e-2, rtol=2e-2)
    d_q, = torch.autograd.grad(o.float().sum(), q)
    x = q.detach().double().requires_grad_()
    want_dq, = torch.autograd.grad(reference(x, k.detach(), v.detach(), mask)[0].sum(), x)
    torch.testing.assert_close(d_q.double(), want_dq, atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("name", PATTERNS)
def test_int32_and_int64_agree(kernels, name):
    q, k, v = tensors(2, 2, 2, 63, 63)
    wide = make_inputs(name, (2, 2), 63, seed=11, dtype=torch.int64)
    narrow = {key: x.to(torch.int32) for key, x in wide.items()}
    o64, o32 = kernels[name](q, k, v, **wide), kernels[name](q, k, v, **narrow)
    assert torch.equal(o64, o32)
    want, _ = reference(q, k, v, mask_of(name, wide, 63, 63))
    torch.testing.assert_close(o32.double(), want, atol=2e-6, rtol=1e-5)


def test_strided_and_expanded_inputs(kernels):
    """Inputs of any layout: a transposed view, a slice, an expand (stride 0, copied once)."""
    n = 50
    q, k, v = tensors(2, 3, 3, n, n)
    top = make_inputs("topk", (2, 3), n, seed=2)["top"]
    transposed = top.transpose(-1, -2).contiguous().transpose(-1, -2)  # column-major rows
    assert not transposed.is_contiguous()
    wide = torch.cat([top, top], dim=-1)[..., ::2]  # a view with stride 2 along k
    assert wide.stride(-1) == 2
    doc = make_inputs("document", (), n, seed=3)["doc"]
    want_top, _ = reference(q, k, v, mask_of("topk", {"top": top}, n, n))
    torch.testing.assert_close(kernels["topk"](q, k, v, top=transposed).double(), want_top, atol=2e-6, rtol=1e-5)
    want_wide, _ = reference(q, k, v, mask_of("topk", {"top": wide}, n, n))
    torch.testing.assert_close(kernels["topk"](q, k, v, top=wide).double(), want_wide, atol=2e-6, rtol=1e-5)
    expanded = doc.expand(2, 3, n)
    assert expanded.stride() == (0, 0, 1)
    want_doc, _ = reference(q, k, v, mask_of("document", full_inputs("document", {"doc": doc}, 2, 3), n, n))
    torch.testing.assert_close(kernels["document"](q, k, v, doc=expanded).double(), want_doc, atol=2e-6,
                               rtol=1e-5)


def test_fewer_queries_than_keys(kernels):
    """The queries are the last nq of the nk positions; the inputs have the keys' length."""
    nq, nk = 5, 40
    q, k, v = tensors(1, 2, 2, nq, nk, requires_grad=True)
    for name in PATTERNS:
        data = make_inputs(name, (), nk, seed=4)
        o = kernels[name](q, k, v, **data)
        want, _ = reference(q, k, v, mask_of(name, full_inputs(name, data, 1, 2), nq, nk))
        torch.testing.assert_close(o.double(), want, atol=2e-6, rtol=1e-5, msg=name)


def test_lsh_self_rule(kernels):
    """patterns/lsh.attn's `attend same - { i } else { i }`: distinct buckets attend only
    themselves (O = V); one shared bucket attends every earlier key but not itself."""
    n = 9
    q, k, v = tensors(1, 1, 1, n, n)
    ids = torch.arange(n)
    o = kernels["lsh"](q, k, v, b0=ids, b1=ids + 100)
    torch.testing.assert_close(o, v)
    zeros = torch.zeros(n, dtype=torch.int64)
    o = kernels["lsh"](q, k, v, b0=zeros, b1=ids)
    mask = torch.ones(n, n, dtype=torch.bool).tril(-1)
    mask[0, 0] = True  # the first position has no earlier key: itself
    want, _ = reference(q, k, v, mask[None, None])
    torch.testing.assert_close(o.double(), want, atol=2e-6, rtol=1e-5)


# ---- numpy, the op, the eager path ---------------------------------------------------


@pytest.mark.parametrize("name", PATTERNS)
def test_numpy_forward_and_backward(kernels, name):
    n = 63
    q, k, v = tensors(2, 4, 2, n, n)
    data = make_inputs(name, (2,), n, seed=9, dtype=torch.int32)
    arrays = {key: x.numpy() for key, x in data.items()}
    kernel = kernels[name]
    o, lse = kernel.forward(q.numpy(), k.numpy(), v.numpy(), **arrays)
    mask = mask_of(name, full_inputs(name, data, 2, 4), n, n)
    want_o, want_lse = reference(q, k, v, mask)
    np.testing.assert_allclose(o, want_o.numpy(), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(lse, want_lse.numpy(), atol=2e-6, rtol=1e-5)
    np.testing.assert_array_equal(kernel(q.numpy(), k.numpy(), v.numpy(), **arrays), o)
    out = np.empty_like(o)
    assert kernel(q.numpy(), k.numpy(), v.numpy(), out=out, **arrays) is out
    np.testing.assert_array_equal(out, o)
    d_o = np.random.default_rng(0).standard_normal(o.shape).astype(np.float32)
    grads = kernel.backward(q.numpy(), k.numpy(), v.numpy(), o, lse, d_o, **arrays)
    x = [t.double().requires_grad_() for t in (q, k, v)]
    want = torch.autograd.grad(reference(*x, mask)[0], x, torch.from_numpy(d_o).double())
    for got, exp in zip(grads, want):
        np.testing.assert_allclose(got, exp.numpy(), atol=1e-5, rtol=1e-4)
    # Lists of ints work too on the numpy path; the torch path takes the same arrays.
    if name == "document":
        listed = {key: x.tolist() for key, x in arrays.items()}
        np.testing.assert_array_equal(kernel(q.numpy(), k.numpy(), v.numpy(), **listed), o)
    torch.testing.assert_close(kernel(q, k, v, **arrays), torch.from_numpy(o), atol=0, rtol=0)


@pytest.mark.parametrize("name", PATTERNS)
def test_eager_path_matches_the_op(kernels, name):
    n = 40
    q, k, v = tensors(2, 2, 2, n, n, requires_grad=True)
    data = make_inputs(name, (2, 2), n, seed=1)
    kernel = kernels[name]
    o = kernel(q, k, v, **data)
    inputs = [data[key].unsqueeze(-1) if rank == 1 else data[key] for key, rank in kernel.inputs.items()]
    o_op, _ = torch.ops.attnc.attention_data(q, k, v, inputs, kernel.id, 0.0)
    assert torch.equal(o, o_op)
    d_o = torch.randn_like(o)
    assert all(torch.equal(a, b) for a, b in zip(torch.autograd.grad(o, (q, k, v), d_o),
                                                 torch.autograd.grad(o_op, (q, k, v), d_o)))


def test_modes_see_the_op(kernels):
    """Outside plain eager mode (here a TorchDispatchMode) the call goes through attnc::attention_data,
    forward and backward, with the results of the eager path."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Record(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = tensors(1, 2, 2, 20, 20, requires_grad=True)
    data = make_inputs("topk", (), 20)
    with Record() as seen:
        o = kernels["topk"](q, k, v, **data)
        o.sum().backward()
    assert "attnc.attention_data.default" in seen.ops
    assert "attnc.attention_data_backward.default" in seen.ops
    assert torch.equal(o, kernels["topk"](q, k, v, **data))


def test_out(kernels):
    n = 30
    q, k, v = tensors(1, 2, 2, n, n)
    data = make_inputs("nsa", (), n, seed=6)
    out = torch.empty_like(q)
    assert kernels["nsa"](q, k, v, out=out, **data) is out
    assert torch.equal(out, kernels["nsa"](q, k, v, **data))


def test_opcheck(kernels):
    kernel = kernels["nsa"]
    n = 30
    q, k, v = tensors(2, 2, 2, n, n, requires_grad=True)
    sel = make_inputs("nsa", (2, 2), n, seed=8)["sel"]
    torch.library.opcheck(torch.ops.attnc.attention_data.default, (q, k, v, [sel], kernel.id, 0.0))
    doc = make_inputs("document", (), n)["doc"].reshape(1, 1, n, 1).to(torch.int32)
    torch.library.opcheck(torch.ops.attnc.attention_data.default,
                          (q.detach(), k.detach(), v.detach(), [doc], kernels["document"].id, 0.5))
    o, lse = torch.ops.attnc.attention_data(q, k, v, [sel], kernel.id, 0.0)
    torch.library.opcheck(torch.ops.attnc.attention_data_backward.default,
                          (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o.detach(), lse, [sel],
                           kernel.id, 0.0))


# ---- torch.compile ----------------------------------------------------------------


def test_compile_fullgraph_new_data_every_call_does_not_recompile(kernels):
    import torch._dynamo

    kernel = kernels["lsh"]
    n = 48
    proj = torch.nn.Linear(D, D)

    def step(qk, v, b0, b1):
        return (proj(kernel(qk, qk, v, b0=b0, b1=b1)) ** 2).mean()

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(step, fullgraph=True)
    before = attnc.cache_stats()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for seed in range(3):
            qk, _, v = tensors(2, 2, 2, n, n, seed=seed, requires_grad=True)
            b0, b1 = attnc.lsh_buckets(qk, 8, 2, seed=seed)
            loss = compiled(qk, v, b0, b1)
            grads = torch.autograd.grad(loss, (qk, v))
            data = {"b0": b0, "b1": b1}
            x = [t.detach().double().requires_grad_() for t in (qk, v)]
            want_o, _ = reference(x[0], x[0], x[1], mask_of("lsh", data, n, n))
            want_loss = (torch.nn.functional.linear(want_o, proj.weight.double(), proj.bias.double()) ** 2).mean()
            want = torch.autograd.grad(want_loss, x)
            torch.testing.assert_close(loss.double(), want_loss, atol=1e-6, rtol=1e-5)
            for got, exp in zip(grads, want):
                torch.testing.assert_close(got.double(), exp, atol=1e-5, rtol=1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert attnc.cache_stats() == before


def test_compile_checks_the_declared_dimensions(kernels):
    """Under torch.compile the fake implementation checks the inputs' dimensions at n."""
    kernel = kernels["nsa"]
    compiled = torch.compile(lambda q, k, v, sel: kernel(q, k, v, sel=sel), fullgraph=True, backend="aot_eager")
    q, k, v = tensors(1, 2, 2, 30, 30)
    with pytest.raises(Exception, match="input 'sel' has shape"):
        compiled(q, k, v, torch.zeros(7, 3, dtype=torch.int64))  # 8 block rows at n = 30


# ---- errors -----------------------------------------------------------------------


def test_errors_name_the_input(kernels):
    lsh, nsa = kernels["lsh"], kernels["nsa"]
    n = 20
    q, k, v = tensors(2, 2, 2, n, n)
    b = torch.zeros(n, dtype=torch.int64)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        lsh(q, k, v, b0=b)
    assert "'b1'" in str(info.value) and "missing" in str(info.value)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        lsh(q, k, v)
    assert "'b0', 'b1'" in str(info.value)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        lsh(q, k, v, b0=b, b1=b, b2=b)
    assert "no input 'b2'" in str(info.value)
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        lsh(q, k, v, b0=b, b1=b.float())
    assert "input 'b1'" in str(info.value) and "float32" in str(info.value)
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        lsh(q, k, v, b0=b.to(torch.int16), b1=b)
    assert "input 'b0'" in str(info.value)
    for bad in (torch.zeros(n - 1, dtype=torch.int64), torch.zeros(3, n, dtype=torch.int64),
                torch.zeros(2, 3, n, dtype=torch.int64), torch.zeros(1, 1, 1, n, dtype=torch.int64)):
        with raises_status("ATTNC_ERROR_SHAPE") as info:
            lsh(q, k, v, b0=b, b1=bad)
        assert "input 'b1'" in str(info.value) and f"at n = {n}" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE") as info:
        nsa(q, k, v, sel=torch.zeros(5, 2, dtype=torch.int64))  # [5, 3] at n = 20
    assert "input 'sel'" in str(info.value) and "[5, 3]" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE"):
        nsa(q, k, v, sel=torch.zeros(15, dtype=torch.int64))  # a 2-D input given 1-D
    # The runtime checks the ids against the blocks at n.
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        nsa(q, k, v, sel=torch.full((5, 3), 5, dtype=torch.int64))
    assert "input 'sel' holds 5" in str(info.value)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        nsa.forward(q.numpy(), k.numpy(), v.numpy(), sel=np.full((5, 3), -2, dtype=np.int32))
    assert "input 'sel' holds -2" in str(info.value)
    # numpy: the same checks.
    with raises_status("ATTNC_ERROR_DTYPE") as info:
        lsh.forward(q.numpy(), k.numpy(), v.numpy(), b0=b.numpy(), b1=b.numpy().astype(np.float64))
    assert "input 'b1'" in str(info.value)
    with raises_status("ATTNC_ERROR_SHAPE") as info:
        lsh(q.numpy(), k.numpy(), v.numpy(), b0=b.numpy()[:-1], b1=b.numpy())
    assert "input 'b0'" in str(info.value)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        lsh.backward(q.numpy(), k.numpy(), v.numpy(), q.numpy(), np.zeros((2, 2, n), np.float32), q.numpy(),
                     b0=b.numpy())
    assert "'b1'" in str(info.value)
    # Inputs live with the tensors.
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
        lsh(q, k, v, b0=b, b1=b.to("meta"))
    assert "input 'b1' is on device 'meta'" in str(info.value)
    with pytest.raises(TypeError, match="input 'b0'"):
        lsh(q, k, v, b0=[0] * n, b1=b)


def test_a_positional_pattern_takes_no_inputs():
    kernel = attnc.compile(pattern_path("causal"))
    assert kernel.inputs == {}
    q, k, v = tensors(1, 1, 1, 8, 8)
    b = torch.zeros(8, dtype=torch.int64)
    for call in (lambda: kernel(q, k, v, b0=b), lambda: attnc.torch.attention_with_lse(q, k, v, kernel, b0=b),
                 lambda: kernel.forward(q.numpy(), k.numpy(), v.numpy(), b0=b.numpy())):
        with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as info:
            call()
        assert "reads no data" in str(info.value) and "'b0'" in str(info.value)


def test_unsupported_calls(kernels):
    lsh = kernels["lsh"]
    q, k, v = (torch.randn(6, 2, D) for _ in range(3))
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as info:
        attnc.torch.attention_varlen(q, k, v, cu, kernel=lsh)
    assert "varlen" in str(info.value)
    q, k, v = (torch.randn(1, 1, 4, D, device="meta") for _ in range(3))
    b = torch.zeros(4, dtype=torch.int64, device="meta")
    with raises_status("ATTNC_ERROR_UNSUPPORTED"):
        lsh(q, k, v, b0=b, b1=b)


def test_distributed_refuses_data_patterns(kernels):
    import attnc.distributed

    lsh = kernels["lsh"]
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as info:
        attnc.distributed.shard(lsh, 64, 2)
    assert "reads data" in str(info.value) and "not supported by attnc.distributed yet" in str(info.value)
    q, k, v = tensors(1, 1, 1, 8, 8)
    # Refused before anything else (no process group exists here, which would be the next error).
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as info:
        attnc.distributed.attention(lsh, q, k, v, None)
    assert "not supported by attnc.distributed yet" in str(info.value)


def test_kernel_inputs(kernels):
    assert kernels["lsh"].inputs == {"b0": 1, "b1": 1}
    assert list(kernels["lsh"].inputs) == ["b0", "b1"]
    assert kernels["nsa"].inputs == {"sel": 2}
    assert kernels["topk"].inputs == {"top": 2}
    assert kernels["document"].input_shape("doc", 10) == (10,)
    assert kernels["nsa"].input_shape("sel", 10) == (3, 3)
    assert kernels["nsa"].input_shape("sel", 12) == (3, 3)
    assert kernels["nsa"].input_shape("sel", 13) == (4, 3)
    assert kernels["topk"].input_shape("top", 7) == (7, 4)
    assert kernels["nsa"].input_id_limit("sel", 13) == 4
    assert kernels["topk"].input_id_limit("top", 7) == 7
    assert kernels["lsh"].input_id_limit("b0", 7) is None
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT"):
        kernels["lsh"].input_shape("b2", 10)
    with pytest.raises(ValueError):
        kernels["lsh"].input_shape("b0", 0)


# ---- lsh_buckets and the whole LSH example --------------------------------------------


def test_lsh_buckets_shape_and_determinism():
    x = torch.randn(2, 3, 50, D, generator=torch.Generator().manual_seed(0))
    b = attnc.lsh_buckets(x, 16, 3, seed=4)
    assert b.shape == (3, 2, 3, 50) and b.dtype == torch.int64
    assert int(b.min()) >= 0 and int(b.max()) < 16
    assert torch.equal(b, attnc.lsh_buckets(x.clone(), 16, 3, seed=4))
    assert not torch.equal(b, attnc.lsh_buckets(x, 16, 3, seed=5))
    assert not torch.equal(b[0], b[1])  # each round its own rotation
    # The rounds of a call with more rounds begin with those of fewer (one generator stream).
    assert torch.equal(attnc.lsh_buckets(x, 16, 2, seed=4)[0], attnc.lsh_buckets(x, 16, 1, seed=4)[0])
    # Angular: a positive multiple hashes alike; -x lands in the opposite bucket (h + b/2 mod b).
    assert torch.equal(attnc.lsh_buckets(3.0 * x, 16, 3, seed=4), b)
    assert torch.equal(attnc.lsh_buckets(-x, 16, 3, seed=4), (b + 8) % 16)
    # Near vectors share a bucket far more often than unrelated ones.
    near = attnc.lsh_buckets(x + 1e-3 * torch.randn_like(x), 16, 3, seed=4)
    other = attnc.lsh_buckets(torch.randn_like(x), 16, 3, seed=4)
    assert (near == b).float().mean() > 0.9 and (other == b).float().mean() < 0.3
    # bf16 input, one vector.
    assert attnc.lsh_buckets(x[0, 0, :1].bfloat16(), 2, 1).shape == (1, 1)
    for buckets in (3, 0, -2):
        with pytest.raises(ValueError):
            attnc.lsh_buckets(x, buckets, 2)
    with pytest.raises(ValueError):
        attnc.lsh_buckets(x, 4, 0)
    with pytest.raises(ValueError):
        attnc.lsh_buckets(torch.zeros(4, dtype=torch.int64), 4, 1)
    with pytest.raises(TypeError):
        attnc.lsh_buckets(x.numpy(), 4, 1)


def test_lsh_example_end_to_end(kernels):
    """Reformer with shared QK: the buckets of qk, then attention over them; O and the gradients
    of qk (through both the queries and the keys) and v against the reference."""
    batch, heads, n = 2, 2, 257
    g = torch.Generator().manual_seed(12)
    qk = torch.randn(batch, heads, n, D, generator=g, requires_grad=True)
    v = torch.randn(batch, heads, n, D, generator=g, requires_grad=True)
    b0, b1 = attnc.lsh_buckets(qk, 16, 2, seed=0)
    assert b0.shape == (batch, heads, n)
    o = kernels["lsh"](qk, qk, v, b0=b0, b1=b1)
    mask = mask_of("lsh", {"b0": b0, "b1": b1}, n, n)
    assert mask.sum(-1).float().mean() > 5  # the buckets group keys: rows attend more than themselves
    x = [t.detach().double().requires_grad_() for t in (qk, v)]
    want, _ = reference(x[0], x[0], x[1], mask)
    torch.testing.assert_close(o.double(), want, atol=2e-6, rtol=1e-5)
    d_o = torch.randn(o.shape, generator=g)
    grads = torch.autograd.grad(o, (qk, v), d_o)
    for got, exp in zip(grads, torch.autograd.grad(want, x, d_o.double())):
        torch.testing.assert_close(got.double(), exp, atol=1e-5, rtol=1e-4)
