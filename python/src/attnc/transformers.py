"""attnc behind Hugging Face transformers' attention interface.

    import attnc.transformers
    attnc.transformers.register()                        # the name "attnc"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="attnc")
    model.set_attn_implementation("attnc")               # or switch a model that exists

    attnc.transformers.register("attnc_local", pattern="pattern p { param w = 64  attend { j : i - j < w } }")
    model.set_attn_implementation("attnc_local")         # a sparse model: the pattern instead of its mask

:func:`register` registers, under one name, an attention function with transformers' signature
(``AttentionInterface``) and a mask function (``AttentionMaskInterface``) that hands that attention
function the batch's padding and what the model's mask is (causal or sliding-window, and the keys'
and queries' offsets) instead of a dense mask.

The model's own attention (``register(name)``): causal; sliding windows (what the layer's mask is:
``sliding_window`` / ``layer_types``); Gemma 2's soft-capping (``softcap``, else
``config.attn_logit_softcapping``) as ``score cap * tanh(s / cap)``; gpt-oss's sinks (``s_aux``,
else ``module.sinks``: a learned ``[heads]`` tensor that gets its gradient) as ``sink sinks[h]``;
grouped-query heads (k and v with fewer heads, read in place); ``scaling``; generation with a
key/value cache (the queries are the last ``nq`` of the ``nk`` keys, as attnc aligns them). Each layer
kind is the source of a small pattern compiled once per process (:func:`kernel_for`).

A pattern (``register(name, pattern=PATH_OR_SOURCE, **params)``): the pattern instead of the model's
mask, made causal (``causal`` is added to a pattern that lacks it); the model's soft-cap and sinks
are added to it (a pattern with its own ``score`` or ``sink`` is refused for such a model).

Padding: a batch's padding mask (left padding, and right padding without a cache) runs as a
variable-length batch (``attnc.torch.attention_varlen``: each sequence its own run of keys, no
dense mask), or, for a kernel with float inputs (sinks), one call per sequence. A padded query row's
output is zero. What it cannot run it refuses with an :class:`attnc.AttncError`
(``ATTNC_ERROR_UNSUPPORTED``) that names the layer and the reason: attention dropout (training with
``attention_dropout > 0``), a 4-D mask that is not the layer's causal or sliding-window mask with
padding (a bias, per-head masks, anything else), mask functions transformers combined with others
(packed sequences, bidirectional blocks, chunked attention), a padding mask that is not one run of
tokens per row, right padding with a cache, and, for a pattern, a cache that dropped its first keys
(a sliding-window cache).
"""

from __future__ import annotations

import re
import threading
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.masking_utils import (AttentionMaskInterface, bidirectional_mask_function, causal_mask_function,
                                        prepare_padding_mask)

from . import _api
from . import torch as _attnc_torch
from ._errors import INVALID_ARGUMENT, UNSUPPORTED, AttncError, error

__all__ = ["register", "kernel_for", "model_source", "PatternCache"]

# The float input that carries the model's sinks in the patterns built here.
_SINK_INPUT = "hf_sinks"


# ---- what the model's mask is --------------------------------------------------------------


class _MaskInfo:
    """What transformers asked the mask function for, attached to the padding mask it returns:
    ``window`` (None: causal), ``reason`` (why attnc cannot run this mask, or None), the offsets of
    the queries and keys and ``end``, the number of keys that exist (fewer than the key tensor's
    length in a static cache, whose last slots are empty)."""

    __slots__ = ("window", "reason", "q_offset", "kv_offset", "end", "padded")

    def __init__(self, window: Optional[int], reason: Optional[str], q_offset: int, kv_offset: int, end: int,
                 padded: bool = False) -> None:
        self.window, self.reason = window, reason
        self.q_offset, self.kv_offset, self.end = q_offset, kv_offset, end
        self.padded = padded  # whether any key is padding (once per forward, not per layer)


def _free(fn: Any, name: str) -> Any:
    """The value of closure variable `name` of `fn`, or None."""
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells or name not in code.co_freevars:
        return None
    return cells[code.co_freevars.index(name)].cell_contents


