"""attnc.transformers against Hugging Face transformers itself: small random models of five families
built in code (no download), run with attn_implementation="eager" and then, with the same weights,
through attnc: logits, every parameter's gradient, greedy generation over the key/value cache and
left-padded batches. Then a sparse pattern model, the refusals, and the package's import graph."""

from __future__ import annotations

import ast
import pathlib

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip(
    "transformers", reason="attnc.transformers needs Hugging Face transformers (pip install transformers)")

import attnc  # noqa: E402
import attnc.transformers  # noqa: E402
from conftest import REPO  # noqa: E402

SEQ = 48
WINDOW = 16  # smaller than SEQ: the sliding-window layers leave out keys, also from the cache
VOCAB = 128
COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
              intermediate_size=128, max_position_embeddings=256, head_dim=16, attention_dropout=0.0)
FAMILIES = ["llama", "mistral", "qwen2", "gemma2", "gpt_oss"]
LOCAL = "pattern p { param w = 8  attend { j : i - j < w } }"


@pytest.fixture(scope="module", autouse=True)
def registered():
    attnc.transformers.register()
    attnc.transformers.register("attnc_local", pattern=LOCAL)
    attnc.transformers.register("attnc_local4", pattern=LOCAL, w=4)
    # the Sparse Transformer's fixed pattern from the library (a file, already causal), positions matter
    attnc.transformers.register("attnc_fixed", pattern=str(REPO / "patterns" / "fixed.attn"), l=8, c=2)


def build(family, **overrides):
    """A tiny model of `family` with random weights (seeded), in eval mode, float32."""
    t = transformers
    torch.manual_seed(0)
    common = {**COMMON, **overrides}
    if family == "llama":
        model = t.LlamaForCausalLM(t.LlamaConfig(**common))
    elif family == "mistral":
        model = t.MistralForCausalLM(t.MistralConfig(**common, sliding_window=WINDOW))
    elif family == "qwen2":
        # the second layer slides (layer_types from max_window_layers), the first attends to every key
        model = t.Qwen2ForCausalLM(t.Qwen2Config(**common, use_sliding_window=True, sliding_window=WINDOW,
                                                 max_window_layers=1))
        assert model.config.layer_types == ["full_attention", "sliding_attention"]
    elif family == "gemma2":
        # soft-capping (5.0, low enough to bend these logits), alternating sliding and full layers, and a
        # softmax scale of query_pre_attn_scalar ** -0.5 rather than head_dim ** -0.5
        model = t.Gemma2ForCausalLM(t.Gemma2Config(**common, sliding_window=WINDOW, attn_logit_softcapping=5.0,
                                                   final_logit_softcapping=30.0, query_pre_attn_scalar=24))
        assert model.config.layer_types == ["sliding_attention", "full_attention"]
        with torch.no_grad():  # logits of tens, which the cap bends (random weights give logits below 1)
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(8)
                layer.self_attn.k_proj.weight.mul_(8)
    elif family == "gpt_oss":
        model = t.GptOssForCausalLM(t.GptOssConfig(**common, sliding_window=WINDOW, num_local_experts=4,
                                                   num_experts_per_tok=2,
                                                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0}))
        if common["num_hidden_layers"] == 2:
            assert model.config.layer_types == ["sliding_attention", "full_attention"]
        with torch.no_grad():  # learned sinks of either sign, large enough to matter
            for layer in model.model.layers:
                layer.self_attn.sinks.copy_(torch.randn(layer.self_attn.sinks.shape) * 2)
    else:
        raise ValueError(family)
    return model.float().eval()


