"""attnc.compile, Kernel's metadata, attnc.analyze, attnc.show and their errors."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

import attnc
from conftest import LIBRARY, pattern_path, raises_status

FIXED = pattern_path("fixed")


def test_compile_gives_a_kernel_with_metadata():
    kernel = attnc.compile(FIXED, l=32, c=4)
    meta = kernel.metadata
    assert meta["pattern"] == "fixed" and meta["params"] == "l=32,c=4" and meta["backend"] == "fused"
    assert meta["source"] == pathlib.Path(FIXED).read_text()
    assert kernel.heads is None  # merged heads: any count
    assert attnc.compile(pattern_path("fixed_multihead")).heads == 2
    assert "fixed" in repr(kernel)


def test_compile_accepts_a_path_object_and_source_text():
    source = pathlib.Path(FIXED).read_text()
    a = attnc.compile(pathlib.Path(FIXED), l=16, c=2)
    b = attnc.compile(source, l=16, c=2)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, 50, 8), dtype=np.float32)
    np.testing.assert_array_equal(a(q, q, q), b(q, q, q))


def test_the_same_request_gives_the_same_kernel():
    assert attnc.compile(FIXED, l=64, c=8) is attnc.compile(FIXED, c=8, l=64)
    assert attnc.compile(FIXED, l=64, c=8) is not attnc.compile(FIXED, l=64, c=4)


def test_compile_uses_the_jit_cache(tmp_path):
    before = attnc.cache_stats()
    first = attnc.compile(FIXED, cache_dir=str(tmp_path), l=48, c=3)
    after_first = attnc.cache_stats()
    assert after_first["misses"] == before["misses"] + 1 and list(tmp_path.glob("fixed-*.attnk"))
    # Another request for the same kernel (naming the pattern) is a disk-cache hit.
    attnc.compile(FIXED, cache_dir=str(tmp_path), pattern="fixed", l=48, c=3)
    after_second = attnc.cache_stats()
    assert after_second["hits"] == after_first["hits"] + 1 and after_second["misses"] == after_first["misses"]
    # The same request again is the same Kernel, without the JIT.
    assert attnc.compile(FIXED, cache_dir=str(tmp_path), l=48, c=3) is first
    assert attnc.cache_stats() == after_second


def test_a_pattern_error_carries_the_diagnostics():
    source = "pattern p {\n  param l = 8\n  attend { j : j % (l - 8) == 0 }\n}\n"
    with raises_status("ATTNC_ERROR_COMPILE") as e:
        attnc.compile(source)
    text = str(e.value)
    assert re.search(r"^<string>:3:\d+: error: ", text, re.M), text
    assert "attend { j : j % (l - 8) == 0 }" in text and "^" in text


def test_errors_in_a_file_name_the_file(tmp_path):
    path = tmp_path / "bad.attn"
    path.write_text("pattern bad {\n  attend { j : j < undefined }\n}\n")
    with raises_status("ATTNC_ERROR_COMPILE") as e:
        attnc.compile(path)
    assert f"{path}:2:" in str(e.value) and "undefined" in str(e.value)
    with raises_status("ATTNC_ERROR_COMPILE"):
        attnc.analyze(path, n=16)
    with raises_status("ATTNC_ERROR_COMPILE"):
        attnc.show(path, n=16)


def test_a_parameter_the_pattern_does_not_have():
    with raises_status("ATTNC_ERROR_COMPILE") as e:
        attnc.compile(FIXED, width=3)
    assert "width" in str(e.value)
    with pytest.raises(TypeError, match="integer"):
        attnc.compile(FIXED, l="128")


def test_a_missing_file():
    with pytest.raises(FileNotFoundError):
        attnc.compile("no/such/pattern.attn")


def test_bad_backend_and_target():
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT"):
        attnc.compile(FIXED, backend="gpu")
    with raises_status("ATTNC_ERROR_UNSUPPORTED") as e:
        attnc.compile(FIXED, target="tpu")
    assert "'cpu' and 'cuda'" in str(e.value)
    # The cuda target compiles without a GPU (the runtime's GPU code is generic over the pattern),
    # where this attnc was built with its GPU code (nvcc at build time); else it says so.
    if attnc._attnc.cuda_unavailable(0).startswith("this libattnc was built without"):
        with raises_status("ATTNC_ERROR_UNSUPPORTED"):
            attnc.compile(FIXED, target="cuda")
    else:
        assert attnc.compile(FIXED, target="cuda").metadata["pattern"] == "fixed"


def test_numpy_dtype_error():
    kernel = attnc.compile(FIXED)
    q = np.zeros((1, 1, 8, 4))
    with raises_status("ATTNC_ERROR_DTYPE") as e:
        kernel(q, q, q)
    assert "float64" in str(e.value)


# ---- analyze ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_analyze_follows_the_json_schema(name):
    result = attnc.analyze(pattern_path(name), n=300, **LIBRARY[name])
    assert result["pattern"] == name and result["n"] == 300
    assert LIBRARY[name].items() <= result["params"].items()
    for head in result["heads"]:
        assert {"head", "nnz", "row_nnz", "empty_rows", "blocks"} <= head.keys()
        assert {"min", "max", "mean"} <= head["row_nnz"].keys()
        assert {"size", "full", "partial", "empty"} <= head["blocks"].keys()
        assert head["row_nnz"]["mean"] == pytest.approx(head["nnz"] / 300, abs=1e-6)
    assert {"p", "exact", "rows_checked"} <= result["connectivity"].keys()


def test_analyze_counts_what_the_formula_gives():
    n, l, c = 1000, 32, 5
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    mask = (j <= i) & ((j // l == i // l) | (j % l >= l - c))
    result = attnc.analyze(FIXED, n=n, block=64, block_cols=32, connectivity=False, l=l, c=c)
    head = result["heads"][0]
    assert head["nnz"] == mask.sum()
    assert head["row_nnz"]["min"] == mask.sum(1).min() and head["row_nnz"]["max"] == mask.sum(1).max()
    assert head["blocks"]["size"] == 64 and head["blocks"]["cols"] == 32
    assert "connectivity" not in result


@pytest.mark.parametrize("queries", [1, 7, 500, 1000])
def test_analyze_queries_counts_the_last_rows(queries):
    n, l, c = 1000, 32, 5
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    rows = ((j <= i) & ((j // l == i // l) | (j % l >= l - c)))[n - queries:]
    result = attnc.analyze(FIXED, n=n, queries=queries, connectivity=False, l=l, c=c)
    head = result["heads"][0]
    assert head["nnz"] == rows.sum()
    assert head["row_nnz"]["min"] == rows.sum(1).min() and head["row_nnz"]["max"] == rows.sum(1).max()
    assert head["row_nnz"]["mean"] == pytest.approx(rows.sum() / queries, abs=1e-6)
    if queries < n:
        assert result["queries"] == queries and result["first_row"] == n - queries
        assert head["keys_read"] == rows.any(0).sum()
    else:  # the square, exactly as without queries (but the time taken)
        square = attnc.analyze(FIXED, n=n, connectivity=False, l=l, c=c)
        assert {**result, "seconds": 0} == {**square, "seconds": 0}


def test_analyze_argument_errors():
    with pytest.raises(ValueError, match="n must be"):
        attnc.analyze(FIXED, n=0)
    with pytest.raises(ValueError, match="block must be"):
        attnc.analyze(FIXED, n=10, block=0)
    with pytest.raises(ValueError, match=r"queries must be an integer in \[1, 10\]"):
        attnc.analyze(FIXED, n=10, queries=11)


def test_analyze_reports_warnings():
    source = "pattern p {\n  let unused = { j : true }\n  attend { j : j == i }\n}\n"
    with pytest.warns(attnc.AttncWarning, match="unused let 'unused'"):
        assert attnc.analyze(source, n=10)["heads"][0]["nnz"] == 10


# ---- show ---------------------------------------------------------------------


def test_show_gives_an_svg_document():
    svg = attnc.show(FIXED, n=64, grid=16, l=16, c=4)
    root = ElementTree.fromstring(svg)
    assert root.tag.endswith("svg")
    assert "fixed (n=64, l=16, c=4, causal)" in svg


def test_show_ascii_cells_are_the_pattern():
    text = attnc.show(FIXED, n=24, format="ascii", l=8, c=2)
    rows = text.rstrip("\n").split("\n")[-24:]
    i, j = np.meshgrid(np.arange(24), np.arange(24), indexing="ij")
    want = (j <= i) & ((j // 8 == i // 8) | (j % 8 >= 6))
    assert np.array_equal(np.array([[ch != "." for ch in r] for r in rows]), want)


def test_show_queries_draws_the_last_rows():
    text = attnc.show(FIXED, n=24, queries=5, format="ascii", l=8, c=2)
    assert "queries=5" in text
    rows = text.rstrip("\n").split("\n")[-5:]
    i, j = np.meshgrid(np.arange(24), np.arange(24), indexing="ij")
    want = ((j <= i) & ((j // 8 == i // 8) | (j % 8 >= 6)))[19:]
    assert np.array_equal(np.array([[ch != "." for ch in r] for r in rows]), want)
    assert attnc.show(FIXED, n=24, queries=24, l=8, c=2) == attnc.show(FIXED, n=24, l=8, c=2)
    with pytest.raises(ValueError, match="queries must be"):
        attnc.show(FIXED, n=24, queries=0)


def test_show_head_out_of_range():
    with raises_status("ATTNC_ERROR_INVALID_ARGUMENT") as e:
        attnc.show(pattern_path("fixed_multihead"), n=32, head=2)
    assert "head 2 is out of range; pattern 'fixed_multihead' has 2 heads (0 to 1)" in str(e.value)
    with pytest.raises(ValueError, match="format"):
        attnc.show(FIXED, n=32, format="png")


def _cpu_isa_in_a_new_process(env_value):
    """attnc.cpu_isa() and a fused kernel's result in a fresh process with ATTNC_FUSED_ISA=env_value."""
    code = (
        "import attnc, numpy as np\n"
        "try:\n"
        "    isa = attnc.cpu_isa()\n"
        "except attnc.AttncError as e:\n"
        "    print('error', e.status_name, e)\n"
        "    raise SystemExit(0)\n"
        f"k = attnc.compile({str(FIXED)!r}, l=8, c=2)\n"
        "q = np.random.default_rng(0).standard_normal((1, 1, 50, 16)).astype(np.float32)\n"
        "o = k(q, q, q)\n"
        "print(isa, float(np.abs(o).sum()))\n"
    )
    env = dict(os.environ, ATTNC_FUSED_ISA=env_value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_cpu_isa_names_the_kernels_that_run_and_forcing_one_gives_the_same_result():
    best = attnc.cpu_isa()
    assert best in ("avx512", "avx2", "portable")
    portable = _cpu_isa_in_a_new_process("portable")
    assert portable[0] == "portable"
    forced = _cpu_isa_in_a_new_process(best)
    assert forced[0] == best
    assert abs(float(forced[1]) - float(portable[1])) <= 1e-4 * float(portable[1])
    unknown = _cpu_isa_in_a_new_process("avx9")
    assert unknown[:2] == ["error", "ATTNC_ERROR_UNSUPPORTED"]
    assert "expected avx512, avx2 or portable" in " ".join(unknown)


def test_analyze_ranks_shares_the_positions_with_equal_pairs():
    n, ranks = 4096, 4
    a = attnc.analyze(FIXED, n, ranks=ranks, head_dim=64, kv_heads=2, dtype="f32", connectivity=False, l=64, c=4)
    cp = a["context_parallel"]
    assert cp["ranks"] == ranks and len(cp["ranges"]) == ranks
    covered = sorted((start, stop) for rank in cp["ranges"] for start, stop in rank)
    assert covered[0][0] == 0 and covered[-1][1] == n
    assert all(a_stop == b_start for (_, a_stop), (b_start, _) in zip(covered, covered[1:]))
    assert sum(cp["pairs"]) == pytest.approx(a["heads"][0]["nnz"])
    assert cp["pairs_max_over_mean"] <= 1.05
    # fixed reads its own block and the summary columns before it: far less than ring attention.
    assert max(cp["forward_bytes"]) < 0.2 * cp["ring_forward_bytes"]
    assert cp["row_bytes"] == 2 * 64 * 2 * 4
    assert "context_parallel" not in attnc.analyze(FIXED, n, connectivity=False)
    with pytest.raises(ValueError):
        attnc.analyze(FIXED, n, ranks=0)
