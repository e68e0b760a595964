#!/usr/bin/env python3
"""attnc's cuda target against FlexAttention and SDPA on one GPU: one process,
one table (docs/benchmarks.md, "On a GPU"). scripts/gpu-check.sh runs it.

attnc is called through its C ABI (libattnc's attnc_run_forward_on and
attnc_run_backward_on, loaded with ctypes from --lib-dir, kernels from
libattnc_jit) on torch's CUDA tensors and current stream, so the table needs
only a runtime-only build and torch. Peers on the same tensors:
flex_attention (torch.compile'd, its block mask built once outside the
timing, from the same mask_mods as bench/peers.py) and
scaled_dot_product_attention with the pattern as a boolean mask (where it
fits in memory) and with is_causal (the dense causal flash kernel, the
speed of light for dense work).

Times are by CUDA events after a warm-up: the median over --repeat batches of
--inner calls queued back to back, divided by --inner (the GPU's time; the
host's per-call cost hides behind it unless it is the longer). The "attnc
call ms" column is one call waited for (--inner 1): what a caller that
synchronises sees, the host's checks and launches included.
Effective TFLOP/s = 4 nnz d heads / time forward, 10 nnz d heads / time for
the backward alone (fwd+bwd time minus the forward's), nnz the pattern's
pairs per head counted from the mask_mod on the GPU. flex exec/useful: the
pairs its 128 x 128 blocks compute over nnz (attnc's: `attnc emit P.attn
--stage cuda --n N`, 1.10 / 1.50 / 1.12 / 1.35 / 1.00 on these patterns at
n = 16384, 1.00-1.13 counting what its warps skip). Each attnc row also
reports its largest difference from flex_attention's O, as a check of both.

  python3 bench/peers_gpu.py --lib-dir build-gpu --n 16384,65536 --d 64,128

With --variants 0,4 it times the forward's variants instead (0 the default,
1-3 of bf16 at d <= 64, 4 and 5 the wgmma kernels on compute capability 9.0), one
process, switched with attnc_internal_cuda_forward_variant, each row with
its largest difference from the default's O and log-sum-exp; with
--bwd-variants 0,1 also the backward's (1: wgmma), each against the
default's dQ, dK and dV.

With --modifiers it times the score modifiers the GPU runs against the same
pattern without them (issue 44's target: at most 10% over the plain
pattern): fixed against capped_fixed (its logits soft-capped, Gemma 2's),
local against sink_window (a sink logit per head, gpt-oss's) and against
alibi_local (ALiBi's slopes), the float inputs' gradients in the backward,
the same sets, forward and backward, each
row with its largest difference from the plain pattern's O (the cap and the
sink change it: a size, not an error).
"""
import argparse
import ctypes
import os
import statistics
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import ATTNC_PARAMS, mask_mods, random_blocks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PATTERNS = os.path.join(HERE, "..", "patterns")


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("shape", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class Device(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("index", ctypes.c_int32), ("stream", ctypes.c_void_p)]


class Input(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("values", Tensor)]


class Call(ctypes.Structure):
    """attnc_call (ABI 10), filled by attnc_call_init."""
    _fields_ = [("size", ctypes.c_size_t), ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p), ("d_o", ctypes.c_void_p),
                ("d_q", ctypes.c_void_p), ("d_k", ctypes.c_void_p), ("d_v", ctypes.c_void_p),
                ("device", ctypes.c_void_p), ("first_query", ctypes.c_int64), ("varlen", ctypes.c_void_p),
                ("inputs", ctypes.c_void_p), ("num_inputs", ctypes.c_int64), ("options", ctypes.c_void_p),
                ("d_inputs", ctypes.c_void_p), ("num_d_inputs", ctypes.c_int64),
                ("key_positions", ctypes.c_void_p)]


class JitOptions(ctypes.Structure):
    _fields_ = [("defines", ctypes.POINTER(ctypes.c_char_p)), ("num_defines", ctypes.c_int32),
                ("pattern", ctypes.c_char_p), ("cache_dir", ctypes.c_char_p), ("no_cache", ctypes.c_int32),
                ("backend", ctypes.c_char_p)]


DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


