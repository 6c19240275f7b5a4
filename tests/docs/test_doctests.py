# SPDX-License-Identifier: BSD-3-Clause
"""The ``Examples`` sections of every module of the imported ``fedmm`` package, run as doctests.

The modules are found with :func:`pkgutil.walk_packages` over ``fedmm.__path__``, so the test runs the
docstrings of the package that is actually imported: the source tree under an editable install, the
copy in ``site-packages`` under a regular ``pip install .`` (where ``python/fedmm`` in the checkout is
not importable as compiled code and must not be collected by pytest itself).  ``python -m pytest
--doctest-modules`` therefore covers the package through this test.

Each example runs with a fresh copy of its module's globals, NumPy's default print options and the
flags ``ELLIPSIS | NORMALIZE_WHITESPACE``; warnings are errors as in the rest of the suite.
"""
from __future__ import annotations

import doctest
import importlib
import io
import pkgutil

import numpy as np
import pytest

import fedmm

#: Modules that import an optional extra at import time, and that extra's module.
OPTIONAL = {"fedmm.runtime.flower": "flwr"}
#: Modules that import without their extra (it is imported on first use) but whose examples run it.
EXAMPLES_NEED = {
    "fedmm.algorithms.ot": ("jax", "optax"),  # fedmm[ot]
    "fedmm.models.ot": ("jax", "optax"),
    "fedmm.models.numba_model": ("numba",),  # fedmm[numba]
}
#: Entry points whose docstring must carry an ``Examples`` section that runs.
MUST_HAVE_EXAMPLES = [
    "fedmm.History",
    "fedmm.algorithms.FedMM",
    "fedmm.algorithms.ParameterAveraging",
    "fedmm.algorithms.SASSMM",
    "fedmm.algorithms.FedMLS",
    "fedmm.models.GaussianMixture",
    "fedmm.models.DictionaryLearning",
    "fedmm.models.PoissonLatent",
    "fedmm.models.InverseToy",
    "fedmm.models.ProximalGradient",
    "fedmm.federation.LocalRuntime",
    "fedmm.compression.decode",
    "fedmm.compression.BlockQuantizer",
    "fedmm.compression.StochasticRounding",
    "fedmm.compression.Identity",
    "fedmm.kernels.lasso",
    "fedmm.kernels.project_psd",
    "fedmm.data.synthetic_dictionary",
    "fedmm.data.split_by_constrained_kmeans",
    "fedmm.data.split_homogeneous",
    "fedmm.data.image_patches",
]


def _module_names() -> list[str]:
    names = ["fedmm"]
    for info in pkgutil.walk_packages(fedmm.__path__, prefix="fedmm.", onerror=lambda name: None):
        if info.name != "fedmm.__main__":  # importing it runs the command line
            names.append(info.name)
    return sorted(set(names))


MODULES = _module_names()


def _import(name: str):
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    return importlib.import_module(name)


def _run(test: doctest.DocTest) -> tuple[int, int, str]:
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    with np.printoptions(**np.get_printoptions()):
        np.set_printoptions(legacy=False)
        runner.run(test, out=out.write, clear_globs=True)
    result = runner.summarize(verbose=False)
    return result.failed, result.attempted, out.getvalue()


def test_walk_finds_the_package():
    """The walk sees the compiled and the pure-Python parts of the imported package."""
    assert {"fedmm.algorithms.federated", "fedmm.models.gmm", "fedmm.compression", "fedmm._quantize"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_doctests(name):
    module = _import(name)
    for extra in EXAMPLES_NEED.get(name, ()):
        pytest.importorskip(extra, reason=f"the examples of {name} need the optional dependency {extra}")
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = [t for t in finder.find(module, name) if t.examples]
    failures = []
    for test in sorted(tests, key=lambda t: t.name):
        failed, _, report = _run(test)
        if failed:
            failures.append(report)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("qualname", MUST_HAVE_EXAMPLES)
def test_entry_point_has_examples(qualname):
    """The main public entry points show how they are called, in an example that runs."""
    module_name, _, attr = qualname.rpartition(".")
    obj = getattr(importlib.import_module(module_name), attr)
    tests = doctest.DocTestFinder(recurse=False).find(obj, qualname)
    assert tests and tests[0].examples, f"{qualname} has no Examples section with doctest lines"
    failed, attempted, report = _run(tests[0])
    assert attempted > 0 and failed == 0, report
