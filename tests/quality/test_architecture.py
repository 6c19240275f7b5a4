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
         ← fedmm.algorithms (and fedmm.federation)
         ← fedmm.runtime, fedmm.data
         ← fedmm.experiments, fedmm.plotting
         ← fedmm.cli, fedmm.demo, fedmm.__main__
         (fedmm.estimators: scikit-learn estimators, on top of fedmm.algorithms; nothing imports them)

   ``fedmm.compression`` and ``fedmm.models`` do not import each other; ``fedmm.data`` needs only
   the core.  A new top-level module must be given a layer here.
4. A private module is private to its package: ``fedmm.X._y`` (the first underscore component of the
   dotted path decides: ``fedmm.algorithms._random``, ``fedmm.experiments._common``,
   ``fedmm.models._compiled``) is imported only by the modules of ``fedmm.X``.  The package's own
   private modules follow the kernel gate: the compiled extensions (``fedmm._quantize``, ``_sparse``,
   ``_linalg``, ``_nonsmooth``, ``_rounds``, ``_engine``: ``src/fedmm_core/meson.build``) and their
   checked wrappers ``fedmm._kernels_*`` are imported only by ``fedmm.kernels`` and by the
   ``_kernels_*`` wrappers themselves: **``fedmm.kernels`` is the only gate to compiled code**.
   The one documented exception: the core utility modules ``fedmm._validation``, ``fedmm._progress``
   and ``fedmm._memory`` are importable from every layer (they are the package's shared argument,
   progress-bar and allocation checks, not compiled code).
5. No capability probes in the federation engine and the runtimes (``fedmm/federation/``,
   ``fedmm/runtime/``): they rely on the declared contract of :mod:`fedmm.protocols` (every server,
   client, monitor has the members it lists) instead of discovering what an object can do.  Forbidden
   there: any ``inspect.signature`` / ``inspect.getfullargspec`` / ``inspect.Signature`` (used or
   imported), and ``hasattr(p, ...)`` or a defaulted ``getattr(p, name, default)`` on a party ``p``:
   an expression whose last name (through ``self.``, ``type(...)`` and subscripts) is one of
   :data:`PARTY_NAMES`.  Type dispatch on *data* (``hasattr(value, "__array__")`` in the checkpoint
   writer, ``hasattr(theta, "_fields")``) is data conversion, not a probe, and stays allowed.
