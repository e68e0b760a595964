"""The shapes of ABI 3 from Python: grouped-query heads (Hq a multiple of Hkv), fewer queries
than keys (bottom-right aligned), FlashAttention-style varlen batches and empty calls.

The reference is written here in float64 torch from the definitions (query head h reads
key/value head h // (Hq // Hkv); query row r of nq sits at position r + nk - nq; a varlen
batch is its sequences one by one), on masks evaluated from the patterns' definitions for
causal, local and full and read from attnc.show for the others. Its autograd gives the
reference gradients; torch's scaled_dot_product_attention(enable_gqa=True) is a second
reference for the grouped heads.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnc
import attnc.torch
from conftest import LIBRARY, library_kernel, pattern_masks, raises_status, reference

D = 16
NK = 61  # ragged against every block, stride and window of LIBRARY
F32 = dict(atol=2e-5, rtol=1e-4)
F32_GRAD = dict(atol=1e-4, rtol=1e-4)
# Inputs are exact in bf16; outputs are rounded to bf16's 8 bits, gradients summed in f32 first.
BF16 = dict(atol=2e-2, rtol=2e-2)
BF16_GRAD = dict(atol=5e-2, rtol=3e-2)


def definition_mask(name: str, n: int) -> np.ndarray:
    """bool [n, n] straight from the pattern's definition (patterns/<name>.attn)."""
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    if name == "full":
        return np.ones((n, n), dtype=bool)
    if name == "causal":
        return j <= i
    if name == "local":
        return (j <= i) & (i - j < LIBRARY["local"]["w"])
    raise KeyError(name)


@functools.lru_cache(maxsize=None)
def masks_at(name: str, nk: int) -> np.ndarray:
    """bool [heads or 1, nk, nk]: the pattern's key sets at length nk (per query head where the
    pattern declares heads)."""
    if name in ("full", "causal", "local"):
        return definition_mask(name, nk)[None]
    heads = library_kernel(name).heads or 1
    return pattern_masks(name, nk, heads, **LIBRARY[name])


def dense_reference(q, k, v, name, scale=None):
    """(O, lse) in float64 of q [B, Hq, nq, d] over k, v [B, Hkv, nk, d], differentiable."""
    nq, nk = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    rows = masks_at(name, nk)[:, nk - nq:, :]  # bottom-right: the last nq positions
    k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    return reference(q, k, v, rows, scale=scale)


def varlen_reference(q, k, v, cu_q, cu_k, name, scale=None):
    """(O [total_q, Hq, d], lse [Hq, total_q]) in float64, one sequence at a time."""
    outs, lses = [], []
    for s in range(len(cu_q) - 1):
        qs = q[cu_q[s]:cu_q[s + 1]].permute(1, 0, 2)[None]
        ks, vs = (x[cu_k[s]:cu_k[s + 1]].permute(1, 0, 2)[None] for x in (k, v))
        if qs.shape[2] == 0:
            outs.append(q.new_zeros((0,) + tuple(q.shape[1:]), dtype=torch.float64))
            lses.append(q.new_zeros((q.shape[1], 0), dtype=torch.float64))
            continue
        o, lse = dense_reference(qs, ks, vs, name, scale)
        outs.append(o[0].permute(1, 0, 2))
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def reference_grads_of(fn, inputs, d_o):
    x = [t.detach().double().requires_grad_() for t in inputs]
    o = fn(*x)[0]
    if not o.requires_grad:  # no query at all: nothing depends on the inputs
        return [torch.zeros_like(t) for t in x]
    return torch.autograd.grad(o, x, d_o.double(), allow_unused=True, materialize_grads=True)


def randn(shape, seed, dtype=torch.float32, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad)


def dense_inputs(b, hq, hkv, nq, nk, dtype=torch.float32, requires_grad=False):
    return (randn((b, hq, nq, D), 1, dtype, requires_grad), randn((b, hkv, nk, D), 2, dtype, requires_grad),
            randn((b, hkv, nk, D), 3, dtype, requires_grad))


def offsets(lengths):
    return [0] + list(np.cumsum(lengths).tolist())


