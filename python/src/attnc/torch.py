"""attnc in PyTorch: ``torch.library`` custom ops with fake implementations and autograd.

    kernel = attnc.compile("patterns/fixed.attn", l=128, c=8)
    o = attnc.torch.attention(q, k, v, kernel)     # or kernel(q, k, v)
    o = attnc.torch.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, kernel)

Four ops, for CPU tensors and for CUDA tensors (attnc's cuda target: bf16, fp16 or
float32 on a GPU, run on torch's current stream; a varlen batch's offsets are read on the
host, so CUDA cu_seqlens are copied back first):

- ``attnc::attention(q, k, v, kernel_id, scale) -> (o, lse)``: attnc_run_forward on q
  [batch, Hq, nq, d] and k, v [batch, Hkv, nk, d], which also writes each row's
  log-sum-exp (float32 [batch, Hq, nq]).
- ``attnc::attention_backward(d_o, q, k, v, o, lse, kernel_id, scale) -> (d_q, d_k, d_v)``:
  attnc_run_backward, the gradients of ``sum(O * d_o)``; d_k and d_v have k's shape.
- ``attnc::attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, kernel_id, scale) -> (o, lse)``:
  attnc_run_varlen on FlashAttention's packed layout, q [total_q, Hq, d] and k, v
  [total_k, Hkv, d], lse float32 [Hq, total_q].
- ``attnc::attention_varlen_backward(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
  kernel_id, scale) -> (d_q, d_k, d_v)``: attnc_run_backward_varlen.

Two more for patterns that read data (``input NAME : int[...]``; on CUDA tensors the inputs are
CUDA tensors too, read on the host at each call):

- ``attnc::attention_data(q, k, v, inputs, kernel_id, scale) -> (o, lse)``: attnc_forward
  with the pattern's inputs, ``inputs`` in declaration order, each an int32 or int64 tensor
  of shape [B, H, D1, D2] (B 1 or the batch, H 1 or the query heads; D2 = 1 for a 1-D input).
- ``attnc::attention_data_backward(d_o, q, k, v, o, lse, inputs, kernel_id, scale) ->
  (d_q, d_k, d_v)``: attnc_backward with the same inputs (integers: no gradient).

And two for patterns with float inputs (``input NAME : float[...]``, read by ``score`` and
``sink``; on CUDA tensors the forms the GPU runs: a soft cap, ALiBi, a sink per head), whose
gradients flow back:

- ``attnc::attention_scored(q, k, v, inputs, float_inputs, kernel_id, scale) -> (o, lse)``:
  attnc_forward with the int inputs as for attention_data (in declaration order among the
  int inputs) and the float inputs (float32 or bfloat16, each exactly its declared shape at
  nk and the query heads, in declaration order among the float inputs).
- ``attnc::attention_scored_backward(d_o, q, k, v, o, lse, inputs, float_inputs, kernel_id,
  scale) -> (d_q, d_k, d_v, d_float_inputs)``: attnc_backward with attnc_call::d_inputs, the
  float inputs' gradients in their shapes and dtypes.

A pattern with a score or sink but no float input (``score cap * tanh(s / cap)``) runs
through the ops above like any other: the modifier is compiled into the kernel.

Each has a fake (meta) implementation that gives the outputs' shapes, so
``torch.compile(fullgraph=True)`` traces through them without a graph break,
and each forward has its backward op as its autograd formula (q, k, v, o and
lse are saved; lse and the offsets are not differentiable). A kernel enters the
ops as its id (ops take no Python objects). Outputs and gradients are
contiguous and have their input's dtype (float32 or bfloat16; attnc computes
in float32). Inputs may have any strides; ones attnc cannot take (a
broadcast's 0 stride) are copied once. The packed [total, heads, d] tensors
reach attnc as [1, heads, total, d] views of the same memory: never copied.

The public functions call the ops' implementations directly in plain eager
mode (CPU tensors of type torch.Tensor; nothing compiling, tracing, in a
TorchFunctionMode or TorchDispatchMode, under functorch, forward-mode AD or the
profiler), with a torch.autograd.Function when autograd records a graph: the
same results, bitwise, without torch.library's dispatch, which costs more than
the rest of a call. Everywhere else, and always under torch.compile, the ops are
called.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from . import _api, _attnc
from ._errors import DTYPE, INVALID_ARGUMENT, SHAPE, UNSUPPORTED, AttncError, error

__all__ = ["attention", "attention_with_lse", "attention_varlen", "attention_varlen_with_lse", "attention_cached"]

_DTYPES = (torch.float32, torch.bfloat16)
_CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_OFFSET_DTYPES = (torch.int32, torch.int64)
_INPUT_DTYPES = (torch.int32, torch.int64)
_FLOAT_INPUT_DTYPES = (torch.float32, torch.bfloat16)
_INT32_MAX = 2**31 - 1
_CONTIGUOUS = torch.contiguous_format


def _new(x: Tensor) -> Tensor:
    """A new contiguous tensor of x's shape and dtype on x's device. (empty_like is about 40 us
    cheaper than torch.empty(shape, dtype=...) with cold caches, as a call after a large kernel
    meets them, and 2 us warm.)"""
    return torch.empty_like(x, memory_format=_CONTIGUOUS)


# Tensors reach the extension as DLPack capsules that it makes with this C function:
# a tenth of the cost of Tensor.__dlpack__ (Python code that checks its arguments),
# which it would call otherwise.
_to_dlpack = getattr(torch.utils.dlpack, "to_dlpack", None)

Offsets = Union[Tensor, Sequence[int]]


def _run(call, kernel: "_api.Kernel", tensors: list, copyable: int, scale: float, offsets: tuple = (),
         where: Optional[tuple] = None) -> None:
    """Calls `call` on the tensors (then the offsets, the scale and `where`: the kernel's thread count
    by default, (device index, stream) for CUDA calls); once more on row-major copies of the first
    `copyable` (the inputs) when attnc cannot take their strides."""
    where = (kernel.num_threads,) if where is None else where
    try:
        call(kernel._handle, *tensors, *offsets, scale, *where, _to_dlpack)
    except (AttncError, TypeError, BufferError) as e:
        if not _api._needs_copy(e):
            raise
        tensors = [_api._contiguous(x) for x in tensors[:copyable]] + tensors[copyable:]
        call(kernel._handle, *tensors, *offsets, scale, *where, _to_dlpack)


def _packed(x: Tensor) -> Tensor:
    """[total, heads, d] seen as the [1, heads, total, d] view attnc takes (same memory)."""
    return x.permute(1, 0, 2).unsqueeze(0)


def _offsets(cu: Optional[Tensor], name: str) -> Optional[Tensor]:
    """cu_seqlens as attnc reads them: int32 and contiguous, zero-copy when they already are."""
    if cu is None:
        return None
    if cu.dtype == torch.int64 and cu.numel():
        # int64 offsets past int32 would wrap in the conversion and could look valid.
        lo, hi = int(cu.min()), int(cu.max())
        if lo < -_INT32_MAX - 1 or hi > _INT32_MAX:
            bad = hi if hi > _INT32_MAX else lo
            raise error(INVALID_ARGUMENT, f"'{name}' holds {bad}, which does not fit in int32 (attnc reads "
                                          "FlashAttention's int32 cu_seqlens)")
    # (On the host: attnc reads the offsets before it launches anything, as FlashAttention's callers
    # hold them; a CUDA tensor is copied back, which waits for the stream.)
    return cu.to(device="cpu", dtype=torch.int32).contiguous()


# ---- CUDA tensors -------------------------------------------------------------


def _stream(x: Tensor) -> int:
    """torch's current stream on x's device, as the cudaStream_t attnc queues its kernels on."""
    return torch.cuda.current_stream(x.device).cuda_stream


def _on(x: Tensor) -> tuple:
    """The device index and current stream of a CUDA call on x's device (_run's `where`)."""
    return (x.device.index or 0, _stream(x))


def _cuda_forward(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float) -> Tuple[Tensor, Tensor]:
    o = _new(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    _run(_attnc.run_forward_cuda, kernel, [q, k, v, o, lse], 3, scale, where=_on(q))
    return o, lse


def _cuda_backward(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel: "_api.Kernel", scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    d_q, d_k, d_v = _new(q), _new(k), _new(v)
    _run(_attnc.run_backward_cuda, kernel, [q, k, v, o, d_o, lse, d_q, d_k, d_v], 6, scale, where=_on(q))
    return d_q, d_k, d_v


# ---- dense batches ----------------------------------------------------------


def _forward(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float) -> Tuple[Tensor, Tensor]:
    """O and lse of a dense call: attnc::attention's implementation, and the eager path's."""
    if q.is_cuda:
        return _cuda_forward(q, k, v, kernel, scale)
    o = _new(q)
    lse = torch.empty(q.shape[:3], dtype=torch.float32)
    if kernel._has_lse:
        _run(_attnc.run_forward, kernel, [q, k, v, o, lse], 3, scale)
    else:  # the sparsifier: no log-sum-exp, and so no backward either
        _run(_attnc.run_forward, kernel, [q, k, v, o, None], 3, scale)
        lse.fill_(float("nan"))
    return o, lse


def _forward_o(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float) -> Tensor:
    """O alone (the runtime writes no log-sum-exp): the eager path of a call that keeps no graph."""
    o = _new(q)
    _run(_attnc.run_forward, kernel, [q, k, v, o, None], 3, scale)
    return o


def _backward(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel: "_api.Kernel", scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV of a dense call: attnc::attention_backward's implementation, and the eager path's."""
    if d_o.dtype != o.dtype:
        d_o = d_o.to(o.dtype)
    if q.is_cuda:
        return _cuda_backward(d_o, q, k, v, o, lse, kernel, scale)
    d_q, d_k, d_v = _new(q), _new(k), _new(v)
    _run(_attnc.run_backward, kernel, [q, k, v, o, d_o, lse, d_q, d_k, d_v], 6, scale)
    return d_q, d_k, d_v