# More families through transformers' attention interface, with nothing attnc.transformers knows about them:
# Qwen3's q/k norms, Gemma 3's local/global layers, Phi-3's and Starcoder2's windows, Cohere 2's alternating
# layers, SmolLM3's layers without positions, mixtures of experts, GPT-2 and GPT-NeoX's fused projections.
TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
MORE_FAMILIES = {
    "qwen3": lambda t: t.Qwen3ForCausalLM(t.Qwen3Config(**COMMON, **TOKENS)),
    "qwen3_moe": lambda t: t.Qwen3MoeForCausalLM(t.Qwen3MoeConfig(**COMMON, **TOKENS, num_experts=4,
                                                                   num_experts_per_tok=2, moe_intermediate_size=32)),
    "gemma3": lambda t: t.Gemma3ForCausalLM(t.Gemma3TextConfig(**COMMON, **TOKENS, sliding_window=WINDOW,
                                                                query_pre_attn_scalar=24)),
    "phi3": lambda t: t.Phi3ForCausalLM(t.Phi3Config(**{k: v for k, v in COMMON.items() if k != "head_dim"},
                                                     **TOKENS, sliding_window=WINDOW)),
    "mixtral": lambda t: t.MixtralForCausalLM(t.MixtralConfig(**COMMON, **TOKENS, sliding_window=WINDOW,
                                                              num_local_experts=4)),
    "cohere2": lambda t: t.Cohere2ForCausalLM(t.Cohere2Config(**COMMON, **TOKENS, sliding_window=WINDOW)),
    "olmo2": lambda t: t.Olmo2ForCausalLM(t.Olmo2Config(**COMMON, **TOKENS)),
    "starcoder2": lambda t: t.Starcoder2ForCausalLM(t.Starcoder2Config(**COMMON, **TOKENS, sliding_window=WINDOW)),
    "smollm3": lambda t: t.SmolLM3ForCausalLM(t.SmolLM3Config(**COMMON, **TOKENS)),
    "gpt2": lambda t: t.GPT2LMHeadModel(t.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB, **TOKENS)),
    "gpt_neox": lambda t: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(hidden_size=64, num_hidden_layers=2,
                                                               num_attention_heads=4, vocab_size=VOCAB,
                                                               intermediate_size=128, **TOKENS)),
}


def tokens(batch=2, n=SEQ, seed=1):
    return torch.randint(0, VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))