def _read_mask_function(fn: Any) -> Tuple[Optional[int], Optional[str]]:
    """(window, None) for transformers' causal mask function (window None) and its sliding-window
    one (``and_masks(sliding_window_overlay(W), causal_mask_function)``); (None, reason) for any
    other."""
    if fn is causal_mask_function:
        return None, None
    if fn is bidirectional_mask_function:
        return None, "its mask is bidirectional; attnc.transformers runs causal language models"
    qualname = getattr(fn, "__qualname__", type(fn).__name__)
    if qualname == "and_masks.<locals>.and_mask":
        parts = _free(fn, "mask_functions")
        if (isinstance(parts, tuple) and len(parts) == 2 and parts[1] is causal_mask_function
                and getattr(parts[0], "__qualname__", "") == "sliding_window_overlay.<locals>.inner_mask"):
            window = _free(parts[0], "sliding_window")
            if isinstance(window, int) and not isinstance(window, bool):
                return window, None
        names = ", ".join(getattr(p, "__qualname__", "?") for p in parts) if isinstance(parts, tuple) else "?"
        return None, (f"its mask combines mask functions ({names}) into something other than a causal or "
                      "sliding-window mask (chunked attention, packed sequences, bidirectional blocks)")
    return None, (f"its mask function is {qualname} (packed sequences, bidirectional blocks or a custom mask), "
                  "not a causal or sliding-window one")


def _mask_interface(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: Any = 0,
                    mask_function: Any = causal_mask_function, attention_mask: Optional[Tensor] = None,
                    device: Any = None, **kwargs: Any) -> Tensor:
    """transformers' mask function for attnc's names: no dense mask, but the padding as a bool [batch,
    kv_length] tensor (True: a token) carrying a _MaskInfo (``._attnc_mask``) that says what the
    mask is."""
    window, reason = _read_mask_function(mask_function)
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    if attention_mask is not None:
        if attention_mask.dim() != 2:
            reason = reason or f"its attention mask has shape {list(attention_mask.shape)}, not [batch, keys]"
            padding = torch.ones((batch_size, kv_length), dtype=torch.bool, device=attention_mask.device)
        else:
            # (padded with False on the right to kv_offset + kv_length, as a static cache's mask is)
            padding = prepare_padding_mask(attention_mask.to(torch.bool), kv_length, kv_offset)
            padding = padding[:, kv_offset:kv_offset + kv_length]
    else:  # (no padding: one True seen as [batch, kv_length], not kv_length bytes set at every step)
        padding = torch.ones((1, 1), dtype=torch.bool, device=device).expand(batch_size, kv_length)
    end = q_offset + q_length - kv_offset  # the keys that exist: the queries' last position + 1
    padded = attention_mask is not None and not bool(padding[:, :max(end, 0)].all())
    padding._attnc_mask = _MaskInfo(window, reason, q_offset, kv_offset, end, padded)
    return padding


# ---- patterns and kernels -----------------------------------------------------------------


def _float_literal(value: float, what: str) -> str:
    value = float(value)
    if not (value > 0 and value < float("inf")):
        raise error(INVALID_ARGUMENT, f"{what} must be a positive finite number, got {value}")
    return repr(value)


def _modifier_statements(cap: Optional[float], sink: bool) -> str:
    """The statements of the model's soft-cap and sinks: ``score C * tanh(s / C)`` (Gemma 2) and a
    float input ``hf_sinks : float[heads]`` with ``sink hf_sinks[h]`` (gpt-oss)."""
    out = []
    if cap is not None:
        c = _float_literal(cap, "the soft-cap")
        out.append(f"score {c} * tanh(s / {c})")
    if sink:
        out.append(f"input {_SINK_INPUT} : float[heads]  sink {_SINK_INPUT}[h]")
    return "  ".join(out)