def varlen_inputs(lengths_q, lengths_k, hq, hkv, dtype=torch.float32, requires_grad=False):
    tq, tk = sum(lengths_q), sum(lengths_k)
    return (randn((tq, hq, D), 4, dtype, requires_grad), randn((tk, hkv, D), 5, dtype, requires_grad),
            randn((tk, hkv, D), 6, dtype, requires_grad))


def assert_close(got, want, what, tolerance):
    torch.testing.assert_close(got.double(), want.double(), **tolerance, msg=lambda m: f"{what}: {m}")


def assert_lse_close(got, want, tolerance):
    empty = torch.isinf(want)
    assert torch.all(torch.isinf(got[empty]) & (got[empty] < 0)), "rows with no keys have lse -inf"
    assert_close(got[~empty], want[~empty], "lse", tolerance)


# (pattern, Hq, Hkv): Hq / Hkv in {1, 4, 8}; strided_multihead declares 2 heads.
GROUPED = [(name, 8, hkv) for name in ("causal", "local", "full", "fixed") for hkv in (8, 2, 1)]
GROUPED += [("strided_multihead", 2, 2), ("strided_multihead", 2, 1)]
QUERIES = [1, 7, NK]


def case_id(case):
    name, hq, hkv = case
    return f"{name}-hq{hq}-hkv{hkv}"


# ---- grouped heads and fewer queries: dense batches ---------------------------------


@pytest.mark.parametrize("nq", QUERIES, ids=lambda n: f"nq{n}")
@pytest.mark.parametrize("case", GROUPED, ids=case_id)
def test_grouped_heads_and_fewer_queries_match_reference(case, nq):
    name, hq, hkv = case
    q, k, v = dense_inputs(2, hq, hkv, nq, NK)
    o, lse = attnc.torch.attention_with_lse(q, k, v, library_kernel(name))
    want_o, want_lse = dense_reference(q, k, v, name)
    assert o.shape == q.shape and lse.shape == q.shape[:3] and o.is_contiguous()
    assert_close(o, want_o, "O", F32)
    assert_lse_close(lse, want_lse, F32)


@pytest.mark.parametrize("nq", QUERIES, ids=lambda n: f"nq{n}")
@pytest.mark.parametrize("case", GROUPED, ids=case_id)
def test_grouped_heads_and_fewer_queries_gradients_match_reference(case, nq):
    name, hq, hkv = case
    kernel = library_kernel(name)
    x = dense_inputs(2, hq, hkv, nq, NK, requires_grad=True)
    d_o = randn(x[0].shape, 9)
    grads = torch.autograd.grad(attnc.torch.attention(*x, kernel), x, d_o)
    want = reference_grads_of(lambda q, k, v: dense_reference(q, k, v, name), x, d_o)
    assert grads[1].shape == x[1].shape and grads[2].shape == x[2].shape
    for got, ref, what in zip(grads, want, ("dQ", "dK", "dV")):
        assert_close(got, ref, what, F32_GRAD)


def test_a_decoding_step_is_the_last_row_of_the_full_sequence():
    # A key/value cache grown one position at a time: each step's single query (nq = 1)
    # attends as the last position, so the steps together equal one causal call.
    kernel = library_kernel("local")
    q, k, v = dense_inputs(1, 8, 2, 40, 40)
    full = attnc.torch.attention(q, k, v, kernel)
    for t in (1, 2, 21, 40):
        step = kernel(q[:, :, t - 1:t], k[:, :, :t], v[:, :, :t])
        assert step.shape == (1, 8, 1, D)
        torch.testing.assert_close(step, full[:, :, t - 1:t], atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["causal", "local"])
@pytest.mark.parametrize("hkv", [8, 2, 1])
@pytest.mark.parametrize("nq", QUERIES, ids=lambda n: f"nq{n}")
def test_grouped_heads_match_torch_sdpa_with_enable_gqa(name, hkv, nq):
    if torch.__version__ < (2, 5):
        pytest.skip(f"torch {torch.__version__} has no enable_gqa (torch 2.5+)")
    kernel = library_kernel(name)
    x = dense_inputs(2, 8, hkv, nq, NK, requires_grad=True)
    mask = torch.from_numpy(definition_mask(name, NK)[NK - nq:])
    o = kernel(*x)
    want = F.scaled_dot_product_attention(*x, attn_mask=mask, enable_gqa=True)
    assert_close(o, want, "O", F32)
    d_o = randn(o.shape, 11)
    grads = torch.autograd.grad(o, x, d_o)
    want_grads = torch.autograd.grad(want, x, d_o)
    for got, ref, what in zip(grads, want_grads, ("dQ", "dK", "dV")):
        assert_close(got, ref, what, F32_GRAD)