def run(model, implementation, ids, **kwargs):
    model.set_attn_implementation(implementation)
    assert model.config._attn_implementation == implementation
    return model(ids, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_equal_eager(family):
    model = build(family)
    ids = tokens()
    with torch.no_grad():
        want = run(model, "eager", ids).logits
        got = run(model, "attnc", ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", sorted(MORE_FAMILIES))
def test_more_families_equal_eager(family):
    """Families the module was not written for: a left-padded batch's logits equal eager's on every real token."""
    maker = MORE_FAMILIES[family]
    try:
        torch.manual_seed(0)
        model = maker(transformers).float().eval()
    except (AttributeError, TypeError) as e:  # (an older or newer transformers without this family or config)
        pytest.skip(f"transformers {transformers.__version__} cannot build {family}: {e}")
    ids, mask = left_padded()
    with torch.no_grad():
        want = run(model, "eager", ids, attention_mask=mask).logits
        got = run(model, "attnc", ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_parameter_gradients_equal_eager(family):
    model = build(family)
    ids = tokens()
    grads = {}
    for implementation in ("eager", "attnc"):
        model.zero_grad(set_to_none=True)
        model.set_attn_implementation(implementation)
        out = model(ids, labels=ids)
        out.loss.backward()
        grads[implementation] = {name: None if p.grad is None else p.grad.clone()
                                 for name, p in model.named_parameters()}
    want, got = grads["eager"], grads["attnc"]
    assert want.keys() == got.keys()
    checked = 0
    for name in want:
        assert (want[name] is None) == (got[name] is None), name
        if want[name] is not None:
            torch.testing.assert_close(got[name], want[name], rtol=1e-3, atol=1e-6, msg=lambda m: f"{name}: {m}")
            checked += 1
    assert checked >= len(want) // 2
    if family == "gpt_oss":  # the sinks' gradients come from attnc's backward pass
        sinks = [name for name in want if name.endswith("self_attn.sinks")]
        assert len(sinks) == 2 and all(got[name].abs().sum() > 0 for name in sinks)


def generate(model, implementation, ids, attention_mask=None, new=10):
    model.set_attn_implementation(implementation)
    if attention_mask is None:  # (else generate takes token 0, the pad token, for padding)
        attention_mask = torch.ones_like(ids)
    out = model.generate(ids, attention_mask=attention_mask, max_new_tokens=new, do_sample=False,
                         return_dict_in_generate=True, output_logits=True, pad_token_id=0)
    return out.sequences, torch.stack(out.logits, dim=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_generation_equals_eager(family):
    """10 new tokens over the key/value cache (a sliding-window cache for the sliding layers: the
    prompt is longer than the window), token for token, and each step's logits."""
    model = build(family)
    ids = tokens()
    with torch.no_grad():
        want, want_logits = generate(model, "eager", ids)
        got, got_logits = generate(model, "attnc", ids)
    assert got.shape == (2, SEQ + 10)
    assert torch.equal(got, want)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-4, rtol=0)


def left_padded(pad=(0, 7), n=SEQ):
    """A batch of prompts of n - pad[b] tokens, left-padded (token 0) to n, and its attention mask."""
    ids = tokens(len(pad), n, seed=3)
    mask = torch.ones_like(ids)
    for b, p in enumerate(pad):
        ids[b, :p] = 0
        mask[b, :p] = 0
    return ids, mask


@pytest.mark.parametrize("family", FAMILIES)
def test_left_padding_equals_eager(family):
    """A left-padded batch runs as a variable-length batch (gpt-oss: one call per sequence, since its
    sinks are a float input): equal to eager on every token that is not padding; and greedy
    generation from it equals eager's."""
    model = build(family)
    ids, mask = left_padded()
    with torch.no_grad():
        want = run(model, "eager", ids, attention_mask=mask).logits
        got = run(model, "attnc", ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], atol=1e-4, rtol=0)
    # each padded sequence equals itself alone
    with torch.no_grad():
        alone = run(model, "attnc", ids[1:, 7:]).logits
    torch.testing.assert_close(got[1, 7:], alone[0], atol=1e-4, rtol=0)
    with torch.no_grad():
        want_ids, want_logits = generate(model, "eager", ids, mask)
        got_ids, got_logits = generate(model, "attnc", ids, mask)
    assert torch.equal(got_ids, want_ids)
    torch.testing.assert_close(got_logits, want_logits, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_static_cache_generation_equals_eager(family):
    """A static cache: its keys are the cache's whole length, the last slots empty; attnc takes the
    keys up to the queries (left padding too)."""
    model = build(family)
    ids, mask = left_padded()
    out = {}
    for implementation in ("eager", "attnc"):
        model.set_attn_implementation(implementation)
        with torch.no_grad():
            result = model.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0,
                                    cache_implementation="static", return_dict_in_generate=True, output_logits=True)
        out[implementation] = result.sequences, torch.stack(result.logits, dim=1)
    assert torch.equal(out["attnc"][0], out["eager"][0])
    torch.testing.assert_close(out["attnc"][1], out["eager"][1], atol=1e-4, rtol=0)


def test_left_padding_gradients_equal_eager():
    model = build("gemma2")
    ids, mask = left_padded()
    # the loss leaves out the padding and the first token of each row, which the (padded) position
    # before it predicts: a padded query row's output is zero in attnc, not eager's
    labels = ids.masked_fill((mask == 0) | (torch.nn.functional.pad(mask, (1, -1)) == 0), -100)
    grads = {}
    for implementation in ("eager", "attnc"):
        model.zero_grad(set_to_none=True)
        run(model, implementation, ids, attention_mask=mask, labels=labels).loss.backward()
        grads[implementation] = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    for name, want in grads["eager"].items():
        torch.testing.assert_close(grads["attnc"][name], want, rtol=1e-3, atol=1e-6, msg=lambda m: f"{name}: {m}")


def test_right_padding_of_a_forward_pass_equals_eager():
    model = build("mistral")
    ids = tokens(seed=4)
    mask = torch.ones_like(ids)
    mask[0, 40:] = 0
    with torch.no_grad():
        want = run(model, "eager", ids, attention_mask=mask).logits
        got = run(model, "attnc", ids, attention_mask=mask).logits
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["llama", "gpt_oss"])
def test_bfloat16_models_run(family):
    """bf16 weights: attnc computes in float32 from bf16 tensors; the tokens' logits stay as close to
    eager's in bf16 as bf16 allows (gpt-oss's top-2 routing may flip on a token, so it is checked for
    the sinks' gradient only)."""
    model = build(family).to(torch.bfloat16)
    ids, mask = left_padded()
    if family == "llama":
        with torch.no_grad():
            want = run(model, "eager", ids, attention_mask=mask).logits.float()
            got = run(model, "attnc", ids, attention_mask=mask).logits
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float()[mask.bool()], want[mask.bool()], atol=2e-2, rtol=0)
    model.set_attn_implementation("attnc")
    model(ids, attention_mask=mask, labels=ids).loss.backward()
    if family == "gpt_oss":
        grad = model.model.layers[0].self_attn.sinks.grad
        assert grad.dtype == torch.bfloat16 and grad.abs().sum() > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine (torch.cuda.is_available() "
                    "is False)")
