"""Context parallelism: one sequence's sparse attention across the ranks of a torch.distributed group.

    import attnc, attnc.distributed, torch.distributed as dist
    kernel = attnc.compile("patterns/local.attn", w=512)
    shards = attnc.distributed.shard(kernel, n, dist.get_world_size())
    mine = [shards.take(x, dist.get_rank()) for x in (q, k, v)]      # this rank's positions
    o = attnc.distributed.attention(kernel, *mine, shards)         # O for them; autograd works

Every rank holds some positions of the sequence (the same ones of Q, K and V),
as :func:`shard` chose them from the pattern's closed forms: each rank's
queries make the same number of the pattern's pairs. :func:`attention` sends
each rank exactly the K/V rows its queries read and it does not hold (one
``all_to_all_single`` with exact split sizes), and runs the kernel on its own
queries at their real positions (``attnc_run_forward_at``: the pattern is
evaluated at the global (i, j)). The backward fetches those K/V rows again
(nothing of length n is kept for autograd), computes dQ and the dK/dV partial
sums of every key its queries read, and sends each partial sum to the rank
that owns the key, where they are added up (a second ``all_to_all_single``).

CPU tensors on a gloo group (float32 or bfloat16), or CUDA tensors (also float16) on
an NCCL group, one GPU per rank, or on gloo (which stages the exchange through the
host); grouped-query heads. On a GPU each range runs ``attnc_run_forward_at_on``
on torch's current stream. Before
any data moves, the ranks exchange what each was given (one small
``all_gather``), so that shards made for another n, kernel or world size,
shapes that differ between ranks, or a group of the wrong size raise the same
:class:`attnc.AttncError` on every rank instead of hanging. A rank that never
calls stalls the others until the group's timeout (``init_process_group(...,
timeout=...)``), as in any collective.

Memory: a rank places the K and V rows it holds and receives in buffers of
the whole sequence's length (zeros elsewhere; the kernel reads only the
pattern's keys), so it holds 2 n rows of K/V beside its own share. The work and
the messages are what is divided, not (yet) the key buffers.
"""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from . import _api, _attnc
from ._errors import INVALID_ARGUMENT, SHAPE, UNSUPPORTED, AttncError, error
from .torch import _check_tensors, _on, _to_dlpack

__all__ = ["Shards", "shard", "attention"]

Range = Tuple[int, int]


