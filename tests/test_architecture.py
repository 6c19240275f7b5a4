# SPDX-License-Identifier: BSD-3-Clause
"""The package's architecture rules (DESIGN §1, issue 13), checked on the source of every module.

1. No module reads or writes another object's underscore attributes: ``obj._name`` (single leading
   underscore, not a dunder) only on ``self``, ``cls``, ``super()`` or ``type(self)``; the same for
   ``getattr``/``setattr``/``hasattr``/``delattr`` with a constant name.  The documented public API of
   named tuples (``_fields``, ``_asdict``, ...) is not private and is allowed.
2. No ``from module import _name`` of an underscore *name*.  Importing a private *module*
   (``from fedmm import _rounds``, ``import fedmm._validation``) is how a pure-Python layer wraps
   its own compiled and helper modules, and is allowed; reading underscore names out of it is not.
3. Imports point down the layers only (module-level and function-level imports alike, including
   ``if TYPE_CHECKING:`` blocks):

       core (fedmm, fedmm.kernels, fedmm._*, fedmm.history, fedmm.protocols)
         ← fedmm.compression, fedmm.models
         ← fedmm.algorithms (and fedmm.engine)
         ← fedmm.runtime, fedmm.data
         ← fedmm.experiments, fedmm.plotting
         ← fedmm.cli, fedmm.demo, fedmm.__main__
         (fedmm.estimators: scikit-learn estimators, on top of fedmm.algorithms; nothing imports them)

   ``fedmm.compression`` and ``fedmm.models`` do not import each other; ``fedmm.data`` needs only
   the core.  A new top-level module must be given a layer here.

Each test is parametrized over the source files and reports every violation of its file at once, as
``path:line: expression``.  There is no allowlist: a file that breaks a rule fails until it is fixed.
"""
from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "fedmm"
SOURCES = sorted(PACKAGE.rglob("*.py"))

#: Receivers on which underscore attributes are the object's own.
OWN = {"self", "cls"}
#: Underscore names that are documented public API of the standard library (named tuples).
PUBLIC_UNDERSCORE = {"_fields", "_field_defaults", "_asdict", "_replace", "_make"}
ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}

#: Layer groups and the groups each may import (itself included).
GROUP_OF_SUBPACKAGE = {
    "kernels": "core", "history": "core", "protocols": "core",
    "compression": "compression", "models": "models",
    "algorithms": "algorithms", "engine": "algorithms",
    "runtime": "runtime", "data": "data",
    "experiments": "experiments", "plotting": "experiments",
    "cli": "apps", "demo": "apps", "__main__": "apps",
    "estimators": "estimators",
}
MAY_IMPORT = {
    "core": {"core"},
    "compression": {"core", "compression"},
    "models": {"core", "models"},
    "algorithms": {"core", "compression", "models", "algorithms"},
    "runtime": {"core", "compression", "models", "algorithms", "runtime"},
    "data": {"core", "data"},
    "experiments": {"core", "compression", "models", "algorithms", "runtime", "data", "experiments"},
    "apps": {"core", "compression", "models", "algorithms", "runtime", "data", "experiments", "apps"},
    "estimators": {"core", "compression", "models", "algorithms", "estimators"},
}


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _report(path: Path, package: Path, found) -> list[str]:
    """``path:line: text`` for ``(line, text)`` pairs, by line, path relative to the repository."""
    where = path.relative_to(package.parent.parent).as_posix()
    return [f"{where}:{line}: {text}" for line, text in sorted(set(found))]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORE


def _own_receiver(node: ast.expr) -> bool:
    """``self``, ``cls``, ``super()`` (with or without arguments) or ``type(self)``/``type(cls)``."""
    if isinstance(node, ast.Name):
        return node.id in OWN
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "super":
            return True
        if node.func.id == "type" and len(node.args) == 1 and not node.keywords:
            return isinstance(node.args[0], ast.Name) and node.args[0].id in OWN
    return False


@lru_cache(maxsize=None)
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _absolute(module: str | None, level: int, here: str, is_package: bool) -> str:
    """The absolute module of ``from <level dots><module> import ...`` written in module ``here``."""
    if not level:
        return module or ""
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