@pytest.mark.parametrize("family", FAMILIES)
def test_models_on_a_gpu_equal_eager(family):
    """The five families on CUDA tensors (the GPU kernels: Gemma 2's soft cap and gpt-oss's sinks with
    their gradient included), float32 weights, which attnc runs on bf16 tensor cores: logits of a
    left-padded batch within bf16's rounding of eager's on the same GPU, and the sinks' gradient."""
    model = build(family).cuda()
    ids, mask = (x.cuda() for x in left_padded())
    real = mask.bool()
    with torch.no_grad():
        want = run(model, "eager", ids, attention_mask=mask).logits
        got = run(model, "attnc", ids, attention_mask=mask).logits
    assert got.device == want.device
    scale = float(want[real].abs().max())
    torch.testing.assert_close(got[real], want[real], atol=3e-2 * scale, rtol=0)
    if family == "gpt_oss":
        sinks = model.model.layers[0].self_attn.sinks
        grads = {}
        for implementation in ("eager", "attnc"):
            model.zero_grad(set_to_none=True)
            # (not the first real token of a row, which a padded query row predicts: attnc's is zero)
            labels = ids.masked_fill(~real | (torch.nn.functional.pad(mask, (1, -1)) == 0), -100)
            run(model, implementation, ids, attention_mask=mask, labels=labels).loss.backward()
            grads[implementation] = sinks.grad.clone()
        torch.testing.assert_close(grads["attnc"], grads["eager"], atol=5e-2 * float(grads["eager"].abs().max()),
                                   rtol=0)


def test_float16_on_the_cpu_is_refused_naming_the_layer():
    model = build("llama").to(torch.float16)
    with pytest.raises(attnc.AttncError, match=r"layer 0 \(LlamaAttention\): 'q' has dtype torch.float16"):
        with torch.no_grad():
            run(model, "attnc", tokens())


def test_each_layer_kind_compiles_once():
    model = build("gemma2")
    with torch.no_grad():
        run(model, "attnc", tokens())
        before = attnc.cache_stats()
        run(model, "attnc", tokens(seed=5))
        generate(model, "attnc", tokens(seed=6), new=3)
    assert attnc.cache_stats() == before
    assert attnc.transformers.kernel_for(WINDOW, 5.0) is attnc.transformers.kernel_for(WINDOW, 5.0)


# ---- a sparse pattern model ----------------------------------------------------------------