def _varlen_forward(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Optional[Tensor], kernel: "_api.Kernel",
    scale: float
) -> Tuple[Tensor, Tensor]:
    cu_q, cu_k = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
    o = _new(q)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    views = [_packed(x) for x in (q, k, v, o)]
    if q.is_cuda:
        _run(_attnc.run_varlen_cuda, kernel, views + [lse.unsqueeze(0)], 3, scale, (cu_q, cu_k), where=_on(q))
    elif kernel._has_lse:
        _run(_attnc.run_varlen, kernel, views + [lse.unsqueeze(0)], 3, scale, (cu_q, cu_k))
    else:
        _run(_attnc.run_varlen, kernel, views + [None], 3, scale, (cu_q, cu_k))
        lse.fill_(float("nan"))
    return o, lse


def _varlen_backward(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor], kernel: "_api.Kernel", scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    cu_q, cu_k = _offsets(cu_seqlens_q, "cu_seqlens_q"), _offsets(cu_seqlens_k, "cu_seqlens_k")
    if d_o.dtype != o.dtype:
        d_o = d_o.to(o.dtype)
    d_q, d_k, d_v = _new(q), _new(k), _new(v)
    views = [_packed(x) for x in (q, k, v, o, d_o)] + [lse.unsqueeze(0)] + [_packed(x) for x in (d_q, d_k, d_v)]
    if q.is_cuda:
        _run(_attnc.run_backward_varlen_cuda, kernel, views, 6, scale, (cu_q, cu_k), where=_on(q))
    else:
        _run(_attnc.run_backward_varlen, kernel, views, 6, scale, (cu_q, cu_k))
    return d_q, d_k, d_v