6. The runtimes (``fedmm/runtime/``) import nothing from ``fedmm.algorithms`` (no name, no submodule, at module
   or function level): they move what :mod:`fedmm.protocols` declares (``ServerParty``, ``ClientParty``,
   ``RemoteAlgorithm``) and hold no per-algorithm adapter.  What a runtime needs of an algorithm is a member of
   the contract (the algorithm's ``remote_server``, ``broadcast_from_arrays``, ...); what it shares with the
   in-process engine comes from ``fedmm.federation``, seeds are checked by ``fedmm._validation``.  There is no
   exception for "protocol-level helpers": a helper a runtime needs belongs to the protocol or to the engine.
7. The C API is laid out by kernel family: ``src/kernels/fedmm_kernels.h`` only includes the family
   headers ``fedmm_<family>.h``; each has its ``.pxd`` (``python/fedmm/fedmm_<family>.pxd``, an
   ``extern`` block of that header), and ``fedmm_kernels.pxd`` cimports every one.  The extension
   modules (``src/fedmm_core/*.pyx``) turn kernel status codes into exceptions only through
   ``status.pxi``: each includes it, and none raises with ``fedmm_strerror`` itself.

8. The compiled backend reads no party (``fedmm/federation/compiled.py`` and the state values it consumes,
   ``fedmm/federation/state.py``): it works on values (``RoundConfig``, ``ServerState``, ``ClientState``, the
   compiled model, arrays).  Forbidden there: a parameter named like a party (:data:`PARTY_NAMES`), an
   attribute read through such a name (``server.S``, ``clients[0].V``, ``self.client.oracle``) and any
   import of ``fedmm.algorithms`` or ``fedmm.runtime``, where the parties live.

Each test is parametrized over the source files and reports every violation of its file at once, as
``path:line: expression``.  There is no allowlist: a file that breaks a rule fails until it is fixed.
"""
from __future__ import annotations

import ast
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "fedmm"
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
    "algorithms": "algorithms", "federation": "algorithms",
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


#: Top-level private modules every layer may import (rule 4's one exception): shared checks, not compiled code.
CORE_UTILITIES = {"_validation", "_progress", "_memory"}
#: The only modules that may import the compiled extensions and the ``_kernels_*`` wrappers (rule 4).
KERNEL_GATE = "kernels"
#: Packages whose code may not probe the parties' capabilities (rule 5), relative to the package.
NO_PROBES = ("federation", "runtime")
#: Names that hold a party of a run in the engine and the runtimes (rule 5).
PARTY_NAMES = {"server", "client", "clients", "c", "share", "contacted", "monitor", "runtime", "party", "parties"}
#: ``inspect`` functions that read a callable's signature (rule 5).
SIGNATURE_PROBES = {"signature", "getfullargspec", "getargspec", "Signature"}


def private_owner(module: str) -> str | None:
    """The package a private module belongs to (``fedmm.algorithms`` for ``fedmm.algorithms._random``,
    ``fedmm`` for ``fedmm._rounds``), None for a public module."""
    parts = module.split(".")
    for k, part in enumerate(parts):
        if _private(part):
            return ".".join(parts[:k])
    return None


def may_import_private(here: str, target: str) -> bool:
    """Rule 4: whether module ``here`` may import the private module ``target``."""
    owner = private_owner(target)
    if owner is None:
        return True
    top, *rest = target.split(".")
    if owner == top:  # a private module of the package itself
        if rest[0] in CORE_UTILITIES:
            return True
        gate = f"{top}.{KERNEL_GATE}"
        return here == gate or (here.startswith(f"{top}._kernels_") and here.count(".") == 1)
    return here == owner or here.startswith(owner + ".")


def private_module_imports(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 4: imports of another package's private module (or of compiled code outside the kernel gate)."""
    here = module_name(path, package)
    out = []
    for line, text, module, name in imports(path, package):
        if module.split(".")[0] != package.name:
            continue
        target = f"{module}.{name}" if name is not None and is_module(f"{module}.{name}", package) else module
        if not may_import_private(here, target):
            out.append((line, f"{text}  ({here} -> {target})"))
    return _report(path, package, out)


def _last_name(node: ast.expr) -> str | None:
    """``server`` for ``server``, ``self.server``, ``type(server)``, ``clients[0]``; else None."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"
              and len(node.args) == 1):
            node = node.args[0]
        else:
            break
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def capability_probes(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 5: signature reads and ``hasattr``/defaulted ``getattr`` on parties, in the engine and runtimes."""
    if module_name(path, package).split(".")[1:2] not in ([p] for p in NO_PROBES):
        return []
    out = []
    # the names the inspect module goes by in this file (``import inspect as ins`` too)
    inspect_names = {"inspect"} | {a.asname for node in ast.walk(tree(path)) if isinstance(node, ast.Import)
                                   for a in node.names if a.name == "inspect" and a.asname}
    for node in ast.walk(tree(path)):
        if (isinstance(node, ast.Attribute) and node.attr in SIGNATURE_PROBES and isinstance(node.value, ast.Name)
                and node.value.id in inspect_names):
            out.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.ImportFrom) and node.module == "inspect":
            out += [(node.lineno, ast.unparse(node)) for a in node.names if a.name in SIGNATURE_PROBES]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
              and (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3))
              and _last_name(node.args[0]) in PARTY_NAMES):
            out.append((node.lineno, ast.unparse(node)))
    return _report(path, package, out)


#: Packages that import nothing from the algorithms (rule 6), relative to the package, and what they may not import.
NO_ALGORITHM_IMPORTS = ("runtime",)
ALGORITHMS = "algorithms"


def algorithm_imports(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 6: imports of ``fedmm.algorithms`` (or of a name or submodule of it) in the runtimes."""
    here = module_name(path, package).split(".")
    if here[1:2] not in ([p] for p in NO_ALGORITHM_IMPORTS):
        return []
    banned = f"{package.name}.{ALGORITHMS}"
    out = []
    for line, text, module, name in imports(path, package):
        full = f"{module}.{name}" if name is not None else module
        if module == banned or module.startswith(banned + ".") or full == banned:
            out.append((line, text))
    return _report(path, package, out)


#: Modules of the compiled backend that work on values only (rule 8), relative to the package.
VALUE_ONLY = ("federation/compiled.py", "federation/state.py")
#: Where the parties live: the value-only modules import nothing from these (rule 8).
PARTY_PACKAGES = ("fedmm.algorithms", "fedmm.runtime")


def party_reads(path: Path, package: Path = PACKAGE) -> list[str]:
    """Rule 8: parameters named like a party, attribute reads through such a name, imports of the parties'
    packages, in the modules of the compiled backend (:data:`VALUE_ONLY`)."""
    if path.relative_to(package).as_posix() not in VALUE_ONLY:
        return []
    out = []
    for node in ast.walk(tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x is not None]
            out += [(node.lineno, f"parameter {p.arg!r}") for p in params if p.arg in PARTY_NAMES]
        elif isinstance(node, ast.Attribute) and _last_name(node.value) in PARTY_NAMES:
            out.append((node.lineno, ast.unparse(node)))
    for line, text, module, _ in imports(path, package):
        if any(module == p or module.startswith(p + ".") for p in PARTY_PACKAGES):
            out.append((line, text))
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


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_private_modules_stay_in_their_package(path):
    problems = private_module_imports(path)
    assert not problems, ("imports another package's private module (fedmm.kernels is the only gate to "
                          "compiled code):\n" + "\n".join(problems))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_capability_probes_in_the_engine_and_runtimes(path):
    problems = capability_probes(path)
    assert not problems, "probes a party instead of relying on fedmm.protocols:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_runtimes_import_nothing_from_the_algorithms(path):
    problems = algorithm_imports(path)
    assert not problems, ("a runtime imports from fedmm.algorithms (it must rely on fedmm.protocols, "
                          "e.g. RemoteAlgorithm):\n" + "\n".join(problems))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_the_compiled_backend_reads_no_party(path):
    problems = party_reads(path)
    assert not problems, "the compiled backend reaches into a party instead of taking values:\n" + "\n".join(problems)


def test_the_value_only_modules_exist():
    assert all((PACKAGE / name).is_file() for name in VALUE_ONLY)


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


def test_the_private_module_rule_flags_what_it_should(tmp_path):
    snippet = "\n".join([
        "from fedmm import _rounds",                          # 1 compiled code outside the gate: flagged
        "from fedmm._validation import check_int",            # 2 core utility: fine
        "import fedmm._memory, fedmm._progress",              # 3 core utilities: fine
        "from fedmm._kernels_sparse import lasso",            # 4 a kernel wrapper outside the gate: flagged
        "from fedmm.algorithms._random import RoundStream",   # 5 another package's private module: flagged
        "from fedmm.models._compiled import array_key",       # 6 its own package's private module: fine
        "from fedmm.models import _compiled",                 # 7 the same, as a module: fine
        "from fedmm.experiments import _common",              # 8 flagged
        "from fedmm.kernels import lasso",                    # 9 through the gate: fine
    ])
    package = tmp_path / "src" / "fedmm"
    for name in ("models/probe.py", "kernels.py", "_kernels_probe.py", "algorithms/probe.py",
                 "models/_compiled.py", "experiments/_common.py"):
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(snippet if "probe" in name or "kernels" in name else "")
    lines = [g.split(":")[1] for g in private_module_imports(package / "models/probe.py", package)]
    assert lines == ["1", "4", "5", "8"], lines
    # the gate and its wrappers reach compiled code; neither reaches another package's private module
    assert [g.split(":")[1] for g in private_module_imports(package / "kernels.py", package)] == ["5", "6", "7", "8"]
    assert [g.split(":")[1] for g in private_module_imports(package / "_kernels_probe.py", package)] == [
        "5", "6", "7", "8"]
    assert [g.split(":")[1] for g in private_module_imports(package / "algorithms/probe.py", package)] == [
        "1", "4", "6", "7", "8"]


def test_the_probe_rule_flags_what_it_should(tmp_path):
    snippet = "\n".join([
        "import inspect",
        "from inspect import signature",                      # 2 flagged
        "def run(server, clients, monitor, value, self=None):",
        "    inspect.signature(server.aggregate)",            # 4 flagged
        "    hasattr(server, 'get_state')",                   # 5 flagged
        "    hasattr(self.server, 'get_state')",              # 6 flagged
        "    getattr(type(clients[0]), 'step_many', None)",   # 7 flagged
        "    [c for c in clients if hasattr(c, 'get_state')]",  # 8 flagged
        "    hasattr(monitor, 'due')",                        # 9 flagged
        "    hasattr(value, '__array__')",                    # 10 data conversion: fine
        "    getattr(server, 'theta')",                       # 11 a plain read: fine
        "    inspect.isclass(value)",                         # 12 fine
        "    import inspect as ins",                          # 13 fine (an import)
        "    ins.signature(server.aggregate)",                # 14 flagged (an alias)
        "    hasattr(party, 'export_state')",                 # 15 flagged
        "    [hasattr(p, 'x') for p in parties]",             # 16 not seen: the rule reads names, not types
        "    getattr(parties[0], 'step_many', None)",         # 17 flagged
    ])
    package = tmp_path / "src" / "fedmm"
    for name in ("runtime/probe.py", "federation/probe.py", "algorithms/probe.py"):
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(snippet)
    for name in ("runtime/probe.py", "federation/probe.py"):
        lines = [g.split(":")[1] for g in capability_probes(package / name, package)]
        assert lines == ["2", "4", "5", "6", "7", "8", "9", "14", "15", "17"], (name, lines)
    assert capability_probes(package / "algorithms/probe.py", package) == []


def test_the_algorithm_import_rule_flags_what_it_should(tmp_path):
    snippet = "\n".join([
        "from fedmm.algorithms import FedMM",                  # 1 flagged
        "from fedmm.algorithms.ot import OTBroadcast",         # 2 flagged
        "import fedmm.algorithms.nonsmooth",                   # 3 flagged
        "from fedmm import algorithms",                        # 4 flagged
        "from fedmm.protocols import RemoteAlgorithm",         # 5 fine
        "from fedmm.federation.local import CLIENT_ERROR_POLICIES",  # 6 fine
        "def f():",
        "    from fedmm.algorithms import check_seed",         # 8 flagged (function level too)",
        "from fedmm.algorithmsx import y",                     # 9 another name: fine
    ])
    package = tmp_path / "src" / "fedmm"
    for name in ("runtime/probe.py", "experiments/probe.py"):
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(snippet)
    assert [g.split(":")[1] for g in algorithm_imports(package / "runtime/probe.py", package)] == [
        "1", "2", "3", "4", "8"]
    assert algorithm_imports(package / "experiments/probe.py", package) == []


KERNELS = PACKAGE.parents[1] / "src" / "kernels"
EXTENSIONS = PACKAGE.parents[1] / "src" / "fedmm_core"


def test_each_kernel_family_has_a_header_and_a_pxd_behind_the_umbrellas():
    umbrella = (KERNELS / "fedmm_kernels.h").read_text(encoding="utf-8")
    headers = re.findall(r'^#include "(fedmm_\w+)\.h"$', umbrella, flags=re.MULTILINE)
    assert len(headers) >= 10
    assert sorted(headers) == sorted(p.stem for p in KERNELS.glob("fedmm_*.h") if p.stem != "fedmm_kernels")
    pxd = (PACKAGE / "fedmm_kernels.pxd").read_text(encoding="utf-8")
    assert sorted(re.findall(r"^from fedmm\.(fedmm_\w+) cimport \*$", pxd, flags=re.MULTILINE)) == sorted(headers)
    for family in headers:
        text = (PACKAGE / f"{family}.pxd").read_text(encoding="utf-8")
        assert f'cdef extern from "{family}.h" nogil:' in text, family


@pytest.mark.parametrize("path", sorted(EXTENSIONS.glob("*.pyx")), ids=lambda p: p.name)
def test_extension_modules_map_statuses_through_status_pxi(path):
    text = path.read_text(encoding="utf-8")
    assert 'include "status.pxi"' in text
    own = [f"{path.name}:{number}: {line.strip()}" for number, line in enumerate(text.splitlines(), 1)
           if "raise" in line and "fedmm_strerror" in line]
    assert not own, "map the status with check_status (status.pxi):\n" + "\n".join(own)


def test_the_party_rule_flags_what_it_should(tmp_path):
    snippet = "\n".join([
        "from fedmm.federation.state import RoundConfig",         # 1 fine
        "from fedmm.algorithms import federated",             # 2 flagged
        "import fedmm.runtime.ray",                           # 3 flagged
        "def run(config, server, *clients, state=None):",     # 4 flagged twice (server, clients)
        "    config.space, state.V, server_state.S",          # 5 fine (values)
        "    clients[0].V",                                   # 6 flagged
        "    self.client.oracle",                             # 7 flagged
        "    f = lambda c: 0",                                # 8 flagged (parameter c)
        "    getattr(config, 'mode')",                        # 9 fine
    ])
    package = tmp_path / "src" / "fedmm"
    for name in ("federation/compiled.py", "federation/local.py"):
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(snippet)
    got = party_reads(package / "federation/compiled.py", package)
    assert [g.split(":")[1] for g in got] == ["2", "3", "4", "4", "6", "7", "8"], got
    assert "parameter 'clients'" in got[2] and "parameter 'server'" in got[3] and "clients[0].V" in got[4]
    assert party_reads(package / "federation/local.py", package) == []  # the runtimes drive the parties
