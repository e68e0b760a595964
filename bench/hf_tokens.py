#!/usr/bin/env python3
"""Tokens per second of a Hugging Face transformers model, prefill and decode, with its attention
run by attnc (``attnc.transformers``) and by transformers' own ``sdpa`` and ``flex_attention``, on the
CPU. The model (`--size`): ``tiny``, examples/python/hf_long_generate.py's (a Llama built in code with
random weights: hidden 128, 4 layers, 4 query heads over 2 key/value heads of 32, vocabulary 256), or
``wide``, the same built wider (hidden 1024, 4 layers, 8 query heads over 2 key/value heads of 128, MLP
2816: the heads of a 1B-parameter model); batch 1, float32.

    build-d-venv/bin/python bench/hf_tokens.py [--n 4096 16384] [--decode 32] [--threads 2]
        [--impls attnc,attnc_local_global,attnc_local_global_cache,sdpa,flex_attention] [--repeats 2]
        [--size tiny|wide]

Implementations (``attn_implementation``, and the cache):
  attnc                     the model's own attention (causal) through attnc.transformers.register()
  attnc_local_global        a sparse model: attnc.transformers.register(name, pattern=...) with the
                            w = 512 most recent keys plus 8 global tokens (hf_long_generate.py's pattern)
  attnc_local_global_cache  the same model over attnc.transformers.PatternCache (the keys the pattern
                            still reads) instead of DynamicCache
  sdpa                      torch's scaled_dot_product_attention (dense causal)
  flex_attention            torch's flex_attention (compiled by torch.compile; causal BlockMask)
  floor                     what the rest of the model costs: an attention function that returns its
                            queries and a cache that keeps the prompt's keys and copies nothing more
                            (not attention: a bound on what any attention's decode step can reach)

For each n: prefill = one forward of an n-token prompt with a cache (``logits_to_keep=1``); decode =
`--decode` further tokens generated greedily, one forward each over the cache (transformers'
DynamicCache but for ``attnc_local_global_cache``).
prefill tok/s = n / the prefill's seconds; decode tok/s = 1 / the median seconds of a token. Each cell
is the best of `--repeats` rounds, each round running every implementation once in turn, so that
other processes' load falls on all alike (the first round compiles flex_attention's kernels for the
shape, and attnc's pattern if it is not in its cache). `same tokens` compares the generated tokens with sdpa's (the
sparse model computes another function, so it has none to compare). A failure is written into the
table, not skipped. torch runs on `--threads` threads and so does attnc (ATTNC_NUM_THREADS).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Optional

REPO = pathlib.Path(__file__).resolve().parents[1]


def load_example():
    path = REPO / "examples" / "python" / "hf_long_generate.py"
    spec = importlib.util.spec_from_file_location("hf_long_generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return head + (" (+ uncommitted changes)" if dirty else "")


PATTERN_CACHE = "_cache"  # the suffix of an implementation that generates over a PatternCache
FLOOR = "floor"


def register_floor() -> None:
    """The `floor` implementation: attention that returns its queries (no work), no mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    def attention(module, query, key, value, attention_mask, **kwargs):
        return query.transpose(1, 2).contiguous(), None

    AttentionInterface.register(FLOOR, attention)
    AttentionMaskInterface.register(FLOOR, lambda *args, **kwargs: None)


def floor_cache():
    """A cache that keeps the keys of its first update (the prompt's) and returns them ever after: no
    copy per token (the `floor` implementation's)."""
    from transformers.cache_utils import Cache, DynamicLayer

    class Layer(DynamicLayer):
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.keys, self.values = key_states, value_states
            return self.keys, self.values

    return Cache(layer_class_to_replicate=Layer)


def build(example, size: str, max_positions: int):
    """The model of `--size`, its weights seeded (the same for every implementation)."""
    if size == "tiny":
        return example.tiny_llama(max_positions=max_positions)
    import torch
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=example.VOCAB, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=max_positions,
        attention_dropout=0.0, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).float().eval()


