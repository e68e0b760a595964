"""attnc in PyTorch: a ``torch.library`` custom op with a fake implementation and autograd.

    kernel = attnc.compile("patterns/fixed.attn", l=128, c=8)
    o = attnc.torch.attention(q, k, v, kernel)     # or kernel(q, k, v)

Two ops, both for CPU tensors:

- ``attnc::attention(q, k, v, kernel_id, scale) -> (o, lse)``: attnc_run_forward,
  which also writes each row's log-sum-exp (float32 [batch, heads, n]).
- ``attnc::attention_backward(d_o, q, k, v, o, lse, kernel_id, scale) -> (d_q, d_k, d_v)``:
  attnc_run_backward, the gradients of ``sum(O * d_o)``.

Each has a fake (meta) implementation that gives the outputs' shapes, so
``torch.compile(fullgraph=True)`` traces through them without a graph break,
and the first has the second as its autograd formula (q, k, v, o and lse are
saved; lse is not differentiable). A kernel enters the ops as its id (ops take
no Python objects). Outputs and gradients are contiguous and have q's dtype
(float32 or bfloat16; attnc computes in float32). Inputs may have any strides;
ones attnc cannot take (a broadcast's 0 stride) are copied once.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _api, _attnc
from ._errors import DTYPE, SHAPE, UNSUPPORTED, AttncError, error

__all__ = ["attention", "attention_with_lse"]

_DTYPES = (torch.float32, torch.bfloat16)

# A tensor's DLPack capsule, made in C: a tenth of the cost of calling
# Tensor.__dlpack__ (which checks its arguments in Python), five times a call.
_dlpack = getattr(torch.utils.dlpack, "to_dlpack", None) or (lambda t: t.__dlpack__())


def _run_forward(kernel: "_api.Kernel", q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Optional[Tensor],
                 scale: float) -> None:
    for attempt in (0, 1):
        try:
            _attnc.run_forward(kernel._handle, _dlpack(q), _dlpack(k), _dlpack(v), _dlpack(o),
                               None if lse is None else _dlpack(lse), scale, kernel.num_threads)
            return
        except (AttncError, TypeError, BufferError) as e:
            if attempt or not _api._needs_copy(e):
                raise
            q, k, v = (_api._contiguous(x) for x in (q, k, v))


def _run_backward(kernel: "_api.Kernel", q: Tensor, k: Tensor, v: Tensor, o: Tensor, d_o: Tensor, lse: Tensor,
                  d_q: Tensor, d_k: Tensor, d_v: Tensor, scale: float) -> None:
    for attempt in (0, 1):
        try:
            _attnc.run_backward(kernel._handle, *(_dlpack(x) for x in (q, k, v, o, d_o, lse, d_q, d_k, d_v)),
                                scale, kernel.num_threads)
            return
        except (AttncError, TypeError, BufferError) as e:
            if attempt or not _api._needs_copy(e):
                raise
            q, k, v, o, d_o, lse = (_api._contiguous(x) for x in (q, k, v, o, d_o, lse))


@torch.library.custom_op("attnc::attention", mutates_args=(), device_types="cpu")
def _attention(q: Tensor, k: Tensor, v: Tensor, kernel_id: int, scale: float) -> Tuple[Tensor, Tensor]:
    kernel = _api._kernel_by_id(kernel_id)
    o = torch.empty(q.shape, dtype=q.dtype)
    lse = torch.empty(q.shape[:3], dtype=torch.float32)
    if kernel._has_lse:
        _run_forward(kernel, q, k, v, o, lse, scale)
    else:  # the sparsifier: no log-sum-exp, and so no backward either
        _run_forward(kernel, q, k, v, o, None, scale)
        lse.fill_(float("nan"))
    return o, lse


@_attention.register_fake
def _attention_fake(q: Tensor, k: Tensor, v: Tensor, kernel_id: int, scale: float) -> Tuple[Tensor, Tensor]:
    _check_shapes(q, k, v)
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("attnc::attention_backward", mutates_args=(), device_types="cpu")
def _attention_backward(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    kernel = _api._kernel_by_id(kernel_id)
    if d_o.dtype != o.dtype:
        d_o = d_o.to(o.dtype)
    d_q, d_k, d_v = (torch.empty(q.shape, dtype=q.dtype) for _ in range(3))
    _run_backward(kernel, q, k, v, o, d_o, lse, d_q, d_k, d_v, scale)
    return d_q, d_k, d_v


@_attention_backward.register_fake
def _attention_backward_fake(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), q.new_empty(q.shape), q.new_empty(q.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, kernel_id, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.mark_non_differentiable(lse)
    ctx.kernel_id = kernel_id
    ctx.scale = scale


def _backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
    q, k, v, o, lse = ctx.saved_tensors
    d_q, d_k, d_v = torch.ops.attnc.attention_backward(d_o, q, k, v, o, lse, ctx.kernel_id, ctx.scale)
    return d_q, d_k, d_v, None, None


_attention.register_autograd(_backward, setup_context=_setup_context)


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.dim() != 4:
        raise error(SHAPE, f"'q' has shape {list(q.shape)}; attnc takes [batch, heads, n, d]")
    for name, x in (("k", k), ("v", v)):
        if x.shape != q.shape:
            raise error(SHAPE, f"'{name}' has shape {list(x.shape)} but 'q' has {list(q.shape)}")


def _check(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"'{name}' is a {type(x).__name__}; q, k and v must all be tensors")
        if x.device.type != "cpu":
            raise error(UNSUPPORTED, f"'{name}' is on device '{x.device}'; attnc kernels run on the CPU")
        if x.dtype not in _DTYPES:
            raise error(DTYPE, f"'{name}' has dtype {x.dtype}; attnc takes float32 or bfloat16")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise error(DTYPE, f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    _check_shapes(q, k, v)


def attention(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float] = None) -> Tensor:
    """attnc attention of q, k, v (CPU tensors [batch, heads, n, d], float32 or bfloat16, any
    strides) with the pattern of ``kernel``; ``scale`` defaults to ``1/sqrt(d)``.

    Differentiable (attnc's backward pass), traceable by ``torch.compile(fullgraph=True)``.
    Returns O, contiguous, with q's dtype.
    """
    _check(q, k, v)
    o, _ = torch.ops.attnc.attention(q, k, v, kernel.id, _api._scale(scale))
    return o


def attention_with_lse(
    q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float] = None
) -> Tuple[Tensor, Tensor]:
    """:func:`attention` and each row's log-sum-exp (float32 [batch, heads, n], -inf for a row
    with no keys; not differentiable)."""
    _check(q, k, v)
    return torch.ops.attnc.attention(q, k, v, kernel.id, _api._scale(scale))
