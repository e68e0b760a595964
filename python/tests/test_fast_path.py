"""attnc.torch's eager path: in plain eager mode a call skips torch.library's custom-op
dispatch and calls the ops' implementations directly (with a torch.autograd.Function when
autograd records a graph). It must give bitwise what the ops give, and step aside for
everything that traces or intercepts operators, so that they see the ops.

Which path ran is observed through the ops' implementations, which look their kernel up
by id (attnc._api._kernel_by_id); the eager path never does.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import attnc
import attnc.torch
from conftest import library_kernel, pattern_masks, reference

D = 16
NK = 45


@pytest.fixture
def op_runs(monkeypatch):
    """The kernel ids the custom ops' implementations looked up, in order."""
    runs = []
    real = attnc._api._kernel_by_id

    def counting(kernel_id):
        runs.append(kernel_id)
        return real(kernel_id)

    monkeypatch.setattr(attnc._api, "_kernel_by_id", counting)
    return runs


def randn(shape, seed, dtype=torch.float32, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad)


def dense_inputs(hq, hkv, nq, dtype=torch.float32, requires_grad=False):
    return (randn((2, hq, nq, D), 1, dtype, requires_grad), randn((2, hkv, NK, D), 2, dtype, requires_grad),
            randn((2, hkv, NK, D), 3, dtype, requires_grad))


def dense_reference(q, k, v, masks):
    """(O, lse) in float64: k and v repeated per query head, the last nq rows of the masks."""
    group = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(group, dim=1) for x in (k, v))
    return reference(q, k, v, masks[:, k.shape[2] - q.shape[2]:, :])


def op_call(q, k, v, kernel, scale=0.0):
    return torch.ops.attnc.attention(q, k, v, kernel.id, scale)


# (Hq, Hkv, nq, dtype): plain, grouped-query (4 and 8 query heads per key/value head),
# fewer queries than keys (a decoding step among them), bfloat16.
CASES = [
    (4, 4, NK, torch.float32),
    (8, 2, NK, torch.float32),
    (8, 1, 7, torch.float32),
    (4, 4, 1, torch.float32),
    (4, 2, 20, torch.bfloat16),
]


def case_id(case):
    hq, hkv, nq, dtype = case
    return f"hq{hq}-hkv{hkv}-nq{nq}-{str(dtype).split('.')[-1]}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("scale", [None, 0.3])
def test_eager_path_gives_bitwise_the_ops_outputs(case, scale, op_runs):
    hq, hkv, nq, dtype = case
    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(hq, hkv, nq, dtype)
    o, lse = attnc.torch.attention_with_lse(q, k, v, kernel, scale=scale)
    o_only = kernel(q, k, v, scale=scale)  # O alone: the runtime writes no log-sum-exp
    assert op_runs == []
    want_o, want_lse = op_call(q, k, v, kernel, 0.0 if scale is None else scale)
    assert op_runs == [kernel.id]
    assert o.dtype == dtype and lse.dtype == torch.float32 and o.is_contiguous()
    assert torch.equal(o, want_o) and torch.equal(o_only, want_o) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_eager_gradients_equal_the_ops_and_the_reference(case, op_runs):
    hq, hkv, nq, dtype = case
    kernel = library_kernel("fixed")
    x = dense_inputs(hq, hkv, nq, dtype, requires_grad=True)
    o = kernel(*x)
    d_o = randn(o.shape, 4, dtype)
    grads = torch.autograd.grad(o, x, d_o)
    assert op_runs == [] and o.grad_fn is not None
    want_o = op_call(*x, kernel)[0]
    want = torch.autograd.grad(want_o, x, d_o)
    assert op_runs == [kernel.id, kernel.id]  # the op's forward, then its backward
    assert torch.equal(o, want_o)
    for got, op in zip(grads, want):
        assert got.dtype == dtype and torch.equal(got, op)

    masks = pattern_masks("fixed", NK, 1, l=16, c=4)
    ref = [t.detach().double().requires_grad_() for t in x]
    ref_grads = torch.autograd.grad(dense_reference(*ref, masks)[0], ref, d_o.double())
    tolerance = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=5e-2, rtol=3e-2)
    for got, want_ref in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want_ref, **tolerance)


