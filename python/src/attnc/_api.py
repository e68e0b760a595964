"""The package's API without torch: compile, load, Kernel (numpy), analyze, show.

Every check a user sees lives here (and in attnc.torch for tensors); the
extension (attnc._attnc) only converts arrays and forwards to the C ABI.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import threading
import warnings
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _attnc
from ._errors import DTYPE, INVALID_ARGUMENT, SHAPE, STRIDE, UNSUPPORTED, AttncError, AttncWarning, error

__all__ = ["Kernel", "compile", "load", "analyze", "show", "cache_stats", "cpu_isa"]

PathOrSource = Union[str, "os.PathLike[str]"]

# Keys attnc_kernel_metadata knows (docs/runtime.md, "Kernel files").
_METADATA_KEYS = (
    "pattern", "params", "heads", "head_sets", "dtype", "target", "backend", "tile_rows", "tile_cols",
    "tuned_tiles", "grad_tile_rows", "halide_schedule", "halide_target", "abi_version", "source_hash",
    "compiler_version", "jit_cache_key", "source",
)
_BACKENDS = ("fused", "halide", "sparsifier", "dense")

# Kernels by id: the torch custom op takes a kernel as an int (ops take no
# Python objects). A kernel stays alive for the process once created, since a
# compiled graph may hold its id; compile() returns the same Kernel for the
# same request, so a loop that compiles does not pile them up.
_KERNELS: Dict[int, "Kernel"] = {}
_COMPILED: Dict[Tuple[Any, ...], "Kernel"] = {}
_NEXT_ID = itertools.count(1)
_LOCK = threading.Lock()


# How Kernel.__call__ runs torch tensors. This module never imports attnc.torch (which imports it):
# attnc.torch sets _torch_attention to its attention() when it is imported, and the package
# (attnc/__init__.py) sets _load_torch to a function that imports attnc.torch and returns it. The
# modules so import one way: attnc.torch -> attnc._api, never back.
_torch_attention = None
_load_torch = None


def _import_torch_attention():
    if _torch_attention is None:
        if _load_torch is None:
            raise ImportError("attnc._api: torch tensors need attnc.torch; import attnc (the package) or attnc.torch")
        _load_torch()
    return _torch_attention


def _kernel_by_id(kernel_id: int) -> "Kernel":
    kernel = _KERNELS.get(kernel_id)
    if kernel is None:
        raise error(INVALID_ARGUMENT, f"no attnc kernel has id {kernel_id}")
    return kernel


def _contiguous(x: Any) -> Any:
    """A copy of x that attnc accepts: row-major, positive strides."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x)
    return x.contiguous()


def _needs_copy(e: BaseException) -> bool:
    # A stride attnc cannot take (0 from a broadcast, negative from numpy's
    # flips, not a whole number of elements): the runtime says STRIDE, the
    # conversion TypeError or BufferError. Retried once on a row-major copy.
    return isinstance(e, (TypeError, BufferError)) or (isinstance(e, AttncError) and e.status == STRIDE)