class Attnc:
    """libattnc's GPU calls on torch tensors."""

    def __init__(self, lib_dir):
        def find(name):
            for sub in ("", "runtime", "jit", "lib"):
                path = os.path.join(lib_dir, sub, name)
                if os.path.exists(path):
                    return path
            raise FileNotFoundError(f"{name} not under {lib_dir}")
        self.rt = ctypes.CDLL(find("libattnc.so"), mode=ctypes.RTLD_GLOBAL)
        self.jit = ctypes.CDLL(find("libattnc_jit.so"))
        self.rt.attnc_last_error.restype = ctypes.c_char_p

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.rt.attnc_last_error().decode()}")

    def compile(self, name, params):
        defines = [f"{k}={v}".encode() for k, v in params.items() if k != "seed"]
        arr = (ctypes.c_char_p * max(1, len(defines)))(*defines)
        opts = JitOptions(arr, len(defines), None, None, 0, b"fused")
        kernel = ctypes.c_void_p()
        path = os.path.join(PATTERNS, name + ".attn").encode()
        self.check(self.jit.attnc_jit_compile_file(path, ctypes.byref(opts), ctypes.byref(kernel)), "compile")
        return kernel

    @staticmethod
    def tensor(t):
        shape = list(t.shape) + [1] * (4 - t.dim())
        strides = list(t.stride()) + [1] * (4 - t.dim())
        return Tensor(t.data_ptr(), DTYPES[t.dtype], (ctypes.c_int64 * 4)(*shape), (ctypes.c_int64 * 4)(*strides))

    def device(self, t):
        return Device(1, t.device.index or 0, torch.cuda.current_stream(t.device).cuda_stream)

    def forward(self, kernel, q, k, v, o, lse):
        dev, tq, tk, tv, to, tl = self.device(q), *map(self.tensor, (q, k, v, o, lse))
        self.check(self.rt.attnc_run_forward_on(kernel, ctypes.byref(dev), ctypes.byref(tq), ctypes.byref(tk),
                                                ctypes.byref(tv), ctypes.byref(to), ctypes.byref(tl), None),
                   "attnc_run_forward_on")

    def variant(self, v):
        """Forces the forward's variant (-1: none forced)."""
        self.check(self.rt.attnc_internal_cuda_forward_variant(ctypes.c_int32(v)), f"forward variant {v}")

    def bwd_variant(self, v):
        """Forces the backward's variant (-1: none forced)."""
        self.check(self.rt.attnc_internal_cuda_backward_variant(ctypes.c_int32(v)), f"backward variant {v}")

    def backward(self, kernel, q, k, v, o, do, lse, dq, dk, dv):
        ts = [self.tensor(t) for t in (q, k, v, o, do, lse, dq, dk, dv)]
        dev = self.device(q)
        self.check(self.rt.attnc_run_backward_on(kernel, ctypes.byref(dev), *[ctypes.byref(t) for t in ts], None),
                   "attnc_run_backward_on")

    def call(self, kernel, q, k, v, o, lse, inputs, grads=None):
        """attnc_forward (grads None) or attnc_backward (grads: (do, dq, dk, dv, {name: d_input})) with the
        float inputs {name: tensor}, on q's device (the CPU for CPU tensors)."""
        c = Call()
        self.rt.attnc_call_init(ctypes.byref(c))
        if c.size != ctypes.sizeof(Call):
            raise RuntimeError(f"attnc_call is {c.size} bytes in libattnc, {ctypes.sizeof(Call)} here")
        keep = [self.tensor(t) for t in (q, k, v, o, lse)]
        c.q, c.k, c.v, c.o, c.lse = (ctypes.addressof(t) for t in keep)
        dev = self.device(q) if q.is_cuda else None
        c.device = ctypes.addressof(dev) if dev is not None else None
        given = (Input * max(1, len(inputs)))(*[Input(name.encode(), self.tensor(t)) for name, t in inputs.items()])
        c.inputs, c.num_inputs = ctypes.addressof(given), len(inputs)
        if grads is None:
            self.check(self.rt.attnc_forward(kernel, ctypes.byref(c)), "attnc_forward")
            return
        do, dq, dk, dv, d_inputs = grads
        more = [self.tensor(t) for t in (do, dq, dk, dv)]
        c.d_o, c.d_q, c.d_k, c.d_v = (ctypes.addressof(t) for t in more)
        out = (Input * max(1, len(d_inputs)))(*[Input(name.encode(), self.tensor(t)) for name, t in d_inputs.items()])
        c.d_inputs, c.num_d_inputs = ctypes.addressof(out), len(d_inputs)
        self.check(self.rt.attnc_backward(kernel, ctypes.byref(c)), "attnc_backward")


