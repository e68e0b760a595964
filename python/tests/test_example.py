"""examples/python: train_tiny.py (training with attnc's *fixed* kernel follows the loss curve
of the same model trained with scaled_dot_product_attention and the pattern as a mask) and
kv_cache_decoding.py (decoding steps over a key/value cache equal full passes)."""

from __future__ import annotations

import importlib.util

from conftest import REPO


def load_example(name: str = "train_tiny"):
    path = REPO / "examples" / "python" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_attnc_and_masked_sdpa_train_alike():
    example = load_example()
    steps = 300
    curves = example.run(steps=steps)
    attnc_curve, sdpa_curve = curves["attnc"], curves["sdpa"]
    assert len(attnc_curve) == len(sdpa_curve) == steps
    # The model learns (the motif task's loss falls well below log(16) = 2.77) ...
    assert sum(attnc_curve[-20:]) / 20 < 0.85 * sum(attnc_curve[:5]) / 5
    # ... and both attentions compute the same function: the curves differ by float32
    # rounding (about 1e-6), which 300 Adam steps amplify little. 1e-3 leaves room for
    # other CPUs and libraries while any error in the pattern or the gradients (a
    # missing key, a wrong scale) moves the curve by 1e-2 or more within a few steps.
    worst = max(abs(a - s) for a, s in zip(attnc_curve, sdpa_curve))
    assert worst < 1e-3, f"largest loss difference {worst:.2e}"


def test_kv_cache_decoding_steps_equal_full_passes(capsys):
    load_example("kv_cache_decoding").main()  # asserts a difference below 1e-5 itself
    assert "largest difference between decoding steps and full passes" in capsys.readouterr().out


def test_context_parallel_example_runs_two_ranks():
    # Run as a script, as docs/tutorial.md shows: its ranks are processes it spawns, which import it by path.
    import subprocess
    import sys

    path = REPO / "examples" / "python" / "context_parallel.py"
    out = subprocess.run([sys.executable, str(path), "--n", "3000"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "2 ranks" in out.stdout and "rank 1:" in out.stdout, out.stdout


def test_hf_sparse_finetune_example_runs(tmp_path):
    # The transformers examples with small sizes (the full runs take a minute): training runs on the
    # pattern, the PNG is written, generation prints. The loss's fall needs the full run (a plateau of
    # ~200 steps first), so it is not asserted here.
    import pytest

    pytest.importorskip("transformers")
    png = tmp_path / "loss.png"
    out = load_example("hf_sparse_finetune").main(
        ["--steps", "12", "--batch", "4", "--n", "48", "--new-tokens", "6", "--png", str(png)])
    losses = out["losses"]
    assert len(losses) == 12 and all(0 < x < 10 for x in losses)
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR"
    assert len(out["generation"]["generated"]) == 6


def test_hf_long_generate_example_runs(capsys):
    # A short context and a small window, so that the pattern leaves keys out; with --dense, attnc's
    # causal attention generates SDPA's tokens.
    import pytest

    pytest.importorskip("transformers")
    pattern = "pattern p { param w = 16  param g = 2  attend { j : i - j < w } | { j : j < g } }"
    results = load_example("hf_long_generate").main(
        ["--n", "200", "--new-tokens", "5", "--dense", "--pattern", pattern])
    assert results["attnc"]["tokens"] == results["sdpa"]["tokens"]
    assert len(results["attnc_local_global"]["token_s"]) == 4
    out = capsys.readouterr().out
    assert "per generated token" in out and "keys held of 205" in out
    # The sparse model over DynamicCache generates what it generates over its PatternCache.
    dynamic = load_example("hf_long_generate").main(
        ["--n", "200", "--new-tokens", "5", "--pattern", pattern, "--dynamic-cache", "--no-warmup"])
    assert dynamic["attnc_local_global"]["tokens"] == results["attnc_local_global"]["tokens"]


def _deleted_but_never_bound(tree) -> list:
    """`del x` inside a function that never binds x (an UnboundLocalError when it runs): names per function."""
    import ast

    bad = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        bound = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
        declared, deleted = set(), []
        for node in ast.walk(fn):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                bound.add(node.id)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Del):
                deleted.append((node.id, node.lineno))
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                declared.update(node.names)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not fn:
                bound.add(node.name)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                bound.add(node.name)
        bad += [f"{fn.name}:{line} deletes '{name}'" for name, line in deleted
                if name not in bound and name not in declared]
    return bad


def test_the_scripts_compile():
    """bench/ and examples/ scripts that only a GPU machine or a long run executes: each compiles (a
    `global` after its name's use is a SyntaxError) and deletes no name its function never bound."""
    import ast

    scripts = sorted((REPO / "bench").glob("*.py")) + sorted((REPO / "examples" / "python").glob("*.py"))
    assert any(p.name == "peers_gpu.py" for p in scripts)
    for path in scripts:
        source = path.read_text()
        compile(source, str(path), "exec")
        assert not _deleted_but_never_bound(ast.parse(source)), f"{path.name}: {_deleted_but_never_bound(ast.parse(source))}"
    assert _deleted_but_never_bound(ast.parse("def f():\n    x = 1\n    del y\n")) == ["f:3 deletes 'y'"]


def _scripts_without_their_run_bit(paths) -> list[str]:
    """The names of the files of `paths` that start with a `#!` line but that no one may execute."""
    import os

    return sorted(p.name for p in paths if p.read_bytes()[:2] == b"#!" and not os.access(p, os.X_OK))


def test_the_scripts_carry_their_run_bit(tmp_path):
    """Every script of scripts/, bench/ and examples/python/ with a `#!` line runs as `./PATH` (docs/cuda.md
    names `scripts/gpu-check.sh`, which once lacked its run bit); sourced helpers have no `#!` line."""
    paths = [p for folder in ("scripts", "bench", "bench/halide", "examples/python")
             for p in sorted((REPO / folder).glob("*")) if p.suffix in (".sh", ".py")]
    assert any(p.name == "gpu-check.sh" for p in paths)
    assert _scripts_without_their_run_bit(paths) == []
    lacking, sourced = tmp_path / "lacking.sh", tmp_path / "sourced.sh"
    lacking.write_text("#!/usr/bin/env bash\n")
    sourced.write_text("# sourced\n")
    for p in (lacking, sourced):
        p.chmod(0o644)
    assert _scripts_without_their_run_bit([lacking, sourced]) == ["lacking.sh"]