def test_grouped_heads_and_fewer_queries_in_bfloat16():
    kernel = library_kernel("fixed")
    x = dense_inputs(1, 8, 2, 7, NK, dtype=torch.bfloat16, requires_grad=True)
    o = kernel(*x)
    assert o.dtype == torch.bfloat16
    assert_close(o, dense_reference(*x, "fixed")[0], "O", BF16)
    d_o = randn(o.shape, 9, torch.bfloat16)
    grads = torch.autograd.grad(o, x, d_o)
    want = reference_grads_of(lambda q, k, v: dense_reference(q, k, v, "fixed"), x, d_o)
    for got, ref, what in zip(grads, want, ("dQ", "dK", "dV")):
        assert got.dtype == torch.bfloat16 and got.shape == ref.shape
        assert_close(got, ref, what, BF16_GRAD)


def test_numpy_arrays_take_grouped_heads_and_fewer_queries():
    kernel = library_kernel("causal")
    q, k, v = (x.numpy() for x in dense_inputs(2, 4, 1, 7, NK))
    d_o = randn((2, 4, 7, D), 9).numpy()
    o, lse = kernel.forward(q, k, v)
    np.testing.assert_array_equal(kernel(q, k, v), o)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    want_o, want_lse = dense_reference(tq, tk, tv, "causal")
    np.testing.assert_allclose(o, want_o.numpy(), **F32)
    np.testing.assert_allclose(lse, want_lse.numpy(), **F32)
    grads = kernel.backward(q, k, v, o, lse, d_o)
    want = reference_grads_of(lambda q, k, v: dense_reference(q, k, v, "causal"), (tq, tk, tv),
                              torch.from_numpy(d_o))
    for got, ref in zip(grads, want):
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref.numpy(), **F32_GRAD)


@pytest.mark.parametrize("shape_q, shape_k", [((0, 4, 5, D), (0, 2, 9, D)), ((2, 4, 0, D), (2, 2, 9, D)),
                                              ((2, 0, 5, D), (2, 0, 9, D))], ids=["batch0", "nq0", "heads0"])
def test_empty_calls_return_empty_outputs_and_zero_key_gradients(shape_q, shape_k):
    kernel = library_kernel("causal")
    q = torch.randn(shape_q, requires_grad=True)
    k, v = (torch.randn(shape_k, requires_grad=True) for _ in range(2))
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernel)
    assert o.shape == q.shape and lse.shape == q.shape[:3]
    grads = torch.autograd.grad(o.sum(), (q, k, v), allow_unused=True)
    assert grads[0].shape == q.shape
    for g in grads[1:]:
        assert g.shape == k.shape and torch.all(g == 0)


# ---- variable-length batches ---------------------------------------------------------

# (lengths of the queries, of the keys): empty and one-row sequences, fewer queries than keys.
VARLEN = {
    "equal": ([0, 1, 37, 5, 0, 20], [0, 1, 37, 5, 0, 20]),
    "fewer-queries": ([3, 0, 1, 33, 1, 7], [40, 9, 1, 33, 50, 20]),
    "all-empty": ([0, 0], [0, 4]),
}
VARLEN_CASES = [("causal", 8, 2), ("local", 8, 8), ("full", 8, 1), ("fixed", 4, 1), ("strided_multihead", 2, 1)]


@pytest.mark.parametrize("lengths", sorted(VARLEN))
@pytest.mark.parametrize("case", VARLEN_CASES, ids=case_id)
def test_varlen_matches_reference(case, lengths):
    name, hq, hkv = case
    lq, lk = VARLEN[lengths]
    q, k, v = varlen_inputs(lq, lk, hq, hkv)
    cu_q, cu_k = offsets(lq), offsets(lk)
    o, lse = attnc.torch.attention_varlen_with_lse(q, k, v, torch.tensor(cu_q, dtype=torch.int32),
                                                   torch.tensor(cu_k, dtype=torch.int32), kernel=library_kernel(name))
    want_o, want_lse = varlen_reference(q, k, v, cu_q, cu_k, name)
    assert o.shape == q.shape and o.is_contiguous() and lse.shape == (hq, q.shape[0])
    assert_close(o, want_o, "O", F32)
    assert_lse_close(lse, want_lse, F32)