def bigbird_cuda(n, b=64, g=2, r=3, seed=1234):
    """bench/peers.py's bigbird with its random-block table on the GPU."""
    nb = (n + b - 1) // b
    rand = torch.zeros(nb, nb, dtype=torch.bool)
    for qb in range(nb):
        rand[qb, random_blocks(seed, qb, r, nb)] = True
    rand = rand.cuda()
    return lambda bb, h, i, j: ((i // b - 1 <= j // b) & (j // b <= i // b + 1)) | (j < g * b) | (
        i < g * b) | rand[i // b, j // b]


def mask_mod(name, n):
    return bigbird_cuda(n) if name == "bigbird" else mask_mods()[name]


def count_pairs(mod, n, device):
    """nnz per head, from the mask_mod over row chunks on the GPU."""
    total, step = 0, max(1, (1 << 26) // n)
    j = torch.arange(n, device=device)[None, :]
    zero = torch.zeros((), dtype=torch.int64, device=device)
    for i0 in range(0, n, step):
        i = torch.arange(i0, min(n, i0 + step), device=device)[:, None]
        total += int(mod(zero, zero, i, j).sum())
    return total


def gpu_ms(fn, repeat, inner=None):
    """Milliseconds of one call on the GPU: the median over `repeat` batches of `inner` calls queued back to back
    between two CUDA events (the host runs ahead, so what is timed is the GPU's work, not the host's per-call
    cost, as long as that is the shorter). inner = 1 times single calls, each waited for: the latency a caller
    sees, host included."""
    inner = INNER if inner is None else inner
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    return statistics.median(times)


INNER = 10


def variants_table(args, at, dev):
    """The forward's variants side by side, checked against the default."""
    major, minor = torch.cuda.get_device_capability(dev)
    print("| pattern | n | d | variant | fwd ms | TFLOP/s | vs default | max |O - O_0| | max |lse - lse_0| |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for n in [int(x) for x in args.n.split(",")]:
        for d in [int(x) for x in args.d.split(",")]:
            g = torch.Generator(device=dev).manual_seed(1)
            shape = (args.batch, args.heads, n, d)
            q, k, v = (torch.randn(shape, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(3))
            for name in args.patterns.split(","):
                flops = 4 * count_pairs(mask_mod(name, n), n, dev) * d * args.heads * args.batch
                kernel = at.compile(name, ATTNC_PARAMS[name])
                ref = None
                for var in [int(x) for x in args.variants.split(",")]:
                    if var >= 4 and (major, minor) != (9, 0):
                        print(f"| {name} | {n} | {d} | {var} | - | - | - | wgmma needs compute capability 9.0, "
                              f"this GPU is {major}.{minor} | - |", flush=True)
                        continue
                    o = torch.empty_like(q)
                    lse = torch.empty((args.batch, args.heads, n, 1), device=dev, dtype=torch.float32)
                    at.variant(var)
                    try:
                        ms = gpu_ms(lambda: at.forward(kernel, q, k, v, o, lse), args.repeat)
                    finally:
                        at.variant(-1)
                    torch.cuda.synchronize()
                    if ref is None:
                        ref = (ms, o, lse)
                    finite = torch.isfinite(ref[2])
                    do = (o.float() - ref[1].float()).abs().max().item()
                    dl = (lse[finite] - ref[2][finite]).abs().max().item() if finite.any() else 0.0
                    print(f"| {name} | {n} | {d} | {var} | {ms:.3f} | {flops / ms / 1e9:.1f} | {ref[0] / ms:.2f}x | "
                          f"{do:.2e} | {dl:.2e} |", flush=True)
                if args.bwd_variants:
                    backward_variants(args, at, kernel, q, k, v, flops, name, n, d, hopper=(major, minor) == (9, 0))
            del q, k, v
            torch.cuda.empty_cache()


def backward_variants(args, at, kernel, q, k, v, flops, name, n, d, hopper):
    """The backward's variants (forward: the default), timed alone (fwd+bwd minus fwd), against the default's
    gradients."""
    g = torch.Generator(device=q.device).manual_seed(2)
    do = torch.randn(q.shape, generator=g, device=q.device, dtype=q.dtype)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:3] + (1,), device=q.device, dtype=torch.float32)
    fwd_ms = gpu_ms(lambda: at.forward(kernel, q, k, v, o, lse), args.repeat)
    ref = None
    for var in [int(x) for x in args.bwd_variants.split(",")]:
        if var == 1 and not hopper:
            print(f"| {name} | {n} | {d} | bwd 1 | - | - | - | wgmma needs compute capability 9.0 | - |", flush=True)
            continue
        grads = [torch.empty_like(x) for x in (q, k, v)]

        def step():
            at.forward(kernel, q, k, v, o, lse)
            at.backward(kernel, q, k, v, o, do, lse, *grads)
        at.bwd_variant(var)
        try:
            ms = gpu_ms(step, args.repeat) - fwd_ms
        finally:
            at.bwd_variant(-1)
        torch.cuda.synchronize()
        if ref is None:
            ref = (ms, grads)
        diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(grads, ref[1]))
        print(f"| {name} | {n} | {d} | bwd {var} | {ms:.3f} | {2.5 * flops / ms / 1e9:.1f} | {ref[0] / ms:.2f}x | "
              f"max |dQ,dK,dV - default| {diff:.2e} | - |", flush=True)


# (plain pattern, its parameters; the pattern with a modifier, its parameters, its float inputs' maker)
MODIFIED = [
    ("fixed", {"l": 128, "c": 8}, "capped_fixed", {"l": 128, "c": 8, "cap": 20}, lambda heads, dev: {}),
    ("local", {"w": 512}, "sink_window", {"w": 512},
     lambda heads, dev: {"z": torch.linspace(-2.0, 3.0, heads, device=dev)}),
    ("local", {"w": 512}, "alibi_local", {"w": 512},
     lambda heads, dev: {"slope": 2.0 ** -torch.arange(1, heads + 1, dtype=torch.float32, device=dev)}),
]


def modifiers_table(args, at, dev):
    """Each modified pattern beside its plain one: forward, and backward alone (fwd+bwd minus fwd)."""
    print("| pattern | n | d | fwd ms | TFLOP/s | vs plain | bwd ms | TFLOP/s | vs plain | max |O - O_plain| |")
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    for n in [int(x) for x in args.n.split(",")]:
        for d in [int(x) for x in args.d.split(",")]:
            g = torch.Generator(device=dev).manual_seed(1)
            shape = (args.batch, args.heads, n, d)
            q, k, v, do = (torch.randn(shape, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(4))
            q = q * 4  # logits of tens: the cap bends them
            for plain, plain_params, modified, params, make in MODIFIED:
                flops = 4 * count_pairs(mask_mod(plain, n), n, dev) * d * args.heads * args.batch
                base = None
                for name, ps, floats in ((plain, plain_params, {}), (modified, params, make(args.heads, dev))):
                    kernel = at.compile(name, ps)
                    o = torch.empty_like(q)
                    lse = torch.empty((args.batch, args.heads, n, 1), device=dev, dtype=torch.float32)
                    grads = (do, torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
                             {key: torch.empty(x.shape, device=dev, dtype=torch.float32) for key, x in floats.items()})
                    fwd = lambda: at.call(kernel, q, k, v, o, lse, floats)  # noqa: E731

                    def step():
                        fwd()
                        at.call(kernel, q, k, v, o, lse, floats, grads)
                    f_ms = gpu_ms(fwd, args.repeat)
                    b_ms = gpu_ms(step, args.repeat) - f_ms
                    torch.cuda.synchronize()
                    if base is None:
                        base = (f_ms, b_ms, o.clone())
                    diff = (o.float() - base[2].float()).abs().max().item()
                    print(f"| {name} | {n} | {d} | {f_ms:.3f} | {flops / f_ms / 1e9:.1f} | {f_ms / base[0]:.3f} | "
                          f"{b_ms:.3f} | {2.5 * flops / b_ms / 1e9:.1f} | {b_ms / base[1]:.3f} | {diff:.2e} |",
                          flush=True)
            del q, k, v, do
            torch.cuda.empty_cache()


def main():
    global INNER
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib-dir", required=True, help="a build with libattnc.so and libattnc_jit.so")
    ap.add_argument("--n", default="16384,65536")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--inner", type=int, default=INNER,
                    help="calls queued between two events per timing (1: single calls, host included)")
    ap.add_argument("--patterns", default="fixed,strided,local,longformer,bigbird")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--variants", help="time these forward variants (e.g. 0,4) instead of the peers")
    ap.add_argument("--bwd-variants", help="with --variants: time these backward variants too (e.g. 0,1)")
    ap.add_argument("--modifiers", action="store_true",
                    help="time the soft cap and the sink against the same patterns without them instead")
    ap.add_argument("--sdpa-mask-max-n", type=int, default=32768,
                    help="largest n for SDPA with a boolean mask (n^2 bytes)")
    args = ap.parse_args()
    INNER = max(1, args.inner)
    torch._dynamo.config.recompile_limit = 1000
    torch._dynamo.config.cache_size_limit = 1000
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, bf16, batch {args.batch}, "
          f"heads {args.heads}", flush=True)
    at = Attnc(args.lib_dir)
    if args.variants:
        return variants_table(args, at, dev)
    if args.modifiers:
        return modifiers_table(args, at, dev)
    flex = torch.compile(flex_attention, dynamic=False)
    cols = ["pattern", "n", "d", "nnz/row", "attnc fwd ms", "TFLOP/s", "attnc call ms", "flex fwd ms", "TFLOP/s", "flex exec/useful",
            "attnc/flex", "attnc bwd ms", "TFLOP/s", "flex bwd ms", "TFLOP/s", "SDPA mask fwd ms",
            "SDPA causal TFLOP/s", "max |O - O_flex|"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols), flush=True)
    for n in [int(x) for x in args.n.split(",")]:
        for d in [int(x) for x in args.d.split(",")]:
            g = torch.Generator(device=dev).manual_seed(1)
            shape = (args.batch, args.heads, n, d)
            q, k, v, do = (torch.randn(shape, generator=g, device=dev, dtype=torch.bfloat16) for _ in range(4))
            causal_ms = gpu_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                               args.repeat)
            causal_tf = 4 * (n * (n + 1) // 2) * d * args.heads * args.batch / causal_ms / 1e9
            for name in args.patterns.split(","):
                mod = mask_mod(name, n)
                nnz = count_pairs(mod, n, dev)
                flops = 4 * nnz * d * args.heads * args.batch
                kernel = at.compile(name, ATTNC_PARAMS[name])
                o = torch.empty_like(q)
                lse = torch.empty((args.batch, args.heads, n, 1), device=dev, dtype=torch.float32)
                fwd = lambda: at.forward(kernel, q, k, v, o, lse)  # noqa: E731
                a_ms = gpu_ms(fwd, args.repeat)
                call_ms = gpu_ms(fwd, args.repeat, inner=1)
                cells = [name, str(n), str(d), f"{nnz / n:.0f}", f"{a_ms:.3f}", f"{flops / a_ms / 1e9:.1f}",
                         f"{call_ms:.3f}"]
                f_ms = None
                diff = "-"
                if not args.no_flex:
                    bm = create_block_mask(mod, None, None, n, n, device=dev)
                    f_ms = gpu_ms(lambda: flex(q, k, v, block_mask=bm), args.repeat)
                    executed = (100.0 - bm.sparsity()) / 100.0 * n * n
                    o_flex = flex(q, k, v, block_mask=bm)
                    fwd()
                    torch.cuda.synchronize()
                    diff = f"{(o.float() - o_flex.float()).abs().max().item():.2e}"
                    cells += [f"{f_ms:.3f}", f"{flops / f_ms / 1e9:.1f}", f"{executed / nnz:.2f}",
                              f"{f_ms / a_ms:.1f}x"]
                else:
                    cells += ["-"] * 4
                if not args.no_backward:
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

                    def fwdbwd():
                        at.forward(kernel, q, k, v, o, lse)
                        at.backward(kernel, q, k, v, o, do, lse, dq, dk, dv)
                    b_ms = gpu_ms(fwdbwd, args.repeat) - a_ms
                    cells += [f"{b_ms:.3f}", f"{2.5 * flops / b_ms / 1e9:.1f}"]
                    if f_ms is not None:
                        qg, kg, vg = (t.detach().clone().requires_grad_() for t in (q, k, v))

                        def flexfb():
                            out = flex(qg, kg, vg, block_mask=bm)
                            out.backward(do)
                        fb_ms = gpu_ms(flexfb, args.repeat) - f_ms
                        cells += [f"{fb_ms:.3f}", f"{2.5 * flops / fb_ms / 1e9:.1f}"]
                    else:
                        cells += ["-", "-"]
                else:
                    cells += ["-"] * 4
                if n <= args.sdpa_mask_max_n:
                    i = torch.arange(n, device=dev)[:, None]
                    j = torch.arange(n, device=dev)[None, :]
                    zero = torch.zeros((), dtype=torch.int64, device=dev)
                    mask = mod(zero, zero, i, j)
                    s_ms = gpu_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                  args.repeat)
                    del mask
                    cells.append(f"{s_ms:.3f}")
                else:
                    cells.append("-")
                cells += [f"{causal_tf:.0f}", diff]
                print("| " + " | ".join(cells) + " |", flush=True)
            del q, k, v, do
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