def model_source(window: Optional[int], cap: Optional[float] = None, sink: bool = False) -> str:
    """The pattern of a layer of the model's own attention: causal, or a causal window of `window`
    keys (``i - j < window``, transformers' sliding window), with the soft-cap and the sinks."""
    if window is None:
        body = "causal  attend { j : j <= i }"
        name = "hf_causal"
    else:
        body = 'param w = 1  require w >= 1 : "the window must hold a key"  causal  attend { j : i - j < w }'
        name = "hf_sliding"
    extra = _modifier_statements(cap, sink)
    return f"pattern {name} {{ {body}{'  ' + extra if extra else ''} }}"


_HEAD = re.compile(r"\bpattern\s+[A-Za-z_][A-Za-z_0-9]*\s*\{")


def _blank_comments(source: str) -> str:
    """The source with each comment (# to the end of the line) replaced by spaces: the same offsets."""
    return re.sub(r"#[^\n]*", lambda m: " " * len(m.group(0)), source)


def _insert_statements(source: str, statements: str, unless: Optional[str] = None) -> str:
    """`statements` inserted at the start of every pattern of `source` (on the line of its ``{``, so
    diagnostics keep their line numbers); with `unless` (a word), not into a pattern whose body
    already holds that word."""
    masked = _blank_comments(source)
    heads = list(_HEAD.finditer(masked))
    out, last = [], 0
    for x, m in enumerate(heads):
        body = masked[m.end():heads[x + 1].start() if x + 1 < len(heads) else len(masked)]
        out.append(source[last:m.end()])
        last = m.end()
        if unless is None or not re.search(rf"\b{unless}\b", body):
            out.append(f" {statements} ")
    out.append(source[last:])
    return "".join(out)


_LOCK = threading.Lock()
_MODEL_KERNELS: Dict[Tuple[Any, ...], _api.Kernel] = {}
# What register() registered under each name: its pattern, or None for the model's own attention.
_REGISTERED: Dict[str, Optional["_Pattern"]] = {}


def kernel_for(window: Optional[int] = None, cap: Optional[float] = None, sink: bool = False,
               backend: str = "fused") -> _api.Kernel:
    """The kernel of a layer of the model's own attention (:func:`model_source`), compiled once per
    process for each (window, cap, sink, backend)."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise error(INVALID_ARGUMENT, f"a sliding window must be a positive integer, got {window!r}")
    key = (window, None if cap is None else float(cap), bool(sink), backend)
    kernel = _MODEL_KERNELS.get(key)
    if kernel is None:
        source = model_source(window, cap, sink)
        params = {} if window is None else {"w": window}
        kernel = _api.compile(source, backend, **params)
        with _LOCK:
            kernel = _MODEL_KERNELS.setdefault(key, kernel)
    return kernel


class _Pattern:
    """A pattern that replaces the model's mask: its source made causal, compiled with `params`, and
    its variants with the model's soft-cap and sinks added."""

    def __init__(self, path_or_source: Any, backend: str, pattern_name: Optional[str], params: Dict[str, int]):
        source, self.label = _api._pattern_text(path_or_source)
        self.source = _insert_statements(source, "causal", unless="causal")
        self.backend, self.pattern_name, self.params = backend, pattern_name, dict(params)
        self.base = self._compile(self.source)
        if self.base._inputs:
            raise error(UNSUPPORTED, f"pattern '{self.base._pattern}' ({self.label}) reads the inputs "
                                     f"{_api._names(self.base._inputs)}, which a transformers model has no values "
                                     "for: attnc.transformers runs patterns of positions only")
        self._variants: Dict[Tuple[Any, ...], _api.Kernel] = {(None, False): self.base}
        self._last: Optional[np.ndarray] = None

    def last_readers(self, n: int) -> np.ndarray:
        """The base kernel's last_readers at a horizon of at least n (computed again, doubled, when
        n passes the last one): the same for every variant, which only add score modifiers."""
        with _LOCK:
            if self._last is None or len(self._last) < n:
                horizon = max(n, 4096, 2 * len(self._last) if self._last is not None else 0)
                self._last = self.base.last_readers(horizon)
            return self._last

    def _compile(self, source: str) -> _api.Kernel:
        return _api.compile(source, self.backend, pattern=self.pattern_name, **self.params)

    def kernel(self, cap: Optional[float], sink: bool, where: str) -> _api.Kernel:
        key = (None if cap is None else float(cap), bool(sink))
        kernel = self._variants.get(key)
        if kernel is None:
            mods = self.base.modifiers
            for needed, word, what in ((cap is not None, "score", "soft-caps its logits"),
                                       (sink, "sink", "has attention sinks")):
                if needed and word in mods:
                    raise error(UNSUPPORTED, f"{where}: the model {what}, and pattern '{self.base._pattern}' has a "
                                             f"'{word}' of its own; attnc.transformers adds the model's only to a "
                                             f"pattern without one")
            kernel = self._compile(_insert_statements(self.source, _modifier_statements(cap, sink)))
            with _LOCK:
                kernel = self._variants.setdefault(key, kernel)
        return kernel


