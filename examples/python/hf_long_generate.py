"""Generation at a long context with local + global attention: a Hugging Face transformers model (a
small Llama built in code, random weights, nothing downloaded) prefills a long prompt and generates
greedily over its key/value cache, once on attnc with a sparse pattern and once on transformers' SDPA
(dense causal attention), and prints the time per generated token of each.

    python examples/python/hf_long_generate.py [--n 4096] [--new-tokens 32] [--threads 2] [--dense]

The pattern (``attnc.transformers.register(name, pattern=...)``, made causal): the w = 512 most
recent keys plus g = 8 global tokens (the first 8 positions), so a generated token reads 520 keys
whatever the context's length, where SDPA reads all of them:

    pattern local_global { param w = 512  param g = 8  attend { j : i - j < w } | { j : j < g } }

The two compute different functions (the sparse model sees fewer keys), so their tokens differ; the
point is the cost. ``--dense`` adds attnc running the model's own (causal) attention,
``attnc.transformers.register()``, which computes what SDPA does. The sparse model generates over
``attnc.transformers.PatternCache`` (the keys its pattern still reads: at most about 2 · 520 + 80 per layer,
whatever the context's length); the others over transformers' ``DynamicCache`` (every key, and a copy of
the whole cache, ``torch.cat``, at every token); ``--dynamic-cache`` puts the sparse model on it too. Each
implementation runs the prompt once untimed first (kernels compiled, memory touched), then timed.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time
from typing import Dict, List, Optional, Sequence

import torch
import transformers

import attnc.transformers

LOCAL_GLOBAL = "pattern local_global { param w = 512  param g = 8  attend { j : i - j < w } | { j : j < g } }"
VOCAB = 256


def tiny_llama(max_positions: int, seed: int = 0) -> transformers.LlamaForCausalLM:
    """The model of hf_sparse_finetune.py: a Llama with hidden 128, 4 layers, 4 query heads over 2
    key/value heads of 32, vocabulary 256; random weights, float32, eval mode."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=max_positions, attention_dropout=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).float().eval()


def _cache_names(model: torch.nn.Module) -> tuple:
    """The forward's keyword for the cache and the output's field (``cache`` in transformers 5.2x,
    ``past_key_values`` before)."""
    if "cache" in inspect.signature(model.forward).parameters:
        return "cache", "cache"
    return "past_key_values", "past_key_values"


@torch.no_grad()
def greedy(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int, cache: Optional[object] = None
           ) -> Dict[str, object]:
    """Prefill `ids` ([1, n]) and generate `new_tokens` greedily over the cache (`cache`, or the one
    the model makes: DynamicCache), one forward per token: {"prefill_s", "token_s" (seconds of each
    generated token's forward), "tokens"}. The first token comes from the prefill's logits; each
    later one costs one decode step."""
    arg, field = _cache_names(model)
    start = time.perf_counter()
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1, **({arg: cache} if cache is not None else {}))
    prefill_s = time.perf_counter() - start
    cache = getattr(out, field)
    token = out.logits[:, -1:].argmax(-1)
    tokens, token_s = [int(token)], []
    for _ in range(new_tokens - 1):
        start = time.perf_counter()
        out = model(input_ids=token, use_cache=True, **{arg: cache})
        token = out.logits[:, -1:].argmax(-1)
        token_s.append(time.perf_counter() - start)
        cache = getattr(out, field)
        tokens.append(int(token))
    return {"prefill_s": prefill_s, "token_s": token_s, "tokens": tokens}


def run(n: int = 4096, new_tokens: int = 32, dense: bool = False, pattern: str = LOCAL_GLOBAL,
        seed: int = 0, warmup: bool = True, dynamic_cache: bool = False) -> Dict[str, Dict[str, object]]:
    """{implementation: greedy(...)} for the sparse attnc model (over a PatternCache unless
    `dynamic_cache`), SDPA and (with `dense`) attnc's causal attention, the same weights and prompt."""
    sparse = attnc.transformers.register("attnc_local_global", pattern=pattern)
    names = [sparse, "sdpa"] + ([attnc.transformers.register("attnc")] if dense else [])
    model = tiny_llama(max_positions=n + new_tokens, seed=seed)
    ids = torch.randint(VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))
    results = {}
    for name in names:
        model.set_attn_implementation(name)
        fresh = (lambda: attnc.transformers.PatternCache(name)) if name == sparse and not dynamic_cache else \
            (lambda: None)
        if warmup:
            greedy(model, ids, min(new_tokens, 4), fresh())
        cache = fresh()
        results[name] = r = greedy(model, ids, new_tokens, cache)
        per_token = statistics.median(r["token_s"]) if r["token_s"] else float("nan")
        held = f", {max(cache.kept())} keys held of {n + new_tokens}" if cache is not None else ""
        print(f"{name:>20}: prefill {n} tokens {r['prefill_s']:7.3f} s, "
              f"per generated token {per_token * 1e3:7.2f} ms (median of {len(r['token_s'])}){held}", flush=True)
    return results


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Dict[str, object]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=4096, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--dense", action="store_true", help="also attnc with the model's own causal attention")
    parser.add_argument("--pattern", default=LOCAL_GLOBAL, help="a .attn file or a pattern's text")
    parser.add_argument("--threads", type=int, default=0, help="torch's threads (0: torch's default)")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--dynamic-cache", action="store_true",
                        help="the sparse model on transformers' DynamicCache instead of attnc's PatternCache")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"Llama (hidden 128, 4 layers, 4/2 heads of 32), a {args.n}-token prompt, {args.new_tokens} tokens "
          f"generated greedily, float32, torch threads {torch.get_num_threads()}")
    results = run(n=args.n, new_tokens=args.new_tokens, dense=args.dense, pattern=args.pattern,
                  warmup=not args.no_warmup, dynamic_cache=args.dynamic_cache)
    sparse = next(iter(results))
    ref = statistics.median(results["sdpa"]["token_s"]) if results["sdpa"]["token_s"] else float("nan")
    mine = statistics.median(results[sparse]["token_s"]) if results[sparse]["token_s"] else float("nan")
    print(f"time per generated token, {sparse} / sdpa: {mine / ref:.2f}")
    for name, r in results.items():
        print(f"{name:>20}: {r['tokens'][:12]} ...")
    return results


if __name__ == "__main__":
    main()