def test_eager_outputs_are_contiguous_for_strided_inputs(op_runs):
    """O and the gradients are new contiguous tensors of the inputs' shapes even where q, k
    and v are transposed views (the eager path allocates them like its inputs, in row-major
    order), and bitwise the op's."""
    kernel = library_kernel("fixed")
    x = [randn((2, NK, 4, D), seed, requires_grad=True).transpose(1, 2) for seed in (1, 2, 3)]
    assert not any(t.is_contiguous() for t in x)
    o = kernel(*x)
    d_o = randn(o.shape, 4)
    grads = torch.autograd.grad(o, x, d_o)
    assert op_runs == []
    want_o = op_call(*x, kernel)[0]
    want = torch.autograd.grad(want_o, x, d_o)
    assert o.is_contiguous() and o.shape == x[0].shape and torch.equal(o, want_o)
    for got, op, t in zip(grads, want, x):
        assert got.is_contiguous() and got.shape == t.shape and torch.equal(got, op)


def test_no_graph_without_grad_mode(op_runs):
    kernel = library_kernel("fixed")
    x = dense_inputs(4, 4, NK, requires_grad=True)
    with torch.no_grad():
        o = kernel(*x)
    with torch.inference_mode():
        o_inference = kernel(*x)
    assert op_runs == [] and not o.requires_grad and not o_inference.requires_grad
    assert torch.equal(o, o_inference)


def varlen_inputs(dtype=torch.float32, requires_grad=False):
    lengths_q, lengths_k = [5, 1, 0, 17], [9, 1, 0, 30]
    cu_q = torch.tensor(np.cumsum([0] + lengths_q), dtype=torch.int32)
    cu_k = torch.tensor(np.cumsum([0] + lengths_k), dtype=torch.int32)
    q = randn((sum(lengths_q), 4, D), 5, dtype, requires_grad)
    k, v = (randn((sum(lengths_k), 2, D), seed, dtype, requires_grad) for seed in (6, 7))
    return q, k, v, cu_q, cu_k


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_eager_path_gives_bitwise_the_ops_outputs_and_gradients(dtype, op_runs):
    kernel = library_kernel("causal")
    q, k, v, cu_q, cu_k = varlen_inputs(dtype, requires_grad=True)
    o, lse = attnc.torch.attention_varlen_with_lse(q, k, v, cu_q, cu_k, kernel=kernel)
    d_o = randn(o.shape, 8, dtype)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    assert op_runs == []
    want_o, want_lse = torch.ops.attnc.attention_varlen(q, k, v, cu_q, cu_k, kernel.id, 0.0)
    want = torch.autograd.grad(want_o, (q, k, v), d_o)
    assert len(op_runs) == 2
    assert torch.equal(o, want_o) and torch.equal(lse, want_lse)
    for got, op in zip(grads, want):
        assert torch.equal(got, op)


# ---- where the eager path steps aside -----------------------------------------------