@torch.library.custom_op("attnc::attention", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_op(q: Tensor, k: Tensor, v: Tensor, kernel_id: int, scale: float) -> Tuple[Tensor, Tensor]:
    return _forward(q, k, v, _api._kernel_by_id(kernel_id), scale)


@_attention_op.register_fake
def _attention_fake(q: Tensor, k: Tensor, v: Tensor, kernel_id: int, scale: float) -> Tuple[Tensor, Tensor]:
    _api._check_shapes(q.shape, k.shape, v.shape)
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("attnc::attention_backward", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_backward_op(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return _backward(d_o, q, k, v, o, lse, _api._kernel_by_id(kernel_id), scale)


@_attention_backward_op.register_fake
def _attention_backward_fake(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, kernel_id, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.mark_non_differentiable(lse)
    ctx.kernel_id = kernel_id
    ctx.scale = scale


def _attention_op_backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
    q, k, v, o, lse = ctx.saved_tensors
    d_q, d_k, d_v = torch.ops.attnc.attention_backward(d_o, q, k, v, o, lse, ctx.kernel_id, ctx.scale)
    return d_q, d_k, d_v, None, None


_attention_op.register_autograd(_attention_op_backward, setup_context=_setup_context)


# ---- variable-length batches ------------------------------------------------


@torch.library.custom_op("attnc::attention_varlen", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_varlen_op(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Optional[Tensor], kernel_id: int,
    scale: float
) -> Tuple[Tensor, Tensor]:
    return _varlen_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, _api._kernel_by_id(kernel_id), scale)


@_attention_varlen_op.register_fake
def _attention_varlen_fake(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Optional[Tensor], kernel_id: int,
    scale: float
) -> Tuple[Tensor, Tensor]:
    _check_varlen_shapes(q, k, v, cu_seqlens_q, cu_seqlens_k)
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("attnc::attention_varlen_backward", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_varlen_backward_op(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor], kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return _varlen_backward(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, _api._kernel_by_id(kernel_id), scale)


@_attention_varlen_backward_op.register_fake
def _attention_varlen_backward_fake(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, cu_seqlens_q: Tensor,
    cu_seqlens_k: Optional[Tensor], kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_varlen_context(ctx, inputs, output) -> None:
    q, k, v, cu_seqlens_q, cu_seqlens_k, kernel_id, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.mark_non_differentiable(lse)
    ctx.kernel_id = kernel_id
    ctx.scale = scale


def _attention_varlen_op_backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    d_q, d_k, d_v = torch.ops.attnc.attention_varlen_backward(d_o, q, k, v, o, lse, cu_q, cu_k, ctx.kernel_id,
                                                               ctx.scale)
    return d_q, d_k, d_v, None, None, None, None


_attention_varlen_op.register_autograd(_attention_varlen_op_backward, setup_context=_setup_varlen_context)


# ---- patterns that read data ---------------------------------------------------


def _data_pairs(kernel: "_api.Kernel", inputs: Sequence[Tensor], floats: Sequence[Tensor] = ()) -> list:
    """(name, tensor) pairs for the extension, in declaration order: the int inputs `inputs` ([B,
    H, D1, D2]) and the float inputs `floats` (their declared shapes, seen as 4-D: the dimensions
    then 1s); a broadcast's 0 strides (which attnc does not take on a dimension longer than 1)
    copied away."""
    if len(inputs) + len(floats) != len(kernel._inputs) or len(floats) != sum(kernel._float):
        raise error(INVALID_ARGUMENT, f"pattern '{kernel._pattern}' declares {len(kernel._inputs)} inputs "
                                      f"({sum(kernel._float)} float) but the call gives {len(inputs)} int and "
                                      f"{len(floats)} float ones")
    pairs = []
    ints, reals = iter(inputs), iter(floats)
    for (name, rank), is_float in zip(kernel._inputs, kernel._float):
        x = next(reals) if is_float else next(ints)
        if is_float:
            x = x.reshape(tuple(x.shape) + (1,) * (4 - x.dim()))
        if any(st == 0 and e > 1 for st, e in zip(x.stride(), x.shape)):
            x = x.contiguous()
        pairs.append((name, x))
    return pairs


def _data_forward(q: Tensor, k: Tensor, v: Tensor, inputs: Sequence[Tensor], kernel: "_api.Kernel", scale: float,
                  with_lse: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """O and lse (None unless `with_lse`) of a call with the pattern's inputs: attnc::attention_data's
    implementation, and the eager path's. On CUDA tensors the inputs are CUDA tensors too, which the
    runtime reads on the host at each call (it waits for the stream: such a call is not capturable)."""
    o = _new(q)
    if q.is_cuda:
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        _run(_attnc.forward_cuda, kernel, [q, k, v, o, lse], 3, scale, (_data_pairs(kernel, inputs),),
             where=_on(q))
        return o, lse if with_lse else None
    lse = torch.empty(q.shape[:3], dtype=torch.float32) if with_lse else None
    _run(_attnc.forward, kernel, [q, k, v, o, lse], 3, scale, (_data_pairs(kernel, inputs),))
    return o, lse


def _data_backward(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, inputs: Sequence[Tensor],
                   kernel: "_api.Kernel", scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    """dQ, dK, dV of a call with the pattern's inputs: attnc::attention_data_backward's implementation."""
    if d_o.dtype != o.dtype:
        d_o = d_o.to(o.dtype)
    d_q, d_k, d_v = _new(q), _new(k), _new(v)
    tensors = [q, k, v, o, d_o, lse, d_q, d_k, d_v]
    if q.is_cuda:
        _run(_attnc.backward_cuda, kernel, tensors, 6, scale, (_data_pairs(kernel, inputs), None), where=_on(q))
    else:
        _run(_attnc.backward, kernel, tensors, 6, scale, (_data_pairs(kernel, inputs), None))
    return d_q, d_k, d_v


def _int_inputs(kernel: "_api.Kernel") -> List[Tuple[int, Tuple[str, int]]]:
    """(index, (name, rank)) of the kernel's int inputs, in declaration order."""
    return [(x, entry) for x, entry in enumerate(kernel._inputs) if not kernel._float[x]]


def _float_inputs(kernel: "_api.Kernel") -> List[Tuple[int, Tuple[str, int]]]:
    """(index, (name, rank)) of the kernel's float inputs, in declaration order."""
    return [(x, entry) for x, entry in enumerate(kernel._inputs) if kernel._float[x]]


def _check_data(kernel: "_api.Kernel", inputs: Sequence[Tensor], q: Tensor, k: Tensor,
                floats: Optional[Sequence[Tensor]] = None) -> None:
    """The ops' inputs: one [B, H, D1, D2] int32 or int64 tensor per declared int input, in order,
    and (attention_scored: `floats` given) one float32 or bfloat16 tensor of its declared shape
    per float input (the dimensions checked when n and the heads are known: not for symbolic ones,
    which the runtime checks)."""
    declared = _int_inputs(kernel)
    if len(inputs) != len(declared):
        names = tuple(entry for _, entry in declared)
        raise error(INVALID_ARGUMENT, f"pattern '{kernel._pattern}' reads {len(declared)} int input"
                                      f"{'s' if len(declared) != 1 else ''}"
                                      f"{' (' + _api._names(names) + ')' if names else ''} but the call gives "
                                      f"{len(inputs)}")
    if floats is not None or any(kernel._float):
        reals = _float_inputs(kernel)
        given = len(floats) if floats is not None else 0
        if given != len(reals):
            names = tuple(entry for _, entry in reals)
            raise error(INVALID_ARGUMENT, f"pattern '{kernel._pattern}' reads {len(reals)} float input"
                                          f"{'s' if len(reals) != 1 else ''}"
                                          f"{' (' + _api._names(names) + ')' if names else ''} but the call gives "
                                          f"{given}" + ("" if floats is not None else
                                                        ": call attnc::attention_scored"))
        for (x, (name, rank)), value in zip(reals, floats):
            _check_float_input(kernel, x, value, q, k)
    n = k.shape[2]
    dims = kernel._input_dims(n) if isinstance(n, int) and n >= 1 else None
    for (x, (name, rank)), value in zip(declared, inputs):
        if value.dtype not in _INPUT_DTYPES:
            raise error(DTYPE, f"input '{name}' has dtype {value.dtype}; it is an int input (read by the "
                               "pattern's sets): int32 or int64")
        if value.dim() != 4 or (rank == 1 and value.shape[3] != 1):
            raise error(SHAPE, f"input '{name}' has shape {list(value.shape)}; attnc::attention_data takes "
                               "[B, H, D1, D2] (D2 = 1 for a 1-D input)")
        shape = tuple(value.shape) if rank == 2 else tuple(value.shape[:3])
        _api._input_shape4(name, rank, shape, tuple(q.shape), n, dims[x][:2] if dims else None)


def _check_float_input(kernel: "_api.Kernel", x: int, value: Any, q: Tensor, k: Tensor) -> Tensor:
    """Float input x as a call gives it: a float32 or bfloat16 tensor (a numpy array is wrapped)
    on q's device of exactly its declared shape at nk and the query heads."""
    name, _ = kernel._inputs[x]
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if not isinstance(value, Tensor):
        raise TypeError(f"input '{name}' is a {type(value).__name__}; it is a float input (read by the pattern's "
                        "score or sink): a float32 or bfloat16 tensor")
    if value.dtype not in _FLOAT_INPUT_DTYPES:
        raise error(DTYPE, f"input '{name}' has dtype {value.dtype}; it is a float input (read by the pattern's "
                           "score or sink): float32 or bfloat16")
    if value.device != q.device:
        raise error(INVALID_ARGUMENT, f"input '{name}' is on device '{value.device}' but 'q' is on "
                                      f"'{q.device}'; inputs live with the tensors")
    _api._float_shape(kernel, x, tuple(value.shape), k.shape[2], q.shape[1])
    return value


@torch.library.custom_op("attnc::attention_data", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_data_op(q: Tensor, k: Tensor, v: Tensor, inputs: List[Tensor], kernel_id: int,
                       scale: float) -> Tuple[Tensor, Tensor]:
    return _data_forward(q, k, v, inputs, _api._kernel_by_id(kernel_id), scale)


@_attention_data_op.register_fake
def _attention_data_fake(q: Tensor, k: Tensor, v: Tensor, inputs: List[Tensor], kernel_id: int,
                         scale: float) -> Tuple[Tensor, Tensor]:
    _api._check_shapes(q.shape, k.shape, v.shape)
    _check_data(_api._kernel_by_id(kernel_id), inputs, q, k)
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("attnc::attention_data_backward", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_data_backward_op(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, inputs: List[Tensor], kernel_id: int,
    scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return _data_backward(d_o, q, k, v, o, lse, inputs, _api._kernel_by_id(kernel_id), scale)


@_attention_data_backward_op.register_fake
def _attention_data_backward_fake(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, inputs: List[Tensor], kernel_id: int,
    scale: float
) -> Tuple[Tensor, Tensor, Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_data_context(ctx, inputs, output) -> None:
    q, k, v, data, kernel_id, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, *data)
    ctx.mark_non_differentiable(lse)
    ctx.kernel_id = kernel_id
    ctx.scale = scale


def _attention_data_op_backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
    q, k, v, o, lse, *data = ctx.saved_tensors
    d_q, d_k, d_v = torch.ops.attnc.attention_data_backward(d_o, q, k, v, o, lse, data, ctx.kernel_id, ctx.scale)
    return d_q, d_k, d_v, [None] * len(data), None, None  # (the inputs are integers: no gradient)


_attention_data_op.register_autograd(_attention_data_op_backward, setup_context=_setup_data_context)


# ---- patterns with float inputs (score modifiers) -------------------------------


def _scored_forward(q: Tensor, k: Tensor, v: Tensor, inputs: Sequence[Tensor], floats: Sequence[Tensor],
                    kernel: "_api.Kernel", scale: float, with_lse: bool = True) -> Tuple[Tensor, Optional[Tensor]]:
    """O and lse (None unless `with_lse`) of a call with float inputs: attnc::attention_scored's
    implementation, and the eager path's. On CUDA tensors the float inputs are CUDA tensors too
    (the kernels run a soft cap and a per-head sink: the runtime refuses other scores, saying so)."""
    o = _new(q)
    pairs = _data_pairs(kernel, inputs, floats)
    if q.is_cuda:
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
        _run(_attnc.forward_cuda, kernel, [q, k, v, o, lse], 3, scale, (pairs,), where=_on(q))
        return o, lse if with_lse else None
    lse = torch.empty(q.shape[:3], dtype=torch.float32) if with_lse else None
    _run(_attnc.forward, kernel, [q, k, v, o, lse], 3, scale, (pairs,))
    return o, lse


def _scored_backward(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, inputs: Sequence[Tensor],
                     floats: Sequence[Tensor], kernel: "_api.Kernel", scale: float,
                     wanted: Optional[Sequence[bool]] = None) -> Tuple[Tensor, Tensor, Tensor, List[Optional[Tensor]]]:
    """dQ, dK, dV and the float inputs' gradients (each in its input's shape and dtype; None where
    `wanted` says it is not needed, when given) of a call with float inputs:
    attnc::attention_scored_backward's implementation. The runtime writes them as float32
    (attnc_call::d_inputs)."""
    if d_o.dtype != o.dtype:
        d_o = d_o.to(o.dtype)
    d_q, d_k, d_v = _new(q), _new(k), _new(v)
    names = [name for _, (name, _) in _float_inputs(kernel)]
    wanted = [True] * len(floats) if wanted is None else list(wanted)
    d_floats: List[Optional[Tensor]] = [
        torch.empty(x.shape, dtype=torch.float32, device=q.device) if want else None
        for x, want in zip(floats, wanted)]
    d_pairs = [(name, g.reshape(tuple(g.shape) + (1,) * (4 - g.dim())))
               for name, g in zip(names, d_floats) if g is not None]
    tensors = [q, k, v, o, d_o, lse, d_q, d_k, d_v]
    if q.is_cuda:
        _run(_attnc.backward_cuda, kernel, tensors, 6, scale, (_data_pairs(kernel, inputs, floats), d_pairs),
             where=_on(q))
    else:
        _run(_attnc.backward, kernel, tensors, 6, scale, (_data_pairs(kernel, inputs, floats), d_pairs))
    d_floats = [g if g is None or g.dtype == x.dtype else g.to(x.dtype) for g, x in zip(d_floats, floats)]
    return d_q, d_k, d_v, d_floats


@torch.library.custom_op("attnc::attention_scored", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_scored_op(q: Tensor, k: Tensor, v: Tensor, inputs: List[Tensor], float_inputs: List[Tensor],
                         kernel_id: int, scale: float) -> Tuple[Tensor, Tensor]:
    return _scored_forward(q, k, v, inputs, float_inputs, _api._kernel_by_id(kernel_id), scale)


@_attention_scored_op.register_fake
def _attention_scored_fake(q: Tensor, k: Tensor, v: Tensor, inputs: List[Tensor], float_inputs: List[Tensor],
                           kernel_id: int, scale: float) -> Tuple[Tensor, Tensor]:
    _api._check_shapes(q.shape, k.shape, v.shape)
    _check_data(_api._kernel_by_id(kernel_id), inputs, q, k, float_inputs)
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.custom_op("attnc::attention_scored_backward", mutates_args=(), device_types=("cpu", "cuda"))
def _attention_scored_backward_op(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, inputs: List[Tensor],
    float_inputs: List[Tensor], kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor, List[Tensor]]:
    d_q, d_k, d_v, d_floats = _scored_backward(d_o, q, k, v, o, lse, inputs, float_inputs,
                                               _api._kernel_by_id(kernel_id), scale)
    return d_q, d_k, d_v, d_floats


@_attention_scored_backward_op.register_fake
def _attention_scored_backward_fake(
    d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, inputs: List[Tensor],
    float_inputs: List[Tensor], kernel_id: int, scale: float
) -> Tuple[Tensor, Tensor, Tensor, List[Tensor]]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), [x.new_empty(x.shape)
                                                                               for x in float_inputs]


def _setup_scored_context(ctx, inputs, output) -> None:
    q, k, v, data, floats, kernel_id, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, *data, *floats)
    ctx.mark_non_differentiable(lse)
    ctx.num_data = len(data)
    ctx.kernel_id = kernel_id
    ctx.scale = scale


def _attention_scored_op_backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
    q, k, v, o, lse, *rest = ctx.saved_tensors
    data, floats = rest[:ctx.num_data], rest[ctx.num_data:]
    d_q, d_k, d_v, d_floats = torch.ops.attnc.attention_scored_backward(d_o, q, k, v, o, lse, data, floats,
                                                                         ctx.kernel_id, ctx.scale)
    return d_q, d_k, d_v, [None] * len(data), list(d_floats), None, None


_attention_scored_op.register_autograd(_attention_scored_op_backward, setup_context=_setup_scored_context)


# ---- the eager path -----------------------------------------------------------
#
# torch.library's dispatch of a custom op costs more than attnc's kernel call
# around it (python/README.md, "Cost of a call"). In plain eager mode nothing
# observes that dispatch, so the public functions call the implementations
# above directly, with a torch.autograd.Function for the graph when one is
# recorded (its backward calls the backward implementation, under the same
# conditions). Anything that traces, transforms or intercepts operators
# (torch.compile and export, TorchFunctionMode and TorchDispatchMode including
# fake tensors, functorch's vmap/grad/functionalize, torch.jit.trace, forward-mode
# AD, the profiler) and tensor subclasses get the custom ops instead. A call that
# fails is repeated on the op path, whose checks give the error its message.

_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch = torch._C._are_functorch_transforms_active
_tracing = torch._C._is_tracing
_grad_enabled = torch.is_grad_enabled
_profiler = torch.autograd.profiler
_forward_ad = torch.autograd.forward_ad


def _eager(q: Tensor, k: Tensor, v: Tensor) -> bool:
    """Whether a call may skip the custom ops' dispatch: plain CPU tensors in plain eager mode.
    torch.compile folds is_compiling() to True, so the rest is never traced."""
    return not (_is_compiling() or _function_mode() or _dispatch_modes() or _functorch()
                or _tracing() or _profiler._is_profiler_enabled
                or _forward_ad._current_level >= 0) \
        and type(q) is _Tensor and type(k) is _Tensor and type(v) is _Tensor and q.is_cpu and k.is_cpu and v.is_cpu


class _EagerAttention(torch.autograd.Function):
    """attnc::attention's and attnc::attention_varlen's forward and backward without the
    dispatcher (the same implementations); cu_q is None for a dense batch."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float,
                cu_q: Optional[Tensor] = None, cu_k: Optional[Tensor] = None):
        if cu_q is None:
            o, lse = _forward(q, k, v, kernel, scale)
        else:
            o, lse = _varlen_forward(q, k, v, cu_q, cu_k, kernel, scale)
        ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
        ctx.mark_non_differentiable(lse)
        ctx.kernel = kernel
        ctx.scale = scale
        return o, lse

    @staticmethod
    def backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
        q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
        kernel, scale = ctx.kernel, ctx.scale
        # The op where the backward pass is observed, or records a graph of its own
        # (create_graph: the op has no derivative, as on the op path).
        on_op = _grad_enabled() or not _eager(d_o, q, k)
        if cu_q is None and on_op:
            grads = torch.ops.attnc.attention_backward(d_o, q, k, v, o, lse, kernel.id, scale)
        elif cu_q is None:
            grads = _backward(d_o, q, k, v, o, lse, kernel, scale)
        elif on_op:
            grads = torch.ops.attnc.attention_varlen_backward(d_o, q, k, v, o, lse, cu_q, cu_k, kernel.id, scale)
        else:
            grads = _varlen_backward(d_o, q, k, v, o, lse, cu_q, cu_k, kernel, scale)
        return (*grads, None, None, None, None)


class _EagerDataAttention(torch.autograd.Function):
    """attnc::attention_data's forward and backward without the dispatcher (the same
    implementations); the pattern's inputs follow the scale."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float, *inputs: Tensor):
        o, lse = _data_forward(q, k, v, inputs, kernel, scale)
        ctx.save_for_backward(q, k, v, o, lse, *inputs)
        ctx.mark_non_differentiable(lse)
        ctx.kernel = kernel
        ctx.scale = scale
        return o, lse

    @staticmethod
    def backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
        q, k, v, o, lse, *inputs = ctx.saved_tensors
        kernel, scale = ctx.kernel, ctx.scale
        if _grad_enabled() or not _eager(d_o, q, k):
            grads = torch.ops.attnc.attention_data_backward(d_o, q, k, v, o, lse, inputs, kernel.id, scale)
        else:
            grads = _data_backward(d_o, q, k, v, o, lse, inputs, kernel, scale)
        return (*grads, None, None, *(None for _ in inputs))


class _EagerScoredAttention(torch.autograd.Function):
    """attnc::attention_scored's forward and backward without the dispatcher (the same
    implementations); the int inputs (`num_data` of them), then the float inputs, follow."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float, num_data: int,
                *tensors: Tensor):
        data, floats = tensors[:num_data], tensors[num_data:]
        o, lse = _scored_forward(q, k, v, data, floats, kernel, scale)
        ctx.save_for_backward(q, k, v, o, lse, *tensors)
        ctx.mark_non_differentiable(lse)
        ctx.kernel = kernel
        ctx.scale = scale
        ctx.num_data = num_data
        return o, lse

    @staticmethod
    def backward(ctx, d_o: Tensor, d_lse: Optional[Tensor]):
        q, k, v, o, lse, *tensors = ctx.saved_tensors
        kernel, scale, num_data = ctx.kernel, ctx.scale, ctx.num_data
        data, floats = tensors[:num_data], tensors[num_data:]
        if _grad_enabled() or not _eager(d_o, q, k):
            d_q, d_k, d_v, d_floats = torch.ops.attnc.attention_scored_backward(d_o, q, k, v, o, lse, data, floats,
                                                                                 kernel.id, scale)
        else:
            # Only the float inputs that need one get a gradient computed.
            wanted = ctx.needs_input_grad[6 + num_data:]
            d_q, d_k, d_v, d_floats = _scored_backward(d_o, q, k, v, o, lse, data, floats, kernel, scale, wanted)
        return (d_q, d_k, d_v, None, None, None, *(None for _ in data), *d_floats)


def _eager_attention(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float], lse: bool):
    """(O, lse), or O alone when `lse` is false, without the dispatcher; None when the call fails:
    the op path then repeats it with the checks that say what is wrong (the runtime checks
    everything again, so a call it accepts is one the checks accept)."""
    try:
        scale = 0.0 if scale is None else _api._scale(scale)
        if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            out = _EagerAttention.apply(q, k, v, kernel, scale)
            return out if lse else out[0]
        if lse:
            return _forward(q, k, v, kernel, scale)
        return _forward_o(q, k, v, kernel, scale)
    except (AttncError, TypeError, BufferError):
        return None


# ---- checks and the public functions ----------------------------------------


def _check_tensors(q: Tensor, k: Tensor, v: Tensor, cuda: bool = True, cpu_only: str = "") -> None:
    """q, k, v are tensors of one dtype on one device: the CPU, or (with `cuda`) a CUDA GPU; without
    it, `cpu_only` says what runs on the CPU only."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise TypeError(f"'{name}' is a {type(x).__name__}; q, k and v must all be tensors")
        if x.device.type == "cuda" and not cuda:
            raise error(UNSUPPORTED, f"'{name}' is on device '{x.device}'; {cpu_only}")
        if x.device.type not in ("cpu", "cuda"):
            raise error(UNSUPPORTED, f"'{name}' is on device '{x.device}'; attnc kernels run on the CPU and on "
                                     "CUDA GPUs")
        if x.device != q.device:
            raise error(INVALID_ARGUMENT, f"'{name}' is on device '{x.device}' but 'q' is on '{q.device}'; "
                                          "q, k and v must be on one device")
        allowed = _CUDA_DTYPES if x.is_cuda else _DTYPES
        if x.dtype not in allowed:
            raise error(DTYPE, f"'{name}' has dtype {x.dtype}; attnc takes float32 or bfloat16"
                               + (", and float16 on a GPU" if x.dtype == torch.float16 else ""))
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise error(DTYPE, f"q, k and v must share one dtype, got {q.dtype}, {k.dtype} and {v.dtype}")


def _check_offsets(cu: Tensor, name: str) -> None:
    if cu.device.type not in ("cpu", "cuda"):
        raise error(UNSUPPORTED, f"'{name}' is on device '{cu.device}'; cu_seqlens live on the CPU or a CUDA GPU")
    if cu.dtype not in _OFFSET_DTYPES:
        raise error(DTYPE, f"'{name}' has dtype {cu.dtype}; cu_seqlens are int32 (or int64) offsets")
    if cu.dim() != 1 or cu.shape[0] < 1:
        raise error(SHAPE, f"'{name}' has shape {list(cu.shape)}; cu_seqlens are [num_seqs + 1] offsets "
                           "starting at 0")


def _check_varlen_shapes(q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_k: Optional[Tensor]) -> None:
    """Everything but the offsets' values, which the runtime checks (they are data, unknown while
    tracing)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 3:
            raise error(SHAPE, f"'{name}' has shape {list(x.shape)}; attention_varlen takes packed "
                               "[total, heads, d]")
    if v.shape != k.shape:
        raise error(SHAPE, f"'v' has shape {list(v.shape)} but 'k' has {list(k.shape)}; values have the keys' "
                           "shape")
    if k.shape[2] != q.shape[2]:
        raise error(SHAPE, f"'k' has shape {list(k.shape)} but 'q' has {list(q.shape)}; they must agree in d "
                           "(dimension 2)")
    _check_offsets(cu_q, "cu_seqlens_q")
    if cu_k is None:
        if k.shape[0] != q.shape[0]:
            raise error(INVALID_ARGUMENT, f"cu_seqlens_k is None, so the keys take the queries' offsets, but 'k' "
                                          f"has {k.shape[0]} rows and 'q' {q.shape[0]}; pass cu_seqlens_k")
    else:
        _check_offsets(cu_k, "cu_seqlens_k")
        if cu_k.shape[0] != cu_q.shape[0]:
            raise error(SHAPE, f"'cu_seqlens_k' has {cu_k.shape[0]} entries but 'cu_seqlens_q' "
                               f"{cu_q.shape[0]}; both are num_seqs + 1")
    if q.shape[0] != 0 and q.shape[1] != 0:
        _api._check_heads(q.shape[1], k.shape[1])


def _as_offsets(cu: Optional[Offsets], name: str) -> Optional[Tensor]:
    if cu is None or isinstance(cu, Tensor):
        return cu
    if isinstance(cu, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in cu):
        return torch.tensor(cu, dtype=torch.int32)
    raise TypeError(f"'{name}' is a {type(cu).__name__}; cu_seqlens are an int32 tensor or a list of ints")


def _data_inputs(kernel: "_api.Kernel", given: Dict[str, Any], q: Tensor,
                 k: Tensor) -> Tuple[List[Tensor], List[Tensor]]:
    """The pattern's inputs of a call given as keywords, checked (names, dtype, device, shape): the
    int inputs viewed as [B, H, D1, D2] and the float inputs as given (their declared shapes), each
    in declaration order. The declared dimensions are checked here in eager mode and by the op's
    fake implementation when compiling (where they are symbolic, by the runtime)."""
    compiling = _is_compiling()
    n = k.shape[2]
    values = _api._match_inputs(kernel, given, None if compiling else n, None if compiling else q.shape[1])
    dims = None if compiling or not isinstance(n, int) or n < 1 else kernel._input_dims(n)
    out, floats = [], []
    for x, ((name, rank), value) in enumerate(zip(kernel._inputs, values)):
        if kernel._float[x]:
            if compiling:  # (the fake implementation checks the shape, with what it knows)
                if not isinstance(value, Tensor):
                    raise TypeError(f"input '{name}' is a {type(value).__name__}; it is a float input: a float32 "
                                    "or bfloat16 tensor")
                floats.append(value)
            else:
                floats.append(_check_float_input(kernel, x, value, q, k))
            continue
        if isinstance(value, np.ndarray):
            value = torch.from_numpy(value)
        if not isinstance(value, Tensor):
            raise TypeError(f"input '{name}' is a {type(value).__name__}; it is an int input (read by the "
                            "pattern's sets): an int32 or int64 tensor")
        if value.dtype not in _INPUT_DTYPES:
            raise error(DTYPE, f"input '{name}' has dtype {value.dtype}; it is an int input (read by the "
                               "pattern's sets): int32 or int64")
        if value.device != q.device:
            raise error(INVALID_ARGUMENT, f"input '{name}' is on device '{value.device}' but 'q' is on "
                                          f"'{q.device}'; inputs live with the tensors")
        shape = _api._input_shape4(name, rank, tuple(value.shape), tuple(q.shape), n, dims[x][:2] if dims else None)
        out.append(value.reshape(shape))
    return out, floats


def _attention_data(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float],
                    given: Dict[str, Any], with_lse: bool):
    """attention() and attention_with_lse() of a pattern that reads data (or of a call that gives
    inputs): every check in Python before the call, then the eager path or attnc::attention_data."""
    _check_tensors(q, k, v)
    _api._check_shapes(q.shape, k.shape, v.shape)
    inputs, floats = _data_inputs(kernel, given, q, k)
    scale = _api._scale(scale)
    if any(kernel._float):
        return _attention_scored(q, k, v, kernel, scale, inputs, floats, with_lse)
    if _eager(q, k, v) and all(type(x) is _Tensor for x in inputs):
        if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            o, lse = _EagerDataAttention.apply(q, k, v, kernel, scale, *inputs)
        else:
            o, lse = _data_forward(q, k, v, inputs, kernel, scale, with_lse)
    else:
        o, lse = torch.ops.attnc.attention_data(q, k, v, inputs, kernel.id, scale)
    return (o, lse) if with_lse else o


def _attention_scored(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: float, inputs: List[Tensor],
                      floats: List[Tensor], with_lse: bool):
    """_attention_data's call of a pattern with float inputs: the eager path (autograd when q, k, v
    or a float input requires grad) or attnc::attention_scored."""
    if _eager(q, k, v) and all(type(x) is _Tensor for x in (*inputs, *floats)):
        if _grad_enabled() and any(x.requires_grad for x in (q, k, v, *floats)):
            o, lse = _EagerScoredAttention.apply(q, k, v, kernel, scale, len(inputs), *inputs, *floats)
        else:
            o, lse = _scored_forward(q, k, v, inputs, floats, kernel, scale, with_lse)
    else:
        o, lse = torch.ops.attnc.attention_scored(q, k, v, inputs, floats, kernel.id, scale)
    return (o, lse) if with_lse else o


def attention(
    q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float] = None, *,
    out: Optional[Tensor] = None, **inputs: Tensor
) -> Tensor:
    """attnc attention with the pattern of ``kernel``: q ``[batch, Hq, nq, d]`` over k, v
    ``[batch, Hkv, nk, d]`` (CPU tensors, float32 or bfloat16; or CUDA tensors, bfloat16,
    float16 or float32 (computed on bf16 tensor cores), run on the current stream; any
    strides); ``scale`` defaults to ``1/sqrt(d)``.

    Grouped-query attention: ``Hq`` is a multiple of ``Hkv`` and query head ``h`` reads
    key/value head ``h // (Hq // Hkv)`` (``Hkv = 1``: multi-query); k and v are read in
    place, never repeated per query head. Fewer queries than keys (``nq <= nk``): the
    queries are the last ``nq`` of the ``nk`` positions, query row ``r`` sitting at
    position ``r + nk - nq`` (bottom-right alignment), so a decoding step over a key/value
    cache is ``nq = 1`` with the pattern unchanged. Empty calls (a size of 0) return empty
    or zero outputs; a row with no keys gives zeros.

    Differentiable (attnc's backward pass; dK and dV sum over each group's query heads),
    traceable by ``torch.compile(fullgraph=True)``. Returns O, contiguous, with q's shape and
    dtype; or, with ``out`` (a tensor of q's shape and dtype, any strides), writes O into it
    and returns it, allocating nothing in eager mode (as torch's ``out=``: not differentiable).

    ``inputs``: a pattern that declares inputs (``kernel.inputs``) takes each by name. An int
    input (data the sets read) is an int32 or int64 tensor of its declared shape at nk (``[D]``
    or ``[D1, D2]``, see ``kernel.input_shape(name, n)``) with ``[batch]`` or ``[batch, heads]``
    (query heads) in front, or not, to share it across the batch or the heads; no gradient flows
    into it. A float input (``input NAME : float[...]``, read by ``score`` and ``sink``) is a
    float32 or bfloat16 tensor of exactly its declared shape at nk and the query heads
    (``kernel.input_shape(name, n, heads)``), shared by the whole call, and gets its gradient
    when it requires one. On CUDA tensors the inputs are CUDA tensors too (docs/cuda.md: int
    inputs are read on the host at each call; the GPU runs a soft cap, ALiBi and a per-head sink).
    attnc::attention_data (int inputs only) or attnc::attention_scored (float inputs) is then the op.
    """
    if out is not None:
        return _attention_out(q, k, v, kernel, scale, out, inputs)
    if kernel._inputs or inputs:
        return _attention_data(q, k, v, kernel, scale, inputs, False)
    if _eager(q, k, v):
        o = _eager_attention(q, k, v, kernel, scale, False)
        if o is not None:
            return o
    _check_tensors(q, k, v)
    _api._check_shapes(q.shape, k.shape, v.shape)
    o, _ = torch.ops.attnc.attention(q, k, v, kernel.id, _api._scale(scale))
    return o


def attention_cached(q: Tensor, k: Tensor, v: Tensor, key_positions: Any, kernel: "_api.Kernel",
                     scale: Optional[float] = None, *, first_query: Optional[int] = None, **inputs: Tensor) -> Tensor:
    """Attention over the keys a generation cache kept (attnc_call::key_positions): k, v
    ``[batch, Hkv, nk, d]`` hold only the keys at ``key_positions`` (``nk`` strictly ascending
    positions: an int64 tensor, a numpy array or a list), the queries q ``[batch, Hq, nq, d]``
    sit at positions ``first_query ..`` (default: ending at the last key's position, as a
    decoding step's do). Each query reads its row of the pattern, evaluated at the positions,
    among the keys held; the keys no query reads any more (``kernel.last_readers``) may be gone.
    A query whose row holds a position that is not there raises :class:`attnc.AttncError`
    (``ATTNC_ERROR_INVALID_ARGUMENT``) naming both positions, rather than computing over fewer
    keys. Returns O (q's shape and dtype, contiguous).

    CPU tensors, float32 or bfloat16, the fused backend; float inputs (``score``, ``sink``) by
    name as in :func:`attention`; a pattern that reads int inputs is refused. For generation:
    no gradient flows (asking for one raises ``ATTNC_ERROR_UNSUPPORTED``).
    ``attnc.transformers.PatternCache`` is the cache that calls it."""
    def run(data: Any, positions: Tensor) -> Tensor:
        o = _new(q)
        _run(_attnc.forward_held, kernel, [q, k, v, o, None], 3, _api._scale(scale),
             (data, positions, -1 if first_query is None else int(first_query)))
        return o

    if (not inputs and not kernel._inputs and type(key_positions) is _Tensor and not _grad_enabled()
            and _eager(q, k, v)):
        # A decoding step's call (PatternCache's, once per layer and token): straight to the runtime,
        # which checks everything the lines below do; a call it rejects is repeated below, where the
        # checks word what is wrong.
        try:
            return run(None, key_positions)
        except (AttncError, TypeError, BufferError):
            pass
    _check_tensors(q, k, v, cuda=False, cpu_only="attention_cached runs on CPU tensors only")
    _api._check_shapes(q.shape, k.shape, v.shape)
    given = list(inputs.values())
    if _grad_enabled() and any(isinstance(x, Tensor) and x.requires_grad for x in [q, k, v] + given):
        raise error(UNSUPPORTED, "attention_cached has no backward pass (a cache that dropped keys serves "
                                 "generation): call it under torch.no_grad(), or train on whole sequences")
    if isinstance(key_positions, Tensor):
        positions = key_positions.to(device="cpu", dtype=torch.int64).contiguous()
    else:
        positions = torch.as_tensor(np.asarray(key_positions, dtype=np.int64))
    if positions.dim() != 1:
        raise error(SHAPE, f"key_positions has shape {list(positions.shape)}; it is one position per key, [nk]")
    data = None
    if kernel._inputs or inputs:
        ints, floats = _data_inputs(kernel, inputs, q, k)
        data = _data_pairs(kernel, ints, floats)
    return run(data, positions)


def _attention_out(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float],
                   out: Tensor, inputs: Optional[Dict[str, Any]] = None) -> Tensor:
    """attention(..., out=out): in eager mode the runtime writes O into `out` itself; elsewhere,
    or where it cannot take `out`'s strides, O is computed and copied into it."""
    if not isinstance(out, Tensor):
        raise TypeError(f"'out' is a {type(out).__name__}; it must be a tensor")
    if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or out.requires_grad):
        raise RuntimeError("attnc.torch.attention(): out= does not support automatic differentiation (an input "
                           "requires grad); call it under torch.no_grad() or without out=")
    if out.shape != q.shape or out.dtype != q.dtype or out.device != q.device:
        raise error(SHAPE, f"'out' must have q's shape {list(q.shape)}, dtype {q.dtype} and device {q.device}, "
                           f"got {list(out.shape)}, {out.dtype} and {out.device}")
    if inputs or kernel._inputs:
        out.copy_(_attention_data(q, k, v, kernel, scale, inputs or {}, False))
        return out
    if _eager(q, k, v) and type(out) is _Tensor:
        try:
            _run(_attnc.run_forward, kernel, [q, k, v, out, None], 3, 0.0 if scale is None else _api._scale(scale))
            return out
        except (AttncError, TypeError, BufferError):
            pass  # the path below words the error, or copies into an `out` attnc cannot write
    out.copy_(attention(q, k, v, kernel, scale))
    return out


def attention_with_lse(
    q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", scale: Optional[float] = None, **inputs: Tensor
) -> Tuple[Tensor, Tensor]:
    """:func:`attention` and each row's log-sum-exp (float32 ``[batch, Hq, nq]``, -inf for a row
    with no keys; not differentiable). ``inputs`` as for :func:`attention`."""
    if kernel._inputs or inputs:
        return _attention_data(q, k, v, kernel, scale, inputs, True)
    if _eager(q, k, v):
        out = _eager_attention(q, k, v, kernel, scale, True)
        if out is not None:
            return out
    _check_tensors(q, k, v)
    _api._check_shapes(q.shape, k.shape, v.shape)
    return torch.ops.attnc.attention(q, k, v, kernel.id, _api._scale(scale))


def attention_varlen_with_lse(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Offsets, cu_seqlens_k: Optional[Offsets] = None,
    kernel: Optional["_api.Kernel"] = None, scale: Optional[float] = None
) -> Tuple[Tensor, Tensor]:
    """:func:`attention_varlen` and each row's log-sum-exp (float32 ``[Hq, total_q]``, as
    FlashAttention's varlen returns it; -inf for a row with no keys; not differentiable)."""
    if kernel is None:
        raise TypeError("attention_varlen needs a kernel: attention_varlen(q, k, v, cu_seqlens_q, kernel=...)")
    if kernel._inputs:
        what = "float inputs" if any(kernel._float) else "data (its inputs)"
        raise error(UNSUPPORTED, f"pattern '{kernel._pattern}' reads {what}, which varlen calls do not "
                                 "take yet: call each sequence with its own inputs")
    _check_tensors(q, k, v)
    cu_q, cu_k = _as_offsets(cu_seqlens_q, "cu_seqlens_q"), _as_offsets(cu_seqlens_k, "cu_seqlens_k")
    if cu_q is None:
        raise TypeError("'cu_seqlens_q' is None; a varlen call needs its queries' offsets")
    _check_varlen_shapes(q, k, v, cu_q, cu_k)
    scale = _api._scale(scale)
    if _eager(q, k, v) and type(cu_q) is _Tensor and (cu_k is None or type(cu_k) is _Tensor):
        if _grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return _EagerAttention.apply(q, k, v, kernel, scale, cu_q, cu_k)
        return _varlen_forward(q, k, v, cu_q, cu_k, kernel, scale)
    return torch.ops.attnc.attention_varlen(q, k, v, cu_q, cu_k, kernel.id, scale)


def attention_varlen(
    q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Offsets, cu_seqlens_k: Optional[Offsets] = None,
    kernel: Optional["_api.Kernel"] = None, scale: Optional[float] = None
) -> Tensor:
    """attnc attention over a variable-length batch in FlashAttention's packed layout.

    q is ``[total_q, Hq, d]`` and k, v ``[total_k, Hkv, d]`` (CPU tensors, float32 or
    bfloat16, or CUDA tensors, also float16; any strides): sequence ``s`` has its queries at rows ``cu_seqlens_q[s] :
    cu_seqlens_q[s + 1]`` of q and its keys at rows ``cu_seqlens_k[s] : cu_seqlens_k[s + 1]``
    of k and v, and attends within itself under the pattern at its own length. The offsets
    are FlashAttention's ``cu_seqlens``: ``num_seqs + 1`` non-decreasing integers from 0 to
    the tensor's rows, an int32 tensor (read in place; int64 tensors and lists of ints are
    converted). ``cu_seqlens_k=None`` gives the keys the queries' offsets. A sequence with
    fewer queries than keys has them bottom-right aligned (its last positions), and Hq is a
    multiple of Hkv as in :func:`attention`; empty sequences are allowed. ``kernel`` is
    keyword-friendly to match FlashAttention's argument order; ``scale`` defaults to
    ``1/sqrt(d)``.

    attnc reads the packed tensors as ``[1, heads, total, d]`` views of the same memory:
    nothing is copied or padded. Differentiable and traceable by
    ``torch.compile(fullgraph=True)``. Returns O ``[total_q, Hq, d]``, contiguous, with q's
    dtype.
    """
    o, _ = attention_varlen_with_lse(q, k, v, cu_seqlens_q, cu_seqlens_k, kernel, scale)
    return o


# Kernel.__call__ on tensors runs attention() (attnc._api never imports this module; it imports attnc._api).
_api._torch_attention = attention