def test_pattern_model_is_the_causal_window():
    """register(name, pattern=...) replaces the model's mask by the pattern, made causal: the
    window of 8 equals Mistral's sliding window of 8 run by eager with the same weights; w=4 is
    another model."""
    llama = build("llama")
    mistral = transformers.MistralForCausalLM(transformers.MistralConfig(**COMMON, sliding_window=8)).float().eval()
    mistral.load_state_dict(llama.state_dict())
    ids = tokens()
    with torch.no_grad():
        got = run(llama, "attnc_local", ids).logits
        want = run(mistral, "eager", ids).logits
        dense = run(llama, "eager", ids).logits
        narrower = run(llama, "attnc_local4", ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    assert (got - dense).abs().max() > 1e-2
    assert (got - narrower).abs().max() > 1e-2


def test_pattern_model_decoding_equals_its_full_forward():
    """Greedy decoding over the key/value cache with the sparse pattern: each new token is the
    argmax of the model's full forward pass over the sequence so far."""
    model = build("llama")
    ids = tokens(batch=2, n=20)
    with torch.no_grad():
        seq, logits = generate(model, "attnc_local", ids, new=12)
        for step in range(12):
            full = run(model, "attnc_local", seq[:, :20 + step]).logits[:, -1]
            torch.testing.assert_close(logits[:, step], full, atol=1e-4, rtol=0)
            assert torch.equal(full.argmax(-1), seq[:, 20 + step])


def test_pattern_model_left_padding():
    """Left-padded, each sequence runs the pattern at its own positions: as if alone."""
    model = build("llama")
    ids, mask = left_padded(pad=(0, 5, 11))
    with torch.no_grad():
        got = run(model, "attnc_fixed", ids, attention_mask=mask).logits
        for b, p in enumerate((0, 5, 11)):
            alone = run(model, "attnc_fixed", ids[b:b + 1, p:]).logits
            torch.testing.assert_close(got[b, p:], alone[0], atol=1e-4, rtol=0)


def test_pattern_model_trains():
    model = build("llama")
    model.set_attn_implementation("attnc_local")
    ids = tokens()
    loss = model(ids, labels=ids).loss
    loss.backward()
    q = model.model.layers[0].self_attn.q_proj.weight.grad
    assert q is not None and torch.isfinite(q).all() and q.abs().sum() > 0


def test_pattern_gets_the_models_sinks_and_cap():
    """A gpt-oss model on a pattern: the pattern is the window, the model's sinks are added (and get
    their gradient); equal to the model's own attention when the pattern is its sliding window on
    every layer."""
    model = build("gpt_oss", num_hidden_layers=1, layer_types=["sliding_attention"])
    name = attnc.transformers.register("attnc_window16", pattern=f"pattern q {{ attend {{ j : i - j < {WINDOW} }} }}")
    ids = tokens()
    with torch.no_grad():
        want = run(model, "eager", ids).logits
        got = run(model, name, ids).logits
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    model.set_attn_implementation(name)
    model(ids, labels=ids).loss.backward()
    assert model.model.layers[0].self_attn.sinks.grad.abs().sum() > 0


def test_a_pattern_with_its_own_score_refuses_a_soft_capped_model():
    name = attnc.transformers.register("attnc_scored", pattern="pattern r { causal  attend { j : j <= i }  "
                                                               "score s * 0.5 }")
    model = build("gemma2")
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*soft-caps its logits.*'score' of its own"):
        with torch.no_grad():
            run(model, name, tokens())
    with torch.no_grad():  # a model without a cap runs it
        run(build("llama"), name, tokens())


def test_a_pattern_that_reads_data_is_refused():
    with pytest.raises(attnc.AttncError, match="reads the inputs 'doc'"):
        attnc.transformers.register("attnc_doc", pattern="pattern d { input doc : int[n]  causal  "
                                                         "attend { j : doc[j] == doc[i] } }")


def test_a_sliding_window_cache_refuses_a_pattern():
    """A pattern needs the keys' positions; a sliding-window cache drops the first keys."""
    model = build("mistral")
    with pytest.raises(attnc.AttncError, match=r"layer \d .*sliding-window cache"):
        with torch.no_grad():
            generate(model, "attnc_local", tokens(), new=2)


# ---- a cache that keeps only what the pattern still reads ------------------------------------


def cache_steps(model, name, ids, prompt, cache):
    """The logits of ids[:, prompt:] one token at a time over `cache`, after a prefill of `prompt`."""
    model.set_attn_implementation(name)
    out = model(ids[:, :prompt], cache=cache, use_cache=True)
    logits = [out.logits]
    for t in range(prompt, ids.shape[1]):
        logits.append(model(ids[:, t:t + 1], cache=cache, use_cache=True).logits)
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("name", ["attnc_local", "attnc_fixed"])
def test_pattern_cache_decoding_equals_the_full_forward(name):
    """Prefill 20 tokens, then 180 one by one over a PatternCache: every logit equals the full
    forward pass's, while the cache holds far fewer keys than positions (the window's 8, or fixed's
    blocks of 8 and their last 2 columns, plus what waits to be compacted)."""
    model = build("llama")
    ids = tokens(batch=2, n=200, seed=5)
    cache = attnc.transformers.PatternCache(name)
    with torch.no_grad():
        want = run(model, name, ids).logits
        got = cache_steps(model, name, ids, 20, cache)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    kept = cache.kept()
    assert len(kept) == 2 and max(kept) <= (100 if name == "attnc_local" else 200 // 8 * 2 + 100), kept
    assert cache.get_seq_length() == 200


def test_pattern_cache_with_sinks_and_generate():
    """gpt-oss's sinks on a pattern model, through model.generate over a PatternCache: each
    generated token's logits equal the full forward pass over the sequence before it."""
    model = build("gpt_oss", num_hidden_layers=1, layer_types=["sliding_attention"])
    name = attnc.transformers.register("attnc_window6", pattern="pattern q { attend { j : i - j < 6 } }")
    ids = tokens(batch=1, n=30)
    with torch.no_grad():
        model.set_attn_implementation(name)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False,
                             return_dict_in_generate=True, output_logits=True, pad_token_id=0,
                             cache=attnc.transformers.PatternCache(name))
        full = run(model, name, out.sequences[:, :-1]).logits[:, 29:]
    torch.testing.assert_close(torch.stack(out.logits, dim=1), full, atol=1e-4, rtol=0)
    assert torch.equal(full.argmax(-1), out.sequences[:, 30:])


def test_pattern_cache_refusals():
    with pytest.raises(attnc.AttncError, match="model's own attention"):
        attnc.transformers.PatternCache("attnc")
    with pytest.raises(attnc.AttncError, match="not an attention implementation"):
        attnc.transformers.PatternCache("no_such_name")
    name = attnc.transformers.register("attnc_last4", pattern="pattern t { attend { j : j >= n - 4 } }")
    with pytest.raises(attnc.AttncError, match="depend on the sequence length n"):
        attnc.transformers.PatternCache(name)
    model = build("llama")
    ids, mask = left_padded(pad=(0, 5))
    with pytest.raises(attnc.AttncError, match="layer 0 .*PatternCache takes unpadded batches"):
        with torch.no_grad():
            run(model, "attnc_local", ids, attention_mask=mask, cache=attnc.transformers.PatternCache("attnc_local"),
                use_cache=True)


def test_attention_cached_directly():
    """attnc.torch.attention_cached: keys at positions, the rows of the whole sequence; a dropped key
    that a query reads, and a gradient, are refused."""
    kernel = attnc.compile("pattern g { param w = 5  causal  attend { j : i - j < w } | { j : j < 2 } }")
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 40, 8), torch.randn(1, 2, 40, 8)
    want = kernel(q, k, v)
    last = kernel.last_readers(40)
    keep = [j for j in range(40) if last[j] >= 39]
    assert keep == [0, 1, 35, 36, 37, 38, 39]
    got = attnc.torch.attention_cached(q, k[:, :, keep], v[:, :, keep], keep, kernel)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    with pytest.raises(attnc.AttncError, match="reads the key at position 1"):
        attnc.torch.attention_cached(q, k[:, :, [0] + keep[2:]], v[:, :, [0] + keep[2:]], [0] + keep[2:], kernel)
    with pytest.raises(attnc.AttncError, match="key_positions has 6 entries but 'k' has 7 key rows"):
        attnc.torch.attention_cached(q, k[:, :, keep], v[:, :, keep], keep[1:], kernel)
    with pytest.raises(attnc.AttncError, match="one position per key"):
        attnc.torch.attention_cached(q, k[:, :, keep], v[:, :, keep], [keep], kernel)
    with pytest.raises(attnc.AttncError, match="ascend strictly"):
        attnc.torch.attention_cached(q, k[:, :, keep], v[:, :, keep], keep[::-1], kernel)
    with pytest.raises(ValueError, match=r"n must be an integer in \[1, 2147483648\]"):
        kernel.last_readers(0)
    # Positions as a tensor: int64 goes straight to the runtime, whose refusal is worded as above; other
    # dtypes are converted.
    with torch.no_grad():
        for dtype in (torch.int64, torch.int32):
            got = attnc.torch.attention_cached(q, k[:, :, keep], v[:, :, keep], torch.tensor(keep, dtype=dtype), kernel)
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        dropped = torch.tensor([0] + keep[2:])
        with pytest.raises(attnc.AttncError, match="reads the key at position 1"):
            attnc.torch.attention_cached(q, k[:, :, dropped], v[:, :, dropped], dropped, kernel)
        with pytest.raises(attnc.AttncError, match="ascend strictly"):
            attnc.torch.attention_cached(q, k[:, :, keep], v[:, :, keep], torch.tensor(keep[::-1]), kernel)
    with pytest.raises(attnc.AttncError, match="no backward pass"):
        attnc.torch.attention_cached(q.requires_grad_(), k[:, :, keep], v[:, :, keep], keep, kernel)


