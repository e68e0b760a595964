"""Shared pieces of the attnc Python tests: the pattern library with small
parameters, masks, and a float64 reference of what a kernel computes."""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
from typing import Dict, Optional

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PATTERNS = REPO / "patterns"

# Every pattern of the library with parameters small enough for n ~ 100,
# chosen so that blocks, strides and windows do not divide n evenly.
LIBRARY: Dict[str, Dict[str, int]] = {
    "axial": {"W": 10},
    "bigbird": {"b": 8, "g": 1, "r": 2},
    "causal": {},
    "dilated": {"w": 5, "d": 3},
    "fixed": {"l": 16, "c": 4},
    "fixed_multihead": {"l": 16, "c": 4},
    "fixed_subblocks": {"l": 16, "c": 2, "H": 4},
    "full": {},
    "local": {"w": 20},
    "longformer": {"w": 8, "g": 3},
    "strided": {"l": 10},
    "strided_multihead": {"l": 10},
}


@pytest.fixture(scope="session", autouse=True)
def _test_environment(tmp_path_factory):
    """Kernels compiled by the tests go to a cache of their own, not ~/.cache/attnc; torch
    runs its (small) operations on one thread, since OpenMP's busy-waiting threads slow
    everything down when the cores are shared (CI's two); attnc keeps its own threads."""
    import torch

    if "ATTNC_CACHE_DIR" not in os.environ:
        os.environ["ATTNC_CACHE_DIR"] = str(tmp_path_factory.mktemp("attnc-cache"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pattern_path(name: str) -> str:
    return str(PATTERNS / f"{name}.attn")


def library_kernel(name: str, backend: str = "fused"):
    import attnc

    return attnc.compile(pattern_path(name), backend=backend, **LIBRARY[name])


def heads_for(kernel, default: int = 3) -> int:
    """The head count a call must use: the declared one, else `default`."""
    return kernel.heads or default


def pattern_masks(name: str, n: int, heads: int, **params: int) -> np.ndarray:
    """bool [heads, n, n]: which keys each query attends in each head.

    Read from attnc.show's text picture at one cell per pair: the pattern's
    closed-form row sets (plan/RowEvaluator), which are checked against a
    brute-force evaluation of the pattern in the C++ tests. The kernels run
    the fused plan's tiles, a different path; test_numerics.py also checks
    *fixed* and *strided* against masks written from the papers' formulas.
    """
    import attnc

    declared = attnc.analyze(pattern_path(name), n=8, connectivity=False, **params)["num_heads"]
    masks = []
    for h in range(heads):
        text = attnc.show(pattern_path(name), n, head=h if declared > 1 else None, format="ascii",
                          max_side=max(n, 8), **params)
        rows = text.rstrip("\n").split("\n")[-n:]
        masks.append([[c != "." for c in row] for row in rows])
    return np.array(masks, dtype=bool)


def reference(q, k, v, masks, scale: Optional[float] = None):
    """(O, lse) in float64 torch: softmax over each row's keys, zeros and -inf for empty rows.

    Differentiable, so its autograd gives the reference gradients.
    """
    import torch

    q, k, v = (x.double() for x in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = torch.as_tensor(masks)[None]  # [1, H, n, n]
    s = (scale * q @ k.transpose(-1, -2)).masked_fill(~m, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    p = torch.where(m, torch.exp(s - safe[..., None]), torch.zeros_like(s))
    return p @ v, lse


@contextlib.contextmanager
def raises_status(status_name: str):
    """pytest.raises(attnc.AttncError) that also checks the error's status."""
    import attnc

    with pytest.raises(attnc.AttncError) as info:
        yield info
    assert info.value.status_name == status_name, f"{info.value.status_name}: {info.value}"


def reference_grads(q, k, v, masks, d_o, scale: Optional[float] = None):
    """dQ, dK, dV of sum(O * d_o) in float64: the reference's exact gradients."""
    import torch

    x = [t.detach().double().requires_grad_() for t in (q, k, v)]
    o, _ = reference(*x, masks, scale=scale)
    return torch.autograd.grad(o, x, d_o.double())