class RecordOps(TorchDispatchMode):
    """Records the name of every operator that reaches the dispatcher's Python key."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class RecordFunctions(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.functions = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.functions.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_ops_forward_and_backward():
    kernel = library_kernel("fixed")
    x = dense_inputs(8, 2, 7, requires_grad=True)
    o = kernel(*x)
    d_o = randn(o.shape, 4)
    want = torch.autograd.grad(o, x, d_o)
    with RecordOps() as mode:
        o_seen = kernel(*x)
        grads = torch.autograd.grad(o_seen, x, d_o)
    assert "attnc.attention.default" in mode.ops and "attnc.attention_backward.default" in mode.ops
    assert torch.equal(o_seen, o)
    for got, eager in zip(grads, want):
        assert torch.equal(got, eager)


def test_a_dispatch_mode_sees_the_backward_of_an_eager_forward():
    kernel = library_kernel("fixed")
    x = dense_inputs(4, 4, NK, requires_grad=True)
    o = kernel(*x)
    with RecordOps() as mode:
        o.sum().backward()
    assert "attnc.attention_backward.default" in mode.ops


def test_a_dispatch_mode_sees_the_varlen_ops():
    kernel = library_kernel("causal")
    q, k, v, cu_q, cu_k = varlen_inputs(requires_grad=True)
    with RecordOps() as mode:
        o = attnc.torch.attention_varlen(q, k, v, cu_q, cu_k, kernel=kernel)
        o.sum().backward()
    assert "attnc.attention_varlen.default" in mode.ops
    assert "attnc.attention_varlen_backward.default" in mode.ops


def test_a_dispatch_mode_sees_the_varlen_backward_of_an_eager_forward(op_runs):
    kernel = library_kernel("causal")
    q, k, v, cu_q, cu_k = varlen_inputs(requires_grad=True)
    o = attnc.torch.attention_varlen(q, k, v, cu_q, cu_k, kernel=kernel)
    assert op_runs == []  # the forward took the eager path
    with RecordOps() as mode:
        o.sum().backward()
    assert "attnc.attention_varlen_backward.default" in mode.ops
    assert "attnc.attention_backward.default" not in mode.ops


def test_a_function_mode_sees_the_op(op_runs):
    kernel = library_kernel("fixed")
    with RecordFunctions() as mode:
        kernel(*dense_inputs(4, 4, NK))
    assert "attnc.attention" in mode.functions and op_runs == [kernel.id]


def test_tensor_subclasses_take_the_op(op_runs):
    class Tagged(torch.Tensor):
        pass

    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(4, 4, NK)
    o = kernel(q.as_subclass(Tagged), k, v)
    assert op_runs == [kernel.id]
    assert torch.equal(o.as_subclass(torch.Tensor), kernel(q, k, v))


def test_compile_fullgraph_puts_the_op_in_the_graph_and_matches_eager(op_runs):
    kernel = library_kernel("fixed")
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(lambda q, k, v: kernel(q, k, v) * 2, fullgraph=True, backend=backend)
    x = dense_inputs(8, 2, 7)
    got = compiled(*x)
    assert len(graphs) == 1
    targets = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
    assert {torch.ops.attnc.attention, torch.ops.attnc.attention.default} & set(targets), targets
    assert op_runs  # the graph ran the op
    assert torch.equal(got, kernel(*x) * 2)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:FutureWarning")
@pytest.mark.parametrize("context", ["dispatch mode", "function mode", "forward AD", "profiler", "vmap", "jit trace",
                                     "subclass", "meta"])
def test_the_eager_path_steps_aside(context):
    q, k, v = dense_inputs(4, 4, NK)
    eager = attnc.torch._eager
    assert eager(q, k, v)
    if context == "dispatch mode":
        with RecordOps():
            assert not eager(q, k, v)
    elif context == "function mode":
        with RecordFunctions():
            assert not eager(q, k, v)
    elif context == "forward AD":
        with fwAD.dual_level():
            assert not eager(q, k, v)
    elif context == "profiler":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            assert not eager(q, k, v)
    elif context == "vmap":
        seen = []
        torch.func.vmap(lambda x: seen.append(eager(x, x, x)) or x)(q)
        assert seen == [False]
    elif context == "jit trace":
        seen = []
        torch.jit.trace(lambda x: seen.append(eager(x, x, x)) or x * 1, (q,), check_trace=False)
        assert seen == [False]
    elif context == "subclass":
        assert not eager(q, k, torch.nn.Parameter(v))
    elif context == "meta":
        assert not eager(q.to("meta"), k, v)
    assert eager(q, k, v)


def test_a_failing_eager_call_reports_what_the_checks_say(op_runs):
    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(4, 4, NK)
    with pytest.raises(attnc.AttncError) as e:
        kernel(q, k[:, :, :-1], v)
    assert e.value.status_name == "ATTNC_ERROR_SHAPE"
    assert "'v' has shape [2, 4, 45, 16] but 'k' has [2, 4, 44, 16]" in str(e.value)
    assert op_runs == []  # the checks caught it before the op


# ---- out= ---------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_out_is_written_in_place_with_the_ops_bits(case, op_runs):
    hq, hkv, nq, dtype = case
    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(hq, hkv, nq, dtype)
    out = torch.full(q.shape, float("nan"), dtype=dtype)
    assert kernel(q, k, v, out=out) is out
    assert attnc.torch.attention(q, k, v, kernel, 0.3, out=out) is out
    assert op_runs == []  # the runtime wrote into out: no op, no allocation of O
    want, _ = op_call(q, k, v, kernel, 0.3)
    assert torch.equal(out, want)


def test_out_with_strides_attnc_cannot_write_is_copied_into():
    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(4, 4, NK)
    base = torch.zeros((2, 4, NK, 2 * D))
    out = base[..., ::2]  # every other column: a stride attnc's O cannot have, or can (either way right)
    attnc.torch.attention(q, k, v, kernel, out=out)
    assert torch.equal(out, kernel(q, k, v))
    assert torch.count_nonzero(base[..., 1::2]) == 0  # nothing written between out's columns


def test_out_under_compile_matches_eager():
    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(4, 2, 20)
    out = torch.empty(q.shape)
    fn = torch.compile(lambda q, k, v, o: attnc.torch.attention(q, k, v, kernel, out=o), fullgraph=True)
    fn(q, k, v, out)
    assert torch.equal(out, kernel(q, k, v))


def test_out_errors():
    kernel = library_kernel("fixed")
    q, k, v = dense_inputs(4, 4, NK)
    with pytest.raises(attnc.AttncError, match=r"'out' must have q's shape \[2, 4, 45, 16\]"):
        kernel(q, k, v, out=torch.empty(2, 4, NK, D + 1))
    with pytest.raises(attnc.AttncError, match="dtype torch.float32"):
        kernel(q, k, v, out=torch.empty(q.shape, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="'out' is a ndarray"):
        attnc.torch.attention(q, k, v, kernel, out=np.empty(q.shape, dtype=np.float32))
    q.requires_grad_(True)
    with pytest.raises(RuntimeError, match="out= does not support automatic differentiation"):
        kernel(q, k, v, out=torch.empty(q.shape))
    with torch.no_grad():
        kernel(q, k, v, out=torch.empty(q.shape))


def test_numpy_out():
    kernel = library_kernel("fixed")
    q, k, v = (x.numpy() for x in dense_inputs(4, 2, 20))
    out = np.full(q.shape, np.nan, dtype=np.float32)
    assert kernel(q, k, v, out=out) is out
    assert np.array_equal(out, kernel(q, k, v))
    with pytest.raises(attnc.AttncError, match="'out' must be a float32 numpy array of q's shape"):
        kernel(q, k, v, out=np.empty(q.shape, dtype=np.float64))
    frozen = np.empty(q.shape, dtype=np.float32)
    frozen.flags.writeable = False
    with pytest.raises(attnc.AttncError, match="read-only"):
        kernel(q, k, v, out=frozen)


def test_last_call_brackets_the_runtime_inside_the_python_call():
    """attnc._attnc.last_call() (bench/python_overhead.py's split of a call) gives when the
    last run_* call entered and left the C ABI, on time.monotonic_ns's clock: within the Python
    call that made it, for torch, numpy and the backward alike."""
    kernel = library_kernel("local")
    q, k, v = dense_inputs(2, 2, NK)
    for call in (lambda: kernel(q, k, v), lambda: kernel(q.numpy(), k.numpy(), v.numpy()),
                 lambda: attnc.torch.attention_with_lse(q, k, v, kernel)):
        begin = time.monotonic_ns()
        call()
        end = time.monotonic_ns()
        enter, leave = attnc._attnc.last_call()
        assert begin <= enter <= leave <= end
    before = attnc._attnc.last_call()
    d_q, _, _ = kernel.backward(*(x.numpy() for x in (q, k, v)), *kernel.forward(q.numpy(), k.numpy(), v.numpy()),
                                q.numpy())
    assert attnc._attnc.last_call()[0] > before[1]
    assert np.isfinite(d_q).all()
