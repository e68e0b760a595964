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
from typing import Any, Dict, Mapping, Optional, Tuple, Union

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


# attnc.torch.attention once attnc.torch is imported (an import statement per call costs a
# lookup through the import machinery).
_torch_attention = None


def _import_torch_attention():
    global _torch_attention
    from .torch import attention

    _torch_attention = attention
    return attention


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

    def __call__(self, q: Any, k: Any, v: Any, scale: Optional[float] = None, *, out: Any = None) -> Any:
        """Attention of q [batch, Hq, nq, d] over k, v [batch, Hkv, nk, d] (see the class);
        returns O like q (a tensor or a numpy array).

        ``scale`` defaults to ``1/sqrt(d)``. ``out``: an array of q's shape and dtype that O is
        written into (and returned), as in torch's ``out=``; nothing is allocated then.
        """
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(q, torch.Tensor):
            attention = _torch_attention or _import_torch_attention()
            return attention(q, k, v, self, scale) if out is None else attention(q, k, v, self, scale, out=out)
        if out is None:
            o, _ = self.forward(q, k, v, scale=scale, lse=False)
            return o
        q, k, v = (_numpy_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
        _check_shapes(q.shape, k.shape, v.shape)
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != q.shape:
            raise error(SHAPE, f"'out' must be a float32 numpy array of q's shape {list(q.shape)}, got "
                               f"{_describe(out)}")
        if not out.flags.writeable:
            raise error(INVALID_ARGUMENT, "'out' is a read-only array")
        self._forward(q, k, v, out, None, _scale(scale))
        return out

    # -- numpy --------------------------------------------------------------

    def forward(
        self, q: Any, k: Any, v: Any, scale: Optional[float] = None, lse: bool = True
    ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """O (q's shape) and each row's log-sum-exp ([batch, Hq, nq], float32; -inf for a row with
        no keys; None with ``lse=False`` or a sparsifier kernel, which has none) for numpy float32
        arrays (or any DLPack array, viewed through numpy)."""
        q, k, v = (_numpy_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
        _check_shapes(q.shape, k.shape, v.shape)
        o = np.empty(q.shape, dtype=np.float32)
        l = np.empty(q.shape[:3], dtype=np.float32) if lse and self._has_lse else None
        self._forward(q, k, v, o, l, _scale(scale))
        return o, l

    def backward(
        self, q: Any, k: Any, v: Any, o: Any, lse: Any, d_o: Any, scale: Optional[float] = None
    ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """dQ, dK, dV of ``sum(O * d_o)`` for numpy float32 arrays, from forward()'s O and lse;
        dK and dV have k's shape (with grouped heads, summed over each group's query heads)."""
        q, k, v, o, d_o = (
            _numpy_input(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (d_o, "d_o"))
        )
        _check_shapes(q.shape, k.shape, v.shape)
        lse = np.asarray(lse, dtype=np.float32)
        grads = (np.empty(q.shape, dtype=np.float32), np.empty(k.shape, dtype=np.float32),
                 np.empty(k.shape, dtype=np.float32))
        self._backward(q, k, v, o, d_o, lse, *grads, _scale(scale))
        return grads

    # -- the calls into the extension (attnc.torch has its own, on DLPack capsules)

    def _forward(self, q: Any, k: Any, v: Any, o: Any, lse: Any, scale: float) -> None:
        for attempt in (0, 1):
            try:
                _attnc.run_forward(self._handle, q, k, v, o, lse, scale, self.num_threads)
                return
            except (AttncError, TypeError, BufferError) as e:
                if attempt or not _needs_copy(e):
                    raise
                q, k, v = (_contiguous(x) for x in (q, k, v))

    def _backward(self, q: Any, k: Any, v: Any, o: Any, d_o: Any, lse: Any, d_q: Any, d_k: Any, d_v: Any,
                  scale: float) -> None:
        for attempt in (0, 1):
            try:
                _attnc.run_backward(self._handle, q, k, v, o, d_o, lse, d_q, d_k, d_v, scale, self.num_threads)
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
    **params: int,
) -> str:
    """The pattern drawn at sequence length ``n``, as ``attnc show`` draws it: an SVG document
    (``format="svg"``) or text (``"ascii"``). Rows are queries, columns keys, one colour per set
    (or per head when heads differ and ``head`` is None); ``grid`` draws lines every ``grid`` keys;
    above ``max_side`` cells per side (768 for SVG, 128 for text) the picture is downsampled.
    ``queries`` (default ``n``) draws only the last ``queries`` rows (``attnc show --queries``).
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
                               None if head is None else int(head), int(grid), int(side), format)
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