@pytest.mark.parametrize("lengths", sorted(VARLEN))
@pytest.mark.parametrize("case", VARLEN_CASES, ids=case_id)
def test_varlen_gradients_match_reference(case, lengths):
    name, hq, hkv = case
    lq, lk = VARLEN[lengths]
    x = varlen_inputs(lq, lk, hq, hkv, requires_grad=True)
    cu_q, cu_k = offsets(lq), offsets(lk)
    o = attnc.torch.attention_varlen(*x, torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32),
                                     kernel=library_kernel(name))
    d_o = randn(o.shape, 12)
    grads = torch.autograd.grad(o, x, d_o, allow_unused=True)
    want = reference_grads_of(lambda q, k, v: varlen_reference(q, k, v, cu_q, cu_k, name), x, d_o)
    for got, ref, what in zip(grads, want, ("dQ", "dK", "dV")):
        assert got.shape == ref.shape
        assert_close(got, ref, what, F32_GRAD)


def test_varlen_keys_take_the_query_offsets_when_cu_seqlens_k_is_none():
    kernel = library_kernel("causal")
    lengths = [4, 0, 1, 30]
    q, k, v = varlen_inputs(lengths, lengths, 4, 2)
    o = attnc.torch.attention_varlen(q, k, v, torch.tensor(offsets(lengths), dtype=torch.int32), kernel=kernel)
    assert_close(o, varlen_reference(q, k, v, offsets(lengths), offsets(lengths), "causal")[0], "O", F32)


def test_varlen_offsets_may_be_int64_tensors_or_lists():
    kernel = library_kernel("local")
    lq, lk = [2, 9, 1], [5, 9, 30]
    q, k, v = varlen_inputs(lq, lk, 4, 1)
    want = attnc.torch.attention_varlen(q, k, v, torch.tensor(offsets(lq), dtype=torch.int32),
                                        torch.tensor(offsets(lk), dtype=torch.int32), kernel=kernel)
    for cu_q, cu_k in ((torch.tensor(offsets(lq)), torch.tensor(offsets(lk))), (offsets(lq), offsets(lk))):
        got = attnc.torch.attention_varlen(q, k, v, cu_q, cu_k, kernel=kernel)
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_varlen_equals_dense_calls_sequence_by_sequence():
    # Each sequence of a packed batch is what a dense call on it alone gives (same kernel path).
    kernel = library_kernel("fixed")
    lq, lk = [7, 1, 20], [30, 1, 20]
    q, k, v = varlen_inputs(lq, lk, 8, 2)
    o = attnc.torch.attention_varlen(q, k, v, offsets(lq), offsets(lk), kernel=kernel)
    cq, ck = offsets(lq), offsets(lk)
    for s in range(3):
        dense = kernel(*(x[a:b].permute(1, 0, 2)[None] for x, (a, b) in
                         ((q, (cq[s], cq[s + 1])), (k, (ck[s], ck[s + 1])), (v, (ck[s], ck[s + 1])))))
        torch.testing.assert_close(o[cq[s]:cq[s + 1]], dense[0].permute(1, 0, 2), atol=1e-6, rtol=1e-5)


def test_varlen_in_bfloat16():
    kernel = library_kernel("causal")
    lq, lk = [5, 0, 1, 30], [9, 2, 1, 30]
    x = varlen_inputs(lq, lk, 8, 2, dtype=torch.bfloat16, requires_grad=True)
    o = attnc.torch.attention_varlen(*x, offsets(lq), offsets(lk), kernel=kernel)
    assert o.dtype == torch.bfloat16
    ref = functools.partial(varlen_reference, cu_q=offsets(lq), cu_k=offsets(lk), name="causal")
    assert_close(o, ref(*x)[0], "O", BF16)
    d_o = randn(o.shape, 13, torch.bfloat16)
    grads = torch.autograd.grad(o, x, d_o)
    for got, want, what in zip(grads, reference_grads_of(ref, x, d_o), ("dQ", "dK", "dV")):
        assert got.dtype == torch.bfloat16
        assert_close(got, want, what, BF16_GRAD)