# ---- the attention function ----------------------------------------------------------------


def _where(module: Any) -> str:
    layer = getattr(module, "layer_idx", None)
    name = type(module).__name__
    return f"attnc.transformers: layer {layer} ({name})" if layer is not None else f"attnc.transformers: {name}"


def _refuse(where: str, reason: str) -> AttncError:
    return error(UNSUPPORTED, f"{where}: {reason}")


def _expected(nq: int, nk: int, window: Optional[int], device: Any) -> Tensor:
    """[nq, nk] bool: the causal (window) mask of queries at the last nq of nk positions."""
    pos = torch.arange(nk - nq, nk, device=device)[:, None]
    j = torch.arange(nk, device=device)[None, :]
    allowed = j <= pos
    if window is not None:
        allowed &= pos - j < window
    return allowed


def _padding_of_4d(mask: Tensor, nq: int, nk: int, window: Optional[int], where: str) -> Tensor:
    """The keys of each row ([batch, nk] bool) of a 4-D mask that is the layer's causal (window)
    mask with padding; anything else is refused."""
    if mask.dim() != 4 or mask.shape[-2] != nq or mask.shape[-1] < nk:
        raise _refuse(where, f"its attention mask has shape {list(mask.shape)}; attnc takes a causal mask of "
                             f"[batch, 1, {nq}, {nk}] with padding")
    mask = mask[..., :nk]
    if mask.dtype == torch.bool:
        allowed = mask
    else:
        allowed = mask == 0
        blocked = torch.isneginf(mask) | (mask <= torch.finfo(mask.dtype).min / 2)
        if not bool((allowed | blocked).all()):
            raise _refuse(where, "its attention mask is a float mask with values other than 0 and -inf (a bias); "
                                 "attnc runs causal and sliding-window masks with padding, not arbitrary masks")
    if allowed.shape[1] != 1:
        if not bool((allowed == allowed[:, :1]).all()):
            raise _refuse(where, "its attention mask differs between heads; attnc runs one causal mask with padding")
        allowed = allowed[:, :1]
    allowed = allowed[:, 0]  # [batch or 1, nq, nk]
    keys = allowed.any(dim=1)  # the keys some query sees: the tokens
    want = _expected(nq, nk, window, mask.device)[None] & keys[:, None, :]
    rows = keys[:, nk - nq:]  # a padded query row may have any mask
    if not bool(((allowed == want) | ~rows[:, :, None]).all()):
        shape = "causal" if window is None else f"sliding-window ({window} keys)"
        raise _refuse(where, f"its 4-D attention mask is not the layer's {shape} mask with padding; attnc cannot "
                             "run an arbitrary mask (register(name, pattern=...) runs a pattern instead)")
    return keys