# ---- refusals ------------------------------------------------------------------------------


def test_dropout_in_training_is_refused():
    model = build("llama", attention_dropout=0.1).train()
    model.set_attn_implementation("attnc")
    with pytest.raises(attnc.AttncError, match=r"layer 0 \(LlamaAttention\): attention dropout 0.1"):
        model(tokens())
    model.eval()  # no dropout in eval mode
    model(tokens())


def test_padding_inside_a_sequence_is_refused():
    model = build("llama")
    ids = tokens()
    mask = torch.ones_like(ids)
    mask[1, 10:12] = 0
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*batch row 1 is not one run of tokens"):
        with torch.no_grad():
            run(model, "attnc", ids, attention_mask=mask)


def test_right_padding_with_a_cache_is_refused():
    model = build("llama")
    ids = tokens()
    mask = torch.ones_like(ids)
    mask[0, 40:] = 0
    # (the generated tokens follow the padding: the tokens are not one run)
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*batch row 0 is not one run of tokens"):
        with torch.no_grad():
            generate(model, "attnc", ids, mask, new=2)


def test_masks_of_other_mask_functions_are_refused():
    """transformers builds a bidirectional mask for is_causal=False, and one of packed sequences when
    position_ids restart within a row: not what attnc runs, and refused rather than run causally."""
    model = build("llama")
    ids = tokens()
    model.config.is_causal = False
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*bidirectional"):
        with torch.no_grad():
            run(model, "attnc", ids)
    model.config.is_causal = True
    packed = torch.cat([torch.arange(20), torch.arange(SEQ - 20)])[None].expand(2, SEQ)
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*packed sequences"):
        with torch.no_grad():
            run(model, "attnc", ids, position_ids=packed, use_cache=False)


