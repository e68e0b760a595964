"""What calling attnc from Python costs over calling its C ABI directly.

    python bench/python_overhead.py [--n 64 4096] [--threads 1] [--cold] [--clock wall|cpu]
                                    [--seconds S] [--modes NAME ...]
    python bench/python_overhead.py --steps

For each n, on [1, 8, n, 64] float32 with the *fixed* pattern (l=128, c=8), in one
process, rounds that alternate between:

  C              attnc_run_forward through ctypes on preallocated buffers (O and lse
                 written in place; ctypes adds about a microsecond of its own)
  C, no lse      the same with lse = NULL (what a numpy call asks for)
  C, fresh O     the same into an O from np.empty at each call: what a C caller that
                 allocates its output pays (malloc's pages, and O's place in the caches)
  extension      attnc._attnc.run_forward on preallocated torch tensors: the 5 DLPack
                 conversions (torch._C._to_dlpack, as attnc.torch passes) and the GIL release
  extension, fresh O
                 the same on O and lse from torch.empty at each call: what allocating
                 the outputs costs (and first touching them, where the allocator hands
                 out pages the process has not touched yet)
  numpy          kernel(q, k, v) on numpy arrays (allocates O)
  torch          kernel(q, k, v) on tensors: in eager mode attnc.torch calls the op's
                 implementation (no custom-op dispatch); O allocated, no lse (as 'C, no lse')
  torch, out=    kernel(q, k, v, out=o): O written into a preallocated tensor (no
                 allocation; the same work as 'C, no lse')
  numpy, out=    the same on numpy arrays
  torch+autograd the same with q, k, v requiring grad (O and lse, the autograd node and
                 the saved tensors; forward only)
  op             torch.ops.attnc.attention(q, k, v, id, 0.0): the custom op through
                 torch.library's dispatch (what traced graphs call)
  op+autograd    the same with q, k, v requiring grad

Each round runs every mode once, in a random order. Prints each mode's median time per
call, the median over rounds of its difference from its C counterpart's in the same round
(with the interquartile range of those differences), and the difference of the two modes'
first quartiles (robust where other work on the machine slows a quarter of the calls or
more). For the modes that go through the extension it also prints the split of each call
(wall clock only, from attnc._attnc.last_call(), when the call entered and left the C ABI):
`before` and `after`, the call's time in the layers before and after the runtime, and `in C`,
the runtime's own time, to compare with the C modes'. The layers' figure is free of the kernel's run-to-run noise
(hundreds of microseconds at n = 4096), and a kernel that runs slower on a fresh O (its
pages faulted in, or not in the caches) shows in `in C`, as it does in 'C, fresh O'.
At small n the kernel's work is tiny and the differences are the layers' costs; at
n = 4096 the kernel takes milliseconds and the differences are the same layers plus noise
(pairing within rounds and the median of many rounds keep that noise small; raise
--seconds on a busy machine).

At n = 4096 the layers cost more than at n = 64 because they run with cold caches: the
kernel streams Q, K, V and O (32 MiB) through the caches, evicting the interpreter's and
the dispatcher's working set, and every layer before and after the next call misses.
--cold reproduces that at any n: each timed call follows a sweep over 64 MiB (untimed),
so at n = 64 the differences are the layers' cold costs without the kernel's noise.
--clock cpu times the process's CPU time instead of the wall clock: on a machine shared
with other work, time spent descheduled is left out (with --threads 1 attnc runs on one
core, so the two agree on an idle machine).

--steps times, instead, single steps of what a call does before the runtime is entered, on
[1, 8, 64, 64] tensors, each after a 64 MiB sweep (cold) and back to back (warm), in a random
order, median of 400 each: what the floor of a cold call is made of.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pathlib
import random
import statistics
import time

import numpy as np
import torch

import attnc
import attnc.torch

# The modes that ask for no log-sum-exp, compared with the C call that writes none.
NO_LSE = {"numpy", "torch", "torch, out=", "numpy, out="}

PATTERN = pathlib.Path(__file__).resolve().parents[1] / "patterns" / "fixed.attn"


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("shape", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4)]


class Options(ctypes.Structure):
    _fields_ = [("scale", ctypes.c_float), ("num_threads", ctypes.c_int32)]


def c_tensor(a: np.ndarray) -> Tensor:
    shape = list(a.shape) + [1] * (4 - a.ndim)
    strides = [s // a.itemsize for s in a.strides] + [1] * (4 - a.ndim)
    return Tensor(a.ctypes.data, 0, (ctypes.c_int64 * 4)(*shape), (ctypes.c_int64 * 4)(*strides))


def quartile(values: list) -> float:
    """The first quartile: other work on the machine only ever adds time, so the faster calls
    are the undisturbed ones."""
    return statistics.quantiles(values, n=4)[0] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[64, 4096])
    parser.add_argument("--threads", type=int, default=1, help="attnc's worker threads (0: every core)")
    parser.add_argument("--seconds", type=float, default=4.0, help="time per n")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall: time.perf_counter; cpu: the process's CPU time (for busy machines)")
    parser.add_argument("--cold", action="store_true",
                        help="evict the caches (a 64 MiB sweep, untimed) before each timed call")
    parser.add_argument("--modes", nargs="+", metavar="NAME",
                        help="run only these modes (C and, for numpy and torch, 'C, no lse' are always run)")
    parser.add_argument("--steps", action="store_true",
                        help="time single steps of a call, cold and warm, instead of the modes")
    args = parser.parse_args()
    if args.steps:
        steps()
        return

    lib = ctypes.CDLL(os.path.join(os.path.dirname(attnc.__file__), "libattnc.so"))
    lib.attnc_run_forward.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(Tensor)] * 5 + [ctypes.POINTER(Options)]
    kernel = attnc.compile(PATTERN, l=128, c=8)
    kernel.num_threads = args.threads
    options = Options(0.0, args.threads)

    print(f"torch {torch.__version__}, attnc threads {args.threads}, torch threads {torch.get_num_threads()}, "
          f"{args.clock} clock" + (", cold caches" if args.cold else "") +
          ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    # monotonic_ns: CLOCK_MONOTONIC, the clock attnc._attnc.last_call() reports in
    clock = time.monotonic_ns if args.clock == "wall" else time.process_time_ns
    # 64 MiB, past any L3 this runs on; numpy's one thread, so that no OpenMP worker spins
    # on into the timed call (which the cpu clock would count).
    sweep = np.ones(16 << 20, dtype=np.float32) if args.cold else None
    for n in args.n:
        shape = (1, 8, n, 64)
        q, k, v = (torch.randn(shape) for _ in range(3))
        qn, kn, vn = (x.numpy() for x in (q, k, v))
        qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
        o, lse = torch.empty(shape), torch.empty(shape[:3])
        o2 = torch.empty(shape)  # out= of its own (o is the C call's)
        on2 = o2.numpy()
        cq, ck, cv, co, cl = (c_tensor(x) for x in (qn, kn, vn, o.numpy(), lse.numpy()))
        pointers = [ctypes.byref(t) for t in (cq, ck, cv, co, cl)]
        address = kernel._handle.address

        def c_call():
            assert lib.attnc_run_forward(address, *pointers, ctypes.byref(options)) == 0

        def c_call_no_lse():
            assert lib.attnc_run_forward(address, *pointers[:4], None, ctypes.byref(options)) == 0

        def c_call_fresh_o():
            out = np.empty(shape, dtype=np.float32)  # (the descriptor does not keep it alive)
            assert lib.attnc_run_forward(address, *pointers[:3], ctypes.byref(c_tensor(out)), None,
                                         ctypes.byref(options)) == 0
            return out

        handle = kernel._handle
        to_dlpack = torch._C._to_dlpack

        def fresh_outputs():
            attnc._attnc.run_forward(handle, q, k, v, torch.empty(shape), torch.empty(shape[:3]), 0.0, args.threads,
                                     to_dlpack)

        modes = {
            "C": c_call,
            "C, no lse": c_call_no_lse,
            "C, fresh O": c_call_fresh_o,
            "extension": lambda: attnc._attnc.run_forward(handle, q, k, v, o, lse, 0.0, args.threads, to_dlpack),
            "extension, fresh O": fresh_outputs,
            "numpy": lambda: kernel(qn, kn, vn),
            "torch": lambda: kernel(q, k, v),
            "torch, out=": lambda: kernel(q, k, v, out=o2),
            "numpy, out=": lambda: kernel(qn, kn, vn, out=on2),
            "torch+autograd": lambda: kernel(qg, kg, vg),
            "op": lambda: torch.ops.attnc.attention(q, k, v, kernel.id, 0.0),
            "op+autograd": lambda: torch.ops.attnc.attention(qg, kg, vg, kernel.id, 0.0),
        }
        if args.modes:
            unknown = set(args.modes) - set(modes)
            if unknown:
                parser.error(f"unknown modes {sorted(unknown)}; known: {list(modes)}")
            keep = {"C", *args.modes} | ({"C, no lse", "C, fresh O"} if set(args.modes) & NO_LSE else set())
            modes = {name: f for name, f in modes.items() if name in keep}
        for f in modes.values():  # warm up: row blocks for n, allocator, dispatch caches
            for _ in range(3):
                f()
        start = time.perf_counter()
        c_call()
        per_call = time.perf_counter() - start
        calls = 1 if args.cold else max(1, int(0.002 / max(per_call, 1e-7)))  # about 2 ms of calls per sample
        samples = {name: [] for name in modes}
        # (before, in C, after) in us per call, for the modes through the extension
        split = {name: [] for name in modes if not name.startswith("C")} if args.clock == "wall" else {}
        last_call = attnc._attnc.last_call
        order = list(modes.items())
        rng = random.Random(n)
        deadline = time.perf_counter() + args.seconds
        while time.perf_counter() < deadline:
            rng.shuffle(order)
            for name, f in order:
                if args.cold:
                    np.add(sweep, 1.0, out=sweep)
                parts = [0, 0, 0]
                t0 = clock()
                if name in split:
                    for _ in range(calls):
                        begin = clock()
                        f()
                        end = clock()
                        enter, leave = last_call()
                        parts[0] += enter - begin
                        parts[1] += leave - enter
                        parts[2] += end - leave
                else:
                    for _ in range(calls):
                        f()
                samples[name].append((clock() - t0) / calls / 1e3)
                if name in split:
                    split[name].append([p / calls / 1e3 for p in parts])
        print(f"n = {n}: {len(samples['C'])} rounds of {calls} calls per mode")
        for name, values in samples.items():
            line = f"  {name:<18} {statistics.median(values):10.1f} us/call"
            if not name.startswith("C"):
                # numpy calls and torch calls that record no graph ask for no log-sum-exp: their C
                # counterpart is the call without it.
                base = "C, no lse" if name in NO_LSE else "C"
                diffs = [a - b for a, b in zip(values, samples[base])]
                q1, mid, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
                low = quartile(values) - quartile(samples[base])
                line += f"   {mid:+8.1f} us over {base} (IQR {q1:+.1f} .. {q3:+.1f}; lower quartiles {low:+.1f})"
            print(line)
        if split:
            print("  each call split at the C ABI (medians over rounds): the layers before it, the runtime, "
                  "the layers after it")
            for name, rows in split.items():
                before, in_c, after = (statistics.median(r[i] for r in rows) for i in range(3))
                layers = [r[0] + r[2] for r in rows]
                q1, mid, q3 = statistics.quantiles(layers, n=4) if len(layers) > 1 else (layers[0],) * 3
                print(f"  {name:<18} before {before:7.1f} us, in C {in_c:10.1f} us, after {after:7.1f} us; "
                      f"before + after {mid:7.1f} us (IQR {q1:.1f} .. {q3:.1f})")


def steps() -> None:
    """--steps: single steps of a call before the C ABI, cold and warm."""
    import attnc.torch as eager

    q = torch.randn(1, 8, 64, 64)
    shape = q.shape
    sweep = np.ones(16 << 20, dtype=np.float32)
    cases = {
        "a Python call that does nothing": lambda: None,
        "one mode check (torch._C._is_torch_function_mode_enabled)": torch._C._is_torch_function_mode_enabled,
        "q.requires_grad": lambda: q.requires_grad,
        "all the eager path's checks (attnc.torch._eager)": lambda: eager._eager(q, q, q),
        "torch.empty(shape, dtype=q.dtype)": lambda: torch.empty(shape, dtype=q.dtype),
        "torch.empty_like(q, memory_format=torch.contiguous_format)":
            lambda: torch.empty_like(q, memory_format=torch.contiguous_format),
        "np.empty(shape, np.float32)": lambda: np.empty(shape, np.float32),
        "torch._C._to_dlpack(q)": lambda: torch._C._to_dlpack(q),
    }
    print(f"torch {torch.__version__}, median of 400 per step, us; load average "
          "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    rng = random.Random(0)
    for cold in (True, False):
        times = {name: [] for name in cases}
        names = list(cases)
        for _ in range(400):
            rng.shuffle(names)
            for name in names:
                if cold:
                    np.add(sweep, 1.0, out=sweep)
                t0 = time.perf_counter_ns()
                cases[name]()
                times[name].append((time.perf_counter_ns() - t0) / 1e3)
        print("cold (after a 64 MiB sweep)" if cold else "warm")
        for name, values in times.items():
            print(f"  {name:<60} {statistics.median(values):8.1f}")


if __name__ == "__main__":
    main()
