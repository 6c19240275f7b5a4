# SPDX-License-Identifier: BSD-3-Clause
"""Every code block of README.md and docs/ runs as written (or is checked, for shell commands).

* Python blocks (```python fences in Markdown, ``.. code-block:: python`` and ``>>>`` examples in
  reStructuredText) of one file run in order in one fresh namespace, as a reader would type them, in a
  temporary working directory, with warnings as errors.  A block that imports an optional extra (flwr,
  ray, jax, numba) is skipped, with the rest of its file, when that extra is missing.
* Shell blocks (```bash fences, ``::`` literal blocks): every ``fedmm ...`` command is parsed by the CLI's
  own parser (and its ``--config`` file applied), nothing is executed; every ``pip install`` names only
  extras that ``pyproject.toml`` declares.
* A block that cannot run in a test (a deployment across processes, a cluster) is preceded in the source
  by ``<!-- snippet: not-run (covered by tests/<layer>/test_x.py::test_name) -->`` (Markdown) or
  ``.. snippet: not-run (covered by tests/<layer>/test_x.py::test_name)`` (reStructuredText); the named test
  must exist.  Such a block still compiles, and no block of a file uses a name that the file never
  defines (ruff's F821 over the file's blocks in order).
"""
from __future__ import annotations

import ast
import dataclasses
import gc
import importlib.util
import re
import shlex
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Top-level modules of the optional extras, and the extra that brings each one.
EXTRA_MODULES = {"flwr": "flower", "ray": "ray", "jax": "ot", "optax": "ot", "numba": "numba"}
#: fedmm names whose use needs an extra although the block imports no extra itself.
EXTRA_NAMES = {"RayRuntime": "ray", "local_ray": "ray", "init_local_ray": "ray", "NumbaModel": "numba",
               "FedMMOT": "jax", "FedAdam": "jax", "TransportProblem": "jax", "ICNN": "jax",
               "fedmm.runtime.flower": "flwr", "fedmm.runtime.ray": "ray"}
PYTHON = {"python", "py", "pycon"}
SHELL = {"bash", "sh", "shell", "console"}
#: Fence languages that are not code (formulas, file contents shown for reading).
NOT_CODE = {"text", "toml"}
NOT_RUN = re.compile(r"snippet: not-run \(covered by (tests/[\w/]+\.py)::(\w+)\)")


@dataclasses.dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # the block's first line in the file (1-based)
    lang: str
    code: str
    covered_by: tuple[str, str] | None = None  # (test file, test function) of a not-run block

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    skip = {"_build", "auto_examples", "generated"}
    files = [ROOT / "README.md"] + sorted(DOCS.rglob("*.md")) + sorted(DOCS.rglob("*.rst"))
    return [f for f in files if f.is_file() and not skip & set(f.relative_to(ROOT).parts)]


def _marker(lines: list[str], index: int) -> tuple[str, str] | None:
    """The not-run marker on the last non-blank line before ``lines[index]``, if any."""
    for j in range(index - 1, -1, -1):
        if lines[j].strip():
            m = NOT_RUN.search(lines[j])
            return (m.group(1), m.group(2)) if m else None
    return None