def test_four_d_masks():
    """A 4-D mask given to the model: the causal one with padding runs; a bias or any other shape
    of mask is refused, naming the layer."""
    model = build("llama")
    ids = tokens()
    n = ids.shape[1]
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    pad = torch.ones(2, n, dtype=torch.bool)
    pad[1, :5] = False
    allowed = causal[None, None] & pad[:, None, None, :]
    min_value = torch.finfo(torch.float32).min
    float_mask = torch.zeros(2, 1, n, n).masked_fill(~allowed, min_value)
    with torch.no_grad():
        want = run(model, "eager", ids, attention_mask=float_mask).logits
        got = run(model, "attnc", ids, attention_mask=float_mask).logits
        got_bool = run(model, "attnc", ids, attention_mask=allowed).logits
    torch.testing.assert_close(got[pad], want[pad], atol=1e-4, rtol=0)
    torch.testing.assert_close(got_bool[pad], want[pad], atol=1e-4, rtol=0)
    bias = float_mask.clone()
    bias[0, 0, 10, 3] = -1.5
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*values other than 0 and -inf"):
        with torch.no_grad():
            run(model, "attnc", ids, attention_mask=bias)
    full = torch.ones(2, 1, n, n, dtype=torch.bool)  # bidirectional
    with pytest.raises(attnc.AttncError, match=r"layer 0 .*not the layer's causal mask with padding"):
        with torch.no_grad():
            run(model, "attnc", ids, attention_mask=full)