@lru_cache(maxsize=None)
def is_module(name: str, package: Path = PACKAGE) -> bool:
    """Whether ``name`` is an importable module (a source file here, or a compiled/installed one)."""
    top, *rest = name.split(".")
    if top == package.name:
        path = package.joinpath(*rest)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
        if len(rest) != 1:
            return False  # compiled extensions are direct children of the package (fedmm._rounds)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def imports(path: Path, package: Path = PACKAGE):
    """``(line, text, imported module, imported name or None)`` for every import statement in the file."""
    here = module_name(path, package)
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, ast.unparse(node), alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, here, is_package)
            for alias in node.names:
                yield node.lineno, ast.unparse(node), base, alias.name


# --------------------------------------------------------------------------- the checks
def private_access(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 1: ``obj._name`` with ``obj`` not the object itself; ``getattr(obj, "_name")`` likewise."""
    out = []
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _own_receiver(node.value):
            out.append((node.lineno, ast.unparse(node)))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and _private(node.args[1].value)
              and not _own_receiver(node.args[0])):
            out.append((node.lineno, ast.unparse(node)))
    return _report(path, package, out)


def private_names_imported(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 2: ``from m import _name`` where ``m._name`` is not a module."""
    out = []
    for line, _, module, name in imports(path, package):
        if name is not None and _private(name) and not is_module(f"{module}.{name}", package):
            out.append((line, f"from {module} import {name}"))
    return _report(path, package, out)


def group(module: str) -> str | None:
    """The layer group of a fedmm module, None for an unclassified one."""
    parts = module.split(".")
    if len(parts) == 1:
        return "core"  # the package itself
    sub = parts[1]
    if sub in GROUP_OF_SUBPACKAGE:
        return GROUP_OF_SUBPACKAGE[sub]
    if sub.startswith("_"):
        return "core"  # compiled extensions and private helpers (_validation, _kernels_*)
    return None


def layer_violations(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 3: imports of a fedmm module from a group this file's group may not import."""
    here = module_name(path, package)
    mine = group(here)
    if mine is None:
        return _report(path, package, [(1, f"module {here} has no layer: add it to GROUP_OF_SUBPACKAGE")])
    out = []
    for line, text, module, name in imports(path, package):
        if module.split(".")[0] != package.name:
            continue
        target = f"{module}.{name}" if name is not None and is_module(f"{module}.{name}", package) else module
        theirs = group(target)
        if theirs is None or theirs not in MAY_IMPORT[mine]:
            out.append((line, f"{text}  ({mine} -> {theirs or target + ' (no layer)'})"))
    return _report(path, package, out)


# --------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_underscore_access_across_objects(path):
    problems = private_access(path) + private_names_imported(path)
    assert not problems, "reads another module's private names:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_imports_point_down_the_layers(path):
    problems = layer_violations(path)
    assert not problems, "imports against the layers:\n" + "\n".join(problems)


# --------------------------------------------------------------------------- the checker itself
def _check_snippet(tmp_path, source, name="models/probe.py"):
    """The three checks on ``source`` saved as ``<scratch>/fedmm/<name>`` (a scratch package)."""
    package = tmp_path / "src" / "fedmm"
    path = package / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    return private_access(path, package) + private_names_imported(path, package) + layer_violations(path, package)


def test_the_checker_flags_what_it_should(tmp_path):
    got = _check_snippet(tmp_path, "\n".join([
        "from fedmm import _quantize",                       # 1 private module: fine
        "from fedmm._validation import check_int",           # 2 public name of a private module: fine
        "from fedmm._validation import _helper",             # 3 private name: flagged
        "import fedmm.algorithms",                           # 4 models -> algorithms: flagged
        "class A:",
        "    def f(self, other):",
        "        self._x = other._y",                        # 7 other._y flagged, self._x fine
        "        super()._z(); type(self)._w; cls = 1",      # 8 fine
        "        getattr(other, '_v'); hasattr(self, '_u')",  # 9 getattr(other, '_v') flagged
        "        other._fields, other.__dict__",             # 10 fine (named tuple API, dunder)",
        "        from fedmm.runtime import local",           # 11 models -> runtime: flagged
        "        type(other)._t",                            # 12 flagged
    ]))
    assert [g.split(":")[1] for g in got] == ["7", "9", "12", "3", "4", "11"], got
    assert "other._y" in got[0] and "getattr(other, '_v')" in got[1] and "type(other)._t" in got[2]
    assert "(models -> algorithms)" in got[4] and "(models -> runtime)" in got[5]


def test_the_layers_cover_every_module():
    assert {module_name(p) for p in SOURCES if group(module_name(p)) is None} == set()
    assert group("fedmm.runtime.flower") == "runtime" and group("fedmm._rounds") == "core"
    assert group("fedmm.protocols") == "core"
