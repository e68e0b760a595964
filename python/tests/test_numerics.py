"""The op's numbers against a float64 reference: forward, log-sum-exp and gradients,
on every pattern of the library, for torch tensors (f32, bf16) and numpy arrays."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import attnc
import attnc.torch
from conftest import LIBRARY, heads_for, library_kernel, pattern_masks, pattern_path, reference, reference_grads

N = 100  # ragged against every block, stride and window of LIBRARY
D = 16


def inputs(shape, dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad) for _ in range(3)]


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_forward_matches_float64_reference(name):
    kernel = library_kernel(name)
    h = heads_for(kernel)
    q, k, v = inputs((2, h, N, D))
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernel)
    ref_o, ref_lse = reference(q, k, v, pattern_masks(name, N, h, **LIBRARY[name]))
    assert o.dtype == torch.float32 and o.shape == q.shape
    torch.testing.assert_close(o.double(), ref_o, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lse.double(), ref_lse, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_gradients_match_float64_reference(name):
    # attnc computes in float32, so torch.autograd.gradcheck's float64 finite
    # differences do not apply to it: its gradients are compared with the
    # exact gradients of the float64 reference (torch autograd), at float32
    # tolerances. test_gradcheck_in_float32 adds torch's own finite-difference
    # check, loosely.
    kernel = library_kernel(name)
    h = heads_for(kernel)
    q, k, v = inputs((2, h, N, D), requires_grad=True)
    g = torch.Generator().manual_seed(7)
    d_o = torch.randn(q.shape, generator=g)
    grads = torch.autograd.grad(kernel(q, k, v), (q, k, v), d_o)
    ref_grads = reference_grads(q, k, v, pattern_masks(name, N, h, **LIBRARY[name]), d_o)
    for got, want, what in zip(grads, ref_grads, ("dQ", "dK", "dV")):
        torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4, msg=lambda m: f"{what}: {m}")


@pytest.mark.filterwarnings("ignore:Input #.* is not a double precision")
def test_gradcheck_in_float32():
    # Finite differences of a float32 function with eps = 1e-2 carry errors of
    # about eps^2 (truncation) + 1e-7 / eps (rounding): atol and rtol of 2e-2
    # catch a wrong or missing gradient term, not rounding. Inputs are scaled
    # down so that the softmax stays smooth over eps.
    kernel = library_kernel("fixed")
    q, k, v = (0.5 * x for x in inputs((1, 1, 24, 4)))
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda q, k, v: attnc.torch.attention(q, k, v, kernel), (q, k, v),
        eps=1e-2, atol=2e-2, rtol=2e-2, fast_mode=True, nondet_tol=1e-6,
    )


def fixed_mask(n, l, c):
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    return (j <= i) & ((j // l == i // l) | (j % l >= l - c))


def strided_mask(n, l):
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    return (j <= i) & ((i - j <= l) | ((i - j) % l == 0))


@pytest.mark.parametrize(
    "name, params, mask",
    [("fixed", {"l": 16, "c": 4}, fixed_mask(N, 16, 4)), ("strided", {"l": 10}, strided_mask(N, 10))],
)
def test_matches_the_papers_formula(name, params, mask):
    # Masks written from the Sparse Transformer paper, independent of attnc.
    kernel = attnc.compile(pattern_path(name), **params)
    q, k, v = inputs((1, 2, N, D))
    torch.testing.assert_close(kernel(q, k, v).double(), reference(q, k, v, mask[None])[0], atol=2e-5, rtol=1e-4)
    assert np.array_equal(pattern_masks(name, N, 1, **params)[0], mask)


@pytest.mark.parametrize("name", ["fixed", "bigbird", "fixed_multihead"])
def test_bfloat16(name):
    kernel = library_kernel(name)
    h = heads_for(kernel)
    q, k, v = inputs((1, h, N, D), dtype=torch.bfloat16, requires_grad=True)
    o = kernel(q, k, v)
    assert o.dtype == torch.bfloat16
    masks = pattern_masks(name, N, h, **LIBRARY[name])
    ref_o, _ = reference(q, k, v, masks)
    # Inputs are exact in f32; the output is rounded to bf16 (8 bits).
    torch.testing.assert_close(o.double(), ref_o, atol=1e-2, rtol=1e-2)
    d_o = torch.randn(q.shape).to(torch.bfloat16)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    ref_grads = reference_grads(q, k, v, masks, d_o)
    for got, want in zip(grads, ref_grads):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.double(), want, atol=3e-2, rtol=2e-2)


@pytest.mark.parametrize("name", ["fixed", "axial"])
def test_numpy_forward_and_backward(name):
    kernel = library_kernel(name)
    h = heads_for(kernel)
    rng = np.random.default_rng(3)
    q, k, v, d_o = (rng.standard_normal((2, h, N, D), dtype=np.float32) for _ in range(4))
    o = kernel(q, k, v)
    assert isinstance(o, np.ndarray) and o.dtype == np.float32
    o2, lse = kernel.forward(q, k, v)
    np.testing.assert_array_equal(o, o2)
    tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, d_o))
    masks = pattern_masks(name, N, h, **LIBRARY[name])
    ref_o, ref_lse = reference(tq, tk, tv, masks)
    np.testing.assert_allclose(o, ref_o.numpy(), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(lse, ref_lse.numpy(), atol=2e-5, rtol=1e-5)
    grads = kernel.backward(q, k, v, o, lse, d_o)
    ref_grads = reference_grads(tq, tk, tv, masks, tdo)
    for got, want in zip(grads, ref_grads):
        np.testing.assert_allclose(got, want.numpy(), atol=5e-5, rtol=1e-4)


def test_scale():
    kernel = library_kernel("local")
    q, k, v = inputs((1, 2, N, D))
    masks = pattern_masks("local", N, 1, **LIBRARY["local"])
    torch.testing.assert_close(kernel(q, k, v, scale=0.3).double(), reference(q, k, v, masks, scale=0.3)[0],
                               atol=2e-5, rtol=1e-4)
    x = [t.requires_grad_() for t in inputs((1, 2, N, D))]
    grads = torch.autograd.grad(kernel(*x, scale=0.3).sum(), x)
    ref = reference_grads(*x, masks, torch.ones(x[0].shape), scale=0.3)
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4)


def test_a_row_with_no_keys_gives_zeros_and_minus_infinity():
    kernel = attnc.compile("pattern future { attend { j : j > i } }")
    q, k, v = (x.requires_grad_() for x in inputs((1, 1, 12, 4)))
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernel)
    assert torch.all(o[0, 0, -1] == 0) and lse[0, 0, -1].item() == -math.inf
    mask = np.triu(np.ones((12, 12), dtype=bool), 1)
    torch.testing.assert_close(o.double(), reference(q, k, v, mask[None])[0], atol=2e-5, rtol=1e-4)
    (dq,) = torch.autograd.grad(o.sum(), q)
    assert torch.all(dq[0, 0, -1] == 0)


class TestStrides:
    """Any strides work; contiguous and positively strided inputs are never copied."""

    @pytest.fixture(autouse=True)
    def count_copies(self, monkeypatch):
        self.copies = 0
        real = attnc._api._contiguous

        def counting(x):
            self.copies += 1
            return real(x)

        monkeypatch.setattr(attnc._api, "_contiguous", counting)

    def check(self, q, k, v, kernel, masks):
        o = kernel(q, k, v)
        torch.testing.assert_close(o.double(), reference(q, k, v, masks)[0], atol=2e-5, rtol=1e-4)
        return o

    def test_contiguous_inputs_are_not_copied(self):
        kernel = library_kernel("fixed")
        q, k, v = inputs((2, 2, N, D), requires_grad=True)
        o = self.check(q, k, v, kernel, pattern_masks("fixed", N, 1, l=16, c=4))
        torch.autograd.grad(o, (q, k, v), torch.randn(o.shape))
        assert self.copies == 0

    def test_transposed_and_sliced_views_are_not_copied(self):
        kernel = library_kernel("strided")
        masks = pattern_masks("strided", N, 1, l=10)
        # [B, n, H, d] memory seen as [B, H, n, d], and every other element of d.
        q, k, v = (x.transpose(1, 2) for x in inputs((2, N, 3, D)))
        self.check(q, k, v, kernel, masks)
        q, k, v = (x[..., ::2] for x in inputs((2, 3, N, 2 * D)))
        self.check(q, k, v, kernel, masks)
        assert self.copies == 0

    def test_broadcast_inputs_are_copied_once(self):
        kernel = library_kernel("strided")
        masks = pattern_masks("strided", N, 1, l=10)
        q, k, v = inputs((1, 1, N, D))
        self.check(q.expand(2, 3, N, D), k.expand(2, 3, N, D), v.expand(2, 3, N, D), kernel, masks)
        assert self.copies == 3
        # A backward whose incoming gradient is a broadcast (sum's).
        x = [t.expand(2, 3, N, D).detach().requires_grad_() for t in (q, k, v)]
        grads = torch.autograd.grad(kernel(*x).sum(), x)
        ref = reference_grads(*x, masks, torch.ones(x[0].shape))
        for got, want in zip(grads, ref):
            torch.testing.assert_close(got.double(), want, atol=5e-5, rtol=1e-4)

    def test_numpy_views(self):
        kernel = library_kernel("fixed")
        masks = pattern_masks("fixed", N, 1, l=16, c=4)
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, N, 2, D), dtype=np.float32).transpose(0, 2, 1, 3) for _ in range(3))
        o = kernel(q, k, v)
        ref = reference(*(torch.from_numpy(np.ascontiguousarray(x)) for x in (q, k, v)), masks)[0]
        np.testing.assert_allclose(o, ref.numpy(), atol=2e-5, rtol=1e-4)
        assert self.copies == 0
        flipped = [x[:, :, ::-1] for x in (q, k, v)]  # negative strides: copied
        o = kernel(*flipped)
        ref = reference(*(torch.from_numpy(np.ascontiguousarray(x)) for x in flipped), masks)[0]
        np.testing.assert_allclose(o, ref.numpy(), atol=2e-5, rtol=1e-4)