class Shards:
    """Which positions of an n-long sequence each of ``world_size`` ranks holds, from :func:`shard`.

    - ``ranges[r]``: rank r's positions as sorted, disjoint ``(start, stop)`` ranges (of queries,
      keys and values alike); ``[]`` for a rank without positions (more ranks than rows to share).
    - ``pairs[r]``: the pattern's pairs of rank r's queries, per head (exact, from the closed forms).
    - ``recv_rows[r]``: the K/V rows rank r receives from the others in the forward pass (and again
      in the backward); ``return_rows[r]``: the dK/dV partial-sum rows it receives in the backward.
    - ``layout``: ``"runs"`` (a contiguous run per rank) or ``"zigzag"`` (runs r and 2R - 1 - r of
      2R), whichever balanced the pairs and moved fewer rows.
    """

    def __init__(self, n: int, world_size: int, ranges: Sequence[Sequence[Range]], pairs: Sequence[float],
                 recv_rows: Sequence[int], return_rows: Sequence[int], reads: Sequence[Sequence[Range]],
                 layout: str, kernel_key: str) -> None:
        self.n = n
        self.world_size = world_size
        self.ranges: List[List[Range]] = [[(int(a), int(b)) for a, b in r] for r in ranges]
        self.pairs: List[float] = list(pairs)
        self.recv_rows: List[int] = list(recv_rows)
        self.return_rows: List[int] = list(return_rows)
        self.layout = layout
        self._reads = [np.asarray(r, dtype=np.int64).reshape(-1, 2) for r in reads]
        self._kernel_key = kernel_key
        # Digests of what the ranks must agree on (compared across ranks by attention()).
        self._digest = _digest(f"{kernel_key}|{n}|{world_size}|{self.ranges}")
        self._routes: dict = {}

    def __repr__(self) -> str:
        mean = sum(self.pairs) / len(self.pairs)
        ratio = max(self.pairs) / mean if mean > 0 else 1.0
        return (f"<attnc.distributed.Shards n={self.n} world_size={self.world_size} layout={self.layout} "
                f"pairs max/mean={ratio:.4f} recv_rows max={max(self.recv_rows)}>")

    def positions(self, rank: int) -> int:
        """How many positions rank ``rank`` holds."""
        return sum(b - a for a, b in self.ranges[self._rank(rank)])

    def take(self, x: Tensor, rank: int, dim: int = 2) -> Tensor:
        """Rank ``rank``'s positions of ``x`` (the whole sequence along ``dim``), in its layout:
        ``torch.cat([x[:, :, a:b] for a, b in shards.ranges[rank]], dim=2)``."""
        if x.shape[dim] != self.n:
            raise error(SHAPE, f"the tensor has {x.shape[dim]} positions along dimension {dim}; these shards "
                               f"share out n = {self.n}")
        pieces = [x.narrow(dim, a, b - a) for a, b in self.ranges[self._rank(rank)]]
        return torch.cat(pieces, dim=dim) if pieces else x.narrow(dim, 0, 0).clone()

    def place(self, parts: Sequence[Tensor], dim: int = 2) -> Tensor:
        """The whole sequence from every rank's part (``parts[r]`` in rank r's layout): the inverse
        of :meth:`take`, e.g. on the outputs of ``all_gather``."""
        if len(parts) != self.world_size:
            raise error(SHAPE, f"{len(parts)} parts for {self.world_size} ranks")
        pieces = []
        for r, part in enumerate(parts):
            if part.shape[dim] != self.positions(r):
                raise error(SHAPE, f"part {r} has {part.shape[dim]} positions along dimension {dim}; rank {r} "
                                   f"holds {self.positions(r)}")
            offset = 0
            for a, b in self.ranges[r]:
                pieces.append((a, part.narrow(dim, offset, b - a)))
                offset += b - a
        pieces.sort(key=lambda p: p[0])
        return torch.cat([p for _, p in pieces], dim=dim)

    def _rank(self, rank: int) -> int:
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be an integer in [0, {self.world_size}), got {rank!r}")
        return rank

    def _route(self, me: int) -> "_Route":
        route = self._routes.get(me)
        if route is None:
            route = self._routes[me] = _Route(self, me)
        return route


class _Route:
    """What rank `me` sends and receives: index tensors of the two exchanges."""

    def __init__(self, shards: Shards, me: int) -> None:
        n, ranks = shards.n, shards.world_size
        owner = np.full(n, -1, dtype=np.int32)
        local = np.zeros(n, dtype=np.int64)
        #: (first position, first local row, rows) of each of my ranges: one kernel call each.
        self.pieces: List[Tuple[int, int, int]] = []
        for r, ranges in enumerate(shards.ranges):
            offset = 0
            for a, b in ranges:
                owner[a:b] = r
                local[a:b] = np.arange(offset, offset + b - a)
                if r == me:
                    self.pieces.append((a, offset, b - a))
                offset += b - a
        mine = owner == me
        self.own = torch.from_numpy(np.flatnonzero(mine))
        # Sent: to each rank d, my rows that d's queries read, ascending (local rows of my tensors).
        send, self.send_counts = [], []
        for d in range(ranks):
            rows = np.flatnonzero(_mask(shards._reads[d], n) & mine) if d != me else np.zeros(0, np.int64)
            send.append(local[rows])
            self.send_counts.append(len(rows))
        self.send_index = torch.from_numpy(np.concatenate(send))
        # Received: from each rank s, the keys my queries read that s holds, ascending (positions).
        read = np.flatnonzero(_mask(shards._reads[me], n) & ~mine)
        source = owner[read]
        order = np.argsort(source, kind="stable")
        self.recv_positions = torch.from_numpy(read[order])
        self.recv_counts = np.bincount(source, minlength=ranks).tolist()
        self._buffers: dict = {}
        self.device = torch.device("cpu")

    def to(self, device: torch.device) -> "_Route":
        """The index tensors and buffers on `device` (the tensors' of a call)."""
        if device != self.device:
            self.own, self.send_index, self.recv_positions = (
                x.to(device) for x in (self.own, self.send_index, self.recv_positions))
            self._buffers.clear()
            self.device = device
        return self

    def buffer(self, name: str, shape: Tuple[int, ...], dtype: torch.dtype, zero: bool = False) -> Tensor:
        """A buffer kept for the next call of the same shape: fresh memory of these sizes costs its
        page faults on every call (as much as a local pattern's share of the work, measured). The
        K and V buffers of the whole sequence (`zero`) are zeroed once, when made: every call
        writes the same positions (its own and those it receives), so the others stay zero."""
        key = (name, tuple(shape), dtype)
        out = self._buffers.get(key)
        if out is None:
            for old in [k for k in self._buffers if k[0] == name]:
                del self._buffers[old]
            out = self._buffers[key] = (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=self.device)
        return out