class TestCopies:
    """Packed tensors reach attnc as views of their memory; only strides it cannot take are copied."""

    @pytest.fixture(autouse=True)
    def count_copies(self, monkeypatch):
        self.copies = 0
        real = attnc._api._contiguous

        def counting(x):
            self.copies += 1
            return real(x)

        monkeypatch.setattr(attnc._api, "_contiguous", counting)

    def test_packed_inputs_and_their_gradients_are_not_copied(self):
        kernel = library_kernel("causal")
        lengths = [3, 17, 1]
        x = varlen_inputs(lengths, lengths, 4, 2, requires_grad=True)
        o = attnc.torch.attention_varlen(*x, offsets(lengths), kernel=kernel)
        torch.autograd.grad(o, x, torch.randn(o.shape))
        assert self.copies == 0

    def test_a_packed_qkv_projection_is_read_in_place(self):
        # [total, 3, heads, d] from one projection, sliced into q, k and v without copies.
        kernel = library_kernel("causal")
        lengths = [10, 11]
        qkv = randn((21, 3, 4, D), 7)
        q, k, v = qkv.unbind(1)
        o = attnc.torch.attention_varlen(q, k, v, offsets(lengths), kernel=kernel)
        assert self.copies == 0
        want = varlen_reference(q, k, v, offsets(lengths), offsets(lengths), "causal")[0]
        assert_close(o, want, "O", F32)

    def test_a_broadcast_gradient_is_copied_once(self):
        kernel = library_kernel("causal")
        lengths = [6, 2]
        x = varlen_inputs(lengths, lengths, 2, 1, requires_grad=True)
        o = attnc.torch.attention_varlen(*x, offsets(lengths), kernel=kernel)
        grads = torch.autograd.grad(o.sum(), x)  # d_o: a 0-strided broadcast of 1
        want = reference_grads_of(lambda q, k, v: varlen_reference(q, k, v, offsets(lengths), offsets(lengths),
                                                                    "causal"), x, torch.ones(o.shape))
        for got, ref in zip(grads, want):
            assert_close(got, ref, "grad", F32_GRAD)
        assert self.copies == 6  # q, k, v, o, d_o, lse, once


# ---- torch.library and torch.compile ---------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_attention_with_grouped_heads_and_fewer_queries(dtype):
    kernel = library_kernel("causal")
    q, k, v = dense_inputs(2, 4, 2, 5, 13, dtype=dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.attnc.attention.default, (q, k, v, kernel.id, 0.0))
    o, lse = torch.ops.attnc.attention(q.detach(), k.detach(), v.detach(), kernel.id, 0.0)
    torch.library.opcheck(torch.ops.attnc.attention_backward.default,
                          (torch.randn(o.shape).to(dtype), q.detach(), k.detach(), v.detach(), o, lse, kernel.id, 0.0))


@pytest.mark.parametrize("keys", ["own-offsets", "query-offsets"])
def test_opcheck_attention_varlen(keys):
    kernel = library_kernel("local")
    lq, lk = ([2, 0, 9], [5, 3, 9]) if keys == "own-offsets" else ([2, 0, 9], [2, 0, 9])
    q, k, v = varlen_inputs(lq, lk, 4, 2, requires_grad=True)
    cu_q = torch.tensor(offsets(lq), dtype=torch.int32)
    cu_k = torch.tensor(offsets(lk), dtype=torch.int32) if keys == "own-offsets" else None
    torch.library.opcheck(torch.ops.attnc.attention_varlen.default, (q, k, v, cu_q, cu_k, kernel.id, 0.0))
    o, lse = torch.ops.attnc.attention_varlen(q.detach(), k.detach(), v.detach(), cu_q, cu_k, kernel.id, 0.0)
    torch.library.opcheck(torch.ops.attnc.attention_varlen_backward.default,
                          (torch.randn(o.shape), q.detach(), k.detach(), v.detach(), o, lse, cu_q, cu_k, kernel.id,
                           0.0))


