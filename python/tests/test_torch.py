"""The PyTorch integration: the custom ops' registration (opcheck), torch.compile
without graph breaks, and the errors a tensor argument can raise."""

from __future__ import annotations

import pytest
import torch

import attnc
import attnc.torch
from conftest import library_kernel, pattern_masks, raises_status, reference

N, D = 40, 8


def qkv(shape=(2, 2, N, D), dtype=torch.float32, requires_grad=False):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad) for _ in range(3)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_attention(dtype):
    kernel = library_kernel("fixed")
    q, k, v = qkv(dtype=dtype, requires_grad=True)
    torch.library.opcheck(torch.ops.attnc.attention.default, (q, k, v, kernel.id, 0.0))
    torch.library.opcheck(torch.ops.attnc.attention.default, (q.detach(), k.detach(), v.detach(), kernel.id, 0.5))


def test_opcheck_attention_backward():
    kernel = library_kernel("fixed_multihead")
    q, k, v = qkv()
    o, lse = torch.ops.attnc.attention(q, k, v, kernel.id, 0.0)
    d_o = torch.randn(o.shape)
    torch.library.opcheck(torch.ops.attnc.attention_backward.default, (d_o, q, k, v, o, lse, kernel.id, 0.0))


def test_compile_fullgraph_forward_and_backward():
    kernel = library_kernel("fixed")
    masks = pattern_masks("fixed", N, 1, l=16, c=4)
    proj = torch.nn.Linear(D, D)

    def step(q, k, v):
        return (proj(kernel(q, k, v)) ** 2).mean()

    compiled = torch.compile(step, fullgraph=True)
    x = qkv(requires_grad=True)
    loss = compiled(*x)
    grads = torch.autograd.grad(loss, x)
    ref_loss = (proj(reference(*x, masks)[0].float()) ** 2).mean()
    ref_grads = torch.autograd.grad(ref_loss, x)
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-4)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_compile_with_dynamic_sequence_length():
    kernel = library_kernel("local")
    compiled = torch.compile(lambda q, k, v: attnc.torch.attention(q, k, v, kernel, scale=0.25), fullgraph=True,
                             dynamic=True, backend="aot_eager")
    for n in (33, 57):
        q, k, v = qkv((1, 2, n, D))
        want = reference(q, k, v, pattern_masks("local", n, 1, w=20), scale=0.25)[0]
        torch.testing.assert_close(compiled(q, k, v).double(), want, atol=2e-5, rtol=1e-4)


def test_graph_has_the_op_and_no_break():
    kernel = library_kernel("fixed")
    explained = torch._dynamo.explain(lambda q, k, v: kernel(q, k, v) + 1)(*qkv())
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert "attnc.attention" in str(explained.graphs[0].graph)


def test_kernel_call_returns_tensors_for_tensors():
    kernel = library_kernel("fixed")
    o = kernel(*qkv())
    assert isinstance(o, torch.Tensor) and o.is_contiguous() and o.shape == (2, 2, N, D)


# ---- errors ---------------------------------------------------------------


def test_shapes_that_differ():
    kernel = library_kernel("fixed")
    q, k, v = qkv()
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(q, k[:, :, :-1], v)
    assert "'v' has shape [2, 2, 40, 8] but 'k' has [2, 2, 39, 8]" in str(e.value)
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(q, k[:, :, :-1], v[:, :, :-1])
    assert "'q' has 40 rows but 'k' 39" in str(e.value)
    with raises_status("ATTNC_ERROR_SHAPE"):
        kernel(q[0], k[0], v[0])


def test_wrong_head_count_for_a_pattern_that_declares_heads():
    kernel = library_kernel("fixed_multihead")
    with raises_status("ATTNC_ERROR_SHAPE") as e:
        kernel(*qkv((1, 3, N, D)))
    assert "3 heads but pattern 'fixed_multihead' has 2" in str(e.value)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.int32])
def test_wrong_dtype(dtype):
    kernel = library_kernel("fixed")
    q, k, v = (x.to(dtype) for x in qkv())
    with raises_status("ATTNC_ERROR_DTYPE") as e:
        kernel(q, k, v)
    assert "float32 or bfloat16" in str(e.value)


def test_mixed_dtypes():
    kernel = library_kernel("fixed")
    q, k, v = qkv()
    with raises_status("ATTNC_ERROR_DTYPE"):
        kernel(q, k.bfloat16(), v)


def test_meta_tensors_outside_fake_mode():
    kernel = library_kernel("fixed")
    q, k, v = (x.to("meta") for x in qkv())
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as e:
        kernel(q, k, v)
    assert "device 'meta'" in str(e.value)


def test_fake_mode_gives_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    kernel = library_kernel("fixed")
    with FakeTensorMode():
        q, k, v = (torch.empty(2, 2, N, D) for _ in range(3))
        o, lse = attnc.torch.attention_with_lse(q, k, v, kernel)
        assert o.shape == q.shape and lse.shape == (2, 2, N) and lse.dtype == torch.float32


def test_bad_scale():
    kernel = library_kernel("fixed")
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT"):
        kernel(*qkv(), scale=-1.0)


@pytest.mark.parametrize("backend", ["sparsifier", "halide"])
def test_backends_without_a_backward_run_forward_only(backend):
    try:
        kernel = attnc.compile("pattern p { causal attend { j : true } }", backend=backend)
    except attnc.AttncError as e:
        assert e.status_name == "ATTNC_ERROR_UNSUPPORTED" and backend in str(e)
        pytest.skip(f"this attnc was built without the {backend} backend (a pip build's default)")
    x = qkv(requires_grad=True)
    o = kernel(*x)
    mask = torch.ones(N, N, dtype=torch.bool).tril()[None]
    torch.testing.assert_close(o.double(), reference(*x, mask)[0], atol=2e-5, rtol=1e-4)
    with raises_status("ATTNC_ERROR_UNSUPPORTED"):
        o.sum().backward()