def _mask(intervals: np.ndarray, n: int) -> np.ndarray:
    """bool [n]: the positions inside the [start, stop) rows of `intervals`."""
    edges = np.zeros(n + 1, dtype=np.int32)
    np.add.at(edges, intervals[:, 0], 1)
    np.add.at(edges, intervals[:, 1], -1)
    return np.cumsum(edges[:n]) > 0


def _digest(text: str) -> int:
    """63 bits of a hash of `text` that every process computes alike (str's hash() is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def _kernel_key(kernel: "_api.Kernel") -> str:
    meta = kernel.metadata
    return f"{meta.get('pattern', '')}|{meta.get('params', '')}|{meta.get('source_hash', '')}"


def _refuse_data(kernel: "_api.Kernel") -> None:
    if kernel._modifiers:
        # (A float input is shared by every rank's rows: its gradient would need a sum across the ranks,
        # and the ranks' calls at an offset have not been checked with scores and sinks.)
        raise error(UNSUPPORTED, f"pattern '{kernel._pattern}' has a score modifier "
                                 f"({' and '.join(repr(m) for m in kernel.modifiers)}), which attnc.distributed does "
                                 "not support yet: run it on one device (kernel(q, k, v, ...))")
    if kernel._inputs:
        raise error(UNSUPPORTED, f"pattern '{kernel._pattern}' reads data (its inputs {_api._names(kernel._inputs)}), "
                                 "which is not supported by attnc.distributed yet: its shards are planned from the "
                                 "pattern's closed forms, before any data is known")


def shard(kernel: "_api.Kernel", n: int, world_size: int) -> Shards:
    """Shares the positions ``[0, n)`` of a sequence out to ``world_size`` ranks so that the pattern of
    ``kernel`` gives each the same number of pairs, and works out the K/V rows each must receive
    (``attnc analyze P.attn --n N --ranks R`` prints the same plan). Deterministic: every rank calls
    it with the same arguments and gets the same shards."""
    if not isinstance(kernel, _api.Kernel):
        raise TypeError(f"expected an attnc.Kernel, got {type(kernel).__name__}")
    _refuse_data(kernel)
    _api._check_range("n", n, 1, 1 << 24)
    _api._check_range("world_size", world_size, 1, 1 << 16)
    meta = kernel.metadata
    if "source" not in meta or "pattern" not in meta:
        raise error(INVALID_ARGUMENT, "the kernel carries no pattern source (a kernel file from an older attnc?); "
                                      "compile it again with attnc.compile")
    defines = [p for p in meta.get("params", "").split(",") if p]
    # (The pattern's warnings were given when the kernel was compiled.)
    ranges, pairs, recv, back, reads, layout, _ = _attnc.shard(meta["source"], meta["pattern"], defines,
                                                               meta["pattern"], int(n), int(world_size))
    return Shards(int(n), int(world_size), ranges, pairs, recv, back, reads, layout, _kernel_key(kernel))


# ---- the exchange -------------------------------------------------------------

_DTYPE_CODES = {torch.float32: 1, torch.bfloat16: 2, torch.float16: 3}


def _all_to_all(rows: Tensor, out: Tensor, send_counts: List[int], recv_counts: List[int], group: Any) -> Tensor:
    """all_to_all_single over the first dimension of contiguous tensors, carried as bytes (gloo moves
    any dtype then; nothing is reduced on the way)."""
    dist.all_to_all_single(out.view(torch.uint8), rows.view(torch.uint8), recv_counts, send_counts, group=group)
    return out


def _gather_rows(route: _Route, name: str, sources: Sequence[Tensor], index: Tensor, dtype: torch.dtype) -> Tensor:
    """[rows, batch, heads, len(sources) * d]: the rows `index` (dimension 2) of each source side by
    side, in `dtype`, in a kept buffer (what all_to_all sends)."""
    b, h, _, d = sources[0].shape
    rows = route.buffer(name, (len(index), b, h, len(sources) * d), dtype)
    picked = route.buffer(name + " picked", (b, h, len(index), d), sources[0].dtype)
    for i, x in enumerate(sources):
        torch.index_select(x, 2, index, out=picked)
        rows[..., i * d:(i + 1) * d].copy_(picked.permute(2, 0, 1, 3))
    return rows


def _fetch_keys(k: Tensor, v: Tensor, shards: Shards, route: _Route, group: Any) -> Tuple[Tensor, Tensor]:
    """K and V of the whole sequence's length: this rank's rows, those its queries read from the
    others, zeros elsewhere."""
    b, h, _, d = k.shape
    send = _gather_rows(route, "send", (k, v), route.send_index, k.dtype)
    got = route.buffer("received", (len(route.recv_positions), b, h, 2 * d), k.dtype)
    got = _all_to_all(send, got, route.send_counts, route.recv_counts, group).permute(1, 2, 0, 3)
    full = []
    for name, x, part in (("keys", k, got[..., :d]), ("values", v, got[..., d:])):
        buffer = route.buffer(name, (b, h, shards.n, d), x.dtype, zero=True)
        buffer.index_copy_(2, route.own, x)
        buffer.index_copy_(2, route.recv_positions, part)
        full.append(buffer)
    return full[0], full[1]


def _run_at(forward: bool, kernel: "_api.Kernel", first: int, tensors: List[Any], scale: float) -> None:
    """attnc_run_forward_at_on (or the backward's) on the tensors' device: the CPU or a CUDA GPU."""
    if tensors[0].is_cuda:
        call = _attnc.run_forward_at_cuda if forward else _attnc.run_backward_at_cuda
        call(kernel._handle, first, *tensors, scale, *_on(tensors[0]), _to_dlpack)
    else:
        call = _attnc.run_forward_at if forward else _attnc.run_backward_at
        call(kernel._handle, first, *tensors, scale, kernel.num_threads, _to_dlpack)


def _forward(q: Tensor, k: Tensor, v: Tensor, kernel: "_api.Kernel", shards: Shards, route: _Route, group: Any,
             scale: float) -> Tuple[Tensor, Tensor]:
    k_full, v_full = _fetch_keys(k, v, shards, route, group)
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for first, row, rows in route.pieces:
        piece = slice(row, row + rows)
        _run_at(True, kernel, first, [q[:, :, piece], k_full, v_full, o[:, :, piece],
                                      lse[:, :, piece] if kernel._has_lse else None], scale)
    return o, lse


def _backward(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, kernel: "_api.Kernel",
              shards: Shards, route: _Route, group: Any, scale: float) -> Tuple[Tensor, Tensor, Tensor]:
    k_full, v_full = _fetch_keys(k, v, shards, route, group)
    d_o = d_o.to(o.dtype).contiguous()
    d_q = torch.empty_like(q, memory_format=torch.contiguous_format)
    # dK and dV of every key this rank's queries read, summed over its ranges in float32: the first
    # range's call writes the sums, a later one a scratch pair that is added (the runtime overwrites
    # every row of d_k and d_v).
    shape = (k.shape[0], k.shape[1], shards.n, k.shape[3])
    sums = [route.buffer(name, shape, torch.float32) for name in ("d_keys", "d_values")]
    for i, (first, row, rows) in enumerate(route.pieces):
        out = sums if i == 0 else [route.buffer(name, shape, torch.float32) for name in ("d_k", "d_v")]
        piece = slice(row, row + rows)
        _run_at(False, kernel, first, [q[:, :, piece], k_full, v_full, o[:, :, piece], d_o[:, :, piece],
                                       lse[:, :, piece], d_q[:, :, piece], out[0], out[1]], scale)
        if i:
            sums[0] += out[0]
            sums[1] += out[1]
    if not route.pieces:
        for x in sums:
            x.zero_()
    # The partial sums of the keys received go back to their owners (in the inputs' dtype, as the
    # K/V rows came); each owner adds them to its own.
    d = k.shape[3]
    back = _gather_rows(route, "return", sums, route.recv_positions, k.dtype)
    got = route.buffer("returned", (len(route.send_index),) + tuple(back.shape[1:]), k.dtype)
    got = _all_to_all(back, got, route.recv_counts, route.send_counts, group).permute(1, 2, 0, 3).float()
    grads = []
    for s, part in ((sums[0], got[..., :d]), (sums[1], got[..., d:])):
        mine = s.index_select(2, route.own)
        mine.index_add_(2, route.send_index, part)
        grads.append(mine.to(k.dtype))
    return d_q, grads[0], grads[1]


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, kernel, shards, route, group, scale):
        o, lse = _forward(q, k, v, kernel, shards, route, group, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.attnc = (kernel, shards, route, group, scale)
        return o

    @staticmethod
    def backward(ctx, d_o):
        q, k, v, o, lse = ctx.saved_tensors
        kernel, shards, route, group, scale = ctx.attnc
        if not kernel._has_lse:
            raise error(UNSUPPORTED, f"the {kernel.backend} backend has no backward pass")
        d_q, d_k, d_v = _backward(d_o, q, k, v, o, lse, kernel, shards, route, group, scale)
        return d_q, d_k, d_v, None, None, None, None, None


# ---- the checks every rank agrees on -------------------------------------------

# The fields each rank contributes to the all_gather before any data moves.
_FIELDS = ("error", "world_size", "n", "shards", "kernel", "batch", "q_heads", "kv_heads", "d", "dtype", "q_rows",
           "k_rows", "v_rows")


def _local_problem(kernel: Any, q: Any, k: Any, v: Any, shards: Any, rank: int) -> Optional[str]:
    """What is wrong with this rank's arguments on their own, or None."""
    try:
        if not isinstance(kernel, _api.Kernel):
            raise TypeError(f"expected an attnc.Kernel, got {type(kernel).__name__}")
        if not isinstance(shards, Shards):
            raise TypeError(f"'shards' must come from attnc.distributed.shard, got {type(shards).__name__}")
        _check_tensors(q, k, v)
        _api._check_shapes(q.shape, k.shape, v.shape)
        if shards._kernel_key != _kernel_key(kernel):
            raise error(INVALID_ARGUMENT, "these shards were made for another kernel (pattern or parameters "
                                          "differ); make them with attnc.distributed.shard(kernel, n, world_size)")
        return None
    except (AttncError, TypeError, ValueError) as e:
        return str(e)


def _summary(kernel: Any, q: Any, k: Any, v: Any, shards: Any, problem: Optional[str]) -> List[int]:
    if problem is not None:
        return [1] + [-1] * (len(_FIELDS) - 1)
    return [0, shards.world_size, shards.n, shards._digest, _digest(shards._kernel_key),
            q.shape[0], q.shape[1], k.shape[1], q.shape[3], _DTYPE_CODES[q.dtype], q.shape[2], k.shape[2],
            v.shape[2]]


def _agree(table: List[List[int]], problem: Optional[str], me: int, shards: Shards) -> None:
    """Raises the same error on every rank (but a rank's own problem, which it says itself) from the
    gathered summaries."""
    if problem is not None:
        raise error(INVALID_ARGUMENT, f"rank {me}: {problem}")
    bad = [r for r, row in enumerate(table) if row[0]]
    if bad:
        who = f"ranks {', '.join(map(str, bad))} rejected their" if len(bad) > 1 else f"rank {bad[0]} rejected its"
        raise error(INVALID_ARGUMENT, f"{who} arguments (the error raised there says why); no rank ran")
    size = len(table)
    field = {name: i for i, name in enumerate(_FIELDS)}
    if shards.world_size != size:
        raise error(INVALID_ARGUMENT, f"the group has {size} rank{'s' if size != 1 else ''} but the shards were "
                                      f"made for world_size = {shards.world_size}")
    for name in ("n", "world_size", "kernel", "shards"):
        values = [row[field[name]] for row in table]
        if len(set(values)) > 1:
            what = {"n": f"n = {values}", "world_size": f"world sizes {values}", "kernel": "kernels",
                    "shards": "shards"}[name]
            raise error(INVALID_ARGUMENT, f"the ranks passed different {what}: every rank must call "
                                          "attention() with the same kernel and the shards made by shard(kernel, "
                                          "n, world_size) with the same arguments")
    for name, label in (("batch", "batch"), ("q_heads", "query heads"), ("kv_heads", "key/value heads"),
                        ("d", "d"), ("dtype", "dtype")):
        values = [row[field[name]] for row in table]
        if len(set(values)) > 1:
            r = next(i for i, x in enumerate(values) if x != values[0])
            first, other = values[0], values[r]
            if name == "dtype":
                names = {code: str(dtype).replace("torch.", "") for dtype, code in _DTYPE_CODES.items()}
                first, other = names[first], names[other]
            raise error(SHAPE, f"the ranks' tensors disagree in {label}: rank 0 has {first}, rank {r} {other}")
    for r, row in enumerate(table):
        want = shards.positions(r)
        for name, tensor in (("q_rows", "q"), ("k_rows", "k"), ("v_rows", "v")):
            if row[field[name]] != want:
                raise error(SHAPE, f"rank {r}'s '{tensor}' has {row[field[name]]} positions but the shards give "
                                   f"it {want} (of n = {shards.n}); pass shards.take(x, rank) of the whole "
                                   "sequence")


def attention(kernel: "_api.Kernel", q: Tensor, k: Tensor, v: Tensor, shards: Shards, group: Any = None,
              scale: Optional[float] = None) -> Tensor:
    """This rank's O: attention of its queries over the whole sequence's keys under ``kernel``'s pattern.

    ``q`` [batch, Hq, n_r, d] and ``k``, ``v`` [batch, Hkv, n_r, d] hold this rank's positions,
    ``shards.take(x, rank)`` of the whole sequence (rank = its rank in ``group``, default the world);
    returns O [batch, Hq, n_r, d] in the same layout. Collective: every rank of the group calls it
    with its part. Autograd: dQ is this rank's; dK and dV are the sums, over every rank's queries,
    for this rank's keys. ``scale`` defaults to 1/sqrt(d).
    """
    if isinstance(kernel, _api.Kernel):
        _refuse_data(kernel)  # (on every rank alike, before any collective)
    group_size = dist.get_world_size(group)
    me = dist.get_rank(group)
    problem = _local_problem(kernel, q, k, v, shards, me)
    # (NCCL gathers GPU memory only; gloo either.)
    where = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(group) == "nccl" else "cpu"
    mine = torch.tensor(_summary(kernel, q, k, v, shards, problem), dtype=torch.int64, device=where)
    table = [torch.empty_like(mine) for _ in range(group_size)]
    dist.all_gather(table, mine, group=group)
    _agree([t.tolist() for t in table], problem, me, shards)
    route = shards._route(me).to(q.device)
    q, k, v = (x.contiguous() for x in (q, k, v))
    return _Attention.apply(q, k, v, kernel, shards, route, group, _api._scale(scale))
