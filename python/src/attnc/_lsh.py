"""Reformer's locality-sensitive hash, the bucket ids that patterns/lsh.attn reads."""

from __future__ import annotations

from typing import Any

from ._api import _check_range

__all__ = ["lsh_buckets"]


def lsh_buckets(x: Any, buckets: int, rounds: int = 2, seed: int = 0) -> Any:
    """Reformer's angular LSH (Kitaev et al. 2020, section 2): for each round r, a random rotation
    ``R_r`` of shape ``[d, buckets // 2]`` (standard normal entries drawn from a
    ``torch.Generator`` seeded with ``seed``: the same seed gives the same rotations on every
    machine and device), and each vector's bucket ``argmax(concat([x R_r, -x R_r]))``.

    ``x``: a floating-point torch tensor ``[..., n, d]`` (a shared query/key projection, as
    Reformer hashes, or the queries and keys that must meet); every leading index is hashed with
    the same rotations. ``buckets``: even, at least 2. Returns int64 ``[rounds, ..., n]`` bucket
    ids in ``[0, buckets)``, whose rounds unpack: ``b0, b1 = attnc.lsh_buckets(qk, 64, 2, seed=0)``
    then ``kernel(qk, qk, v, b0=b0, b1=b1)`` with ``patterns/lsh.attn``. Not differentiable (ids).
    """
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"lsh_buckets hashes a torch tensor [..., n, d], got a {type(x).__name__}")
    if x.dim() < 2 or not x.is_floating_point():
        raise ValueError(f"lsh_buckets hashes a floating-point tensor [..., n, d], got {x.dtype} of shape "
                         f"{list(x.shape)}")
    _check_range("buckets", buckets, 2, 1 << 24)
    if buckets % 2:
        raise ValueError(f"buckets must be even (Reformer's hash takes the argmax over [xR, -xR]), got {buckets}")
    _check_range("rounds", rounds, 1, 1 << 16)
    _check_range("seed", seed, -(1 << 63), (1 << 64) - 1)
    d = x.shape[-1]
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(seed))
    rotations = torch.randn(rounds, d, buckets // 2, generator=generator, dtype=torch.float32)
    rotations = rotations.to(x.device).view(rounds, *([1] * (x.dim() - 2)), d, buckets // 2)
    with torch.no_grad():
        rotated = x.detach().float().unsqueeze(0) @ rotations  # [rounds, ..., n, buckets // 2]
        return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)