def test_compile_fullgraph_grouped_query_attention_forward_and_backward():
    kernel = library_kernel("causal")
    proj = torch.nn.Linear(D, D)

    def step(q, k, v):
        return (proj(attnc.torch.attention(q, k, v, kernel)) ** 2).mean()

    x = dense_inputs(2, 8, 2, 7, NK, requires_grad=True)
    loss = torch.compile(step, fullgraph=True)(*x)
    grads = torch.autograd.grad(loss, x)
    ref_loss = (proj(dense_reference(*x, "causal")[0].float()) ** 2).mean()
    ref_grads = torch.autograd.grad(ref_loss, x)
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_compile_fullgraph_varlen_forward_and_backward():
    kernel = library_kernel("local")
    lq, lk = [3, 0, 1, 20], [9, 4, 1, 20]
    cu_q, cu_k = (torch.tensor(offsets(x), dtype=torch.int32) for x in (lq, lk))

    def step(q, k, v, cu_q, cu_k):
        return attnc.torch.attention_varlen(q, k, v, cu_q, cu_k, kernel=kernel).square().mean()

    x = varlen_inputs(lq, lk, 8, 2, requires_grad=True)
    loss = torch.compile(step, fullgraph=True)(*x, cu_q, cu_k)
    grads = torch.autograd.grad(loss, x)
    ref_loss = varlen_reference(*x, offsets(lq), offsets(lk), "local")[0].float().square().mean()
    ref_grads = torch.autograd.grad(ref_loss, x)
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_varlen_graph_has_the_op_and_no_break():
    kernel = library_kernel("causal")
    lengths = [4, 6]
    fn = lambda q, k, v, cu: attnc.torch.attention_varlen(q, k, v, cu, kernel=kernel) + 1  # noqa: E731
    cu = torch.tensor(offsets(lengths), dtype=torch.int32)
    explained = torch._dynamo.explain(fn)(*varlen_inputs(lengths, lengths, 2, 1), cu)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert "attnc.attention_varlen" in str(explained.graphs[0].graph)


