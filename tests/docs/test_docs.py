# SPDX-License-Identifier: BSD-3-Clause
"""The documentation site: every public name is in the API reference, and the site builds without a warning.

1. ``docs/api/*.rst`` list names in ``.. autosummary::`` blocks, each under the ``.. currentmodule::``
   it belongs to.  Every name in the ``__all__`` of every public module of the imported package (no
   underscore in its dotted path) must be documented: listed under its own module, or the same object
   listed under another module (a package documents what it re-exports from its submodules once).  A
   public module added later, or a name added to an ``__all__``, fails here until the API pages list it.
   Every listed name must exist in its module's ``__all__`` (no stale entries).
2. ``python -m sphinx -W`` builds the HTML site (API stubs, the markdown pages, the user guide and the
   executed gallery) into a temporary directory; any warning fails the build.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedmm

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Public modules that import an optional extra at import time, and that extra's module.
OPTIONAL = {"fedmm.runtime.flower": "flwr"}

pytestmark = pytest.mark.skipif(not (DOCS / "conf.py").is_file(), reason="not in a source checkout")


def public_modules() -> list[str]:
    names = ["fedmm"]
    for info in pkgutil.walk_packages(fedmm.__path__, prefix="fedmm.", onerror=lambda name: None):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def documented_entries() -> list[tuple[str, str, str]]:
    """``(page, module, name)`` of every autosummary entry of the API pages."""
    entries = []
    for page in sorted((DOCS / "api").glob("*.rst")):
        module = None
        in_autosummary = False
        for line in page.read_text(encoding="utf-8").splitlines():
            m = re.match(r"\.\. currentmodule::\s*(\S+)", line)
            if m:
                module, in_autosummary = m.group(1), False
                continue
            if line.startswith(".. autosummary::"):
                in_autosummary = True
                continue
            if in_autosummary:
                if not line.strip() or line.lstrip().startswith(":"):
                    continue
                if not line.startswith("   "):
                    in_autosummary = False
                    continue
                entries.append((page.name, module, line.strip()))
    return entries


def _import(name):
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    return importlib.import_module(name)


def test_api_pages_are_parsed():
    entries = documented_entries()
    assert ("fedmm.algorithms.rst", "fedmm.algorithms", "FedMM") in entries
    assert all(module is not None for _, module, _ in entries)


@pytest.mark.parametrize("name", public_modules())
def test_every_public_name_is_documented(name):
    module = _import(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"public module {name} has no __all__ (give it one, or make it private)"
    documented_ids = set()
    listed_here = set()
    for _, mod, entry in documented_entries():
        if mod == name:
            listed_here.add(entry)
        if mod in OPTIONAL:
            try:
                importlib.import_module(OPTIONAL[mod])
            except ImportError:
                continue
        obj = getattr(importlib.import_module(mod), entry, None)
        if obj is not None:
            documented_ids.add(id(obj))
    missing = [n for n in exported if n not in listed_here and id(getattr(module, n)) not in documented_ids]
    assert not missing, (f"{name}.__all__ names missing from the API reference (add them to an autosummary "
                         f"block under '.. currentmodule:: {name}' in docs/api/): {missing}")


def test_no_stale_api_entries():
    stale = []
    for page, mod, entry in documented_entries():
        module = _import(mod)
        if entry not in getattr(module, "__all__", ()):
            stale.append(f"{page}: {mod}.{entry}")
    assert not stale, f"API pages list names that are not in their module's __all__: {stale}"


@pytest.mark.slow
def test_sphinx_build_has_no_warnings(tmp_path):
    pytest.importorskip("sphinx", reason="the docs dependencies are in the 'test' extra")
    for extension in ("numpydoc", "sphinx_gallery", "myst_parser", "sphinx-mathjax-offline"):
        pytest.importorskip(extension)
    pytest.importorskip("flwr")  # the API reference documents fedmm.runtime.flower
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONWARNINGS="ignore::DeprecationWarning")
    # -E: read every source again (no stale environment); -W: warnings are errors; -n: nitpicky off.
    cmd = [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"sphinx-build failed (exit {proc.returncode}):\n{proc.stderr[-20000:]}"
    html = tmp_path / "html"
    assert (html / "api" / "generated" / "fedmm.algorithms.FedMM.html").is_file()
    # Formulas render offline: the pages load the bundled MathJax, never a script from the network.
    page = (html / "guide" / "aggregation.html").read_text(encoding="utf-8")
    scripts = re.findall(r'<script[^>]*src="([^"]*)"', page)
    assert any(s.endswith("_static/mathjax/tex-chtml.js") for s in scripts), scripts
    assert not [s for s in scripts if "//" in s], f"pages load scripts from the network: {scripts}"
    assert (html / "_static" / "mathjax" / "tex-chtml.js").is_file()
    # The class pages name public bases only (docs/conf.py: public_bases), e.g. not the estimators' mixin.
    private_bases = []
    for page in sorted((html / "api" / "generated").glob("*.html")):
        for bases in re.findall(r"Bases: (.*?)</p>", page.read_text(encoding="utf-8"), flags=re.DOTALL):
            names = re.sub(r"<[^>]*>", "", bases).split(",")
            private_bases += [f"{page.name}: {n.strip()}" for n in names if n.strip().split(".")[-1].startswith("_")]
    assert not private_bases, private_bases
    page = (html / "api" / "generated" / "fedmm.estimators.FederatedGaussianMixture.html").read_text(encoding="utf-8")
    assert "Bases: " in page and "DensityMixin" in page
    # Code blocks wrap long lines instead of hiding them (docs/_static/fedmm.css).
    assert "white-space: pre-wrap" in (html / "_static" / "fedmm.css").read_text(encoding="utf-8")
    assert "fedmm.css" in (html / "index.html").read_text(encoding="utf-8")
    gallery = sorted((html / "auto_examples").glob("plot_*.html"))
    assert gallery, "the gallery produced no pages"
    # every gallery example ran and drew its figure
    for page in gallery:
        assert "sphx_glr_" in page.read_text(encoding="utf-8") and list(
            (html / "_images").glob(f"sphx_glr_{page.stem}_*.png")), f"{page.name} has no executed figure"


#: References to documents users do not have: the project's design notes, its issue tracker, shared notes.
INTERNAL_REFERENCE = re.compile(r"DESIGN(\.md|\s*§)|shared/|\b[Ii]ssue\s*#?\d+")


def test_no_internal_references_in_the_package():
    """Docstrings, comments and messages of the imported package cite papers and docs pages, not internal notes."""
    found = []
    for directory in fedmm.__path__:
        for path in sorted(Path(directory).rglob("*")):
            if path.suffix in {".py", ".pyx", ".pxd", ".h"} and path.is_file():
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                    if INTERNAL_REFERENCE.search(line):
                        found.append(f"{path.name}:{number}: {line.strip()}")
    for page in sorted(DOCS.rglob("*.md")) + sorted((DOCS / "guide").glob("*.rst")):
        if "_build" in page.parts:
            continue
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if INTERNAL_REFERENCE.search(line):
                found.append(f"{page.name}:{number}: {line.strip()}")
    assert not found, "internal references (cite the paper section or the docs page instead):\n" + "\n".join(found)
