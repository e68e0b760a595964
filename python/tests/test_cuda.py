"""attnc on CUDA tensors: kernel(q, k, v) and attnc.torch.attention on a GPU, torch's
current stream, autograd, torch.compile(fullgraph=True), fp16/bf16/f32, grouped heads,
fewer queries than keys, and the errors of mixed devices. Every case is checked against
conftest's float64 reference (the pattern's mask, softmax in double).

Needs a CUDA GPU: where torch sees none these tests are skipped, saying so (the runtime's
GPU error paths are tested without one in tests/runtime/CudaKernelTest.cpp).
"""

from __future__ import annotations

import pytest
import torch

import attnc
import attnc.torch
from conftest import LIBRARY, library_kernel, pattern_masks, pattern_path, raises_status, reference, reference_grads

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU on this machine (torch.cuda.is_available() is False)", allow_module_level=True)

DEV = torch.device("cuda")
TOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 3e-2}  # f32 runs on bf16 tensor cores


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    want = want.double().cpu()
    return float((got.double().cpu() - want).abs().max() / max(float(want.abs().max()), 1e-3))


def inputs(shape, dtype, kv_heads=None, nk=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    b, h, n, d = shape
    q = torch.randn((b, h, n, d), generator=g)
    k, v = (torch.randn((b, kv_heads or h, nk or n, d), generator=g) for _ in range(2))
    # the values the GPU reads, for the reference too
    return [x.to(dtype).to(DEV) for x in (q, k, v)]


@pytest.mark.parametrize("name", ["fixed", "strided", "local", "longformer", "bigbird", "fixed_multihead"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_forward_and_gradients_match_the_reference(name, dtype):
    kernel = library_kernel(name)
    heads = kernel.heads or 2
    n, d = 150, 64
    q, k, v = (x.requires_grad_() for x in inputs((2, heads, n, d), dtype))
    masks = pattern_masks(name, n, heads, **LIBRARY[name])
    o = kernel(q, k, v)
    assert o.device == q.device and o.dtype == dtype and o.shape == q.shape
    want, _ = reference(q.detach().cpu(), k.detach().cpu(), v.detach().cpu(), masks)
    assert rel_err(o, want) <= TOL[dtype]
    d_o = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    wants = reference_grads(q.cpu(), k.cpu(), v.cpu(), masks, d_o.cpu())
    for got, ref in zip(grads, wants):
        assert got.device == q.device and got.dtype == dtype
        assert rel_err(got, ref) <= 1.5 * TOL[dtype]


def test_grouped_heads_and_decoding():
    kernel = library_kernel("causal")
    q, k, v = inputs((1, 4, 37, 64), torch.bfloat16, kv_heads=2, nk=300)
    masks = pattern_masks("causal", 300, 1)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernel)
    # The reference on every position, its last 37 rows, K and V per query head.
    qf = torch.zeros((1, 4, 300, 64), dtype=q.dtype)
    qf[:, :, -37:] = q.cpu()
    kf, vf = (x.cpu().repeat_interleave(2, dim=1) for x in (k, v))
    want, want_lse = reference(qf, kf, vf, masks)
    assert rel_err(o, want[:, :, -37:]) <= TOL[torch.bfloat16]
    torch.testing.assert_close(lse.cpu().double(), want_lse[:, :, -37:], atol=2e-2, rtol=2e-3)


def test_runs_on_the_current_stream():
    kernel = library_kernel("local")
    q, k, v = inputs((1, 2, 500, 64), torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o = kernel(q, k, v)
        o2 = o * 2  # queued after attnc's kernels on the same stream
    side.synchronize()
    masks = pattern_masks("local", 500, 2, **LIBRARY["local"])
    want, _ = reference(q.cpu(), k.cpu(), v.cpu(), masks)
    assert rel_err(o2 / 2, want) <= TOL[torch.bfloat16]


def test_compile_fullgraph_on_the_gpu():
    kernel = library_kernel("fixed")
    proj = torch.nn.Linear(64, 64).to(DEV)

    def step(q, k, v):
        return (proj(kernel(q, k, v).float()) ** 2).mean()

    compiled = torch.compile(step, fullgraph=True)
    x = [t.requires_grad_() for t in inputs((1, 2, 200, 64), torch.bfloat16)]
    loss = compiled(*x)
    grads = torch.autograd.grad(loss, x)
    eager = step(*x)
    eager_grads = torch.autograd.grad(eager, x)
    torch.testing.assert_close(loss, eager, atol=1e-3, rtol=1e-3)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("name", ["local", "strided"])
def test_cuda_graph_capture_and_replay(name):
    # torch.cuda.graph (what torch.compile's "reduce-overhead" does): after a call at the length has run,
    # a forward and its backward are captured (attnc neither queries nor synchronises the stream) and a
    # replay on new inputs gives what an eager call gives.
    kernel = library_kernel(name)
    q, k, v = (x.requires_grad_() for x in inputs((1, 2, 300, 64), torch.bfloat16))
    d_o = torch.randn_like(q)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the warm-up: tables uploaded, code loaded
        for _ in range(2):
            o = kernel(q, k, v)
            grads = torch.autograd.grad(o, (q, k, v), d_o)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o = kernel(q, k, v)
        grads = torch.autograd.grad(o, (q, k, v), d_o)
    fresh = [x.requires_grad_() for x in inputs((1, 2, 300, 64), torch.bfloat16, seed=7)]
    with torch.no_grad():
        for x, y in zip((q, k, v), fresh):
            x.copy_(y)
    graph.replay()
    torch.cuda.synchronize()
    want_o = kernel(*fresh)
    want_grads = torch.autograd.grad(want_o, fresh, d_o)
    torch.testing.assert_close(o, want_o, atol=0, rtol=0)
    for got, want in zip(grads, want_grads):
        torch.testing.assert_close(got, want, atol=1e-2, rtol=1e-2)


def test_opcheck_on_the_gpu():
    kernel = library_kernel("fixed")
    q, k, v = (x.requires_grad_() for x in inputs((1, 2, 70, 64), torch.bfloat16))
    torch.library.opcheck(torch.ops.attnc.attention.default, (q, k, v, kernel.id, 0.0))


def test_mixed_devices_and_dtypes_are_errors():
    kernel = library_kernel("local")
    q, k, v = inputs((1, 2, 40, 64), torch.bfloat16)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT"):
        kernel(q, k.cpu(), v)
    with raises_status("ATTNC_ERROR_DTYPE"):
        kernel(q.cpu().half(), k.cpu().half(), v.cpu().half())
    # (A varlen batch runs on the GPU since ABI 6; its tensors must share a device too.)
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT"):
        attnc.torch.attention_varlen(q[0].transpose(0, 1), k[0].transpose(0, 1).cpu(), v[0].transpose(0, 1),
                                     torch.tensor([0, 40], dtype=torch.int32), kernel=kernel)


def test_compile_for_the_cuda_target():
    kernel = attnc.compile(pattern_path("local"), target="cuda", **LIBRARY["local"])
    q, k, v = inputs((1, 1, 30, 64), torch.float16)
    masks = pattern_masks("local", 30, 1, **LIBRARY["local"])
    want, _ = reference(q.cpu(), k.cpu(), v.cpu(), masks)
    assert rel_err(kernel(q, k, v), want) <= TOL[torch.float16]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_varlen_batches_on_the_gpu_match_the_cpu(dtype):
    # Sequences with no keys, keys but no queries, one query, fewer queries than keys; grouped
    # heads; offsets given as CUDA tensors (copied to the host) and as lists.
    kernel = library_kernel("local")
    lengths = [(0, 0), (0, 37), (1, 1), (100, 130), (65, 65), (1, 70)]
    cu_q = torch.tensor([0] + list(torch.tensor([a for a, _ in lengths]).cumsum(0)), dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.tensor([b for _, b in lengths]).cumsum(0)), dtype=torch.int32)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(int(cu_q[-1]), 4, 64, generator=g).to(dtype)
    k, v = (torch.randn(int(cu_k[-1]), 2, 64, generator=g).to(dtype) for _ in range(2))
    d_o = torch.randn(q.shape, generator=g).to(dtype)
    cpu = [x.clone().requires_grad_() for x in (q, k, v)]
    o_cpu = attnc.torch.attention_varlen(*cpu, cu_q, cu_k, kernel=kernel)
    o_cpu.backward(d_o)
    gpu = [x.to(DEV).requires_grad_() for x in (q, k, v)]
    o_gpu = attnc.torch.attention_varlen(*gpu, cu_q.to(DEV), cu_k.tolist(), kernel=kernel)
    assert o_gpu.device.type == "cuda" and o_gpu.dtype == dtype
    o_gpu.backward(d_o.to(DEV))
    assert rel_err(o_gpu, o_cpu.detach().float()) <= TOL[dtype]
    for got, want in zip(gpu, cpu):
        assert rel_err(got.grad, want.grad.float()) <= 1.5 * TOL[dtype]
    # The keys of the sequence without queries get exactly zero gradients.
    assert torch.count_nonzero(gpu[1].grad[0:37]) == 0 and torch.count_nonzero(gpu[2].grad[0:37]) == 0


def test_varlen_compiles_fullgraph_on_the_gpu():
    kernel = library_kernel("fixed")
    cu = torch.tensor([0, 30, 100], dtype=torch.int32)
    q, k, v = (torch.randn(100, 2, 64, device=DEV, dtype=torch.bfloat16) for _ in range(3))
    fn = torch.compile(lambda q, k, v: attnc.torch.attention_varlen(q, k, v, cu, kernel=kernel), fullgraph=True)
    torch.testing.assert_close(fn(q, k, v), attnc.torch.attention_varlen(q, k, v, cu, kernel=kernel))


# ---- score modifiers: soft caps and sinks on the GPU ------------------------------------

SCORED = {
    # Gemma 2's soft cap on the Sparse Transformer's fixed pattern
    "capped": """pattern capped { param l = 16  param c = 4  causal
  attend { j : j / l == i / l } | { j : j % l >= l - c }  score 20 * tanh(s / 20) }""",
    # gpt-oss's sink on a window
    "sink": """pattern sinkw { param w = 13  input z : float[heads]  causal  attend { j : i - j < w }  sink z[h] }""",
    "both": """pattern both { param w = 32  input z : float[heads]  causal  attend { j : i - j < w }
  score 30 * tanh(s / 30)  sink z[h] }""",
    # ALiBi's slopes (BLOOM, MPT) on a window with global keys, and a sink
    "alibi": """pattern alibi { input slope : float[heads]  input z : float[heads]
  attend { j : j <= i && i - j < 40 } | { j : j < 4 }  score s + slope[h] * (j - i)  sink z[h] }""",
}
FLOATS = {"z": [0.5, 2.5, -3.0, 8.0], "slope": [0.5, 0.25, 0.125, 0.0625]}


@pytest.mark.parametrize("name", sorted(SCORED))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_score_modifiers_match_the_cpu(name, dtype):
    """A soft cap, ALiBi's slopes and a per-head sink on CUDA tensors against the same kernel on the
    CPU (whose modifiers test_score_modifiers.py checks against float64): O, dQ, dK, dV and the
    float inputs' gradients, grouped heads, fewer queries than keys."""
    kernel = attnc.compile(SCORED[name])
    heads, kv_heads, nq, nk, d = 4, 2, 100, 150, 64
    q, k, v = inputs((2, heads, nq, d), dtype, kv_heads=kv_heads, nk=nk, seed=7)
    q = q * 3  # logits large enough for the cap to bend them
    floats = {key: torch.tensor(values, device=DEV) for key, values in FLOATS.items()
              if f"input {key} " in SCORED[name]}
    gpu = [x.detach().requires_grad_() for x in (q, k, v, *floats.values())]
    cpu = [x.detach().cpu().float().requires_grad_() for x in gpu]
    o = kernel(*gpu[:3], **dict(zip(floats, gpu[3:])))
    want = kernel(*cpu[:3], **dict(zip(floats, cpu[3:])))
    assert o.device == q.device and o.dtype == dtype
    assert rel_err(o, want) <= TOL[dtype]
    d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(3))
    grads = torch.autograd.grad(o, gpu, d_o.to(DEV, dtype))
    wants = torch.autograd.grad(want, cpu, d_o)
    for got, ref in zip(grads, wants):
        assert got.device == q.device
        assert rel_err(got, ref) <= 1.5 * TOL[dtype]


def test_scores_the_gpu_does_not_run_are_refused():
    relative = attnc.compile("""pattern rel { input rel : float[heads, 4]  causal
  attend { j : i - j < 16 }  score s + rel[h, min(i - j, 3)] }""")
    q, k, v = inputs((1, 2, 40, 64), torch.bfloat16)
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as info:
        relative(q, k, v, rel=torch.ones(2, 4, device=DEV))
    assert "soft cap alone" in str(info.value) and "CPU tensors" in str(info.value)


# ---- patterns that read data on the GPU ---------------------------------------------------


@pytest.mark.parametrize("name", ["lsh", "nsa"])
def test_data_patterns_match_the_cpu(name):
    """LSH's buckets and NSA's selected blocks as CUDA int tensors: each (batch, head) slice runs on
    tables built from its own data at the call; O and the gradients equal the CPU kernel's."""
    kernel = attnc.compile(str(pattern_path(name)), **({"B": 16, "k": 3, "w": 8} if name == "nsa" else {}))
    b, heads, n, d = 2, 4, 200, 64
    q, k, v = inputs((b, heads, n, d), torch.bfloat16, kv_heads=2, seed=5)
    g = torch.Generator().manual_seed(9)
    if name == "lsh":
        data = {"b0": torch.randint(0, 6, (b, 1, n), generator=g), "b1": torch.randint(0, 6, (b, 1, n), generator=g)}
    else:
        rows = (n + 15) // 16
        data = {"sel": torch.randint(-1, rows, (rows, 3), generator=g)}
    gpu = [x.detach().requires_grad_() for x in (q, k, v)]
    cpu = [x.detach().cpu().float().requires_grad_() for x in gpu]
    o = kernel(*gpu, **{key: x.to(DEV) for key, x in data.items()})
    want = kernel(*cpu, **data)
    assert o.device == q.device
    assert rel_err(o, want) <= TOL[torch.bfloat16]
    d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(3))
    for got, ref in zip(torch.autograd.grad(o, gpu, d_o.to(DEV, o.dtype)), torch.autograd.grad(want, cpu, d_o)):
        assert rel_err(got, ref) <= 1.5 * TOL[torch.bfloat16]