class Kernel:
    """A compiled attention pattern: ``kernel(q, k, v)`` computes

    ``O[b, h, r] = sum over j in S_h(p) of softmax_j(scale * q_r . k_j) v_j``

    on q of shape ``[batch, Hq, nq, d]`` and k, v of shape ``[batch, Hkv, nk, d]``:
    torch tensors (float32 or bfloat16, on the CPU; a ``torch.library`` custom op with
    autograd, see :mod:`attnc.torch`) or numpy float32 arrays. Any strides; contiguous
    inputs are never copied. ``n`` is free: one kernel serves every length.

    Grouped-query attention: ``Hq`` is a multiple of ``Hkv`` and query head ``h`` reads
    key/value head ``h // (Hq // Hkv)`` (``Hkv = 1``: multi-query). Fewer queries than
    keys: the ``nq`` queries are the *last* ``nq`` of the ``nk`` positions, ``p = r + nk -
    nq`` (bottom-right alignment, as in a decoding step over a key/value cache), so a
    causal pattern needs nothing else for decoding.
    """

    def __init__(self, handle: Any, name: str) -> None:
        self._handle = handle
        self._name = name
        #: Worker threads for runs; 0: $ATTNC_NUM_THREADS or every core.
        self.num_threads = 0
        # The sparsifier backend writes no log-sum-exp (docs/runtime.md).
        self._has_lse = handle.metadata("backend") != "sparsifier"
        self._pattern = handle.metadata("pattern") or name
        # The pattern's inputs in declaration order: ((name, rank), ...), int and float alike; empty
        # for a positional pattern. _float[x]: whether input x is a float input (`input NAME :
        # float[DIMS]`, read by `score` / `sink`). Their dimensions depend on n (and a float input's on
        # the query heads): _input_dims(n, heads) asks the runtime (cached).
        infos = [handle.input_info(x, 1, 1) for x in range(handle.num_inputs)]
        self._inputs: Tuple[Tuple[str, int], ...] = tuple((info[0], info[1]) for info in infos)
        self._float: Tuple[bool, ...] = tuple(bool(info[2]) for info in infos)
        # ATTNC_MODIFIER_SCORE (1) | ATTNC_MODIFIER_SINK (2): the pattern's `score` and `sink`.
        self._modifiers = int(handle.modifiers)
        self._dims: Dict[Tuple[int, int], Tuple[Tuple[int, int, int, int], ...]] = {}
        with _LOCK:
            self.id = next(_NEXT_ID)
            _KERNELS[self.id] = self

    def __repr__(self) -> str:
        meta = self.metadata
        params = f", {meta['params']}" if meta.get("params") else ""
        return f"<attnc.Kernel {meta.get('pattern', '?')}{params} backend={meta.get('backend', '?')} id={self.id}>"

    @property
    def metadata(self) -> Dict[str, str]:
        """The kernel file's metadata: pattern, params, backend, target, source, ..."""
        values = ((key, self._handle.metadata(key)) for key in _METADATA_KEYS)
        return {key: value for key, value in values if value}

    @property
    def heads(self) -> Optional[int]:
        """The head count the pattern declares, or None when any count works."""
        h = self._handle.num_heads
        return h if h > 0 else None

    @property
    def backend(self) -> str:
        return self._handle.metadata("backend")

    @property
    def inputs(self) -> Dict[str, int]:
        """The inputs the pattern declares, in declaration order: each input's name and rank (1
        or 2 for an int input, ``input NAME : int[...]``, read by the sets; 1 to 3 for a float
        input, ``input NAME : float[...]``, read by ``score`` and ``sink``). Empty for a pattern
        of positions only. Every call passes each as a keyword argument: ``kernel(q, k, v, b0=b0,
        b1=b1)``, ``kernel(q, k, v, slope=slope)``. :meth:`input_info` tells them apart and gives
        their shapes."""
        return dict(self._inputs)

    @property
    def float_inputs(self) -> Tuple[str, ...]:
        """The names of the pattern's float inputs (``input NAME : float[...]``), in declaration
        order: tensors that ``score`` and ``sink`` read, and that get gradients."""
        return tuple(name for (name, _), f in zip(self._inputs, self._float) if f)

    @property
    def modifiers(self) -> Tuple[str, ...]:
        """The pattern's score modifiers: ``"score"`` (it rewrites each allowed pair's logit) and
        ``"sink"`` (it adds ``exp(EXPR)`` to every row's softmax denominator), or ``()``."""
        return tuple(name for bit, name in ((1, "score"), (2, "sink")) if self._modifiers & bit)

    def last_readers(self, n: int) -> np.ndarray:
        """Which keys a generation cache may drop: int64 ``[n]``, entry ``j`` the last query
        position below ``n`` whose keys (in any head) include position ``j``, or -1 when none
        does. A cache whose next query is at position ``p < n`` never needs a key ``j`` with
        ``last[j] < p`` again (``attnc.transformers.PatternCache`` drops them; see
        ``attnc.torch.attention_cached``). Keys the last position reads may be read past ``n``:
        ask again with a larger ``n`` before generating past it. A pattern that reads int inputs,
        or whose rows depend on ``n`` (a term in ``n``, random blocks), raises ``AttncError``
        (``ATTNC_ERROR_UNSUPPORTED``)."""
        _check_range("n", n, 1, 2**31)
        return _attnc.last_readers(self._handle, int(n))

    def input_info(self, n: int, heads: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
        """Every input at key length ``n`` and ``heads`` query heads (default: the pattern's
        declared head count, else 1), in declaration order: ``{name: {"is_float": bool, "rank": r,
        "shape": (...), "id_limit": int or None}}``. An int input's ``shape`` is its declared
        dimensions (a call may add ``[batch]`` or ``[batch, heads]`` in front); a float input's
        is exactly what a call gives (the whole call shares it: no batch or head dimensions)."""
        _check_range("n", n, 1, 1 << 62)
        heads = self._heads_for(heads)
        dims = self._input_dims(int(n), heads)
        return {name: {"is_float": self._float[x], "rank": rank, "shape": tuple(dims[x][:rank]),
                       "id_limit": dims[x][3] if dims[x][3] > 0 else None}
                for x, (name, rank) in enumerate(self._inputs)}

    def input_shape(self, name: str, n: int, heads: Optional[int] = None) -> Tuple[int, ...]:
        """The declared dimensions of input ``name`` at key length ``n`` (``(n,)`` for
        ``int[n]``, ``(ceil(n / B), k)`` for ``int[(n + B - 1) / B, k]``); a call may add
        ``[batch]`` or ``[batch, heads]`` in front of an int input. A float input's dimensions
        may use the call's query heads (``float[heads]``): ``heads`` (default: the pattern's
        declared head count, else 1) gives them."""
        x = self._input_index(name)
        _check_range("n", n, 1, 1 << 62)
        heads = self._heads_for(heads) if self._float[x] else 1
        return tuple(self._input_dims(int(n), heads)[x][:self._inputs[x][1]])

    def input_id_limit(self, name: str, n: int) -> Optional[int]:
        """When the pattern reads input ``name`` as block or token ids (``j / B in sel[...]``,
        ``j in top[i]``), the bound on them at key length ``n``: each entry must lie in
        ``[-1, limit)`` (-1: none). None when any integer will do (bucket or document ids, float
        inputs)."""
        x = self._input_index(name)
        _check_range("n", n, 1, 1 << 62)
        limit = self._input_dims(int(n))[x][3]
        return limit if limit > 0 else None

    def _heads_for(self, heads: Optional[int]) -> int:
        if heads is None:
            return self.heads or 1
        _check_range("heads", heads, 1, 1 << 31)
        return int(heads)

    def _input_index(self, name: str) -> int:
        for x, (declared, _) in enumerate(self._inputs):
            if declared == name:
                return x
        raise error(INVALID_ARGUMENT, f"pattern '{self._pattern}' has no input '{name}'"
                                      + (f" (it declares {_names(self._inputs)})" if self._inputs
                                         else " (it reads no data)"))

    def _input_dims(self, n: int, heads: int = 1) -> Tuple[Tuple[int, int, int, int], ...]:
        """(D0, D1, D2, id limit) of each input at key length n (n >= 1) and `heads` query heads
        (what `heads` stands for in a float input's dimensions), from attnc_kernel_input_info;
        1 past an input's rank."""
        if not any(self._float):
            heads = 1  # (int inputs' dimensions never use it)
        dims = self._dims.get((n, heads))
        if dims is None:
            infos = (self._handle.input_info(x, n, heads) for x in range(len(self._inputs)))
            dims = tuple((*info[3], info[4]) for info in infos)
            if len(self._dims) >= 1024:
                self._dims.clear()
            self._dims[(n, heads)] = dims
        return dims

    def __call__(self, q: Any, k: Any, v: Any, scale: Optional[float] = None, *, out: Any = None,
                 **inputs: Any) -> Any:
        """Attention of q [batch, Hq, nq, d] over k, v [batch, Hkv, nk, d] (see the class);
        returns O like q (a tensor or a numpy array).

        ``scale`` defaults to ``1/sqrt(d)``. ``out``: an array of q's shape and dtype that O is
        written into (and returned), as in torch's ``out=``; nothing is allocated then.
        ``inputs``: the inputs the pattern declares (:attr:`inputs`), each by its name (torch
        tensors with tensors, numpy arrays with arrays). An int input (data the sets read) is
        int32 or int64 of its declared shape at nk (``[D]`` or ``[D1, D2]``) with ``[batch]`` or
        ``[batch, heads]`` (query heads) in front, or not, to share it across what is missing. A
        float input (what ``score`` and ``sink`` read: slopes, sink logits, bias tables) is
        float32 (or bfloat16 as a tensor) of exactly its declared shape at nk and the query heads
        (``kernel.input_shape(name, nk, heads)``), shared by the whole call; tensors that require
        grad get their gradient.
        """
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(q, torch.Tensor):
            attention = _torch_attention or _import_torch_attention()
            if inputs:
                return attention(q, k, v, self, scale, out=out, **inputs)
            return attention(q, k, v, self, scale) if out is None else attention(q, k, v, self, scale, out=out)
        if out is None:
            o, _ = self.forward(q, k, v, scale=scale, lse=False, **inputs)
            return o
        q, k, v = (_numpy_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
        _check_shapes(q.shape, k.shape, v.shape)
        data = _numpy_inputs(self, inputs, q.shape, k.shape)
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != q.shape:
            raise error(SHAPE, f"'out' must be a float32 numpy array of q's shape {list(q.shape)}, got "
                               f"{_describe(out)}")
        if not out.flags.writeable:
            raise error(INVALID_ARGUMENT, "'out' is a read-only array")
        self._forward(q, k, v, out, None, _scale(scale), data)
        return out

    # -- numpy --------------------------------------------------------------

    def forward(
        self, q: Any, k: Any, v: Any, scale: Optional[float] = None, lse: bool = True, **inputs: Any
    ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """O (q's shape) and each row's log-sum-exp ([batch, Hq, nq], float32; -inf for a row with
        no keys; None with ``lse=False`` or a sparsifier kernel, which has none) for numpy float32
        arrays (or any DLPack array, viewed through numpy). ``inputs``: the pattern's inputs, as for
        ``__call__`` (numpy int32 or int64 arrays for int inputs, float32 for float inputs)."""
        q, k, v = (_numpy_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
        _check_shapes(q.shape, k.shape, v.shape)
        data = _numpy_inputs(self, inputs, q.shape, k.shape)
        o = np.empty(q.shape, dtype=np.float32)
        l = np.empty(q.shape[:3], dtype=np.float32) if lse and self._has_lse else None
        self._forward(q, k, v, o, l, _scale(scale), data)
        return o, l

    def backward(
        self, q: Any, k: Any, v: Any, o: Any, lse: Any, d_o: Any, scale: Optional[float] = None, **inputs: Any
    ) -> Tuple[Any, ...]:
        """dQ, dK, dV of ``sum(O * d_o)`` for numpy float32 arrays, from forward()'s O and lse;
        dK and dV have k's shape (with grouped heads, summed over each group's query heads).
        ``inputs``: the same inputs as the forward call's. For a pattern with float inputs a
        fourth item follows: ``{name: gradient}`` of each float input (float32, its shape)."""
        q, k, v, o, d_o = (
            _numpy_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (d_o, "d_o"))
        )
        _check_shapes(q.shape, k.shape, v.shape)
        data = _numpy_inputs(self, inputs, q.shape, k.shape)
        lse = np.asarray(lse, dtype=np.float32)
        grads = (np.empty(q.shape, dtype=np.float32), np.empty(k.shape, dtype=np.float32),
                 np.empty(k.shape, dtype=np.float32))
        if not any(self._float):
            self._backward(q, k, v, o, d_o, lse, *grads, _scale(scale), data)
            return grads
        # The float inputs' gradients: float32 of each input's shape, written by the runtime.
        shapes = {name: value.shape for name, value in data if self._float[self._input_index(name)]}
        d_inputs = {name: np.empty(shape[:self._inputs[self._input_index(name)][1]], dtype=np.float32)
                    for name, shape in shapes.items()}
        d_pairs = [(name, g.reshape(shapes[name])) for name, g in d_inputs.items()]
        self._backward(q, k, v, o, d_o, lse, *grads, _scale(scale), data, d_pairs)
        return (*grads, d_inputs)

    # -- the calls into the extension (attnc.torch has its own, on DLPack capsules)

    def _forward(self, q: Any, k: Any, v: Any, o: Any, lse: Any, scale: float, data: Optional[list] = None) -> None:
        """`data`: the pattern's inputs as (name, 4-D array) pairs (None: it reads none): int inputs
        [B, H, D1, D2], float inputs their dimensions then 1s."""
        for attempt in (0, 1):
            try:
                if data is None:
                    _attnc.run_forward(self._handle, q, k, v, o, lse, scale, self.num_threads)
                else:
                    _attnc.forward(self._handle, q, k, v, o, lse, data, scale, self.num_threads)
                return
            except (AttncError, TypeError, BufferError) as e:
                if attempt or not _needs_copy(e):
                    raise
                q, k, v = (_contiguous(x) for x in (q, k, v))

    def _backward(self, q: Any, k: Any, v: Any, o: Any, d_o: Any, lse: Any, d_q: Any, d_k: Any, d_v: Any,
                  scale: float, data: Optional[list] = None, d_data: Optional[list] = None) -> None:
        """`d_data`: (name, float32 4-D array) pairs the float inputs' gradients are written to."""
        for attempt in (0, 1):
            try:
                if data is None:
                    _attnc.run_backward(self._handle, q, k, v, o, d_o, lse, d_q, d_k, d_v, scale, self.num_threads)
                else:
                    _attnc.backward(self._handle, q, k, v, o, d_o, lse, d_q, d_k, d_v, data, d_data, scale,
                                    self.num_threads)
                return
            except (AttncError, TypeError, BufferError) as e:
                if attempt or not _needs_copy(e):
                    raise
                q, k, v, o, d_o, lse = (_contiguous(x) for x in (q, k, v, o, d_o, lse))


def _scale(scale: Optional[float]) -> float:
    if scale is None:
        return 0.0  # the runtime's 1/sqrt(d)
    scale = float(scale)
    if not (scale > 0 and math.isfinite(scale)):
        raise error(INVALID_ARGUMENT, f"scale must be a positive finite number, got {scale}")
    return scale


def _check_heads(hq: Any, hkv: Any) -> None:
    if hkv < 1 or hq % hkv != 0:
        raise error(SHAPE, f"'q' has {hq} heads and 'k' {hkv}; the query heads must be a multiple of the "
                           "key/value heads (each group of query heads shares one)")


def _check_shapes(q: Tuple[Any, ...], k: Tuple[Any, ...], v: Tuple[Any, ...]) -> None:
    """The shapes of a dense call (numpy arrays and tensors; torch's symbolic sizes too): q
    [batch, Hq, nq, d], k and v [batch, Hkv, nk, d], Hq a multiple of Hkv, nq <= nk. A call
    with no output element (batch, Hq or nq of 0) is checked for ranks and agreement only,
    as the runtime does."""
    for name, shape in (("q", q), ("k", k), ("v", v)):
        if len(shape) != 4:
            raise error(SHAPE, f"'{name}' has shape {list(shape)}; attnc takes [batch, heads, n, d]")
    if tuple(v) != tuple(k):
        raise error(SHAPE, f"'v' has shape {list(v)} but 'k' has {list(k)}; values have the keys' shape")
    if k[0] != q[0] or k[3] != q[3]:
        raise error(SHAPE, f"'k' has shape {list(k)} but 'q' has {list(q)}; they must agree in batch "
                           "(dimension 0) and d (dimension 3)")
    if q[0] == 0 or q[1] == 0 or q[2] == 0:
        return
    _check_heads(q[1], k[1])
    if q[2] > k[2]:
        raise error(SHAPE, f"'q' has {q[2]} rows but 'k' {k[2]}; the queries are the last nq of the nk key "
                           "positions (bottom-right aligned), so nq <= nk")


def _describe(x: Any) -> str:
    """'a float64 array of shape [2, 3]', or the type's name."""
    if hasattr(x, "dtype") and hasattr(x, "shape"):
        return f"a {x.dtype} array of shape {list(x.shape)}"
    return f"a {type(x).__name__}"


def _numpy_input(x: Any, name: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        x = np.from_dlpack(x) if hasattr(x, "__dlpack__") else np.asarray(x)
    if x.dtype != np.float32:
        raise error(DTYPE, f"'{name}' is a {x.dtype} array; attnc takes float32 numpy arrays "
                           "(bfloat16 through torch tensors)")
    if x.ndim != 4:
        raise error(SHAPE, f"'{name}' has shape {list(x.shape)}; attnc takes [batch, heads, n, d]")
    return x


# -- the data of patterns that read it ------------------------------------------


def _names(inputs: Tuple[Tuple[str, int], ...]) -> str:
    return ", ".join(f"'{name}'" for name, _ in inputs)


def _match_inputs(kernel: Kernel, given: Mapping[str, Any], n: Any = None, heads: Any = None) -> list:
    """The values given for the kernel's inputs, in declaration order: each declared input once,
    nothing else (an unknown keyword is reported as an input the pattern lacks). `n` and `heads`
    (when known) let the message of a missing float input say its shape."""
    declared = kernel._inputs
    if not declared:
        if given:
            raise error(INVALID_ARGUMENT, f"pattern '{kernel._pattern}' reads no data, but the call gives "
                                          f"{', '.join(repr(name) for name in given)}: only a pattern that "
                                          "declares inputs ('input NAME : int[...]' or 'input NAME : float[...]') "
                                          "takes them")
        return []
    for name in given:
        if not any(name == d for d, _ in declared):
            raise error(INVALID_ARGUMENT, f"pattern '{kernel._pattern}' has no input '{name}' (it declares "
                                          f"{_names(declared)})")
    missing = [d for d, _ in declared if d not in given]
    if missing:
        call = ", ".join(f"{d}=..." for d, _ in declared)
        floats = [_describe_float(kernel, x, n, heads) for x, (d, _) in enumerate(declared)
                  if d in missing and kernel._float[x]]
        raise error(INVALID_ARGUMENT, f"pattern '{kernel._pattern}' reads the input"
                                      f"{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)}, "
                                      f"missing from the call: pass {'them' if len(missing) > 1 else 'it'} as "
                                      f"kernel(q, k, v, {call})" + ("; " + "; ".join(floats) if floats else ""))
    return [given[d] for d, _ in declared]


def _known(x: Any) -> bool:
    """Whether a size is a plain integer (not a symbolic one of a traced graph)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _describe_float(kernel: Kernel, x: int, n: Any, heads: Any) -> str:
    """"'slope' is a float input of shape [4] at n = 20 with 4 query heads" (its rank alone when n
    or heads is not known)."""
    name, rank = kernel._inputs[x]
    if _known(n) and _known(heads) and n >= 1 and heads >= 1:
        shape = list(kernel._input_dims(int(n), int(heads))[x][:rank])
        return f"'{name}' is a float input of shape {shape} at n = {n} with {heads} query heads"
    return f"'{name}' is a float input of {rank} dimension{'s' if rank > 1 else ''}"


def _float_shape(kernel: Kernel, x: int, shape: Tuple[Any, ...], n: Any, heads: Any) -> Tuple[Any, ...]:
    """The 4-D shape attnc takes for float input x given with `shape` (its declared dimensions at
    key length n and `heads` query heads, exactly: the whole call shares it), its dimensions then
    1s. Checked against the declaration when n and heads are known, for the rank otherwise."""
    name, rank = kernel._inputs[x]
    if _known(n) and _known(heads) and n >= 1 and heads >= 1:
        want = tuple(kernel._input_dims(int(n), int(heads))[x][:rank])
        fits = tuple(shape) == want
    else:
        want, fits = None, len(shape) == rank
    if not fits:
        expected = (f"at n = {n} with {heads} query heads it must be {list(want)}" if want is not None
                    else f"it has {rank} dimension{'s' if rank > 1 else ''}")
        raise error(SHAPE, f"input '{name}' has shape {list(shape)}; it is a float input, which the whole call "
                           f"shares (no batch or head dimensions in front): {expected}")
    return tuple(shape) + (1,) * (4 - rank)


def _input_shape4(name: str, rank: int, shape: Tuple[Any, ...], q: Tuple[Any, ...], n: Any,
                  dims: Optional[Tuple[int, int]]) -> Tuple[Any, Any, Any, Any]:
    """The [B, H, D1, D2] shape attnc takes for an input of `shape` ([D...], [B, D...] or
    [B, H, D...], D... the declared `rank` dimensions, `dims` at key length n when known),
    in a call whose q has shape `q` (B: 1 or q's batch, H: 1 or q's heads)."""
    nd = len(shape)
    lead, tail = tuple(shape[:nd - rank]), tuple(shape[nd - rank:])
    b = lead[0] if len(lead) >= 1 else 1
    h = lead[1] if len(lead) >= 2 else 1
    fits = rank <= nd <= rank + 2 and (b == 1 or b == q[0]) and (h == 1 or h == q[1])
    if fits and dims is not None:
        fits = tail == tuple(dims[:rank])
    if not fits:
        want = "[" + ", ".join(str(d) for d in dims[:rank]) + "]" if dims is not None else \
            ("[D]" if rank == 1 else "[D1, D2]")
        inner = want[1:-1]
        batch = "1" if q[0] == 1 else f"1 or {q[0]}"
        heads = "1" if q[1] == 1 else f"1 or {q[1]}"
        at = f"at n = {n} " if dims is not None else ""
        raise error(SHAPE, f"input '{name}' has shape {list(shape)}; {at}it must be {want}, [B, {inner}] or "
                           f"[B, H, {inner}] with B {batch} (the batch) and H {heads} (the query heads)")
    return (b, h, tail[0], tail[1] if rank == 2 else 1)


def _numpy_inputs(kernel: Kernel, given: Mapping[str, Any], q: Tuple[int, ...], k: Tuple[int, ...]) -> Optional[list]:
    """The inputs of a numpy call as the extension takes them: (name, array) pairs in declaration
    order, int32/int64 [B, H, D1, D2] for int inputs and float32 (its dimensions then 1s) for float
    inputs; None for a pattern that declares no input."""
    values = _match_inputs(kernel, given, k[2], q[1])
    if not values:
        return None
    n = k[2]
    dims = kernel._input_dims(n) if n >= 1 else None
    out = []
    for x, ((name, rank), value) in enumerate(zip(kernel._inputs, values)):
        if not isinstance(value, np.ndarray):
            value = np.from_dlpack(value) if hasattr(value, "__dlpack__") else np.asarray(value)
        if kernel._float[x]:
            if value.dtype != np.float32:
                raise error(DTYPE, f"input '{name}' is a {value.dtype} array; it is a float input (read by the "
                                   "pattern's score or sink): a float32 array")
            value = value.reshape(_float_shape(kernel, x, value.shape, n, q[1]))
            if any(s <= 0 for s, e in zip(value.strides, value.shape) if e > 1):
                value = np.ascontiguousarray(value)
            out.append((name, value))
            continue
        if value.dtype not in (np.int32, np.int64):
            raise error(DTYPE, f"input '{name}' is a {value.dtype} array; it is an int input (read by the "
                               "pattern's sets): int32 or int64")
        shape = _input_shape4(name, rank, value.shape, q, n, dims[x][:2] if dims else None)
        value = value.reshape(shape)
        if any(s <= 0 for s, e in zip(value.strides, value.shape) if e > 1):
            value = np.ascontiguousarray(value)  # a broadcast's 0 or a flip's negative stride
        out.append((name, value))
    return out


# -- patterns ------------------------------------------------------------------


def _pattern_text(path_or_source: PathOrSource) -> Tuple[str, str]:
    """(source, name for diagnostics): a path (str or os.PathLike) or the pattern's text."""
    if isinstance(path_or_source, os.PathLike):
        path = os.fspath(path_or_source)
    elif isinstance(path_or_source, str):
        if "\n" in path_or_source or "{" in path_or_source:
            return path_or_source, "<string>"
        path = path_or_source
    else:
        raise TypeError(f"expected a pattern file's path or a pattern's text, got {type(path_or_source).__name__}")
    with open(path, encoding="utf-8") as f:
        return f.read(), path


def _defines(params: Mapping[str, Any]) -> list:
    out = []
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"parameter '{name}' must be an integer, got {value!r}")
        out.append(f"{name}={int(value)}")
    return out


def _warn(text: str) -> None:
    if text:
        warnings.warn(text.rstrip("\n"), AttncWarning, stacklevel=3)


def compile(
    path_or_source: PathOrSource,
    backend: str = "fused",
    target: str = "cpu",
    *,
    pattern: Optional[str] = None,
    cache_dir: Optional[str] = None,
    no_cache: bool = False,
    **params: int,
) -> Kernel:
    """Compiles a pattern (a ``.attn`` file's path, or its text) into a :class:`Kernel`.

    ``params`` override the pattern's ``param`` values (``l=128, c=8``, like ``-D``).
    ``backend``: ``"fused"`` (default), ``"dense"`` (a masked baseline), ``"halide"`` and
    ``"sparsifier"`` where this attnc was built with them (the sparsifier has no backward).
    ``target``: ``"cpu"`` or ``"cuda"``. A kernel runs wherever its tensors are (numpy arrays
    and CPU tensors on the CPU, CUDA tensors on their GPU: attnc's GPU code is generic over the
    pattern, which enters as tables built per length); ``"cuda"`` also checks that this attnc
    has its GPU code. ``pattern`` picks one pattern of a file holding several. Kernels go through the JIT's disk
    cache (``cache_dir``, else ``$ATTNC_CACHE_DIR``, else ``~/.cache/attnc``; ``no_cache`` skips
    it), and the same request in one process returns the same Kernel. A pattern that does not
    check raises :class:`AttncError` with the diagnostics.
    """
    if target not in ("cpu", "cuda"):
        raise error(UNSUPPORTED, f"target '{target}' is not supported: attnc compiles kernels for 'cpu' and "
                                 "'cuda'")
    if backend not in _BACKENDS:
        raise error(INVALID_ARGUMENT, f"unknown backend '{backend}'; available: {', '.join(_BACKENDS)}")
    if target == "cuda" and _attnc.cuda_unavailable(0).startswith("this libattnc was built without"):
        raise error(UNSUPPORTED, _attnc.cuda_unavailable(0))
    source, name = _pattern_text(path_or_source)
    defines = _defines(params)
    key = (source, name, backend, pattern, tuple(sorted(defines)), cache_dir)
    if not no_cache:
        kernel = _COMPILED.get(key)
        if kernel is not None:
            return kernel
    handle = _attnc.compile(source, name, defines, pattern or "", backend, cache_dir or "", no_cache)
    kernel = Kernel(handle, name)
    if not no_cache:
        _COMPILED[key] = kernel
    return kernel


def load(path: Union[str, "os.PathLike[str]"]) -> Kernel:
    """Loads a kernel file written by ``attnc compile`` (no compiler involved)."""
    path = os.fspath(path)
    return Kernel(_attnc.load(path), path)


def analyze(
    path_or_source: PathOrSource,
    n: int,
    *,
    queries: Optional[int] = None,
    block: int = 64,
    block_cols: Optional[int] = None,
    connectivity: bool = True,
    pattern: Optional[str] = None,
    ranks: Optional[int] = None,
    head_dim: int = 128,
    kv_heads: int = 8,
    dtype: str = "bf16",
    **params: int,
) -> Dict[str, Any]:
    """What the pattern attends to at sequence length ``n``: ``attnc analyze --json`` as a dict.

    Per distinct head set: ``nnz``, ``row_nnz`` {min, max, mean}, ``empty_rows``, causal leaks,
    ``blocks`` (tiles of ``block`` x ``block_cols``: full, partial, empty, waste); with
    ``connectivity`` the Sparse Transformer's criterion 2. The schema is in docs/cli.md.
    ``queries`` (default ``n``) counts only the last ``queries`` rows, the positions of a call
    with fewer queries than keys (``attnc analyze --queries``); the dict then has ``queries``,
    ``first_row`` and each head's ``keys_read``. ``ranks`` (``attnc analyze --ranks``) adds
    ``context_parallel``: the positions shared out to that many ranks with equal pairs, and the
    K/V rows and bytes (rows of ``head_dim`` elements of ``dtype``, ``kv_heads`` heads) each receives
    forward and backward, beside ring attention's.
    """
    _check_range("n", n, 1, 1 << 24)
    if queries is not None:
        _check_range("queries", queries, 1, n)
    _check_range("block", block, 1, 1 << 31)
    if block_cols is not None:
        _check_range("block_cols", block_cols, 1, 1 << 31)
    if ranks is not None:
        _check_range("ranks", ranks, 1, 1 << 16)
    _check_range("head_dim", head_dim, 1, 4096)
    _check_range("kv_heads", kv_heads, 1, 1 << 16)
    if dtype not in ("f32", "bf16"):
        raise ValueError(f"dtype must be 'f32' or 'bf16', got {dtype!r}")
    source, name = _pattern_text(path_or_source)
    text, warned = _attnc.analyze(source, name, _defines(params), pattern or "", int(n), int(queries or 0),
                                  int(block), int(block_cols or 0), bool(connectivity), int(ranks or 0), int(head_dim),
                                  int(kv_heads), 4 if dtype == "f32" else 2)
    _warn(warned)
    return json.loads(text)


def show(
    path_or_source: PathOrSource,
    n: int,
    *,
    queries: Optional[int] = None,
    head: Optional[int] = None,
    grid: int = 0,
    max_side: Optional[int] = None,
    format: str = "svg",
    pattern: Optional[str] = None,
    canvas: Optional[Sequence[int]] = None,
    tile: Optional[Sequence[int]] = None,
    query: Optional[int] = None,
    **params: int,
) -> str:
    """The pattern drawn at sequence length ``n``, as ``attnc show`` draws it: an SVG document
    (``format="svg"``) or text (``"ascii"``). Rows are queries, columns keys, one colour per set
    (or per head when heads differ and ``head`` is None); ``grid`` draws lines every ``grid`` keys;
    above ``max_side`` cells per side (768 for SVG, 128 for text) the picture is downsampled.
    ``queries`` (default ``n``) draws only the last ``queries`` rows (``attnc show --queries``).

    With ``canvas=(H, W)`` (or ``(T, H, W)``) it draws instead the keys of one query, ``query``
    (default: the canvas's centre token), on the grid of an image (or a video): the first
    ``H * W`` positions in raster order, or tile by tile with ``tile=(TH, TW)`` (``(TT, TH, TW)``)
    as sliding-tile attention and tiled NATTEN lay them out (``attnc show --canvas --tile --query``).
    """
    if format not in ("svg", "ascii"):
        raise ValueError(f"format must be 'svg' or 'ascii', got {format!r}")
    _check_range("n", n, 1, 1 << 20)
    if queries is not None:
        _check_range("queries", queries, 1, n)
    _check_range("grid", grid, 0, 1 << 31)
    side = max_side if max_side is not None else (768 if format == "svg" else 128)
    _check_range("max_side", side, 8, 4096)
    source, name = _pattern_text(path_or_source)
    text, warned = _attnc.show(source, name, _defines(params), pattern or "", int(n), int(queries or n),
                               None if head is None else int(head), int(grid), int(side), format,
                               [int(x) for x in canvas or ()], [int(x) for x in tile or ()],
                               None if query is None else int(query))
    _warn(warned)
    return text


def _check_range(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def cache_stats() -> Dict[str, int]:
    """The JIT disk cache's hits, misses (compilations) and rebuilt entries in this process."""
    hits, misses, rebuilt = _attnc.cache_stats()
    return {"hits": hits, "misses": misses, "rebuilt": rebuilt}


def cpu_isa() -> str:
    """The instruction set of the CPU kernels this process runs: "avx512", "avx2" or "portable".

    The best this CPU has, unless the environment variable ATTNC_FUSED_ISA (read once, at the first
    call) forces one; an AttncError (ATTNC_ERROR_UNSUPPORTED) where it names one this CPU lacks.
    """
    isa = _attnc.cpu_isa()
    if isa is None:
        raise error(UNSUPPORTED, _attnc.last_error())
    return isa