def _runs(padding: Tensor, nq: int, nk: int, where: str) -> Tuple[List[int], List[int], List[int], List[int]]:
    """Each row's run of keys [start, end) and of queries [qstart, qend) (the queries are the last
    nq of the nk positions); refused unless every row's tokens are one run, and, with a cache
    (nq < nk), the run ends at the last key."""
    padding = padding.to(device="cpu", dtype=torch.bool)
    counts = padding.sum(dim=1)
    first = torch.where(counts > 0, padding.int().argmax(dim=1), torch.zeros_like(counts))
    end = first + counts
    idx = torch.arange(nk)[None, :]
    if not torch.equal((idx >= first[:, None]) & (idx < end[:, None]), padding):
        row = int(((((idx >= first[:, None]) & (idx < end[:, None])) != padding).any(dim=1)).nonzero()[0])
        raise _refuse(where, f"the attention mask of batch row {row} is not one run of tokens (padding inside the "
                             "sequence, or right padding followed by generated tokens); attnc takes left padding, and "
                             "right padding without a cache")
    if nq < nk:
        bad = ((end != nk) & (counts > 0)).nonzero()
        if len(bad):
            raise _refuse(where, f"batch row {int(bad[0])} ends with padding while its queries are the last {nq} of "
                                 f"{nk} keys (right padding with a cache); pad on the left to generate")
    shift = nk - nq
    qstart, qend = (first - shift).clamp(min=0), (end - shift).clamp(min=0)
    return first.tolist(), end.tolist(), qstart.tolist(), qend.tolist()


def _call(kernel: _api.Kernel, q: Tensor, k: Tensor, v: Tensor, scale: Optional[float], inputs: Dict[str, Tensor],
          where: str) -> Tensor:
    try:
        return kernel(q, k, v, scale, **inputs)
    except AttncError as e:
        raise AttncError(f"{where}: {e}", e.status, e.status_name) from e