def markdown_snippets(path: Path) -> list[Snippet]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```")
        out.append(Snippet(path, i + 2, m.group(1), "\n".join(lines[i + 1:end]) + "\n", _marker(lines, i)))
        i = end + 1
    return out


def _indented_body(lines: list[str], start: int) -> tuple[int, str]:
    """``(first line number, dedented text)`` of the indented block that starts after ``lines[start]``."""
    j = start + 1
    while j < len(lines) and (not lines[j].strip() or lines[j].lstrip().startswith(":")):
        j += 1
    first, body = j, []
    while j < len(lines) and (not lines[j].strip() or lines[j].startswith((" ", "\t"))):
        body.append(lines[j])
        j += 1
    while body and not body[-1].strip():
        body.pop()
    indent = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
    return first + 1, "\n".join(b[indent:] for b in body) + "\n"


def rst_snippets(path: Path) -> list[Snippet]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^\s*\.\. code-block::\s*(\S+)", line)
        if m:
            first, code = _indented_body(lines, i)
            out.append(Snippet(path, first, m.group(1), code, _marker(lines, i)))
        elif line.rstrip().endswith("::") and not line.lstrip().startswith(".."):
            first, code = _indented_body(lines, i)  # a literal block: shell commands, or text
            out.append(Snippet(path, first, "sh" if _is_command(code) else "text", code, _marker(lines, i)))
        elif line.lstrip().startswith(">>> ") and not (i and lines[i - 1].lstrip().startswith((">>>", "..."))):
            j, body = i, []
            while j < len(lines) and lines[j].lstrip().startswith((">>>", "...")):
                body.append(lines[j].lstrip()[4:])
                j += 1
            out.append(Snippet(path, i + 1, "python", "\n".join(body) + "\n", _marker(lines, i)))
    return out


def _is_command(code: str) -> bool:
    return any(re.match(r"(fedmm|python|pip|flwr|ray)\b", ln.strip()) for ln in code.splitlines())


def snippets(path: Path) -> list[Snippet]:
    return markdown_snippets(path) if path.suffix == ".md" else rst_snippets(path)


def _ids(paths):
    return [str(p.relative_to(ROOT)) for p in paths]


PYTHON_FILES = [p for p in doc_files() if any(s.lang in PYTHON for s in snippets(p))]
SHELL_FILES = [p for p in doc_files() if any(s.lang in SHELL for s in snippets(p))]


def test_the_snippets_are_found():
    found = {str(p.relative_to(ROOT)) for p in PYTHON_FILES}
    assert {"README.md", "docs/runtime-ray.md", "docs/runtime-flower.md", "docs/install.md",
            "docs/index.rst", "docs/guide/reproducibility.rst"} <= found, found
    assert {"README.md", "docs/install.md", "docs/guide/figures.rst"} <= {str(p.relative_to(ROOT)) for p in SHELL_FILES}
    readme = markdown_snippets(ROOT / "README.md")
    assert [s.lang for s in readme].count("python") >= 2 and [s.lang for s in readme].count("bash") >= 5


@pytest.mark.parametrize("path", doc_files(), ids=_ids(doc_files()))
def test_every_code_block_says_what_it_is(path):
    """An unlabelled fence would be neither run nor checked: each block names its language."""
    unknown = [f"{s.where()}: {s.lang or '(no language)'}" for s in snippets(path)
               if s.lang not in PYTHON | SHELL | NOT_CODE]
    assert not unknown, f"label these blocks python, bash or text: {unknown}"


def test_not_run_markers_name_an_existing_test():
    markers = 0
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        n_markers = len(re.findall(r"snippet: not-run", text))
        covered = [s.covered_by for s in snippets(path) if s.covered_by]
        assert n_markers == len(covered), f"{path.name}: a not-run marker must directly precede a code block " \
                                          f"and name its covering test as tests/<layer>/test_x.py::test_name"
        for test_file, test_name in covered:
            source = (ROOT / test_file).read_text(encoding="utf-8") if (ROOT / test_file).is_file() else ""
            assert re.search(rf"^def {test_name}\(", source, re.MULTILINE), f"{path.name}: no {test_file}::{test_name}"
        markers += len(covered)
    assert markers >= 1


# --------------------------------------------------------------------------- Python blocks
def _needed_modules(code: str) -> list[str]:
    """The optional extras' modules that a block needs, from its imports and the fedmm names it uses."""
    needed = []
    for node in ast.walk(ast.parse(code)):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names = [node.id]
        for name in names:
            module = EXTRA_MODULES.get(name.split(".")[0]) and name.split(".")[0] or EXTRA_NAMES.get(name)
            if module and module not in needed:
                needed.append(module)
    return needed


def _python_params():
    params = []
    for path in PYTHON_FILES:
        needs = {m for s in snippets(path) if s.lang in PYTHON and not s.covered_by for m in _needed_modules(s.code)}
        marks = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::ResourceWarning")] \
            if needs & {"ray", "flwr"} else []  # Ray leaves handles of its helper processes open
        params.append(pytest.param(path, marks=marks, id=str(path.relative_to(ROOT))))
    return params


def _cleanup():
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def _no_ray_up():
    """As in a reader's fresh interpreter: no Ray that an earlier test left up (tests/conftest.py: ray_session).

    Ray leaves handles of its helper processes open at shutdown: that ResourceWarning is Ray's."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            ray.shutdown()
            gc.collect()


@pytest.mark.parametrize("path", _python_params())
def test_python_blocks_run_in_order(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # What the pages tell the reader to export before a run (loopback-only Ray, no Flower telemetry).
    for name, value in {"MPLBACKEND": "Agg", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
                        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0", "FLWR_TELEMETRY_ENABLED": "0",
                        "FLWR_DISABLE_UPDATE_CHECK": "1"}.items():
        monkeypatch.setenv(name, value)
    namespace = {"__name__": "__main__"}
    ran = 0
    _no_ray_up()
    try:
        for snippet in snippets(path):
            if snippet.lang not in PYTHON:
                continue
            code = compile("\n" * (snippet.line - 1) + snippet.code, str(path), "exec")
            if snippet.covered_by:
                continue
            for module in _needed_modules(snippet.code):
                if importlib.util.find_spec(module) is None:
                    extra = EXTRA_MODULES.get(module, "ot")
                    pytest.skip(f"{snippet.where()} and the blocks after it need {module}: "
                                f"pip install 'fedmm[{extra}]'")
            exec(code, namespace)
            ran += 1
    finally:
        _cleanup()
    assert ran >= 1


@pytest.mark.parametrize("path", PYTHON_FILES, ids=_ids(PYTHON_FILES))
def test_python_blocks_define_every_name_they_use(path):
    """Not-run blocks included: each block uses only names that it or an earlier block of its file defines."""
    ruff = [sys.executable, "-m", "ruff"]
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is in the 'test' extra")
    lines = [""] * path.read_text(encoding="utf-8").count("\n")
    for s in snippets(path):
        if s.lang in PYTHON:
            for k, text in enumerate(s.code.splitlines()):
                lines[s.line - 1 + k] = text
    proc = subprocess.run(ruff + ["check", "--isolated", "--no-cache", "--select", "F821", "--output-format",
                                  "concise", "--stdin-filename", str(path.with_suffix(".py")), "-"],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _private_fedmm_imports(code: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fedmm":
            found += [f"{node.module}.{a.name}" for a in node.names
                      if any(p.startswith("_") for p in node.module.split(".")) or a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split(".")[0] == "fedmm" and any(p.startswith("_") for p in a.name.split("."))]
    return found


def test_examples_use_public_names_only():
    """What users copy (the documented snippets, the scripts of examples/) imports no private fedmm name."""
    sources = [(s.where(), s.code) for p in PYTHON_FILES for s in snippets(p) if s.lang in PYTHON]
    sources += [(str(f.relative_to(ROOT)), f.read_text(encoding="utf-8"))
                for f in sorted((ROOT / "examples").rglob("*.py"))]
    assert len(sources) > 20
    private = [f"{where}: {name}" for where, code in sources for name in _private_fedmm_imports(code)]
    assert not private, private


# --------------------------------------------------------------------------- shell blocks
def _commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block (continuations joined, ``&&``/``;``/``|`` split, comments dropped)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True) if line.strip() else []
        current: list[str] = []
        for word in words + ["&&"]:
            if word in {"&&", ";", "||", "|", "&"}:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


#: A documented ``fedmm demo`` with at most this many rounds is quick enough to run here.
QUICK_DEMO_ROUNDS = 100


def _check_fedmm_command(argv: list[str], where: str) -> None:
    from fedmm.cli import build_parser, main
    from fedmm.experiments._common import apply_config

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help and --version exit 0; a refusal exits 2
        assert exc.code == 0, f"{where}: fedmm {' '.join(argv)} is refused by the CLI's parser"
        return
    assert getattr(args, "func", None) is not None, f"{where}: fedmm {' '.join(argv)} names no command"
    if getattr(args, "config", None) is not None:
        words = args.command_parser.prog.split()[1:]  # the command's own arguments follow its name(s)
        rest = argv[max(argv.index(w) for w in words) + 1:]
        args = apply_config(args, rest)
    if argv[0] == "demo" and args.rounds <= QUICK_DEMO_ROUNDS:
        assert main(argv) == 0, f"{where}: fedmm {' '.join(argv)} failed"
        assert (Path(args.out) / "demo.json").is_file(), f"{where}: fedmm {' '.join(argv)} wrote no demo.json"


def _check_pip_install(argv: list[str], where: str, extras: set[str]) -> None:
    for word in argv:
        m = re.fullmatch(r"(?:\.|fedmm)\[([\w,\-]+)\]", word)
        if m:
            unknown = set(m.group(1).split(",")) - extras
            assert not unknown, f"{where}: pip install names extras that pyproject.toml lacks: {sorted(unknown)}"


@pytest.mark.parametrize("path", SHELL_FILES, ids=_ids(SHELL_FILES))
def test_shell_commands_are_valid(path, tmp_path, monkeypatch, capsys):
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["project"]["optional-dependencies"])
    # Relative paths in the commands (--config examples/...) are those of a source checkout; --out
    # directories land in the temporary directory.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    checked = 0
    for snippet in snippets(path):
        if snippet.lang not in SHELL:
            continue
        for argv in _commands(snippet.code):
            if argv[0] == "fedmm":
                _check_fedmm_command(argv[1:], snippet.where())
                checked += 1
            elif argv[:2] == ["pip", "install"] or argv[:4] == ["python", "-m", "pip", "install"]:
                _check_pip_install(argv, snippet.where(), extras)
                checked += 1
    capsys.readouterr()
    if path.name != "runtime-flower.md" and "runtime-ray" not in path.name:
        assert checked >= 1, f"{path.name}: no fedmm or pip command found in its shell blocks"