def test_fake_mode_gives_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    kernel = library_kernel("causal")
    with FakeTensorMode():
        q, k, v = torch.empty(2, 8, 3, D), torch.empty(2, 2, 50, D), torch.empty(2, 2, 50, D)
        o, lse = attnc.torch.attention_with_lse(q, k, v, kernel)
        assert o.shape == q.shape and lse.shape == (2, 8, 3)
        q, k, v = torch.empty(30, 8, D), torch.empty(70, 2, D), torch.empty(70, 2, D)
        cu_q, cu_k = torch.zeros(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
        o, lse = attnc.torch.attention_varlen_with_lse(q, k, v, cu_q, cu_k, kernel=kernel)
        assert o.shape == q.shape and lse.shape == (8, 30) and lse.dtype == torch.float32
        # The fake implementations check shapes too: a traced call fails where an eager one would.
        with raises_status("ATTNC_ERROR_SHAPE"):
            torch.ops.attnc.attention(torch.empty(2, 3, 3, D), torch.empty(2, 2, 50, D), torch.empty(2, 2, 50, D),
                                      kernel.id, 0.0)


# ---- errors ------------------------------------------------------------------------------


def test_dense_wrong_rank():
    kernel = library_kernel("causal")
    q, k, v = dense_inputs(1, 2, 2, 5, 5)
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(q, k[0], v[0])
    assert "'k' has shape [2, 5, 16]; attnc takes [batch, heads, n, d]" in str(e.value)


def test_query_heads_not_a_multiple_of_key_heads():
    kernel = library_kernel("causal")
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(*dense_inputs(1, 6, 4, 5, 5))
    assert "'q' has 6 heads and 'k' 4; the query heads must be a multiple of the key/value heads" in str(e.value)
    lengths = [5]
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        attnc.torch.attention_varlen(*varlen_inputs(lengths, lengths, 3, 2), offsets(lengths), kernel=kernel)
    assert "'q' has 3 heads and 'k' 2" in str(e.value)


def test_more_queries_than_keys():
    kernel = library_kernel("causal")
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(*dense_inputs(1, 2, 1, 9, 8))
    assert "'q' has 9 rows but 'k' 8; the queries are the last nq of the nk key positions" in str(e.value)
    # Per sequence of a varlen batch: the offsets are data, so the runtime says it.
    lq, lk = [2, 8], [6, 4]
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        attnc.torch.attention_varlen(*varlen_inputs(lq, lk, 2, 1), offsets(lq), offsets(lk), kernel=kernel)
    assert "sequence 1 has 8 queries but 4 keys" in str(e.value)


def test_values_and_keys_must_agree():
    kernel = library_kernel("causal")
    q, k, v = dense_inputs(1, 2, 2, 5, 8)
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(q, k, v[:, :, :-1])
    assert "'v' has shape [1, 2, 7, 16] but 'k' has [1, 2, 8, 16]" in str(e.value)
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(q, k[..., :8], v[..., :8])
    assert "'k' has shape [1, 2, 8, 8] but 'q' has [1, 2, 5, 16]; they must agree in batch" in str(e.value)


def test_varlen_wrong_rank():
    kernel = library_kernel("causal")
    q, k, v = dense_inputs(1, 2, 2, 5, 5)
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        attnc.torch.attention_varlen(q, k, v, [0, 5], kernel=kernel)
    assert "'q' has shape [1, 2, 5, 16]; attention_varlen takes packed [total, heads, d]" in str(e.value)


@pytest.mark.parametrize(
    "cu_q, status, message",
    [
        (torch.tensor([0.0, 5.0]), "ATTNC_ERROR_DTYPE", "'cu_seqlens_q' has dtype torch.float32; cu_seqlens are int32"),
        (torch.tensor([[0, 5]], dtype=torch.int32), "ATTNC_ERROR_SHAPE", "'cu_seqlens_q' has shape [1, 2]"),
        (torch.tensor([], dtype=torch.int32), "ATTNC_ERROR_SHAPE", "'cu_seqlens_q' has shape [0]"),
        ([1, 5], "ATTNC_ERROR_INVALID_ARGUMENT", "cu_seqlens_q[0] is 1; it must be 0"),
        ([0, 3, 2, 5], "ATTNC_ERROR_INVALID_ARGUMENT", "cu_seqlens_q decreases at 2: 3 then 2"),
        ([0, 4], "ATTNC_ERROR_INVALID_ARGUMENT", "cu_seqlens_q ends at 4 but 'q' has 5 rows"),
        (torch.tensor([0, 2**32 + 5]), "ATTNC_ERROR_INVALID_ARGUMENT",
         "'cu_seqlens_q' holds 4294967301, which does not fit in int32"),
    ],
    ids=["float", "2-d", "empty", "not-from-0", "decreasing", "short", "int64-overflow"],
)
def test_bad_cu_seqlens(cu_q, status, message):
    kernel = library_kernel("causal")
    q, k, v = varlen_inputs([5], [5], 2, 1)
    with raises_status(status) as e:
        attnc.torch.attention_varlen(q, k, v, cu_q, kernel=kernel)
    assert message in str(e.value)


def test_cu_seqlens_that_disagree():
    kernel = library_kernel("causal")
    q, k, v = varlen_inputs([5], [8], 2, 1)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as e:
        attnc.torch.attention_varlen(q, k, v, [0, 5], kernel=kernel)
    assert "cu_seqlens_k is None, so the keys take the queries' offsets, but 'k' has 8 rows and 'q' 5" in str(e.value)
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        attnc.torch.attention_varlen(q, k, v, [0, 5], [0, 2, 8], kernel=kernel)
    assert "'cu_seqlens_k' has 3 entries but 'cu_seqlens_q' 2" in str(e.value)


def test_cu_seqlens_of_the_wrong_type():
    kernel = library_kernel("causal")
    q, k, v = varlen_inputs([5], [5], 2, 1)
    with pytest.raises(TypeError, match="'cu_seqlens_q' is a list; cu_seqlens are an int32 tensor or a list of ints"):
        attnc.torch.attention_varlen(q, k, v, [0, 5.0], kernel=kernel)
    with pytest.raises(TypeError, match="attention_varlen needs a kernel"):
        attnc.torch.attention_varlen(q, k, v, [0, 5])


def test_declared_heads_count_query_heads():
    kernel = library_kernel("strided_multihead")
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(*dense_inputs(1, 4, 2, 5, 5))
    assert "'q' has 4 heads but pattern 'strided_multihead' has 2" in str(e.value)