def test_the_attention_function_directly():
    """The registered function itself: transformers' signature, [B, S, H, D] out and no weights;
    grouped heads, fewer queries than keys (a cache step), scaling and sinks' gradient."""
    fn = transformers.AttentionInterface()["attnc"]

    class Module(torch.nn.Module):
        layer_idx = 3

    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 5, 16, generator=g)
    k, v = torch.randn(2, 2, 9, 16, generator=g), torch.randn(2, 2, 9, 16, generator=g)
    sinks = torch.randn(4, generator=g).requires_grad_()
    out, weights = fn(Module(), q, k, v, None, scaling=0.3, sliding_window=4, s_aux=sinks)
    assert weights is None and out.shape == (2, 5, 4, 16)
    # reference: the window of 4 over the last 5 of 9 positions, scaled by 0.3, with the sinks
    kk, vv = (x.repeat_interleave(2, dim=1) for x in (k, v))
    s = (q @ kk.transpose(2, 3)) * 0.3
    pos, j = torch.arange(4, 9)[:, None], torch.arange(9)[None, :]
    s = s.masked_fill(~((j <= pos) & (pos - j < 4)), float("-inf"))
    sink = sinks.detach().reshape(1, 4, 1, 1).expand(2, 4, 5, 1)
    p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    torch.testing.assert_close(out, (p @ vv).transpose(1, 2), atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert sinks.grad is not None and sinks.grad.abs().sum() > 0
    with pytest.raises(attnc.AttncError, match=r"layer 3 \(Module\): attention dropout"):
        fn(Module(), q, k, v, None, dropout=0.5)


def test_register_checks_its_arguments():
    with pytest.raises(TypeError, match="pattern's; pass pattern="):
        attnc.transformers.register("attnc_x", w=4)
    with pytest.raises(ValueError, match="transformers' own"):
        attnc.transformers.register("sdpa")
    with pytest.raises(attnc.AttncError):
        attnc.transformers.register("attnc_bad", pattern="pattern b { attend { j : j < } }")
    assert attnc.transformers.register("attnc") == "attnc"


# ---- the package's modules import one way ----------------------------------------------------


def imports_of(path):
    """The attnc modules a file imports (relative imports resolved), at any depth of the file."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                if node.module:
                    out.add(node.module)
                else:
                    out.update(alias.name for alias in node.names)
            elif node.module and node.module.startswith("attnc."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("attnc."))
    return out


def test_no_import_cycle():
    package = pathlib.Path(attnc.__file__).parent
    graph = {p.stem: imports_of(p) for p in package.glob("*.py") if p.stem != "__init__"}
    assert "torch" not in graph["_api"]
    assert "_api" in graph["torch"]
    assert "torch" in graph["transformers"] and "_api" in graph["transformers"]

    def reaches(a, b, seen=()):
        return any(x == b or (x in graph and x not in seen and reaches(x, b, seen + (x,))) for x in graph.get(a, ()))

    for module in graph:
        assert not reaches(module, module), f"attnc.{module} imports itself through a cycle"
