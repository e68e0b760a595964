"""attnc.distributed on gloo over loopback: 2 and 4 processes (torch.multiprocessing), every library
pattern, against the single-process kernel, and the errors every rank must raise alike; with a GPU,
CUDA tensors too (2 ranks on one GPU over gloo)."""

from __future__ import annotations

import datetime
import os
import traceback

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import attnc  # noqa: E402
import attnc.distributed  # noqa: E402
import attnc.torch  # noqa: E402

from conftest import LIBRARY, library_kernel, pattern_path  # noqa: E402

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="this torch has no torch.distributed with gloo")

# A collective that waits longer than this raises: a hang fails the test instead of stalling CI.
TIMEOUT = datetime.timedelta(seconds=60)


def _case_tensors(seed, batch, hq, hkv, n, d, dtype, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, n, d, generator=g)
    k = torch.randn(batch, hkv, n, d, generator=g)
    v = torch.randn(batch, hkv, n, d, generator=g)
    d_o = torch.randn(batch, hq, n, d, generator=g)
    return [x.to(dtype=dtype, device=device) for x in (q, k, v, d_o)]


def _check_case(kernel, rank, world, n, batch=1, hq=2, hkv=2, d=16, dtype=torch.float32, seed=0, shards=None,
                device="cpu"):
    """One case on every rank: O and the gradients of rank `rank`'s positions against the
    single-process kernel on the whole sequence (on the same device)."""
    shards = shards or attnc.distributed.shard(kernel, n, world)
    assert shards.positions(rank) == sum(b - a for a, b in shards.ranges[rank])
    q, k, v, d_o = _case_tensors(seed, batch, hq, hkv, n, d, dtype, device)
    # The reference: one process, the whole sequence.
    ref = [x.clone().requires_grad_() for x in (q, k, v)]
    o_ref = attnc.torch.attention(*ref, kernel)
    o_ref.backward(d_o)
    # This rank's part.
    mine = [shards.take(x, rank).requires_grad_() for x in (q, k, v)]
    o = attnc.distributed.attention(kernel, *mine, shards)
    o.backward(shards.take(d_o, rank))
    # (On a GPU f32 runs on bf16 tensor cores; the partial dK/dV sums travel in the inputs' dtype.)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 and device == "cpu" else dict(rtol=2e-2, atol=2e-2)
    where = f"{kernel!r} n={n} world={world} rank={rank} hq={hq} hkv={hkv} {dtype}"
    torch.testing.assert_close(o, shards.take(o_ref.detach(), rank), **tol, msg=lambda m: f"O, {where}: {m}")
    for name, x, r in zip("qkv", mine, ref):
        torch.testing.assert_close(x.grad, shards.take(r.grad, rank), **tol,
                                   msg=lambda m, name=name: f"d{name}, {where}: {m}")
    return shards


def _two_layers(kernel, shards, rank):
    xs = [_case_tensors(seed, 1, 2, 2, shards.n, 16, torch.float32) for seed in (20, 21)]
    refs = [[x.clone().requires_grad_() for x in t[:3]] for t in xs]
    loss = sum((attnc.torch.attention(*r, kernel) * t[3]).sum() for r, t in zip(refs, xs))
    loss.backward()
    mine = [[shards.take(x, rank).requires_grad_() for x in t[:3]] for t in xs]
    outs = [attnc.distributed.attention(kernel, *m, shards) for m in mine]
    sum((o * shards.take(t[3], rank)).sum() for o, t in zip(outs, xs)).backward()
    for m, r in zip(mine, refs):
        for x, y in zip(m, r):
            torch.testing.assert_close(x.grad, shards.take(y.grad, rank), rtol=1e-5, atol=1e-5)


def _expect_error(fn, *needles):
    try:
        fn()
    except attnc.AttncError as e:
        for needle in needles:
            assert needle in str(e), f"{needle!r} not in the error: {e}"
        return
    raise AssertionError(f"no AttncError; expected one saying {needles}")