def measure(example, torch, impls: List[str], n: int, decode: int, repeats: int,
            size: str = "tiny") -> Dict[str, Dict[str, object]]:
    """{impl: {"prefill_s", "token_s", "tokens", "first_run_s"} or {"error"}} at n: `repeats` rounds, each
    running every implementation once in turn (so that other processes' load falls on all of them
    alike), the best round of each kept: its fastest prefill, and its fastest median time per token."""
    import attnc.transformers

    ids = torch.randint(example.VOCAB, (1, n), generator=torch.Generator().manual_seed(0))
    models, out = {}, {}
    for impl in impls:
        models[impl] = build(example, size, n + decode + 1)
        models[impl].set_attn_implementation(impl.removesuffix(PATTERN_CACHE))
        out[impl] = {"prefill_s": float("inf"), "token_s": float("inf"), "tokens": None, "first_run_s": None}
    for _ in range(repeats):
        for impl in impls:
            r = out[impl]
            if "error" in r:
                continue
            start = time.perf_counter()
            try:
                cache = (attnc.transformers.PatternCache(impl.removesuffix(PATTERN_CACHE))
                         if impl.endswith(PATTERN_CACHE) else floor_cache() if impl == FLOOR else None)
                g = example.greedy(models[impl], ids, decode + 1, cache)  # the first token comes from the prefill
            except Exception as e:  # written into the table
                out[impl] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
                continue
            if r["first_run_s"] is None:
                r["first_run_s"] = time.perf_counter() - start
            r["prefill_s"] = min(r["prefill_s"], g["prefill_s"])
            r["token_s"] = min(r["token_s"], statistics.median(g["token_s"]))
            r["tokens"] = g["tokens"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--decode", type=int, default=32, help="tokens generated after the prompt")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--impls",
                        default="attnc,attnc_local_global,attnc_local_global_cache,sdpa,flex_attention,floor")
    parser.add_argument("--size", choices=["tiny", "wide"], default="tiny", help="the model (see above)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per cell; the best is reported")
    args = parser.parse_args()

    os.environ["ATTNC_NUM_THREADS"] = str(args.threads)
    import torch
    import transformers

    import attnc.transformers

    torch.set_num_threads(args.threads)
    example = load_example()
    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    attention = {"attnc": "causal (attnc)", "attnc_local_global": "local w=512 + 8 global (attnc)",
                 "attnc_local_global_cache": "local w=512 + 8 global (attnc), PatternCache",
                 FLOOR: "none (the rest of the model: no attention, no cache copy)",
                 "sdpa": "causal (SDPA)", "flex_attention": "causal (flex_attention, compiled)"}
    if "attnc" in impls:
        attnc.transformers.register("attnc")
    if FLOOR in impls:
        register_floor()
    if "attnc_local_global" in impls or "attnc_local_global_cache" in impls:
        attnc.transformers.register("attnc_local_global", pattern=example.LOCAL_GLOBAL)

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    results: Dict[tuple, Dict[str, object]] = {}
    for n in args.n:
        start = time.perf_counter()
        for impl, r in measure(example, torch, impls, n, args.decode, args.repeats, args.size).items():
            results[impl, n] = r
            if "error" in r:
                print(f"# {impl} n={n}: {r['error']}", file=sys.stderr, flush=True)
            else:
                print(f"# {impl} n={n}: prefill {r['prefill_s']:.3f} s, decode {r['token_s'] * 1e3:.2f} ms/token, "
                      f"first run {r['first_run_s']:.1f} s", file=sys.stderr, flush=True)
        print(f"# n={n}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Machine: {machine()}, {os.cpu_count()} CPUs; torch {torch.__version__}, transformers "
          f"{transformers.__version__}, Python {platform.python_version()}; attnc commit {commit()}; "
          f"torch and attnc threads {args.threads}; load average {load_before:.1f} at the start, {load:.1f} at the end")
    print()
    print("Command: `" + " ".join(shlex.quote(a) for a in [sys.executable.replace(str(REPO) + "/", "")] +
                                  [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:]) + "`")
    print()
    model = ("hidden 128, 4 layers, 4 query / 2 key-value heads of 32" if args.size == "tiny" else
             "hidden 1024, 4 layers, 8 query / 2 key-value heads of 128, MLP 2816")
    print(f"Llama ({model}, vocabulary 256, random weights), "
          f"batch 1, float32; decode = {args.decode} tokens after the n-token prompt (DynamicCache but for "
          f"`attnc_local_global_cache`, over attnc's PatternCache), "
          f"tok/s = 1 / the median time per token; best of {args.repeats} rounds (every implementation once a "
          f"round, in turn).")
    print()
    print("| attn_implementation | attention | n | prefill tok/s | vs sdpa | decode tok/s | ms/token | vs sdpa "
          "| same tokens as sdpa |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for n in args.n:
        ref = results.get(("sdpa", n), {})
        for impl in impls:
            r = results[impl, n]
            what = attention.get(impl, impl)
            if "error" in r:
                print(f"| `{impl}` | {what} | {n} | failed: {r['error']} | | | | | |")
                continue
            prefill = n / r["prefill_s"]
            decode = 1 / r["token_s"]
            ms = r["token_s"] * 1e3
            if "error" not in ref and ref and impl != "sdpa":
                vs_p = f"{ref['prefill_s'] / r['prefill_s']:.2f}x"
                vs_d = f"{ref['token_s'] / r['token_s']:.2f}x"
            else:
                vs_p = vs_d = ""
            if impl in ("sdpa", FLOOR) or not ref or "error" in ref:
                same = ""
            elif impl == "attnc_local_global":
                same = "(another function)"
            elif impl == "attnc_local_global_cache":
                other = results.get(("attnc_local_global", n), {})
                same = ("(another function; attnc_local_global's tokens: " +
                        ("yes" if other.get("tokens") == r["tokens"] else "no") + ")") if other.get("tokens") else \
                    "(another function)"
            else:
                same = "yes" if r["tokens"] == ref["tokens"] else "no"
            print(f"| `{impl}` | {what} | {n} | {prefill:,.0f} | {vs_p} | {decode:,.1f} | {ms:.2f} | {vs_d} | {same} |")


if __name__ == "__main__":
    main()
