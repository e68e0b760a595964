"""Every snippet of README.md and docs/tutorial.md runs as written (issue 42, item 4).

The fenced code blocks are read from the documents themselves and run in a
temporary sandbox per document (never in the checkout: `attnc run -o` and the
C++ example write next to their working directory), in which `patterns/` is
a link to the repository's pattern library and `build/` a link to the build
directory whose CLI the test found, so that the README's
`export PATH=$PWD/build/tools/attnc:$PATH` and relative paths work as shown.
HOME points into the sandbox too (the README installs into $HOME/.local).

- ```python blocks run as scripts with this interpreter; `print(...)  # X`
  means X must appear in what they print.
- `$ attnc ...` lines run in bash (after the document's earlier `$ export`
  lines); the lines shown under a command must appear, in order, in its
  output, except lines with timings.
- A block whose first line is `# NAME.attn` is that file: under patterns/ it
  must be the library's file (comments aside), and `attnc check` accepts it;
  elsewhere (the tutorial's mine.attn) it is written into the sandbox for the
  commands after it.
- The README's C++ example (a ```cpp block headed `// NAME:`) is built by the
  block of `$` commands after it (`cmake --install build --prefix
  $HOME/.local`, pkg-config, c++) where cmake, a C++ compiler and pkg-config
  exist and the build directory has install rules; it installs into the
  sandbox's HOME, nowhere else.

Skipped with a reason: everything that needs the CLI when none is built
(ATTNC_CLI, else tools/attnc/attnc under $ATTNC_BUILD_DIR, the build directory
of this venv (build-X for build-X-venv), build or build-fe); blocks that need
an NVIDIA GPU or torchrun; `attnc bench` (minutes at the documents' sizes);
the ```sh quick-start commands (apt-get and a whole build: that is CI itself).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

import pytest

from conftest import REPO

DOCS = ["README.md", "docs/tutorial.md"]
TIMEOUT = 120  # seconds for one snippet: a hang fails instead of stalling CI

# Input files that the tutorial's commands read and leave to the reader ("--q q.npy
# --input doc=doc.npy"): made here, small, so that the commands run as written.
READER_FILES = {
    "q.npy": ("float32", (1, 8, 512, 64)),
    "k.npy": ("float32", (1, 8, 512, 64)),
    "v.npy": ("float32", (1, 8, 512, 64)),
    "doc.npy": ("doc", (512,)),  # document ids, sorted: 4 documents
    "sel.npy": ("sel", (64, 8)),  # patterns/nsa.attn at n=4096, B=64, k=8: blocks selected
    "b0.npy": ("buckets", (4096,)),  # patterns/lsh.attn's two hash rounds at n=4096: 64 buckets
    "b1.npy": ("buckets", (4096,)),
}


# ---------------------------------------------------------------------------
# The documents' blocks


@dataclasses.dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    body: str


@dataclasses.dataclass
class Command:
    doc: str
    line: int
    cmd: str
    shown: List[str]
    exports: List[str]  # the document's `$ export` lines before this one


def read_blocks(doc: str) -> List[Block]:
    blocks, lang, start, body = [], None, 0, []
    for number, line in enumerate((REPO / doc).read_text().splitlines(), 1):
        if lang is None:
            m = re.match(r"^```(\S*)\s*$", line)
            if m:
                lang, start, body = m.group(1), number, []
        elif line.startswith("```"):
            blocks.append(Block(doc, start, lang, "\n".join(body) + "\n"))
            lang = None
        else:
            body.append(line)
    assert lang is None, f"{doc}:{start}: a code block is never closed"
    return blocks


def is_commands(block: Block) -> bool:
    return block.lang in ("", "console", "shell-session") and block.body.lstrip().startswith("$ ")


def split_commands(block: Block, exports: List[str]) -> List[Command]:
    """The `$` lines of a block, each with the output lines shown under it."""
    commands: List[Command] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            i += 1
            continue
        cmd, start = line[2:], block.line + 1 + i
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1] + " " + lines[i].strip()
        i += 1
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i].rstrip())
            i += 1
        commands.append(Command(block.doc, start, cmd, [s for s in shown if s.strip()], list(exports)))
        if cmd.startswith("export "):
            exports.append(cmd)
    return commands


def attn_file_name(block: Block) -> Optional[str]:
    m = re.match(r"#\s*(\S+\.attn)\b", block.body)
    return m.group(1) if block.lang == "" and m else None


def cpp_file_name(block: Block) -> Optional[str]:
    m = re.match(r"//\s*(\S+\.(?:cpp|cc|c)):", block.body)
    return m.group(1) if block.lang in ("cpp", "c++", "c") and m else None


def collect():
    """pytest params: (kind, item) for every block a test runs or skips."""
    params = []
    for doc in DOCS:
        exports: List[str] = []
        for block in read_blocks(doc):
            where = f"{doc}:{block.line}"
            if block.lang == "python":
                params.append(pytest.param("python", block, id=f"{where}-python"))
            elif block.lang in ("sh", "bash"):
                params.append(pytest.param("sh", block, id=f"{where}-sh"))
            elif attn_file_name(block):
                params.append(pytest.param("attn", block, id=f"{where}-{attn_file_name(block)}"))
            elif is_commands(block):
                commands = split_commands(block, exports)
                if all(c.cmd.split()[0] in ("attnc", "export") for c in commands):
                    for c in commands:
                        word = c.cmd.split()[1] if c.cmd.startswith("attnc ") else "export"
                        params.append(pytest.param("cli", c, id=f"{doc}:{c.line}-{word}"))
                else:  # a build: the commands run in turn, as one script
                    params.append(pytest.param("build", (block, commands), id=f"{where}-build"))
    return params


# ---------------------------------------------------------------------------
# The sandbox


def find_cli() -> Tuple[Optional[pathlib.Path], Optional[pathlib.Path], str]:
    """(the CLI, its build directory or None, where it was looked for)."""
    if os.environ.get("ATTNC_CLI"):
        cli = pathlib.Path(os.environ["ATTNC_CLI"]).resolve()
        ok = cli.is_file() and os.access(cli, os.X_OK)
        return (cli if ok else None), None, f"ATTNC_CLI={cli} is not an executable file"
    names = []
    if os.environ.get("ATTNC_BUILD_DIR"):
        names.append(os.environ["ATTNC_BUILD_DIR"])
    venv = pathlib.Path(sys.prefix).name
    if venv.endswith("-venv"):
        names.append(venv[: -len("-venv")])
    names += ["build", "build-fe"]
    for name in names:
        build = pathlib.Path(name) if os.path.isabs(name) else REPO / name
        cli = build / "tools" / "attnc" / "attnc"
        if cli.is_file() and os.access(cli, os.X_OK):
            return cli, build, ""
    tried = ", ".join(f"{n}/tools/attnc/attnc" for n in dict.fromkeys(names))
    return None, None, f"ATTNC_CLI unset, none of {tried} in {REPO}"


CLI, BUILD, LOOKED = find_cli()
NO_CLI = f"no attnc CLI built ({LOOKED})"


class Sandbox:
    def __init__(self, root: pathlib.Path, doc: str):
        self.root = root
        (root / "patterns").symlink_to(REPO / "patterns", target_is_directory=True)
        (root / "home").mkdir()
        if BUILD is not None:
            (root / "build").symlink_to(BUILD, target_is_directory=True)
        elif CLI is not None:  # ATTNC_CLI: the README's build/tools/attnc path leads to it
            (root / "build" / "tools" / "attnc").mkdir(parents=True)
            (root / "build" / "tools" / "attnc" / "attnc").symlink_to(CLI)
        path = os.environ.get("PATH", "")
        if CLI is not None:  # the tutorial's commands assume attnc on the PATH
            path = f"{CLI.parent}{os.pathsep}{path}"
        self.env = dict(os.environ, HOME=str(root / "home"), PATH=path, PYTHONDONTWRITEBYTECODE="1")
        # The document's own files (the tutorial's mine.attn, the README's hello.cpp),
        # written before anything runs, so that each test stands alone.
        for block in read_blocks(doc):
            name = attn_file_name(block) or cpp_file_name(block)
            if name and not name.startswith("patterns/"):
                assert "/" not in name, name
                (root / name).write_text(block.body)

    def bash(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script], cwd=self.root, env=self.env, capture_output=True,
                              text=True, timeout=TIMEOUT)

    def reader_file(self, name: str) -> bool:
        """Makes an input file the documents leave to the reader; False if unknown."""
        if (self.root / name).exists():
            return True
        if name not in READER_FILES:
            return False
        import numpy as np

        kind, shape = READER_FILES[name]
        rng = np.random.default_rng(0)
        if kind == "float32":
            array = rng.standard_normal(shape, dtype=np.float32)
        elif kind == "doc":
            array = np.sort(rng.integers(0, 4, shape)).astype(np.int32)
        elif kind == "buckets":
            array = rng.integers(0, 64, shape).astype(np.int32)
        else:  # selected blocks: each row names k earlier-or-own blocks
            rows, k = shape
            array = np.array([[min(r, c * 7 % (r + 1)) for c in range(k)] for r in range(rows)], np.int32)
        np.save(self.root / name, array)
        return True


_sandboxes: Dict[str, Sandbox] = {}


@pytest.fixture
def sandbox(request, tmp_path_factory):
    def get(doc: str) -> Sandbox:
        if doc not in _sandboxes:
            _sandboxes[doc] = Sandbox(tmp_path_factory.mktemp(pathlib.Path(doc).stem), doc)
        return _sandboxes[doc]

    return get


# ---------------------------------------------------------------------------
# Checks


def is_timing(line: str) -> bool:
    """Lines whose numbers change from run to run."""
    return bool(re.search(r"\btime\b|GFLOP/s|tok/s|\d\s*(ms|us|µs|s)\b", line))


def assert_shown(shown: List[str], got: str, what: str):
    """The shown lines appear in the output, in order (timings aside)."""
    out = [line.rstrip() for line in got.splitlines()]
    at = 0
    for line in shown:
        if is_timing(line):
            continue
        try:
            at = out.index(line, at) + 1
        except ValueError:
            pytest.fail(f"{what}: the shown line\n  {line!r}\nis not in the output (after line {at}):\n{got}")


def gpu_or_ranks(text: str) -> Optional[str]:
    if "torchrun" in text or "init_process_group" in text:
        return "needs several processes (torchrun / torch.distributed)"
    if re.search(r"""device\s*=\s*["']cuda|target\s*=\s*["']cuda|\.cuda\(|--target\s+cuda""", text):
        return "needs an NVIDIA GPU"
    return None


def code_lines(text: str) -> List[str]:
    lines = [re.sub(r"#.*", "", line).strip() for line in text.splitlines()]
    return [" ".join(line.split()) for line in lines if line]


def run_python(box: Sandbox, block: Block):
    script = box.root / f"snippet_{block.line}.py"
    script.write_text(block.body)
    r = subprocess.run([sys.executable, str(script)], cwd=box.root, env=box.env, capture_output=True,
                       text=True, timeout=TIMEOUT)
    assert r.returncode == 0, f"{block.doc}:{block.line}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    for expected in re.findall(r"^\s*print\(.*#\s*(.*?)\s*$", block.body, re.M):
        assert expected in r.stdout.split(), f"{block.doc}:{block.line}: {expected!r} not printed:\n{r.stdout}"


def run_cli(box: Sandbox, command: Command):
    words = command.cmd.split("#")[0].split()
    if words[:2] == ["attnc", "bench"]:
        pytest.skip("attnc bench times every backend at the document's size: minutes (as the document says)")
    # Files the command reads (not -o): the reader's own, made here if the test knows their shape.
    for flag, value in zip(words, words[1:]):
        name = value.split("=", 1)[1] if flag == "--input" else value
        if flag in ("--q", "--k", "--v", "--input") or (flag == "--grad" and value != "random"):
            if not box.reader_file(name):
                pytest.skip(f"reads {name}, a file the document leaves to the reader")
    r = box.bash("\n".join(command.exports + [command.cmd]))
    where = f"{command.doc}:{command.line}: {command.cmd}"
    assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    assert_shown(command.shown, r.stdout, where)


def run_build(box: Sandbox, block: Block, commands: List[Command]):
    for command in commands:
        words = command.cmd.split()
        if words[0] == "export":
            continue
        for tool in re.findall(r"(?:^|&&|\|\||;|\$\()\s*([A-Za-z][\w.+-]*)", command.cmd):
            if tool not in ("export", "cd") and shutil.which(tool, path=box.env["PATH"]) is None:
                pytest.skip(f"{tool} is not installed: the block `{command.cmd}` cannot run here")
        if words[:2] == ["cmake", "--install"]:
            if not (box.root / words[2] / "cmake_install.cmake").is_file():
                pytest.skip(f"no install rules in {words[2]}/ ({BUILD or 'no build directory'}): "
                            "the README's C++ example needs an installed attnc")
    script = "set -e\n" + "\n".join(c.cmd for c in commands)
    r = box.bash(script)
    where = f"{block.doc}:{block.line}"
    assert r.returncode == 0, f"{where}: exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    assert_shown(commands[-1].shown, r.stdout, where)


@pytest.mark.parametrize("kind,item", collect())
def test_snippet(kind, item, sandbox):
    if kind == "sh":
        pytest.skip(f"the quick start ({item.body.strip()}): apt-get and a whole build, what CI runs itself")
    if kind == "python":
        reason = gpu_or_ranks(item.body)
        if reason:
            pytest.skip(reason)
        run_python(sandbox(item.doc), item)
        return
    if CLI is None:
        pytest.skip(NO_CLI)
    if kind == "attn":
        name = attn_file_name(item)
        box = sandbox(item.doc)
        if name.startswith("patterns/"):
            assert code_lines(item.body) == code_lines((REPO / name).read_text()), \
                f"{item.doc}:{item.line}: the block is not {name} (comments aside)"
            path = box.root / "shown" / pathlib.Path(name).name
            path.parent.mkdir(exist_ok=True)
            path.write_text(item.body)
        else:
            path = box.root / name
        r = box.bash(f"attnc check {path}")
        assert r.returncode == 0, f"{item.doc}:{item.line}: attnc check {name}:\n{r.stdout}{r.stderr}"
    elif kind == "cli":
        reason = gpu_or_ranks(item.cmd)
        if reason:
            pytest.skip(reason)
        run_cli(sandbox(item.doc), item)
    elif kind == "build":
        run_build(sandbox(item[0].doc), *item)
    else:
        raise AssertionError(kind)