def _worker(rank, world, store, out, body):
    os.environ.setdefault("ATTNC_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        body(rank, world)
    except BaseException:
        with open(f"{out}.{rank}", "w") as f:
            f.write(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path, world, body):
    store, out = tmp_path / "store", tmp_path / "failure"
    try:
        mp.spawn(_worker, args=(world, str(store), str(out), body), nprocs=world, join=True)
    except Exception as e:
        reports = [(tmp_path / f"failure.{r}") for r in range(world)]
        text = "\n".join(f"rank {r}:\n{p.read_text()}" for r, p in enumerate(reports) if p.exists())
        pytest.fail(f"a rank failed: {e}\n{text}")


# ---- the bodies (module-level: spawn pickles them by name) -----------------------------


def _library(rank, world):
    for name in sorted(LIBRARY):
        kernel = library_kernel(name)
        heads = kernel.heads or 2
        # Ragged n, not divisible by the ranks; and 3 positions for 4 ranks (a rank without any).
        for n in (101, 257):
            _check_case(kernel, rank, world, n, hq=heads, hkv=heads, seed=n)
    fixed, local = library_kernel("fixed"), library_kernel("local")
    # The same shards again with other data (the key buffers kept from the last call), and two
    # calls before either's backward, as two layers make them.
    shards = _check_case(fixed, rank, world, 257, seed=10)
    _check_case(fixed, rank, world, 257, seed=11, shards=shards)
    _two_layers(fixed, shards, rank)
    shards = _check_case(local, rank, world, 3, seed=3)
    if world == 4:
        assert any(not r for r in shards.ranges), shards.ranges
    # More ranks than row blocks: every block split.
    _check_case(fixed, rank, world, 40, seed=4)
    # Grouped-query heads, a batch of 2, bf16, and d = 64.
    _check_case(fixed, rank, world, 150, batch=2, hq=4, hkv=2, seed=5)
    _check_case(local, rank, world, 150, hq=3, hkv=1, seed=6)
    _check_case(fixed, rank, world, 130, dtype=torch.bfloat16, seed=7)
    _check_case(local, rank, world, 200, hq=2, hkv=1, d=64, dtype=torch.bfloat16, seed=8)


def _errors(rank, world):
    fixed, local = library_kernel("fixed"), library_kernel("local")
    q, k, v, _ = _case_tensors(0, 1, 2, 2, 100, 16, torch.float32)
    shards = attnc.distributed.shard(fixed, 100, world)
    mine = [shards.take(x, rank) for x in (q, k, v)]
    # Shards made for another n: the ranks' parts do not match them.
    other_n = attnc.distributed.shard(fixed, 120, world)
    _expect_error(lambda: attnc.distributed.attention(fixed, *mine, other_n), "positions but the shards give it")
    # Shards made for another world size.
    other_world = attnc.distributed.shard(fixed, 100, world + 1)
    _expect_error(lambda: attnc.distributed.attention(fixed, *mine, other_world),
                  f"the group has {world} ranks but the shards were made for world_size = {world + 1}")
    # Shards made for another kernel.
    _expect_error(lambda: attnc.distributed.attention(local, *mine, shards), "another kernel")
    # Different shapes on different ranks: rank 1 has d = 8.
    if rank == 1:
        bad = [x[..., :8].contiguous() for x in mine]
        _expect_error(lambda: attnc.distributed.attention(fixed, *bad, shards), "disagree in d")
    else:
        _expect_error(lambda: attnc.distributed.attention(fixed, *mine, shards), "disagree in d")
    # One rank's bad dtype: it says why, the others that it refused.
    if rank == 0:
        _expect_error(lambda: attnc.distributed.attention(fixed, *(x.double() for x in mine), shards),
                      "rank 0", "float32 or bfloat16")
    else:
        _expect_error(lambda: attnc.distributed.attention(fixed, *mine, shards), "rank 0 rejected its arguments")
    # Ranks that disagree on n.
    n_here = 100 if rank else 120
    mixed = attnc.distributed.shard(fixed, n_here, world)
    mixed_parts = [mixed.take(x, rank) for x in _case_tensors(0, 1, 2, 2, n_here, 16, torch.float32)[:3]]
    _expect_error(lambda: attnc.distributed.attention(fixed, *mixed_parts, mixed), "different n")
    # A group of the wrong size: ranks 0 and 1 of a 2-rank subgroup with shards for the world.
    sub = dist.new_group([0, 1])
    if rank < 2 and world > 2:
        _expect_error(lambda: attnc.distributed.attention(fixed, *mine, shards, group=sub),
                      f"the group has 2 ranks but the shards were made for world_size = {world}")
    # After all that, a call still works.
    o = attnc.distributed.attention(fixed, *mine, shards)
    assert o.shape == mine[0].shape
    # CUDA-free API errors that need no collective.
    with pytest.raises(ValueError):
        attnc.distributed.shard(fixed, 0, world)
    with pytest.raises(TypeError):
        attnc.distributed.shard("fixed", 100, world)


def _cuda(rank, world):
    torch.cuda.set_device(0)
    for name in ("fixed", "local", "bigbird", "strided"):
        kernel = library_kernel(name)
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            _check_case(kernel, rank, world, 257, d=64, dtype=dtype, seed=3, device="cuda")
    local = library_kernel("local")
    shards = attnc.distributed.shard(local, 130, world)
    _check_case(local, rank, world, 130, hq=4, hkv=2, d=64, dtype=torch.bfloat16, device="cuda", shards=shards)  # GQA
    # The same shards with CPU tensors next (the route's indices and buffers move back), then the GPU again.
    _check_case(local, rank, world, 130, seed=5, shards=shards)
    _check_case(local, rank, world, 130, seed=6, d=64, dtype=torch.bfloat16, device="cuda", shards=shards)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU on this machine")
def test_cuda_tensors(tmp_path):
    """2 ranks with CUDA tensors on one GPU (gloo stages the exchange through the host): the offset
    calls on the GPU (attnc_run_forward_at_on) against the single-process GPU kernel."""
    _spawn(tmp_path, 2, _cuda)


@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_matches_one_process(tmp_path, world):
    for name in LIBRARY:  # compiled once here, so the ranks find them in the cache
        library_kernel(name)
    _spawn(tmp_path, world, _library)


@pytest.mark.parametrize("world", [2, 4])
def test_bad_input_raises_on_every_rank(tmp_path, world):
    _spawn(tmp_path, world, _errors)


def test_shards_take_and_place_invert_each_other():
    kernel = library_kernel("fixed")
    shards = attnc.distributed.shard(kernel, 300, 3)
    x = torch.arange(300.0).reshape(1, 1, 300, 1)
    parts = [shards.take(x, r) for r in range(3)]
    assert sum(p.shape[2] for p in parts) == 300
    assert torch.equal(shards.place(parts), x)
    # The same plan as `attnc analyze --ranks`.
    cp = attnc.analyze(pattern_path("fixed"), n=300, ranks=3, **LIBRARY["fixed"])["context_parallel"]
    assert [[list(r) for r in rs] for rs in shards.ranges] == cp["ranges"]
    assert shards.recv_rows == cp["recv_rows"] and shards.return_rows == cp["return_rows"]
    with pytest.raises(ValueError):
        shards.take(x, 3)
    with pytest.raises(attnc.AttncError, match="positions"):
        shards.take(x[:, :, :200], 0)