def _padded(kernel: _api.Kernel, query: Tensor, key: Tensor, value: Tensor, padding: Tensor, scale: Optional[float],
            inputs: Dict[str, Tensor], where: str) -> Tensor:
    """Attention of a padded batch, [batch, nq, Hq, d]: a varlen call (no float inputs) or one call
    per sequence; padded query rows are zero."""
    b, hq, nq, d = query.shape
    nk = key.shape[2]
    start, end, qstart, qend = _runs(padding, nq, nk, where)
    if not inputs:
        rows = torch.arange(nq)[None, :]
        qs, qe = torch.tensor(qstart)[:, None], torch.tensor(qend)[:, None]
        qmask = ((rows >= qs) & (rows < qe)).to(query.device)
        kmask = padding.to(device=key.device, dtype=torch.bool)
        q, k, v = (x.transpose(1, 2) for x in (query, key, value))  # [batch, n, heads, d]
        cu_q = torch.tensor([0] + [e - s for s, e in zip(qstart, qend)], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        cu_k = torch.tensor([0] + [e - s for s, e in zip(start, end)], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        try:
            o = _attnc_torch.attention_varlen(q[qmask], k[kmask], v[kmask], cu_q, cu_k, kernel=kernel, scale=scale)
        except AttncError as e:
            raise AttncError(f"{where}: {e}", e.status, e.status_name) from e
        out = o.new_zeros((b, nq, hq, d))
        out[qmask] = o
        return out
    outs = []
    for x in range(b):
        if qend[x] == qstart[x]:
            outs.append(query.new_zeros((1, hq, nq, d)))
            continue
        o = _call(kernel, query[x:x + 1, :, qstart[x]:qend[x]], key[x:x + 1, :, start[x]:end[x]],
                  value[x:x + 1, :, start[x]:end[x]], scale, inputs, where)
        outs.append(F.pad(o, (0, 0, qstart[x], nq - qend[x])))
    return torch.cat(outs).transpose(1, 2)


def _attention(pattern: Optional[_Pattern], backend: str, module: Any, query: Tensor, key: Tensor, value: Tensor,
               attention_mask: Any, scaling: Optional[float], dropout: float, sliding_window: Optional[int],
               softcap: Optional[float], s_aux: Optional[Tensor]) -> Tuple[Tensor, None]:
    where = _where(module)
    if dropout:
        raise _refuse(where, f"attention dropout {dropout} (the model is training with attention_dropout > 0): attnc "
                             "has no dropout; set config.attention_dropout = 0.0")
    info = getattr(attention_mask, "_attnc_mask", None) if isinstance(attention_mask, Tensor) else None
    if info is not None and info.reason:
        raise _refuse(where, info.reason)
    # The layer's window: what its mask is (transformers built it for this layer's type), else what
    # the layer says.
    if info is not None:
        window = info.window
    else:
        window = sliding_window if sliding_window is not None else getattr(module, "sliding_window", None)
    cap = softcap if softcap is not None else getattr(getattr(module, "config", None), "attn_logit_softcapping", None)
    sinks = s_aux if s_aux is not None else getattr(module, "sinks", None)
    if sinks is not None and not isinstance(sinks, Tensor):
        raise _refuse(where, f"its sinks are a {type(sinks).__name__}, not a tensor of one logit per head")
    scale = scaling if scaling is not None else getattr(module, "scaling", None)
    if pattern is None:
        kernel = kernel_for(window, cap, sinks is not None, backend)
    else:
        if info is not None and info.kv_offset != 0:
            raise _refuse(where, f"its cache holds keys from position {info.kv_offset} on (a sliding-window cache "
                                 "dropped the first ones), so a pattern cannot be placed on them; use a cache that "
                                 "keeps every key (a model config without sliding_window, or DynamicCache)")
        kernel = pattern.kernel(cap, sinks is not None, where)
    inputs = {_SINK_INPUT: sinks.reshape(-1)} if sinks is not None else {}
    if hasattr(key, "_attnc_positions"):  # a PatternCache's keys: those its pattern still reads
        if pattern is None:
            raise _refuse(where, "its cache is an attnc PatternCache, which serves models registered with a pattern "
                                 "(register(name, pattern=...)) only")
        if info.padded if info is not None else (isinstance(attention_mask, Tensor) and not bool(attention_mask.all())):
            raise _refuse(where, "its batch is padded, and a PatternCache takes unpadded batches (the same "
                                 "length in every row); use DynamicCache for a padded batch")
    positions = getattr(key, "_attnc_positions", None)
    if positions is not None:
        try:
            o = _attnc_torch.attention_cached(query, key, value, positions, kernel, scale, **inputs)
        except AttncError as e:
            raise AttncError(f"{where}: {e}", e.status, e.status_name) from e
        return o.transpose(1, 2).contiguous(), None
    nq, nk = query.shape[2], key.shape[2]
    # Keys: those that exist (a static cache's empty slots are cut off), and which of them are tokens.
    padding: Optional[Tensor] = None
    if info is not None:
        if info.end < nk:
            if info.end < nq:
                raise _refuse(where, f"its {nq} queries end at key {info.end} of {nk}; attnc puts the queries at the "
                                     "end of the keys")
            key, value, nk = key[:, :, :info.end], value[:, :, :info.end], info.end
        padding = attention_mask[:, :nk]
        if padding.shape[1] != nk:
            raise _refuse(where, f"its padding mask covers {padding.shape[1]} keys but the layer has {nk}")
    elif isinstance(attention_mask, Tensor):
        if attention_mask.dim() == 2:
            if attention_mask.shape[1] != nk:
                raise _refuse(where, f"its 2-D attention mask has {attention_mask.shape[1]} keys but the layer has {nk}")
            padding = attention_mask.to(torch.bool)
        else:
            padding = _padding_of_4d(attention_mask, nq, nk, window if pattern is None else None, where)
    elif attention_mask is not None:
        raise _refuse(where, f"its attention mask is a {type(attention_mask).__name__} (flex attention's BlockMask?); "
                             "attnc takes no mask object")
    if padding is None or (not info.padded if info is not None else bool(padding.all())):
        o = _call(kernel, query, key, value, scale, inputs, where)
        return o.transpose(1, 2).contiguous(), None
    if padding.shape[0] != query.shape[0]:
        padding = padding.expand(query.shape[0], nk)
    return _padded(kernel, query, key, value, padding, scale, inputs, where).contiguous(), None


# ---- a cache that keeps what the pattern still reads -------------------------------------------


class _PatternLayer(CacheLayerMixin):
    """One layer of a PatternCache: the keys and values kept, in a buffer grown by doubling (no copy
    of the whole cache per token, as DynamicCache's torch.cat makes), their positions, and the
    number of tokens seen. Before new tokens are added, the keys no query from the first new
    position on reads (last reader below it) are dead; every 16 tokens, and when the buffer is
    full, the buffer is compacted if the dead outnumber the live (and 64), so each token costs O(1)
    amortised and the buffer stays within about twice what the pattern reads plus 80."""

    is_sliding = False
    is_compileable = False

    def __init__(self, pattern: "_Pattern") -> None:
        super().__init__()
        self.pattern = pattern
        self.count = 0  # rows of the buffer in use
        self.seen = 0  # tokens added: the next one's position
        self.positions = np.zeros(0, dtype=np.int64)

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        b, h, _, d = key_states.shape
        self.device = key_states.device
        self.keys = key_states.new_empty((b, h, 64, d))
        self.values = value_states.new_empty((b, h, 64, value_states.shape[-1]))
        self._set_positions(np.zeros(64, dtype=np.int64))
        self.is_initialized = True

    def _set_positions(self, positions: np.ndarray) -> None:
        # The tensor shares the array's memory: a decoding step slices it, no copy, no conversion.
        self.positions, self._positions = positions, torch.from_numpy(positions)

    def _compact(self, first: int) -> None:
        """Drops the keys no query at position `first` or later reads, when they outnumber the rest."""
        last = self.pattern.last_readers(first + 1)
        live = last[self.positions[:self.count]] >= first
        dead = self.count - int(live.sum())
        if dead < max(64, self.count - dead):
            return
        keep = torch.from_numpy(np.flatnonzero(live)).to(self.keys.device)
        kept = len(keep)
        self.keys[:, :, :kept] = self.keys.index_select(2, keep)
        self.values[:, :, :kept] = self.values.index_select(2, keep)
        self.positions[:kept] = self.positions[:self.count][live]
        self.count = kept

    def update(self, key_states: Tensor, value_states: Tensor, *args: Any, **kwargs: Any) -> Tuple[Tensor, Tensor]:
        # (Once per layer and generated token: narrow() and copy_() rather than slicing, a scalar
        # position rather than an arange.)
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        m, count, seen = key_states.shape[2], self.count, self.seen
        if count and (seen % 16 == 0 or count >= self.keys.shape[2]):  # (every 16 tokens, or when full)
            self._compact(seen)
            count = self.count
        need = count + m
        if need > self.keys.shape[2]:
            size = max(need, 2 * self.keys.shape[2])
            for attr in ("keys", "values"):
                old = getattr(self, attr)
                grown = old.new_empty(old.shape[:2] + (size,) + old.shape[3:])
                grown.narrow(2, 0, count).copy_(old.narrow(2, 0, count))
                setattr(self, attr, grown)
            positions = np.zeros(size, dtype=np.int64)
            positions[:count] = self.positions[:count]
            self._set_positions(positions)
        self.keys.narrow(2, count, m).copy_(key_states)
        self.values.narrow(2, count, m).copy_(value_states)
        if m == 1:
            self.positions[count] = seen
        else:
            self.positions[count:need] = np.arange(seen, seen + m)
        self.count, self.seen = need, seen + m
        keys, values = self.keys.narrow(2, 0, need), self.values.narrow(2, 0, need)
        # The positions of the keys when some were dropped; else they are 0 .. need - 1 (an ordinary call).
        keys._attnc_positions = self._positions.narrow(0, 0, need) if need != self.seen else None
        return keys, values

    def get_mask_sizes(self, query_length: int) -> Tuple[int, int]:
        # (The mask covers every position; attnc's mask function reads only whether it is padded.)
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        self.count = self.seen = 0
        super().reset()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.is_initialized:
            self.keys = self.keys.index_select(0, beam_idx.to(self.keys.device))
            self.values = self.values.index_select(0, beam_idx.to(self.values.device))

    def kept(self) -> int:
        """The keys held now (live or not yet dropped)."""
        return self.count


class PatternCache(Cache):
    """A key/value cache for a model whose attention is a pattern (``register(name,
    pattern=...)``) that keeps only the keys a later query of the pattern still reads: for the
    512-key window plus 8 global tokens of examples/python/hf_long_generate.py, at most about
    2 · 520 + 64 keys per layer at any context length, where transformers' DynamicCache holds
    every key and copies them all (``torch.cat``) at every generated token.

        name = attnc.transformers.register("attnc_local", pattern="patterns/local.attn", w=512)
        model.set_attn_implementation(name)
        out = model(input_ids=prompt, cache=attnc.transformers.PatternCache(name), use_cache=True)
        model.generate(prompt, past_key_values=attnc.transformers.PatternCache(name), ...)

    Which keys a query can still read comes from the pattern (``Kernel.last_readers``: per key,
    the last position whose row holds it), so the result is exactly the full cache's: a key is
    dropped only when no later position's row reads it, and a query that would read a dropped
    key fails (``AttncError``) instead of computing over less. For generation (no gradients),
    unpadded batches, CPU tensors; a pattern whose rows depend on ``n`` or that reads inputs is
    refused here."""

    def __init__(self, name: str) -> None:
        with _LOCK:
            known = name in _REGISTERED
            pattern = _REGISTERED.get(name)
        if not known:
            raise error(INVALID_ARGUMENT, f"'{name}' is not an attention implementation attnc.transformers.register() "
                                          "registered")
        if pattern is None:
            raise error(UNSUPPORTED, f"'{name}' runs the model's own attention, whose causal layers read every key; "
                                     "a PatternCache serves names registered with a pattern (register(name, "
                                     "pattern=...)); use DynamicCache here")
        pattern.last_readers(1)  # a pattern the analysis refuses fails here, not in the model
        self.pattern = pattern
        super().__init__(layer_class_to_replicate=lambda: _PatternLayer(pattern))

    def kept(self) -> List[int]:
        """The keys each layer holds now."""
        return [layer.kept() for layer in self.layers]


def register(name: str = "attnc", pattern: Union[str, Any, None] = None, *, backend: str = "fused",
             pattern_name: Optional[str] = None, **params: int) -> str:
    """Registers attnc as transformers' attention implementation `name` (``AttentionInterface`` and
    ``AttentionMaskInterface``) and returns `name`: ``attn_implementation=name`` or
    ``model.set_attn_implementation(name)`` then runs the model's attention through attnc.

    Without `pattern`: the model's own attention, exactly (causal, sliding windows, soft-capping,
    sinks, grouped heads, ``scaling``, the key/value cache, padding). With `pattern` (a ``.attn``
    file's path or a pattern's text; `params` set its ``param`` values, `pattern_name` picks one
    pattern of a file holding several): that pattern instead of the model's mask, made causal, with
    the model's soft-cap and sinks added. The pattern is compiled here (its errors raise here); it
    may not read inputs. `backend` is attnc's (``"fused"``, ``"dense"``)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string, got {name!r}")
    if name in ("eager", "sdpa", "flex_attention") or name.startswith("flash_attention"):
        raise ValueError(f"'{name}' is transformers' own attention implementation; register attnc under another name")
    if params and pattern is None:
        raise TypeError(f"parameters {', '.join(params)} are a pattern's; pass pattern=... with them")
    spec = None if pattern is None else _Pattern(pattern, backend, pattern_name, params)
    with _LOCK:
        _REGISTERED[name] = spec

    def attnc_attention(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                        scaling: Optional[float] = None, dropout: float = 0.0, sliding_window: Optional[int] = None,
                        softcap: Optional[float] = None, s_aux: Optional[Tensor] = None,
                        **kwargs: Any) -> Tuple[Tensor, None]:
        return _attention(spec, backend, module, query, key, value, attention_mask, scaling, dropout, sliding_window,
                          softcap, s_aux)

    attnc_attention.__qualname__ = attnc_attention.__name__ = f"attnc_attention_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"
    AttentionInterface.register(name, attnc_attention)
    AttentionMaskInterface.register(name, _mask_interface)
    return name
